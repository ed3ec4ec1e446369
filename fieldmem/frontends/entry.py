"""The ``fieldmem`` command (and ``python -m fieldmem``): the worker of ``fieldmem check`` is started
first (:func:`fieldmem.parent.spawn.prestart_for`, standard library only), then the command line
libraries load and :func:`fieldmem.frontends.cli.main` runs, while the worker loads jax. The process ends by
``os._exit`` once its output is flushed (:func:`leave`)."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from fieldmem.parent.spawn import prestart_for

__all__ = ["leave", "main"]


def main() -> NoReturn:
    prestart_for(sys.argv[1:])
    # here, not at the top: the command line's libraries (typer) load while the worker started above starts
    from fieldmem.frontends.cli import main as cli_main

    leave(cli_main())


def leave(code: int) -> NoReturn:
    """End the process with ``code`` once stdout and stderr are flushed, without the interpreter's teardown.

    The teardown frees, object by object, what the process is about to give
    back whole: the decoded results and every module (time that grows with the
    leaves checked). By now every file fieldmem writes is closed (reports and
    baselines are written to a temporary file and renamed), the worker it
    started has answered or been ended, and no code of the user's ran in this
    process, so no exit hook of theirs is skipped. Under a profiler, a
    debugger or coverage (``sys.setprofile``/``sys.settrace``), the process
    ends as usual: they write what they measured on the way out.
    """
    if sys.getprofile() is not None or sys.gettrace() is not None:
        raise SystemExit(code)  # under a profiler, a debugger or coverage: they write their results at exit
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: what could be written was
            pass
    os._exit(code)
