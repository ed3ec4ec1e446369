"""Args factories that keep what they made, for tests/driver/test_traced_arguments.py.

``params`` is a ``functools.cache``: traced, it would keep a tracer, and the next factory
that calls it would get that tracer back. fieldmem traces factories, sees the tracer
outlive its trace, and checks the rest in a fresh worker that runs them. Each making
says on stderr whether it was traced or run, so a test can count them.
"""

from __future__ import annotations

import functools
import sys

import jax
import jax.numpy as jnp

import fieldmem


def _made(what: str, value: object) -> None:
    how = "traced" if type(value).__name__.endswith("Tracer") else "run"
    print(f"kept_factories: {what} {how}", file=sys.stderr, flush=True)


def double(u: jax.Array) -> jax.Array:
    return u * 2


def double_args() -> tuple:
    u = jnp.ones((8, 8))
    _made("double_args", u)
    return (u,)


@functools.cache
def params() -> jax.Array:
    w = jnp.ones((16, 16))
    _made("params", w)
    return w


def apply(w: jax.Array, x: jax.Array) -> jax.Array:
    return w @ x


def apply_args() -> tuple:
    return params(), jnp.ones((16,))


def shift(w: jax.Array, x: jax.Array) -> jax.Array:
    return w + x


def shift_args() -> tuple:
    return params(), jnp.ones((16, 16))


fieldmem.case(double, args=double_args)
fieldmem.case(apply, args=apply_args)
fieldmem.case(shift, args=shift_args)
