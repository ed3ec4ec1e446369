"""The child side of ``--run`` isolation: ``python -m fieldmem.engine.worker FOLDER`` checks and runs targets.

Started by :mod:`fieldmem.engine.isolate`, never by a user. It reads the
request in ``FOLDER`` (:mod:`fieldmem.engine.workfolder`), takes the parent's
working directory and ``sys.path``, and for each target appends ``start N``
to the events, resolves the spec again, picks the target by name, checks and
runs it in this process (through the checker, which imports jax), writes its
:class:`~fieldmem.engine.workfolder.WorkerResult` and appends ``done N``. A
crash or a hang here is the parent's to report.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fieldmem.codec import decode, encode
from fieldmem.engine.results import error_result, internal_error
from fieldmem.engine.workfolder import EVENTS, REQUEST, WorkerResult, result_file
from fieldmem.errors import FieldmemError, TargetError

__all__ = ["main"]


def _work(item: dict[str, Any], options: Any) -> WorkerResult:
    """Check one target of the request; whatever goes wrong is that target's error, never the worker's end."""
    try:
        return _check_item(item, options)
    except FieldmemError as exc:
        return WorkerResult((error_result(item["spec"], item["name"], exc),))
    except Exception as exc:
        return WorkerResult((error_result(item["spec"], item["name"], internal_error(exc, "checking it")),))


def _check_item(item: dict[str, Any], options: Any) -> WorkerResult:
    from fieldmem.driver import start_jax
    from fieldmem.engine.checker import check_targets
    from fieldmem.request.target import TargetOptions, resolve_target

    start_jax()  # before the user's module imports jax: quiet about the plugins' start-up noise

    target_options = decode(TargetOptions, item["target_options"] or {})
    found = [t for t in resolve_target(item["spec"], target_options) if t.name == item["name"]]
    if not found:
        raise TargetError(f"{item['spec']!r} no longer has a target named {item['name']!r}")
    report = check_targets(found[:1], options)
    return WorkerResult(report.results, report.chains)


def main(argv: Sequence[str] | None = None) -> int:
    """Check every target of the request in folder ``argv[0]``; 2 when started without one."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m fieldmem.engine.worker FOLDER (started by fieldmem check --run)", file=sys.stderr)
        return 2
    from fieldmem.request.options import CheckOptions

    folder = Path(args[0])
    request = json.loads((folder / REQUEST).read_text())
    os.chdir(request["cwd"])
    sys.path[:] = request["sys_path"]
    options = decode(CheckOptions, request["check_options"])
    with open(folder / EVENTS, "a", buffering=1) as events:
        for item in request["items"]:
            index = item["index"]
            events.write(f"start {index}\n")
            events.flush()
            written = _work(item, options)
            try:
                text = json.dumps(encode(written))
            except Exception as exc:  # a result the codec cannot write is this target's error, not the worker's end
                error = internal_error(exc, "writing its result")
                text = json.dumps(encode(WorkerResult((error_result(item["spec"], item["name"], error),))))
            partial = folder / f"result-{index}.json.partial"
            partial.write_text(text)
            os.replace(partial, result_file(folder, index))
            events.write(f"done {index}\n")
            events.flush()
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a process
    raise SystemExit(main())
