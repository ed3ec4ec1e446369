"""Backends in CI: ``[tool.fieldmem] backends``, the pytest plugin's ``backend=``, baselines keyed by backend.

The config and request tests are pure. The plugin runs one ``pytester``
session in a subprocess (jax in its own process) carrying every ``backend=``
case; the deviceless backends join it where their extra is installed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers_backends import installed, require_extra

from fieldmem.model.errors import OptionError
from fieldmem.request.backends import DEVICELESS_ENV
from fieldmem.request.build import CheckFlags, build_request
from fieldmem.request.config import Config, ConfigError, load_config
from fieldmem.request.options import parse_backends

pytest_plugins = ["pytester"]


def write(folder: Path, text: str) -> Path:
    (folder / ".git").mkdir(parents=True, exist_ok=True)
    path = folder / "pyproject.toml"
    path.write_text(text)
    return path


# ---- [tool.fieldmem] backends --------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('["cpu", "tpu:v5e", "gpu:h100"]', ("cpu", "tpu:v5e", "gpu:h100")),
        ('"cpu, tpu:v5e:2x2"', ("cpu", "tpu:v5e:2x2")),
        ('["cpu"]', ("cpu",)),
    ],
)
def test_the_config_names_the_backends(tmp_path: Path, value: str, expected: tuple[str, ...]) -> None:
    config = load_config(write(tmp_path, f"[tool.fieldmem]\nbackends = {value}\n"))
    assert config.backends == expected
    request = build_request(CheckFlags(targets=("m:f",)), config)
    assert request.backends == expected


def test_no_backends_key_is_jax_default(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "[tool.fieldmem]\njobs = 1\n"))
    assert config.backends is None
    assert build_request(CheckFlags(targets=("m:f",)), config).backends is None


def test_the_command_line_beats_the_config() -> None:
    config = Config(backends=("cpu", "tpu:v5e"))
    assert build_request(CheckFlags(targets=("m:f",), backend="gpu:h100"), config).backends == ("gpu:h100",)


def test_several_configured_backends_may_print_json() -> None:
    """Several reports on stdout are one document (fieldmem.reports/1: tests/gate/test_deploy_gate.py)."""
    config = Config(backends=("cpu", "tpu:v5e"))
    request = build_request(CheckFlags(targets=("m:f",), output_format="json"), config)
    assert request.backends == ("cpu", "tpu:v5e") and request.output.file is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('["cpu", "cpu"]', "pyproject.toml: [tool.fieldmem] backends = ['cpu', 'cpu'] names cpu twice"),
        ('"cpu,"', "backends = 'cpu,': name backends separated by commas"),
        ("[]", "backends = []: name backends as a string or a list of strings"),
        ('["cpu", 3]', "backends = ['cpu', 3]: name backends as a string or a list of strings"),
        ("3", "backends = 3 is an integer: it should be backends to check on"),
        ('["cpu", ""]', "name backends separated by commas"),
        (
            '["tpu:v7x"]',
            "pyproject.toml: [tool.fieldmem] backends = 'tpu:v7x': no TPU kind 'v7x'; fieldmem knows tpu:v4",
        ),
        ('"tpu:v5e:3"', "[tool.fieldmem] backends = 'tpu:v5e:3': a tpu:v5e topology is 2 chip counts joined by x"),
        ('["cpu", "tpu:v5e:1x1", "tpu:v5e"]', "names tpu:v5e twice"),
    ],
)
def test_bad_backends_name_the_file_and_key(tmp_path: Path, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(write(tmp_path, f"[tool.fieldmem]\nbackends = {value}\n"))
    assert message in error.value.message, error.value.message
    assert "\n" not in error.value.message


def test_a_typo_suggests_backends(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="did you mean 'backends'"):
        load_config(write(tmp_path, '[tool.fieldmem]\nbackend = ["cpu"]\n'))


def test_parse_backends_labels() -> None:
    assert parse_backends(["cpu", " tpu:v5e "]) == ("cpu", "tpu:v5e")
    with pytest.raises(OptionError, match=r"^backend=\['cpu', 'cpu'\] names cpu twice$"):
        parse_backends(["cpu", "cpu"], "backend=")
    with pytest.raises(OptionError, match=r"^--backend 'cpu,,gpu': name backends"):
        parse_backends("cpu,,gpu")


# ---- the pytest plugin's backend= ---------------------------------------------

UPDATES = textwrap.dedent(
    """\
    import jax.numpy as jnp


    def update(u, f):
        return u.at[0].add(f)


    SMALL = jnp.zeros((64, 64), jnp.float32)
    """
)

TESTS = textwrap.dedent(
    """\
    import pytest

    import fieldmem
    from fieldmem.model.errors import OptionError
    from updates import SMALL, update


    def test_call_on_cpu(fieldmem_check):
        report = fieldmem_check(update, SMALL, 1.0, backend="cpu")
        assert report.backend == "cpu"


    @pytest.mark.fieldmem(backend="cpu")
    def test_marker_on_cpu(fieldmem_check):
        report = fieldmem_check(update, SMALL, 1.0)
        assert report.backend == "cpu"


    @pytest.mark.fieldmem(backend=["cpu"])
    def test_marker_not_in_place_on_cpu(fieldmem_check):
        fieldmem_check(update, SMALL, 1.0, donate="none")


    def test_named_twice(fieldmem_check):
        fieldmem_check(update, SMALL, 1.0, backend=["cpu", "cpu"])


    def test_unknown_backend(fieldmem_check):
        fieldmem_check(update, SMALL, 1.0, backend="abacus")


    def test_api_takes_one_backend():
        with pytest.raises(OptionError, match="names 2 backends: check on one per call"):
            fieldmem.check_function(update, SMALL, 1.0, backend="cpu,tpu")
        assert fieldmem.check_function(update, SMALL, 1.0, backend="cpu").backend == "cpu"
    """
)

# with the deviceless extras: one call on several backends, as a CI job guards the hardware it trains on
SEVERAL = textwrap.dedent(
    """\
    import pytest

    from updates import SMALL, update


    def test_several_in_place(fieldmem_check):
        report = fieldmem_check(update, SMALL, 1.0, backend=["cpu", "tpu:v5e", "gpu:h100"])
        assert report.backend == "gpu:h100"


    @pytest.mark.fieldmem(backend="cpu,tpu:v5e")
    def test_several_not_in_place(fieldmem_check):
        fieldmem_check(update, SMALL, 1.0, donate="none")
    """
)

_OUTCOME = re.compile(r"^(\S+\.py::\S+) (PASSED|FAILED|ERROR)\b", re.MULTILINE)


@pytest.mark.compile
def test_plugin_backend(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    several = installed("tpu", "gpu")
    if not several and os.environ.get("FIELDMEM_REQUIRE_BACKENDS") == "1":
        pytest.fail('the deviceless extras are not installed: pip install "fieldmem[tpu,gpu]"')
    pytester.makepyfile(updates=UPDATES, test_backends=TESTS, **({"test_several": SEVERAL} if several else {}))
    # nothing set before pytest starts: the plugin's workers get what compiling without the device needs, as
    # the fieldmem command's do (issue 48)
    for name in DEVICELESS_ENV:
        monkeypatch.delenv(name, raising=False)
    result = pytester.runpytest_subprocess("-v", "--strict-markers", "--fieldmem-report=report.json")
    found = {nodeid.split("::")[-1]: outcome for nodeid, outcome in _OUTCOME.findall(result.stdout.str())}
    expected_several = {"test_several_in_place": "PASSED", "test_several_not_in_place": "FAILED"} if several else {}
    assert found == {
        **expected_several,
        "test_call_on_cpu": "PASSED",
        "test_marker_on_cpu": "PASSED",
        "test_marker_not_in_place_on_cpu": "FAILED",
        "test_named_twice": "FAILED",
        "test_unknown_backend": "FAILED",
        "test_api_takes_one_backend": "PASSED",
    }, result.stdout.str()
    text = result.stdout.str()
    assert "backend=['cpu', 'cpu'] names cpu twice" in text
    assert "--backend abacus is not available here" in text, text
    report = json.loads(Path(pytester.path, "report.json").read_text())
    targets = [r["target"] for r in report["results"]]
    if not several:
        assert len(targets) == 3 and report["backend"] == "cpu", targets
        return
    # each backend checked and recorded, named by its backend
    assert [t.rpartition("::")[2] for t in targets if "test_several" in t] == [
        "updates:update[cpu]",
        "updates:update[tpu:v5e]",
        "updates:update[gpu:h100]",
        "updates:update[cpu]",
        "updates:update[tpu:v5e]",
    ], targets
    # the failure names the first backend that failed, and both were checked
    assert "on cpu: updates:update: not in place" in text, text


# ---- the devices a topology implies ---------------------------------------------


@pytest.mark.parametrize(
    ("backend", "devices"),
    [
        ("tpu:v5e:16x16", 256),
        ("cpu,tpu:v5e:2x2", 4),
        ("gpu:h100:8", 8),
        ("tpu:v5e", None),
        ("cpu", None),
        ("tpu:v5e:2x2,gpu:h100:8", None),  # two sizes: --devices says which
    ],
)
def test_a_topology_implies_its_chip_count_of_cpu_devices(backend: str, devices: int | None) -> None:
    request = build_request(CheckFlags(targets=("m:f",), backend=backend), Config())
    assert (request.devices, request.implied_devices) == (None, devices)
    given = build_request(CheckFlags(targets=("m:f",), backend=backend, devices=2), Config())
    assert (given.devices, given.implied_devices) == (2, None)  # --devices given: as given


# ---- compare and baselines across deviceless backends ---------------------------

ROOT = Path(__file__).resolve().parents[2]


def _fieldmem(tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["COLUMNS"] = "200"
    return subprocess.run(
        [sys.executable, "-m", "fieldmem", *arguments], cwd=tmp_path, env=env, capture_output=True, text=True
    )


@pytest.mark.compile
def test_compare_and_baselines_across_cpu_gpu_and_tpu(tmp_path: Path) -> None:
    require_extra("tpu")
    require_extra("gpu")
    example = str(ROOT / "examples" / "interior.py")
    done = _fieldmem(tmp_path, "check", example, "--backend", "cpu,gpu:h100,tpu:v5e", "-f", "json", "-o", "r.json")
    assert done.returncode == 0, done.stderr
    files = ["r.cpu.json", "r.gpu-h100.json", "r.tpu-v5e.json"]
    reports = [json.loads((tmp_path / f).read_text()) for f in files]
    assert [r["backend"] for r in reports] == ["cpu", "gpu:h100", "tpu:v5e"]

    # fieldmem compare: the three side by side, each column's figures its own report's
    compared = _fieldmem(tmp_path, "compare", *files)
    assert compared.returncode in (0, 1), compared.stderr
    lines = compared.stdout.splitlines()
    assert "NVIDIA H100 80GB HBM3" in compared.stdout and "TPU v5 lite" in compared.stdout
    [copies] = [line for line in lines if "copies (plain)" in line]
    plain = [r["results"][0]["variants"]["plain"]["copies"] for r in reports]
    shown = re.findall(r"(\d+) \(([\d.]+) MiB\)", copies)
    assert [int(n) for n, _ in shown] == [len(c) for c in plain], copies
    assert [float(m) for _, m in shown] == [round(sum(x["bytes"] for x in c) / 2**20, 1) for c in plain]
    # one copy of u on each backend; the TPU's staging through VMEM is moves, apart from the copies
    assert [len(c) for c in plain] == [1, 1, 1]
    assert (
        reports[2]["results"][0]["variants"]["plain"]["moves"]
        and not reports[0]["results"][0]["variants"]["plain"]["moves"]
    )
    [peak] = [line for line in lines if "XLA peak (plain)" in line]
    peaks = [r["results"][0]["variants"]["plain"]["memory"]["peak_bytes"] / 2**20 for r in reports]
    assert [float(x) for x in re.findall(r"([\d.]+) MiB", peak)] == [round(p, 1) for p in peaks], peak

    # a baseline saved on cpu and tpu:v5e holds one entry per backend and device kind
    saved = _fieldmem(tmp_path, "check", example, "--backend", "cpu,tpu:v5e", "--save-baseline", "b.json")
    assert saved.returncode == 0, saved.stderr
    entries = json.loads((tmp_path / "b.json").read_text())["entries"]
    keys = sorted((e["backend"], e["device_kind"]) for e in entries)
    assert keys == [("cpu", "cpu"), ("tpu:v5e", "TPU v5 lite")], keys
    # the same run again compares each backend with its own entries: nothing changed
    again = _fieldmem(tmp_path, "check", example, "--backend", "tpu:v5e", "--baseline", "b.json")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "0 regressions, 0 improvements" in again.stdout, again.stdout
    assert "1 baseline entry for cpu (cpu) not compared: this run is on tpu:v5e (TPU v5 lite)" in again.stdout
    # another device kind is not compared with them, and says so
    other = _fieldmem(tmp_path, "check", example, "--backend", "gpu:h100", "--baseline", "b.json")
    assert other.returncode == 0, other.stdout + other.stderr
    assert "2 baseline entries" not in other.stdout
    for noted in ("cpu (cpu)", "tpu:v5e (TPU v5 lite)"):
        assert f"{noted} not compared: this run is on gpu:h100 (NVIDIA H100 80GB HBM3)" in other.stdout, other.stdout


@pytest.mark.compile
def test_a_topology_gives_sharded_examples_its_mesh_without_devices(tmp_path: Path) -> None:
    """``examples/sharded.py`` shards over every device jax has: with ``--backend tpu:v5e:2x2`` and no
    ``--devices``, that is 4, so each chip holds a quarter of the 2 MiB field."""
    require_extra("tpu")
    require_extra("gpu")
    example = str(ROOT / "examples" / "sharded.py")
    done = _fieldmem(tmp_path, "check", example, "--backend", "tpu:v5e:2x2", "-f", "json", "-o", "r.json")
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert len(report["devices"]) == 4 and report["deviceless"]["chips"] == 4
    [result] = report["results"]
    field_bytes = 1024 * 512 * 4
    assert result["variants"]["donated"]["memory"]["output_bytes"] == field_bytes // 4
    assert result["variants"]["donated"]["memory"]["alias_bytes"] == field_bytes // 4
