"""The worker of ``fieldmem check`` is started first (fieldmem/parent/spawn.py, fieldmem/frontends/entry.py).

Whether the worker started ahead takes the options given after it, and ends
with a parent that never used it, is tested with real processes in
tests/parent/test_isolation.py; here: which command lines start it, and that
starting it loads nothing but the standard library.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from fieldmem.parent import spawn


@pytest.mark.parametrize(
    ("argv", "started"),
    [
        (["check", "model.py"], True),
        (["check", "model.py:update", "--run", "-j", "2"], True),
        (["check", "model.py", "--watch"], True),
        (["check", "model.py", "--no-isolate"], False),  # checked in this process: no worker
        (["check", "--help"], False),
        (["check", "-h"], False),
        (["fit", "model.py:step", "--vary", "batch=1..64"], True),
        (["fit", "--help"], False),
        (["compare", "a.json", "b.json"], False),
        (["--version"], False),
        ([], False),
    ],
)
def test_which_command_lines_start_the_worker_first(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], started: bool
) -> None:
    calls: list[bool] = []
    monkeypatch.setattr(spawn, "prestart", lambda: calls.append(True))
    spawn.prestart_for(argv)
    assert calls == ([True] if started else [])


def test_the_entry_point_loads_no_command_line_library_or_jax_before_the_worker_starts() -> None:
    code = (
        "import sys\n"
        "import fieldmem.parent.spawn, fieldmem.frontends.entry\n"
        "print(sorted(m for m in ('jax', 'numpy', 'typer', 'rich', 'click', 'pydantic') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_console_script_is_the_entry_point() -> None:
    from pathlib import Path

    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["fieldmem"] == "fieldmem.frontends.entry:main"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_worker_started_ahead_that_no_check_takes_ends_with_the_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A usage error in ``fieldmem.frontends.cli.main`` called in a process that goes on (a test, a script): the worker
    started ahead is ended on the way out, not left running until that process ends."""
    from helpers_process import alive

    from fieldmem.frontends.cli import main

    started: list[spawn.Spawned] = []
    real = spawn.spawn

    def recording() -> spawn.Spawned:
        started.append(real())
        return started[-1]

    monkeypatch.setattr(spawn, "spawn", recording)
    assert main(["check", "--bogus", "model.py"]) == 2
    assert "fieldmem: error:" in capsys.readouterr().err
    (worker,) = started
    assert spawn._prestarted is None
    assert worker.process.returncode is not None and not alive(worker.process.pid)
