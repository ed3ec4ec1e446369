"""A compile-heavy user module: one transformer training step, for fieldmem and the naive baseline alike.

``write_module(path, salt=, layers=)`` writes the Python file a user could
have written: a pre-norm transformer of ``layers`` blocks (attention with
``HEADS`` heads, a GELU MLP) on f32[BATCH, SEQ, WIDTH] activations, its
loss, ``jax.value_and_grad`` and an optax AdamW update, in one ``train_step``
that takes the parameters and optimizer state (donated) and a batch, and
returns the new ones and the loss. The layers are a Python loop, as most
model code is, so XLA sees (and compiles) every block; with ``scan=True``
they are one ``lax.scan`` over stacked weights (XLA compiles one block).

The module exposes ``CASES`` as ``synth.py``'s modules do, and registers the
case with ``fieldmem.case`` when fieldmem is importable, so
``fieldmem check module.py`` and ``naive.py module.py`` compile the same two
variants.

``salt`` sets the learning rate and the attention scale's constants, so
modules with different salts are the same program up to those constants:
no compilation cache can serve one from another.
"""

from __future__ import annotations

from pathlib import Path

from synth import salt_value

# 12 blocks: at 8 the default compile of a variant took 2.59 s on this 2-core machine in one run and 1.91 s
# in another (the machine's speed varies): under the 2 s that makes the module compile-heavy (bench_fast.py)
LAYERS = 12

TEMPLATE = '''\
"""A transformer training step: {layers} blocks, AdamW (fieldmem benchmark, salt {salt})."""
import jax
import jax.numpy as jnp
import optax

BATCH, SEQ, WIDTH, HEADS, LAYERS = 8, 128, 256, 4, {layers}
SCANNED = {scan}  # the blocks as one lax.scan over stacked weights, not a Python loop
SALT = {salt_value!r}
LEARNING_RATE = 1e-3 * (1.0 + SALT)
optimizer = optax.adamw(LEARNING_RATE, weight_decay=1e-4)


def init_shapes():
    def block(*stack):
        return {{
            "ln1": jax.ShapeDtypeStruct((*stack, WIDTH), jnp.float32),
            "qkv": jax.ShapeDtypeStruct((*stack, WIDTH, 3 * WIDTH), jnp.float32),
            "out": jax.ShapeDtypeStruct((*stack, WIDTH, WIDTH), jnp.float32),
            "ln2": jax.ShapeDtypeStruct((*stack, WIDTH), jnp.float32),
            "up": jax.ShapeDtypeStruct((*stack, WIDTH, 4 * WIDTH), jnp.float32),
            "down": jax.ShapeDtypeStruct((*stack, 4 * WIDTH, WIDTH), jnp.float32),
        }}

    blocks = block(LAYERS) if SCANNED else [block() for _ in range(LAYERS)]
    return {{"blocks": blocks, "head": jax.ShapeDtypeStruct((WIDTH, WIDTH), jnp.float32)}}


def make_args():
    params = init_shapes()
    state = (params, jax.eval_shape(optimizer.init, params))
    batch = (
        jax.ShapeDtypeStruct((BATCH, SEQ, WIDTH), jnp.float32),
        jax.ShapeDtypeStruct((BATCH, SEQ, WIDTH), jnp.float32),
    )
    return (state, batch)


def layer_norm(x, scale):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale


def attention(x, qkv, out):
    q, k, v = jnp.split(x @ qkv, 3, axis=-1)
    heads = lambda t: t.reshape(BATCH, SEQ, HEADS, WIDTH // HEADS).transpose(0, 2, 1, 3)
    q, k, v = heads(q), heads(k), heads(v)
    scores = q @ k.transpose(0, 1, 3, 2) * ((WIDTH // HEADS) ** -0.5 * (1.0 + SALT))
    mask = jnp.tril(jnp.ones((SEQ, SEQ), bool))
    scores = jnp.where(mask, scores, -1e9)
    mixed = jax.nn.softmax(scores, axis=-1) @ v
    return mixed.transpose(0, 2, 1, 3).reshape(BATCH, SEQ, WIDTH) @ out


def apply_block(x, block):
    x = x + attention(layer_norm(x, block["ln1"]), block["qkv"], block["out"])
    return x + jax.nn.gelu(layer_norm(x, block["ln2"]) @ block["up"]) @ block["down"]


def forward(params, x):
    if SCANNED:
        x, _ = jax.lax.scan(lambda x, block: (apply_block(x, block), None), x, params["blocks"])
    else:
        for block in params["blocks"]:
            x = apply_block(x, block)
    return x @ params["head"]


def loss_fn(params, batch):
    x, y = batch
    return jnp.mean((forward(params, x) - y) ** 2)


def train_step(state, batch):
    params, opt_state = state
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), loss


CASES = [(train_step, make_args, (0,))]

try:
    import fieldmem
except ImportError:  # the naive baseline runs without fieldmem
    fieldmem = None
if fieldmem is not None:
    fieldmem.case(train_step, args=make_args, donate=(0,))
'''


def write_module(path: Path, *, salt: int = 0, layers: int = LAYERS, scan: bool = False) -> Path:
    """Write the module and return its path (its name must be importable: letters, digits, _)."""
    if not 0 <= salt < 2**20:
        raise ValueError(f"salt {salt} must be in [0, 2**20)")
    path.write_text(TEMPLATE.format(layers=layers, salt=salt, salt_value=salt_value(salt), scan=scan))
    return path
