"""Small JAX functions whose optimized HLO text is kept as golden files.

Each case is compiled twice by ``regenerate.py``: *plain* (nothing donated)
and *donated* (``donate_argnums`` as listed in :data:`CASES`). The texts are
written next to this file as ``<name>.<plain|donated>.hlo`` and read by
``tests/xla/test_hlo.py``, which never imports jax.

Editing this file moves the source lines recorded in the goldens: run
``make golden`` (or ``python tests/golden/regenerate.py``) afterwards and
update the line numbers asserted in ``tests/xla/test_hlo.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

ROWS, COLS = 64, 128


def _field(value: float = 0.0) -> jax.Array:
    return jnp.full((ROWS, COLS), value, dtype=jnp.float32)


# -- a sparse row update that also passes an array through ------------------
def sparse_row(u, v, idx, row):
    new_u = u.at[idx].set(row)  # golden: sparse_row update
    return new_u, v


def sparse_row_args():
    return (_field(0.0), _field(1.0), jnp.int32(3), jnp.ones((COLS,), jnp.float32))


# -- a lax.scan stepper (diffusion-like stencil) ---------------------------
def scan_stepper(u):
    def step(c, _):
        lap = jnp.roll(c, 1, axis=0) + jnp.roll(c, -1, axis=0) - 2.0 * c
        return c + 0.1 * lap, None  # golden: scan_stepper carry

    out, _ = lax.scan(step, u, None, length=8)  # golden: scan_stepper scan
    return out


def scan_stepper_args():
    return (_field(1.0),)


# -- a scan whose carry XLA copies on every iteration ----------------------
def loop_copy(u):
    def step(c, i):
        new = c.at[i].set(c[i] * 2.0)  # golden: loop_copy update
        return new, c  # the old carry is a per-step output: XLA must keep it

    out, history = lax.scan(step, u, jnp.arange(4))  # golden: loop_copy scan
    return out, history


def loop_copy_args():
    return (_field(1.0),)


# -- a while_loop with a data-dependent trip count -------------------------
def while_loop(u, tol):
    def cond(state):
        c, n = state
        return (jnp.max(c) > tol) & (n < 100)

    def body(state):
        c, n = state
        return c * 0.5, n + 1  # golden: while body

    out, n = lax.while_loop(cond, body, (u, jnp.int32(0)))  # golden: while_loop call
    return out, n


def while_loop_args():
    return (_field(8.0), jnp.float32(1.0))


# -- several outputs of different shapes -----------------------------------
def several_outputs(a, b):
    total = jnp.sum(a)  # golden: several total
    return a + 1.0, b * 2.0, total, (a > 0.0)  # golden: several return


def several_outputs_args():
    return (_field(1.0), _field(2.0))


# -- a dtype change: the donated f32 input cannot hold the bf16 output -----
def dtype_change(x):
    return x.astype(jnp.bfloat16)  # golden: dtype_change


def dtype_change_args():
    return (_field(1.0),)


# -- a donated argument that jit drops because it is unused ----------------
def unused_arg(x, unused):
    return x * 2.0  # golden: unused_arg


def unused_arg_args():
    return (_field(1.0), _field(3.0))


# name -> (function, example-argument factory, donate_argnums of the donated variant)
CASES = {
    "sparse_row": (sparse_row, sparse_row_args, (0, 1)),
    "scan_stepper": (scan_stepper, scan_stepper_args, (0,)),
    "loop_copy": (loop_copy, loop_copy_args, (0,)),
    "while_loop": (while_loop, while_loop_args, (0,)),
    "several_outputs": (several_outputs, several_outputs_args, (0, 1)),
    "dtype_change": (dtype_change, dtype_change_args, (0,)),
    "unused_arg": (unused_arg, unused_arg_args, (0, 1)),
}


def compiled_text(name: str, variant: str) -> str:
    """``as_text()`` of case ``name`` compiled plain or donated."""
    fn, make_args, donate = CASES[name]
    donate_argnums = donate if variant == "donated" else ()
    lowered = jax.jit(fn, donate_argnums=donate_argnums).lower(*make_args())
    return lowered.compile().as_text()
