"""The seed discussion's ``forward``: create a field, then update it step by step.

    @jit
    def forward(x):
        field = create_field(x)
        field = update1(field)
        field = update2(field)
        return field

Is this chain in place, step by step and as one jitted function? Check it as
a chain (steps separated by commas, no shell quoting needed):

    fieldmem check examples/forward.py:create_field,update1,update2

or check everything this file registers (the chain and ``forward`` itself):

    fieldmem check examples/forward.py

``create_field`` reuses ``x`` for ``u`` and allocates only ``v`` (the state
grows); ``update1`` and ``update2`` then run in the buffers they are given.
"""

import jax
import jax.numpy as jnp
from flax import struct

import fieldmem

N = 512


class Field(struct.PyTreeNode):
    u: jax.Array  # the field
    v: jax.Array  # its rate of change


def laplacian(u):
    return (
        jnp.roll(u, 1, axis=0) + jnp.roll(u, -1, axis=0)
        + jnp.roll(u, 1, axis=1) + jnp.roll(u, -1, axis=1)
        - 4.0 * u
    )


def create_field(x):
    return Field(u=x, v=jnp.zeros_like(x))


def update1(field):
    return field.replace(v=field.v + 0.1 * laplacian(field.u))


def update2(field):
    return field.replace(u=field.u.at[1:-1, 1:-1].add(0.5 * field.v[1:-1, 1:-1]))


@jax.jit
def forward(x):
    field = create_field(x)
    field = update1(field)
    field = update2(field)
    return field


def example_x():
    return (jnp.ones((N, N), jnp.float32),)


fieldmem.chain(create_field, update1, update2, args=example_x, name="forward:chain", expect="in-place")
fieldmem.case(forward, args=example_x, name="forward:jit", donate="x")
