"""User code never runs in the process that writes the report and decides the exit code (issue 19, items 4 and 5).

``fieldmem check`` loads, checks and runs the targets in a worker process
(fieldmem/parent/isolate.py, worker.py). These tests run the real command in a
subprocess, as CI does, with targets that end their process with ``os._exit``
(at import, in their factory, at trace time), print to stdout or hang:

- the target whose worker died is that target's error (exit 2), the other
  targets' results still come out, and ``-f json`` on stdout stays one valid
  JSON document (the user's prints go to stderr);
- the parent process never imports jax;
- a worker dies with its parent, and leaves no temporary folder behind.

In the caller's process (the Python API, the pytest plugin) ``sys.exit`` and
other BaseExceptions from the user's code are that target's error too;
KeyboardInterrupt is not contained (tests/parent/test_containment.py).
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

ROOT = Path(__file__).resolve().parents[2]
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
@pytest.mark.parametrize(
    ("code", "jobs", "workers"), [(0, "1", "1"), (7, "4", "1"), (7, "4", "3")], ids=["one", "jobs", "workers"]
)
def test_a_target_that_ends_its_process_is_that_targets_error(
    tmp_path: Path, code: int, jobs: str, workers: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """os._exit(0) or os._exit(7) at import, in a factory and at trace time: exit 2, every other result; the
    same when three workers share the three files (``FIELDMEM_WORKERS=3``): a death is its own worker's."""
    monkeypatch.setenv("FIELDMEM_WORKERS", workers)
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
        "from fieldmem.frontends.cli import main\n"
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
def test_a_worker_aborting_in_xla_leaves_no_dump_folder(tmp_path: Path) -> None:
    """Issue 29, item 6: XLA aborts (SIGABRT) in a deviceless compile while its dump folder is open; the
    parent, which survives, removes it. A scratch folder of a fieldmem that was killed is removed too."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    stale = temp / "fieldmem-xla-999999999-0123abcd"  # a killed run's (no such process)
    (stale / "fieldmem-xla-x").mkdir(parents=True)
    other = temp / "fieldmem-xla-1-0123abcd"  # a live process's (init): left alone
    other.mkdir()
    done = _check(tmp_path, "aborts_in_xla.py", "--backend", "tpu:v5e")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in temp.iterdir()) == [other.name], "a dump folder was left behind"


@pytest.mark.compile
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_child_the_target_left_running_ends_with_its_worker(tmp_path: Path) -> None:
    """Issue 29, item 6: a child process the user's module started goes with the worker (its process group),
    and fieldmem does not wait for it."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    pid_file = tmp_path / "child.pid"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", "leaves_a_child.py", "--no-cache"],
        capture_output=True,
        text=True,
        cwd=HERE,
        env=_env(temp, FIELDMEM_TEST_CHILD_PID=str(pid_file)),
        timeout=300,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    child = int(pid_file.read_text())
    try:
        deadline = time.monotonic() + 5
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child), "the target's child outlived its worker"
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)
    assert took < 60
    assert not list(temp.iterdir())


@pytest.mark.compile
def test_base_exceptions_in_the_callers_process_are_that_targets_error() -> None:
    """The Python API checks in the caller's process: sys.exit and a BaseException subclass are contained."""
    from fieldmem.parent.checker import check

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
def test_the_parent_counts_the_workers_installation_folders_as_library_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a worker names as its interpreter's folders (another Python's, under --python or --jax) is library
    code in the parent that picks each value's source line. The worker here runs this Python: the parent is
    made not to know fieldmem's own folder, so that the worker's naming it is news."""
    from fieldmem.model import libraries
    from fieldmem.parent import isolate
    from fieldmem.request.options import CheckOptions
    from fieldmem.request.target import TargetOptions

    fieldmem_folder = libraries._FIELDMEM
    monkeypatch.setattr(libraries, "_OTHER_INTERPRETERS", [])
    monkeypatch.setattr(libraries, "_FIELDMEM", "/nowhere/fieldmem")
    libraries.library_folders.cache_clear()
    try:
        unit = isolate.Unit(str(ROOT / "examples" / "field.py"), TargetOptions())
        (report,) = isolate.check_reports([unit], [None], CheckOptions(cache_dir=None), check_backends=False)
        assert report.results and all(r.status == "ok" for r in report.results)
        # of what the worker named, only the folder the parent did not know is added
        assert libraries._OTHER_INTERPRETERS[:] == [fieldmem_folder], libraries._OTHER_INTERPRETERS
        assert libraries.is_library_file(f"{fieldmem_folder}/codec.py")
    finally:
        monkeypatch.undo()
        libraries.library_folders.cache_clear()
        libraries.is_library_file.cache_clear()


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
    code = "from fieldmem.parent import spawn\nspawn.prestart()\nprint(spawn._prestarted.process.pid, flush=True)\n"
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


# what a worker never needs: analysis (findings, xla), the report's formats and gates, the command line, the
# parent's side of the engine, and every third-party package fieldmem itself depends on (a user's program may
# need some of them itself, flax imports rich: those are the user's dependencies, so the target here is plain jax)
_NOT_FOR_THE_WORKER = [
    "fieldmem.findings",
    "fieldmem.xla",
    "fieldmem.gate",
    "fieldmem.render",
    "fieldmem.frontends.cli",
    "fieldmem.frontends.api",
    "fieldmem.frontends.output",
    "fieldmem.pytest_plugin",
    "fieldmem.parent.checker",
    "fieldmem.parent.decide",
    "fieldmem.parent.isolate",
    "fieldmem.parent.remote_readers",
    "fieldmem.parent.supervisor",
    "fieldmem.parent.worker_process",
    "typer",
    "click",
    "rich",
    "msgspec",
    "google.protobuf",
]
_BLOCKED_WORKER = """
import importlib.abc, json, runpy, sys
BLOCKED = json.loads(sys.argv[1])
class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ImportError(f"{name} is not for the worker")
sys.meta_path.insert(0, Blocked())
sys.argv = ["fieldmem.worker.main", *sys.argv[2:]]
runpy.run_module("fieldmem.worker.main", run_name="__main__", alter_sys=True)
"""


@pytest.mark.compile
@pytest.mark.parametrize("extra", [{}, {"run": True}], ids=["check", "run"])
def test_a_worker_needs_only_the_driver_and_the_standard_library(tmp_path: Path, extra: dict[str, Any]) -> None:
    """A worker started with every fieldmem package but its own, the driver, the request and ground blocked,
    and every third-party dependency of fieldmem's (msgspec, typer, rich, protobuf) too, loads an optimizer
    step, compiles it (and runs it) and sends readings that the parent's brain turns into the result a full
    check gives."""
    from fieldmem.parent import isolate
    from fieldmem.parent.checker import check
    from fieldmem.parent.decide import finish_job
    from fieldmem.parent.remote_readers import RemoteHands, event_key
    from fieldmem.parent.supervisor import Supervisor
    from fieldmem.request.options import CheckOptions
    from fieldmem.request.target import TargetOptions, described_target
    from fieldmem.worker.protocol import read_event

    assets = ROOT / "examples"
    options = CheckOptions(cache_dir=None, **extra)
    unit = isolate.Unit("optimizer.py", TargetOptions())
    supervisor = Supervisor([unit], [None], options, False, None)
    request = {**supervisor.request(supervisor.todo()), "cwd": str(assets), "sys_path": [str(assets), *sys.path]}
    answers, writer = os.pipe()
    worker = subprocess.Popen(
        [sys.executable, "-c", _BLOCKED_WORKER, json.dumps(_NOT_FOR_THE_WORKER), str(writer), str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=(writer,),
        cwd=assets,
    )
    os.close(writer)
    assert worker.stdin is not None
    worker.stdin.write(json.dumps(request).encode() + b"\n")
    worker.stdin.flush()
    events = []
    with open(answers, "rb") as pipe:
        for line in pipe:
            event = read_event(line)
            assert event is not None, line
            events.append(event)
            if event["e"] in ("end", "fatal", "yield"):
                break
    _, stderr = worker.communicate(timeout=60)  # its stdin's end lets it go
    assert events[-1]["e"] == "end", (events[-1], stderr.decode(errors="replace")[-2000:])
    kinds = [e["e"] for e in events if "name" in e]
    assert "error" not in kinds, [e["result"]["error"] for e in events if e["e"] == "error"]
    from fieldmem.model.libraries import library_folders

    resolved = next(e for e in events if e["e"] == "resolved")
    assert resolved["libraries"] == list(library_folders())  # whose files are library code, said once
    assert kinds == ["start", "plain", "variants", *(["run"] if extra else []), "done"], kinds

    class Replay:  # the parent's side of the pipe, over the events the worker sent
        def wait(self, key: Any, wanted: frozenset[str]) -> dict[str, Any]:
            return next(e for e in events if e.get("name") and event_key(e) == key and e["e"] in wanted)

        def send(self, request: dict[str, Any]) -> None:
            raise AssertionError(f"nothing to ask: {request}")

    start = next(e for e in events if e["e"] == "start")
    hands = RemoteHands(Replay(), options)
    result = finish_job(hands.job(event_key(start), described_target(start["target"])), options, hands)
    assert result.status == "ok", result.error
    assert result.verdict is not None and result.verdict.kind == "in-place"
    assert result.variants["donated"].aliases
    full = check([str(assets / "optimizer.py")], options=CheckOptions(cache_dir=None, isolate=False)).results
    assert [a.input for a in result.variants["donated"].aliases] == [
        a.input for a in full[0].variants["donated"].aliases
    ]
    if extra:
        run = result.variants["donated"].run
        assert run is not None and run.aliases and all(a.confirmed for a in run.aliases)


@pytest.mark.compile
def test_several_workers_share_the_specs_and_give_the_report_one_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two specs on two backends with ``FIELDMEM_WORKERS=4`` and ``--jobs 4``: four workers, one per (backend,
    spec), and the reports of one worker, result for result; a bad ``FIELDMEM_WORKERS`` is one line."""
    from fieldmem.model.errors import OptionError
    from fieldmem.parent import isolate
    from fieldmem.parent.supervisor import Supervisor
    from fieldmem.request.options import CheckOptions

    examples = ROOT / "examples"
    units = [isolate.Unit(str(examples / name)) for name in ("field.py", "interior.py")]
    options = CheckOptions(cache_dir=None, jobs=4)
    backends: list[str | None] = [None, None]  # the same backend twice: two reports, as two backends give

    def supervised(workers: str) -> tuple[int, list[Any]]:
        monkeypatch.setenv("FIELDMEM_WORKERS", workers)
        supervisor = Supervisor(units, backends, options, False, None)
        reports = isolate._reports(supervisor.run())
        return supervisor.started, [[r.to_dict()["results"] for r in reports]]

    started_one, one = supervised("1")
    started_four, four = supervised("4")
    assert (started_one, started_four) == (1, 4)
    strip = {"lower_seconds", "compile_seconds", "analysis_seconds"}

    def timeless(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: timeless(v) for k, v in value.items() if k not in strip}
        if isinstance(value, list):
            return [timeless(v) for v in value]
        return value

    assert timeless(one) == timeless(four)
    monkeypatch.setenv("FIELDMEM_WORKERS", "many")
    with pytest.raises(OptionError, match="FIELDMEM_WORKERS='many': give a number of workers of at least 1"):
        Supervisor(units, backends, options, False, None).run()


@pytest.mark.compile
def test_meanwhile_runs_once_after_the_request_is_sent_before_any_result() -> None:
    """``meanwhile`` (the command's output modules) runs once, once the worker has its request and before the
    first result reaches ``on_result``: while the worker loads jax, not before the request or after the answers."""
    from fieldmem.parent import isolate
    from fieldmem.parent.worker_process import WorkerProcess
    from fieldmem.request.options import CheckOptions
    from fieldmem.request.target import TargetOptions

    seen: list[str] = []
    send = WorkerProcess.send

    def sending(self: WorkerProcess, request: Any) -> None:
        seen.append("sent")
        send(self, request)

    units = [isolate.Unit(str(ROOT / "examples" / name), TargetOptions()) for name in ("field.py", "optimizer.py")]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(WorkerProcess, "send", sending)
        reports = isolate.check_reports(
            units,
            [None],
            CheckOptions(cache_dir=None),
            check_backends=False,
            on_result=lambda result: seen.append("result"),
            meanwhile=lambda: seen.append("meanwhile"),
        )
    assert all(r.status == "ok" for r in reports[0].results)
    assert seen[:2] == ["sent", "meanwhile"] and seen.count("meanwhile") == 1
    assert seen.count("result") == len(reports[0].results) >= 2
