"""Synthetic user modules of growing size, for fieldmem and the naive baseline alike.

``write_module(path, functions=, chain=, leaves=, size=)`` writes one Python
file that a user could have written: ``functions`` update functions, each a
chain of ``chain`` steps over a pytree of ``leaves`` float32 arrays of shape
``(size, size)``. The kinds of step rotate so the programs are not all alike:
an elementwise update (fused), a row write (``.at[i].set``, a
dynamic-update-slice), and every fifth step a matmul that ends a fusion.

The module exposes ``CASES``, a list of ``(fn, make_args, donate_argnums)``,
and registers each case with ``fieldmem.case`` when fieldmem is importable,
so ``fieldmem check module.py`` and ``naive.py module.py`` check exactly the
same functions with the same donation.

``salt`` (an integer, default None) gives each step a constant that depends
on it: ``x * 0.5 + (k + SALT)``, a row write scaled by ``2.0 + SALT`` and a
matmul scaled by ``1.0 + SALT``. Two modules with different salts have the
same functions, op for op and shape for shape, and differ only in those
constants: XLA compiles as much for each, and no compilation cache keyed on
the program (jax's persistent cache, fieldmem's) can serve one from the
other. Without ``salt`` the module is the unsalted one earlier results were
measured on.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

HEADER = '''\
"""Synthetic module: {functions} functions x {chain} steps x {leaves} leaves of f32[{size},{size}]."""
import jax.numpy as jnp
import numpy as np
import jax

SIZE = {size}
LEAVES = {leaves}
{salt_line}

def make_args():
    state = {{f"leaf{{i}}": jax.ShapeDtypeStruct((SIZE, SIZE), jnp.float32) for i in range(LEAVES)}}
    return (state, jax.ShapeDtypeStruct((SIZE, SIZE), jnp.float32))


def _step(x, w, k):
    kind = k % 5
    if kind == 4:
        return jnp.tanh({matmul})
    if kind % 2 == 0:
        return x * 0.5 + {offset}
    return x.at[k % SIZE].set(x[(k + 1) % SIZE] * {scale})

'''

FUNCTION = """
def update{n}(state, w):
    out = {{}}
    for name, x in state.items():
        for k in range({chain}):
            x = _step(x, w, k + {n})
        out[name] = x
    return out
"""

FOOTER = """
CASES = [{cases}]

try:
    import fieldmem
except ImportError:  # the naive baseline runs without fieldmem
    fieldmem = None
if fieldmem is not None:
    for _fn, _args, _donate in CASES:
        fieldmem.case(_fn, args=_args, donate=_donate)
"""


def salt_value(salt: int) -> float:
    """The constant a salt puts in the module: ``salt / 1024``, exact in float32 for every salt
    below 2**20, and so are the step constants built on it (``k + SALT``, ``2.0 + SALT``, ...),
    so two salts never round to the same program."""
    return salt * 2.0**-10


def write_module(
    path: Path, *, functions: int = 1, chain: int = 1, leaves: int = 1, size: int = 64, salt: int | None = None
) -> Path:
    """Write the module and return its path (its name must be importable: letters, digits, _).

    ``salt``: fresh constants (see the module docstring); None: the unsalted module.
    """
    if salt is None:
        steps = dict(salt_line="", matmul="x @ w", offset="k", scale="2.0")
    else:
        if not 0 <= salt < 2**20:
            raise ValueError(f"salt {salt} must be in [0, 2**20)")
        steps = dict(
            salt_line=f"SALT = {salt_value(salt)!r}  # fresh constants: salt {salt}\n",
            matmul="(x @ w) * (1.0 + SALT)",
            offset="(k + SALT)",
            scale="(2.0 + SALT)",
        )
    parts = [HEADER.format(functions=functions, chain=chain, leaves=leaves, size=size, **steps)]
    for n in range(functions):
        parts.append(FUNCTION.format(n=n, chain=chain))
    cases = ", ".join(f"(update{n}, make_args, (0,))" for n in range(functions))
    parts.append(FOOTER.format(cases=cases))
    path.write_text(textwrap.dedent("".join(parts)))
    return path
