"""The ``fieldmem fit`` command: options in, exit code out. Nothing is computed here.

``fieldmem fit pkg.train:step --args pkg.train:make_args --vary batch=1..4096 --vary remat=none,dots,full
--backend tpu:v5e`` searches, by compile, the largest batch that fits a TPU v5e for each remat policy. Its
options are declared here (:func:`fit`); :func:`~fieldmem.request.fit.build_fit_request` turns them and
``[[tool.fieldmem.fit]]`` into one checked request; :func:`run_fit` searches every plan on every backend
(under every ``--jax`` release) in worker processes (the user's code and jax never run in this one); and
:func:`emit_fit` gates against the baseline, prints, writes ``-o`` and saves the baseline, and gives the
exit code: 0 every check passed, 1 a check failed or the frontier regressed, 2 bad input or a point that
could not be compiled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fieldmem.model import __version__
from fieldmem.model.errors import FieldmemError, OptionError, one_line
from fieldmem.model.escaping import visible

if TYPE_CHECKING:
    from rich.console import Console

    from fieldmem.model.fit_report import FitReport
    from fieldmem.request.fit import FitRequest

__all__ = ["compare_fit_files", "emit_fit", "fit", "fit_documents", "run_fit"]


def _fail(message: str) -> typer.Exit:
    typer.echo(one_line(f"fieldmem: error: {message}"), err=True)
    return typer.Exit(2)


def _say(line: str) -> None:
    typer.echo(f"fieldmem: {line}", err=True)


def fit(
    target: Annotated[
        str | None,
        typer.Argument(
            help="The step: pkg.module:fn or path/to/file.py:fn. Default: every [[tool.fieldmem.fit]] table "
            "in pyproject.toml.",
            show_default=False,
        ),
    ] = None,
    args: Annotated[
        str | None,
        typer.Option(
            "--args",
            help="Its args factory, MODULE:FACTORY (or FACTORY in the step's module): the knobs are its keyword parameters.",
        ),
    ] = None,
    vary: Annotated[
        list[str] | None,
        typer.Option(
            "--vary",
            help="A knob: NAME=LOW..HIGH (every integer; the largest that fits is found by bisection), "
            "NAME=LOW..HIGH:STEP, NAME=A,B,C (a list, each a row of its own) or NAME=VALUE. Repeat for "
            "several; at most one range.",
        ),
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            "--backend",
            help="Compile for this backend without running: tpu:v5e, tpu:v5e:2x2, gpu:h100 (or gpu, tpu here); "
            "several, comma-separated: a search on each, side by side.",
        ),
    ] = None,
    budget: Annotated[
        int | None,
        typer.Option(
            "--budget",
            metavar="N",
            help="The most compiles a search may use (default: as many as the bisection needs).",
        ),
    ] = None,
    at_least: Annotated[
        list[str] | None,
        typer.Option(
            "--at-least",
            help="NAME=VALUE: exit 1 when a row's largest value of the range knob that fits is below VALUE.",
        ),
    ] = None,
    expect: Annotated[
        str | None,
        typer.Option(
            "--expect", help="fits: also compile at the factory's own defaults, and exit 1 unless it fits there."
        ),
    ] = None,
    max_peak: Annotated[
        str | None,
        typer.Option(
            "--max-peak",
            "--max-footprint",
            help="A memory budget per device the footprint must fit too, e.g. 12GiB (on the CPU, the only one).",
        ),
    ] = None,
    donate: Annotated[
        str | None,
        typer.Option(
            "--donate", help="What the step donates: all | none | numbers | names. Default: its own jit's, else all."
        ),
    ] = None,
    static: Annotated[str | None, typer.Option("--static", help="Extra static arguments (numbers or names).")] = None,
    suggest: Annotated[
        bool,
        typer.Option(
            "--suggest",
            help="Compile once at the factory's defaults with the advisor first, and search with the donation "
            "it verified.",
        ),
    ] = False,
    top: Annotated[
        int | None,
        typer.Option(
            "--top",
            metavar="N",
            help="Lines of each point's live peak kept, and of each change of peak named (default 5).",
        ),
    ] = None,
    min_bytes: Annotated[
        str | None, typer.Option("--min-bytes", help="A line must move by this much to be named (default 1KiB).")
    ] = None,
    output_format: Annotated[
        str | None, typer.Option("--format", "-f", help="table (default) | json | markdown | svg (a picture; needs -o)")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Write the result in --format to this file (the table still goes to stdout)."
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also every compile, in order, with its peak's lines.")
    ] = False,
    baseline: Annotated[
        Path | None,
        typer.Option("--baseline", help="Compare the frontier with this fit baseline; a lower one exits 1."),
    ] = None,
    no_baseline: Annotated[
        bool, typer.Option("--no-baseline", help="Do not compare with the baseline [tool.fieldmem.fit] names.")
    ] = False,
    save_baseline: Annotated[
        Path | None,
        typer.Option(
            "--save-baseline", help="Record the frontier in this file when the run passes (other entries kept)."
        ),
    ] = None,
    jax: Annotated[
        str | None,
        typer.Option(
            "--jax",
            metavar="VERSIONS",
            help="Search under these jax releases, e.g. 0.9.2,0.10.2: one search each, then side by side.",
        ),
    ] = None,
    python: Annotated[
        Path | None, typer.Option("--python", metavar="PATH", help="Run the workers under this Python instead.")
    ] = None,
    cache_dir: Annotated[
        str | None,
        typer.Option(
            "--cache-dir",
            help="JAX's persistent compilation cache folder (local backends; a deviceless one uses none).",
        ),
    ] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Do not use JAX's persistent compilation cache.")
    ] = False,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs", "-j", help="Compile a point's two programs concurrently when > 1 (default: the cores, at most 8)."
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="The pyproject.toml whose [tool.fieldmem] to use (default: found upward)."),
    ] = None,
) -> None:
    """Search the knobs of a step's args factory, by compile, for the largest values that fit a backend."""
    # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
    from fieldmem.request.config import load_config
    from fieldmem.request.fit import FitFlags, build_fit_request

    try:
        loaded = load_config(config)
        flags = FitFlags(
            target=target,
            args=args,
            vary=tuple(vary or ()),
            at_least=tuple(at_least or ()),
            budget=budget,
            expect=expect,
            backend=backend,
            max_peak=max_peak,
            donate=donate,
            static=static,
            suggest=suggest,
            top=top,
            min_bytes=min_bytes,
            output_format=output_format,
            output=output,
            verbose=verbose,
            baseline=baseline,
            no_baseline=no_baseline,
            save_baseline=save_baseline,
            jax=jax,
            python=python,
            cache_dir=cache_dir,
            no_cache=no_cache,
            jobs=jobs,
        )
        request = build_fit_request(flags, loaded.fits)
        _check_files(request)
        reference = _read_baseline(request)
        report = run_fit(request, _progress_console())
        code = emit_fit(report, request, reference)
    except FieldmemError as exc:
        raise _fail(exc.message) from None
    raise typer.Exit(code)


def _check_files(request: FitRequest) -> None:
    """``-o`` and ``--save-baseline`` can be written, and are not one file (before anything compiles)."""
    # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
    from fieldmem.request.build import check_writable, file_identity

    for path, option in ((request.output, "--output"), (request.save_baseline, "--save-baseline")):
        if path is not None:
            check_writable(path, option)
    output, save = request.output, request.save_baseline
    if output is not None and save is not None and file_identity(output) == file_identity(save):
        raise OptionError("--output and --save-baseline name the same file: give each its own file")


def _read_baseline(request: FitRequest) -> tuple[str, FitReport] | None:
    # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
    from fieldmem.gate.fit import load_fit_report

    if request.baseline is None:
        return None
    return str(request.baseline), load_fit_report(request.baseline)


def _progress_console() -> Console | None:
    if not sys.stderr.isatty() or os.environ.get("TERM") == "dumb":
        return None
    from rich.console import Console

    return Console(file=sys.stderr)


@contextlib.contextmanager
def _progress(console: Console | None) -> Iterator[Callable[[str], None] | None]:
    """A transient rich status line on ``console`` for the point being compiled (None: no terminal)."""
    if console is None:
        yield None
        return
    from rich.markup import escape
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    display = Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True
    )
    task = display.add_task("fitting", total=None)

    def say(text: str) -> None:
        display.update(task, description=escape(visible(text)))
        display.refresh()

    with display:
        yield say


def _backends_of(request: FitRequest, n: int) -> tuple[str | None, ...]:
    return request.plan_backends.get(n) or request.backends or (None,)


def run_fit(request: FitRequest, console: Console | None = None) -> FitReport:
    """Every plan searched on each of its backends (and under each ``--jax`` release) in worker processes.

    Raises:
        FieldmemError: a backend that cannot be compiled for here, an environment that cannot be made.
    """
    # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
    from fieldmem.driver import cache_folder, default_cache_folder
    from fieldmem.driver.backends import with_device_count
    from fieldmem.model.fit_report import FitReport, FitSearch
    from fieldmem.parent.fit import WorkerChecker, search
    from fieldmem.parent.interpreters import interpreters_for
    from fieldmem.parent.isolate import UnitSession
    from fieldmem.request.backends import deviceless_environment, extra_installed, parse_backend
    from fieldmem.request.options import CheckOptions, default_jobs

    every = list(dict.fromkeys(b for n in range(len(request.plans)) for b in _backends_of(request, n)))
    named = [parse_backend(b) for b in every if b is not None]
    os.environ.update(deviceless_environment(named or None))
    elsewhere = [b.name for b in named if not extra_installed(b)] if request.python is None else []
    cache = default_cache_folder() if request.default_cache else cache_folder(request.cache_dir)
    options = CheckOptions(min_bytes=request.min_bytes, jobs=request.jobs or default_jobs(), cache_dir=cache)
    plan_of = interpreters_for(request.jax_versions, request.python, every, elsewhere, _say)
    flags = os.environ.get("XLA_FLAGS", "")
    searches: list[FitSearch] = []
    with _progress(console) as progress:
        for interpreter, backends in plan_of:
            for backend in backends:
                chips = parse_backend(backend).chips if backend is not None else 1
                # as many CPU devices as the topology has chips: example arguments sharded over every device
                # make a mesh its size (a fresh worker per backend: jax starts with its count)
                os.environ["XLA_FLAGS"] = with_device_count(flags, chips) if chips > 1 else flags
                session = UnitSession(interpreter)
                try:
                    for n, plan in enumerate(request.plans):
                        if backend not in _backends_of(request, n):
                            continue
                        label = f"{plan.target} on {backend or 'the default backend'}"
                        if interpreter is not None and request.jax_versions:
                            label += f" ({interpreter.label})"

                        def say(text: str, label: str = label) -> None:
                            if progress is not None:
                                progress(f"fitting {label}: {text}")

                        checker = WorkerChecker(plan, backend, options, session)
                        searches.append(
                            search(plan, checker, backend=backend or "", min_bytes=request.min_bytes, progress=say)
                        )
                finally:
                    session.close()
                    os.environ["XLA_FLAGS"] = flags
    order = {b: n for n, b in enumerate(every)}
    if request.jax_versions is None:
        searches.sort(key=lambda s: order.get(s.backend, len(order)))
    return FitReport(
        fieldmem_version=__version__,
        searches=tuple(searches),
        min_bytes=request.min_bytes,
        created=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
    )


def emit_fit(report: FitReport, request: FitRequest, reference: tuple[str, FitReport] | None) -> int:
    """Gate ``report`` against the baseline read before the run, print, write ``-o``, save the baseline;
    return the exit code.

    Raises:
        WriteError: ``-o`` or the baseline cannot be written.
        FitBaselineError: the baseline to save over is not a fit document.
    """
    # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
    from fieldmem.frontends.output import echo_rendered, terminal_options, write_file
    from fieldmem.gate.fit import baseline_to_save, compare_fits, compare_to_baseline
    from fieldmem.render import RenderOptions
    from fieldmem.render.fit import get_fit_renderer, render_comparison, render_json, search_title

    if reference is not None:
        report = compare_to_baseline(report, reference[1], reference[0])
    for search in report.searches:
        problems = [search.error.message] if search.error is not None else []
        problems += [
            f"{' '.join(f'{k}={v}' for k, v in row.fixed.items()) + ': ' if row.fixed else ''}{row.error}"
            for row in search.rows
            if row.status == "error"
        ]
        for problem in problems:
            typer.echo(one_line(f"fieldmem: error: {search_title(search)}: {problem}"), err=True)
    if request.output is not None:
        renderer = get_fit_renderer(request.output_format)
        write_file(
            request.output, renderer.render(report, RenderOptions(verbose=request.verbose, min_bytes=report.min_bytes))
        )
    options = dataclasses.replace(terminal_options(request.verbose, report.min_bytes))
    shown = "table" if request.output is not None else request.output_format
    echo_rendered(get_fit_renderer(shown).render(report, options), options)
    if (
        shown == "table"
        and len(report.searches) > 1
        and (request.jax_versions or len({s.backend for s in report.searches}) > 1)
    ):
        labels = _labels(report)
        if labels is not None:
            runs = [
                (
                    label,
                    dataclasses.replace(
                        report, searches=tuple(s for s in report.searches if _label(s, report) == label)
                    ),
                )
                for label in labels
            ]
            side = compare_fits(runs, across_backends=not _several_releases(report))
            echo_rendered(render_comparison(side, options), options)
    code = report.exit_code
    if request.save_baseline is not None:
        if code != 0:
            typer.echo(
                f"fieldmem: the fit baseline {str(request.save_baseline)!r} was not saved: the run did not pass",
                err=True,
            )
            return code
        saved = baseline_to_save(request.save_baseline, report)
        write_file(request.save_baseline, render_json(saved, RenderOptions()))
        typer.echo(
            f"fieldmem: saved the frontier of {len(report.searches)} search(es) in {request.save_baseline}", err=True
        )
    return code


def _several_releases(report: FitReport) -> bool:
    return len({s.jax_version for s in report.searches}) > 1


def _label(search: object, report: FitReport) -> str:
    """What a search is called side by side: its jax release where several were searched, else its backend."""
    return f"jax {search.jax_version}" if _several_releases(report) else search.backend  # type: ignore[attr-defined]


def _labels(report: FitReport) -> list[str] | None:
    labels = list(dict.fromkeys(_label(s, report) for s in report.searches))
    return labels if len(labels) > 1 else None


def fit_documents(paths: list[Path], tolerance: str | None) -> bool:
    """Whether ``fieldmem compare``'s files are ``fieldmem fit`` documents (all of them; None are: False).

    Raises:
        OptionError: some are and some are not, or ``--tolerance`` is given for them (frontiers compare exactly).
    """
    # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
    from fieldmem.gate.fit import is_fit_document

    found = [is_fit_document(path) for path in paths]
    if not any(found):
        return False
    if not all(found):
        other = paths[found.index(False)]
        raise OptionError(
            f"{str(other)!r} is not a fieldmem fit document, and {str(paths[found.index(True)])!r} is: compare "
            "fit documents with fit documents and reports with reports"
        )
    if tolerance is not None:
        raise OptionError("--tolerance is for the figures of reports: fit documents compare their frontiers exactly")
    return True


def compare_fit_files(paths: list[Path], output_format: str, output: Path | None, fail_on_diff: bool) -> int:
    """``fieldmem compare`` of fit documents: each search's frontiers side by side, the first file the
    reference; the exit code (1 with ``--fail-on-diff`` when a frontier moved).

    Raises:
        FitBaselineError: a file that cannot be read as a fit document.
        OptionError: fewer than two files, or a format the comparison has not.
        WriteError: ``-o`` cannot be written.
    """
    # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
    from fieldmem.frontends.output import echo_rendered, terminal_options, write_file
    from fieldmem.gate.fit import compare_fits, load_fit_report
    from fieldmem.render import RenderOptions
    from fieldmem.render.fit import render_comparison

    if len(paths) < 2:
        raise OptionError(
            f"compare needs at least two documents, got {len(paths)}: e.g. fieldmem compare a.json b.json"
        )
    if output_format not in ("table", "json", "markdown"):
        raise OptionError(f"--format {output_format!r} is not known here: use one of table, json, markdown")
    documents = [load_fit_report(path, "fit document") for path in paths]
    names = [path.name for path in paths]
    labels = names if len(set(names)) == len(names) else [str(path) for path in paths]
    if len(set(labels)) != len(labels):
        labels = [f"{label} ({n + 1})" for n, label in enumerate(labels)]
    backends = [{s.backend for s in d.searches} for d in documents]
    across = all(len(b) == 1 for b in backends) and len({next(iter(b)) for b in backends}) > 1
    comparison = compare_fits(list(zip(labels, documents)), across_backends=across)
    if output is not None:
        write_file(output, render_comparison(comparison, RenderOptions(), output_format))
        output_format = "table"
    options = terminal_options(False, 0)
    echo_rendered(render_comparison(comparison, options, output_format), options)
    return 1 if fail_on_diff and comparison.moved else 0
