"""Will it fit? Device memory, `--expect fits`, the verdict "does not fit", topology limits and host callbacks
on deviceless backends (issue 29, item 5).

The arguments are ``jax.ShapeDtypeStruct``s: a 1 TiB argument costs nothing to compile for a GPU or TPU
without one. Each backend's cases are checked in one run (a module fixture) and read by several tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers_backends import require_extra

from fieldmem.findings.capacity import fit_check, fit_findings
from fieldmem.findings.verdict import RULES, decide, expectation_met, judge
from fieldmem.model.errors import OptionError
from fieldmem.model.memory import MemoryFigures
from fieldmem.model.readings import CompiledVariant, DeviceMemory
from fieldmem.model.verdict import Finding, Verdict
from fieldmem.request.backends import (
    DEVICELESS_ENV,
    GPU_DOMAINS,
    GPU_KINDS,
    TPU_HBM,
    TPU_KINDS,
    device_memory,
    gpu_spec_text,
    parse_backend,
)

ROOT = Path(__file__).resolve().parents[2]
GiB = 2**30
TiB = 2**40

# ---- topology limits (pure) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("gpu:h100:100000", "at most 256 GPUs: fieldmem compiles them as one host"),
        ("gpu:h100:257", "the largest such set of H100s is the NVLink Switch System (256)"),
        ("gpu:a100:32", "at most 16 GPUs"),
        ("gpu:b200:100", "at most 72 GPUs"),
        ("tpu:v5e:32x32", "no tpu:v5e slice is that large: a v5e pod is 16x16, 256 chips"),
        ("tpu:v6e:1x256", "no tpu:v6e slice is that large"),
        ("tpu:v5p:24x24x24", "the largest v5p slice is 16x16x24, 6144 chips"),
        ("tpu:v4:16x16x32", "a v4 pod has 4096 chips"),
        ("tpu:v5p:2x4x8", "every axis at most 4 (2x2x1, 2x4x4) or every axis a multiple of 4"),
    ],
)
def test_topologies_stay_within_the_real_products(text: str, says: str) -> None:
    with pytest.raises(OptionError) as raised:
        parse_backend(text)
    assert says in raised.value.message
    assert "\n" not in raised.value.message


@pytest.mark.parametrize(
    ("text", "chips"),
    [
        ("gpu:h100:256", 256),
        ("gpu:a100:16", 16),
        ("gpu:b200:72", 72),
        ("tpu:v5e:16x16", 256),
        ("tpu:v6e:8x16", 128),
        ("tpu:v5p:16x24x16", 6144),
        ("tpu:v4:12x12x24", 3456),
        ("tpu:v5p:2x4x4", 32),
        ("tpu:v4:1x1x1", 1),
    ],
)
def test_the_largest_real_topologies_are_accepted(text: str, chips: int) -> None:
    assert parse_backend(text).chips == chips


def test_every_gpu_kind_has_a_domain_and_every_tpu_kind_its_hbm() -> None:
    assert set(GPU_DOMAINS) == set(GPU_KINDS)
    assert set(TPU_HBM) == set(TPU_KINDS)


def test_an_impossible_gpu_count_is_one_line_and_exit_2() -> None:
    from typer.testing import CliRunner

    from fieldmem.frontends.cli import app

    result = CliRunner().invoke(app, ["check", "models:step", "--backend", "gpu:h100:100000"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("fieldmem: error: --backend 'gpu:h100:100000': at most 256"), lines


# ---- device memory of each kind (pure) ----------------------------------------------------


def test_a_gpus_memory_is_its_target_configs_device_memory_size() -> None:
    for kind in GPU_KINDS:
        found = re.search(r"device_memory_size: (\d+)", gpu_spec_text(kind))
        assert found is not None, kind
        memory = device_memory(parse_backend(f"gpu:{kind}:8"))
        assert memory is not None and memory.bytes == int(found.group(1))
    h100 = device_memory(parse_backend("gpu:h100"))
    assert h100 is not None and h100.words() == "an H100 has 79.1 GiB"
    assert device_memory(parse_backend("cpu")) is None


def test_a_tpus_memory_is_what_libtpu_leaves_a_program() -> None:
    v5e = device_memory(parse_backend("tpu:v5e:2x2"))
    assert v5e is not None and v5e.bytes == int(15.75 * GiB)
    assert v5e.words().startswith("a TPU v5e chip has 15.8 GiB for a program")


@pytest.mark.compile
@pytest.mark.parametrize("kind", sorted(TPU_KINDS))
def test_the_tpu_figures_are_libtpus_own(kind: str) -> None:
    """libtpu's out-of-memory message prints the HBM it lets a program use: each of fieldmem's figures, as
    libtpu prints it (two decimals, binary units)."""
    require_extra("tpu")
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies

    axes = "1x1x1" if TPU_KINDS[kind][1] == 3 else "1x1"
    options: dict[str, Any] = {"chips_per_host_bounds": [1, 1, 1]}
    if kind == "v4":
        options["chip_config_name"] = "megacore"
    device = topologies.get_topology_desc(f"{kind}:{axes}", "tpu", **options).devices[0]
    on = jax.sharding.SingleDeviceSharding(device)
    # two arrays of 60% each, returned as they are plus one: 120% of the usable HBM, no single buffer above it
    part = int(TPU_HBM[kind] * 0.6) // 4 // 1024 * 1024
    s = jax.ShapeDtypeStruct((part // 1024, 1024), jnp.float32, sharding=on)
    lowered = jax.jit(lambda a, b: (a + 1, b + 1)).trace(s, s).lower()
    with pytest.raises(Exception, match="RESOURCE_EXHAUSTED") as raised:
        lowered.compile()
    said = re.search(r"exceeds available HBM \(([\d.]+)G\)", str(raised.value))
    assert said is not None, str(raised.value)
    assert said.group(1) == f"{TPU_HBM[kind] / GiB:.2f}"


# ---- the rule and the check (pure) ----------------------------------------------------------


def _memory(footprint: int | None, argument: int = 0, output: int = 0, alias: int = 0) -> MemoryFigures:
    unavailable = {} if footprint is not None else {"footprint_bytes": "no", "temp_bytes": "XLA doubts it"}
    return MemoryFigures(
        argument_bytes=argument,
        output_bytes=output,
        alias_bytes=alias,
        temp_bytes=0 if footprint is not None else None,
        generated_code_bytes=0,
        peak_bytes=None,
        footprint_bytes=footprint,
        live_peak_bytes=None,
        unavailable=unavailable,
    )


def _variant(memory: DeviceMemory | None, out_of_memory: str | None = None) -> CompiledVariant:
    return CompiledVariant(
        name="donated",
        donated_arguments=(),
        inputs=(),
        outputs=(),
        hlo_text="",
        memory={},
        memory_unavailable={},
        lowering_warnings=(),
        tuple_args=False,
        lower_seconds=0.0,
        compile_seconds=0.0,
        device_memory=memory,
        out_of_memory=out_of_memory,
    )


H100 = DeviceMemory(84942979072, "an H100", "spec")


def test_does_not_fit_comes_first_and_keeps_what_breaks_in_place() -> None:
    assert RULES[0].kind == "does-not-fit" and not RULES[0].expect_fits_passes
    assert not RULES[0].expect_in_place_passes
    fit = Finding("error", "exceeds-device-memory", "needs 1.0 TiB per device; an H100 has 79.1 GiB", bytes=TiB)
    copy = Finding("error", "parameter-copy", "x is copied", bytes=GiB)
    assert decide([copy], True) == "not-in-place"
    assert decide([copy, fit], True) == "does-not-fit"
    verdict = judge([copy, fit], True, "in place", "nothing")
    assert verdict.summary == (
        "does not fit: needs 1.0 TiB per device; an H100 has 79.1 GiB; not in place either: x is copied"
    )
    assert not verdict.in_place
    note = Finding("info", "exceeds-device-memory", "without donation it would not fit")
    assert decide([note], True) == "in-place"  # only the plain variant does not fit: a note
    assert expectation_met("does-not-fit", "fits") is False
    assert expectation_met("in-place", "fits", fit_known=False) is False
    assert expectation_met("not-in-place", "fits") is True


def test_fits_never_passes_on_what_is_not_known() -> None:
    verdict = Verdict(in_place=True, summary="in place", kind="in-place")
    fits = fit_check(verdict, _variant(H100), _memory(GiB))
    assert fits.passed and fits.message == "fits: needs 1.0 GiB per device; an H100 has 79.1 GiB"
    assert (fits.limit, fits.value) == (84942979072, GiB)
    on_cpu = fit_check(verdict, _variant(None), _memory(GiB))
    assert not on_cpu.passed and "this device's memory is not known" in on_cpu.message
    doubted = fit_check(verdict, _variant(H100), _memory(None, argument=GiB, output=GiB, alias=GiB))
    assert not doubted.passed
    assert doubted.message.startswith("expected to fit, but what it needs is not known (XLA doubts it)")
    too_big = _memory(None, argument=TiB, output=TiB, alias=TiB)
    (finding,) = fit_findings(_variant(H100), _variant(H100), too_big, too_big)
    assert (finding.severity, finding.code, finding.bytes) == ("error", "exceeds-device-memory", TiB)
    assert finding.message == (
        "needs at least 1.0 TiB per device (its arguments and outputs alone); an H100 has 79.1 GiB"
    )
    refused = fit_findings(_variant(H100), _variant(H100, "Ran out of memory"), _memory(GiB), _memory(GiB))
    assert [f.severity for f in refused] == ["error"] and "the compiler refused it: Ran out of memory" in (
        refused[0].message
    )


def test_a_local_devices_memory_is_its_allocators_limit() -> None:
    from fieldmem.driver import variant

    class Device:
        def __init__(self, number: int, stats: Any) -> None:
            self.id, self.platform, self.device_kind, self._stats = number, "gpu", "NVIDIA H200", stats

        def memory_stats(self) -> Any:
            return self._stats

    devices = [Device(0, {"bytes_limit": 100 * GiB}), Device(1, {"bytes_limit": 90 * GiB})]
    found = variant._device_memory(object(), devices)
    assert found is not None and found.bytes == 90 * GiB
    assert found.words() == "jax's allocator on device 1 (NVIDIA H200) has 90.0 GiB"
    assert variant._device_memory(object(), [Device(0, None)]) is None  # XLA:CPU


# ---- stderr: each compile takes its own XLA lines, from any thread -------------------------


def test_threads_inside_quiet_stderr_share_fd_2_and_take_their_own_lines(capfd: pytest.CaptureFixture[str]) -> None:
    from fieldmem.driver.quiet import quiet_stderr

    doubt = re.compile("error in the calculation")
    taken: dict[str, list[str]] = {}
    inside = threading.Barrier(2)

    def compile_(name: str) -> None:
        with quiet_stderr(take=doubt) as log:
            inside.wait()  # both inside at once, as a pool's two compiles are
            tid = threading.get_native_id()
            os.write(
                2,
                f"E1204 18:25:42.849425 {tid:>8} x.cc:1] {name}: This indicates an error in the calculation!\n".encode(),
            )
            os.write(2, f"W1204 18:25:42.849425 {tid:>8} x.cc:2] {name}: a warning that stays\n".encode())
            inside.wait()
        taken[name] = log.taken

    threads = [threading.Thread(target=compile_, args=(n,)) for n in ("plain", "donated")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    os.write(2, b"after\n")  # fd 2 is the process's own again
    err = capfd.readouterr().err
    for name in ("plain", "donated"):
        assert len(taken[name]) == 1 and f"{name}: This indicates" in taken[name][0]
        assert f"{name}: a warning that stays" in err
    assert "error in the calculation" not in err
    assert err.rstrip().endswith("after")


# ---- deviceless checks, end to end ------------------------------------------------------

_MODULE = """
import jax
import jax.numpy as jnp
from jax.experimental import io_callback

import fieldmem


def update(x):
    return x.at[0].set(1.0)


def with_print(x):
    jax.debug.print("first {}", x[0])
    return x + 1.0


def with_pure(x):
    return x + jax.pure_callback(lambda a: a, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


def with_io(x):
    return x + io_callback(lambda a: a, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


def arg(n):
    return lambda: (jax.ShapeDtypeStruct((n,), jnp.float32),)


"""

_CASES = {
    "tib": 'fieldmem.case(update, args=arg(2**38), name="tib")',  # 1 TiB
    "gib48": 'fieldmem.case(update, args=arg(48 * 2**28), name="gib48")',  # 48 GiB: an H100 only when donated
    "gib10": 'fieldmem.case(update, args=arg(10 * 2**28), name="gib10")',  # 10 GiB: a v5e only when donated
    "small": 'fieldmem.case(update, args=arg(1024), name="small")',
    "print": 'fieldmem.case(with_print, args=arg(1024), name="print")',
    "pure": 'fieldmem.case(with_pure, args=arg(1024), name="pure")',
    "io": 'fieldmem.case(with_io, args=arg(1024), name="io")',
}


def _run(folder: Path, backend: str, *names: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``fieldmem check cases.py --backend B --expect fits`` with the cases ``names`` in a module of their own (in
    ``folder``, as ``cases.py``), in a process of its own (stderr is the command's), with the JSON report by
    case name (the report itself under "")."""
    run = folder / backend.replace(":", "-")
    run.mkdir(parents=True)
    (run / "cases.py").write_text(textwrap.dedent(_MODULE) + "\n".join(_CASES[n] for n in names) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in DEVICELESS_ENV}  # the command sets them itself
    env["PYTHONPATH"] = str(ROOT)
    out = run / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", "cases.py", "--backend", backend]
        + ["--expect", "fits", "--no-cache", "--min-bytes", "0", "-f", "json", "-o", str(out)],
        capture_output=True,
        text=True,
        cwd=run,
        env=env,
        timeout=600,
    )
    report = json.loads(out.read_text())
    return done, {r["name"]: r for r in report["results"]} | {"": report}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("capacity")


@pytest.fixture(scope="module")
def on_h100(folder: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    require_extra("gpu")
    return _run(folder, "gpu:h100", "tib", "gib48", "small")


@pytest.fixture(scope="module")
def on_v5e(folder: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    require_extra("tpu")
    return _run(folder, "tpu:v5e", "tib", "gib10", "print", "pure", "io")


def _check(result: dict[str, Any], name: str = "expect-fits") -> dict[str, Any]:
    (found,) = [c for c in result["checks"] if c["name"] == name]
    return found


@pytest.mark.compile
def test_a_tib_argument_does_not_fit_an_h100_and_fails_expect_fits(on_h100: Any) -> None:
    done, results = on_h100
    assert done.returncode == 1, done.stderr  # a check failed; nothing is an error
    tib = results["tib"]
    assert tib["status"] == "ok"
    assert tib["verdict"]["kind"] == "does-not-fit" and tib["verdict"]["in_place"] is False
    assert tib["verdict"]["summary"] == (
        "does not fit: needs at least 1.0 TiB per device (its arguments and outputs alone); an H100 has 79.1 GiB"
    )
    check = _check(tib)
    assert check["passed"] is False and check["limit"] == 84942979072 and check["value"] == TiB
    assert results[""]["deviceless"]["device_memory_bytes"] == 84942979072


@pytest.mark.compile
def test_xla_doubting_its_own_figures_makes_them_unavailable(on_h100: Any) -> None:
    """XLA:GPU logs "This indicates an error in the calculation!" for both variants of the 1 TiB update: the
    figures its plan decides are unavailable with that line as the reason, and the line is not printed."""
    done, results = on_h100
    for variant in ("plain", "donated"):
        memory = results["tib"]["variants"][variant]["memory"]
        assert memory["argument_bytes"] == TiB  # the call's sizes stay
        for figure in ("temp_bytes", "peak_bytes", "footprint_bytes", "live_peak_bytes"):
            assert memory[figure] is None, (variant, figure)
        assert "This indicates an error in the calculation" in memory["unavailable"]["temp_bytes"]
        assert memory["unavailable"]["temp_bytes"].startswith("XLA said while compiling that its own calculation")
    assert "This indicates an error in the calculation" not in done.stderr


@pytest.mark.compile
def test_donating_is_what_makes_it_fit(on_h100: Any, on_v5e: Any) -> None:
    for results, name, needs, plain in ((on_h100[1], "gib48", 48 * GiB, "needs at least 96.0 GiB"),
                                        (on_v5e[1], "gib10", 10 * GiB, "needs 20.0 GiB")):  # fmt: skip
        result = results[name]
        assert result["verdict"]["kind"] == "in-place", result["verdict"]
        check = _check(result)
        assert check["passed"] is True and check["value"] == needs, check
        (note,) = [f for f in result["verdict"]["findings"] if f["code"] == "exceeds-device-memory"]
        assert note["severity"] == "info" and note["message"].startswith(f"without donation it would not fit: {plain}")
    assert _check(on_h100[1]["small"])["passed"] is True


@pytest.mark.compile
def test_libtpus_out_of_memory_is_an_answer_not_a_crash(on_v5e: Any) -> None:
    """The plain 10 GiB update needs 20 GiB, above the 15.75 GiB libtpu leaves a program on a v5e: compiled again
    with libtpu's check off, it has its figures, and the note quotes libtpu. A 1 TiB buffer cannot be compiled
    for a v5e at all: an out-of-memory error that says it does not fit."""
    _, results = on_v5e
    plain = results["gib10"]["variants"]["plain"]["memory"]
    assert plain["footprint_bytes"] == 20 * GiB
    (note,) = [f for f in results["gib10"]["verdict"]["findings"] if f["code"] == "exceeds-device-memory"]
    assert "the compiler refused it: Ran out of memory on HBM" in note["message"]
    tib = results["tib"]
    assert tib["status"] == "error" and tib["error"]["kind"] == "out-of-memory"
    assert tib["error"]["message"].startswith("does not fit a TPU v5e chip: libtpu refuses to compile it for tpu:v5e")


@pytest.mark.compile
def test_host_callbacks_compile_for_a_tpu_and_say_why_not_for_a_gpu(folder: Path, on_v5e: Any) -> None:
    require_extra("gpu")
    for name in ("print", "pure", "io"):
        assert on_v5e[1][name]["status"] == "ok", on_v5e[1][name].get("error")
    done, results = _run(folder / "callbacks", "gpu:h100", "print", "pure", "io")
    assert done.returncode == 2
    lines = {
        "print": "jax.debug.print at cases.py:14 cannot be compiled for gpu:h100 without the GPU",
        "pure": "jax.pure_callback at cases.py:19 cannot be compiled for gpu:h100 without the GPU",
        "io": "jax.experimental.io_callback at cases.py:23 cannot be compiled for gpu:h100 without the GPU",
    }
    for name, says in lines.items():
        error = results[name]["error"]
        assert error["message"].startswith(says), error
        assert "Unknown backend" not in error["message"]


@pytest.mark.compile
def test_fits_fails_where_the_memory_is_not_known_chains_included(tmp_path: Path) -> None:
    """On XLA:CPU jax gives no memory limit: --expect fits fails, on a target and on every program of a chain."""
    (tmp_path / "steps.py").write_text("def a(x):\n    return x * 2.0\n\n\ndef b(x):\n    return x + 1.0\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "r.json"
    done = subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", "steps.py:a", "steps.py:a,b", "--shapes", "f32[64]"]
        + ["--backend", "cpu", "--expect", "fits", "--no-cache", "-f", "json", "-o", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    results = json.loads(out.read_text())["results"]
    assert len(results) >= 3  # the target, the chain's two steps (and its fused program)
    for result in results:
        check = _check(result)
        assert check["passed"] is False and "this device's memory is not known" in check["message"]
