"""Runtime truth for ``make tpu-check``: the corpus (``hardware/tpu_corpus.py``) run with plain jax.

For each entry that is a plain function or a ``jax.jit`` object, on whatever device jax runs on (the
chip), with nothing of fieldmem's: the donated program as the user's own jit builds it (the entry's
donation, or the jit object's own), and the program without donation. Of each, ``memory_analysis()``; of
the donated one called on the entry's arguments, which output comes back in which donated input's buffer
(``unsafe_buffer_pointer()``, the input ``is_deleted()``), which donated inputs stay alive, and the copies
its optimized HLO keeps in device memory (``copy``/``copy-start`` outside fusion bodies whose source and
destination both lie in memory space 0, read from the text with a pattern of its own). Leaves are numbered
as fieldmem's report numbers them: the positional arguments' leaves in order, static arguments left out.

    python hardware/tpu_truth.py OUT.json
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hlo_count import device_copies

FIGURES = {
    "argument_bytes": "argument_size_in_bytes",
    "output_bytes": "output_size_in_bytes",
    "alias_bytes": "alias_size_in_bytes",
    "temp_bytes": "temp_size_in_bytes",
    "generated_code_bytes": "generated_code_size_in_bytes",
    "peak_bytes": "peak_memory_in_bytes",
}


def _materialized(value: Any) -> Any:
    """A ``ShapeDtypeStruct`` argument as zeros of its shape (a run needs values)."""
    if isinstance(value, jax.ShapeDtypeStruct):
        return jnp.zeros(value.shape, value.dtype)
    return value


def _figures(compiled: Any) -> dict[str, int | None]:
    analysis = compiled.memory_analysis()
    return {name: getattr(analysis, attribute, None) for name, attribute in FIGURES.items()}


def _positions(entry: Any, args: tuple[Any, ...]) -> tuple[int, ...]:
    if entry.donate is not None:
        return entry.donate
    return tuple(
        i
        for i, a in enumerate(args)
        if i not in entry.static and any(isinstance(leaf, jax.Array) for leaf in jax.tree_util.tree_leaves(a))
    )


def truth(entry: Any) -> dict[str, Any]:
    args = tuple(jax.tree_util.tree_map(_materialized, entry.args()))
    own = hasattr(entry.fn, "lower") and entry.donate is None  # a jit object: its own donation
    function = getattr(entry.fn, "__wrapped__", entry.fn)
    static = tuple(entry.static)
    if own:
        donated = entry.fn
        info = getattr(entry.fn, "_jit_info", None)
        plain = jax.jit(function, static_argnums=static)
        positions: tuple[int, ...] = ()
        del info
    else:
        positions = _positions(entry, args)
        donated = jax.jit(function, donate_argnums=positions, static_argnums=static)
        plain = jax.jit(function, static_argnums=static)
    dynamic = [a for i, a in enumerate(args) if i not in static]
    inputs = [leaf for a in dynamic for leaf in jax.tree_util.tree_leaves(a)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain_compiled = plain.lower(*args).compile()
        donated_lowered = donated.lower(*args)
        donated_compiled = donated_lowered.compile()
        donated_flags = [
            bool(getattr(info, "donated", False))
            for info in jax.tree_util.tree_leaves(
                donated_lowered.args_info, is_leaf=lambda x: hasattr(x, "donated") and hasattr(x, "_aval")
            )
        ]
        pointers = [leaf.unsafe_buffer_pointer() if isinstance(leaf, jax.Array) else None for leaf in inputs]
        out = donated(*args)
        jax.block_until_ready(out)
    outputs = jax.tree_util.tree_leaves(out)
    out_pointers = [leaf.unsafe_buffer_pointer() if isinstance(leaf, jax.Array) else None for leaf in outputs]
    deleted = [leaf.is_deleted() if isinstance(leaf, jax.Array) else None for leaf in inputs]
    aliases = sorted(
        [i, o]
        for i, p in enumerate(pointers)
        for o, q in enumerate(out_pointers)
        if p is not None and p == q and deleted[i]
    )
    return {
        "name": entry.name,
        "donated_positions": list(positions),
        "donated_leaves": [i for i, d in enumerate(donated_flags) if d],
        "plain": _figures(plain_compiled),
        "donated": _figures(donated_compiled),
        "aliases": aliases,
        "kept_alive": [i for i, d in enumerate(donated_flags) if d and deleted[i] is False],
        "device_copies": {
            "plain": device_copies(plain_compiled.as_text()),
            "donated": device_copies(donated_compiled.as_text()),
        },
    }


def main(argv: list[str]) -> int:
    import tpu_corpus

    rows, failures = [], []
    started = time.perf_counter()
    for entry in tpu_corpus.ENTRIES:
        if entry.wrapped:
            continue
        try:
            rows.append(truth(entry))
        except Exception as exc:
            failures.append({"name": entry.name, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"})
    document = {
        "jax": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
        "seconds": round(time.perf_counter() - started, 1),
        "cases": rows,
        "failures": failures,
    }
    Path(argv[0]).write_text(json.dumps(document, indent=1))
    print(f"{len(rows)} cases, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
