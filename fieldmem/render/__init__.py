"""Renderers: each formats an immutable Report and computes nothing.

Every renderer has the same interface, ``render(report, options) -> str``,
and a file extension, so the CLI, tests and ``-o FILE`` treat them alike.
Each shows user text by one rule (:mod:`fieldmem.model.escaping`): it makes the
report's strings visible first and passes its whole output through
``defused`` (JSON: ``json_defused``) last.
:mod:`fieldmem.render.formats` is the one registry of them, keyed by document and format;
each renderer's module is imported only when it renders, so importing this
package stays cheap and a renderer that is not installed breaks nothing else.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from fieldmem.render.formats import Renderer, RenderOptions, get_renderer, preload, renderers

__all__ = ["RENDERERS", "RenderOptions", "Renderer", "asset", "get_renderer", "preload", "text_console"]

#: A check's formats by name (the registry's own table, so a format registered later is in it).
RENDERERS: dict[str, Renderer] = renderers()


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


def asset(name: str) -> str:
    """The text of ``fieldmem/render/assets/<name>``: the HTML page's CSS and JavaScript, kept as files of
    their own (package data) rather than Python strings."""
    return (resources.files(__name__) / "assets" / name).read_text(encoding="utf-8")
