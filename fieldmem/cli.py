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
from typing import Annotated, Optional

import typer

from fieldmem import __version__
from fieldmem.errors import FieldmemError, OptionError

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


def _check_writable(output: Path) -> None:
    """Fail before compiling anything when ``-o FILE`` cannot be written."""
    folder = output.parent if str(output.parent) else Path(".")
    if output.is_dir():
        raise OptionError(f"--output {str(output)!r} is a folder: name a file, e.g. {str(output / 'report.json')!r}")
    if not folder.is_dir():
        raise OptionError(f"--output {str(output)!r}: the folder {str(folder)!r} does not exist")


@app.command()
def check(
    targets: Annotated[
        list[str],
        typer.Argument(
            help="pkg.module:fn, path/to/file.py:fn, module:obj.attr, or a module/file alone "
            "(every fieldmem.case registered in it).",
            show_default=False,
        ),
    ],
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
    min_bytes: Annotated[
        str,
        typer.Option("--min-bytes", help="Copies and findings smaller than this stay in JSON but out of the verdict and table."),
    ] = "1KiB",
    output_format: Annotated[
        str, typer.Option("--format", "-f", help="table | json")
    ] = "table",
    output: Annotated[
        Optional[Path],
        typer.Option("--output", "-o", help="Write the report in --format to this file (the table still goes to stdout)."),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Per target: every figure, alias, unusable donation, copy and finding.")
    ] = False,
    jobs: Annotated[
        Optional[int],
        typer.Option("--jobs", "-j", help="Compile the two variants concurrently when > 1 (default: half the CPU cores)."),
    ] = None,
) -> None:
    """Compile each target with and without donation and report whether it is in place."""
    from fieldmem.checker import CheckOptions, check as run_check
    from fieldmem.registry import EXPECTATIONS
    from fieldmem.render import RenderOptions, get_renderer
    from fieldmem.spec import DonateSpec, StaticSpec, parse_bytes, parse_shapes
    from fieldmem.target import TargetOptions

    try:
        if expect is not None and expect not in EXPECTATIONS:
            raise OptionError(f"--expect {expect!r} is not known: use one of {', '.join(EXPECTATIONS)}")
        if args is not None and shapes is not None:
            raise OptionError("--args and --shapes both give example arguments: use one of them")
        if jobs is not None and jobs < 1:
            raise OptionError(f"--jobs {jobs} must be at least 1")
        renderer = get_renderer(output_format)
        if output is not None:
            _check_writable(output)
        target_options = TargetOptions(
            args=args,
            shapes=parse_shapes(shapes) if shapes is not None else None,
            donate=DonateSpec.parse(donate) if donate is not None else None,
            static=StaticSpec.parse(static) if static is not None else None,
            expect=expect,
            max_peak=parse_bytes(max_peak, "--max-peak") if max_peak is not None else None,
        )
        options = CheckOptions(
            min_bytes=parse_bytes(min_bytes, "--min-bytes"),
            jobs=jobs if jobs is not None else max(1, (os.cpu_count() or 2) // 2),
        )
    except FieldmemError as exc:
        raise _fail(exc.message) from None

    report = run_check(targets, target_options, options, progress=_progress_printer(sys.stderr.isatty()))

    for result in report.results:
        if result.status == "error" and result.error is not None:
            # a case of a bare module or file has its own name: show both
            label = result.target if result.name == result.target else f"{result.target} ({result.name})"
            typer.echo(f"fieldmem: error: {label}: {result.error.message}", err=True)

    width = shutil.get_terminal_size((120, 24)).columns
    render_options = RenderOptions(
        verbose=verbose, min_bytes=options.min_bytes, width=max(width, 80), color=sys.stdout.isatty()
    )
    if output is not None:
        from fieldmem.files import write_atomic

        try:
            write_atomic(output, renderer.render(report, RenderOptions(verbose=verbose, min_bytes=options.min_bytes)))
        except OSError as exc:
            raise _fail(f"cannot write {str(output)!r}: {exc.strerror or exc}") from None
        typer.echo(get_renderer("table").render(report, render_options), nl=False)
    else:
        typer.echo(renderer.render(report, render_options), nl=False)
    raise typer.Exit(report.exit_code)


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
    return result if isinstance(result, int) else 0
