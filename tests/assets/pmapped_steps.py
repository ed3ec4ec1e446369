"""Field updates under the pmap family and shard_map, for tests/driver/test_pmap.py and the CLI.

Each maps a field over every device: run with several (``--devices 4``, or
``XLA_FLAGS=--xla_force_host_platform_device_count=4``). The arguments are
placed where the program wants them (the mapped axis split over the devices),
as a loop's state is after its first step, so a donation reuses the caller's
own buffers. Arrays are tiny.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import fieldmem

COLS = 256


def _devices() -> int:
    return len(jax.devices())


def _split(x: jax.Array, axis: str = "i") -> jax.Array:
    """``x`` with its leading axis split over every device, as pmap (axis ``axis``) places it."""
    mesh = Mesh(np.array(jax.devices()), (axis,))
    return jax.device_put(x, NamedSharding(mesh, P(axis)))


# ---- jax.pmap ---------------------------------------------------------------------------------------


def _relax(u: jax.Array, f: jax.Array, omega: float) -> jax.Array:
    return u + omega * (f - u)


# the field donated, the relaxation rate static (broadcast to every device)
relax = jax.pmap(_relax, axis_name="i", donate_argnums=(0,), static_broadcasted_argnums=(2,))


def relax_args() -> tuple:
    n = _devices()
    return _split(jnp.zeros((n, COLS))), _split(jnp.ones((n, COLS))), 0.5


def _advect(state: dict, v: jax.Array) -> dict:
    return {"u": state["u"] + v, "t": state["t"] + 1.0}


# a pytree state and a velocity every device shares (in_axes None: not mapped)
advect = jax.pmap(_advect, axis_name="i", in_axes=(0, None), donate_argnums=0)


def advect_args() -> tuple:
    n = _devices()
    state = {"u": _split(jnp.zeros((n, COLS))), "t": _split(jnp.zeros((n,)))}
    return state, jnp.ones((COLS,))


# ---- flax.nnx.pmap ----------------------------------------------------------------------------------


class Field(nnx.Module):
    def __init__(self, n: int) -> None:
        self.u = nnx.Variable(_split(jnp.zeros((n, COLS))))


@functools.partial(nnx.pmap, axis_name="i", donate_argnums=(0,))
def nnx_relax(field: Field, f: jax.Array) -> jax.Array:
    field.u.value = field.u.value + 0.5 * (f - field.u.value)
    return jnp.sum(f)


def nnx_args() -> tuple:
    n = _devices()
    return Field(n), _split(jnp.ones((n, COLS)))


# ---- equinox.filter_pmap ----------------------------------------------------------------------------


def _eqx_relax(u: jax.Array, f: jax.Array) -> jax.Array:
    return u + 0.5 * (f - u)


eqx_relax = eqx.filter_pmap(_eqx_relax, donate="all")


def eqx_args() -> tuple:
    n = _devices()
    return _split(jnp.zeros((n, COLS))), _split(jnp.ones((n, COLS)))


# ---- jax.shard_map inside a jit ---------------------------------------------------------------------


def _shard_relax(u: jax.Array, f: jax.Array) -> jax.Array:
    return u + 0.5 * (f - u)


def _mesh() -> Mesh:
    return Mesh(np.array(jax.devices()), ("x",))


shard_relax = jax.jit(
    jax.shard_map(_shard_relax, mesh=_mesh(), in_specs=(P("x"), P("x")), out_specs=P("x")), donate_argnums=0
)


def shard_args() -> tuple:
    rows = NamedSharding(_mesh(), P("x"))
    n = _devices()
    return jax.device_put(jnp.zeros((2 * n, COLS)), rows), jax.device_put(jnp.ones((2 * n, COLS)), rows)


fieldmem.case(relax, args=relax_args, name="pmapped_steps:relax")
fieldmem.case(advect, args=advect_args, name="pmapped_steps:advect")
fieldmem.case(nnx_relax, args=nnx_args, name="pmapped_steps:nnx_relax")
fieldmem.case(eqx_relax, args=eqx_args, name="pmapped_steps:eqx_relax")
fieldmem.case(shard_relax, args=shard_args, name="pmapped_steps:shard_relax", expect="in-place")


# ---- what fieldmem still refuses --------------------------------------------------------------------

# shard_map around a jit, called outside any jit: the inner donation frees only shard_map's own copies
shard_around_jit = jax.shard_map(
    jax.jit(_shard_relax, donate_argnums=0), mesh=_mesh(), in_specs=(P("x"), P("x")), out_specs=P("x")
)
