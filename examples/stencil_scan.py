"""A ``lax.scan`` time-stepper of a 2-D diffusion stencil. With donation the
result reuses the caller's buffer, but the loop is not in place: each step reads
the old field while it computes the new one, so XLA copies the new carry out of
a temporary every iteration (a loop copy, ``new-value-via-temporary``).
``n_steps`` is a Python int, so fieldmem makes it static automatically.
"""

import jax
import jax.numpy as jnp
from jax import lax

import fieldmem


def laplacian(u):
    return (
        jnp.roll(u, 1, axis=0) + jnp.roll(u, -1, axis=0)
        + jnp.roll(u, 1, axis=1) + jnp.roll(u, -1, axis=1)
        - 4.0 * u
    )


def diffuse(u, n_steps, dt=0.1):
    def step(u, _):
        return u + dt * laplacian(u), None

    u, _ = lax.scan(step, u, None, length=n_steps)
    return u


def diffuse_args():
    return (jax.ShapeDtypeStruct((1024, 1024), jnp.float32), 40)


fieldmem.case(diffuse, args=diffuse_args, name="stencil_scan:diffuse")
