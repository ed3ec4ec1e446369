"""Cases whose example arguments or options are wrong, one per function.

``fieldmem check bad_cases:raising models:step`` checks one broken case next
to a good target; each must fail alone.
"""

import jax.numpy as jnp

import fieldmem

N = 32


def _update(u, row):
    return u.at[0].set(row)


def _factory_raises():
    raise RuntimeError("no data file here")


def _returns_array():
    return jnp.zeros((N, N), jnp.float32)


def _mismatch():
    return (jnp.zeros((N, N), jnp.float32), jnp.ones((N + 1,), jnp.float32))


def _good():
    return (jnp.zeros((N, N), jnp.float32), jnp.ones((N,), jnp.float32))


def raising(u, row):
    return _update(u, row)


def not_a_tuple(u, row):
    return _update(u, row)


def mismatch(u, row):
    return _update(u, row)


def donate_missing(u, row):
    return _update(u, row)


def static_array(u, row):
    return _update(u, row)


fieldmem.case(raising, args=_factory_raises)
fieldmem.case(not_a_tuple, args=_returns_array)
fieldmem.case(mismatch, args=_mismatch)
fieldmem.case(donate_missing, args=_good, donate="nosuch")
fieldmem.case(static_array, args=_good, static="row")
