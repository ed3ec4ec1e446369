"""Runtime truth for ``make tpu-check``: the corpus (``benchmarks/tpu_corpus.py``) run with plain jax.

For each entry that is a plain function or a ``jax.jit`` object, on whatever device jax runs on (the
chip), with nothing of fieldmem's: the donated program as the user's own jit builds it (the entry's
donation, or the jit object's own), and the program without donation. Of each, ``memory_analysis()``; of
the donated one called on the entry's arguments, which output comes back in which donated input's buffer
(``unsafe_buffer_pointer()``, the input ``is_deleted()``), which donated inputs stay alive, and the copies
its optimized HLO keeps in device memory (``copy``/``copy-start`` outside fusion bodies whose source and
destination both lie in memory space 0, read from the text with a pattern of its own). Leaves are numbered
as fieldmem's report numbers them: the positional arguments' leaves in order, static arguments left out.

    python benchmarks/tpu_truth.py OUT.json
"""

from __future__ import annotations

import json
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))

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


_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?(%?[\w.\-]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.+?)\s+([\w\-]+)\((.*)$")
_SPACE = re.compile(r"S\((\d+)\)")


def _space(shape: str) -> int:
    found = _SPACE.search(shape)
    return int(found.group(1)) if found else 0


def _top_level_shapes(text: str) -> list[str]:
    """The element shapes of a tuple shape (``(f32[8]{0}, f32[8]{0:S(1)}, u32[])``), or the shape alone."""
    text = text.strip()
    if not text.startswith("("):
        return [text]
    depth, start, parts = 0, 1, []
    for n, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 1:
            parts.append(text[start:n].strip())
            start = n + 1
    parts.append(text[start:-1].strip())
    return parts


_DTYPE_BYTES = {
    "pred": 1,
    "s8": 1,
    "u8": 1,
    "s16": 2,
    "u16": 2,
    "f16": 2,
    "bf16": 2,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "s64": 8,
    "u64": 8,
    "f64": 8,
    "c64": 8,
    "c128": 16,
}
_ARRAY = re.compile(r"^(\w+)\[([\d,]*)\]")
MIN_BYTES = 1024  # fieldmem's default --min-bytes: smaller copies are not counted


def _bytes(shape: str) -> int:
    found = _ARRAY.match(shape.strip())
    if not found:
        return 0
    size = _DTYPE_BYTES.get(found.group(1), 4)
    for dim in filter(None, found.group(2).split(",")):
        size *= int(dim)
    return size


def device_copies(hlo_text: str) -> dict[str, int]:
    """The ``copy``/``copy-start`` instructions of at least :data:`MIN_BYTES` outside fusion bodies (``all``),
    and those whose source and destination both lie in memory space 0 (``device``), counted from the HLO
    text."""
    shapes: dict[str, str] = {}
    count = total = 0
    fused = False
    for line in hlo_text.splitlines():
        header = _COMPUTATION.match(line)
        if header and not line[0].isspace():  # a computation's first line (instructions are indented)
            fused = "fused" in header.group(1) or "fusion" in header.group(1)
            continue
        found = _INSTRUCTION.match(line)
        if not found:
            continue
        name, shape, opcode, rest = found.groups()
        shapes[name] = shape
        if fused or opcode not in ("copy", "copy-start"):
            continue
        if opcode == "copy-start":
            parts = _top_level_shapes(shape)
            destination, source = parts[0], parts[1] if len(parts) > 1 else parts[0]
        else:
            operand = rest.split(")")[0].strip().lstrip("%")
            destination, source = shape, shapes.get(operand, "")
        if _bytes(destination) < MIN_BYTES:
            continue
        total += 1
        if _space(destination) == 0 and _space(source) == 0:
            count += 1
    return {"all": total, "device": count}


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
