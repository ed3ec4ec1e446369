"""The ``fieldmem compare`` command: saved reports (or fieldmem fit's documents) side by side. Nothing is
computed here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fieldmem.frontends.command_line import fail
from fieldmem.frontends.fit_cli import compare_fit_files, fit_documents
from fieldmem.model.errors import FieldmemError

__all__ = ["compare"]


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
    # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
    from fieldmem.frontends.output import echo_rendered, terminal_options, write_file

    try:
        fits = fit_documents(reports, tolerance)
    except FieldmemError as exc:
        raise fail(exc.message) from None
    if fits:  # fieldmem fit's documents: their frontiers side by side
        try:
            code = compare_fit_files(reports, output_format or "table", output, fail_on_diff)
        except FieldmemError as exc:
            raise fail(exc.message) from None
        raise typer.Exit(code)
    # here, not at the top: at the top, these make `fieldmem --help` 1.99 s, not 0.36 s (measured 2026-12-06)
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
        raise fail(exc.message) from None
    options = terminal_options(verbose, comparison.min_bytes)
    echo_rendered(renderer.render(comparison, options), options)
    raise typer.Exit(comparison.exit_code(fail_on_diff))
