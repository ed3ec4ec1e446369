"""The one registry of renderers, keyed by (document, format), and their interface.

Each row names a document (a check's :data:`REPORT`, ``fieldmem compare``'s :data:`COMPARISON`,
``fieldmem fit``'s :data:`FIT`), a format, its file suffix and the function that renders it
(``module:function``, ``render(document, options) -> str`` with :class:`RenderOptions`). Adding a format is its renderer module and
one row per document it renders (:func:`register` does it at run time, as a test does): the lookups,
the error messages that list the formats and :func:`preload` all read these rows.

The renderer modules are imported on first use, not with this registry: importing every renderer
(rich, the HTML page, the SVG writer) measured ~550 ms on top of ~100 ms for ``fieldmem.render`` alone
(2 shared cores, wall time of ``import``), which ``import fieldmem.render`` for ``RenderOptions`` (the
API, the pytest plugin) would pay for formats it never writes. A renderer whose module is not installed
is not offered and breaks nothing else.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from fieldmem.model.errors import OptionError
from fieldmem.request.options import MIN_BYTES

__all__ = [
    "COMPARISON",
    "DOCUMENTS",
    "FIT",
    "REPORT",
    "RenderOptions",
    "Renderer",
    "format_help",
    "formats",
    "get_renderer",
    "preload",
    "register",
    "renderers",
]

#: The documents fieldmem renders: a check's Report, a Comparison of saved reports, a FitReport.
REPORT = "report"
COMPARISON = "comparison"
FIT = "fit"
#: Each document, and how an unknown ``--format`` for it is told (after "is not known").
DOCUMENTS = {REPORT: "", COMPARISON: " for compare", FIT: " here"}


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


@dataclass(frozen=True)
class Renderer:
    """A format of one document: its name, file suffix and ``render(document, options) -> str``."""

    name: str
    extension: str
    render: Callable[[Any, RenderOptions], str]
    document: str = REPORT
    note: str = ""  # said after the name in --format's help ("a picture; needs -o")


def _lazy(module: str, function: str) -> Callable[[Any, RenderOptions], str]:
    """``module.function``, imported on the first call rather than with the registry."""

    def render(document: Any, options: RenderOptions) -> str:
        found: Callable[[Any, RenderOptions], str] = getattr(importlib.import_module(module), function)
        return found(document, options)

    render.__qualname__ = render.__name__ = f"{function}_{module.rsplit('.', 1)[-1]}"
    return render


def _available(module: str) -> bool:
    """Whether a renderer module is installed (found without importing it)."""
    return importlib.util.find_spec(module) is not None


#: document -> format -> renderer, in the order errors and help list them; the rows register below.
_REGISTRY: dict[str, dict[str, Renderer]] = {document: {} for document in DOCUMENTS}
#: (document, format) -> the renderer's module, for :func:`preload`
_MODULES: dict[tuple[str, str], str] = {}


def register(document: str, name: str, extension: str, target: str, note: str = "") -> Renderer | None:
    """Offer ``name`` for ``document``, rendered by ``target`` (``"module:function"``) into files named
    ``*extension``. Not offered (None) when the module is not installed."""
    if document not in _REGISTRY:
        raise ValueError(f"no document {document!r}: one of {', '.join(DOCUMENTS)}")
    module, _, function = target.partition(":")
    if not _available(module):
        return None
    renderer = Renderer(name, extension, _lazy(module, function or "render"), document, note)
    _REGISTRY[document][name] = renderer
    _MODULES[(document, name)] = module
    return renderer


# The rows: document, format, file suffix, renderer. A check's formats are in the order of
# fieldmem.request.options.FORMATS, fit's in that of fieldmem.request.fit.FIT_FORMATS (the request layer
# checks a name before anything runs; tests/render/test_formats.py holds them equal to these rows).
register(REPORT, "table", ".txt", "fieldmem.render.table:render")
register(REPORT, "json", ".json", "fieldmem.render.jsonout:render")
register(REPORT, "github", ".txt", "fieldmem.render.github:render")
register(REPORT, "markdown", ".md", "fieldmem.render.markdown:render")
register(REPORT, "html", ".html", "fieldmem.render.html:render")
register(COMPARISON, "table", ".txt", "fieldmem.render.compare:render_table")
register(COMPARISON, "json", ".json", "fieldmem.render.compare:render_json")
register(COMPARISON, "markdown", ".md", "fieldmem.render.compare:render_markdown")
register(FIT, "table", ".txt", "fieldmem.render.fit:render_table")
register(FIT, "json", ".json", "fieldmem.render.fit:render_json")
register(FIT, "markdown", ".md", "fieldmem.render.fit:render_markdown")
register(FIT, "svg", ".svg", "fieldmem.render.fit:render_svg", note="a picture; needs -o")


def renderers(document: str = REPORT) -> dict[str, Renderer]:
    """The formats of ``document`` by name, in order: the registry's own table (a format registered
    later is in it)."""
    return _REGISTRY[document]


def formats(document: str = REPORT) -> tuple[str, ...]:
    """The names of ``document``'s formats, in order."""
    return tuple(_REGISTRY[document])


def format_help(document: str = REPORT) -> str:
    """``--format``'s help for ``document``: ``table (default) | json | ...``, each with its note."""
    return " | ".join(
        f"{name}{' (default)' if n == 0 else ''}{f' ({renderer.note})' if renderer.note else ''}"
        for n, (name, renderer) in enumerate(_REGISTRY[document].items())
    )


def get_renderer(name: str, document: str = REPORT) -> Renderer:
    """The renderer of ``name`` for ``document``.

    Raises:
        OptionError: naming the formats ``document`` has.
    """
    known = _REGISTRY[document]
    if name not in known:
        raise OptionError(f"--format {name!r} is not known{DOCUMENTS[document]}: use one of {', '.join(known)}")
    return known[name]


def preload(names: Iterable[str], document: str = REPORT) -> None:
    """Import the renderers of ``names`` (and rich, for the table) now, while nothing else needs the
    time: ``fieldmem check`` does it while its worker starts jax, so they cost nothing when the report is
    ready. An unknown one is left for :func:`get_renderer` to report."""
    wanted = set(names)
    for module in sorted({module for (doc, name), module in _MODULES.items() if doc == document and name in wanted}):
        importlib.import_module(module)
