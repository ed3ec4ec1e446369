"""Cases whose factory or tracing ends the process, one that prints to stdout, and an ordinary one."""

import os

import jax.numpy as jnp

import fieldmem


def _code() -> int:
    return int(os.environ.get("FIELDMEM_TEST_CODE", "0"))


def update(u):
    return u + 1.0


def exits_at_trace(u):
    os._exit(_code())


def _exits_in_factory():
    os._exit(_code())


def prints(u):
    print("printed by the user's function at trace time", flush=True)
    return u * 2.0


def _array():
    return (jnp.ones((16,), jnp.float32),)


fieldmem.case(update, args=_array, name="ok")
fieldmem.case(exits_at_trace, args=_array, name="at_trace")
fieldmem.case(update, args=_exits_in_factory, name="in_factory")
fieldmem.case(prints, args=_array, name="prints")
