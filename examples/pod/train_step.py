"""A 7B-parameter transformer's train step on a 256-chip TPU v5e pod, checked from a laptop.

Forward and backward of a decoder shaped like a 7B model (32 layers, d_model
4096, MLP 11008, vocabulary 32000: 6.74e9 parameters), then an AdamW update
(optax), the parameters and the optimizer state donated. The layers are one
``lax.scan`` over stacked weights, rematerialised, as real trainers write them.

Every argument is a ``jax.ShapeDtypeStruct`` sharded over a ``data x model``
mesh: nothing is allocated (the parameters and the two Adam moments are 81 GB
in float32). Check the program the pod will run, without the pod:

    fieldmem check examples/pod/train_step.py --backend tpu:v5e:16x16

The mesh is made of the devices jax has (``jax.devices()``): 256 of them,
16 x 16, is the pod (fieldmem carries the mesh's shape and partition specs
onto the topology's 256 chips), and every figure is per chip. The batch is one
2048-token sequence per chip. Activations are sharded by batch over both axes,
and the parameters and moments over both axes (fully sharded), so a chip holds
1/256 of each.

This example lives in its own folder so the bundled-example tests (which run
every ``examples/*.py`` on this machine's CPU, allocating the arrays) leave it
alone: it is meant for a deviceless pod backend. ``benchmarks/bench_backends.py``
measures its time and memory.
"""

import math

import jax
import jax.numpy as jnp
import optax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import fieldmem

LAYERS, D_MODEL, D_MLP, VOCAB, HEADS = 32, 4096, 11008, 32000, 32
SEQ = 2048
SEQUENCES_PER_DEVICE = 1

OPTIMIZER = optax.adamw(3e-4, weight_decay=0.1)


def _constrain(x, spec):
    """Shard an activation by ``spec`` over the mesh the arguments were sharded over.

    The mesh is read from the argument itself (``jax.typeof``), so the step
    works unchanged on the CPU devices, on a topology's chips, or on one device.
    """
    mesh = jax.typeof(x).sharding.mesh
    if not mesh.axis_names:  # one device: nothing to shard
        return x
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))


BATCH = P(("data", "model"))  # one sequence per device


def _rms_norm(x, scale):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale


def _layer(x, w):
    """One decoder layer (attention, then a SwiGLU MLP), bf16 matmuls on float32 weights."""
    x = _constrain(x, BATCH)
    batch, seq, _ = x.shape
    bf16 = jnp.bfloat16
    h = _rms_norm(x, w["attn_norm"]).astype(bf16)
    q, k, v = jnp.split(h @ w["wqkv"].astype(bf16), 3, axis=-1)
    heads = (batch, seq, HEADS, D_MODEL // HEADS)
    attended = jax.nn.dot_product_attention(q.reshape(heads), k.reshape(heads), v.reshape(heads), is_causal=True)
    x = x + (attended.reshape(batch, seq, D_MODEL) @ w["wo"].astype(bf16)).astype(jnp.float32)
    h = _rms_norm(x, w["mlp_norm"]).astype(bf16)
    gated = jax.nn.silu(h @ w["w_gate"].astype(bf16)) * (h @ w["w_up"].astype(bf16))
    return x + (gated @ w["w_down"].astype(bf16)).astype(jnp.float32), None


def loss(params, tokens):
    x = _constrain(params["embed"][tokens], BATCH)
    x, _ = jax.lax.scan(jax.checkpoint(_layer), x, params["layers"])
    logits = _rms_norm(x, params["final_norm"]).astype(jnp.bfloat16) @ params["unembed"].astype(jnp.bfloat16)
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32))
    return -jnp.mean(jnp.take_along_axis(log_probs[:, :-1], tokens[:, 1:, None], axis=-1))


def train_step(params, opt_state, tokens):
    value, grads = jax.value_and_grad(loss)(params, tokens)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value


def _mesh():
    """``data x model`` over every device jax has: 16 x 16 for 256, else ``n/16 x 16``, else ``n x 1``."""
    n = len(jax.devices())
    model = 16 if n % 16 == 0 else 1
    return jax.make_mesh((n // model, model), ("data", "model"), axis_types=(AxisType.Auto, AxisType.Auto))


def train_step_args():
    mesh = _mesh()

    def array(shape, spec, dtype=jnp.float32):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))

    fsdp_in, fsdp_out = P(None, "data", "model"), P(None, "model", "data")  # stacked layers, fully sharded
    params = {
        "embed": array((VOCAB, D_MODEL), P("model", "data")),
        "layers": {
            "attn_norm": array((LAYERS, D_MODEL), P()),
            "wqkv": array((LAYERS, D_MODEL, 3 * D_MODEL), fsdp_in),
            "wo": array((LAYERS, D_MODEL, D_MODEL), fsdp_out),
            "mlp_norm": array((LAYERS, D_MODEL), P()),
            "w_gate": array((LAYERS, D_MODEL, D_MLP), fsdp_in),
            "w_up": array((LAYERS, D_MODEL, D_MLP), fsdp_in),
            "w_down": array((LAYERS, D_MLP, D_MODEL), fsdp_out),
        },
        "final_norm": array((D_MODEL,), P()),
        "unembed": array((D_MODEL, VOCAB), P("data", "model")),
    }
    # AdamW's state: a step count and two moments sharded like the parameters
    moments = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype, sharding=p.sharding), params)
    shape = jax.eval_shape(OPTIMIZER.init, params)
    adam = shape[0]._replace(count=array((), P(), jnp.int32), mu=moments, nu=moments)
    opt_state = (adam, *shape[1:])
    assert jax.tree.structure(opt_state) == jax.tree.structure(shape)
    tokens = array((mesh.size * SEQUENCES_PER_DEVICE, SEQ), BATCH, jnp.int32)
    return params, opt_state, tokens


def parameter_count():
    """6,738,415,616: the parameters of :func:`train_step_args`."""
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(train_step_args()[0]))


fieldmem.case(
    train_step, args=train_step_args, name="pod:train_step", donate="params,opt_state"
)
