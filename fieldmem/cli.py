"""The ``fieldmem`` command: options in, exit code out. Nothing is computed here.

The core raises :class:`~fieldmem.errors.FieldmemError` for a user mistake;
this module prints it as one line on stderr and exits 2. Exit codes: 0 every
check passed, 1 a check failed, 2 bad input (see ``docs/exit-codes`` in the
README). jax is imported only when a command runs, so ``--help`` is instant.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from fieldmem import __version__
from fieldmem.errors import FieldmemError, OptionError

if TYPE_CHECKING:
    from fieldmem.report import Report

app = typer.Typer(
    name="fieldmem",
    help="Is your jitted JAX update really in place? Compile it with and without donation and see where the memory goes.",
    add_completion=False,
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
    typer.echo(f"fieldmem: error: {message}", err=True)
    return typer.Exit(2)


def _progress_printer(enabled: bool):  # type: ignore[no-untyped-def]
    if not enabled:
        return None

    def progress(name: str, done: int, total: int) -> None:
        if total <= 1:
            return
        if done < total:
            sys.stderr.write(f"\r\x1b[2K[{done + 1}/{total}] {name}"[: shutil.get_terminal_size().columns + 8])
        else:
            sys.stderr.write("\r\x1b[2K")
        sys.stderr.flush()

    return progress


def _check_writable(output: Path, option: str = "--output") -> None:
    """Fail before compiling anything when ``option FILE`` cannot be written."""
    folder = output.parent if str(output.parent) else Path(".")
    if output.is_dir():
        raise OptionError(f"{option} {str(output)!r} is a folder: name a file, e.g. {str(output / 'report.json')!r}")
    if not folder.is_dir():
        raise OptionError(f"{option} {str(output)!r}: the folder {str(folder)!r} does not exist")


def _cache(given: str | None, off: bool, configured: str | None) -> str | None:
    """The compilation cache folder of this run: --cache-dir, the config's, else the default one."""
    from fieldmem.driver import cache_folder, default_cache_folder

    if off:
        if given is not None:
            raise OptionError("--cache-dir and --no-cache contradict each other: use one of them")
        return None
    if given is not None or configured is not None:
        return cache_folder(given if given is not None else configured)
    return default_cache_folder()


@app.command()
def check(
    targets: Annotated[
        Optional[list[str]],
        typer.Argument(
            help="pkg.module:fn, path/to/file.py:fn, module:obj.attr, or a module/file alone "
            "(every fieldmem.case registered in it). Default: the targets of [tool.fieldmem] in pyproject.toml.",
            show_default=False,
        ),
    ] = None,
    args: Annotated[
        Optional[str],
        typer.Option("--args", help="MODULE:FACTORY returning the positional args tuple, or (args, kwargs)."),
    ] = None,
    shapes: Annotated[
        Optional[str],
        typer.Option("--shapes", help="Array-only signatures, e.g. 'f32[4096,4096] f32[4096]' (nothing allocated)."),
    ] = None,
    donate: Annotated[
        Optional[str],
        typer.Option(
            "--donate",
            help="What the donated variant donates: all | none | numbers (0,2) | names (params,opt_state). "
            "Default: a jit target's own donation, else all array arguments.",
        ),
    ] = None,
    static: Annotated[
        Optional[str],
        typer.Option("--static", help="Extra static arguments (numbers or names); non-array arguments are static anyway."),
    ] = None,
    expect: Annotated[
        Optional[str],
        typer.Option("--expect", help="in-place: exit 1 when the donated variant is not in place. any (default): report only."),
    ] = None,
    max_peak: Annotated[
        Optional[str],
        typer.Option("--max-peak", help="Budget for the donated footprint, e.g. 64MiB; exceeding it exits 1."),
    ] = None,
    max_live_peak: Annotated[
        Optional[str],
        typer.Option(
            "--max-live-peak", help="Budget for the donated live peak (distinct buffers live at once); exceeding it exits 1."
        ),
    ] = None,
    min_bytes: Annotated[
        Optional[str],
        typer.Option(
            "--min-bytes",
            help="Copies and findings smaller than this stay in JSON but out of the verdict, table and "
            "baseline gate (default 1KiB).",
        ),
    ] = None,
    output_format: Annotated[
        Optional[str], typer.Option("--format", "-f", help="table (default) | json | github | markdown | html")
    ] = None,
    output: Annotated[
        Optional[Path],
        typer.Option("--output", "-o", help="Write the report in --format to this file (the table still goes to stdout)."),
    ] = None,
    html_output: Annotated[
        Optional[Path],
        typer.Option(
            "--html",
            help="Also write a self-contained HTML page (memory timelines, buffers live at the peak) to this file.",
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Per target: every figure, alias, unusable donation, copy and finding.")
    ] = False,
    suggest: Annotated[
        bool,
        typer.Option(
            "--suggest",
            help="Also find the donation that saves the most and verify it with one more compile per target.",
        ),
    ] = False,
    cache_dir: Annotated[
        Optional[str],
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
        bool,
        typer.Option(
            "--fast-compile",
            help="Compile with XLA:CPU's LLVM code generation at -O0: about 40% less compile time, the same "
            "HLO, buffer assignment and findings; the generated code size is then unavailable.",
        ),
    ] = False,
    backend: Annotated[
        Optional[str],
        typer.Option(
            "--backend",
            help="Compile for this backend: cpu, gpu, tpu (default: jax's). Several, e.g. cpu,gpu: each target on "
            "each, then side by side; -o/--html then write one file per backend (report.cpu.json, report.gpu.json).",
        ),
    ] = None,
    jobs: Annotated[
        Optional[int],
        typer.Option("--jobs", "-j", help="Compile the two variants concurrently when > 1 (default: half the CPU cores)."),
    ] = None,
    baseline: Annotated[
        Optional[Path],
        typer.Option("--baseline", help="Compare with this baseline file; any regression exits 1."),
    ] = None,
    no_baseline: Annotated[
        bool, typer.Option("--no-baseline", help="Do not compare with the baseline named in [tool.fieldmem].")
    ] = False,
    save_baseline: Annotated[
        Optional[Path],
        typer.Option(
            "--save-baseline",
            help="Record this run in this baseline file, after the whole run and only when it passed "
            "(entries of other targets and backends are kept).",
        ),
    ] = None,
    prune_baseline: Annotated[
        bool,
        typer.Option(
            "--prune-baseline",
            help="With --save-baseline: drop entries of this backend whose target this run did not check.",
        ),
    ] = False,
    tolerance: Annotated[
        Optional[str],
        typer.Option("--tolerance", help="Growth allowed against the baseline: 2%, 1MiB, 5%+1MiB, peak:5%,temp:1MiB."),
    ] = None,
    config: Annotated[
        Optional[Path],
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
            help="With --run: a worker process per target (a clean device peak; a crash or hang is reported). "
            "--no-isolate runs in this process: faster, but peaks accumulate and a crash ends the run.",
        ),
    ] = True,
    timeout: Annotated[
        Optional[float],
        typer.Option("--timeout", help="With --run: seconds a target may take in its worker before the worker is killed."),
    ] = None,
    devices: Annotated[
        Optional[int],
        typer.Option(
            "--devices",
            help="Simulate N CPU devices (XLA_FLAGS --xla_force_host_platform_device_count), to check sharded "
            "updates on a laptop.",
        ),
    ] = None,
) -> None:
    """Compile each target with and without donation and report whether it is in place."""
    from fieldmem.gate.baseline import compare_to_baseline, load_baseline
    from fieldmem.request.options import CheckOptions
    from fieldmem.engine.checker import check as run_check, check_backends
    from fieldmem.request.config import load_config
    from fieldmem.request.registry import EXPECTATIONS
    from fieldmem.render import RenderOptions, get_renderer
    from fieldmem.request.spec import DonateSpec, StaticSpec, parse_shapes
    from fieldmem.units import parse_bytes
    from fieldmem.request.target import TargetOptions
    from fieldmem.gate.tolerance import Tolerances

    try:
        if expect is not None and expect not in EXPECTATIONS:
            raise OptionError(f"--expect {expect!r} is not known: use one of {', '.join(EXPECTATIONS)}")
        if args is not None and shapes is not None:
            raise OptionError("--args and --shapes both give example arguments: use one of them")
        if jobs is not None and jobs < 1:
            raise OptionError(f"--jobs {jobs} must be at least 1")
        if baseline is not None and no_baseline:
            raise OptionError("--baseline and --no-baseline contradict each other: use one of them")
        if prune_baseline and save_baseline is None:
            raise OptionError("--prune-baseline only applies with --save-baseline PATH")
        if timeout is not None and (timeout <= 0 or not (run or probe)):
            raise OptionError(
                f"--timeout {timeout:g} must be positive" if timeout <= 0 else "--timeout only applies with --run"
            )
        if devices is not None:
            from fieldmem.driver import simulate_cpu_devices

            simulate_cpu_devices(devices)
        settings = load_config(config)
        specs = list(targets or settings.all_targets)
        if not specs:
            raise OptionError(
                "no targets: name them (fieldmem check pkg.model:update) or list them in pyproject.toml "
                "under [tool.fieldmem] as targets = [\"pkg.model:update\"]"
            )
        renderer = get_renderer(output_format or settings.format or "table")
        backends = _backends(backend) if backend is not None else None
        if backends is not None and len(backends) > 1 and renderer.name == "json" and output is None:
            raise OptionError(
                "several backends give several JSON reports: write them with -o FILE "
                "(one file per backend: FILE.cpu.json, FILE.gpu.json)"
            )
        if output is not None:
            _check_writable(output)
        if html_output is not None:
            _check_writable(html_output, "--html")
        if save_baseline is not None:
            _check_writable(save_baseline, "--save-baseline")
        command_line = TargetOptions(
            args=args,
            shapes=parse_shapes(shapes) if shapes is not None else None,
            donate=DonateSpec.parse(donate) if donate is not None else None,
            static=StaticSpec.parse(static) if static is not None else None,
            expect=expect,
            max_peak=parse_bytes(max_peak, "--max-peak") if max_peak is not None else None,
            max_live_peak=parse_bytes(max_live_peak, "--max-live-peak") if max_live_peak is not None else None,
        )
        run_options, per_target = settings.target_options(command_line, specs)
        options = CheckOptions(
            min_bytes=parse_bytes(min_bytes, "--min-bytes") if min_bytes is not None else (
                settings.min_bytes if settings.min_bytes is not None else 1024
            ),
            jobs=jobs or settings.jobs or max(1, (os.cpu_count() or 2) // 2),
            suggest=suggest,
            cache_dir=_cache(cache_dir, no_cache, settings.cache_dir),
            fast_compile=fast_compile or bool(settings.fast_compile),
            run=run or probe,
            probe=probe,
            isolate=isolate,
            timeout=timeout,
        )
        tolerances = Tolerances.parse(tolerance) if tolerance is not None else (settings.tolerance or Tolerances())
        # the baseline is read before anything compiles; the config's one may not exist yet
        # when this very run is the one that creates it
        baseline_path = None if no_baseline else (baseline or settings.baseline)
        gate = None
        if baseline_path is not None and (
            baseline is not None or save_baseline is None or Path(baseline_path).exists()
        ):
            gate = load_baseline(baseline_path)
    except FieldmemError as exc:
        raise _fail(exc.message) from None

    progress = _progress_printer(sys.stderr.isatty())
    if backends is None:
        reports: tuple[Report, ...] = (run_check(specs, run_options, options, progress=progress, per_target=per_target),)
    else:
        try:
            reports = check_backends(specs, backends, run_options, options, progress=progress, per_target=per_target)
        except FieldmemError as exc:
            raise _fail(exc.message) from None
    if gate is not None:
        reports = tuple(compare_to_baseline(report, gate, tolerances) for report in reports)

    several = len(reports) > 1
    for report in reports:
        for result in report.results:
            if result.status == "error" and result.error is not None:
                # a case of a bare module or file has its own name: show both
                label = result.target if result.name == result.target else f"{result.target} ({result.name})"
                on = f" [{report.backend}]" if several else ""
                typer.echo(f"fieldmem: error: {label}{on}: {result.error.message}", err=True)

    width = shutil.get_terminal_size((120, 24)).columns
    render_options = RenderOptions(
        verbose=verbose, min_bytes=options.min_bytes, width=max(width, 80), color=sys.stdout.isatty()
    )
    file_options = RenderOptions(verbose=verbose, min_bytes=options.min_bytes)
    for report in reports:
        # several backends: one file each, named after its backend (report.cpu.json, report.gpu.json)
        if output is not None:
            _write(_for_backend(output, report.backend, several), renderer.render(report, file_options))
        if html_output is not None:
            _write(_for_backend(html_output, report.backend, several), get_renderer("html").render(report, file_options))
    if output is not None:
        renderer = get_renderer("table")
    for report in reports:
        typer.echo(renderer.render(report, render_options), nl=False)
    if several and renderer.name == "table":
        from fieldmem.gate.compare import compare_reports
        from fieldmem.render.compare import get_compare_renderer

        side_by_side = compare_reports([(report.backend, report) for report in reports], min_bytes=options.min_bytes)
        typer.echo(get_compare_renderer("table").render(side_by_side, render_options), nl=False)
    if save_baseline is not None:
        # a failing backend refuses the save before any backend's entries are written
        for report in sorted(reports, key=lambda r: r.exit_code == 0):
            _save(save_baseline, report, prune_baseline)
    raise typer.Exit(max(report.exit_code for report in reports))


def _for_backend(path: Path, backend: str, several: bool) -> Path:
    return path.with_name(f"{path.stem}.{backend}{path.suffix}") if several else path


def _backends(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise OptionError(f"--backend {text!r}: name backends separated by commas, e.g. cpu,gpu")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise OptionError(f"--backend {text!r} names {', '.join(repeated)} twice")
    return names


def _write(path: Path, text: str) -> None:
    from fieldmem.files import write_atomic

    try:
        write_atomic(path, text)
    except OSError as exc:
        raise _fail(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None


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
        Optional[str],
        typer.Option("--tolerance", help="Change allowed before a figure differs: 2%, 1MiB, peak:5%,temp:1MiB. Default: exact."),
    ] = None,
    fail_on_diff: Annotated[
        bool, typer.Option("--fail-on-diff", help="Exit 1 when any significant difference is found.")
    ] = False,
    min_bytes: Annotated[
        Optional[str],
        typer.Option("--min-bytes", help="Copies smaller than this are not compared (default: the reports' own)."),
    ] = None,
    output_format: Annotated[
        Optional[str], typer.Option("--format", "-f", help="table (default) | json | markdown")
    ] = None,
    output: Annotated[
        Optional[Path],
        typer.Option("--output", "-o", help="Write the comparison in --format to this file (the table still goes to stdout)."),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also list aliases and copies per report.")] = False,
) -> None:
    """Show saved reports side by side per target (cpu vs gpu, jax 0.10 vs 0.11, main vs branch)."""
    from fieldmem.gate.compare import compare_files
    from fieldmem.render import RenderOptions
    from fieldmem.render.compare import get_compare_renderer
    from fieldmem.units import parse_bytes
    from fieldmem.gate.tolerance import Tolerances

    try:
        renderer = get_compare_renderer(output_format or "table")
        if output is not None:
            _check_writable(output)
        comparison = compare_files(
            reports,
            Tolerances.parse(tolerance) if tolerance is not None else None,
            parse_bytes(min_bytes, "--min-bytes") if min_bytes is not None else None,
        )
    except FieldmemError as exc:
        raise _fail(exc.message) from None
    width = shutil.get_terminal_size((120, 24)).columns
    if output is not None:
        _write(output, renderer.render(comparison, RenderOptions(verbose=verbose, min_bytes=comparison.min_bytes)))
        renderer = get_compare_renderer("table")
    options = RenderOptions(verbose=verbose, min_bytes=comparison.min_bytes, width=max(width, 80), color=sys.stdout.isatty())
    typer.echo(renderer.render(comparison, options), nl=False)
    raise typer.Exit(comparison.exit_code(fail_on_diff))


def _save(path: Path, report: "Report", prune: bool) -> None:
    """Write the baseline after the whole run, or say on stderr why it was not written.

    A refused save keeps the run's own exit code (1 for a failed check or a
    regression, 2 for a target that errored); a write that fails after a
    passing run exits 2. The file on disk is never touched in either case.
    """
    from fieldmem.gate.baseline import BaselineError, save_baseline
    from fieldmem.render.baseline import render_saved

    try:
        saved = save_baseline(path, report, prune=prune)
    except BaselineError as exc:
        code = report.exit_code
        typer.echo(f"fieldmem: {'error: ' if code != 1 else ''}{exc.message}", err=True)
        raise typer.Exit(code or 2) from None
    typer.echo(render_saved(saved), err=True, nl=False)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (``python -m fieldmem`` and the console script).

    Usage mistakes caught by click (a missing target, an unknown option, a
    non-integer ``--jobs``) get the same one-line ``fieldmem: error:`` form
    and exit code 2 as fieldmem's own errors.
    """
    # typer re-exports BadParameter but not its base class, click's UsageError
    # (vendored inside typer in recent releases): find it through the MRO.
    usage_error = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="fieldmem", standalone_mode=False)
    except usage_error as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `fieldmem`: the help, as click prints it
            typer.echo(exc.format_message(), err=True)
            return 2
        ctx = getattr(exc, "ctx", None)
        where = f"fieldmem {ctx.info_name} --help" if ctx is not None and ctx.parent is not None else "fieldmem --help"
        typer.echo(f"fieldmem: error: {exc.format_message()} (see {where})", err=True)
        return 2
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("fieldmem: interrupted", err=True)
        return 130
    if result == 130:  # typer turns Ctrl-C into a returned 130; fieldmem itself never exits 130
        typer.echo("fieldmem: interrupted", err=True)
    return result if isinstance(result, int) else 0
