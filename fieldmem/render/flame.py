"""The live peak as a flame graph (an icicle) in the HTML report: its tree, its data, its script.

Each variant's :class:`~fieldmem.model.memory.PeakBreakdown` is laid out as a tree whose
root is the live peak: ``arguments`` (each argument leaf under its pytree path's
parts: ``params`` > ``['layer1']`` > ``['w']``), the values the program computes
under the Python stack of the operation that made them (outermost frame first,
library frames kept and marked; an output's path a leaf under its frames, a
frame's temporaries a leaf of their own when the frame has deeper frames too),
and ``constants``. Every node's bytes are the sum of its children's, and the
root's the sum of the breakdown's sources: the report's own numbers, regrouped,
nothing computed. The tree is built here, in Python, so that it is tested
without a browser; the page's script only lays it out, searches and zooms.

To keep a page of a model of thousands of leaves small, a node lists its
:data:`MAX_CHILDREN` largest children and one ``… N more`` node for the rest,
and a source embeds its :data:`MAX_BUFFERS` largest buffers and a count of the
others; the page says so where it happens, and the JSON report keeps them all.

The data goes into the page as JSON in a ``<script type="application/json">``
block with ``<``, ``>`` and ``&`` written as JSON escapes, so no user's path can
close the block; the script reads it with ``JSON.parse`` and writes every
string with ``textContent``, never as markup.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from fieldmem.model.memory import PeakBreakdown, PeakSource
from fieldmem.model.target import TargetResult
from fieldmem.render import asset

__all__ = ["FLAME_CSS", "FLAME_JS", "MAX_BUFFERS", "MAX_CHILDREN", "FlameNode", "flame_data", "peak_tree"]

MAX_CHILDREN = 120  # children per node drawn and searchable; the rest are one "… N more" node
MAX_BUFFERS = 25  # buffers per source embedded for the click panel; the rest are counted
_VARIANTS = ("plain", "donated")
_VARIANT_LABEL = {"plain": "plain (no donation)", "donated": "donated"}

# a pytree path's parts after its parameter name: ['key'], ["key"], [0], .attr
_PART = re.compile(r"""\['(?:[^'\\]|\\.)*'\]|\["(?:[^"\\]|\\.)*"\]|\[[^\]'"]*\]|\.[^.\[]+""")


@dataclass(frozen=True)
class FlameNode:
    """One frame of the flame graph.

    ``name``: what its box shows; ``search``: what the search box matches (a frame's
    ``file:line function``, an argument's path up to here); ``kind``: how it is coloured
    (``root``, ``group``, ``argument``, ``frame``, ``library``, ``output``, ``temporary``,
    ``constant``, ``unknown``, ``more``); ``bytes``: its children's, or its sources' when it has
    none; ``sources``: indices into the breakdown's sources whose buffers it holds itself.
    """

    name: str
    search: str
    kind: str
    bytes: int
    padding_bytes: int = 0
    children: tuple[FlameNode, ...] = ()
    sources: tuple[int, ...] = ()
    hidden: int = 0  # a "… N more" node: how many nodes it stands for

    def walk(self) -> Iterator[FlameNode]:
        """This node and every node under it, depth first."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))


@dataclass
class _Builder:
    name: str
    search: str
    kind: str
    children: dict[tuple[object, ...], _Builder] = field(default_factory=dict)
    sources: list[int] = field(default_factory=list)

    def child(self, key: tuple[object, ...], name: str, search: str, kind: str) -> _Builder:
        found = self.children.get(key)
        if found is None:
            found = self.children[key] = _Builder(name, search, kind)
        return found


def _path_parts(path: str) -> list[str]:
    """``params['layer1']['w']`` -> ``params``, ``['layer1']``, ``['w']``; a path that does not read as
    a pytree path is one part."""
    head = re.match(r"[^\[.]+", path)
    if head is None:
        return [path]
    parts = [head.group()]
    position = head.end()
    for match in _PART.finditer(path, position):
        if match.start() != position:
            return [path]
        parts.append(match.group())
        position = match.end()
    return parts if position == len(path) else [path]


def peak_tree(breakdown: PeakBreakdown) -> FlameNode:
    """The flame graph's tree of one variant's live peak (see the module's docstring)."""
    root = _Builder("live peak", "live peak", "root")
    arguments = _Builder("arguments", "arguments", "group")
    constants = _Builder("constants", "constants", "constant")
    computed = _Builder("", "", "root")  # the top-level frames, kept apart to order them after the arguments
    for index, source in enumerate(breakdown.sources):
        if source.kind == "argument":
            node, prefix = arguments, ""
            for part in _path_parts(source.input or "argument"):
                prefix += part
                node = node.child(("argument", prefix), part, prefix, "argument")
            node.sources.append(index)
        elif source.kind == "constant":
            constants.sources.append(index)
        else:
            node = _frames(computed, source)
            if source.output is not None:
                node = node.child(("output", source.output), source.output, source.output, "output")
            node.sources.append(index)
    sizes = [source.bytes for source in breakdown.sources]
    paddings = [source.padding_bytes for source in breakdown.sources]
    top = [arguments] if arguments.children or arguments.sources else []
    frames = sorted((_finish(node, sizes, paddings) for node in computed.children.values()), key=_order)
    tail = [_finish(constants, sizes, paddings)] if constants.sources else []
    children = tuple([_finish(node, sizes, paddings) for node in top] + _capped(frames) + tail)
    return FlameNode(
        root.name,
        root.search,
        root.kind,
        sum(child.bytes for child in children),
        sum(child.padding_bytes for child in children),
        children,
    )


def _frames(computed: _Builder, source: PeakSource) -> _Builder:
    """The node of the innermost frame of a computed value's stack (a value without one: its line's)."""
    node = computed
    if not source.stack:
        line = source.line
        return node.child(("line", line), line or "no source", line or "no source", "frame" if line else "unknown")
    for frame in source.stack:
        where = f"{frame.file}:{frame.line}"
        function = frame.function or "?"
        node = node.child(
            ("frame", frame.file, frame.line, frame.function, frame.library),
            f"{function} {frame.file.rsplit('/', 1)[-1]}:{frame.line}",  # the box is narrow: the file's name
            f"{where} {function}",
            "library" if frame.library else "frame",
        )
    return node


def _order(node: FlameNode) -> tuple[int, str]:
    return (-node.bytes, node.search)


def _finish(node: _Builder, sizes: list[int], paddings: list[int]) -> FlameNode:
    """The frozen node, its children largest first (and capped), its own sources a leaf of their own
    when it has children as well."""
    children = sorted((_finish(child, sizes, paddings) for child in node.children.values()), key=_order)
    sources = tuple(node.sources)
    if children and sources:
        kind = "temporary" if node.kind in ("frame", "library", "unknown") else node.kind
        name = "temporaries" if kind == "temporary" else "(itself)"
        own = FlameNode(
            name,
            f"{node.search} {name}",
            kind,
            sum(sizes[i] for i in sources),
            sum(paddings[i] for i in sources),
            sources=sources,
        )
        children = sorted([*children, own], key=_order)
        sources = ()
    shown = tuple(_capped(children))
    return FlameNode(
        node.name,
        node.search,
        node.kind,
        sum(child.bytes for child in shown) + sum(sizes[i] for i in sources),
        sum(child.padding_bytes for child in shown) + sum(paddings[i] for i in sources),
        shown,
        sources,
    )


def _capped(children: list[FlameNode]) -> list[FlameNode]:
    """The :data:`MAX_CHILDREN` largest children, and one node for the rest holding their sources."""
    if len(children) <= MAX_CHILDREN:
        return children
    kept, rest = children[: MAX_CHILDREN - 1], children[MAX_CHILDREN - 1 :]
    sources = tuple(i for child in rest for node in child.walk() for i in node.sources)
    return [
        *kept,
        FlameNode(
            f"… {len(rest)} more",
            "",
            "more",
            sum(child.bytes for child in rest),
            sum(child.padding_bytes for child in rest),
            sources=sources,
            hidden=len(rest),
        ),
    ]


# ----------------------------------------------------------------------------
# The page's data.


def _node_data(node: FlameNode, embedded: dict[int, int]) -> list[Any]:
    """A node as the script reads it: [name, search (0: the name), kind, bytes, padding, children,
    sources (their places in the embedded list)]. A "… more" node's sources stay out of the page:
    embedding them would undo the cap."""
    sources = [] if node.kind == "more" else [embedded.setdefault(i, len(embedded)) for i in node.sources]
    return [
        node.name,
        0 if node.search == node.name else node.search,
        node.kind,
        node.bytes,
        node.padding_bytes,
        [_node_data(child, embedded) for child in node.children],
        sources,
    ]


def _source_label(source: PeakSource) -> str:
    if source.kind == "argument":
        return source.input or "argument"
    if source.kind == "constant":
        return "constants"
    where = source.line or "no source"
    return f"{where} → {source.output}" if source.output else where


def _source_data(source: PeakSource) -> list[Any]:
    """[label, kind, buffers (bytes, kind, instruction, shape, padding; the largest), how many more,
    their bytes]."""
    shown = source.buffers[:MAX_BUFFERS]
    rest = source.buffers[MAX_BUFFERS:]
    return [
        _source_label(source),
        source.kind,
        [[b.bytes, b.kind, b.instruction or "", b.shape or "", b.padding_bytes] for b in shown],
        len(rest),
        sum(b.bytes for b in rest),
    ]


def flame_data(result: TargetResult) -> dict[str, Any] | None:
    """What the page's script draws for one target: each variant's tree and sources on one byte scale
    (the larger peak); None when no variant has a breakdown."""
    variants = []
    for name in _VARIANTS:
        variant = result.variants.get(name)
        if variant is None or variant.peak is None:
            continue
        tree = peak_tree(variant.peak)
        embedded: dict[int, int] = {}  # a source's index in the breakdown -> its place in the page's list
        root = _node_data(tree, embedded)
        variants.append(
            {
                "variant": name,
                "label": _VARIANT_LABEL[name],
                "peak": variant.peak.bytes,
                "root": root,
                "sources": [_source_data(variant.peak.sources[i]) for i in embedded],
                "capped": sum(1 for node in tree.walk() if node.kind == "more"),
                "buffers_capped": sum(1 for i in embedded if len(variant.peak.sources[i].buffers) > MAX_BUFFERS),
            }
        )
    if not variants:
        return None
    scale = max(max(variant.peak.bytes for variant in result.variants.values() if variant.peak is not None), 1)
    return {"scale": scale, "variants": variants}


def script_json(data: object) -> str:
    """``data`` as JSON that may stand inside a ``<script>`` block: no ``<``, ``>`` or ``&`` in it (each
    written as its JSON escape), so nothing in a string can end the block or open a comment."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# ----------------------------------------------------------------------------
# Its look and its script (added to the page's own).

FLAME_CSS = asset("flame.css")

# Draws each section.flame's icicles from its JSON block, and adds the search box and the click
# panel. Every string of the user's goes in by textContent.
FLAME_JS = asset("flame.js")
