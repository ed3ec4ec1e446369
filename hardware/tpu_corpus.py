"""The corpus ``make tpu-check`` checks on a TPU: user-style update functions and real library steps.

Each entry is a function (or a ``jax.jit`` object), its example arguments and the donation its donated
variant makes, registered here as a ``fieldmem.case`` with that donation, so ``fieldmem check
hardware/tpu_corpus.py`` checks exactly these. ``hardware/tpu_truth.py`` runs the same entries
with plain jax on the chip, for the facts fieldmem's report is held to; entries whose step a library
wraps (``flax.nnx.jit``, ``equinox.filter_jit``) are held to ``--run``'s buffer identities instead.

- the 33 functions of the verdict corpus (``tests/verdict_cases.py``: in place, not in place, nothing to
  update, with their own donations);
- the bundled examples' single-function targets, with the donation their cases make (a flax linen
  transformer block trained by optax AdamW among them);
- a ``flax.nnx.jit`` Adam step, a ``flax.nnx.jit`` AdamW step and an ``equinox.filter_jit`` step
  (``tests/assets/wrapped_steps.py``).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for folder in (ROOT / "tests", ROOT / "tests" / "assets", ROOT / "examples"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import fieldmem  # noqa: E402


@dataclass(frozen=True)
class Entry:
    """One function of the corpus: ``donate`` the argument positions its donated variant donates (None:
    fieldmem's default, a jit object's own donation or else every argument that holds arrays);
    ``wrapped``: a library wrapper's step, held to --run rather than to plain jax."""

    name: str
    fn: Callable[..., Any]
    args: Callable[[], tuple[Any, ...]]
    donate: tuple[int, ...] | None
    static: tuple[int, ...] = ()
    wrapped: bool = False


def _positions(fn: Callable[..., Any], names: tuple[str, ...]) -> tuple[int, ...]:
    parameters = list(inspect.signature(fn).parameters)
    return tuple(parameters.index(n) for n in names)


def _entries() -> list[Entry]:
    import advisor
    import field
    import forward
    import interior
    import optimizer
    import sparse_row
    import stencil_scan
    import train_step
    import wrapped_steps
    from verdict_cases import CASES

    found = []
    for case in CASES:
        found.append(Entry(f"corpus:{case.name}", case.jitted or case.fn, case.args, case.donate, case.static))
    found += [
        Entry("example:field_update", field.update, field.update_args, None),
        Entry("example:set_row", sparse_row.set_row, sparse_row.set_row_args, _positions(sparse_row.set_row, ("u",))),
        Entry(
            "example:write_kv",
            sparse_row.write_kv,
            sparse_row.write_kv_args,
            _positions(sparse_row.write_kv, ("cache",)),
        ),
        Entry("example:diffuse", stencil_scan.diffuse, stencil_scan.diffuse_args, (0,), static=(1,)),
        Entry("example:sgd_step", optimizer.sgd_step, optimizer.step_args, None),
        Entry("example:adam_step", advisor.adam_step, advisor.adam_args, None),
        Entry(
            "example:add_interior",
            interior.add_interior,
            interior.interior_args,
            _positions(interior.add_interior, ("u",)),
        ),
        Entry("example:forward", forward.forward, forward.example_x, _positions(forward.forward, ("x",))),
        Entry("library:linen_adamw_step", train_step.train_step, train_step.step_args, None),
        Entry("library:nnx_adam_step", wrapped_steps.nnx_step, wrapped_steps.nnx_args, None, wrapped=True),
        Entry("library:nnx_adamw_step", wrapped_steps.nnx_adamw_step, wrapped_steps.nnx_adamw_args, None, wrapped=True),
        Entry("library:eqx_step", wrapped_steps.eqx_step, wrapped_steps.eqx_args, None, wrapped=True),
    ]
    return found


ENTRIES = _entries()

for _entry in ENTRIES:
    fieldmem.case(
        _entry.fn,
        args=_entry.args,
        name=_entry.name,
        donate=None if _entry.donate is None else (list(_entry.donate) if _entry.donate else "none"),
        static=list(_entry.static) or None,
    )
