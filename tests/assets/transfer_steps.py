"""Steps whose arguments are not where their program takes them, for tests/findings/test_transfers.py (issue 28).

``sharded_update`` is a ``jax.jit`` with ``in_shardings`` over every device, given arrays made on one device
(``jnp.ones``: uncommitted), as a user who forgot to place them gives them: jax moves each to the program's
sharding before every call and donates the moved copy (run it with ``--devices 4``). ``placed_update`` is the
same jit given its arguments where it takes them; ``pmap_caller`` a plain function calling a pmapped step,
given arrays made on one device. ``numpy_step`` takes its batch as a NumPy array, copied
onto the device on every call; ``numpy_chain`` is three such steps. ``offload_step`` keeps its optimizer
state in ``pinned_host`` memory (host offloading) and computes on the device.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import fieldmem

N = 64  # a 64x64 float32 array: 16 KiB


def _rows() -> NamedSharding:
    return NamedSharding(jax.make_mesh((len(jax.devices()),), ("x",)), P("x"))


def _update(w, g):
    return w - 0.1 * g


def sharded_update():
    return jax.jit(_update, in_shardings=(_rows(), _rows()), out_shardings=_rows(), donate_argnums=0)


def _single():
    return jnp.ones((N, N), jnp.float32), jnp.ones((N, N), jnp.float32)  # uncommitted, on device 0


def _placed():
    return tuple(jax.device_put(a, _rows()) for a in _single())


def pmap_caller(params, g):
    """A plain function calling a pmapped step: its program takes the state split over every device."""
    return {"w": jax.pmap(_update)(params["w"], g)}


def _per_device():
    n = len(jax.devices())
    return {"w": jnp.ones((n, 1024), jnp.float32)}, jnp.ones((n, 1024), jnp.float32)  # on device 0


def numpy_step(w, batch):
    return w + batch.mean(axis=0)


def _batch():
    return np.ones((N // 2, N), np.float32)  # 8 KiB, on the host


def _numpy_args():
    return jnp.zeros((N, N), jnp.float32), _batch()


def offload_step(opt, g):
    on_device = jax.device_put(opt, jax.memory.Space.Device)
    return jax.device_put(on_device * 0.9 + g, jax.memory.Space.Host)


def _offloaded():
    host = NamedSharding(jax.make_mesh((1,), ("x",)), P(), memory_kind="pinned_host")
    return jax.device_put(jnp.ones((N, N), jnp.float32), host), jnp.ones((N, N), jnp.float32)


fieldmem.case(sharded_update(), args=_single, name="transfers:sharded")
fieldmem.case(sharded_update(), args=_placed, name="transfers:placed")
fieldmem.case(pmap_caller, args=_per_device, name="transfers:pmap_caller", donate="params")
fieldmem.case(numpy_step, args=_numpy_args, name="transfers:numpy", donate="w")
fieldmem.case(offload_step, args=_offloaded, name="transfers:offload", donate="opt")
fieldmem.chain(
    numpy_step,
    numpy_step,
    numpy_step,
    args=lambda: (jnp.zeros((N, N), jnp.float32),),
    step_args={1: lambda: (_batch(),), 2: lambda: (_batch(),), 3: lambda: (_batch(),)},
    name="transfers:numpy_chain",
)
