"""The output step of ``fieldmem check``: a run's reports to stderr, files, stdout and the baseline.

:func:`emit_reports` takes the reports the checker made and the request they
answer, and does, in this order: gate them against the baseline read before
the run; print one ``fieldmem: error:`` line per target that errored; write
``-o``/``--html`` atomically (one file per backend when there are several);
append the job summary to ``$GITHUB_STEP_SUMMARY`` for ``--format github``;
print the reports (then, for several backends, side by side); save the
baseline (``--accept-current``: the run is gated against what it records, so
it shows and exits as the next run with that baseline will). It returns the
exit code.

Renderers format and the gate compares; nothing here computes a finding. A
file that cannot be written raises :class:`WriteError` for the CLI to print;
nothing else here raises for a user's mistake.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from fieldmem.frontends.saving import gate_reports, save_reports
from fieldmem.gate.baseline import refuse_shared_names
from fieldmem.gate.compare import compare_reports
from fieldmem.model import files
from fieldmem.model.collector import collector_paused
from fieldmem.model.errors import FieldmemError, one_line
from fieldmem.model.files import NotRegularFile, append_to_file
from fieldmem.render import RenderOptions, get_renderer
from fieldmem.render.baseline import render_saved
from fieldmem.render.compare import get_compare_renderer
from fieldmem.render.github import job_summary
from fieldmem.render.jsonout import render_many
from fieldmem.request.build import backend_file

if TYPE_CHECKING:
    from fieldmem.gate.baseline import Baseline
    from fieldmem.model.report import Report
    from fieldmem.render.table import DetailsAhead
    from fieldmem.request.build import CheckRequest, OutputSettings

__all__ = [
    "WriteError",
    "echo_rendered",
    "emit_reports",
    "stdout_format",
    "stdout_options",
    "terminal_options",
    "write_file",
    "write_files",
]


class WriteError(FieldmemError):
    """A report file (``-o``, ``--html``) cannot be written. Exit code 2."""

    kind = "write"


@collector_paused()  # builds only fieldmem's documents and text, from records that all live on: see fieldmem.model.collector
def emit_reports(
    reports: Sequence[Report], request: CheckRequest, baseline: Baseline | None, ahead: DetailsAhead | None = None
) -> int:
    """Gate, print, write and save the reports of one run; return the run's exit code.

    Raises:
        WriteError: an ``-o``/``--html`` file cannot be written (nothing is printed to stdout then).
        BaselineError: two targets share a name (:func:`~fieldmem.gate.baseline.refuse_shared_names`):
            nothing is printed, written or saved then.
    """
    settings = request.baseline
    if request.backends is not None and request.backends_origin is not None:
        # the backends the run judges, and who named them: every output's header says so
        reports = tuple(
            dataclasses.replace(report, judged_backends=tuple(request.backends), judged_by=request.backends_origin)
            for report in reports
        )
    for report in reports:  # before anything is shown or written: one result per name
        refuse_shared_names(report)
    record_to = settings.save_to if settings.accept_current else None
    reports = gate_reports(reports, baseline, settings.tolerances, root=settings.root, record_to=record_to)
    _print_errors(reports)
    write_files(reports, request.output, request.options.min_bytes)
    write_job_summary(reports, request.output, request.options.min_bytes)
    _print_reports(reports, request.output, request.options.min_bytes, ahead)
    if settings.save_to is not None:
        refused = _save_baseline(reports, settings.save_to, settings.prune, settings.root, settings.accept_current)
        if refused is not None:
            return refused
    return max(report.exit_code for report in reports)


def report_labels(reports: Sequence[Report]) -> list[str]:
    """What each of several reports is called, side by side and in file names: its backend (``cpu``,
    ``tpu:v5e``); where the reports were made under several jax releases (``--jax``), its release too
    (``jax 0.9.2``, or ``cpu · jax 0.9.2`` with several backends)."""
    versions = {report.jax_version for report in reports}
    backends = {report.backend for report in reports}
    if len(versions) < 2:
        return [report.backend for report in reports]
    if len(backends) < 2:
        return [f"jax {report.jax_version}" for report in reports]
    return [f"{report.backend} · jax {report.jax_version}" for report in reports]


def _file_label(label: str) -> str:
    """A label as a part of a file name: ``tpu-v5e``, ``cpu.jax-0.9.2``."""
    return label.replace(" · ", ".").replace("jax ", "jax-").replace(":", "-").replace(" ", "-")


def _print_errors(reports: Sequence[Report]) -> None:
    """One stderr line per target that could not be checked, naming the backend when there are several."""
    several = len(reports) > 1
    for report, name in zip(reports, report_labels(reports)):
        for result in report.results:
            if result.status == "error" and result.error is not None:
                # a case of a bare module or file has its own name: show both
                label = result.target if result.name == result.target else f"{result.target} ({result.name})"
                on = f" [{name}]" if several else ""
                typer.echo(one_line(f"fieldmem: error: {label}{on}: {result.error.message}"), err=True)


def write_files(reports: Sequence[Report], output: OutputSettings, min_bytes: int) -> None:
    """``-o`` in the chosen format and ``--html``; several backends: one file each (report.cpu.json)."""
    file_options = RenderOptions(verbose=output.verbose, min_bytes=min_bytes)
    several = len(reports) > 1
    labels = report_labels(reports)
    if len(set(labels)) < len(labels) and (output.file is not None or output.html is not None):
        # two reports that cannot be told apart (one backend, one jax release): one file would replace the other
        same = next(label for label in labels if labels.count(label) > 1)
        raise WriteError(
            f"{labels.count(same)} reports are all named {same!r} (the same backend and jax release): "
            "their files would replace each other, so none is written"
        )
    for report, label in zip(reports, labels):
        if output.file is not None:
            text = get_renderer(output.format).render(report, file_options)
            write_file(_for_backend(output.file, _file_label(label), several), text)
        if output.html is not None:
            text = get_renderer("html").render(report, file_options)
            write_file(_for_backend(output.html, _file_label(label), several), text)


def write_job_summary(reports: Sequence[Report], output: OutputSettings, min_bytes: int) -> None:
    """With ``--format github`` on a GitHub runner: append the job summary (Markdown: a headline per
    target, then every regression, check and finding) to the file ``$GITHUB_STEP_SUMMARY`` names (a regular
    file: a FIFO is never waited on, a device never written).

    Raises:
        WriteError: the file cannot be written, or is not a regular file.
    """
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if output.format != "github" or not summary_file:
        return

    text = "".join(job_summary(report, RenderOptions(verbose=True, min_bytes=min_bytes)) for report in reports)
    try:
        append_to_file(summary_file, text)
    except NotRegularFile as exc:
        raise WriteError(
            f"not writing the job summary: GITHUB_STEP_SUMMARY {summary_file!r}: {exc}; name a file"
        ) from None
    except OSError as exc:
        raise WriteError(f"cannot write the job summary {summary_file!r}: {exc.strerror or exc}") from None


def stdout_format(output: OutputSettings) -> str:
    """The format printed on stdout: the table when ``-o`` took the format."""
    return "table" if output.file is not None else output.format


def stdout_options(output: OutputSettings, min_bytes: int) -> RenderOptions:
    """How the reports are rendered on stdout (:func:`terminal_options`, with ``--top``)."""
    return dataclasses.replace(terminal_options(output.verbose, min_bytes), top=output.top)


def _print_reports(
    reports: Sequence[Report], output: OutputSettings, min_bytes: int, ahead: DetailsAhead | None = None
) -> None:
    """Each report on stdout (the table when ``-o`` took the format), then several backends side by side;
    ``ahead``: the table's details rendered while the check ran."""
    options = stdout_options(output, min_bytes)
    renderer = get_renderer(stdout_format(output))
    if renderer.name == "json" and len(reports) > 1:
        # one document, which one json.load reads: several backends or jax releases, in the run's order
        echo_rendered(render_many(reports, options), options)
        return
    render = ahead.render if ahead is not None and renderer.name == "table" else renderer.render
    for report in reports:
        echo_rendered(render(report, options), options)
    if len(reports) > 1 and renderer.name == "table":
        side_by_side = compare_reports(list(zip(report_labels(reports), reports)), min_bytes=min_bytes)
        echo_rendered(get_compare_renderer("table").render(side_by_side, options), options)


def terminal_options(verbose: bool, min_bytes: int) -> RenderOptions:
    """How to render for stdout, as rich decides it (fieldmem adds no rule of its own).

    Width: ``COLUMNS``, else the terminal's (stdout's, or stdin's or stderr's when stdout is piped), else
    80. Colour: on a terminal, or when ``FORCE_COLOR`` (non-empty) or ``TTY_COMPATIBLE=1`` asks for it
    through a pipe; never on ``TERM=dumb`` or with ``TTY_COMPATIBLE=0``; ``NO_COLOR`` keeps the styles
    (bold, dim) without colours. Print what it renders with :func:`echo_rendered`, which keeps the
    colours a pipe was given.
    """
    from rich.console import Console

    console = Console(file=sys.stdout)
    color_system = console.color_system  # None: not a terminal (nor forced), or a dumb one
    return RenderOptions(
        verbose=verbose,
        min_bytes=min_bytes,
        width=console.width,
        color=color_system is not None,
        color_system=color_system or "standard",
        no_color=console.no_color,
    )


def echo_rendered(text: str, options: RenderOptions) -> None:
    """``text`` rendered with ``options`` on stdout; click would drop its colour codes on a pipe, and
    ``options`` already said whether there are any (:func:`terminal_options`)."""
    typer.echo(text, nl=False, color=options.color)


def _for_backend(path: Path, backend: str, several: bool) -> Path:
    return backend_file(path, backend) if several else path


def write_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: the old file stays whole when writing fails.

    Raises:
        WriteError: the file cannot be written.
    """
    try:
        files.write_atomic(path, text)
    except NotRegularFile as exc:
        raise WriteError(f"not writing {str(path)!r}: {exc}, which fieldmem never replaces; name a file") from None
    except OSError as exc:
        raise WriteError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None


def _save_baseline(
    reports: Sequence[Report], path: Path, prune: bool, root: Path | None = None, accept_current: bool = False
) -> int | None:
    """Record every report in the baseline file; None when saved, else the exit code of a refused save.

    A failing backend refuses the save before any backend's entries are
    written. File targets are named relative to ``root`` (the config's
    folder; None: the baseline's folder). A refused save keeps the run's own exit code (1 for a failed
    check or a regression, 2 for a target that errored); a write that fails
    after a passing run exits 2. The file on disk is never touched then.
    """
    saved, refused = save_reports(reports, path, prune=prune, root=root, accept_current=accept_current)
    for done in saved:
        typer.echo(render_saved(done), err=True, nl=False)
    if refused is not None:
        report, exc = refused
        code = report.exit_code
        typer.echo(f"fieldmem: {'error: ' if code != 1 else ''}{exc.message}", err=True)
        return code or 2
    return None
