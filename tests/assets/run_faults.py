"""Targets whose run misbehaves, for the --run isolation tests (tests/findings/test_run.py).

Each fault happens in the worker process only: ``hangs`` sleeps in its args
factory past any test timeout, ``crashes`` aborts the process at run time
(from a host callback), and ``fine`` is an ordinary in-place update checked
next to them.
"""

import os
import time

import jax
import jax.numpy as jnp

import fieldmem


def fine(u):
    return u * 2.0


def hangs(u):
    return u + 1.0


def crashes(u):
    def abort(x):
        os.abort()
        return x

    return jax.pure_callback(abort, jax.ShapeDtypeStruct(u.shape, u.dtype), u) + 1.0


def _array():
    return (jnp.ones((64, 64), jnp.float32),)


def _sleep():
    time.sleep(600)
    return _array()


fieldmem.case(fine, args=_array, name="faults:fine")
fieldmem.case(hangs, args=_sleep, name="faults:hangs")
fieldmem.case(crashes, args=_array, name="faults:crashes")
