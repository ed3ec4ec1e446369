"""Steps whose size is a knob of their args factory, for ``fieldmem fit`` (tests/frontends/test_fit_compile.py).

``make_grid(n)`` is an n x n float32 grid; ``stencil`` updates it from its neighbours, and
``stencil_keeping_history`` is the same update after a change that also returns a second grid (one more
grid-sized buffer at once): its largest ``n`` that fits a budget is smaller.
"""

import jax
import jax.numpy as jnp


def stencil(u):
    return u + 0.5 * jnp.roll(u, 1, axis=0) + 0.25 * jnp.roll(u, 1, axis=1)


def stencil_keeping_history(u):
    return stencil(u), u + 1.0


def make_grid(n=64):
    return (jax.ShapeDtypeStruct((n, n), jnp.float32),)


def make_blocks(blocks=1):
    """A grid of ``blocks`` x 1024 float32 on a side: 4 MiB per block squared."""
    return make_grid(1024 * blocks)


def loop_update(x):
    """examples/upgrade/loop_update.py with its size a knob: in place up to jaxlib 0.7.1, a temporary the size
    of ``x`` from 0.7.2 (openxla/xla#45912)."""
    from jax import lax

    n = x.shape[0]
    intermediate = jnp.exp(x)
    total = lax.fori_loop(0, 8, lambda i, total: total + intermediate[i * (n // 8)], 0.0)
    return intermediate * total


def make_vector(n=65536):
    return (jax.ShapeDtypeStruct((n,), jnp.float32),)
