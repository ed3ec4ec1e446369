"""An update of a field's interior: the answer differs by backend.

``u.at[1:-1].add(f[1:-1])`` adds a source to every row but the first and the
last (the boundary rows stay fixed). With ``u`` donated, every backend writes
in place. Without donation XLA must keep the caller's ``u`` intact, and how
it does that depends on the hardware:

    fieldmem check examples/interior.py --backend cpu,gpu:h100,tpu:v5e

shows XLA:CPU and an H100 copying ``u`` once, while a TPU v5e stages ``u`` and
``f`` through its on-chip memory (VMEM) as well, with a larger peak. The
figures are in docs/backends.md. The arguments are ``jax.ShapeDtypeStruct``s:
nothing is allocated.
"""

import jax
import jax.numpy as jnp

import fieldmem

N = 1024  # 1024 x 1024 float32: 4 MiB per field


def add_interior(u, f):
    return u.at[1:-1].add(f[1:-1])


def interior_args():
    field = jax.ShapeDtypeStruct((N, N), jnp.float32)
    return (field, field)


fieldmem.case(add_interior, args=interior_args, name="interior:add_interior", donate="u", expect="in-place")
