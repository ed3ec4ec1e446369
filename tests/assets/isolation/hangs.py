"""A case whose tracing never ends (the parent of its worker is killed in the test)."""

import time

import jax.numpy as jnp

import fieldmem


def hangs(u):
    print("hanging now", flush=True)
    time.sleep(600)
    return u


fieldmem.case(hangs, args=lambda: (jnp.ones((16,), jnp.float32),), name="hangs")
