"""An ordinary in-place update, checked next to the faulty targets."""

import jax.numpy as jnp

import fieldmem


def update(u):
    return u.at[0].set(1.0)


fieldmem.case(update, args=lambda: (jnp.zeros((16,), jnp.float32),), name="good")
