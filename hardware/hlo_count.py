"""Copies counted in optimized HLO text by a pattern of its own, for ``make tpu-check`` (no jax, no fieldmem).

``hardware/tpu_truth.py`` counts the copies of the programs plain jax compiles on the chip with it, and
``hardware/tpu_check.py`` sizes fieldmem's copies by the same rule, so the two counts are comparable.
"""

from __future__ import annotations

import re

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


def array_bytes(shape: str) -> int:
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
        if array_bytes(destination) < MIN_BYTES:
            continue
        total += 1
        if _space(destination) == 0 and _space(source) == 0:
            count += 1
    return {"all": total, "device": count}
