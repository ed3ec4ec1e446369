"""The ``fieldmem`` command: its commands registered, exit code out. Nothing is computed here.

One module per command: ``check`` (:mod:`fieldmem.frontends.check_cli`), ``fit``
(:mod:`fieldmem.frontends.fit_cli`), ``compare`` (:mod:`fieldmem.frontends.compare_cli`) and ``envs``
(:mod:`fieldmem.frontends.envs_cli`); what they share is :mod:`fieldmem.frontends.command_line`.

The core raises :class:`~fieldmem.model.errors.FieldmemError` for a user mistake;
each command prints it as one line on stderr and exits 2. Exit codes: 0 every
check passed, 1 a check failed, 2 bad input (see ``docs/exit-codes`` in the
README). jax is imported only when a command runs, so ``--help`` is instant.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Annotated, Any

import typer

from fieldmem import __version__
from fieldmem.frontends.check_cli import check
from fieldmem.frontends.command_line import Commands
from fieldmem.frontends.compare_cli import compare
from fieldmem.frontends.envs_cli import envs_app
from fieldmem.frontends.fit_cli import fit
from fieldmem.model.errors import one_line
from fieldmem.parent.spawn import discard_prestarted, prestart_for

__all__ = ["app", "main"]

app = typer.Typer(
    cls=Commands,
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


app.command()(check)
app.command("fit")(fit)
app.command()(compare)
app.add_typer(envs_app)


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
