"""``fieldmem check --watch``: after the first check, check again what each save changes.

The first check is the one ``fieldmem check`` makes, printed the same way.
Then this process (which never imports jax) keeps the worker that checked
(:class:`~fieldmem.parent.isolate.WatchSession`: jax imported, compiled
programs cached) and polls the files the targets depend on: each target's
module file and the local modules it imports (:mod:`fieldmem.worker.user_modules`).
A file is read again when its modification time or size changed, and it
counts as edited only when its bytes did (a save of the same bytes does
nothing); a file is read once it stayed the same for :data:`SETTLE` seconds
(editors write a file in more than one go).

On an edit, the worker executes the edited modules again, loads the targets
depending on them, and checks each target whose code, settings or values
changed (its fingerprint, :mod:`fieldmem.worker.fingerprint`); the others'
results stand. This prints, per target checked again, its row as
``fieldmem check`` prints it and what changed since its last check
(:func:`~fieldmem.gate.compare.result_changes`: a copy new or gone, an
alias lost or new, a donation now unusable, a figure moved), or one
``fieldmem: error:`` line when it could not be checked (a syntax error):
the loop goes on, and the next save checks again.

Ctrl-C ends the loop: the worker is stopped, and the exit code is the one
``fieldmem check`` would give for the targets as they were last checked
(the baseline, when one is compared with, included).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import typer

from fieldmem.frontends.output import echo_rendered, terminal_options, write_files
from fieldmem.gate.baseline import compare_to_baseline, refuse_shared_names
from fieldmem.gate.compare import result_changes
from fieldmem.model.errors import FieldmemError, one_line
from fieldmem.model.escaping import visible
from fieldmem.render import get_renderer
from fieldmem.render.table import render_lines
from fieldmem.request.definitions import display_path

if TYPE_CHECKING:
    from fieldmem.gate.baseline import Baseline
    from fieldmem.model.comparison import Change
    from fieldmem.model.target import TargetResult
    from fieldmem.parent.isolate import Recheck, WatchSession
    from fieldmem.request.build import CheckRequest

__all__ = ["POLL", "SETTLE", "FileWatch", "watch"]

POLL = 0.01  # seconds between two looks at the watched files (one stat call per file)
SETTLE = 0.01  # seconds a changed file must stay the same before it is read


def _stat(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size


def _digest(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


class FileWatch:
    """Files polled for edits: by modification time and size, then by their bytes."""

    def __init__(self, files: Iterable[str] = ()) -> None:
        self._stats: dict[str, tuple[int, int] | None] = {}
        self._digests: dict[str, str | None] = {}
        self.add(files)

    def add(self, files: Iterable[str]) -> None:
        """Watch these files too (as they are now)."""
        for path in files:
            if path not in self._stats:
                self._stats[path] = _stat(path)
                self._digests[path] = _digest(path)

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(sorted(self._stats))

    def edited(self) -> list[str]:
        """The files whose bytes changed since the last look (a file gone or back counts); waits until
        the files that moved have stayed the same for :data:`SETTLE` seconds."""
        moved = {path: now for path in self._stats if (now := _stat(path)) != self._stats[path]}
        while moved:
            time.sleep(SETTLE)
            again = {path: _stat(path) for path in moved}
            if again == moved:
                break
            moved = again
        edited = []
        for path, now in moved.items():
            self._stats[path] = now
            digest = _digest(path)
            if digest != self._digests[path]:
                self._digests[path] = digest
                edited.append(path)
        return sorted(edited)


def watch(session: WatchSession, request: CheckRequest, baseline: Baseline | None, code: int) -> int:
    """Check again on every edit until Ctrl-C; the exit code of the targets as last checked.

    ``code``: the first check's exit code, returned when nothing is checked again.
    """
    files = FileWatch(_all_files(session))
    # saved while the first check ran: the worker may have read them before the save
    pending = [path for path in files.files if (_stat(path) or (0, 0))[0] >= session.started_ns]
    typer.echo(
        f"fieldmem: watching {len(files.files)} file(s) for changes; Ctrl-C to stop",
        err=True,
    )
    sys.stdout.flush()
    try:
        while True:
            edited, pending = sorted(set(files.edited()) | set(pending)), []
            if not edited:
                time.sleep(POLL)
                continue
            try:
                code = _recheck(session, request, baseline, edited)
            except FieldmemError as exc:  # the run's own error (its worker cannot start): said, and watched on
                typer.echo(one_line(f"fieldmem: error: {exc.message}"), err=True)
                code = 2
            files.add(_all_files(session))
    except KeyboardInterrupt:
        typer.echo("fieldmem: watch stopped", err=True)
    finally:
        session.close()
    return code


def _all_files(session: WatchSession) -> set[str]:
    return {path for paths in session.files().values() for path in paths}


def _recheck(session: WatchSession, request: CheckRequest, baseline: Baseline | None, edited: Sequence[str]) -> int:
    shown = visible(", ".join(display_path(path) for path in edited))
    typer.echo(f"fieldmem: {shown} changed: checking again", err=True)
    started = time.perf_counter()
    recheck = session.recheck(edited)
    took = time.perf_counter() - started
    if recheck.restarted:
        why = "its worker process had died" if not recheck.deaths else "a worker process died"
        typer.echo(f"fieldmem: {why}: a new one was started (jax started again)", err=True)
    _print_recheck(recheck, request)
    sys.stdout.flush()  # a pipe (tee, a test) gets the rows before the line below
    checked = sum(len(row) for row in recheck.checked[:1])
    same = sum(len(row) for row in recheck.same[:1])
    kept = f"; {same} unchanged, not checked again" if same else ""
    typer.echo(f"fieldmem: checked {checked} target(s) again in {took:.2f} s{kept}", err=True)
    reports = recheck.reports

    for report in reports:  # an edit that gives two targets one name: said, nothing written
        refuse_shared_names(report)
    if request.output.file is not None or request.output.html is not None:
        write_files(reports, request.output, request.options.min_bytes)
    if baseline is not None:
        settings = request.baseline
        reports = tuple(
            compare_to_baseline(report, baseline, settings.tolerances, root=settings.root) for report in reports
        )
    return max((report.exit_code for report in reports), default=0)


def _print_recheck(recheck: Recheck, request: CheckRequest) -> None:
    """Per backend: one error line per target that could not be checked, the rows of those checked,
    and under them what changed for each since its last check."""
    min_bytes = request.options.min_bytes
    options = terminal_options(request.output.verbose, min_bytes)
    several = len(recheck.reports) > 1
    for report, checked, gone in zip(recheck.reports, recheck.checked, recheck.gone or [()] * len(recheck.reports)):
        on = f" [{report.backend}]" if several else ""
        ok: list[TargetResult] = []
        chains = []
        lines: list[str] = []
        spec_failed = False
        for target in checked:
            results, target_chains = target.now
            before = {r.name: r for r in target.before[0]} if target.before is not None else {}
            for result in results:
                if result.status == "error" and result.error is not None:
                    label = result.target if result.name == result.target else f"{result.target} ({result.name})"
                    typer.echo(one_line(f"fieldmem: error: {label}{on}: {result.error.message}"), err=True)
                    spec_failed = spec_failed or result.name == result.target
                    continue
                ok.append(result)
                lines += [f"{line}{on}" for line in _changes(result, before.get(result.name), min_bytes)]
            chains += list(target_chains)
        if ok:
            shown = dataclasses.replace(report, results=tuple(ok), chains=tuple(chains), baseline=None)
            echo_rendered(get_renderer("table").render(shown, options), options)
        if not spec_failed:
            lines += [f"{name}{on}: gone (its module no longer has it)" for name in gone]
        if lines:  # wrapped at the terminal's width, each continuation further in
            echo_rendered(render_lines(lines, options), options)


def _changes(result: TargetResult, before: TargetResult | None, min_bytes: int) -> list[str]:
    """``name: what changed`` lines for one result (one line when nothing did)."""
    if before is None:
        return [f"{result.name}: new target"]
    if before.status == "error":
        return [f"{result.name}: checked (it could not be checked last time)"]
    changes = result_changes(before, result, min_bytes)
    if not changes:
        return [f"{result.name}: no change since its last check"]
    return [f"{result.name}: {_words(change)}" for change in changes]


def _words(change: Change) -> str:
    """A change as ``fieldmem compare`` words it; a verdict without its summary (the row above has it)."""
    if change.kind == "verdict":
        return f"verdict {change.before} → {change.after}"
    return change.message
