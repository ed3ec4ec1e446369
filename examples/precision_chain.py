"""A chain that breaks in place at one step: a dtype change.

A simulation state is advanced in float32, then one step stores the field in
bfloat16 to save memory for the next stage. Every step is jitted on its own
and donates its input, yet the cast cannot run in place: a bfloat16 output
has half the bytes of the float32 input, so XLA cannot reuse the input's
buffer and allocates a new one, and the step after it starts from that.

    fieldmem check examples/precision_chain.py

names the step (``to_storage``), the leaf (``state.u``) and the line of the
cast, and shows the per-step curve and the fused chain's cost next to it.
"""

import jax
import jax.numpy as jnp
from flax import struct

import fieldmem

N = 512


class State(struct.PyTreeNode):
    u: jax.Array
    t: jax.Array  # the time, a scalar


def advance(state):
    return state.replace(u=state.u * 0.99 + 0.01, t=state.t + 1.0)


def to_storage(state):
    return state.replace(u=state.u.astype(jnp.bfloat16))


def squash(state):
    return state.replace(u=jnp.tanh(state.u))


def example_state():
    return (State(u=jnp.ones((N, N), jnp.float32), t=jnp.float32(0.0)),)


fieldmem.chain(advance, to_storage, squash, args=example_state, name="precision:chain")
