"""The update a CI job guards: ``state = step(state, f)`` must stay in place.

``examples/ci/pyproject.toml`` names it in ``[tool.fieldmem]``, so from this
folder a bare ``fieldmem check`` checks it, and

    fieldmem check --save-baseline fieldmem-baseline.json   # once, and to refresh
    fieldmem check                                           # in CI: exit 1 on a regression

keeps it from regressing. ``tests/gate/test_baseline.py`` runs that loop: it
rewrites ``step`` to also return the old ``state.u`` (a refactor that returns
a field it used to drop) and expects the gate to name ``state.u``, the grown
live peak and the line of the new copy.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

import fieldmem

N = 64  # 64x64 float32 = 16 KiB per field


class State(NamedTuple):
    u: jax.Array  # the field being updated
    v: jax.Array  # damped every step


def step(state, f):
    u = state.u.at[0].add(f)
    return State(u=u, v=state.v * 0.5)


def make_args():
    state = State(u=jnp.zeros((N, N), jnp.float32), v=jnp.ones((N, N), jnp.float32))
    return (state, jnp.float32(1.0))


fieldmem.case(step, args=make_args, name="ci:step")
