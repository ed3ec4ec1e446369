"""Cases registered with ``@fieldmem.case(...)`` in a package module."""

import jax
import jax.numpy as jnp

import fieldmem

N = 32


def _args():
    return (jnp.zeros((N, N), jnp.float32), jnp.ones((N,), jnp.float32))


@fieldmem.case(args=_args, name="userpkg:set_row", donate="u", expect="in-place")
def set_row(u, row):
    return u.at[2].set(row)


@fieldmem.case(args=_args, name="userpkg:jit_row")
@jax.jit
def jit_row(u, row):
    return u.at[3].set(row)


def helper(u):
    return u
