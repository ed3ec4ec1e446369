"""Cases that raise what is not an Exception, in the caller's process (the Python API, the pytest plugin)."""

import sys

import jax.numpy as jnp

import fieldmem


class Abort(BaseException):
    pass


def update(u):
    return u + 1.0


def exits_at_trace(u):
    sys.exit(4)


def aborts_at_trace(u):
    raise Abort("stop here")


def _exits_in_factory():
    sys.exit(5)


def _array():
    return (jnp.ones((16,), jnp.float32),)


fieldmem.case(update, args=_array, name="ok")
fieldmem.case(exits_at_trace, args=_array, name="sys_exit_at_trace")
fieldmem.case(aborts_at_trace, args=_array, name="base_exception_at_trace")
fieldmem.case(update, args=_exits_in_factory, name="sys_exit_in_factory")
