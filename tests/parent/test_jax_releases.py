"""``fieldmem check --jax A,B`` and ``--python``: options, names, and a real check under two releases.

A worker under another interpreter imports fieldmem's driver from this checkout and jax from its own
installation (``fieldmem.parent.interpreters``). These tests check the options that ask for it, how the
reports of several releases are named, and, with real environments of jaxlib 0.7.1 and 0.7.2, that one
command shows the published regression between them (openxla/xla#45912, examples/upgrade/loop_update.py)
at the user's line, and that a baseline recorded under the one names the upgrade when checked under the
other.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fieldmem.frontends.cli import app
from fieldmem.frontends.output import report_labels
from fieldmem.parent import interpreters

from factories import make_report

runner = CliRunner()
pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[2]
UPGRADE = ROOT / "examples" / "upgrade" / "loop_update.py"


def _check(*args: str) -> Any:
    return runner.invoke(app, ["check", *args], env={"COLUMNS": "120"})


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--jax", "0.10"], "'0.10' is not a jax release"),
        (["--jax", "0.9.2,0.9.2"], "named twice"),
        (["--jax", "0.6.2"], "it supports jax 0.7.0 to"),
        (["--jax", "0.9.2", "--python", "/usr/bin/python3"], "give one of them"),
        (["--jax", "0.9.2", "--watch"], "--watch checks one jax at a time"),
        (["--jax", "0.9.2", "--no-isolate"], "drop --no-isolate"),
        (["--jax", "0.9.2,0.10.2", "--save-baseline", "b.json"], "save under one --jax release"),
        (["--python", "/nonexistent/bin/python"], "no Python interpreter there"),
    ],
)
def test_release_options_are_one_line_and_exit_2(args: list[str], says: str) -> None:
    result = _check("examples/field.py", *args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0], result.stderr


def test_reports_of_several_releases_are_named_by_release_and_backend() -> None:
    def report(backend: str, jax: str) -> Any:
        return make_report((), backend=backend, jax_version=jax)

    one = [report("cpu", "0.10.2"), report("tpu:v5e", "0.10.2")]
    assert report_labels(one) == ["cpu", "tpu:v5e"]  # one release: as --backend names them
    two = [report("cpu", "0.9.2"), report("cpu", "0.10.2")]
    assert report_labels(two) == ["jax 0.9.2", "jax 0.10.2"]
    both = [report(b, v) for v in ("0.9.2", "0.10.2") for b in ("cpu", "gpu:h100")]
    assert report_labels(both)[1] == "gpu:h100 · jax 0.9.2"


def test_a_python_the_user_names_imports_fieldmem_from_here_and_its_own_jax(tmp_path: Path) -> None:
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    interpreter = interpreters.interpreter_for_python(python)
    environ = dict(interpreter.environ)
    root = Path(environ["PYTHONPATH"])
    assert (root / "fieldmem" / "driver").is_dir() and not (root / "jax").exists()
    assert environ["VIRTUAL_ENV"] == str(tmp_path / "venv") and environ["PYTHONNOUSERSITE"] == "1"
    assert interpreter.python == str(python)


# ----------------------------------------------------------------------------
# Real environments: jaxlib 0.7.1 and 0.7.2 (made once for the module, with pip's cache)


def _run(folder: Path, environ: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` (``-m fieldmem check ...``, ``-c CODE ...``) in ``folder`` with ``environ``."""
    return subprocess.run(
        [sys.executable, *args], cwd=folder, env=environ, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def two_releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("releases")
    environ = {**os.environ, "FIELDMEM_ENVS": str(folder / "envs"), "COLUMNS": "120"}
    command = ["-m", "fieldmem", "check", str(UPGRADE), "--jax"]
    done = _run(
        folder, environ, *command, "0.7.1,0.7.2", "--format", "json", "-o", str(folder / "r.json"), timeout=1200
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    again = _run(folder, environ, *command, "0.7.1,0.7.2")
    # the oldest release fieldmem supports, beside the next one: the same program, no change of its own
    oldest = _run(folder, environ, *command, "0.7.0,0.7.1", timeout=1200)
    return {"folder": folder, "environ": environ, "first": done, "again": again, "oldest": oldest}


def _donated(path: Path) -> Any:
    (result,) = json.loads(path.read_text())["results"]
    return result["variants"]["donated"]


@pytest.mark.compile
def test_one_command_shows_the_published_regression_between_two_releases(two_releases: dict[str, Any]) -> None:
    folder = two_releases["folder"]
    before, after = _donated(folder / "r.jax-0.7.1.json"), _donated(folder / "r.jax-0.7.2.json")
    element_bytes = 65536 * 4
    assert before["memory"]["temp_bytes"] < 1024 <= element_bytes <= after["memory"]["temp_bytes"]
    grown = after["memory"]["live_peak_bytes"] - before["memory"]["live_peak_bytes"]
    assert grown >= element_bytes - 1024  # the temporary, less a few small buffers 0.7.2 no longer keeps
    # the bytes the newer release adds are at the user's jnp.exp line
    lines = {line["label"]: line["bytes"] for line in after["peak"]["lines"]}
    exp_line = next(n for n, text in enumerate(UPGRADE.read_text().splitlines(), 1) if "jnp.exp(x)" in text)
    label = next(label for label in lines if label.endswith(f"loop_update.py:{exp_line}"))
    assert lines[label] >= element_bytes
    # side by side in the terminal: the second release's column says what moved, at that line
    text = two_releases["again"].stdout
    assert "jax 0.7.1" in text and "jax 0.7.2" in text
    assert f"loop_update.py:{exp_line}" in text and "donated live peak" in text
    # and each report names its release
    assert json.loads((folder / "r.jax-0.7.2.json").read_text())["jaxlib_version"] == "0.7.2"


@pytest.mark.compile
def test_fit_shows_how_an_upgrade_moved_the_frontier(two_releases: dict[str, Any], tmp_path: Path) -> None:
    """``fieldmem fit --jax 0.7.1,0.7.2``: the loop update's largest size within 1 MiB halves under 0.7.2,
    whose temporary doubles what it needs, and the frontiers side by side say so."""
    assets = ROOT / "tests" / "assets"
    search = ["fit_steps.py:loop_update", "--args", "fit_steps:make_vector", "--vary", "n=16384..262144:16384"]
    done = _run(
        assets,
        two_releases["environ"],
        *["-m", "fieldmem", "fit", *search, "--max-peak", "1025KiB", "--donate", "x", "--jax", "0.7.1,0.7.2"],
        *["-f", "json", "-o", str(tmp_path / "fit.json")],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    searches = json.loads((tmp_path / "fit.json").read_text())["searches"]
    frontier = {s["jaxlib_version"]: s["rows"][0]["largest"] for s in searches}
    assert frontier == {"0.7.1": 262144, "0.7.2": 131072}
    text = " ".join(done.stdout.split())
    assert "jax 0.7.1 jax 0.7.2" in text and "131072 ≠" in text and "1 frontier moved" in text


@pytest.mark.compile
def test_each_report_names_the_libraries_of_its_releases_environment(two_releases: dict[str, Any]) -> None:
    """The libraries built on jax in a --jax environment are resolved against its release and can differ from
    the user's: each report names those its worker imported, at that environment's releases (read there, not
    here); the side-by-side table names those whose releases differ between the two. loop_update.py imports
    jax alone, so none is named (tests/gate/test_deploy_gate.py holds a target that imports flax and optax)."""
    from fieldmem.parent.envs import user_packages

    folder = two_releases["folder"]
    found = {}
    for release in ("0.7.1", "0.7.2"):
        report = json.loads((folder / f"r.jax-{release}.json").read_text())
        (python,) = (folder / "envs").glob(f"jax-{release}-*/bin/python")
        code = "import sys, importlib.metadata as m\nfor n in sys.argv[1:]:\n    try: print(n, m.version(n))\n"
        code += "    except m.PackageNotFoundError: pass"
        there = subprocess.run([str(python), "-c", code, *user_packages()], capture_output=True, text=True, check=True)
        installed = dict(line.split() for line in there.stdout.splitlines())
        assert "flax" in installed  # a library this test environment has, whatever release pip picked for 0.7.x
        named = report["library_versions"]
        assert all(installed.get(name) == version for name, version in named.items()), (named, installed)
        assert "flax" not in named  # installed there, but not imported by the target
        found[release] = named
    differing = {name for name in found["0.7.1"] if found["0.7.1"][name] != found["0.7.2"].get(name)}
    side_by_side = two_releases["again"].stdout
    assert all(name in side_by_side for name in differing), (differing, side_by_side[:2000])


@pytest.mark.compile
def test_two_releases_that_change_nothing_show_nothing_but_xlas_own_peak(two_releases: dict[str, Any]) -> None:
    """jax 0.7.0 (the oldest fieldmem supports) against 0.7.1: the same buffers, copies and aliases; at most
    XLA's own peak estimate moves, by a few bytes (seen once: 12 B), and it is said as what it is."""
    done = two_releases["oldest"]
    assert done.returncode in (0, 1), done.stderr[-3000:]
    moved = [line for line in done.stdout.splitlines() if line.strip().startswith("≠ jax 0.7.1:")]
    assert all("XLA peak" in line for line in moved), moved  # never a figure of fieldmem's, a copy, an alias
    assert all(re.search(r"\([+-]\d{1,2} B, [+-]0\.0%\)", line) for line in moved), moved
    assert moved or "no differences from jax 0.7.0" in done.stdout, done.stdout[-2000:]


@pytest.mark.compile
def test_environments_are_made_once_and_reused(two_releases: dict[str, Any]) -> None:
    assert "making an environment" in two_releases["first"].stderr
    assert "making an environment" not in two_releases["again"].stderr  # the second run starts no installer


@pytest.mark.compile
def test_a_baseline_from_one_release_fails_under_the_next_naming_the_upgrade(two_releases: dict[str, Any]) -> None:
    folder = two_releases["folder"]
    # recorded under 0.7.1, checked under 0.7.2: the regression names the upgrade
    old, environ = folder / "old.json", two_releases["environ"]
    saved = _run(
        folder, environ, "-m", "fieldmem", "check", str(UPGRADE), "--jax", "0.7.1", "--save-baseline", str(old)
    )
    assert saved.returncode == 0, saved.stderr[-3000:]
    assert {entry["jax_version"] for entry in json.loads(old.read_text())["entries"]} == {"0.7.1"}
    gated = _run(folder, environ, "-m", "fieldmem", "check", str(UPGRADE), "--jax", "0.7.2", "--baseline", str(old))
    assert gated.returncode == 1, gated.stdout + gated.stderr
    said = " ".join(gated.stdout.split())
    assert "live-peak" in said and "[jax 0.7.1 → 0.7.2: the upgrade's, unless the code changed too]" in said


# ----------------------------------------------------------------------------
# A deviceless compiler fieldmem's own environment holds, not the user's

_WITHOUT_LIBTPU = """
import sys
import fieldmem.request.backends as backends

installed = backends._installed
backends._installed = lambda module: False if module == "libtpu" else installed(module)  # as if not installed
from fieldmem.frontends.entry import main

sys.argv = ["fieldmem", *sys.argv[1:]]
main()
"""


@pytest.mark.compile
def test_a_tpu_compile_without_libtpu_here_runs_in_a_cached_environment_and_says_the_same(tmp_path: Path) -> None:
    """Issue 33, item 5: --backend tpu:v5e where the user's environment has no libtpu is checked by workers
    under a cached environment of the same jax with it; the report is the one the installed libtpu gives."""
    example = ROOT / "examples" / "interior.py"
    environ = {**os.environ, "FIELDMEM_ENVS": str(tmp_path / "envs"), "COLUMNS": "120"}
    args = ["check", str(example), "--backend", "cpu,tpu:v5e", "--format", "json"]
    away = _run(tmp_path, environ, "-c", _WITHOUT_LIBTPU, *args, "-o", str(tmp_path / "away.json"), timeout=1200)
    assert away.returncode in (0, 1), away.stderr[-3000:]
    assert "tpu:v5e: its compiler is not installed here" in away.stderr
    here = _run(tmp_path, environ, "-m", "fieldmem", *args, "-o", str(tmp_path / "here.json"))
    assert here.returncode == away.returncode, here.stderr[-3000:]
    for backend in ("cpu", "tpu-v5e"):
        a = json.loads((tmp_path / f"away.{backend}.json").read_text())
        h = json.loads((tmp_path / f"here.{backend}.json").read_text())
        assert a["backend"] == h["backend"] and a["plugin_versions"] == h["plugin_versions"]
        for ra, rh in zip(a["results"], h["results"], strict=True):
            for variant in ("plain", "donated"):
                assert ra["variants"][variant]["memory"] == rh["variants"][variant]["memory"], (backend, variant)


@pytest.mark.compile
def test_the_api_checks_under_each_release_in_the_environments_made_before(
    two_releases: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fieldmem.check_releases``: the same reports from Python, from the cached environments (no installer)."""
    import fieldmem
    from fieldmem.parent import envs

    monkeypatch.setenv("FIELDMEM_ENVS", two_releases["environ"]["FIELDMEM_ENVS"])
    monkeypatch.setattr(envs, "run_logged", lambda *a, **k: pytest.fail("an installer started"))
    reports = fieldmem.check_releases(str(UPGRADE), jax=["0.7.1", "0.7.2"])
    assert [r.jax_version for r in reports] == ["0.7.1", "0.7.2"]
    before, after = (r.results[0].variants["donated"].memory for r in reports)
    assert after.live_peak_bytes - before.live_peak_bytes >= 65536 * 4 - 1024


_PLUGIN_TEST = """
import jax
import jax.numpy as jnp

from loop_update import N, loop_update


def test_the_loop_update_makes_no_temporary(fieldmem_check):
    report = fieldmem_check(loop_update, jax.ShapeDtypeStruct((N,), jnp.float32), donate="x")
    assert report.jax_version == EXPECTED
    assert report.results[0].variants["donated"].memory.temp_bytes < 1024
"""


@pytest.mark.compile
def test_the_pytest_plugin_checks_under_the_release_it_is_given(
    two_releases: dict[str, Any], pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--fieldmem-jax``: the session's checks run under that release's environment (made before: no
    installer), so a test suite can be run against a candidate jax; one release per session."""
    monkeypatch.setenv("FIELDMEM_ENVS", two_releases["environ"]["FIELDMEM_ENVS"])
    (pytester.path / "loop_update.py").write_text(UPGRADE.read_text())
    for release, outcome in (("0.7.1", {"passed": 1}), ("0.7.2", {"failed": 1})):
        pytester.makepyfile(test_loop=f"EXPECTED = {release!r}\n" + _PLUGIN_TEST)
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--fieldmem-jax", release)
        result.assert_outcomes(**outcome)
        assert "making an environment" not in result.stderr.str()
    refused = pytester.runpytest_subprocess("--fieldmem-jax", "0.7.1,0.7.2")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert "one release per session" in refused.stderr.str()
