"""Compiling for a TPU or a GPU without the device (``--backend tpu:v5e``, ``gpu:h100``, ``tpu:v5e:2x2``).

The figures of a deviceless report are checked against ``memory_analysis()`` of the same compile done
here by hand with jax's own topology API, its aliases against the program's ``input_output_alias``, and
a sparse row update's plain variant against the size of its table. These tests need the extras
(``fieldmem[tpu]``, ``fieldmem[gpu]``); without them they skip, unless ``FIELDMEM_REQUIRE_BACKENDS=1``
(as in CI), where they fail.
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

import pytest
from helpers_backends import EXTRAS, require_extra
from typer.testing import CliRunner

from fieldmem.frontends.cli import app
from fieldmem.model.errors import OptionError
from fieldmem.request.backends import DEVICELESS_ENV, deviceless_environment, parse_backend

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_require_backends_turns_the_skip_into_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EXTRAS, "tpu", ["no_such_module_fieldmem"])
    monkeypatch.delenv("FIELDMEM_REQUIRE_BACKENDS", raising=False)
    with pytest.raises(pytest.skip.Exception):
        require_extra("tpu")
    monkeypatch.setenv("FIELDMEM_REQUIRE_BACKENDS", "1")
    with pytest.raises(pytest.fail.Exception, match="FIELDMEM_REQUIRE_BACKENDS=1 but fieldmem"):
        require_extra("tpu")


# ---- names and environment (pure) ------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name", "chips"),
    [
        ("cpu", "cpu", 1),
        ("gpu", "gpu", 1),
        ("tpu:v5e", "tpu:v5e", 1),
        ("TPU:V5E:1x1", "tpu:v5e", 1),
        ("tpu:v5e:2x2", "tpu:v5e:2x2", 4),
        ("tpu:v5e:16x16", "tpu:v5e:16x16", 256),
        ("tpu:v5p:2x2x1", "tpu:v5p:2x2x1", 4),
        ("tpu:v4:1x1x1", "tpu:v4", 1),
        ("gpu:h100", "gpu:h100", 1),
        ("gpu:h100:1", "gpu:h100", 1),
        ("gpu:h100:8", "gpu:h100:8", 8),
    ],
)
def test_backend_names_are_canonical(text: str, name: str, chips: int) -> None:
    parsed = parse_backend(text)
    assert (parsed.name, parsed.chips) == (name, chips)
    assert parsed.deviceless == (":" in name)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("tpu:v9", "no TPU kind 'v9'; fieldmem knows tpu:v4, tpu:v5e, tpu:v5p, tpu:v6e"),
        ("gpu:l4", "no GPU kind 'l4'; fieldmem knows gpu:a100, gpu:h100, gpu:h200, gpu:b200"),
        ("tpu:v5e:2x2x2", "a tpu:v5e topology is 2 chip counts joined by x"),
        ("tpu:v5p:2x2", "a tpu:v5p topology is 3 chip counts joined by x"),
        ("gpu:h100:2x2", "a GPU topology is the number of GPUs"),
        ("npu:x1", "is not a backend fieldmem knows: cpu, gpu, tpu"),
        ("tpu:v5e:2x2:1", "is not a backend fieldmem knows"),
    ],
)
def test_unknown_kinds_and_topologies_are_one_line(text: str, says: str) -> None:
    with pytest.raises(OptionError) as raised:
        parse_backend(text)
    assert says in raised.value.message
    assert "\n" not in raised.value.message


def test_the_environment_is_set_only_for_cpu_and_deviceless_backends() -> None:
    names = lambda *n: [parse_backend(x) for x in n]  # noqa: E731
    assert deviceless_environment(None) == {}
    assert deviceless_environment(names("cpu")) == {}
    assert deviceless_environment(names("gpu")) == {}
    assert deviceless_environment(names("cpu", "tpu:v5e", "gpu:h100")) == dict(DEVICELESS_ENV)
    assert deviceless_environment(names("gpu", "tpu:v5e")) == {
        "TPU_SKIP_MDS_QUERY": "1",
        "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
    }
    assert "JAX_PLATFORMS" not in deviceless_environment(names("gpu", "gpu:h100"))  # the real GPU must start
    assert deviceless_environment(names("tpu", "tpu:v5e")) == {}  # the real TPU must start


def _check(*args: str) -> Any:
    return runner.invoke(app, ["check", *args], env={"COLUMNS": "120"})


@pytest.mark.parametrize("pair", ["gpu,gpu:h100", "tpu:v5e:2x2,tpu"])
def test_a_real_accelerator_beside_its_deviceless_twin_is_refused(pair: str) -> None:
    result = _check("models:step", "--backend", pair)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "check them in two runs" in lines[0], lines


def test_unknown_backend_is_exit_2_and_one_line() -> None:
    result = _check("models:step", "--backend", "cpu,tpu:v7x")
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1
    assert lines[0].startswith("fieldmem: error: --backend 'tpu:v7x': no TPU kind 'v7x'; fieldmem knows tpu:v4")


@pytest.mark.parametrize("flag", ["--run", "--probe"])
def test_running_on_a_deviceless_backend_is_refused(flag: str) -> None:
    result = _check("models:step", "--backend", "cpu,gpu:h100", flag)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "compiles without the device: nothing can run there" in lines[0], lines


@pytest.mark.parametrize(("backend", "extra"), [("tpu:v5e", "tpu"), ("gpu:h100:8", "gpu")])
def test_a_missing_extra_is_one_line_with_the_pip_install_where_it_must_be_here(
    backend: str, extra: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With --no-isolate the compile is in this process: its compiler must be installed here (checked in a
    worker, a cached environment brings it: tests/parent/test_jax_releases.py)."""
    from fieldmem.request import backends

    monkeypatch.setattr(backends, "_installed", lambda module: False)
    (tmp_path / "mod_missing.py").write_text("def step(x):\n    return x + 1\n")
    monkeypatch.chdir(tmp_path)
    result = _check("mod_missing:step", "--backend", f"cpu,{backend}", "--no-cache", "--no-isolate")
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [
        f"fieldmem: error: --backend {backend} needs the {extra.upper()} compiler, which is not installed: "
        f'pip install "fieldmem[{extra}]"'
    ]


@pytest.mark.parametrize(
    ("installed", "expected"),
    [
        ({"jax_plugins.xla_cuda12", "nvidia.cuda_nvcc"}, [("jax_plugins.xla_cuda12", "nvidia.cuda_nvcc")]),
        ({"jax_plugins.xla_cuda13", "nvidia.cu13"}, [("jax_plugins.xla_cuda13", "nvidia.cu13")]),
        # a plugin without its CUDA's nvcc wheel (CUDA 13's plugin beside CUDA 12's ptxas) compiles nothing
        ({"jax_plugins.xla_cuda13", "nvidia.cuda_nvcc"}, []),
    ],
    ids=["cuda12", "cuda13", "mismatched"],
)
def test_a_cuda_plugin_is_paired_with_its_own_cudas_ptxas(
    installed: set[str], expected: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """jax's CUDA 13 plugin with nvidia-cuda-nvcc 13 (files under nvidia/cu13) compiles for a GPU as the CUDA 12
    extra does; a plugin whose CUDA's ptxas is missing is the missing extra's one line."""
    from fieldmem.model.errors import OptionError
    from fieldmem.request import backends

    monkeypatch.setattr(backends, "_installed", lambda module: module in installed)
    assert backends.cuda_compilers() == expected
    gpu = backends.parse_backend("gpu:h100")
    if expected:
        backends.require_extra(gpu)
    else:
        with pytest.raises(OptionError, match=r'pip install "fieldmem\[gpu\]"'):
            backends.require_extra(gpu)


# ---- figures, aliases and copies against the compile done by hand ---------------------------

_MODULE = """
import jax
import jax.numpy as jnp

import fieldmem


def blend(state, x):
    return {"a": state["a"].at[2:].add(x[:-2] * 2.0), "b": state["b"] * 0.5 + x}


def blend_args():
    return ({"a": jnp.zeros((512, 256), jnp.float32), "b": jnp.ones((512, 256), jnp.float32)},
            jnp.ones((512, 256), jnp.float32))


def scatter_rows(table, rows, idx):
    return table.at[idx].set(rows)


def scatter_args():
    return (jnp.zeros((2048, 128), jnp.float32), jnp.ones((8, 128), jnp.float32),
            jnp.arange(8, dtype=jnp.int32) * 7)


fieldmem.case(blend, args=blend_args, name="blend", donate="state")
fieldmem.case(scatter_rows, args=scatter_args, name="scatter", donate="table")
"""

BACKENDS = ("tpu:v5e", "gpu:h100")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Both cases checked once for tpu:v5e and gpu:h100 (one CLI run), by backend then target name."""
    for backend in BACKENDS:
        require_extra(backend.split(":")[0])
    folder = tmp_path_factory.mktemp("deviceless")
    (folder / "devless_cases.py").write_text(textwrap.dedent(_MODULE))
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        out = folder / "report.json"
        result = _check(
            "devless_cases.py",
            "--backend",
            ",".join(BACKENDS),
            "--min-bytes",
            "0",
            "--no-cache",
            "-f",
            "json",
            "-o",
            str(out),
        )
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output
    found = {}
    for backend in BACKENDS:
        data = json.loads((folder / f"report.{backend.replace(':', '-')}.json").read_text())
        found[backend] = data
    return found


@pytest.mark.compile
def test_each_report_names_the_compiler_plugins_it_was_made_with(reports: dict[str, dict[str, Any]]) -> None:
    """Issue 33, item 6: a report says which libtpu or CUDA plugin compiled it, as installed."""
    from importlib import metadata

    assert reports["tpu:v5e"]["plugin_versions"] == {"libtpu": metadata.version("libtpu")}
    gpu = reports["gpu:h100"]["plugin_versions"]
    assert gpu["jax-cuda12-plugin"] == metadata.version("jax-cuda12-plugin")
    assert gpu["nvidia-cuda-nvcc-cu12"] == metadata.version("nvidia-cuda-nvcc-cu12")


_BY_HAND: dict[tuple[str, str], Any] = {}


def _by_hand(backend: str, case: str, donated: bool) -> Any:
    """The same program compiled here with jax's topology API (not fieldmem's driver)."""
    key = (backend, case + str(donated))
    if key in _BY_HAND:
        return _BY_HAND[key]
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies

    if backend.startswith("tpu"):
        device = topologies.get_topology_desc("v5e:1x1", "tpu", chips_per_host_bounds=[1, 1, 1]).devices[0]
    else:
        spec = (ROOT / "fieldmem" / "model" / "specs" / "gpu" / "h100_sxm.txtpb").read_text()
        device = topologies.get_topology_desc(platform="cuda", topology="1x1x1", target_config=spec).devices[0]
    on = jax.sharding.SingleDeviceSharding(device)

    def s(shape: tuple[int, ...], dtype: Any = jnp.float32) -> Any:
        return jax.ShapeDtypeStruct(shape, dtype, sharding=on)

    if case == "blend":

        def blend(state: Any, x: Any) -> Any:
            return {"a": state["a"].at[2:].add(x[:-2] * 2.0), "b": state["b"] * 0.5 + x}

        fn, args = blend, ({"a": s((512, 256)), "b": s((512, 256))}, s((512, 256)))
    else:

        def scatter_rows(table: Any, rows: Any, idx: Any) -> Any:
            return table.at[idx].set(rows)

        fn, args = scatter_rows, (s((2048, 128)), s((8, 128)), s((8,), jnp.int32))
    compiled = jax.jit(fn, donate_argnums=(0,) if donated else ()).trace(*args).lower().compile()
    _BY_HAND[key] = compiled
    return compiled


_FIGURES = {
    "argument_bytes": "argument_size_in_bytes",
    "output_bytes": "output_size_in_bytes",
    "alias_bytes": "alias_size_in_bytes",
    "temp_bytes": "temp_size_in_bytes",
    "generated_code_bytes": "generated_code_size_in_bytes",
    "host_argument_bytes": "host_argument_size_in_bytes",
    "host_output_bytes": "host_output_size_in_bytes",
    "host_alias_bytes": "host_alias_size_in_bytes",
    "host_temp_bytes": "host_temp_size_in_bytes",
}


def _result(reports: dict[str, dict[str, Any]], backend: str, name: str) -> dict[str, Any]:
    (found,) = [r for r in reports[backend]["results"] if r["name"] == name]
    assert found["status"] == "ok", found.get("error")
    return found


def _aliases_in_text(text: str) -> set[tuple[int, int]]:
    """(parameter number, output index) of each alias in ``input_output_alias`` of the module's header."""
    header = text.split("\n", 1)[0]
    match = re.search(r"input_output_alias=\{ (.*?) \}, ", header)
    if match is None:
        return set()
    pairs = re.findall(r"\{(\d*)\}: \((\d+), \{\}, [a-z-]+\)", match.group(1))
    return {(int(param), int(output or 0)) for output, param in pairs}


@pytest.mark.compile
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["blend", "scatter"])
@pytest.mark.parametrize("variant", ["plain", "donated"])
def test_every_figure_is_memory_analysis_of_the_same_compile(
    reports: dict[str, dict[str, Any]], backend: str, case: str, variant: str
) -> None:
    result = _result(reports, backend, case)
    memory = result["variants"][variant]["memory"]
    analysis = _by_hand(backend, case, variant == "donated").memory_analysis()
    for figure, attribute in _FIGURES.items():
        if figure == "generated_code_bytes" and backend.startswith("gpu"):
            # XLA gives none for a GPU compiled without the device (it reads 0): unavailable, never 0
            assert getattr(analysis, attribute) == 0 and memory[figure] is None, memory
            assert "without the device" in memory["unavailable"][figure]
            continue
        assert memory[figure] == getattr(analysis, attribute), (figure, memory)
    assert memory["footprint_bytes"] == (
        analysis.argument_size_in_bytes
        + analysis.output_size_in_bytes
        + analysis.temp_size_in_bytes
        - analysis.alias_size_in_bytes
        + (memory["constant_bytes"] or 0)  # arrays compiled into the program (docs/report-schema.md)
    )
    assert memory["live_peak_bytes"] is not None, memory["unavailable"]  # from the dumped buffer assignment
    assert reports[backend]["deviceless"]["backend"] == backend


@pytest.mark.compile
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["blend", "scatter"])
def test_aliases_are_the_programs_input_output_alias(
    reports: dict[str, dict[str, Any]], backend: str, case: str
) -> None:
    result = _result(reports, backend, case)
    expected = _aliases_in_text(_by_hand(backend, case, True).as_text())
    assert expected  # the donated program aliases something
    reported = {(a["input_index"], a["output_index"]) for a in result["variants"]["donated"]["aliases"]}
    assert reported == expected
    assert result["variants"]["plain"]["aliases"] == []
    assert result["verdict"]["in_place"] is True  # a TPU's staging copies through VMEM are not defensive copies


@pytest.mark.compile
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sparse_row_updates_plain_variant_copies_the_whole_table(
    reports: dict[str, dict[str, Any]], backend: str
) -> None:
    result = _result(reports, backend, "scatter")
    table = 2048 * 128 * 4  # f32[2048,128]: a multiple of the TPU's (8,128) tile, no padding
    plain = result["variants"]["plain"]["copies"]
    assert any(c["bytes"] == table and c["of_parameter"] == "table" for c in plain), plain
    donated = result["variants"]["donated"]["copies"]
    assert not any(c["bytes"] >= table for c in donated), donated


@pytest.mark.compile
def test_the_report_says_it_was_compiled_without_the_device(reports: dict[str, dict[str, Any]]) -> None:
    from fieldmem.model.report import Report
    from fieldmem.render import RenderOptions, get_renderer

    gpu = reports["gpu:h100"]["deviceless"]
    assert gpu["platform"] == "gpu" and gpu["kind"] == "h100" and gpu["chips"] == 1
    assert gpu["device_kind"] == "NVIDIA H100 80GB HBM3" and gpu["compiled_without_device"] is True
    assert "autotuning did not run" in gpu["note"]
    assert reports["tpu:v5e"]["deviceless"]["device_kind"] == "TPU v5 lite"
    report = Report.from_dict(reports["gpu:h100"])
    for fmt in ("table", "markdown", "html"):
        text = get_renderer(fmt).render(report, RenderOptions(min_bytes=0, width=200))
        assert "compiled without the device" in text, fmt
    assert "compiled without the device" in get_renderer("github").render(report, RenderOptions(min_bytes=0))


# ---- the shipped GPU specs, the wheel's ptxas, and a sharded update on four chips -------------


@pytest.mark.compile
def test_every_shipped_gpu_spec_compiles_with_the_pinned_jaxlib() -> None:
    require_extra("gpu")
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies

    from fieldmem.driver.deviceless import gpu_spec, gpu_spec_names

    shipped = {p.name for p in (ROOT / "fieldmem" / "model" / "specs" / "gpu").glob("*.txtpb")}
    assert shipped == set(gpu_spec_names().values())
    for kind in gpu_spec_names():
        device = topologies.get_topology_desc(platform="cuda", topology="1x1x1", target_config=gpu_spec(kind)).devices[
            0
        ]
        s = jax.ShapeDtypeStruct((64, 64), jnp.float32, sharding=jax.sharding.SingleDeviceSharding(device))
        compiled = jax.jit(lambda a, b: a @ b + 1.0).trace(s, s).lower().compile()
        assert compiled.memory_analysis().output_size_in_bytes == 64 * 64 * 4, kind
        assert device.platform == "gpu"


_SHARDED = """
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

import fieldmem


def smooth(u, f):
    return u.at[:, 1:].add(0.25 * f[:, :-1])


def sharded():
    mesh = jax.make_mesh((len(jax.devices()),), ("rows",))
    rows = NamedSharding(mesh, P("rows"))
    u = jax.device_put(jnp.zeros((1024, 256), jnp.float32), rows)
    f = jax.device_put(jnp.ones((1024, 256), jnp.float32), rows)
    return (u, f)


fieldmem.case(smooth, args=sharded, name="smooth", donate="u")
"""


@pytest.mark.compile
def test_a_sharded_update_on_four_chips_with_the_wheels_ptxas(tmp_path: Path) -> None:
    """--devices 4 onto tpu:v5e:2x2 and gpu:h100:4 (one process): per-chip figures, the alias, and a GPU compile
    that uses the nvidia-cuda-nvcc wheel's ptxas while a broken one is first on PATH and CUDA_ROOT."""
    require_extra("tpu")
    require_extra("gpu")
    (tmp_path / "sharded_cases.py").write_text(textwrap.dedent(_SHARDED))
    fake = tmp_path / "fakecuda"
    (fake / "bin").mkdir(parents=True)
    log = tmp_path / "ptxas.log"
    (fake / "bin" / "ptxas").write_text(f"#!/bin/sh\necho called >> {log}\nexit 1\n")
    (fake / "bin" / "ptxas").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in DEVICELESS_ENV}  # the command sets them itself
    env.update(PYTHONPATH=str(ROOT), CUDA_ROOT=str(fake), PATH=f"{fake / 'bin'}:{env.get('PATH', '')}")
    out = tmp_path / "r.json"
    done = subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", "sharded_cases.py", "--devices", "4"]
        + ["--backend", "tpu:v5e:2x2,gpu:h100:4", "--no-cache", "-f", "json", "-o", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert not log.exists(), "a ptxas other than the wheel's was run"
    quarter = 1024 * 256 * 4 // 4
    for backend, chips in (("tpu-v5e-2x2", 4), ("gpu-h100-4", 4)):
        report = json.loads((tmp_path / f"r.{backend}.json").read_text())
        assert report["deviceless"]["chips"] == chips and len(report["devices"]) == chips
        (result,) = report["results"]
        assert result["status"] == "ok", result["error"]
        donated = result["variants"]["donated"]
        assert donated["memory"]["output_bytes"] == quarter, (backend, donated["memory"])
        assert donated["memory"]["alias_bytes"] == quarter
        assert [(a["input"], a["output"], a["bytes"]) for a in donated["aliases"]] == [("u", "out", quarter)]
        assert len(result["devices"]) == chips


@pytest.mark.compile
def test_baselines_key_a_topology_apart(reports: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    """tpu:v5e and tpu:v5e:2x2 have one device kind, but their entries are kept and compared apart."""
    from fieldmem.gate.baseline import compare_to_baseline, load_baseline, save_baseline
    from fieldmem.model.report import Report

    one = Report.from_dict(reports["tpu:v5e"])
    four = Report.from_dict({**reports["tpu:v5e"], "backend": "tpu:v5e:2x2"})
    path = tmp_path / "baseline.json"
    save_baseline(path, one)
    save_baseline(path, four)
    entries = load_baseline(path).entries
    assert sorted({(e.backend, e.device_kind) for e in entries}) == [
        ("tpu:v5e", "TPU v5 lite"),
        ("tpu:v5e:2x2", "TPU v5 lite"),
    ]
    assert len(entries) == 2 * len(one.results)
    gpu = compare_to_baseline(Report.from_dict(reports["gpu:h100"]), load_baseline(path))
    assert gpu.baseline is not None and not gpu.baseline.regressions
    assert any("not compared: this run is on gpu:h100" in note for note in gpu.baseline.notes)


@pytest.mark.compile
def test_a_deviceless_check_uses_no_persistent_cache(tmp_path: Path) -> None:
    """jax would store a deviceless executable but cannot load one without the device's client ("PjRtCompiler
    must be constructed with a Client"): run twice with a cache, cpu first so jax has decided to use it, and
    no deviceless entry is written or read."""
    require_extra("tpu")
    module = tmp_path / "cached_cases.py"
    module.write_text(
        "def bump(u):\n    return u + 1.0\n\ndef bump_args():\n    import jax.numpy as jnp\n\n"
        "    return (jnp.zeros((8, 128)),)\n\nimport fieldmem\n\n"
        "fieldmem.case(bump, args=bump_args, name='bump')\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "JAX_COMPILATION_CACHE_DIR")}
    # every cpu compile to its end, so that each stores jax's executable: stopped early, a small compile may
    # or may not end before its dump is whole, and keep a dump instead (a race the counts below would see)
    env["FIELDMEM_EARLY_STOP"] = "0"

    def check(backends: str, cache: Path) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "fieldmem", "check", str(module), "--backend", backends,
                   "--cache-dir", str(cache), "-f", "json", "-o", str(tmp_path / "r.json")]  # fmt: skip
        return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)

    runs = [check("cpu,tpu:v5e", tmp_path / "both") for _ in "12"]
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert "compilation cache" not in run.stderr, run.stderr
    assert check("cpu", tmp_path / "cpu").returncode == 0
    # the cache holds as many executables as the cpu check alone stores: no deviceless one went in
    assert len(list((tmp_path / "both").iterdir())) == len(list((tmp_path / "cpu").iterdir())) > 0
