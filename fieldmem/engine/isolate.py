"""The parent side of ``--run`` isolation: targets checked and run in worker processes, crashes and hangs contained.

Why workers: ``Device.memory_stats()["peak_bytes_in_use"]`` is a high-water
mark over the process's life with no reset, so only a fresh process gives
one target's peak; and a target that crashes the runtime, hangs or runs the
device out of memory must not take fieldmem down or hide the other targets.

Where the backend has memory statistics (GPU, TPU), every target gets a
worker of its own. Where it has none (CPU) there is no peak to keep clean, so
one worker checks the targets one after the other, and only a crash or a hang
costs a new one: the target it was on is reported, and the targets after it
go to the next worker.

:func:`check_isolated` writes a request (each target's spec as typed, its
name and the options it was resolved with; the check options, the working
directory and ``sys.path``) to a temporary folder (:mod:`fieldmem.engine.workfolder`)
and starts ``python -m fieldmem.engine.worker FOLDER``. It watches the
worker's events: a target past ``--timeout`` seconds has its worker killed;
a worker that dies takes only the target it was on with it. This module
imports no jax (the worker does) and never raises for a target's fault.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fieldmem.codec import decode, encode
from fieldmem.engine.results import error_result
from fieldmem.engine.workfolder import EVENTS, REQUEST, WorkerResult, result_file
from fieldmem.errors import RunError
from fieldmem.report import Chain, TargetResult

__all__ = ["check_isolated"]


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _death(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


@dataclasses.dataclass
class _Watch:
    """What the parent saw of one worker: the targets it finished, the one it was on, how it ended."""

    finished: list[int] = dataclasses.field(default_factory=list)
    current: int | None = None
    timed_out: bool = False
    returncode: int = 0
    stderr: str = ""


def _events(path: Path) -> list[tuple[str, int]]:
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        what, _, index = line.partition(" ")
        if what in ("start", "done") and index.isdigit():
            found.append((what, int(index)))
    return found


def _watch(folder: Path, timeout: float | None) -> _Watch:
    """Run one worker on the request in ``folder``; kill it when a target takes longer than ``timeout``."""
    watch = _Watch()
    events_path = folder / EVENTS
    with open(folder / "stderr.txt", "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "fieldmem.engine.worker", str(folder)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=os.environ.copy(),
        )
        clock = time.monotonic()  # when the target in progress (or the worker's start) began
        seen = 0
        while True:
            returncode = process.poll()
            events = _events(events_path)
            for what, index in events[seen:]:
                if what == "start":
                    watch.current, clock = index, time.monotonic()
                else:
                    watch.finished.append(index)
                    watch.current = None
            seen = len(events)
            if returncode is not None:
                watch.returncode = returncode
                break
            if timeout is not None and time.monotonic() - clock > timeout:
                process.kill()
                process.wait()
                watch.timed_out = True
                break
            time.sleep(0.05)
    watch.stderr = (folder / "stderr.txt").read_text(errors="replace")
    return watch


def _request(targets: Sequence[Any], indices: Sequence[int], options: Any) -> dict[str, Any]:
    items = []
    for index in indices:
        target = targets[index]
        first = getattr(target, "first", target)
        items.append(
            {"index": index, "spec": target.spec, "name": target.name, "target_options": encode(first.options)}
        )
    return {
        "items": items,
        "check_options": encode(dataclasses.replace(options, isolate=False)),
        "cwd": os.getcwd(),
        "sys_path": list(sys.path),
    }


def check_isolated(
    targets: Sequence[Any], options: Any, *, fresh_each: bool
) -> list[tuple[list[TargetResult], list[Chain]]]:
    """Check (and run, as ``options`` says) every target in worker processes; never raises for their faults.

    ``targets`` are :class:`~fieldmem.request.target.Target`s or
    :class:`~fieldmem.request.target.ChainTarget`s that ``resolve_target`` made (each
    carries the options it was resolved with). ``fresh_each``: a worker per
    target (a clean device high-water mark each); else one worker for all,
    and a new one only after a crash or a timeout. Returns, per target in
    order, its results and chains.
    """
    outcomes: dict[int, tuple[list[TargetResult], list[Chain]]] = {}
    pending = list(range(len(targets)))
    while pending:
        batch = pending[:1] if fresh_each else pending
        with tempfile.TemporaryDirectory(prefix="fieldmem-worker-") as tmp:
            folder = Path(tmp)
            (folder / REQUEST).write_text(json.dumps(_request(targets, batch, options)))
            watch = _watch(folder, options.timeout)
            for index in watch.finished:
                outcomes[index] = _read_result(result_file(folder, index), targets[index])
            stuck = watch.current
            if stuck is None and len(watch.finished) < len(batch):
                # it died before it started on a target (jax did not start): charge the next one
                stuck = next(i for i in batch if i not in outcomes)
            if stuck is not None and stuck not in outcomes:
                outcomes[stuck] = ([_failure(targets[stuck], watch, options)], [])
        pending = [i for i in pending if i not in outcomes]
    return [outcomes[i] for i in range(len(targets))]


def _read_result(path: Path, target: Any) -> tuple[list[TargetResult], list[Chain]]:
    first = getattr(target, "first", target)
    try:
        written = decode(WorkerResult, json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError) as exc:
        error = RunError(f"its worker wrote a result fieldmem cannot read ({exc})", kind="crash")
        return [error_result(target.spec, target.name, error, first.definition)], []
    return list(written.results), list(written.chains)


def _failure(target: Any, watch: _Watch, options: Any) -> TargetResult:
    first = getattr(target, "first", target)
    if watch.timed_out:
        message = (
            f"did not finish within --timeout {options.timeout:g} s; its worker process was killed "
            "(the other targets still ran)"
        )
        return error_result(target.spec, target.name, RunError(message, kind="timeout"), first.definition)
    why = _last_line(watch.stderr)
    message = f"its worker process {_death(watch.returncode)} while checking or running it" + (
        f": {why}" if why else ""
    )
    kind = "out-of-memory" if "RESOURCE_EXHAUSTED" in watch.stderr or "MemoryError" in watch.stderr else "crash"
    return error_result(target.spec, target.name, RunError(message, kind=kind), first.definition)
