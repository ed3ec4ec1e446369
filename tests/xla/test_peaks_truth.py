"""The live peak against the truth of XLA's own dumps, computed here without fieldmem.xla.buffers.

XLA writes, for a compile with ``xla_dump_to``, the buffer assignment
(``*-buffer-assignment.txt``: each value's allocation, offset and size) and the
live ranges (``*-live-range.txt``: each value's first and last point). The bytes
live at a point are, per allocation, the size of the union of the byte ranges of
the values live there: two values in one slice, or in overlapping slices, hold
the same bytes once. The maximum over points is the peak fieldmem must report
as ``live_peak_bytes`` (docs/peaks.md), and it can never exceed the footprint.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import fieldmem

pytestmark = pytest.mark.compile

optax = pytest.importorskip("optax")

_ALLOCATION = re.compile(r"^allocation (\d+): size (\d+)(.*):$")
_VALUE = re.compile(r"^ value: <\d+ ([^\s{>]+)(\{[\d,]*\})?(?: \(phi\))? @\d+> \(size=(\d+),offset=(\d+)\)")
_RANGE = re.compile(r"^\s+([^\s{]+)(\{[\d,]*\}):(\d+)-(\d+)$")


_Key = tuple[str, str]  # (instruction, shape index) as the dumps name a value


def _read_dumps(folder: Path) -> tuple[dict[_Key, tuple[int, int, int]], dict[_Key, tuple[int, int]], set[_Key]]:
    """Each value's slice (allocation, start, end), its live range (first, last point), and the constants
    (live at every point: the executable holds them), from XLA's dumps of the optimized module."""
    (assignment_file,) = folder.glob("*after_optimizations-buffer-assignment.txt")
    (range_file,) = folder.glob("*after_optimizations-live-range.txt")
    placed: dict[_Key, tuple[int, int, int]] = {}
    allocation, memory, constant = -1, True, False
    always: set[_Key] = set()
    for line in assignment_file.read_text().splitlines():
        if found := _ALLOCATION.match(line):
            allocation = int(found.group(1))
            memory = "thread-local" not in found.group(3)
            constant = "constant" in found.group(3)
        elif (found := _VALUE.match(line)) and memory:
            size, offset = int(found.group(3)), int(found.group(4))
            placed[(found.group(1), found.group(2) or "{}")] = (allocation, offset, offset + size)
            if constant:
                always.add((found.group(1), found.group(2) or "{}"))
    live: dict[_Key, tuple[int, int]] = {}
    section = ""
    for line in range_file.read_text().splitlines():
        stripped = line.strip()
        if stripped.endswith(":") and not stripped[0].isdigit():
            section = stripped
        elif section == "BufferLiveRange:" and (found := _RANGE.match(line)):
            live[(found.group(1), found.group(2))] = (int(found.group(3)), int(found.group(4)))
    assert live and placed
    return placed, live, always


def _points(folder: Path) -> list[tuple[int, set[str]]]:
    """At each of XLA's points: the bytes covered (per allocation, the union of the live values' byte
    ranges) and the instructions whose values are live there."""
    placed, live, always = _read_dumps(folder)
    points = []
    for t in range(max(end for _, end in live.values()) + 1):
        keys = [k for k in placed if k in always or (k in live and live[k][0] <= t <= live[k][1])]
        spans: dict[int, list[tuple[int, int]]] = {}
        for key in keys:
            allocation, start, end = placed[key]
            spans.setdefault(allocation, []).append((start, end))
        covered = 0
        for pieces in spans.values():
            reach = -1
            for start, end in sorted(pieces):
                start = max(start, reach)
                if end > start:
                    covered += end - start
                    reach = end
        points.append((covered, {name for name, _ in keys}))
    return points


def union_peak(folder: Path) -> int:
    """max over XLA's points of sum over allocations of |union of the live values' byte ranges|
    (a constant allocation is live at every point: the executable holds it)."""
    return max(covered for covered, _ in _points(folder))


def live_sets_at_union_peak(folder: Path) -> list[set[str]]:
    """The instructions whose values XLA has live at each point where the union peak is reached."""
    points = _points(folder)
    peak = max(covered for covered, _ in points)
    return [names for covered, names in points if covered == peak]


_SECTION = re.compile(r"^(FileNames|FunctionNames|FileLocations|StackFrames)$")
_ENTRY = re.compile(r"^(\d+) (.*)$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = .*metadata=\{[^}]*stack_frame_id=(\d+)")


def metadata_lines(folder: Path) -> dict[str, tuple[str, int]]:
    """Instruction name -> (file, line) of the frame its metadata names, from the optimized module's dump
    (its FileNames, FileLocations and StackFrames tables, read here, not by fieldmem's parser)."""
    (text_file,) = folder.glob("*after_optimizations.txt")
    tables: dict[str, dict[int, str]] = {}
    section = None
    names: dict[str, int] = {}
    for line in text_file.read_text().splitlines():
        if _SECTION.match(line):
            section = line
            tables[section] = {}
        elif section and (found := _ENTRY.match(line)):
            tables[section][int(found.group(1))] = found.group(2)
        elif not line.strip():
            section = None
        if found := _INSTRUCTION.match(line):
            names[found.group(1)] = int(found.group(2))
    files = {k: v.strip('"') for k, v in tables.get("FileNames", {}).items()}
    locations = {}
    for key, value in tables.get("FileLocations", {}).items():
        fields = dict(re.findall(r"(\w+)=(\d+)", value))
        locations[key] = (files[int(fields["file_name_id"])], int(fields["line"]))
    frames = {
        k: int(dict(re.findall(r"(\w+)=(\d+)", v))["file_location_id"])
        for k, v in tables.get("StackFrames", {}).items()
    }
    return {name: locations[frames[frame]] for name, frame in names.items() if frame in frames}


def assert_adds_up(variant: Any, min_bytes: int = 1024) -> None:
    """Issue 31: a variant's peak by source adds up to its live peak, by source and by line, each source to
    its buffers, and no temporary or output of ``min_bytes`` or more lacks a line of the user's code."""
    peak = variant.peak
    assert peak is not None
    assert peak.bytes == variant.memory.live_peak_bytes
    assert sum(s.bytes for s in peak.sources) == peak.bytes
    assert sum(line.bytes for line in peak.lines) == peak.bytes
    for source in peak.sources:
        assert source.bytes == sum(b.bytes for b in source.buffers)
        if source.kind in ("temporary", "output") and source.bytes >= min_bytes:
            assert source.line, (source, "a temporary with no line of the user's code")


def _mlp(n: int, h: int) -> dict[str, dict[str, jax.Array]]:
    k1, k2 = jax.random.split(jax.random.key(0))
    return {
        "dense1": {"kernel": jax.random.normal(k1, (n, h)), "bias": jnp.zeros(h)},
        "dense2": {"kernel": jax.random.normal(k2, (h, 8)), "bias": jnp.zeros(8)},
    }


def _loss(params: dict[str, Any], x: jax.Array) -> jax.Array:
    h = jnp.tanh(x @ params["dense1"]["kernel"] + params["dense1"]["bias"])
    return jnp.mean((h @ params["dense2"]["kernel"] + params["dense2"]["bias"]) ** 2)


@pytest.mark.parametrize(("n", "h", "batch"), [(32, 64, 4), (256, 256, 16)])
def test_adamw_live_peak_is_the_union_peak_of_xla_dumps(n: int, h: int, batch: int, tmp_path: Path) -> None:
    tx = optax.adamw(1e-3, weight_decay=1e-4)

    def step(params: Any, opt_state: Any, x: jax.Array) -> tuple[Any, Any, jax.Array]:
        loss, grads = jax.value_and_grad(_loss)(params, x)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def arguments() -> tuple[Any, Any, jax.Array]:
        params = _mlp(n, h)
        return params, tx.init(params), jnp.ones((batch, n))

    jitted = jax.jit(step, donate_argnums=(0, 1))
    (result,) = fieldmem.check_function(jitted, *arguments(), name="adamw").results
    assert result.status == "ok", result.error
    memory = result.variants["donated"].memory
    assert memory.live_peak_bytes is not None and memory.footprint_bytes is not None
    assert memory.live_peak_bytes <= memory.footprint_bytes

    lowered = jitted.lower(*arguments())
    options = {"xla_dump_to": str(tmp_path), "xla_dump_hlo_as_text": True}
    compiled = lowered.compile(options)
    assert compiled.memory_analysis().temp_size_in_bytes == memory.temp_bytes  # the same program
    assert memory.live_peak_bytes == union_peak(tmp_path)

    # where the peak comes from (issue 31), against the same dumps
    donated = result.variants["donated"]
    assert_adds_up(donated)
    assert_adds_up(result.variants["plain"])
    assert donated.peak is not None
    # every buffer the breakdown counts is a value XLA has live at a point where its peak is reached
    ours = {b.instruction for s in donated.peak.sources for b in s.buffers if b.kind != "constant"}
    assert any(ours <= names for names in live_sets_at_union_peak(tmp_path)), ours
    # each buffer made by an instruction that carries its own line of this file is placed on that line,
    # as the dump's own metadata tables say
    lines, here, checked = metadata_lines(tmp_path), Path(__file__).name, 0
    for source in donated.peak.sources:
        for buffer in source.buffers:
            file_line = lines.get(buffer.instruction or "")
            if file_line is not None and Path(file_line[0]).name == here:
                assert source.line is not None and source.line.endswith(f"{here}:{file_line[1]}"), (buffer, source)
                checked += 1
    assert checked >= 3
    # the arguments are the step's own leaves, by path
    arguments_named = {s.input for s in donated.peak.sources if s.kind == "argument"}
    assert "x" in arguments_named and any(name and name.startswith("params[") for name in arguments_named)
