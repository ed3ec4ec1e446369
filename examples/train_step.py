"""A train step as libraries write it: a flax linen transformer block and an optax AdamW update.

``params, opt_state, loss = train_step(params, opt_state, x, y)``: forward and
backward of one pre-norm transformer block (self-attention and an MLP, each
with a residual), then AdamW, the parameters and the optimizer state donated.
Where does its memory go at the peak? The HTML report draws it as a flame
graph, by the lines of this file and the flax and optax frames under them:

    fieldmem check examples/train_step.py --html report.html

The arrays are small (a few MiB), so it compiles in seconds.
"""

from functools import partial

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn

import fieldmem

BATCH, SEQ, D_MODEL, HEADS, D_MLP = 8, 64, 128, 4, 512

OPTIMIZER = optax.adamw(1e-3, weight_decay=0.1)


class Block(nn.Module):
    """A pre-norm transformer block: attention, then an MLP, each added back to its input."""

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=HEADS)(h)  # self-attention: h attends to h
        h = nn.LayerNorm()(x)
        h = nn.gelu(nn.Dense(D_MLP)(h))
        return x + nn.Dense(D_MODEL)(h)


MODEL = Block()


def loss_fn(params, x, y):
    prediction = MODEL.apply(params, x)
    return jnp.mean((prediction - y) ** 2)


@partial(jax.jit, donate_argnums=(0, 1))
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, loss


def step_args():
    key, data = jax.random.split(jax.random.key(0))
    x = jax.random.normal(data, (BATCH, SEQ, D_MODEL), jnp.float32)
    params = MODEL.init(key, x)
    return (params, OPTIMIZER.init(params), x, jnp.zeros_like(x))


fieldmem.case(train_step, args=step_args, name="train_step:train_step")
