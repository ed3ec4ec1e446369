"""Backends in CI: ``[tool.fieldmem] backends``, the pytest plugin's ``backend=``, baselines keyed by backend.

The config and request tests are pure. The plugin runs one ``pytester``
session in a subprocess (jax in its own process) carrying every ``backend=``
case; the deviceless backends join it where their extra is installed.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from fieldmem.errors import OptionError
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


def test_several_configured_backends_need_a_file_for_json() -> None:
    config = Config(backends=("cpu", "tpu:v5e"))
    with pytest.raises(OptionError, match="several backends give several JSON reports"):
        build_request(CheckFlags(targets=("m:f",), output_format="json"), config)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('["cpu", "cpu"]', "pyproject.toml: [tool.fieldmem] backends = ['cpu', 'cpu'] names cpu twice"),
        ('"cpu,"', "backends = 'cpu,': name backends separated by commas"),
        ("[]", "backends = []: name backends as a string or a list of strings"),
        ('["cpu", 3]', "backends = ['cpu', 3]: name backends as a string or a list of strings"),
        ("3", "backends = 3 is an integer: it should be backends to check on"),
        ('["cpu", ""]', "name backends separated by commas"),
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
    from fieldmem.errors import OptionError
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

_OUTCOME = re.compile(r"^(\S+\.py::\S+) (PASSED|FAILED|ERROR)\b", re.MULTILINE)


@pytest.mark.compile
def test_plugin_backend(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(updates=UPDATES, test_backends=TESTS)
    result = pytester.runpytest_subprocess("-v", "--strict-markers", "--fieldmem-report=report.json")
    found = {nodeid.split("::")[-1]: outcome for nodeid, outcome in _OUTCOME.findall(result.stdout.str())}
    assert found == {
        "test_call_on_cpu": "PASSED",
        "test_marker_on_cpu": "PASSED",
        "test_marker_not_in_place_on_cpu": "FAILED",
        "test_named_twice": "FAILED",
        "test_unknown_backend": "FAILED",
        "test_api_takes_one_backend": "PASSED",
    }, result.stdout.str()
    text = result.stdout.str()
    assert "backend=['cpu', 'cpu'] names cpu twice" in text
    assert "abacus is not available here" in text or "abacus" in text.split("short test summary")[1]
    report = json.loads(Path(pytester.path, "report.json").read_text())
    targets = [r["target"] for r in report["results"]]
    assert len(targets) == 3 and report["backend"] == "cpu", targets


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
    assert build_request(CheckFlags(targets=("m:f",), backend=backend), Config()).devices == devices
    given = build_request(CheckFlags(targets=("m:f",), backend=backend, devices=2), Config())
    assert given.devices == 2  # --devices given: as given
