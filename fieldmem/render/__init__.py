"""Renderers: each formats an immutable Report and computes nothing.

Every renderer has the same interface, ``render(report, options) -> str``,
and a file extension, so the CLI, tests and ``-o FILE`` treat them alike.
Each shows user text by one rule (:mod:`fieldmem.model.escaping`): it makes the
report's strings visible first and passes its whole output through
``defused`` (JSON: ``json_defused``) last.
Each renderer's module is imported only when it renders, so importing this
package stays cheap and a renderer that is not installed breaks nothing else.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from fieldmem.model.report import Report
from fieldmem.request.options import FORMATS, MIN_BYTES

__all__ = ["RENDERERS", "RenderOptions", "Renderer", "get_renderer", "preload", "text_console"]


@dataclass(frozen=True)
class RenderOptions:
    """How to lay out a report: ``width`` in columns; ``color``: with ANSI styles, in rich's
    ``color_system`` (``standard``, ``256``, ``truecolor``, ``windows``), and ``no_color``: styles (bold,
    dim) without colours. For the terminal, :func:`fieldmem.frontends.output.terminal_options` takes all four from
    what rich reads of stdout and the environment; files get plain text."""

    verbose: bool = False
    min_bytes: int = MIN_BYTES
    width: int = 120
    color: bool = False
    color_system: str = "standard"
    no_color: bool = False
    top: int = 0  # the table's "live peak by line" lists this many lines per target (0: not shown)


def text_console(file: Any, options: RenderOptions) -> Any:
    """A rich Console writing into ``file`` at the options' width, colored only when asked.

    It reads no markup (``[bold]``) and no emoji codes (``:warning:``) in the strings it prints: every
    string is shown as it is, a user's name included. Nothing here reads the environment: the options
    say what the terminal wants.
    """
    from rich.console import Console

    return Console(
        file=file,
        width=options.width,
        height=25,  # with both given, rich takes the size as it is (TERM=dumb would make it 80 columns)
        force_terminal=options.color,
        color_system=options.color_system if options.color else None,  # type: ignore[arg-type]
        no_color=options.no_color,
        highlight=False,
        soft_wrap=False,
        markup=False,
        emoji=False,
    )


@dataclass(frozen=True)
class Renderer:
    name: str
    extension: str
    render: Callable[[Report, RenderOptions], str]


def _lazy(module: str) -> Callable[[Report, RenderOptions], str]:
    """``module.render``, imported on the first call rather than with this package."""

    def render(report: Report, options: RenderOptions) -> str:
        function: Callable[[Report, RenderOptions], str] = importlib.import_module(module).render
        return function(report, options)

    render.__qualname__ = render.__name__ = f"render_{module.rsplit('.', 1)[-1]}"
    return render


def preload(formats: Iterable[str]) -> None:
    """Import the renderers of ``formats`` (and rich, for the table) now, while nothing else needs the
    time: ``fieldmem check`` does it while its worker starts jax, so they cost nothing when the report is
    ready. An unknown or missing one is left for :func:`get_renderer` to report."""
    modules = {module for name, _, module in _FORMATS if name in set(formats)}
    for module in sorted(modules):
        if _available(module):
            importlib.import_module(module)


def _available(module: str) -> bool:
    """Whether a renderer module is installed (found without importing it)."""
    return importlib.util.find_spec(module) is not None


# each of the formats the request layer knows (fieldmem.request.options.FORMATS), in its order: its file
# extension and its module
_MODULES = {
    "table": (".txt", "fieldmem.render.table"),
    "json": (".json", "fieldmem.render.jsonout"),
    "github": (".txt", "fieldmem.render.github"),
    "markdown": (".md", "fieldmem.render.markdown"),
    "html": (".html", "fieldmem.render.html"),
}
_FORMATS = tuple((name, *_MODULES[name]) for name in FORMATS)

RENDERERS: dict[str, Renderer] = {
    name: Renderer(name, extension, _lazy(module)) for name, extension, module in _FORMATS if _available(module)
}


def get_renderer(name: str) -> Renderer:
    from fieldmem.model.errors import OptionError

    if name not in RENDERERS:
        raise OptionError(f"--format {name!r} is not known: use one of {', '.join(RENDERERS)}")
    return RENDERERS[name]
