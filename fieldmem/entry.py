"""The ``fieldmem`` command (and ``python -m fieldmem``): the worker of ``fieldmem check`` is started
first (:func:`fieldmem.engine.spawn.prestart_for`, standard library only), then the command line
libraries load and :func:`fieldmem.cli.main` runs, while the worker loads jax."""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> int:
    from fieldmem.engine.spawn import prestart_for

    prestart_for(sys.argv[1:])
    from fieldmem.cli import main as cli_main

    return cli_main()
