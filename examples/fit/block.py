"""A transformer block's training step whose size is three knobs: what fits a TPU v5e, and what makes it fit?

``make_args(batch, seq, remat)`` is the args factory ``fieldmem fit`` varies: the batch size (sequences per
step, over every device), the sequence length and the block's rematerialisation policy, by name:

- ``"none"``: the backward pass reads every activation the forward pass kept (fastest, most memory);
- ``"dots"``: the block keeps only the outputs of its products with the weights and computes the rest again
  in the backward pass (``jax.checkpoint_policies.dots_with_no_batch_dims_saveable``: the attention scores,
  a product with a batch dimension, are recomputed);
- ``"full"``: the block keeps nothing but its input (``jax.checkpoint_policies.nothing_saveable``; "full"
  remat saves nothing, not everything: maxtext#3924).

The model is token embeddings, one pre-norm block of width 1024 (16 heads, an MLP of 4096, causal
self-attention) and tied output logits over 32,000 tokens, trained by AdamW; the parameters and the optimizer
state are donated. The batch is split over every device jax has (data parallel: ``tpu:v5e:2x2`` has 4, each
with a quarter of it), the parameters replicated. Nothing is allocated: the factory returns
``jax.ShapeDtypeStruct``s.

    fieldmem fit examples/fit/block.py:train_step --args examples/fit/block.py:make_args \\
        --vary batch=8..256:8 --vary remat=none,dots,full --backend tpu:v5e

docs/fit.md shows what it finds for ``tpu:v5e``, ``tpu:v5e:2x2`` and ``gpu:h100``;
``hardware/fit_chip.py`` runs the largest batch it reports, and the next one up, on a real chip.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn
from jax.sharding import NamedSharding, PartitionSpec

VOCAB, WIDTH, HEADS, MLP = 32_000, 1024, 16, 4096

#: the remat policies by the names make_args takes (None: no remat)
POLICIES = {
    "none": None,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "full": jax.checkpoint_policies.nothing_saveable,
}

OPTIMIZER = optax.adamw(3e-4, weight_decay=0.1)


class Block(nn.Module):
    """A pre-norm transformer block: causal self-attention, then an MLP, each added back to its input."""

    @nn.compact
    def __call__(self, x):
        seq = x.shape[1]
        h = nn.LayerNorm()(x)
        qkv = nn.DenseGeneral((3, HEADS, WIDTH // HEADS), name="qkv")(h)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(WIDTH // HEADS).astype(x.dtype)
        scores = jnp.where(jnp.tril(jnp.ones((seq, seq), bool)), scores, jnp.finfo(x.dtype).min)
        attended = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
        x = x + nn.DenseGeneral(WIDTH, axis=(-2, -1), name="out")(attended)
        h = nn.LayerNorm()(x)
        return x + nn.Dense(WIDTH)(nn.gelu(nn.Dense(MLP)(h)))


class Model(nn.Module):
    """Token embeddings, the block (rematerialised by ``remat``'s policy) and the tied output logits."""

    remat: str = "none"

    @nn.compact
    def __call__(self, tokens):
        embed = nn.Embed(VOCAB, WIDTH)
        policy = POLICIES[self.remat]
        block = Block if policy is None else nn.remat(Block, policy=policy)
        x = block(name="block")(embed(tokens))
        return embed.attend(nn.LayerNorm()(x))  # the logits: batch x seq x VOCAB


def loss_fn(params, tokens, remat):
    logits = Model(remat).apply(params, tokens[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()


@partial(jax.jit, donate_argnums=(0, 1), static_argnames=("remat",))
def train_step(params, opt_state, tokens, remat="none"):
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens, remat)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def make_args(batch=8, seq=1024, remat="none"):
    """The step's arguments for ``batch`` sequences of ``seq`` tokens under the remat policy ``remat``, as
    abstract arrays: ``((params, opt_state, tokens), {"remat": remat})``. The batch is split over every
    device (it must be a multiple of their number), the parameters and the optimizer state replicated."""
    if remat not in POLICIES:
        raise ValueError(f"remat={remat!r}: use one of {', '.join(POLICIES)}")
    devices = jax.devices()
    if batch % len(devices):
        raise ValueError(f"batch={batch} is split over {len(devices)} devices: give a multiple of {len(devices)}")
    mesh = jax.sharding.Mesh(devices, ("data",))
    replicated = NamedSharding(mesh, PartitionSpec())
    tokens = jax.ShapeDtypeStruct((batch, seq + 1), jnp.int32, sharding=NamedSharding(mesh, PartitionSpec("data")))
    params = jax.eval_shape(Model(remat).init, jax.random.key(0), jnp.zeros((1, seq), jnp.int32))
    opt_state = jax.eval_shape(OPTIMIZER.init, params)

    def place(tree):
        return jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=replicated), tree)

    return (place(params), place(opt_state), tokens), {"remat": remat}
