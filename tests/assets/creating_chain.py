"""A chain that starts by creating its state from a scalar, then updates it in place.

``init(scale)`` takes one float (4 bytes, under any ``--min-bytes``) and returns
the state ``(u, v)``, both the same broadcast (XLA writes one and copies it
into the other output); ``step`` then updates ``u`` and ``v`` in the buffers it
is given. ``fieldmem check creating_chain:init,step --expect in-place`` passes.
"""

import jax.numpy as jnp

import fieldmem

N = 64


def init(scale):
    z = jnp.full((N, N), scale, dtype=jnp.float32)
    return z, z


def step(u, v):
    return u.at[1:-1].add(1.0), v.at[0].set(0.0)


fieldmem.case(init, args=lambda: (1.0,))
