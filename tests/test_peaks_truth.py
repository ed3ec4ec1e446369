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


def union_peak(folder: Path) -> int:
    """max over XLA's points of sum over allocations of |union of the live values' byte ranges|
    (a constant allocation is live at every point: the executable holds it)."""
    (assignment_file,) = folder.glob("*after_optimizations-buffer-assignment.txt")
    (range_file,) = folder.glob("*after_optimizations-live-range.txt")
    placed: dict[tuple[str, str], tuple[int, int, int]] = {}  # (name, index) -> (allocation, start, end)
    allocation, memory, constant = -1, True, False
    always: set[tuple[str, str]] = set()  # constants
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
    live: dict[tuple[str, str], tuple[int, int]] = {}
    section = ""
    for line in range_file.read_text().splitlines():
        stripped = line.strip()
        if stripped.endswith(":") and not stripped[0].isdigit():
            section = stripped
        elif section == "BufferLiveRange:" and (found := _RANGE.match(line)):
            live[(found.group(1), found.group(2))] = (int(found.group(3)), int(found.group(4)))
    assert live and placed
    last = max(end for _, end in live.values())
    best = 0
    for t in range(last + 1):
        spans: dict[int, list[tuple[int, int]]] = {}
        for key, (a, start, end) in placed.items():
            if key in always or (key in live and live[key][0] <= t <= live[key][1]):
                spans.setdefault(a, []).append((start, end))
        covered = 0
        for pieces in spans.values():
            reach = -1
            for start, end in sorted(pieces):
                start = max(start, reach)
                if end > start:
                    covered += end - start
                    reach = end
        best = max(best, covered)
    return best


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
