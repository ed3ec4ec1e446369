"""A static check's XLA:CPU compile, and its GPU compile without the device, stopped once what fieldmem reads
is dumped (``fieldmem.driver.early``).

Every bundled example and flax (linen and nnx), optax and equinox steps (on the CPU, and for an H100
compiled without the device) are checked twice in this process, sharing one run each: with every compile awaited to its end, and with every compile that can
stop early stopped. Each compiled variant must be the same, every field but the timings and the
buffer-assignment bytes (the early one holds XLA's dump instead of ``memory_analysis()``'s serialized
assignment), and so must the report, timings aside. What keeps the full compile (``--run``, ``--probe``,
a TPU without the device, ``--no-fast-compile``) is held to it, and so is the rule that a dump
file still being written is never read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers_backends import installed, require_extra
from typer.testing import CliRunner

from fieldmem.driver import dumped, early, lowering
from fieldmem.frontends.cli import app
from fieldmem.model.readings import CompiledVariant

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "tests" / "assets"
runner = CliRunner()

pytestmark = pytest.mark.compile

EXAMPLES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("*.py"))
LIBRARY_STEPS = [
    *("tests/assets/wrapped_steps.py:nnx_step", "--args", "tests/assets/wrapped_steps.py:nnx_args"),
    *("tests/assets/wrapped_steps.py:eqx_step", "--args", "tests/assets/wrapped_steps.py:eqx_args"),
]
#: memory kinds (host offload) and transfers: where the dump cannot give them exactly, the finished compile does
REGISTERED = ["tests/assets/offload_steps.py", "tests/assets/transfer_steps.py", "tests/assets/models.py"]
#: the bundled examples an H100 compiles without the device (the others need several devices, or a TPU)
GPU_EXAMPLES = [
    f"examples/{name}.py"
    for name in (
        "field",
        "optimizer",
        "train_step",
        "stencil_scan",
        "sparse_row",
        "forward",
        "interior",
        "precision_chain",
        "advisor",
    )
]
H100 = ["--backend", "gpu:h100"]
GROUPS = {
    "examples": EXAMPLES,
    "library": LIBRARY_STEPS,
    "registered": REGISTERED,
    "examples-gpu": GPU_EXAMPLES + H100,
    "library-gpu": LIBRARY_STEPS + H100,
}

#: CompiledVariant fields that differ between two compiles of one program without saying anything else
_TIMES = ("lower_seconds", "compile_seconds")
#: the inputs of the buffer analysis: a finished XLA:CPU compile gives memory_analysis()'s serialized
#: assignment and module, an early one XLA's dump (the report read from either is held equal below)
_BUFFERS = ("buffer_assignment", "hlo_module_proto", "hlo_proto")


def _steady(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _steady(v) for k, v in value.items() if not (k.endswith("seconds") or k == "created")}
    if isinstance(value, list):
        return [_steady(v) for v in value]
    return value


def _check(args: list[str], monkeypatch: pytest.MonkeyPatch, stop: int) -> tuple[dict[str, Any], list[Any], int]:
    """The JSON report of ``args`` checked in this process, every compiled variant in order, and how many
    compiles stopped early (``stop``: compiles may stop early)."""
    variants: list[CompiledVariant] = []
    stopped = [0]
    read = lowering.read_variant
    until = early.compile_until_assigned

    def recorded(*a: Any, **k: Any) -> Any:
        variant, outputs = read(*a, **k)
        variants.append(variant)
        return variant, outputs

    def counted(*a: Any, **k: Any) -> Any:
        compiled, was_early = until(*a, **k)
        stopped[0] += was_early
        return compiled, was_early

    import jax

    jax.clear_caches()  # a lowering jax cached from the run before comes without its warnings
    with monkeypatch.context() as patch:
        patch.setattr(lowering, "read_variant", recorded)
        patch.setattr(early, "compile_until_assigned", counted)
        early.stop_early(bool(stop))
        try:
            result = runner.invoke(app, ["check", *args, "--no-isolate", "-j", "1", "--no-cache", "-f", "json"])
        finally:
            early.stop_early(False)
            assert early.wait_abandoned(120)
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout), variants, stopped[0]


def _fields(variant: CompiledVariant) -> dict[str, Any]:
    return {f.name: getattr(variant, f.name) for f in dataclasses.fields(variant) if f.name not in _TIMES + _BUFFERS}


@pytest.mark.parametrize("label", list(GROUPS))
def test_an_early_stopped_compile_reads_as_the_finished_one(label: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every field of every compiled variant (its HLO text, every ``memory_analysis()`` figure, the buffer
    analysis) and the whole report, stopped early against awaited; for an H100 compiled without the device
    too, where the peak follows XLA:GPU's rule and the text is the module rebuilt from its proto."""
    if label.endswith("-gpu"):
        require_extra("gpu")
    monkeypatch.chdir(ROOT)
    args = GROUPS[label]
    # both from this one line: jax records the Python stack, this test's line among it, in the HLO's text
    (full, full_variants, none), (stopped, stopped_variants, count) = (_check(args, monkeypatch, s) for s in (0, 1))
    assert none == 0
    assert count > 0.5 * len(stopped_variants), (count, len(stopped_variants))  # most stopped early
    assert len(stopped_variants) == len(full_variants)
    for before, after in zip(full_variants, stopped_variants, strict=True):
        assert _fields(after) == _fields(before), before.name
        has_buffers = before.buffer_assignment is not None or before.hlo_proto is not None
        assert (after.buffer_assignment is not None or after.hlo_proto is not None) == has_buffers
    assert _steady(stopped) == _steady(full)


def _lowered(function: Any, *args: Any) -> Any:
    import jax

    return jax.jit(function).lower(*args)


def test_what_runs_or_leaves_xla_cpu_keeps_the_full_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """--run, --probe, --no-fast-compile and a TPU compiled without the device keep the full compile; a static
    XLA:CPU compile and a GPU compiled without the device may stop."""
    import jax.numpy as jnp

    from fieldmem.driver.deviceless import deviceless_scope, target
    from fieldmem.model.errors import CompileError

    calls: list[object] = []

    def asked(*a: object, **k: object) -> None:  # the early path asked for the compile: it goes no further
        calls.append(a)
        raise RuntimeError("asked to stop early")

    monkeypatch.setattr(early, "compile_until_assigned", asked)
    early.stop_early(True)
    try:
        x = jnp.ones((8, 8))
        lowering.compile_lowered(_lowered(lambda v: v + 1, x), fast=False)  # --run, --probe, --no-fast-compile
        assert calls == []
        for backend in ("tpu:v5e", "gpu:h100"):
            if installed(backend.split(":")[0]):
                found = target(backend)
                with deviceless_scope(found), contextlib.suppress(CompileError):
                    lowering.compile_lowered(_lowered(lambda v: v + 1, x), fast=True, found=found)
        # a TPU without the device: through its dump, to the end; an H100 without the device may stop
        assert len(calls) == installed("gpu"), calls
        calls.clear()
        with pytest.raises(CompileError, match="asked to stop early"):  # a static XLA:CPU compile may stop
            lowering.compile_lowered(_lowered(lambda v: v * 2, x), fast=True)
        assert len(calls) == 1
    finally:
        early.stop_early(False)
    early.stop_early(False)
    monkeypatch.undo()
    compiled, _, _ = lowering.compile_lowered(_lowered(lambda v: v - 1, x), fast=True)
    assert type(compiled.runtime_executable()).__name__ != "_FromDump"  # not asked: the full compile


def test_a_dump_still_being_written_is_never_read(tmp_path: Path) -> None:
    watch = early._Watch(str(tmp_path))
    done = threading.Event()
    try:
        text = tmp_path / "module_0001.jit_f.cpu_after_optimizations.txt"
        text.write_text("HloModule jit_f\n")
        with open(tmp_path / "module_0001.jit_f.cpu_after_optimizations.hlo.pb", "wb") as module:
            module.write(b"\x0a\x00")
            module.flush()
            threading.Timer(0.3, done.set).start()
            started = time.monotonic()
            assert watch.wait(done) is False  # open for writing: not ready, however long it waits
            assert time.monotonic() - started >= 0.25
        assert watch.wait(threading.Event()) is True  # closed after writing: ready
    finally:
        watch.close()


def test_a_dump_removed_while_it_is_read_leaves_the_finished_compile_to_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compile can end (and its folder go) between the dump being ready and its reading: no error, the
    finished compile answers (a race seen once in 16 checks of 20 small functions)."""

    def removed(self: Path, pattern: str) -> Any:
        raise FileNotFoundError(2, "No such file or directory", str(self))

    monkeypatch.setattr(Path, "glob", removed)
    assert early._from_dump(str(tmp_path), []) is None


def test_the_watch_is_not_fooled_by_other_files(tmp_path: Path) -> None:
    watch = early._Watch(str(tmp_path))
    done = threading.Event()
    try:
        for name in (
            "module_0001.jit_f.before_optimizations.txt",
            "module_0001.jit_f.before_optimizations.hlo.pb",
            "module_0001.jit_f.cpu_after_optimizations-buffer-assignment.txt",
            "module_0001.jit_f.cpu_after_optimizations.hlo.pb",  # the module, without its text yet
        ):
            (tmp_path / name).write_bytes(b"x")
        threading.Timer(0.2, done.set).start()
        assert watch.wait(done) is False
        (tmp_path / "module_0001.jit_f.cpu_after_optimizations.txt").write_bytes(b"x")
        assert watch.wait(threading.Event()) is True
    finally:
        watch.close()


def test_the_executable_prints_each_backend_config_with_sorted_keys() -> None:
    # recorded from examples/stencil_scan.py (XLA:CPU, jaxlib 0.10.2): the dumped line, then as_text()'s
    dumped_line = (
        "  %while.5 = (s32[], f32[1024,1024]{1,0}) while(%tuple), condition=%region_1.7, body=%region_0.6, "
        'backend_config={"known_trip_count":{"n":"40"},"known_init_step":{"init":"0","step":"1"},'
        '"known_induction_variable":{"tuple_index":"0"},"dynamic_variables":[]}\n'
    )
    printed = (
        "  %while.5 = (s32[], f32[1024,1024]{1,0}) while(%tuple), condition=%region_1.7, body=%region_0.6, "
        'backend_config={"dynamic_variables":[],"known_induction_variable":{"tuple_index":"0"},'
        '"known_init_step":{"init":"0","step":"1"},"known_trip_count":{"n":"40"}}\n'
    )
    other = '  %x.1 = f32[4]{0} parameter(0), metadata={op_name="x"}\n'
    assert dumped.executable_text("HloModule m\n\n" + other + dumped_line + "}\n\n") == (
        "HloModule m\n\n" + other + printed + "}\n\n"
    )
    # a config that is not JSON stays as dumped
    odd = "  %c = f32[] custom-call(), backend_config=opaque-bytes\n"
    assert dumped.executable_text(odd) == odd


def _message(fields: list[tuple[int, int | bytes]]) -> bytes:
    out = b""
    for number, value in fields:
        if isinstance(value, bytes):
            out += _varint(number << 3 | 2) + _varint(len(value)) + value
        else:
            out += _varint(number << 3) + _varint(value)
    return out


def test_memory_analysis_figures_come_from_the_dumped_allocations() -> None:
    from fieldmem.xla._proto import BufferAssignmentProto, HloProtoParts

    assignment = BufferAssignmentProto()
    rows = [  # size, parameter, live out, thread-local, constant, colour
        (1024, True, True, False, False, 0),  # a donated argument: argument, alias, output
        (512, True, False, False, False, 0),  # an argument
        (256, False, True, False, False, 0),  # an output
        (4096, False, False, False, False, 0),  # a temporary: not in XLA:CPU's peak
        (64, False, False, True, False, 0),  # thread-local: nowhere
        (8, False, False, False, True, 0),  # a constant: in the peak only
        (128, True, False, False, False, 5),  # an argument in host memory
        (32, False, False, False, False, 5),  # a temporary in host memory
    ]
    for size, parameter, out, local, constant, color in rows:
        a = assignment.buffer_allocations.add()
        a.size, a.is_entry_computation_parameter, a.maybe_live_out = size, parameter, out
        a.is_thread_local, a.is_constant, a.color = local, constant, color
    parts = HloProtoParts()
    parts.buffer_assignment = assignment.SerializeToString()
    parts.hlo_module = _message([(1, b"jit_f")])
    stats = dumped.dumped_stats(parts.SerializeToString())
    assert (stats.argument_size_in_bytes, stats.alias_size_in_bytes, stats.output_size_in_bytes) == (1536, 1024, 1280)
    assert (stats.temp_size_in_bytes, stats.host_argument_size_in_bytes, stats.host_temp_size_in_bytes) == (
        4096,
        128,
        32,
    )
    assert stats.peak_memory_in_bytes == 1024 + 512 + 256 + 8 + 128
    assert stats.generated_code_size_in_bytes is None  # no code exists yet: never 0
    assert dumped.module_of(parts.SerializeToString()) == _message([(1, b"jit_f")])
    with pytest.raises(ValueError, match="runs past the end"):
        dumped.allocations(b"\x1a\xff")  # a field running past the end


def _gpu_assignment(traces: list[list[tuple[int, int, int]]], temporaries: int = 1) -> bytes:
    """An ``HloProto`` whose assignment has an argument (1000 B), an output (100 B), a constant (10 B), a
    thread-local allocation (7 B), ``temporaries`` temporary allocations (4096 B each), and logical buffers
    1-4 of 1000, 300, 200 and 50 B in the first of them; ``traces``: events (kind, buffer, shared with)."""
    from fieldmem.xla._proto import BufferAssignmentProto, HloProtoParts

    assignment = BufferAssignmentProto()
    for buffer, size in ((10, 1000), (11, 100), (12, 10), (13, 7), (1, 1000), (2, 300), (3, 200), (4, 50)):
        logical = assignment.logical_buffers.add()
        logical.id, logical.size = buffer, size
    rows = [(1000, True, False, False, False, [10]), (100, False, True, False, False, [11])]
    rows += [(10, False, False, False, True, [12]), (7, False, False, True, False, [13])]
    rows += [(4096, False, False, False, False, [1, 2, 3] if n == 0 else [4]) for n in range(temporaries)]
    for index, (size, parameter, out, local, constant, held) in enumerate(rows):
        a = assignment.buffer_allocations.add()
        a.index, a.size, a.is_entry_computation_parameter, a.maybe_live_out = index, size, parameter, out
        a.is_thread_local, a.is_constant = local, constant
        for buffer in held:
            a.assigned.add().logical_buffer_id = buffer
    for events in traces:
        trace = assignment.heap_simulator_traces.add()
        for kind, buffer, shared in events:
            event = trace.events.add()
            event.kind, event.buffer_id, event.share_with_canonical_id = kind, buffer, shared
    parts = HloProtoParts()
    parts.buffer_assignment = assignment.SerializeToString()
    parts.hlo_module = _message([(1, b"jit_f")])
    return parts.SerializeToString()


ALLOC, FREE, SHARE = 0, 1, 2


def test_xla_gpus_peak_replays_the_heap_trace_over_what_lasts() -> None:
    """XLA:GPU's peak (``ComputePeakMemorySizes``): arguments, outputs and constants (not thread-local
    allocations) plus the trace's highest point, a shared buffer counted once while its canonical one lives
    and again when it takes the memory back after that was freed. Held to the finished compile on every
    bundled example and library step above; here each part of the rule on its own."""
    lasting = 1000 + 100 + 10  # the thread-local 7 B are not counted
    assert dumped.gpu_peak(_gpu_assignment([])) == lasting  # no trace: nothing temporary at once
    simple = [(ALLOC, 1, 0), (ALLOC, 2, 0), (FREE, 1, 0), (ALLOC, 3, 0), (FREE, 2, 0), (FREE, 3, 0)]
    assert dumped.gpu_peak(_gpu_assignment([simple])) == lasting + 1300
    shared = [(ALLOC, 1, 0), (SHARE, 2, 1), (ALLOC, 3, 0), (FREE, 2, 0), (FREE, 1, 0), (FREE, 3, 0)]
    assert dumped.gpu_peak(_gpu_assignment([shared])) == lasting + 1200  # 2 lives in 1's memory
    taken_back = [(ALLOC, 1, 0), (FREE, 1, 0), (SHARE, 2, 1), (ALLOC, 3, 0), (FREE, 2, 0), (FREE, 3, 0)]
    assert dumped.gpu_peak(_gpu_assignment([taken_back])) == lasting + 1200  # 1's memory taken again by 2
    stats = dumped.dumped_stats(_gpu_assignment([simple]), "gpu")
    assert stats.peak_memory_in_bytes == lasting + 1300
    assert dumped.dumped_stats(_gpu_assignment([simple])).peak_memory_in_bytes == lasting  # XLA:CPU's rule
    assert stats.generated_code_size_in_bytes is None


def test_xla_gpus_peak_is_not_given_where_the_rule_is_not_decided() -> None:
    """Two temporary allocations with traces (XLA takes one in a hash map's order), a buffer freed twice, a trace
    of two allocations' buffers: no peak, and the stand-in is never made (the compile is awaited)."""
    first, second = [(ALLOC, 1, 0), (FREE, 1, 0)], [(ALLOC, 4, 0), (FREE, 4, 0)]
    assert dumped.gpu_peak(_gpu_assignment([first, second], temporaries=2)) is None
    assert dumped.gpu_peak(_gpu_assignment([first], temporaries=2)) == 1110 + 1000  # one trace: no choice
    assert dumped.gpu_peak(_gpu_assignment([[(ALLOC, 1, 0), (FREE, 1, 0), (FREE, 1, 0)]])) is None
    mixed = [(ALLOC, 1, 0), (ALLOC, 10, 0), (FREE, 1, 0), (FREE, 10, 0)]
    assert dumped.gpu_peak(_gpu_assignment([mixed])) is None
    with pytest.raises(ValueError, match="not had exactly"):
        dumped.dumped_stats(_gpu_assignment([first, second], temporaries=2), "gpu")


def test_what_xla_gpu_says_of_its_own_figures_is_kept_from_a_stopped_compile() -> None:
    """XLA:GPU's scheduler doubts its figures (arguments and outputs past 80% of the H100's memory) in the thread
    that compiles: a compile stopped early keeps those words as the awaited one does (the verdict then says
    the figures are not told)."""
    require_extra("gpu")
    import jax
    import jax.numpy as jnp
    from jax.sharding import SingleDeviceSharding

    from fieldmem.driver import dumps
    from fieldmem.driver.deviceless import deviceless_scope, target

    found = target("gpu:h100")
    whole = jax.ShapeDtypeStruct((2**34,), jnp.float32, sharding=SingleDeviceSharding(found.devices[0]))
    said = []
    for stop in (False, True):
        early.stop_early(stop)
        try:
            with deviceless_scope(found):
                compiled, _, _ = lowering.compile_lowered(_lowered(lambda v: v * 2, whole), fast=True, found=found)
        finally:
            early.stop_early(False)
        notes = dumps.compile_notes(compiled)
        assert notes is not None and early.stood_in(compiled) is stop
        said.append([line.split("] ", 1)[1] for line in notes.doubts])
    assert early.wait_abandoned(60)
    assert said[0] == said[1] and "This indicates an error in the calculation" in said[0][0], said


def test_a_worker_stops_early_for_a_static_check_unless_told_not_to(monkeypatch: pytest.MonkeyPatch) -> None:
    from fieldmem.model.codec import dumps as encode
    from fieldmem.request.options import CheckOptions
    from fieldmem.worker import main as worker

    cases = [(CheckOptions(jobs=2), "1", True), (CheckOptions(jobs=2, run=True), "1", False)]
    cases += [(CheckOptions(jobs=2), None, True), (CheckOptions(jobs=2), "0", False)]  # "0": the full compile
    cases += [(CheckOptions(jobs=2, fast_compile=False), None, False)]
    for options, asked, expected in cases:
        if asked is None:
            monkeypatch.delenv("FIELDMEM_EARLY_STOP", raising=False)
        else:
            monkeypatch.setenv("FIELDMEM_EARLY_STOP", asked)
        request = {"check_options": json.loads(encode(options)), "specs": [], "todo": []}
        try:
            with open(os.devnull, "w") as events:
                worker._Worker(request, events, None)  # type: ignore[arg-type]
            assert early._asked[0] is expected
        finally:
            early.stop_early(False)


def test_a_dump_the_user_asked_for_keeps_the_full_compile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """XLA_FLAGS=--xla_dump_to=DIR: the user's folder gets XLA's whole dump, so nothing stops early."""
    from fieldmem.request.options import user_dumps

    assert not user_dumps({"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    assert not user_dumps({})
    assert user_dumps({"XLA_FLAGS": f"--xla_force_host_platform_device_count=2 --xla_dump_to={tmp_path}"})
    early.stop_early(True)
    try:
        monkeypatch.setenv("XLA_FLAGS", f"--xla_dump_to={tmp_path}")
        assert not early.can_stop_early()
        monkeypatch.delenv("XLA_FLAGS")
        assert early.can_stop_early()
    finally:
        early.stop_early(False)


def test_verbose_says_where_compiles_stop_early(monkeypatch: pytest.MonkeyPatch) -> None:
    from fieldmem.request.options import CheckOptions, early_stop_said

    static = CheckOptions(jobs=1)
    asked = {"FIELDMEM_EARLY_STOP": "1"}
    stops = "XLA:CPU compiles, and GPU compiles without the device, stop once XLA has dumped"
    assert early_stop_said(static, asked, (None,)).startswith(stops)
    assert early_stop_said(static, {}, (None,)) == early_stop_said(static, asked, (None,))  # the default
    said = early_stop_said(static, {"FIELDMEM_EARLY_STOP": "0"}, (None,))
    assert said == "every compile runs to its end (FIELDMEM_EARLY_STOP=0)", said
    dumping = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2 --xla_dump_to=/tmp/mine"}
    assert "XLA_FLAGS asks XLA to dump" in early_stop_said(static, dumping, (None,))
    assert "(--run: the code generation is needed)" in early_stop_said(CheckOptions(jobs=1, run=True), asked, (None,))
    assert "(--no-fast-compile" in early_stop_said(CheckOptions(jobs=1, fast_compile=False), asked, (None,))
    assert "TPU compiles do" in early_stop_said(static, asked, ("tpu:v5e", "tpu:v4:2x2"))
    assert early_stop_said(static, asked, ("gpu:h100", "tpu:v5e")).startswith(stops)  # the H100's stop
    cached = early_stop_said(static, asked, (None,), cached=True)
    assert cached.startswith(stops), cached
    assert "each dump is kept in the persistent cache folder under jax's key" in cached
    monkeypatch.chdir(ROOT)
    result = runner.invoke(app, ["check", "examples/field.py", "--no-isolate", "-j", "1", "--no-cache", "-v"])
    assert result.exit_code in (0, 1), result.output
    assert "every compile runs to its end in this process (--no-isolate)" in result.stderr


def _kept_requests(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, bool, str | None]]:
    """Each early request's (stopped, answered by a kept dump, jax's key), in order, from here on."""
    seen: list[tuple[bool, bool, str | None]] = []
    original = early._Request.compile

    def recorded(self: Any, *args: Any) -> Any:
        try:
            return original(self, *args)
        finally:
            seen.append((self.stopped, self.answered, self.key))

    monkeypatch.setattr(early._Request, "compile", recorded)
    return seen


def _layers(v: Any) -> Any:
    """A program whose code generation outlasts the dump (so that its compile stops early)."""
    import jax.numpy as jnp

    for i in range(24):
        v = jnp.tanh(v) @ v + i
    return v


def test_with_the_persistent_cache_on_a_stopped_compile_keeps_its_dump_for_a_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jax
    import jax.numpy as jnp

    from fieldmem.driver import compilation_cache, kept

    x = jnp.ones((8, 8))
    seen = _kept_requests(monkeypatch)
    cache = tmp_path / "cache"
    early.stop_early(True)
    try:
        compiled = []
        with compilation_cache(str(cache)):
            assert early.persistent_cache_in_use()
            folder = early.kept_folder()
            assert folder == cache / kept.FOLDER
            # a key without the source locations (a cache of the user's own): nothing kept, the full compile
            jax.config.update("jax_compilation_cache_include_metadata_in_key", False)
            try:
                assert early.kept_folder() is None
            finally:
                jax.config.update("jax_compilation_cache_include_metadata_in_key", True)
            for attempt in range(3):  # one line: one source location, so one key
                if attempt == 2:  # the kept file, made unreadable: a miss, the compile runs again and keeps it
                    assert early.wait_abandoned(60)  # the first compile's code generation ended, and wrote nothing
                    assert not list(cache.glob("*-cache"))  # of jax's: the kept dump is the entry
                    (key,) = [p.name for p in folder.iterdir()]
                    (folder / key).write_bytes(kept.MAGIC + b"not zlib")
                jax.clear_caches()
                compiled.append(lowering.compile_lowered(_lowered(_layers, x), fast=True)[0])
        assert not early.persistent_cache_in_use()
    finally:
        early.stop_early(False)
        assert early.wait_abandoned(60)
    # stopped early and kept; answered from what was kept, without compiling; the damaged one compiled again
    assert [(s, a) for s, a, _ in seen[:2]] == [(True, False), (True, True)], seen
    assert not seen[2][1]  # not answered from the damaged file
    assert {k for _, _, k in seen} == {key}
    first, rerun, _ = (c.runtime_executable() for c in compiled)
    assert rerun.hlo_proto == first.hlo_proto  # what was kept, byte for byte
    assert compiled[1].as_text() == compiled[0].as_text()
    assert vars(compiled[1].memory_analysis()) == vars(compiled[0].memory_analysis())
    stats = compiled[2].memory_analysis()
    assert stats.temp_size_in_bytes == compiled[0].memory_analysis().temp_size_in_bytes


def test_the_module_xla_dumps_as_it_loads_jax_cache_entry_is_never_read_as_a_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where jax's persistent cache has the executable, XLA:CPU dumps the module it loads under the same suffix,
    without a buffer assignment. Read as the compile's dump it gave every figure as 0 (a report of zeros, seen in
    CI when the watch saw that dump before the load returned): the loaded executable answers instead. The load is
    held back here so that the dump is always seen first."""
    import jax
    import jax.numpy as jnp

    from fieldmem.driver import compilation_cache

    x = jnp.ones((8, 8))
    seen = _kept_requests(monkeypatch)
    original = early._Request.compile

    def late(self: Any, compile_: Any, args: Any) -> Any:
        def held_back(*a: Any) -> Any:
            result = compile_(*a)
            time.sleep(0.3)  # the dump, written during the load, is whole by now: the watch sees it first
            return result

        return original(self, held_back, args)

    watch_wait = early._Watch.wait

    def after_the_compile(self: Any, done: threading.Event) -> bool:
        done.wait()
        return watch_wait(self, done)

    cache = tmp_path / "cache"
    early.stop_early(True)
    try:
        with compilation_cache(str(cache)):
            compiled = []
            for attempt in range(2):  # one line: one source location, so one key
                with monkeypatch.context() as patch:
                    # first a compile that ends before its dump is seen (as a small one does): jax writes its
                    # entry; then jax loads it, and the load is held back
                    if attempt == 0:
                        patch.setattr(early._Watch, "wait", after_the_compile)
                    else:
                        assert list(cache.glob("*-cache")), "jax wrote no entry"
                        patch.setattr(early._Request, "compile", late)
                    jax.clear_caches()
                    compiled.append(lowering.compile_lowered(_lowered(_layers, x), fast=True)[0])
            full, loaded = compiled
    finally:
        early.stop_early(False)
        assert early.wait_abandoned(60)
    assert seen[-1][:2] == (False, False), seen  # not stopped, not answered from a kept dump: jax's entry
    assert not early.stood_in(loaded)

    def figures(compiled: Any) -> dict[str, int]:
        stats = compiled.memory_analysis()
        return {name: getattr(stats, name) for name in dir(stats) if name.endswith("_in_bytes")}

    assert figures(loaded) == figures(full)
    assert figures(loaded)["argument_size_in_bytes"] == x.nbytes


def test_a_dump_without_a_buffer_assignment_is_told_apart(tmp_path: Path) -> None:
    """What XLA dumps as it loads an executable has the module alone (every figure would read as 0): neither
    the early stop nor an accelerator compile's reading (``dumps.read_dump``) takes it for the compile's."""
    from fieldmem.driver import dumps

    module = _message([(1, b"jit_f")])
    allocation = _message([(2, 64), (5, 1)])  # 64 bytes, an entry parameter
    compiled = _message([(1, module), (3, _message([(3, allocation)]))])
    assert dumped.has_assignment(compiled)
    assert not dumped.has_assignment(_message([(1, module)]))
    assert not dumped.has_assignment(b"not a message \xff")
    (tmp_path / "module_0001.jit_f.after_optimizations.hlo.pb").write_bytes(_message([(1, module)]))
    assert dumps.read_dump(str(tmp_path)) is None
    (tmp_path / "module_0002.jit_f.tpu_after_optimizations.hlo.pb").write_bytes(compiled)
    assert dumps.read_dump(str(tmp_path)) == compiled


def test_a_kept_dump_is_whole_or_a_miss(tmp_path: Path) -> None:
    from fieldmem.driver import kept

    assert kept.folder_of(None) is None
    assert kept.folder_of("gs://bucket/cache") is None  # not local: nothing kept, the compile runs to its end
    assert kept.folder_of(str(tmp_path)) == tmp_path / kept.FOLDER
    folder = tmp_path / kept.FOLDER
    assert kept.load(folder, "jit_f-00") is None  # no folder yet
    assert kept.save(folder, "jit_f-00", b"\x0a\x01m", "HloModule f")
    assert kept.load(folder, "jit_f-00") == (b"\x0a\x01m", "HloModule f")
    assert [p.name for p in folder.iterdir()] == ["jit_f-00"]  # no temporary file left
    assert not kept.save(folder, "../escape", b"", "")  # not one of jax's keys
    assert kept.load(folder, "../escape") is None
    whole = (folder / "jit_f-00").read_bytes()
    for broken in (whole[:-3], b"other" + whole, kept.MAGIC):
        (folder / "jit_f-00").write_bytes(broken)
        assert kept.load(folder, "jit_f-00") is None
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert not kept.save(blocked / kept.FOLDER, "jit_f-00", b"", "")  # cannot be written: not an error


def test_a_rerun_reads_the_kept_dumps_and_says_the_same(tmp_path: Path) -> None:
    """Two checks of flax and equinox steps in workers, the cache on: the second answers every compile the first
    stopped from what it kept (no compile: no kept file written again, no entry of jax's under those keys) and
    says the same."""
    import subprocess
    import sys

    from fieldmem.driver import kept

    cache = tmp_path / "cache"
    folder = cache / kept.FOLDER
    env = {**os.environ, "FIELDMEM_EARLY_STOP": "1"}
    env.pop("XLA_FLAGS", None)
    reports, written = [], []
    for _ in range(2):
        for entry in (*cache.glob("*-cache"), *cache.glob("*-atime")):
            entry.unlink()  # jax's entries (an abandoned code generation that ended wrote one): only kept dumps
        command = [sys.executable, "-m", "fieldmem", "check", *LIBRARY_STEPS, "--cache-dir", str(cache), "-f", "json"]
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode in (0, 1), done.stderr
        reports.append(json.loads(done.stdout))
        written.append({p.name: p.stat().st_ino for p in folder.iterdir()})
    assert written[0], "the first check kept nothing"
    assert written[1] == written[0]  # nothing kept again: no compile stopped early in the rerun
    loaded_by_jax = {p.name.removesuffix("-cache") for p in cache.glob("*-cache")}
    assert not loaded_by_jax & set(written[0])  # nor compiled in full
    assert _steady(reports[1]) == _steady(reports[0])


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes | int) -> bytes:
    if isinstance(payload, int):
        return _varint(number << 3) + _varint(payload)
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _shape_proto(element_type: int, dims: tuple[int, ...], layout: bytes | None = None, **extra: bytes) -> bytes:
    data = _field(2, element_type) + _field(3, b"".join(_varint(d) for d in dims))
    if layout is not None:
        data += _field(5, layout)
    return data + b"".join(extra.values())


def _module(parameters: list[bytes], result: bytes) -> bytes:
    program = b"".join(_field(1, p) for p in parameters) + _field(2, result)
    return _field(1, b"jit_f") + _field(4, program)


def _minor_to_major(*order: int) -> bytes:
    return _field(1, b"".join(_varint(d) for d in order)) + _field(16, 1)


@pytest.mark.parametrize(
    ("layout", "plain"),
    [
        (_minor_to_major(1, 0), True),
        (_minor_to_major(0, 1), True),  # another dimension order is still only an order
        (_minor_to_major(1, 0) + _field(8, 1), False),  # a memory space: jax's memory kind would be a guess
        (_minor_to_major(1, 0) + _field(6, _field(1, b"\x08\x80\x01")), False),  # tiles
        (_minor_to_major(1, 0) + _field(7, 4), False),  # an element size in bits (int4)
        (_minor_to_major(1, 0, 1), False),  # not a permutation of the dimensions
    ],
)
def test_entry_shapes_are_read_from_the_proto_and_only_plain_layouts_pass(layout: bytes, plain: bool) -> None:
    # pure: no compile (the compile test below holds the reading to XLA's own)
    module = _module([_shape_proto(11, (3, 4), layout)], _shape_proto(11, (3, 4), _minor_to_major(1, 0)))
    found = dumped.entry_shapes(module)
    assert found is not None
    (parameter,), (result,) = found
    assert (parameter.element_type, parameter.dimensions, parameter.plain) == (11, (3, 4), plain)
    assert result.plain


def test_entry_shapes_refuse_what_the_stand_in_cannot_answer() -> None:
    array = _shape_proto(11, (2,), _minor_to_major(0))
    tuple_shape = _field(2, 13) + _field(4, array) + _field(4, array)
    nested = _field(2, 13) + _field(4, tuple_shape)
    assert dumped.entry_shapes(_field(1, b"jit_f")) is None  # no program shape
    assert dumped.entry_shapes(_module([tuple_shape], array)) is None  # a tuple parameter
    assert dumped.entry_shapes(_module([array], nested)) is None  # a tuple inside the result tuple
    found = dumped.entry_shapes(_module([array], tuple_shape))
    assert found is not None and [r.dimensions for r in found[1]] == [(2,), (2,)]
    token = dumped.entry_shapes(_module([_shape_proto(17, ())], array))
    assert token is not None and not token[0][0].plain
    dynamic = _shape_proto(11, (2,), _minor_to_major(0), dyn=_field(6, b"\x01"))
    found = dumped.entry_shapes(_module([dynamic], array))
    assert found is not None and not found[0][0].plain
    with pytest.raises(ValueError, match="runs past the end"):
        dumped.entry_shapes(b"\x0a\xff")  # a field running past the end


def test_the_stand_in_gives_xlas_own_entry_shapes(tmp_path: Path) -> None:
    """The shapes and layouts read from the dumped proto are those XLA builds from the same module."""
    import jax
    import jax.numpy as jnp
    from jax._src.lib import xla_client

    cases = [
        (lambda x: x + 1, (jnp.ones((3, 4)),)),
        (lambda x, y: (x.T, y.astype(jnp.bfloat16), x.sum()), (jnp.ones((3, 4)), jnp.ones((5,), jnp.int8))),
        (lambda x: x, (jnp.float32(1.0),)),
        (lambda x, b: (x * 2, b & True), (jnp.ones((2, 3, 4), jnp.int32), jnp.ones((7,), bool))),
        (lambda x: x + 1, (jnp.ones((4,), jnp.complex64),)),
        (lambda x: x * 2, (jnp.ones((4,), jnp.int4),)),  # element size in its layout: not plain, awaited
    ]
    for n, (function, args) in enumerate(cases):
        folder = tmp_path / str(n)
        jax.jit(function).lower(*args).compile(compiler_options=early.dump_options(str(folder)))
        (dump,) = folder.glob("*" + early.MODULE_SUFFIX)
        hlo_proto = dump.read_bytes()
        shape = xla_client.hlo.XlaComputation(dumped.module_of(hlo_proto)).program_shape()
        result = shape.result_shape()
        theirs = [
            str(s) for s in [*shape.parameter_shapes(), *(result.tuple_shapes() if result.is_tuple() else [result])]
        ]
        stand_in = early._FromDump(hlo_proto, "", jax.devices())
        ours = [str(s) for s in [*stand_in._parameters, *stand_in._results]]
        if stand_in.exact():
            assert ours == theirs, n
        else:
            assert any(":E(" in s for s in theirs), theirs  # only the int4 case leaves the layout's order


class _Compiled:
    """What ``stood_in`` and ``_MemoryAnalysis`` ask of jax's ``Compiled``: its executable and its analysis."""

    def __init__(self, executable: Any) -> None:
        self.executable = executable
        self.threads: list[str] = []

    def runtime_executable(self) -> Any:
        if isinstance(self.executable, Exception):
            raise self.executable
        return self.executable

    def memory_analysis(self) -> str:
        self.threads.append(threading.current_thread().name)
        return "figures"


def test_a_stopped_compiles_memory_analysis_is_read_in_the_calling_thread() -> None:
    from fieldmem.driver.variant import _MemoryAnalysis

    stand_in = _Compiled(object.__new__(early._FromDump))  # its answers come from the dump, in Python
    full = _Compiled(object())  # an executable of XLA's: its analysis is C++, in a thread of its own
    assert early.stood_in(stand_in) and not early.stood_in(full)
    assert not early.stood_in(_Compiled(RuntimeError("no executable"))) and not early.stood_in(object())
    for compiled, thread in ((stand_in, threading.current_thread().name), (full, "fieldmem-memory-analysis")):
        assert _MemoryAnalysis(compiled).result() == "figures"
        assert compiled.threads == [thread]
