"""Terminal layout pieces: lines with a hanging indent, and tables that stay readable when narrow.

Every terminal section (headers, targets, suggestions, chains, the baseline
summary, ``fieldmem compare``) formats its lines with these, so a line that
wraps continues under its own text, never at the left margin: :func:`hanging`
after a bullet or a label, :func:`wrapped` (a heading, a table cell) two
columns in. A table too wide for the terminal becomes records (one line of
short fields, the long ones on an indented line below) rather than a grid
whose every cell folds. Each piece lays out what it is given and decides
nothing about a report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

__all__ = ["Column", "fitted_table", "hanging", "natural_width", "wrapped"]


def hanging(prefix: str, text: str | Text, style: str = "", indent: int = 2) -> Table:
    """``prefix`` then ``text``, indented by ``indent``; wrapped lines continue under the text.

    A borderless two-column grid: the indent and the prefix (a bullet, a mark,
    a label) never wrap; the text wraps at words and folds a word longer than
    its column.
    """
    grid = Table.grid(padding=0, pad_edge=False)
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    body = text if isinstance(text, Text) else Text(text, style=style)
    grid.add_row(Text(" " * indent + prefix, style=style), body)
    return grid


def wrapped(text: str | Text, style: str = "", indent: int = 0, hang: int = 2) -> RenderableType:
    """``text`` from column ``indent``; each line it wraps to continues ``hang`` columns further in.

    For a line with no bullet or label to hang from (a report's header, a target's heading, a table
    cell): its first line keeps the whole width, the next ones read as its continuation. A word longer
    than a line is folded; each line break in ``text`` starts a new first line.
    """
    return _Wrapped(text if isinstance(text, Text) else Text(text, style=style), indent, hang)


@dataclass(frozen=True)
class _Wrapped:
    text: Text
    indent: int
    hang: int

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        for paragraph in self.text.split("\n", allow_blank=True):
            for n, line in enumerate(self._lines(console, paragraph, width)):
                yield Text(" " * (self.indent + (self.hang if n else 0))) + line

    def _lines(self, console: Console, paragraph: Text, width: int) -> list[Text]:
        """The paragraph's first line at ``width - indent``, the rest at ``width - indent - hang``."""
        first_width = max(width - self.indent, 1)
        first = paragraph.wrap(console, first_width, overflow="fold")[0] if paragraph.plain else paragraph
        rest = paragraph[len(first.plain) :]
        rest = rest[len(rest.plain) - len(rest.plain.lstrip(" ")) :]  # the blanks the break falls on
        lines = [first]
        if rest.plain:
            lines += rest.wrap(console, max(first_width - self.hang, 1), overflow="fold")
        for line in lines:
            line.rstrip()
        return lines

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        lines = self.text.plain.split("\n")
        longest_word = max((cell_len(word) for line in lines for word in line.split()), default=0)
        longest_line = max(cell_len(line) for line in lines)
        return Measurement(self.indent + self.hang + longest_word, self.indent + longest_line).clamp(
            max_width=options.max_width
        )


@dataclass(frozen=True)
class Column:
    """A column of :func:`fitted_table`.

    ``below`` is the label the column's value gets when the table does not fit
    and the value moves to the record's second line (``""``: no label); None
    keeps the column on the record's first line. ``records`` False leaves the
    column out of the records form (its value is already in another column).
    """

    header: str
    justify: str = "left"
    below: str | None = None
    records: bool = True


def natural_width(renderable: RenderableType) -> int:
    """The width ``renderable`` takes when nothing constrains it (nothing folded or wrapped)."""
    console = Console(width=100_000, color_system=None, markup=False, emoji=False)  # as text_console reads text
    return Measurement.get(console, console.options, renderable).maximum


def fitted_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str | Text]],
    width: int,
    title: str | None = None,
) -> RenderableType:
    """A table when it fits ``width`` at its natural width, else one record per row.

    The table form folds nothing (every cell at its natural width). A record
    is its first-line columns padded to a common width (so records align like
    a table's rows), then its ``below`` values on one line indented under it,
    ``label value`` joined by ``·``, wrapping with a hanging indent. Where the
    first line would still be wider than ``width``, its last columns move
    below too (labelled by their headers), as many as it takes.
    """
    table = Table(box=box.SIMPLE, title=title)
    for column in columns:
        table.add_column(column.header, justify=column.justify, no_wrap=True)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*row)
    if natural_width(table) <= width:
        return table
    return _records(columns, rows, title, width)


def _records(columns: Sequence[Column], rows: Sequence[Sequence[str | Text]], title: str | None, width: int) -> Group:
    kept = [(n, c) for n, c in enumerate(columns) if c.records]
    first = [(n, c) for n, c in kept if c.below is None]
    below = [(n, c) for n, c in kept if c.below is not None]

    def cell(value: str | Text) -> Text:
        return value.copy() if isinstance(value, Text) else Text(value)

    widths = {n: max([cell_len(c.header)] + [cell(row[n]).cell_len for row in rows]) for n, c in first}
    while len(first) > 1 and 2 + sum(widths[n] + 2 for n, _ in first) - 2 > width:
        n, c = first.pop()
        below.insert(0, (n, Column(c.header, c.justify, below=c.header)))

    def line(cells: list[Text]) -> Text:
        out = Text("  ")
        for k, ((n, c), text) in enumerate(zip(first, cells, strict=True)):
            text.align("right" if c.justify == "right" else "left", widths[n])
            out.append_text(text)
            if k < len(first) - 1:
                out.append("  ")
        out.rstrip()
        return out

    items: list[RenderableType] = [Text("")]
    if title:
        items.append(wrapped(title, style="italic", indent=2))
    # a first line still too wide (one column wider than the terminal) wraps under itself
    items.append(wrapped(line([Text(c.header, style="bold") for _, c in first]), hang=4))
    for row in rows:
        items.append(wrapped(line([cell(row[n]) for n, _ in first]), hang=4))
        parts = []
        for n, c in below:
            value = cell(row[n])
            if not value.plain:
                continue
            parts.append(Text(f"{c.below} ", style="dim") + value if c.below else value)
        if parts:
            items.append(hanging("", Text(" · ").join(parts), indent=6))
    return Group(*items)
