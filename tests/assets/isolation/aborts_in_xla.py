"""A target whose deviceless TPU compile aborts inside XLA (SIGABRT on a 4 EiB shape): the worker dies
while XLA's dump folder is open (tests/parent/test_isolation.py)."""

import jax
import jax.numpy as jnp

import fieldmem


def huge():
    return (jax.ShapeDtypeStruct((2**62,), jnp.uint8),)


def bump(u):
    return u + 1


fieldmem.case(bump, args=huge)
