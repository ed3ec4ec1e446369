"""Issue 49: nothing lost and no false pass on the surfaces that landed since the last hostile round:
one name per target, functions with nothing to update, modules that patch jax, the files fieldmem
writes, the cached environments, tolerances and ``--config``.

Each test failed on the main branch before these fixes (a false pass, a replaced FIFO or device, a
traceback, a hang). What would hang runs with a short bound. No environment with another jax is
downloaded: the installer and the interpreters are fakes, as in ``tests/test_envs.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fieldmem.cli import app

pytest_plugins = ["pytester"]

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def check(*args: str, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, ["check", *args], env={"COLUMNS": "120", **(env or {})})


def fieldmem_lines(stderr: str) -> list[str]:
    """fieldmem's own lines of stderr (jax's absl and plugin lines left out)."""
    return [line for line in stderr.splitlines() if line.startswith("fieldmem:")]


def one_error_line(result: Any, *expected: str) -> str:
    """Exit 2, no traceback, one ``fieldmem: error:`` line holding each of ``expected``."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = fieldmem_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("fieldmem: error: "), result.stderr
    for text in expected:
        assert text in lines[0], (text, lines[0])
    return lines[0]


# ---- item 1: one name, one entry ----------------------------------------------------------------------------

CASE_NAMED = """\
import jax.numpy as jnp
import fieldmem


def update(u):
    return u.at[0].set(1.0)


fieldmem.case(update, args=lambda: (jnp.ones(({rows}, 64)),), name="dupsz")
"""


@pytest.mark.compile
def test_two_files_registering_one_case_name_are_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The save said "1 target recorded" and kept one file's entry; growing a.py 9x then passed."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text(CASE_NAMED.format(rows=64))
    (tmp_path / "b.py").write_text(CASE_NAMED.format(rows=64))
    for extra in ([], ["--save-baseline", "base.json"], ["--save-baseline", "base.json", "--accept-current"]):
        result = check("a.py", "b.py", "-o", "report.json", *extra)
        one_error_line(result, "a.py and b.py both have a target named 'dupsz'")
        assert result.stdout == ""
        assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["a.py", "b.py"]


# ---- item 2: nothing to update is never in place ------------------------------------------------------------


def _returns_none(u: Any) -> None:
    return None


def _returns_new(u: Any) -> Any:
    import jax.numpy as jnp

    return jnp.zeros_like(u) + 1.0  # the donated size, without reading u: jit drops u


def _returns_sum(u: Any) -> Any:
    return u.sum()


@pytest.mark.compile
@pytest.mark.parametrize("update", [_returns_none, _returns_new, _returns_sum], ids=["none", "new", "reduction"])
def test_a_function_whose_outputs_reuse_nothing_fails_expect_in_place(update: Any) -> None:
    """Returning None, or a new array of the donated size, read "✓ expect-in-place: in place with donation"
    beside "u is donated but unusable"; a reduction was already "nothing to update"."""
    import jax.numpy as jnp

    from fieldmem.api import check_function

    report = check_function(update, jnp.ones((64, 64)), expect="in-place")
    (result,) = report.results
    assert result.verdict is not None and result.verdict.kind == "nothing-to-update", result.verdict
    assert result.verdict.summary.startswith("nothing to update in place: no output can reuse a donated buffer; u ")
    (check,) = result.checks
    assert not check.passed and "nothing to update in place" in check.message
    assert report.exit_code == 1
    assert not any(f.code == "state-grows" for f in result.verdict.findings)  # u was dropped, not outgrown


@pytest.mark.compile
def test_a_function_returning_what_jax_jit_refuses_is_jax_error() -> None:
    """A function returning a string is refused by jax.jit ("not a valid JAX type"); fieldmem said it was in
    place with donation."""
    import jax.numpy as jnp

    from fieldmem.api import check_function
    from fieldmem.errors import CompileError

    with pytest.raises(CompileError, match="returned a value of type <class 'str'>, which is not a valid JAX type"):
        check_function(lambda u: "hello", jnp.ones((64, 64)), expect="in-place")


# ---- item 4: outputs never replace what is not a regular file -----------------------------------------------


def _special_files(folder: Path) -> dict[str, Path]:
    """A FIFO, a socket, and (where this process may make one) a character device twin of /dev/null."""
    import socket
    import stat as stat_module

    made = {"FIFO": folder / "pipe"}
    os.mkfifo(made["FIFO"])
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "sock"))
    server.close()  # the socket file stays
    made["socket"] = folder / "sock"
    try:
        os.mknod(folder / "null", 0o666 | stat_module.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError):
        pass
    else:
        made["character device"] = folder / "null"
    return made


def _kinds(paths: dict[str, Path]) -> dict[str, int]:
    import stat as stat_module

    return {name: stat_module.S_IFMT(os.lstat(path).st_mode) for name, path in paths.items()}


@pytest.mark.parametrize("option", ["--output", "--html", "--save-baseline"])
def test_an_output_that_is_a_fifo_device_or_socket_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    """-o and --html replaced a FIFO, or a twin of /dev/null, with a regular file (--save-baseline refused)."""
    monkeypatch.chdir(tmp_path)
    special = _special_files(tmp_path)
    kinds = _kinds(special)
    (tmp_path / "mod.py").write_text("def update(u):\n    return u\n")
    for kind, path in special.items():
        result = check("mod.py:update", "--shapes", "f32[8]", option, path.name)
        one_error_line(result, f"{option} {path.name!r} is a {kind}, not a regular file")
    assert _kinds(special) == kinds


def test_a_report_file_that_became_a_fifo_is_never_replaced(tmp_path: Path) -> None:
    """What is checked at write time (one file per backend, ``report.cpu.json``, is not checked up front)."""
    from fieldmem.emit import WriteError, write_file
    from fieldmem.files import NotRegularFile, write_atomic

    special = _special_files(tmp_path)
    kinds = _kinds(special)
    for kind, path in special.items():
        with pytest.raises(NotRegularFile, match=f"it is a {kind}, not a regular file"):
            write_atomic(path, "{}")
        with pytest.raises(WriteError, match=f"not writing {str(path)!r}: it is a {kind}, not a regular file"):
            write_file(path, "{}")
    assert _kinds(special) == kinds
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_job_summary_naming_a_fifo_never_blocks(tmp_path: Path) -> None:
    """``$GITHUB_STEP_SUMMARY`` naming a FIFO with no reader blocked for ever; a device was written to."""
    special = _special_files(tmp_path)
    code = (
        "import sys; sys.path.insert(0, 'tests')\n"
        "from factories import make_report, make_result\n"
        "from fieldmem.emit import WriteError, write_job_summary\n"
        "from fieldmem.request.build import OutputSettings\n"
        "try:\n"
        "    write_job_summary([make_report((make_result(),))], OutputSettings(format='github'), 1024)\n"
        "except WriteError as exc:\n"
        "    print(exc.message)\n"
    )
    for kind, path in special.items():
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=dict(os.environ, GITHUB_STEP_SUMMARY=str(path), PYTHONPATH=str(ROOT)),
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"not writing the job summary: GITHUB_STEP_SUMMARY {str(path)!r}: it is a {kind}")
    # a regular file is appended to, as before
    summary = tmp_path / "summary.md"
    summary.write_text("# before\n")
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, GITHUB_STEP_SUMMARY=str(summary), PYTHONPATH=str(ROOT)),
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert summary.read_text().startswith("# before\n") and len(summary.read_text()) > len("# before\n")


@pytest.mark.parametrize("other", ["--fieldmem-baseline", "--fieldmem-save-baseline"])
def test_the_plugin_refuses_a_report_on_the_baseline(pytester: pytest.Pytester, other: str) -> None:
    """--fieldmem-report X with --fieldmem-baseline X (or --fieldmem-save-baseline X) wrote the report over
    the baseline before reading it; the CLI refuses the combination up front."""
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    baseline = pytester.path / "b.json"
    baseline.write_text("kept\n")
    result = pytester.runpytest("--fieldmem-report=b.json", f"{other}=b.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: fieldmem: error: --fieldmem-report '*b.json' and {other} '*b.json' name the same file: *"]
    )
    assert baseline.read_text() == "kept\n"


def test_the_plugin_refuses_a_report_that_is_a_fifo(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    os.mkfifo(pytester.path / "pipe")
    result = pytester.runpytest("--fieldmem-report=pipe")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: fieldmem: error: --fieldmem-report 'pipe' is a FIFO, not a regular file*"])
    assert (pytester.path / "pipe").is_fifo()


# ---- item 6: the plugin saves a baseline only when every test passed -----------------------------------------

CHECKED = """\
import jax.numpy as jnp


def update(u):
    return u.at[0].set(1.0)


def test_checked(fieldmem_check):
    fieldmem_check(update, jnp.zeros((64, 64)))
"""


@pytest.mark.compile
def test_the_plugin_saves_no_baseline_when_a_plain_test_failed(pytester: pytest.Pytester) -> None:
    """The docs say the baseline is saved when every test passed; a failing plain test did not stop it."""
    pytester.makepyfile(test_checked=CHECKED, test_plain="def test_plain():\n    assert 1 == 2\n")
    result = pytester.runpytest_subprocess("--fieldmem-isolate=no", "--fieldmem-save-baseline=b.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["fieldmem: not saving the baseline '*b.json': 1 test(s) failed, and a baseline records a session where*"]
    )
    assert not (pytester.path / "b.json").exists()
    # every test passing: saved
    (pytester.path / "test_plain.py").write_text("def test_plain():\n    assert 1 == 1\n")
    result = pytester.runpytest_subprocess("--fieldmem-isolate=no", "--fieldmem-save-baseline=b.json")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert [e["name"] for e in json.loads((pytester.path / "b.json").read_text())["entries"]] == [
        "test_checked.py:update"
    ]


# ---- item 6: numbers and paths --------------------------------------------------------------------------------

LONG_PERCENT = "9" * 400 + "%"


@pytest.mark.parametrize("tolerance", [LONG_PERCENT, f"peak:{LONG_PERCENT}", f"5%+{'9' * 400}MiB,temp:{LONG_PERCENT}"])
def test_a_tolerance_of_any_length_is_one_line_or_a_value(tolerance: str) -> None:
    """A 400-digit percentage raised OverflowError (cannot convert Infinity to integer) in the gate."""
    from fieldmem.errors import OptionError
    from fieldmem.request.tolerance import MAX_PERCENT, Tolerances

    with pytest.raises(OptionError, match=r"is too large: a (percentage is at most 1,000,000,000%|size is below)"):
        Tolerances.parse(tolerance)
    # the largest percentage and size are values, with allowances to compare against
    largest = Tolerances.parse(f"{MAX_PERCENT}%+{2**63 - 1}")
    assert largest.default.allowance(10) == MAX_PERCENT // 100 * 10 + 2**63 - 1
    assert Tolerances.parse(largest.describe()) == largest
    # a percentage too small for a float is no tolerance: exact, never an error
    assert Tolerances.parse("0." + "0" * 400 + "1%").describe() == "exact"


def test_a_long_tolerance_is_one_line_in_the_cli_the_config_and_the_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = pytester.runpytest(f"--fieldmem-tolerance={LONG_PERCENT}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: fieldmem: error: --fieldmem-tolerance *is too large*"])
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mod.py").write_text("def update(u):\n    return u\n")
    one_error_line(check("mod.py:update", "--shapes", "f32[8]", "--tolerance", LONG_PERCENT), "is too large")
    (tmp_path / "pyproject.toml").write_text(f'[tool.fieldmem]\ntolerance = "{LONG_PERCENT}"\n')
    one_error_line(check("mod.py:update", "--shapes", "f32[8]"), "tolerance", "is too large")


def test_config_says_what_a_path_is_when_it_is_not_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--config`` naming a FIFO, /dev/null or a symlink loop said "does not exist" (and a FIFO found by
    the search is never waited on)."""
    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "pipe")
    os.symlink("loop-b", tmp_path / "loop-a")
    os.symlink("loop-a", tmp_path / "loop-b")
    os.symlink("gone.toml", tmp_path / "dangling")
    (tmp_path / "folder").mkdir()
    (tmp_path / "mod.py").write_text("def update(u):\n    return u\n")
    for config, said in [
        ("pipe", "--config 'pipe' is a FIFO, not a file"),
        (os.devnull, f"--config {os.devnull!r} is a character device, not a file"),
        ("loop-a", "--config 'loop-a' is a symbolic link that cannot be followed"),
        ("dangling", "--config 'dangling' is a symbolic link to 'gone.toml', which does not exist"),
        ("folder", "--config 'folder': 'folder/pyproject.toml' does not exist"),
        ("gone.toml", "--config 'gone.toml' does not exist"),
    ]:
        one_error_line(check("mod.py:update", "--shapes", "f32[8]", "--config", config), said)
    assert (tmp_path / "pipe").is_fifo()
