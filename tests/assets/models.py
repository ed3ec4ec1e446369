"""A user's module: update functions, example-argument factories, and cases.

Loaded as a file (``tests/assets/models.py:step``) and, with tests/assets on
sys.path, as a module (``models:step``).
"""

import jax
import jax.numpy as jnp
import numpy as np

import fieldmem

N = 32  # 32x32 float32 = 4 KiB per array
NOT_A_FUNCTION = 42


def step(u, row):
    """Writes one row: in place with donation, a full copy of u without."""
    return u.at[0].set(row)


def cast(u):
    """Returns a bf16 cast of its f32 input: no output can take u's buffer."""
    return u.astype(jnp.bfloat16)


def scale(u, factor):
    return u * factor


@jax.jit
def jitted_nodonate(u, row):
    return u.at[0].set(row)


def _jitted_step(u, row):
    return u.at[0].set(row)


jitted_donating = jax.jit(_jitted_step, donate_argnums=0)


class Model:
    """``models:model.update``: an attribute path to a bound method."""

    def update(self, u, row):
        return u.at[1].set(row)


model = Model()


# ---- factories ----------------------------------------------------------------


def make_args():
    return (jnp.zeros((N, N), jnp.float32), jnp.ones((N,), jnp.float32))


def make_args_list():
    return [jnp.zeros((N, N), jnp.float32), jnp.ones((N,), jnp.float32)]


def make_args_kwargs():
    return ((jnp.zeros((N, N), jnp.float32),), {"row": jnp.ones((N,), jnp.float32)})


def make_u():
    return (jnp.zeros((N, N), jnp.float32),)


def make_scale_args():
    return (jnp.zeros((N, N), jnp.float32), 2)


def make_abstract():
    return (jax.ShapeDtypeStruct((N, N), jnp.float32), jax.ShapeDtypeStruct((N,), jnp.float32))


def factory_raises():
    raise RuntimeError("no data file here")


def factory_returns_array():
    return np.zeros((N, N), np.float32)


def factory_returns_none():
    return None


def factory_bad_leaf():
    # an object jax cannot trace, inside a pytree that also holds arrays: held static, and step then
    # fails on the dict it is given
    return ({"u": jnp.zeros((N, N), jnp.float32), "meta": object()}, jnp.ones((N,), jnp.float32))


def factory_mismatch():
    # step() writes a row of length N into u: a row of length N+1 fails to trace
    return (jnp.zeros((N, N), jnp.float32), jnp.ones((N + 1,), jnp.float32))


NOT_A_FACTORY = (1, 2)


# ---- registered cases ---------------------------------------------------------

fieldmem.case(step, args=make_args, expect="in-place")
fieldmem.case(cast, args=make_u, name="models:cast")


def shift(u, row, n):
    """``n`` is a Python int: traced, as jax.jit traces it (an index needs no concrete value)."""
    return u.at[n].set(row)


def make_shift_args():
    return (jnp.zeros((N, N), jnp.float32), jnp.ones((N,), jnp.float32), 3)
