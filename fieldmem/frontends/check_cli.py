"""The ``fieldmem check`` command: its options in, exit code out. Nothing is computed here.

``fieldmem check`` is four steps: its parameters are the option table's
(:mod:`fieldmem.request.option_table`, made into the signature typer reads);
:func:`~fieldmem.request.build.build_request` turns them and ``[tool.fieldmem]``
into one checked request (every option rule lives there); :func:`_check_all`
runs the checker on it; :func:`~fieldmem.frontends.output.emit_reports` prints, writes,
compares and saves, and gives the exit code. jax is imported only when the command runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fieldmem.frontends.command_line import TYPED, fail, progress_display, say, stderr_console
from fieldmem.model.errors import FieldmemError, OptionError
from fieldmem.request.option_table import Option, cli_options

if TYPE_CHECKING:
    from fieldmem.gate.baseline import Baseline
    from fieldmem.model.report import Report
    from fieldmem.model.target import TargetResult
    from fieldmem.parent.isolate import WatchSession
    from fieldmem.render.table import DetailsAhead
    from fieldmem.request.build import CheckRequest
    from fieldmem.request.config import Config
    from fieldmem.request.options import CheckOptions

__all__ = ["check"]


def check(**given: Any) -> None:
    """Compile each target with and without donation and report whether it is in place."""
    # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
    from fieldmem.request.build import CheckFlags, build_request, pair_args
    from fieldmem.request.config import load_config

    targets, args, new = given["targets"], given["args"], given["new"]
    typed = TYPED[0][1:] if TYPED[0][:1] == ["check"] else []
    try:
        every, each = pair_args(typed, tuple(targets or ()), args or ())
    except FieldmemError as exc:
        raise fail(exc.message) from None
    held = {f.name for f in dataclasses.fields(CheckFlags)}
    as_typed = {name: value for name, value in given.items() if name in held}  # all but --config
    flags = CheckFlags(
        **{
            **as_typed,
            "targets": tuple(targets or ()),
            "args": every,
            "args_for": tuple(each.items()),
            "new": tuple(new) if new else None,
        }
    )
    session: WatchSession | None = None
    try:
        project = load_config(given["config"])
        request = _with_table_options(build_request(flags, project), given, held, project)
        _renderers_installed(request)
        if request.output.verbose:
            # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
            from fieldmem.request.options import early_stop_said, heap_pad_said, jobs_said

            say(jobs_said(request.options.jobs, request.jobs_choice, os.environ))
            say(heap_pad_said(request.options, os.environ))
            cached = request.options.cache_dir is not None or request.default_cache
            say(early_stop_said(request.options, os.environ, request.backends or (None,), cached))
        later = _Later(request)
        reports, baseline_read, session = _check_all(request, later)
        later.load()
        # here, not at the top: loaded by now (later.load), while the worker loaded jax
        from fieldmem.frontends.output import emit_reports

        code = emit_reports(reports, request, baseline_read, later.details)
    except FieldmemError as exc:
        if session is not None:
            session.close()
        raise fail(exc.message) from None
    except BaseException:  # Ctrl-C too: the --watch session's workers end with the command
        if session is not None:
            session.close()
        raise
    if session is not None:
        # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
        from fieldmem.frontends.watch import watch as watch_loop

        code = watch_loop(session, request, baseline_read, code)
    raise typer.Exit(code)


def _with_table_options(request: CheckRequest, given: dict[str, Any], held: set[str], project: Config) -> CheckRequest:
    """``request`` with the options of the table that ``CheckFlags`` does not hold (none today: an option added
    to the table) set in its :class:`~fieldmem.request.options.CheckOptions` field of the same name: as given,
    else as ``[tool.fieldmem]`` gives it; an option with no such field is the front end's own."""
    fields = {f.name for f in dataclasses.fields(request.options)}
    table = {}
    for name in (given.keys() - held) & fields:
        value = given[name] if given[name] is not None else project.values.get(name)
        if value is not None:
            table[name] = value
    if not table:
        return request
    return dataclasses.replace(request, options=dataclasses.replace(request.options, **table))


def _parameter(row: Option) -> inspect.Parameter:
    """``row`` of the option table as a parameter of :func:`check`, declared as typer reads it."""
    if row.argument:
        declared: Any = typer.Argument(help=row.help, show_default=False)
    else:
        assert row.cli is not None
        declared = typer.Option(*row.cli, help=row.help, metavar=row.metavar)
    return inspect.Parameter(
        row.name, inspect.Parameter.KEYWORD_ONLY, default=row.default, annotation=Annotated[row.type, declared]
    )


# the command's parameters are the option table's (fieldmem.request.option_table): typer reads this signature
check.__signature__ = inspect.Signature([_parameter(row) for row in cli_options()])  # type: ignore[attr-defined]


def _renderers_installed(request: CheckRequest) -> None:
    """The renderers the output needs are there (a known format whose module is missing is refused here,
    before anything compiles, as an unknown one is by the request)."""
    # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
    from fieldmem.render import get_renderer

    get_renderer(request.output.format)
    if request.output.html is not None:
        get_renderer("html")


class _Later:
    """What the output needs once the results are in: its modules and renderers, and the holder of each target's
    details rendered as its result comes (:func:`_details_ahead`). A check in workers loads them right after it
    sends the first request (the supervisor's ``meanwhile``), while the worker loads jax: before the request,
    the worker waited for them (on the 13-core host it has loaded numpy and jaxlib before the request reaches it,
    benchmarks/results/timeline-13cores.txt); after the answers, the output did. :meth:`add` is the supervisor's ``on_result`` (safe from several workers'
    threads)."""

    def __init__(self, request: CheckRequest) -> None:
        self.request = request
        self.details: DetailsAhead | None = None
        self._loaded = False
        self._lock = threading.Lock()

    def load(self) -> None:
        """Load the output's modules and renderers, and make the details' holder (once)."""
        with self._lock:
            if self._loaded:
                return
            # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (2026-12-06)
            import fieldmem.frontends.output  # noqa: F401
            from fieldmem.render import preload

            output = self.request.output
            preload({"table", output.format, *(["html"] if output.html is not None else [])})
            self.details = _details_ahead(self.request)
            self._loaded = True

    def add(self, result: TargetResult) -> None:
        """Render ``result``'s details now, where the table will show them."""
        self.load()
        if self.details is not None:
            self.details.add(result)


def _details_ahead(request: CheckRequest) -> DetailsAhead | None:
    """Where the table goes to stdout after a check in workers (not ``--watch``), the holder of each target's
    details rendered while the check runs (:class:`~fieldmem.render.table.DetailsAhead`); None elsewhere."""
    if request.watch or not request.options.isolate:
        return None
    # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
    from fieldmem.frontends.output import stdout_format, stdout_options
    from fieldmem.render.table import DetailsAhead

    if stdout_format(request.output) != "table":
        return None
    return DetailsAhead(stdout_options(request.output, request.options.min_bytes))


def _check_all(
    request: CheckRequest, later: _Later | None = None
) -> tuple[tuple[Report, ...], Baseline | None, WatchSession | None]:
    """Check every target of ``request`` (on each backend), and the baseline it is compared with.

    Before anything compiles: the simulated CPU devices are set, the
    compilation cache folder is made and the baseline is read, so that a
    mistake in any of them stops the run at once. The targets are loaded,
    checked and run in a worker process (:mod:`fieldmem.parent.isolate`):
    the user's code never runs in this process, which writes the report and
    decides the exit code, and this process never imports jax.
    ``--no-isolate`` checks here instead, for debugging (a target that calls
    ``os._exit`` or crashes then ends the whole run). With ``--watch``, the
    worker is kept, in the session returned (None otherwise). ``later``: what the
    output needs, loaded while the worker starts, and what renders each result's
    details as it comes.
    """
    # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
    from fieldmem.driver import simulate_cpu_devices
    from fieldmem.request.backends import deviceless_environment, extra_installed, parse_backend, require_extra

    # this process is fieldmem's own: a deviceless backend's environment is set here, before jax starts
    named = [parse_backend(name) for name in request.backends] if request.backends is not None else None
    # a deviceless backend whose compiler is not installed here is checked in a cached environment that has
    # it (--jax environments always do; --python's interpreter is the user's to equip: its worker says so)
    elsewhere = [b.name for b in named or () if not extra_installed(b)] if request.python is None else []
    if not request.options.isolate or request.watch:  # here, or in the one worker --watch keeps
        for backend in named or ():
            require_extra(backend)  # checked in this process: it must be here; one line before anything
    os.environ.update(deviceless_environment(named))
    if request.devices is not None:
        simulate_cpu_devices(request.devices)
    elif request.implied_devices is not None:
        # as many CPU devices as the topology has chips, so example arguments sharded over every device make
        # a mesh its size; where jax already started with another number (an embedding process), placing
        # the arguments on the chips says what to do, in one line
        with contextlib.suppress(OptionError):
            simulate_cpu_devices(request.implied_devices)
    options = dataclasses.replace(request.options, cache_dir=_cache_folder(request))
    compare_with = request.baseline.compare_with
    baseline = None
    if compare_with is not None:
        # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (2026-12-06)
        from fieldmem.gate.baseline import load_baseline

        baseline = load_baseline(compare_with)
    with progress_display(stderr_console()) as progress:
        if not options.isolate:
            return _check_here(request, options, progress), baseline, None
        # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
        from fieldmem.parent.isolate import Unit, WatchSession, check_reports

        units = [Unit(spec, request.per_target.get(spec, request.target_options)) for spec in request.targets]
        backends: list[str | None] = list(request.backends) if request.backends is not None else [None]
        check_backends = request.backends is not None
        if request.watch:
            # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
            from fieldmem.parent.interpreters import interpreter_for_python

            session = WatchSession(
                units,
                backends,
                options,
                check_backends=check_backends,
                progress=progress,
                devices=request.devices,
                # --python: the worker kept runs there (--jax is refused with --watch)
                interpreter=interpreter_for_python(request.python) if request.python is not None else None,
            )
            try:
                return session.check(), baseline, session
            except BaseException:  # Ctrl-C too: the session's workers end before it goes on
                session.close()
                raise
        reports: tuple[Report, ...] = ()
        # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
        from fieldmem.parent.interpreters import in_use, interpreters_for

        plan = interpreters_for(request.jax_versions, request.python, backends, elsewhere, say)
        for interpreter, these in plan:
            with in_use(interpreter):  # a cached environment is not removed while its workers run
                done = check_reports(
                    units,
                    these,
                    options,
                    check_backends=check_backends,
                    progress=progress,
                    devices=request.devices,
                    interpreter=interpreter,
                    on_result=later.add if later is not None else None,
                    meanwhile=later.load if later is not None else None,
                )
            reports += done
        # in the order the backends were asked for, each release's in turn
        order = {name: n for n, name in enumerate(backends)}
        return tuple(sorted(reports, key=lambda r: order.get(r.backend, 0))) if elsewhere else reports, baseline, None


def _check_here(
    request: CheckRequest, options: CheckOptions, progress: Callable[[str, int, int], None] | None
) -> tuple[Report, ...]:
    """``--no-isolate``: every target loaded, checked and run in this process."""
    # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
    from fieldmem.parent import checker

    if request.backends is None:
        report = checker.check(
            request.targets, request.target_options, options, progress=progress, per_target=request.per_target
        )
        return (report,)
    return checker.check_backends(
        request.targets,
        request.backends,
        request.target_options,
        options,
        progress=progress,
        per_target=request.per_target,
    )


def _cache_folder(request: CheckRequest) -> str | None:
    """The compilation cache folder of this run, made now: the one named, else the driver's default one.

    Raises:
        OptionError: a named folder cannot be made (a default one never stops a run: None).
    """
    # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
    from fieldmem.driver import cache_folder, default_cache_folder

    if request.default_cache:
        return default_cache_folder()
    return cache_folder(request.options.cache_dir, request.cache_dir_origin)
