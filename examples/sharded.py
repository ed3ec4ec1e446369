"""A sharded update: a field split by rows over every device, relaxed towards a target.

Each device holds a slab of rows of ``u`` and of ``f``; the update is
element-wise, so with ``u`` donated every device writes its slab in place.
Check it on a laptop with four simulated CPU devices:

    fieldmem check examples/sharded.py --devices 4 --run

Every figure is per device (a quarter of the 2 MiB field on each of the
four), and ``--run`` confirms the alias on every shard.
"""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

import fieldmem

ROWS, COLS = 1024, 512  # 2 MiB of float32; 1024 rows split evenly over 1, 2, 4 or 8 devices


def relax(u, f):
    return u + 0.5 * (f - u)


def sharded_state():
    mesh = jax.make_mesh((len(jax.devices()),), ("x",))
    rows = NamedSharding(mesh, P("x"))
    u = jax.device_put(jnp.zeros((ROWS, COLS), jnp.float32), rows)
    f = jax.device_put(jnp.ones((ROWS, COLS), jnp.float32), rows)
    return (u, f)


fieldmem.case(relax, args=sharded_state, name="sharded:relax", donate="u", expect="in-place")
