"""Issue 49: nothing lost and no false pass on the surfaces that landed since the last hostile round:
one name per target, functions with nothing to update, modules that patch jax, the files fieldmem
writes, the cached environments, tolerances and ``--config``.

Each test failed on the main branch before these fixes (a false pass, a replaced FIFO or device, a
traceback, a hang). What would hang runs with a short bound. No environment with another jax is
downloaded: the installer and the interpreters are fakes, as in ``tests/parent/test_envs.py``.
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

pytest_plugins = ["pytester"]

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


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
        # nothing of fieldmem's written (Python's own bytecode of a.py and b.py aside, where it writes any)
        written = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".") and p.name != "__pycache__")
        assert written == ["a.py", "b.py"]


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

    from fieldmem.frontends.api import check_function

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

    from fieldmem.frontends.api import check_function
    from fieldmem.model.errors import CompileError

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
        one_error_line(result, f"{option} {path.name!r} is not a regular file (a {kind})")
    assert _kinds(special) == kinds


def test_a_report_file_that_became_a_fifo_is_never_replaced(tmp_path: Path) -> None:
    """What is checked at write time (one file per backend, ``report.cpu.json``, is not checked up front)."""
    from fieldmem.frontends.output import WriteError, write_file
    from fieldmem.model.files import NotRegularFile, write_atomic

    special = _special_files(tmp_path)
    kinds = _kinds(special)
    for kind, path in special.items():
        with pytest.raises(NotRegularFile, match=rf"it is not a regular file \(a {kind}\)"):
            write_atomic(path, "{}")
        with pytest.raises(
            WriteError, match=rf"not writing {re.escape(repr(str(path)))}: it is not a regular file \(a {kind}\)"
        ):
            write_file(path, "{}")
    assert _kinds(special) == kinds
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_job_summary_naming_a_fifo_never_blocks(tmp_path: Path) -> None:
    """``$GITHUB_STEP_SUMMARY`` naming a FIFO with no reader blocked for ever; a device was written to."""
    special = _special_files(tmp_path)
    code = (
        "import sys; sys.path.insert(0, 'tests')\n"
        "from factories import make_report, make_result\n"
        "from fieldmem.frontends.output import WriteError, write_job_summary\n"
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
        assert done.stdout.startswith(
            f"not writing the job summary: GITHUB_STEP_SUMMARY {str(path)!r}: it is not a regular file (a {kind})"
        )
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
    result.stderr.fnmatch_lines(["ERROR: fieldmem: error: --fieldmem-report 'pipe' is not a regular file (a FIFO)*"])
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
    from fieldmem.model.errors import OptionError
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


# ---- item 5: environments that can be trusted ----------------------------------------------------------------

from test_envs import _fake_env  # noqa: E402

from fieldmem.model.errors import EnvError  # noqa: E402
from fieldmem.parent import envs  # noqa: E402


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "envs"
    monkeypatch.setenv("FIELDMEM_ENVS", str(folder))
    return folder


def _no_installer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(envs, "_create", lambda *a: pytest.fail("an installer started"))


@pytest.mark.parametrize(
    ("version", "said"),
    [
        ("0.7", "'0.7' is not a jax release"),
        ("0.7.1.0", "'0.7.1.0' is not a jax release"),
        ("00.07.01", "'00.07.01' is not a jax release"),
        ("\u0660.\u0667.\u0661", "is not a jax release"),  # Arabic-Indic digits
        ("0.4.0", "jax 0.4.0 is older than fieldmem's worker supports: it supports jax 0.7.0 to"),
        ("9.0.0", "jax 9.0.0 is newer than"),
    ],
)
def test_a_release_is_checked_before_anything_is_downloaded(
    root: Path, monkeypatch: pytest.MonkeyPatch, version: str, said: str
) -> None:
    """``envs create 0.7``, ``--jax 0.7.1.0``, ``00.07.01`` downloaded a whole environment, then complained;
    Arabic-Indic digits passed both checks; ``envs create 0.4.0`` had no range check."""
    _no_installer(monkeypatch)
    done = runner.invoke(app, ["envs", "create", version])
    assert done.exit_code == 2 and said in done.output and done.output.count("\n") == 1, done.output
    if said.endswith("is not a jax release"):
        one_error_line(check("mod.py", "--jax", version), said)
    assert not root.exists()


def test_a_cached_environment_is_checked_against_its_name(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An environment named 0.7.1 holding 0.10.2 compared "no differences" with 0.10.2."""
    _no_installer(monkeypatch)
    folder = _fake_env(root, "0.7.1", holds="0.10.2")
    with pytest.raises(EnvError) as caught:
        envs.ensure_env("0.7.1")
    message = caught.value.message
    assert message == (
        f"the cached environment for jax 0.7.1 in {folder} is not usable: it holds jax 0.10.2 and jaxlib 0.10.2, "
        f"not 0.7.1; remove it (fieldmem envs remove {folder.name}) and it is made again on first use"
    )
    # --jax: its environment has the libraries built on jax installed here too (its own folder)
    with_libraries = _fake_env(root, "0.7.1", holds="0.10.2", packages=envs.user_packages())
    result = check("mod.py", "--jax", "0.7.1")
    one_error_line(result, "holds jax 0.10.2", f"fieldmem envs remove {with_libraries.name}")
    # the fix it names works
    assert runner.invoke(app, ["envs", "remove", folder.name]).exit_code == 0 and not folder.exists()


@pytest.mark.parametrize("broken", ["jax/__init__.py", "jaxlib", "python"])
def test_a_broken_cached_environment_is_one_line_with_the_fix(
    root: Path, monkeypatch: pytest.MonkeyPatch, broken: str
) -> None:
    """A deleted jax/__init__.py or jaxlib file gave 46-68 lines of the worker's traceback; a 0-byte python,
    Exec format error in fieldmem's own process."""
    _no_installer(monkeypatch)
    folder = _fake_env(root, "0.9.2")
    site = next(folder.glob("lib/python*/site-packages"))
    if broken == "python":
        (folder / "bin" / "python").unlink()
        (folder / "bin" / "python").write_bytes(b"")
        (folder / "bin" / "python").chmod(0o755)
        said = "is no program"
    elif broken == "jaxlib":
        (site / "jaxlib" / "__init__.py").unlink()
        said = "jaxlib 0.9.2 there lacks jaxlib/__init__.py"
    else:
        (site / broken).unlink()
        said = "jax 0.9.2 there lacks jax/__init__.py"
    with pytest.raises(EnvError, match=re.escape(said) + r".*fieldmem envs remove jax-0\.9\.2-py"):
        envs.ensure_env("0.9.2")


def test_a_relative_fieldmem_envs_is_relative_to_where_fieldmem_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative FIELDMEM_ENVS built the environment under envs_rel/envs_rel/ (the installer runs in the
    environments folder), then FileNotFoundError, 554 MiB left behind."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FIELDMEM_ENVS", "envs_rel")
    assert envs.env_root() == tmp_path / "envs_rel"
    _fake_installer(monkeypatch, tmp_path)
    env = envs.ensure_env("0.9.2")
    assert env.folder == tmp_path / "envs_rel" / env.request.folder_name and env.folder.is_dir()
    assert not (tmp_path / "envs_rel" / "envs_rel").exists()


def _fake_installer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, script: str | None = None) -> None:
    """pip as the installer, its venv step making what _fake_env makes at the folder it is given (as the
    installer runs: in the environments folder), its install step ``script`` (default: nothing)."""
    maker = tmp_path / "make_env.py"
    maker.write_text(
        "import sys\n"
        f"sys.path[:0] = [{str(ROOT / 'tests')!r}, {str(ROOT / 'tests' / 'parent')!r}, {str(ROOT)!r}]\n"
        "from pathlib import Path\n"
        "from test_envs import _fake_env\n"
        "target = Path(sys.argv[1])\n"
        "made = _fake_env(target.parent / (target.name + '.made'), sys.argv[2], marker=False)\n"
        "for part in made.iterdir():\n"
        "    part.rename(target / part.name)\n"
        "made.rmdir(); made.parent.rmdir()\n"
    )
    monkeypatch.setenv("FIELDMEM_INSTALLER", "pip")
    monkeypatch.setattr(
        envs, "venv_command", lambda installer, folder: [sys.executable, str(maker), str(folder), "0.9.2"]
    )
    install = [sys.executable, "-c", script or "pass"]
    monkeypatch.setattr(envs, "install_command", lambda *a: install)
    monkeypatch.setattr(envs, "installed_distributions", lambda python: {"jax": "0.9.2", "jaxlib": "0.9.2"})


def test_a_full_or_read_only_environments_folder_is_one_line_and_leaves_nothing(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only folder raised OSError from .locks (create and remove); on a full disk the error named a
    log in a deleted folder, and the log kept was empty."""
    import errno

    _fake_installer(monkeypatch, tmp_path)
    real_mkdir = Path.mkdir

    def read_only(self: Path, *args: Any, **kwargs: Any) -> None:
        if self == root / ".locks" or root / ".locks" in self.parents:
            raise OSError(errno.EROFS, "Read-only file system")
        real_mkdir(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(Path, "mkdir", read_only)
        root.mkdir()
        with pytest.raises(EnvError, match=r"cannot write in the environments folder .*: Read-only file system"):
            envs.ensure_env("0.9.2")
        _fake_env(root, "0.10.2")
        with pytest.raises(EnvError, match=r"cannot write in the environments folder .*: Read-only file system"):
            envs.remove_env("0.10.2")
    envs.remove_env("0.10.2")

    def full(command: list[str], log: Any, progress: Any, label: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(envs, "run_logged", full)
        with pytest.raises(EnvError) as caught:
            envs.ensure_env("0.9.2")
    assert caught.value.message == (
        f"cannot make the environment for jax 0.9.2 in {str(root)!r}: No space left on device (nothing was left behind)"
    )
    assert sorted(p.name for p in root.iterdir()) == [".locks"]

    # the installer failed and its log cannot be kept beside the environments: the message names no log
    def failed(command: list[str], log: Any, progress: Any, label: str) -> int:
        log.write("ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device\n")
        return 1

    def no_room(path: Any, text: str, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(envs, "run_logged", failed)
        patch.setattr(envs, "write_atomic", no_room)
        with pytest.raises(EnvError) as caught:
            envs.ensure_env("0.9.2")
    message = caught.value.message
    assert "the installer's log could not be kept: No space left on device" in message, message
    assert ".tmp" not in message and sorted(p.name for p in root.iterdir()) == [".locks"]


def test_the_install_timeout_ends_the_installers_whole_process_group(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FIELDMEM_ENV_TIMEOUT killed only the installer's outer process: a 3 s limit took 14.6 s, and what it
    started kept running (and kept its output open)."""
    import time

    pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    _fake_installer(monkeypatch, tmp_path, script)
    monkeypatch.setenv("FIELDMEM_ENV_TIMEOUT", "2")
    started = time.monotonic()
    with pytest.raises(EnvError, match=r"installing jax 0\.9\.2 ran past 2 s and was stopped"):
        envs.ensure_env("0.9.2")
    assert time.monotonic() - started < 20
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the installer's child outlived the timeout"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for this purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


def test_an_environment_in_use_is_not_removed(root: Path) -> None:
    """``envs remove`` during a running --jax check made it blame the user's factory."""
    folder = _fake_env(root, "0.9.2")
    with envs.folder_in_use(folder):
        with pytest.raises(EnvError, match="is in use by a running fieldmem"):
            envs.remove_env("0.9.2")
        assert folder.is_dir()
    envs.remove_env("0.9.2")
    with pytest.raises(EnvError, match="was removed as this check began"), envs.folder_in_use(folder):
        pass


def _python_without_jax(tmp_path: Path) -> Path:
    """A venv-like folder whose bin/python runs the base Python of this one, which has no jax."""
    base = Path(getattr(sys, "_base_executable", sys.executable))
    probe = subprocess.run([str(base), "-I", "-c", "import jax"], capture_output=True, timeout=120)
    if probe.returncode == 0:
        pytest.skip("the base Python has jax")
    python = tmp_path / "nojax" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.symlink_to(base)
    return python


@pytest.mark.parametrize("kind", ["no-jax", "empty", "echo"])
def test_a_python_that_is_no_worker_is_one_line_within_its_bound(tmp_path: Path, kind: str) -> None:
    """--python without jax printed the worker's traceback; a 0-byte one gave Exec format error; one that
    never answers (a program echoing its input) ran for ever, --timeout or not."""
    (tmp_path / "good.py").write_text(CASE_NAMED.format(rows=64))
    if kind == "no-jax":
        python = _python_without_jax(tmp_path)
        said = "jax cannot be imported under"
    elif kind == "empty":
        python = tmp_path / "empty"
        python.write_bytes(b"")
        python.chmod(0o755)
        said = "cannot be started (Exec format error)"
    else:
        python = tmp_path / "echo"
        python.write_text("#!/bin/sh\ncat\n")
        python.chmod(0o755)
        said = "did not answer within 3 s of its start"
    done = subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", "good.py", "--python", str(python), "--run", "--timeout", "3"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT), FIELDMEM_CACHE_DIR="none"),
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert said in done.stderr and "--python names the Python of an environment that has jax" in done.stderr


def test_python_with_watch_runs_the_kept_worker_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--python was ignored under --watch (the header said this jax), where --jax with --watch is refused."""
    from fieldmem.parent import isolate

    monkeypatch.chdir(tmp_path)
    (tmp_path / "good.py").write_text(CASE_NAMED.format(rows=64))
    seen: list[Any] = []

    class Session:
        def __init__(self, *args: Any, interpreter: Any = None, **kwargs: Any) -> None:
            seen.append(interpreter)
            raise EnvError("stopped here")

    monkeypatch.setattr(isolate, "WatchSession", Session)
    one_error_line(check("good.py", "--python", sys.executable, "--watch"), "stopped here")
    (interpreter,) = seen
    assert interpreter is not None and interpreter.python == str(Path(sys.executable).absolute())


def test_fieldmem_jax_workers_can_import_pytest(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--fieldmem-jax 0.7.1 failed every test module importing pytest: "No module named 'pytest' — a fieldmem
    bug". Its workers look last in a folder of links to this pytest and what it needs."""
    this_pytest = sys.modules["pytest"]
    from fieldmem.frontends import pytest_plugin
    from fieldmem.parent import interpreters, isolate
    from fieldmem.parent.supervisor import Supervisor

    folder = Path(envs.borrowed_folder(("pytest",)) or "")
    assert folder.parent.parent == root
    assert (folder / "pytest").resolve() == Path(this_pytest.__file__).parent.resolve()
    assert {"_pytest", "pluggy", "iniconfig"} <= {p.name for p in folder.iterdir()}
    # the plugin gives its workers that folder, holds the environment in use, and the worker looks there last
    env = _fake_env(root, "0.9.2")
    made = envs.from_marker(env)
    assert made is not None
    monkeypatch.setattr(
        interpreters, "worker_interpreters", lambda *a: [interpreters.env_interpreter(made, "jax 0.9.2")]
    )
    sessions: list[Any] = []

    class Session:
        def __init__(self, timeout: Any, interpreter: Any, environ: Any = None) -> None:
            sessions.append(interpreter)

        def check(self, *args: Any) -> Any:
            raise EnvError("stopped here")

        def close(self) -> None:
            pass

    monkeypatch.setattr(isolate, "CallSession", Session)
    session = pytest_plugin.PluginSession(defaults=pytest_plugin.Limits(), report_path=None, jax="0.9.2")
    with pytest.raises(EnvError):
        session._check_in_worker("function", len, b"", {}, 1024, None)
    (interpreter,) = sessions
    assert interpreter.fallback_path == (str(folder),) and interpreter.env_folder == str(env)
    with pytest.raises(EnvError, match="in use"):
        envs.remove_env("0.9.2")
    session.close()
    supervisor = Supervisor([], [None], None, False, None)
    supervisor.interpreter = interpreter
    assert supervisor._paths()["fallback_path"] == [str(folder)]


def test_a_killed_creation_leaves_no_installer_running(root: Path, tmp_path: Path) -> None:
    """After a SIGKILL of ``fieldmem envs create`` the orphaned pip kept installing (338 MiB)."""
    import signal
    import time

    pid_file = tmp_path / "installer.pid"
    installer_code = f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n"
    (tmp_path / "installer.py").write_text(installer_code)
    (tmp_path / "create.py").write_text(
        "import sys\n"
        f"sys.path[:0] = [{str(ROOT)!r}]\n"
        "from fieldmem.parent import envs\n"
        "envs.venv_command = lambda installer, folder: [sys.executable, '-c', 'pass']\n"
        f"envs.install_command = lambda *a: [sys.executable, {str(tmp_path / 'installer.py')!r}]\n"
        "envs.ensure_env('0.9.2')\n"
    )
    child = subprocess.Popen(
        [sys.executable, str(tmp_path / "create.py")],
        env=dict(os.environ, FIELDMEM_ENVS=str(root), FIELDMEM_INSTALLER="pip"),
    )
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()):
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    installer = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(installer) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(installer), "the installer outlived the fieldmem that started it"


# ---- hostile programs: a function that forks while pytest's own process checks it -------------------------------

FORKS = """\
import os

import jax.numpy as jnp


def update(u):
    copy = os.fork()  # while it is traced: the copy has none of jax's threads
    if copy:
        with open("copy.pid", "w") as file:
            file.write(str(copy))
    return u.at[0].set(1.0)


def test_checked(fieldmem_check):
    fieldmem_check(update, jnp.zeros((64, 64)))


def test_after():
    pass
"""


@pytest.mark.compile
def test_a_fork_while_checked_in_pytests_process_never_hangs_the_session(pytester: pytest.Pytester) -> None:
    """With --fieldmem-isolate=no, a copy forked while jax traced hung for ever, holding pytest's output (200 s)."""
    import signal
    import time

    pytester.makepyfile(test_forks=FORKS)
    result = pytester.runpytest_subprocess("--fieldmem-isolate=no", "-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(passed=2)
    assert result.stdout.str().count("2 passed") == 1
    copy = int((pytester.path / "copy.pid").read_text())
    deadline = time.monotonic() + 10
    while _alive(copy) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not _alive(copy), "the forked copy still runs"
    finally:
        if _alive(copy):
            os.kill(copy, signal.SIGKILL)


def test_two_reports_of_one_name_never_write_over_each_other(tmp_path: Path) -> None:
    """An environment named 0.7.1 holding 0.10.2 gave two reports labelled ``cpu``: one -o file replaced the
    other. However two reports come to share a name, no file is written for either."""
    from fieldmem.frontends.output import WriteError, write_files
    from fieldmem.request.build import OutputSettings

    from factories import make_report, make_result

    reports = [make_report((make_result(),), jax_version="0.10.2") for _ in range(2)]
    with pytest.raises(WriteError, match=r"2 reports are all named 'cpu'.*so none is written"):
        write_files(reports, OutputSettings(format="json", file=tmp_path / "r.json"), 1024)
    assert list(tmp_path.iterdir()) == []


def test_bytecode_python_makes_again_is_not_missing(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pip lists the bytecode it compiled in RECORD; a cleared __pycache__ is not a broken environment."""
    _no_installer(monkeypatch)
    folder = _fake_env(root, "0.9.2")
    record = next(folder.glob("lib/python*/site-packages/jax-0.9.2.dist-info/RECORD"))
    record.write_text(record.read_text() + "jax/__pycache__/__init__.cpython-311.pyc,,\n")
    assert envs.ensure_env("0.9.2").folder == folder
