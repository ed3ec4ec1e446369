"""What every ``fieldmem`` command shares: the command group that keeps the command line as typed, the
one-line error, the progress line and the lines on stderr. Nothing is computed here.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import typer

from fieldmem.model.errors import one_line
from fieldmem.model.escaping import visible

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["TYPED", "Commands", "fail", "progress_display", "say", "stderr_console"]


class Commands(typer.core.TyperGroup):
    """fieldmem's commands, keeping the command line as typed: which targets each ``--args`` follows
    (:func:`~fieldmem.request.build.pair_args`) is in its order, which the parsed options lose."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        TYPED[0] = list(args)
        return super().make_context(info_name, args, parent=parent, **extra)


TYPED: list[list[str]] = [[]]  # the command line as typed, set as it is parsed


def fail(message: str) -> typer.Exit:
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

    def progress(name: str, done: int, total: int) -> None:
        if done >= total:
            display.update(task, description="done", completed=total, total=total)
        else:  # the column reads markup: the name is the user's text, shown as it is
            display.update(task, description=escape(visible(name)), completed=done, total=total)
        display.refresh()

    with display:
        yield progress


def stderr_console() -> Console | None:
    """A rich console on stderr when stderr is a terminal (not a dumb one), else None: no progress."""
    if not sys.stderr.isatty() or os.environ.get("TERM") == "dumb":
        return None
    from rich.console import Console

    return Console(file=sys.stderr)


def say(line: str) -> None:
    """A line of what fieldmem is doing before the check (making a jax environment), on stderr."""
    typer.echo(f"fieldmem: {line}", err=True)
