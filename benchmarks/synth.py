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


def make_args():
    state = {{f"leaf{{i}}": jax.ShapeDtypeStruct((SIZE, SIZE), jnp.float32) for i in range(LEAVES)}}
    return (state, jax.ShapeDtypeStruct((SIZE, SIZE), jnp.float32))


def _step(x, w, k):
    kind = k % 5
    if kind == 4:
        return jnp.tanh(x @ w)
    if kind % 2 == 0:
        return x * 0.5 + k
    return x.at[k % SIZE].set(x[(k + 1) % SIZE] * 2.0)

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


def write_module(path: Path, *, functions: int = 1, chain: int = 1, leaves: int = 1, size: int = 64) -> Path:
    """Write the module and return its path (its name must be importable: letters, digits, _)."""
    parts = [HEADER.format(functions=functions, chain=chain, leaves=leaves, size=size)]
    for n in range(functions):
        parts.append(FUNCTION.format(n=n, chain=chain))
    cases = ", ".join(f"(update{n}, make_args, (0,))" for n in range(functions))
    parts.append(FOOTER.format(cases=cases))
    path.write_text(textwrap.dedent("".join(parts)))
    return path
