"""The ``fieldmem`` command: options in, exit code out. Nothing is computed here.

``fieldmem check`` is four steps: its options are declared here;
:func:`~fieldmem.request.build.build_request` turns them and ``[tool.fieldmem]``
into one checked request (every option rule lives there); :func:`_check_all`
runs the checker on it; :func:`~fieldmem.frontends.output.emit_reports` prints, writes,
compares and saves, and gives the exit code.

The core raises :class:`~fieldmem.model.errors.FieldmemError` for a user mistake;
this module prints it as one line on stderr and exits 2. Exit codes: 0 every
check passed, 1 a check failed, 2 bad input (see ``docs/exit-codes`` in the
README). jax is imported only when a command runs, so ``--help`` is instant.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fieldmem import __version__
from fieldmem.model.errors import FieldmemError, OptionError, one_line

if TYPE_CHECKING:
    from rich.console import Console

    from fieldmem.gate.baseline import Baseline
    from fieldmem.model.report import Report
    from fieldmem.parent.isolate import WatchSession
    from fieldmem.request.build import CheckRequest
    from fieldmem.request.options import CheckOptions


class _Commands(typer.core.TyperGroup):
    """fieldmem's commands, keeping the command line as typed: which targets each ``--args`` follows
    (:func:`~fieldmem.request.build.pair_args`) is in its order, which the parsed options lose."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        _TYPED[0] = list(args)
        return super().make_context(info_name, args, parent=parent, **extra)


_TYPED: list[list[str]] = [[]]  # the command line as typed, set as it is parsed

app = typer.Typer(
    cls=_Commands,
    name="fieldmem",
    help="Is your jitted JAX update really in place? Compile it with and without donation and see where the memory goes.",
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fieldmem {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """fieldmem: static in-place analysis of JAX update functions."""


def _fail(message: str) -> typer.Exit:
    typer.echo(one_line(f"fieldmem: error: {message}"), err=True)
    return typer.Exit(2)


@contextlib.contextmanager
def progress_display(console: Console | None) -> Iterator[Callable[[str, int, int], None] | None]:
    """The checker's progress callback, drawn on ``console`` as a rich progress line while the block runs.

    It shows the target being checked, how many are done and the elapsed
    time, refreshed while a compile runs, and is cleared when the block ends
    (also on an error or Ctrl-C). ``console`` None (stderr is not a terminal:
    CI, a pipe, a file) gives no callback, and nothing is written.
    """
    if console is None:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    display = Progress(
        SpinnerColumn(),
        TextColumn("checking [bold]{task.description}[/]"),
        BarColumn(bar_width=20),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    task = display.add_task("targets", total=None, start=True)

    from rich.markup import escape

    from fieldmem.model.escaping import visible

    def progress(name: str, done: int, total: int) -> None:
        if done >= total:
            display.update(task, description="done", completed=total, total=total)
        else:  # the column reads markup: the name is the user's text, shown as it is
            display.update(task, description=escape(visible(name)), completed=done, total=total)
        display.refresh()

    with display:
        yield progress


def _stderr_console() -> Console | None:
    """A rich console on stderr when stderr is a terminal (not a dumb one), else None: no progress."""
    import os

    if not sys.stderr.isatty() or os.environ.get("TERM") == "dumb":
        return None
    from rich.console import Console

    return Console(file=sys.stderr)


def _say(line: str) -> None:
    """A line of what fieldmem is doing before the check (making a jax environment), on stderr."""
    typer.echo(f"fieldmem: {line}", err=True)


@app.command()
def check(
    targets: Annotated[
        list[str] | None,
        typer.Argument(
            help="pkg.module:fn, path/to/file.py:fn, module:obj.attr, a module/file alone "
            "(every fieldmem.case registered in it), or a folder path such as examples/ (every case its "
            "modules register). Default: the targets of [tool.fieldmem] in pyproject.toml.",
            show_default=False,
        ),
    ] = None,
    args: Annotated[
        list[str] | None,
        typer.Option(
            "--args",
            help="FACTORY (in the target's own module) or MODULE:FACTORY returning the positional args tuple, "
            "or (args, kwargs). Once: for every target; after each target: for the targets before it "
            "(a.py:f --args m:f_args b.py:g --args m:g_args).",
        ),
    ] = None,
    shapes: Annotated[
        str | None,
        typer.Option("--shapes", help="Array-only signatures, e.g. 'f32[4096,4096] f32[4096]' (nothing allocated)."),
    ] = None,
    donate: Annotated[
        str | None,
        typer.Option(
            "--donate",
            help="What the donated variant donates: all | none | numbers (0,2) | names (params,opt_state). "
            "Default: a jit target's own donation, else all array arguments.",
        ),
    ] = None,
    static: Annotated[
        str | None,
        typer.Option(
            "--static", help="Extra static arguments (numbers or names); non-array arguments are static anyway."
        ),
    ] = None,
    expect: Annotated[
        str | None,
        typer.Option(
            "--expect",
            help="in-place: exit 1 when the donated variant is not in place. fits: exit 1 unless it is known to fit "
            "the device's memory (--backend gpu:h100, tpu:v5e, or a GPU/TPU here). any (default): report only.",
        ),
    ] = None,
    new: Annotated[
        list[str] | None,
        typer.Option(
            "--new",
            help="Output paths meant to be new buffers (out.logits, out[1]; repeat or comma-separate; * matches "
            "any run of characters): never a break of in place, even where a donated input of their size exists.",
        ),
    ] = None,
    max_peak: Annotated[
        str | None,
        typer.Option(
            "--max-footprint",
            "--max-peak",
            help="Budget for the donated footprint (what the program holds at once: footprint_bytes), e.g. 64MiB; "
            "exceeding it exits 1. --max-peak is its older name.",
        ),
    ] = None,
    max_live_peak: Annotated[
        str | None,
        typer.Option(
            "--max-live-peak",
            help="Budget for the donated live peak (distinct buffers live at once); exceeding it exits 1.",
        ),
    ] = None,
    min_bytes: Annotated[
        str | None,
        typer.Option(
            "--min-bytes",
            help="Copies and findings smaller than this stay in JSON but out of the verdict, table and "
            "baseline gate (default 1KiB).",
        ),
    ] = None,
    output_format: Annotated[
        str | None, typer.Option("--format", "-f", help="table (default) | json | github | markdown | html")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Write the report in --format to this file (the table still goes to stdout)."
        ),
    ] = None,
    html_output: Annotated[
        Path | None,
        typer.Option(
            "--html",
            help="Also write a self-contained HTML page (memory timelines, buffers live at the peak) to this file.",
        ),
    ] = None,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Per target: every figure, alias, unusable donation, copy and finding."),
    ] = False,
    top: Annotated[
        int,
        typer.Option(
            "--top",
            metavar="N",
            help="Per target: the N largest contributors to the live peak, by line of your code "
            "(an argument by its path), plain and donated.",
        ),
    ] = 0,
    suggest: Annotated[
        bool,
        typer.Option(
            "--suggest",
            help="Also find the donation that saves the most and verify it with one more compile per target.",
        ),
    ] = False,
    cache_dir: Annotated[
        str | None,
        typer.Option(
            "--cache-dir",
            help="Keep JAX's persistent compilation cache in this folder: an unchanged function is loaded, "
            "not compiled, on the next run (same findings).",
        ),
    ] = None,
    no_cache: Annotated[
        bool,
        typer.Option(
            "--no-cache",
            help="Do not use JAX's persistent compilation cache (default: --cache-dir, cache-dir in "
            "[tool.fieldmem], $FIELDMEM_CACHE_DIR, else ~/.cache/fieldmem/jax).",
        ),
    ] = False,
    fast_compile: Annotated[
        bool | None,
        typer.Option(
            "--fast-compile/--no-fast-compile",
            help="XLA:CPU's LLVM code generation at -O0 for what is only analysed (the default): the same HLO, "
            "buffer assignment and findings in about 40% less compile time; the generated code size is then "
            "unavailable. --run and --probe compile what they execute as XLA does by default. --no-fast-compile: "
            "the default code generation everywhere (default: fast-compile in [tool.fieldmem], else on).",
        ),
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            "--backend",
            help="Compile for this backend: cpu, gpu, tpu (default: jax's), or without the device: tpu:v5e, "
            "tpu:v5e:2x2, tpu:v4, tpu:v5p, tpu:v6e, gpu:h100, gpu:h100:8, gpu:a100, gpu:h200, gpu:b200 (needs "
            'pip install "fieldmem[tpu]" / "fieldmem[gpu]"). Several, e.g. cpu,gpu:h100,tpu:v5e: each target on '
            "each, then side by side; -o/--html then write one file per backend (report.cpu.json, "
            "report.tpu-v5e.json).",
        ),
    ] = None,
    jax: Annotated[
        str | None,
        typer.Option(
            "--jax",
            metavar="VERSIONS",
            help="Check under these jax releases, e.g. 0.9.2,0.10.2: each in a cached environment of its own "
            "(made on first use: fieldmem envs), one report each, then side by side.",
        ),
    ] = None,
    python: Annotated[
        Path | None,
        typer.Option(
            "--python",
            metavar="PATH",
            help="Run the workers under this Python (a venv you prepared, with its own jax) instead.",
        ),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            help="Compile the two variants, and up to N targets, concurrently when > 1 (default: the CPU cores, at most 8).",
        ),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option("--baseline", help="Compare with this baseline file; any regression exits 1."),
    ] = None,
    no_baseline: Annotated[
        bool, typer.Option("--no-baseline", help="Do not compare with the baseline named in [tool.fieldmem].")
    ] = False,
    save_baseline: Annotated[
        Path | None,
        typer.Option(
            "--save-baseline",
            help="Record this run in this baseline file, after the whole run and only when it passed, or with "
            "--accept-current as it is (entries of other targets and backends are kept).",
        ),
    ] = None,
    prune_baseline: Annotated[
        bool,
        typer.Option(
            "--prune-baseline",
            help="With --save-baseline: drop entries of this backend whose target this run did not check.",
        ),
    ] = False,
    accept_current: Annotated[
        bool,
        typer.Option(
            "--accept-current",
            help="With --save-baseline: record this run as it is, failing checks included (not a target that "
            "could not be checked): the gate accepts each while it fails the same way, so a run with "
            "--baseline fails only when something changes. Not with --baseline.",
        ),
    ] = False,
    tolerance: Annotated[
        str | None,
        typer.Option("--tolerance", help="Growth allowed against the baseline: 2%, 1MiB, 5%+1MiB, peak:5%,temp:1MiB."),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="The pyproject.toml whose [tool.fieldmem] to use (default: found upward)."),
    ] = None,
    run: Annotated[
        bool,
        typer.Option(
            "--run",
            help="Also run both variants: confirm every alias by buffer identity and read Device.memory_stats() "
            "per device (in worker processes: one per target where the device has memory statistics).",
        ),
    ] = False,
    probe: Annotated[
        bool,
        typer.Option(
            "--probe",
            help="With --run (implied): time each aliased slice update (.at[].set, scatter) at two buffer sizes; "
            "a time that grows with the buffer means the update rewrites it although the HLO is in place.",
        ),
    ] = False,
    isolate: Annotated[
        bool,
        typer.Option(
            "--isolate/--no-isolate",
            help="Load, check and run the targets in a worker process, never in the one that writes the report "
            "(default): a target that exits, crashes or hangs (--timeout) is that target's error. With --run, "
            "a worker per target where the device has memory statistics. --no-isolate checks in this process, "
            "for debugging: a target that exits or crashes then ends the run.",
        ),
    ] = True,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout", help="With --run: seconds a target may take in its worker before the worker is killed."
        ),
    ] = None,
    devices: Annotated[
        int | None,
        typer.Option(
            "--devices",
            help="Simulate N CPU devices (XLA_FLAGS --xla_force_host_platform_device_count), to check sharded "
            "updates on a laptop.",
        ),
    ] = None,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            help="After the check, keep jax and the compiled programs warm and check again, on every save, the "
            "targets whose code changed, printing what changed since their last check. Ctrl-C stops it (exit "
            "code: as the last checks stand). Not with --run, --probe, --save-baseline or --no-isolate.",
        ),
    ] = False,
) -> None:
    """Compile each target with and without donation and report whether it is in place."""
    from fieldmem.frontends.output import emit_reports
    from fieldmem.request.build import CheckFlags, build_request, pair_args
    from fieldmem.request.config import load_config

    typed = _TYPED[0][1:] if _TYPED[0][:1] == ["check"] else []
    try:
        every, each = pair_args(typed, tuple(targets or ()), args or ())
    except FieldmemError as exc:
        raise _fail(exc.message) from None
    # fmt: off
    flags = CheckFlags(
        targets=tuple(targets or ()), args=every, args_for=tuple(each.items()), shapes=shapes, donate=donate,
        static=static,
        expect=expect, max_peak=max_peak, max_live_peak=max_live_peak, min_bytes=min_bytes,
        output_format=output_format, output=output, html_output=html_output, verbose=verbose, top=top,
        suggest=suggest, cache_dir=cache_dir, no_cache=no_cache, fast_compile=fast_compile,
        backend=backend, jax=jax, python=python, jobs=jobs, baseline=baseline, no_baseline=no_baseline,
        save_baseline=save_baseline, prune_baseline=prune_baseline, accept_current=accept_current,
        tolerance=tolerance,
        run=run, probe=probe, isolate=isolate, timeout=timeout, devices=devices,
        new=tuple(new) if new else None, watch=watch,
    )
    # fmt: on
    session: WatchSession | None = None
    try:
        request = build_request(flags, load_config(config))
        _renderers_installed(request)
        if request.output.verbose:
            from fieldmem.request.options import early_stop_said, jobs_said

            _say(jobs_said(request.options.jobs, request.jobs_choice, os.environ))
            cached = request.options.cache_dir is not None or request.default_cache
            _say(early_stop_said(request.options, os.environ, request.backends or (None,), cached))
        reports, baseline_read, session = _check_all(request)
        code = emit_reports(reports, request, baseline_read)
    except FieldmemError as exc:
        if session is not None:
            session.close()
        raise _fail(exc.message) from None
    except BaseException:  # Ctrl-C too: the --watch session's workers end with the command
        if session is not None:
            session.close()
        raise
    if session is not None:
        from fieldmem.frontends.watch import watch as watch_loop

        code = watch_loop(session, request, baseline_read, code)
    raise typer.Exit(code)


def _renderers_installed(request: CheckRequest) -> None:
    """The renderers the output needs are there (a known format whose module is missing is refused here,
    before anything compiles, as an unknown one is by the request)."""
    from fieldmem.render import get_renderer

    get_renderer(request.output.format)
    if request.output.html is not None:
        get_renderer("html")


def _check_all(request: CheckRequest) -> tuple[tuple[Report, ...], Baseline | None, WatchSession | None]:
    """Check every target of ``request`` (on each backend), and the baseline it is compared with.

    Before anything compiles: the simulated CPU devices are set, the
    compilation cache folder is made and the baseline is read, so that a
    mistake in any of them stops the run at once. The targets are loaded,
    checked and run in a worker process (:mod:`fieldmem.parent.isolate`):
    the user's code never runs in this process, which writes the report and
    decides the exit code, and this process never imports jax.
    ``--no-isolate`` checks here instead, for debugging (a target that calls
    ``os._exit`` or crashes then ends the whole run). With ``--watch``, the
    worker is kept, in the session returned (None otherwise).
    """
    from fieldmem.driver import simulate_cpu_devices
    from fieldmem.gate.baseline import load_baseline
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
    baseline = load_baseline(compare_with) if compare_with is not None else None
    with progress_display(_stderr_console()) as progress:
        if not options.isolate:
            return _check_here(request, options, progress), baseline, None
        from fieldmem.parent.isolate import Unit, WatchSession, check_reports
        from fieldmem.render import preload

        # the worker, started ahead, is still loading jax: the renderers are loaded meanwhile
        output = request.output
        preload({"table", output.format, *(["html"] if output.html is not None else [])})
        units = [Unit(spec, request.per_target.get(spec, request.target_options)) for spec in request.targets]
        backends: list[str | None] = list(request.backends) if request.backends is not None else [None]
        check_backends = request.backends is not None
        if request.watch:
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
        from fieldmem.parent.interpreters import in_use, interpreters_for

        plan = interpreters_for(request.jax_versions, request.python, backends, elsewhere, _say)
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
                )
            reports += done
        # in the order the backends were asked for, each release's in turn
        order = {name: n for n, name in enumerate(backends)}
        return tuple(sorted(reports, key=lambda r: order.get(r.backend, 0))) if elsewhere else reports, baseline, None


def _check_here(
    request: CheckRequest, options: CheckOptions, progress: Callable[[str, int, int], None] | None
) -> tuple[Report, ...]:
    """``--no-isolate``: every target loaded, checked and run in this process."""
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
    from fieldmem.driver import cache_folder, default_cache_folder

    if request.default_cache:
        return default_cache_folder()
    return cache_folder(request.options.cache_dir, request.cache_dir_origin)


from fieldmem.frontends.fit_cli import fit as _fit  # noqa: E402  (declared in a module of its own)

app.command("fit")(_fit)


@app.command()
def compare(
    reports: Annotated[
        list[Path],
        typer.Argument(
            help="Two or more JSON reports (fieldmem check -f json -o FILE); the first is the reference.",
            show_default=False,
        ),
    ],
    tolerance: Annotated[
        str | None,
        typer.Option(
            "--tolerance", help="Change allowed before a figure differs: 2%, 1MiB, peak:5%,temp:1MiB. Default: exact."
        ),
    ] = None,
    fail_on_diff: Annotated[
        bool, typer.Option("--fail-on-diff", help="Exit 1 when any significant difference is found.")
    ] = False,
    min_bytes: Annotated[
        str | None,
        typer.Option("--min-bytes", help="Copies smaller than this are not compared (default: the reports' own)."),
    ] = None,
    output_format: Annotated[
        str | None, typer.Option("--format", "-f", help="table (default) | json | markdown")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Write the comparison in --format to this file (the table still goes to stdout)."
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also list aliases and copies per report.")] = False,
) -> None:
    """Show saved reports side by side per target (cpu vs gpu, jax 0.10 vs 0.11, main vs branch)."""
    from fieldmem.frontends.fit_cli import compare_fit_files, fit_documents
    from fieldmem.frontends.output import echo_rendered, terminal_options, write_file

    try:
        fits = fit_documents(reports, tolerance)
    except FieldmemError as exc:
        raise _fail(exc.message) from None
    if fits:  # fieldmem fit's documents: their frontiers side by side
        try:
            code = compare_fit_files(reports, output_format or "table", output, fail_on_diff)
        except FieldmemError as exc:
            raise _fail(exc.message) from None
        raise typer.Exit(code)
    from fieldmem.gate.compare import compare_files
    from fieldmem.model.units import parse_bytes
    from fieldmem.render import RenderOptions
    from fieldmem.render.compare import get_compare_renderer
    from fieldmem.request.build import check_writable
    from fieldmem.request.tolerance import Tolerances

    try:
        renderer = get_compare_renderer(output_format or "table")
        if output is not None:
            check_writable(output)
        comparison = compare_files(
            reports,
            Tolerances.parse(tolerance) if tolerance is not None else None,
            parse_bytes(min_bytes, "--min-bytes") if min_bytes is not None else None,
        )
        if output is not None:
            write_file(
                output, renderer.render(comparison, RenderOptions(verbose=verbose, min_bytes=comparison.min_bytes))
            )
            renderer = get_compare_renderer("table")
    except FieldmemError as exc:
        raise _fail(exc.message) from None
    options = terminal_options(verbose, comparison.min_bytes)
    echo_rendered(renderer.render(comparison, options), options)
    raise typer.Exit(comparison.exit_code(fail_on_diff))


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (``python -m fieldmem`` and the console script).

    Usage mistakes caught by click (a missing target, an unknown option, a
    non-integer ``--jobs``) get the same one-line ``fieldmem: error:`` form
    and exit code 2 as fieldmem's own errors.
    """
    # typer re-exports BadParameter but not its base class, click's UsageError
    # (vendored inside typer in recent releases): find it through the MRO.
    usage_error: Any = next(
        c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"
    )  # click's, found at run time
    from fieldmem.parent.spawn import discard_prestarted, prestart_for

    prestart_for(sys.argv[1:] if argv is None else argv)  # where fieldmem.frontends.entry did not already
    _streams_never_raise()
    try:
        return _main(argv, usage_error)
    finally:
        discard_prestarted()  # a worker started ahead that no check took


def _streams_never_raise() -> None:
    """stdout and stderr write a character their encoding has no bytes for (``→`` on a Latin-1 terminal) as
    its escape (``\\u2192``) rather than stop the run with a traceback. What fieldmem prints is escaped
    already where it came from the user (:mod:`fieldmem.model.escaping`); this covers its own characters."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) not in ("backslashreplace", None):
            with contextlib.suppress(ValueError, OSError, TypeError):
                reconfigure(errors="backslashreplace")


def _main(argv: list[str] | None, usage_error: Any) -> int:
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="fieldmem", standalone_mode=False)
    except usage_error as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `fieldmem`: the help, as click prints it
            typer.echo(exc.format_message(), err=True)
            return 2
        ctx = getattr(exc, "ctx", None)
        where = f"fieldmem {ctx.info_name} --help" if ctx is not None and ctx.parent is not None else "fieldmem --help"
        typer.echo(one_line(f"fieldmem: error: {exc.format_message()} (see {where})"), err=True)
        return 2
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("fieldmem: interrupted", err=True)
        return 130
    if result == 130:  # typer turns Ctrl-C into a returned 130; fieldmem itself never exits 130
        typer.echo("fieldmem: interrupted", err=True)
    return result if isinstance(result, int) else 0


# ----------------------------------------------------------------------------
# fieldmem envs: the cached jax environments (fieldmem/parent/envs.py makes, finds and removes them)

envs_app = typer.Typer(
    name="envs",
    help="The cached environments with another jax that --jax checks under: list, create, remove.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(envs_app)


def _env_what(env: Any) -> str:
    """What an environment holds, as ``fieldmem envs`` shows it: ``jax 0.9.2, jaxlib 0.9.2, libtpu 0.0.37``."""
    return ", ".join(
        f"{name} {version}" for name, version in (("jax", env.jax), ("jaxlib", env.jaxlib), *env.plugins, *env.packages)
    )


@envs_app.command("list")
def envs_list() -> None:
    """List the cached environments: version, jax/jaxlib, plugins and packages, size on disk, folder."""
    from fieldmem.model.escaping import visible
    from fieldmem.model.units import format_bytes
    from fieldmem.parent.envs import env_root, env_size, list_envs

    found = list_envs()
    if not found:
        typer.echo(f"no jax environments in {visible(str(env_root()))} (fieldmem envs create VERSION makes one)")
        return
    rows = [("version", "installed", "size", "folder")]
    rows += [(env.version, _env_what(env), format_bytes(env_size(env)), str(env.folder)) for env in found]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    for row in rows:
        typer.echo(visible("  ".join([*(cell.ljust(width) for cell, width in zip(row, widths)), row[3]])))


@envs_app.command("create")
def envs_create(
    version: Annotated[str, typer.Argument(help="The jax release, e.g. 0.9.2 (jaxlib at the same).")],
    plugin: Annotated[
        list[str] | None,
        typer.Option(
            "--plugin",
            help="A backend kind (tpu, gpu: its deviceless compilers at that jax) or a requirement; repeatable.",
        ),
    ] = None,
    requirements: Annotated[
        Path | None, typer.Option("--requirements", "-r", help="A requirements file installed there too.")
    ] = None,
    package: Annotated[
        list[str] | None,
        typer.Option("--package", help="A package of yours (flax, 'optax>=0.2') at a release that fits; repeatable."),
    ] = None,
) -> None:
    """Make the environment for a jax release now (or show the cached one), as --jax does on first use."""
    from fieldmem.model.escaping import visible
    from fieldmem.parent.envs import ensure_env

    try:
        env = ensure_env(
            version,
            plugins=tuple(plugin or ()),
            requirements=requirements,
            packages=tuple(package or ()),
            progress=_say,
        )
    except FieldmemError as exc:
        raise _fail(exc.message) from None
    typer.echo(visible(f"jax {env.version}: {_env_what(env)} in {env.folder}"))


@envs_app.command("remove")
def envs_remove(
    version: Annotated[str, typer.Argument(help="The jax release (every environment of it), or a folder's name.")],
) -> None:
    """Remove the cached environments of a jax release."""
    from fieldmem.model.escaping import visible
    from fieldmem.parent.envs import remove_env

    try:
        removed = remove_env(version)
    except FieldmemError as exc:
        raise _fail(exc.message) from None
    for env in removed:
        typer.echo(visible(f"removed jax {env.version}: {_env_what(env)} in {env.folder}"))
