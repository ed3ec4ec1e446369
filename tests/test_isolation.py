"""User code never runs in the process that writes the report and decides the exit code (issue 19, items 4 and 5).

``fieldmem check`` loads, checks and runs the targets in a worker process
(fieldmem/engine/isolate.py, worker.py). These tests run the real command in a
subprocess, as CI does, with targets that end their process with ``os._exit``
(at import, in their factory, at trace time), print to stdout or hang:

- the target whose worker died is that target's error (exit 2), the other
  targets' results still come out, and ``-f json`` on stdout stays one valid
  JSON document (the user's prints go to stderr);
- the parent process never imports jax;
- a worker dies with its parent, and leaves no temporary folder behind.

In the caller's process (the Python API, the pytest plugin) ``sys.exit`` and
other BaseExceptions from the user's code are that target's error too;
KeyboardInterrupt is not contained (tests/test_containment.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest
from helpers_process import alive, children

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "tests" / "assets" / "isolation"


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, COLUMNS="120", TMPDIR=str(tmp), JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    env.pop("FORCE_COLOR", None)
    env.update(extra)
    return env


def _check(tmp_path: Path, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", *args, "--no-cache"],
        capture_output=True,
        text=True,
        cwd=HERE,
        env=_env(temp, FIELDMEM_TEST_CODE=str(code)),
        timeout=300,
    )


def _statuses(report: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    return {r["name"]: (r["status"], r["error"]["kind"] if r["error"] else None) for r in report["results"]}


@pytest.mark.compile
@pytest.mark.parametrize(("code", "jobs"), [(0, "1"), (7, "4")])
def test_a_target_that_ends_its_process_is_that_targets_error(tmp_path: Path, code: int, jobs: str) -> None:
    """os._exit(0) or os._exit(7) at import, in a factory and at trace time: exit 2, every other result."""
    done = _check(tmp_path, "good.py", "exit_at_import.py", "exits.py", "-f", "json", "-j", jobs, code=code)
    assert done.returncode == 2, done.stderr
    report = json.loads(done.stdout)  # stdout is the report and nothing else
    assert _statuses(report) == {
        "good": ("ok", None),
        "exit_at_import.py": ("error", "crash"),
        "ok": ("ok", None),
        "at_trace": ("error", "crash"),
        "in_factory": ("error", "crash"),
        "prints": ("ok", None),
    }
    assert [r["name"] for r in report["results"]] == [
        "good",
        "exit_at_import.py",
        "ok",
        "at_trace",
        "in_factory",
        "prints",
    ]
    messages = {r["name"]: r["error"]["message"] for r in report["results"] if r["error"]}
    assert messages["exit_at_import.py"].startswith(f"its worker process exited with status {code} while loading it")
    assert messages["at_trace"].startswith(f"its worker process exited with status {code} while checking it")
    assert report["backend"] == "cpu" and report["jax_version"]
    assert "printed by the user's function at trace time" in done.stderr
    assert "Traceback" not in done.stderr
    assert not list((tmp_path / "tmp").iterdir())  # nothing left behind


@pytest.mark.compile
def test_a_target_printing_to_stdout_leaves_json_on_stdout_valid(tmp_path: Path) -> None:
    done = _check(tmp_path, "exits.py:prints", "-f", "json")
    assert done.returncode == 0, done.stderr
    (result,) = json.loads(done.stdout)["results"]
    assert result["status"] == "ok"
    assert "printed by the user's function" not in done.stdout
    assert "printed by the user's function at trace time" in done.stderr


@pytest.mark.compile
def test_a_target_that_exits_with_run_is_that_targets_error(tmp_path: Path) -> None:
    done = _check(tmp_path, "exits.py", "--run", "-f", "json", code=7)
    assert done.returncode == 2, done.stderr
    assert _statuses(json.loads(done.stdout)) == {
        "ok": ("ok", None),
        "at_trace": ("error", "crash"),
        "in_factory": ("error", "crash"),
        "prints": ("ok", None),
    }


@pytest.mark.parametrize(
    ("folder", "args"),
    [
        (HERE, ["good.py"]),
        # a flax nnx adam step (flax, optax, jax): all of it is the worker's to import
        (ROOT / "tests" / "assets", ["wrapped_steps:nnx_step", "--args", "wrapped_steps:nnx_args"]),
    ],
    ids=["plain", "flax-nnx"],
)
def test_the_report_writing_process_never_imports_jax(tmp_path: Path, folder: Path, args: list[str]) -> None:
    """The parent loads no jax, jaxlib or library the user's program is written with, whatever the target."""
    out = tmp_path / "report.json"
    code = (
        "import sys\n"
        "from fieldmem.cli import main\n"
        f"code = main(['check', *{args!r}, '-f', 'json', '-o', {str(out)!r}, '--no-cache'])\n"
        "world = sorted({m.split('.')[0] for m in sys.modules} & {'jax', 'jaxlib', 'flax', 'optax', 'equinox'})\n"
        "print('RESULT', code, world, file=sys.stderr)\n"
    )
    temp = tmp_path / "tmp"
    temp.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=folder, env=_env(temp), timeout=300
    )
    assert done.stderr.strip().splitlines()[-1] == "RESULT 0 []", done.stderr
    (result,) = json.loads(out.read_text())["results"]
    assert result["status"] == "ok" and result["variants"]["donated"]["aliases"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("extra", [[], ["--run"]])
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_the_worker_dies_with_its_parent(tmp_path: Path, extra: list[str], how: signal.Signals) -> None:
    """The parent of a worker stuck in a target is killed: the worker and its folder are gone within seconds."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    parent = subprocess.Popen(
        [sys.executable, "-m", "fieldmem", "check", "hangs.py", *extra, "--no-cache"],
        cwd=HERE,
        env=_env(temp),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stderr is not None
        hanging = threading.Event()

        def watch(stream: IO[str]) -> None:
            for line in stream:  # the worker's prints come through the parent's stderr
                if "hanging now" in line:
                    hanging.set()

        threading.Thread(target=watch, args=(parent.stderr,), daemon=True).start()
        if not hanging.wait(timeout=120):
            pytest.fail("no worker ever started on the target")
        (worker,) = children(parent.pid)
        assert alive(worker)
        parent.send_signal(how)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 10
        while alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(worker), "the worker outlived its parent"
        assert not list(temp.iterdir()), "a temporary file or folder was left behind"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        assert parent.stderr is not None
        parent.stderr.close()


@pytest.mark.compile
def test_base_exceptions_in_the_callers_process_are_that_targets_error() -> None:
    """The Python API checks in the caller's process: sys.exit and a BaseException subclass are contained."""
    from fieldmem.engine.checker import check

    report = check([str(HERE / "base_exceptions.py")])
    results = {r.name: r for r in report.results}
    assert results["ok"].status == "ok"
    for name in ("sys_exit_at_trace", "base_exception_at_trace", "sys_exit_in_factory"):
        assert results[name].status == "error", name
        assert results[name].error is not None
    assert results["sys_exit_at_trace"].error.kind == "crash"
    assert results["sys_exit_at_trace"].error.message == "called sys.exit(4) while preparing and lowering it"
    assert results["base_exception_at_trace"].error.message == "raised Abort: stop here while preparing and lowering it"
    assert results["sys_exit_in_factory"].error.message.endswith("_exits_in_factory raised SystemExit: 5")
    assert report.exit_code == 2


@pytest.mark.compile
def test_check_function_raises_a_fieldmem_error_for_sys_exit() -> None:
    import jax.numpy as jnp

    import fieldmem

    def exits(u: Any) -> Any:
        sys.exit(0)

    with pytest.raises(fieldmem.FieldmemError, match=r"called sys.exit\(0\) while preparing and lowering it"):
        fieldmem.check_function(exits, jnp.ones(4))


@pytest.mark.compile
def test_a_worker_started_before_the_options_are_read_checks_with_them(tmp_path: Path) -> None:
    """``fieldmem check`` starts its worker before parsing the command line; what the options then set in the
    environment (``--devices`` writes XLA_FLAGS; JAX_PLATFORMS=cpu for a CPU check) is what the worker's jax
    starts with, and the worker's head start prints nothing (jaxlib loaded early logs at jax's level)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = _env(temp)
    env.pop("JAX_PLATFORMS")
    env.pop("XLA_FLAGS", None)
    done = subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", "good.py", "--devices", "3", "-f", "json", "--no-cache"],
        capture_output=True,
        text=True,
        cwd=HERE,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [d["platform"] for d in report["devices"]] == ["cpu"] * 3
    assert done.stderr == ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_worker_started_ahead_and_never_used_ends_with_its_parent(tmp_path: Path) -> None:
    """A usage error or ``--no-isolate`` leaves the worker started ahead unused: it ends when the parent does."""
    code = "from fieldmem.engine import spawn\nspawn.prestart()\nprint(spawn._prestarted.process.pid, flush=True)\n"
    temp = tmp_path / "tmp"
    temp.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=HERE, env=_env(temp), timeout=120
    )
    assert done.returncode == 0, done.stderr
    worker = int(done.stdout.split()[0])
    deadline = time.monotonic() + 20
    while alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(worker), "the worker started ahead outlived its parent"
    assert done.stderr == ""
