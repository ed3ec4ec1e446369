"""Check and run one target in a worker process of its own (``--run``).

Why a process per target: ``Device.memory_stats()["peak_bytes_in_use"]`` is a
high-water mark over the process's life with no reset, so only a fresh
process gives one target's peak; and a target that crashes the runtime,
hangs or runs the device out of memory must not take fieldmem down or hide
the other targets.

The parent (:func:`check_isolated`) writes a request (the spec as typed, the
options it was resolved with, the check options, the working directory and
``sys.path``) to a temporary folder and starts ``python -m fieldmem.worker
FOLDER``. The worker resolves the spec again, picks the target by name,
checks and runs it in its own process, and writes the results with
:mod:`fieldmem.codec` to ``FOLDER/result.json``. A worker that dies, or
outlives ``--timeout`` (it is killed), becomes an error result naming what
happened; its stderr's last line is kept. This module imports no jax: the
worker does, through the checker.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

from fieldmem.codec import decode, encode
from fieldmem.errors import FieldmemError, TargetError
from fieldmem.report import Chain, ErrorInfo, TargetResult

__all__ = ["check_isolated", "main"]

_RESULT = "result.json"
_REQUEST = "request.json"


@dataclasses.dataclass(frozen=True)
class _Outcome:
    results: tuple[TargetResult, ...]
    chains: tuple[Chain, ...] = ()


def _error(spec: str, name: str, kind: str, message: str, definition: str | None) -> TargetResult:
    return TargetResult(
        target=spec, name=name, status="error", definition=definition, error=ErrorInfo(kind=kind, message=message)
    )


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


def check_isolated(target: Any, options: Any) -> tuple[list[TargetResult], list[Chain]]:
    """Check (and run, as ``options`` says) ``target`` in a worker process; never raises for the target's faults.

    ``target`` is a :class:`~fieldmem.target.Target` or
    :class:`~fieldmem.target.ChainTarget` that ``resolve_target`` made (it
    carries the options it was resolved with).
    """
    first = getattr(target, "first", target)
    request = {
        "spec": target.spec,
        "name": target.name,
        "target_options": encode(first.options),
        "check_options": encode(dataclasses.replace(options, isolate=False)),
        "cwd": os.getcwd(),
        "sys_path": list(sys.path),
    }
    with tempfile.TemporaryDirectory(prefix="fieldmem-worker-") as folder:
        Path(folder, _REQUEST).write_text(json.dumps(request))
        try:
            done = subprocess.run(
                [sys.executable, "-m", "fieldmem.worker", folder],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                timeout=options.timeout,
                env=os.environ.copy(),
                text=True,
            )
        except subprocess.TimeoutExpired:
            message = (
                f"did not finish within --timeout {options.timeout:g} s; its worker process was killed "
                "(the other targets still ran)"
            )
            return [_error(target.spec, target.name, "timeout", message, first.definition)], []
        result_file = Path(folder, _RESULT)
        if result_file.exists():
            try:
                outcome = decode(_Outcome, json.loads(result_file.read_text()))
            except (ValueError, TypeError, KeyError) as exc:
                message = f"its worker wrote a result fieldmem cannot read ({exc})"
                return [_error(target.spec, target.name, "crash", message, first.definition)], []
            return list(outcome.results), list(outcome.chains)
        why = _last_line(done.stderr)
        message = f"its worker process {_death(done.returncode)} while checking or running it" + (
            f": {why}" if why else ""
        )
        kind = "out-of-memory" if "RESOURCE_EXHAUSTED" in done.stderr or "MemoryError" in done.stderr else "crash"
        return [_error(target.spec, target.name, kind, message, first.definition)], []


def _work(request: dict[str, Any]) -> _Outcome:
    from fieldmem.checker import CheckOptions, check_targets
    from fieldmem.target import TargetOptions, resolve_target

    os.chdir(request["cwd"])
    sys.path[:] = request["sys_path"]
    target_options = decode(TargetOptions, request["target_options"] or {})
    options = decode(CheckOptions, request["check_options"])
    try:
        found = [t for t in resolve_target(request["spec"], target_options) if t.name == request["name"]]
        if not found:
            raise TargetError(f"{request['spec']!r} no longer has a target named {request['name']!r}")
    except FieldmemError as exc:
        return _Outcome((_error(request["spec"], request["name"], exc.kind, exc.message, None),))
    report = check_targets(found[:1], options)
    return _Outcome(report.results, report.chains)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m fieldmem.worker FOLDER (started by fieldmem check --run)", file=sys.stderr)
        return 2
    folder = Path(args[0])
    request = json.loads((folder / _REQUEST).read_text())
    outcome = _work(request)
    partial = folder / (_RESULT + ".partial")
    partial.write_text(json.dumps(encode(outcome)))
    os.replace(partial, folder / _RESULT)
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a process
    raise SystemExit(main())
