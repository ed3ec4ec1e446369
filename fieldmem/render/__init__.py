"""Renderers: each formats an immutable Report and computes nothing.

Every renderer has the same interface, ``render(report, options) -> str``,
and a file extension, so the CLI, tests and ``-o FILE`` treat them alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fieldmem.report import Report

__all__ = ["RENDERERS", "RenderOptions", "Renderer", "get_renderer"]


@dataclass(frozen=True)
class RenderOptions:
    verbose: bool = False
    min_bytes: int = 1024
    width: int = 120
    color: bool = False


@dataclass(frozen=True)
class Renderer:
    name: str
    extension: str
    render: Callable[[Report, RenderOptions], str]


def _table(report: Report, options: RenderOptions) -> str:
    from fieldmem.render.table import render

    return render(report, options)


def _json(report: Report, options: RenderOptions) -> str:
    from fieldmem.render.jsonout import render

    return render(report, options)


RENDERERS: dict[str, Renderer] = {
    "table": Renderer("table", ".txt", _table),
    "json": Renderer("json", ".json", _json),
}


def get_renderer(name: str) -> Renderer:
    from fieldmem.errors import OptionError

    if name not in RENDERERS:
        raise OptionError(f"--format {name!r} is not known: use one of {', '.join(RENDERERS)}")
    return RENDERERS[name]
