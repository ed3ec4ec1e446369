"""Where the live peak comes from (``Variant.peak``): every byte at it, by source, on real steps.

The breakdown is checked three ways: it adds up to the live peak exactly,  and
to XLA's own account of the same compile (test_peaks_truth.py, which reads XLA's
dumps of an optax step without fieldmem); no temporary comes out without a
line of the user's code, on steps written with flax and optax and on a KV
decode step, for the CPU and compiled without the device for a GPU and a TPU;
and what it says by line moves the way the program does (remat's activations;
a changed line named in the baseline gate and ``fieldmem compare``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from helpers_backends import require_extra
from test_peaks_truth import assert_adds_up

import fieldmem
from fieldmem.findings.peak import user_stack
from fieldmem.gate.diff import Delta, TargetFacts, VariantFacts, diff_targets, peak_line_text
from fieldmem.xla.hlo import SourceLocation

optax = pytest.importorskip("optax")
linen = pytest.importorskip("flax.linen")


# ----------------------------------------------------------------------------
# Pure: stacks and line deltas


def test_the_stack_starts_at_the_users_outermost_frame_and_keeps_library_frames_under_it() -> None:
    def is_library(file: str) -> bool:
        return "site-packages" in file or "fieldmem/" in file

    inner = SourceLocation(
        "/x/site-packages/flax/linen/linear.py",
        281,
        "__call__",
        callers=(
            SourceLocation("/home/u/model.py", 12, "block"),
            SourceLocation("/home/u/model.py", 30, "loss"),
            SourceLocation("/x/site-packages/fieldmem/driver/lowering.py", 90, "lower"),
            # what called fieldmem in-process (a script, a notebook cell): not the program's
            SourceLocation("/home/u/make_report.py", 8, "<module>"),
        ),
    )
    stack, line = user_stack(inner, is_library)
    assert [(f.line, f.library) for f in stack] == [(30, False), (12, False), (281, True)]
    assert line.endswith("model.py:12")  # the innermost frame of the user's own code
    only_library = SourceLocation("/x/site-packages/optax/_src/alias.py", 7, "adam")
    stack, line = user_stack(only_library, is_library)
    assert len(stack) == 1 and line.endswith("alias.py:7")


def test_fieldmems_own_frames_are_told_from_the_working_directory_given(tmp_path: Path) -> None:
    """A relative name is read from the working directory: fieldmem's driver named from its package's
    parent is fieldmem's (and what called it is left out), the same name from elsewhere is not."""
    root = Path(fieldmem.__file__).resolve().parent.parent
    inner = SourceLocation(
        "/home/u/model.py",
        12,
        "block",
        callers=(SourceLocation("fieldmem/check_helper.py", 3, "f"), SourceLocation("/home/u/run.py", 1, "main")),
    )
    stack, _ = user_stack(inner, lambda file: False, cwd=str(root))
    assert [f.line for f in stack] == [12]
    stack, _ = user_stack(inner, lambda file: False, cwd=str(tmp_path))
    assert [f.line for f in stack] == [1, 3, 12]


def _facts(lines: dict[str, int] | None, floor: int = 0, peak: int = 0) -> TargetFacts:
    memory = {"footprint_bytes": peak, "live_peak_bytes": peak, "temp_bytes": 0, "peak_bytes": peak}
    variant = VariantFacts(memory=memory, peak_lines=lines, peak_lines_floor=floor)
    return TargetFacts(name="m.py:f", status="ok", in_place=True, variants={"donated": variant})


def _line_deltas(before: TargetFacts, after: TargetFacts, min_bytes: int = 1024) -> list[Delta]:
    return [d for d in diff_targets(before, after, min_bytes) if d.kind == "peak-line"]


def test_line_deltas_name_what_moved_largest_first_and_skip_lines_below_a_kept_floor() -> None:
    before = _facts({"m.py:3": 4 << 20, "m.py:5": 1 << 20, "x": 2 << 20}, peak=7 << 20)
    after = _facts({"m.py:3": 4 << 20, "m.py:5": 3 << 20, "m.py:9": 8 << 20}, peak=17 << 20)
    deltas = _line_deltas(before, after)
    assert [(d.subject, d.change) for d in deltas] == [("m.py:9", "new"), ("m.py:5", "grew"), ("x", "gone")]
    assert [peak_line_text(d) for d in deltas] == ["+8.0 MiB at m.py:9", "+2.0 MiB at m.py:5", "-2.0 MiB in x"]
    # a line the other side does not list, where that side kept only its largest lines: unknown, not 0
    truncated = _facts({"m.py:3": 4 << 20}, floor=4 << 20, peak=7 << 20)
    assert [d.subject for d in _line_deltas(truncated, after)] == []
    # moves below min_bytes are no change of a line; a side without lines (an old baseline) gives none
    assert _line_deltas(before, _facts({"m.py:3": (4 << 20) + 100, "m.py:5": 1 << 20, "x": 2 << 20})) == []
    assert _line_deltas(_facts(None), after) == []


# ----------------------------------------------------------------------------
# Real compiles on the CPU


class _Block(linen.Module):
    """A pre-norm transformer block, as flax's examples write one."""

    features: int = 64
    heads: int = 4

    @linen.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        y = linen.LayerNorm()(x)
        x = x + linen.MultiHeadDotProductAttention(num_heads=self.heads, qkv_features=self.features)(y, y)
        y = linen.LayerNorm()(x)
        y = linen.Dense(4 * self.features)(y)
        return x + linen.Dense(self.features)(linen.gelu(y))


@pytest.mark.compile
def test_a_linen_transformer_step_with_a_frozen_subtree_has_every_byte_placed() -> None:
    block = _Block()
    x = jnp.ones((4, 32, 64))
    params = block.init(jax.random.key(0), x)["params"]
    # the attention is frozen: optax zeroes its updates, and only the rest trains
    labels = {name: ("frozen" if name.startswith("MultiHeadDotProductAttention") else "train") for name in params}
    tx = optax.multi_transform({"train": optax.adam(1e-3), "frozen": optax.set_to_zero()}, labels)

    def loss(params: Any, x: jax.Array) -> jax.Array:
        return jnp.mean(block.apply({"params": params}, x) ** 2)

    def step(params: Any, opt_state: Any, x: jax.Array) -> tuple[Any, Any]:
        grads = jax.grad(loss)(params, x)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    report = fieldmem.check_function(jax.jit(step, donate_argnums=(0, 1)), params, tx.init(params), x)
    (result,) = report.results
    assert result.status == "ok", result.error
    for name in ("plain", "donated"):
        assert_adds_up(result.variants[name])
    peak = result.variants["plain"].peak
    assert peak is not None
    # flax's frames are kept under the user's line, marked as library code
    this_file = Path(__file__).name
    computed = [s for s in peak.sources if s.stack]
    assert computed and all(s.line and this_file in s.line for s in computed if not s.stack[-1].library or s.line)
    assert any(f.library and "flax" in f.file for s in computed for f in s.stack)


# ----------------------------------------------------------------------------
# CPU, GPU and TPU: one subprocess compiles the module for the three

MODULE = textwrap.dedent(
    """
    import jax
    import jax.numpy as jnp

    import fieldmem


    def block(w, x):
        h = jnp.tanh(x @ w[0])
        return x + h @ w[1]


    def loss(ws, x):
        for w in ws:
            x = block(w, x)
        return jnp.sum(x**2)


    def loss_remat(ws, x):
        for w in ws:
            x = jax.checkpoint(block)(w, x)
        return jnp.sum(x**2)


    def grads(ws, x):
        return jax.grad(loss)(ws, x)


    def grads_remat(ws, x):
        return jax.grad(loss_remat)(ws, x)


    def mlp_args():
        w = (jax.ShapeDtypeStruct((128, 1024), jnp.float32), jax.ShapeDtypeStruct((1024, 128), jnp.float32))
        return ([w] * 4, jax.ShapeDtypeStruct((1024, 128), jnp.float32))


    def decode(cache_k, cache_v, q, k, v, pos):
        cache_k = cache_k.at[:, pos].set(k)
        cache_v = cache_v.at[:, pos].set(v)
        scores = jnp.einsum("bhd,bthd->bht", q, cache_k) / 8.0
        weights = jax.nn.softmax(scores, axis=-1)
        out = jnp.einsum("bht,bthd->bhd", weights, cache_v)
        return cache_k, cache_v, out


    def decode_args():
        cache = jax.ShapeDtypeStruct((8, 512, 8, 64), jnp.float32)
        token = jax.ShapeDtypeStruct((8, 8, 64), jnp.float32)
        return (cache, cache, token, token, token, jax.ShapeDtypeStruct((), jnp.int32))


    fieldmem.case(grads, args=mlp_args, donate="none")
    fieldmem.case(grads_remat, args=mlp_args, donate="none")
    fieldmem.case(decode, args=decode_args, donate="cache_k,cache_v")
    """
)

BACKENDS = ("cpu", "gpu:h100", "tpu:v5e")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    require_extra("gpu")
    require_extra("tpu")
    folder = tmp_path_factory.mktemp("peak_sources")
    (folder / "steps.py").write_text(MODULE)
    out = folder / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", "steps.py", "--backend", ",".join(BACKENDS)]
        + ["--format", "json", "-o", str(out)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode in (0, 1), done.stderr
    found = {}
    for backend in BACKENDS:
        path = folder / f"report.{backend.replace(':', '-')}.json"
        found[backend] = {r["name"]: r for r in json.loads(path.read_text())["results"]}
    return found


def _peak(result: dict[str, Any], variant: str) -> dict[str, Any]:
    assert result["status"] == "ok", result.get("error")
    peak = result["variants"][variant]["peak"]
    assert peak is not None
    assert peak["bytes"] == result["variants"][variant]["memory"]["live_peak_bytes"]
    assert sum(s["bytes"] for s in peak["sources"]) == peak["bytes"] == sum(x["bytes"] for x in peak["lines"])
    return peak


@pytest.mark.compile
@pytest.mark.parametrize("backend", BACKENDS)
def test_no_temporary_of_the_decode_step_is_without_a_line(reports: dict[str, Any], backend: str) -> None:
    for variant in ("plain", "donated"):
        peak = _peak(reports[backend]["steps.py:decode"], variant)
        unplaced = [
            s for s in peak["sources"] if s["kind"] in ("temporary", "output") and s["bytes"] >= 1024 and not s["line"]
        ]
        assert unplaced == [], (backend, variant, unplaced)
        # the caches are arguments by their names; the attention's lines are the module's own
        labels = {line["label"] for line in peak["lines"]}
        assert {"cache_k", "cache_v"} <= labels
    if backend == "tpu:v5e":
        assert _peak(reports[backend]["steps.py:decode"], "plain")["padding_bytes"] > 0  # tiled layouts


def _line_bytes(peak: dict[str, Any], suffix: str) -> int:
    return sum(line["bytes"] for line in peak["lines"] if line["label"].endswith(suffix))


@pytest.mark.compile
def test_remat_removes_the_activations_of_its_line_on_a_gpu(reports: dict[str, Any]) -> None:
    # line 9 is `h = jnp.tanh(x @ w[0])`: without remat, every block's h is kept for the backward pass
    assert MODULE.splitlines()[8].strip() == "h = jnp.tanh(x @ w[0])"
    gpu = reports["gpu:h100"]
    kept, remat = _peak(gpu["steps.py:grads"], "plain"), _peak(gpu["steps.py:grads_remat"], "plain")
    assert remat["bytes"] < kept["bytes"]
    drop = _line_bytes(kept, "steps.py:9") - _line_bytes(remat, "steps.py:9")
    assert drop > 0
    assert drop >= (kept["bytes"] - remat["bytes"]) // 2  # the line makes most of the peak's drop
    for backend in BACKENDS:
        for name in ("steps.py:grads", "steps.py:grads_remat"):
            _peak(reports[backend][name], "plain")


# ----------------------------------------------------------------------------
# The command line: --top, and a change of peak named by line

STEP = "import jax.numpy as jnp\n\n\ndef step(x):\n    y = jnp.sin(x) * 2.0\n    return x + y.sum()\n"
GROWN = (
    "import jax.numpy as jnp\n\n\ndef step(x):\n    y = jnp.sin(x) * 2.0\n"
    "    z = jnp.sort(y, axis=0)\n    return x + y.sum() + z * 3.0\n"
)


def _fieldmem(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", "m.py:step", "--shapes", "f32[256,256]", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "80"},
    )


@pytest.mark.compile
def test_top_lists_the_largest_lines_at_80_columns_and_gates_name_the_line_that_grew(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(STEP)
    saved = _fieldmem(tmp_path, "--save-baseline", "base.json", "--format", "json", "-o", "before.json")
    assert saved.returncode == 0, saved.stderr
    (tmp_path / "m.py").write_text(GROWN)
    gated = _fieldmem(tmp_path, "--baseline", "base.json", "--top", "3", "--format", "json", "-o", "after.json")
    assert gated.returncode == 1, gated.stdout + gated.stderr
    lines = gated.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("live peak by line"))
    table = "\n".join(lines[at : at + 8])
    assert "m.py:6" in table and "argument x" in table and "plain" in table and "donated" in table
    assert re.search(r"m\.py:6\s+\d+(\.\d)? KiB", table), table  # bytes, then the share
    # the baseline gate names the new line, with its bytes at the peak
    after = json.loads((tmp_path / "after.json").read_text())["results"][0]
    grown = next(x for x in after["variants"]["donated"]["peak"]["lines"] if x["label"].endswith("m.py:6"))
    regression = next(line for line in gated.stdout.splitlines() if "donated live-peak" in line)
    rest = gated.stdout[gated.stdout.index(regression) :]
    assert "at m.py:6" in " ".join(rest.split()[:40]), rest
    assert fieldmem.model.units.format_bytes(grown["bytes"]) in " ".join(rest.split()[:40])
    # fieldmem compare says it the same way
    compared = subprocess.run(
        [sys.executable, "-m", "fieldmem", "compare", "before.json", "after.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert "at m.py:6" in compared.stdout, compared.stdout + compared.stderr
    # and --watch, which words a change as compare does, from the same two reports
    from fieldmem.gate.compare import load_report, result_changes

    (old,) = load_report(tmp_path / "before.json").results
    (new,) = load_report(tmp_path / "after.json").results
    assert old.variants["donated"].peak is not None  # the breakdown reads back from the JSON
    watched = [c.message for c in result_changes(old, new, 1024) if "live peak" in c.message]
    assert any("+256.0 KiB at m.py:6" in message for message in watched), watched


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def example_reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The bundled examples compiled for a GPU and a TPU without the device (the CPU's: test_examples.py)."""
    require_extra("gpu")
    require_extra("tpu")
    folder = tmp_path_factory.mktemp("peak_examples")
    out = folder / "report.json"
    files = sorted(str(f) for f in EXAMPLES.glob("*.py"))
    done = subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", *files, "--backend", "gpu:h100,tpu:v5e", "--format", "json"]
        + ["-o", str(out)],
        cwd=EXAMPLES.parent,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode in (0, 1), done.stderr
    return {
        backend: json.loads((folder / f"report.{backend.replace(':', '-')}.json").read_text())
        for backend in ("gpu:h100", "tpu:v5e")
    }


@pytest.mark.compile
@pytest.mark.parametrize("backend", ["gpu:h100", "tpu:v5e"])
def test_every_examples_peak_has_every_byte_placed_without_the_device(
    example_reports: dict[str, dict[str, Any]], backend: str
) -> None:
    results = example_reports[backend]["results"]
    assert len(results) >= 9
    for result in results:
        for variant in ("plain", "donated"):
            peak = _peak(result, variant)
            for source in peak["sources"]:
                assert source["bytes"] == sum(b["bytes"] for b in source["buffers"])
                if source["kind"] in ("temporary", "output") and source["bytes"] >= 1024:
                    assert source["line"] and "examples/" in source["line"], (result["name"], variant, source)
    if backend == "tpu:v5e":  # tiled layouts: the padding is counted, and is part of the peak
        assert any(_peak(r, "plain")["padding_bytes"] > 0 for r in results)
    # every other memory space with bytes in it (a TPU's VMEM) is broken down at its own peak
    spaces_seen = set()
    for result in results:
        for variant in result["variants"].values():
            figures = {m["memory_space"]: m["live_peak_bytes"] for m in variant["memory"]["memory_spaces"]}
            for breakdown in variant["space_peaks"]:
                space = breakdown["memory_space"]
                spaces_seen.add(space)
                assert space != 0 and breakdown["bytes"] == figures[space] > 0
                assert sum(s["bytes"] for s in breakdown["sources"]) == breakdown["bytes"]
                assert sum(x["bytes"] for x in breakdown["lines"]) == breakdown["bytes"]
            assert {b["memory_space"] for b in variant["space_peaks"]} == {s for s, v in figures.items() if s and v}
    assert (1 in spaces_seen) == (backend == "tpu:v5e")  # VMEM


@pytest.mark.compile
def test_top_adds_a_line_per_memory_space_with_its_largest_lines(example_reports: dict[str, Any]) -> None:
    from fieldmem.model.report import Report
    from fieldmem.render.peak import space_lines

    results = {r.name: r for r in Report.from_dict(example_reports["tpu:v5e"]).results}
    result = results["stencil_scan:diffuse"]
    (vmem,) = [b for b in result.variants["donated"].space_peaks if b.memory_space == 1]
    lines = space_lines(result, 2)
    first = next(line for line in lines if line.startswith("memory space 1 (on a TPU, VMEM): "))
    largest = vmem.lines[0]
    assert f"{fieldmem.model.units.format_bytes(largest.bytes)} at {largest.label}" in first
    assert "donated peak " + fieldmem.model.units.format_bytes(vmem.bytes) in first


@pytest.mark.compile
def test_a_slot_row_names_the_value_that_occupies_it() -> None:
    """-v's rows of the buffers live at the peak (issue 48): an update written into a donated input's buffer is
    named as itself (the output it is returned as) in that input's buffer, never as the input."""
    import fieldmem
    from fieldmem.render import RenderOptions, get_renderer

    def update(u, v):
        return u + v, v

    report = fieldmem.check_function(update, jnp.zeros((128, 128)), jnp.ones((128, 128)), donate="u", min_bytes=1024)
    (result,) = report.results
    rows = result.variants["donated"].live_at_peak
    written = [b for b in rows if b.buffer_of == "u"]
    assert written and all(b.input is None and b.output == "out[0]" for b in written), rows
    assert all(b.input != "u" or (b.instruction and b.instruction.startswith("u")) for b in rows), rows
    text = get_renderer("table").render(report, RenderOptions(verbose=True, width=200))
    assert "in u's buffer" in text and "out[0] (" in text, text
