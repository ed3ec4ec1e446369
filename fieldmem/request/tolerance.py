"""How much a figure may grow against a baseline before it counts as a regression.

Tolerances are parsed once from text (``--tolerance``, ``tolerance =`` in
``[tool.fieldmem]``) into frozen objects; the baseline gate and ``fieldmem
compare`` only ask them :meth:`Tolerance.allows`. Pure Python, no jax.

The text is a comma-separated list of entries; each is ``NAME:ALLOWANCE`` or a
bare ``ALLOWANCE`` (the default for every figure not named). An allowance is a
percentage (``2%``), a size (``1MiB``, ``4096``), or both joined by ``+``
(``5%+1MiB``). Both parts **add up**: a figure whose baseline value is
``before`` may grow by ``floor(relative * before) + absolute`` bytes and stay
within the tolerance; one byte more is a regression. A percentage is at most
:data:`MAX_PERCENT` (a longer one is an error, not an overflow). The default is exact
(``0``): any growth is a regression. Shrinking is never a regression.

Names (:data:`FIGURES`, plus the group ``peak`` and ``copies``):

- ``live-peak`` — ``live_peak_bytes``, fieldmem's heap-simulated live peak;
- ``footprint`` — ``footprint_bytes``, argument + output + temp − alias;
- ``temp`` — ``temp_bytes``, XLA's temporary allocation;
- ``xla-peak`` — ``peak_bytes``, ``memory_analysis().peak_memory_in_bytes``;
- ``peak`` — a group: ``live-peak``, ``footprint`` and ``xla-peak`` at once;
- ``copies`` — a copy present in both runs may grow (per call) by this much.
  A copy that is new is always a regression, whatever the tolerance.

Examples: ``2%`` (every figure and copy 2%), ``peak:5%,temp:1MiB`` (the three
peaks 5%, temp 1 MiB, the rest exact), ``1%,copies:0`` (1% for figures, copies
exact), ``footprint:5%+64KiB``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from fieldmem.model.errors import OptionError
from fieldmem.model.units import parse_bytes

__all__ = ["COPIES", "FIGURES", "GROUPS", "MAX_PERCENT", "Tolerance", "Tolerances"]

# tolerance name -> MemoryFigures field; the figures a baseline comparison gates on
FIGURES: dict[str, str] = {
    "live-peak": "live_peak_bytes",
    "footprint": "footprint_bytes",
    "temp": "temp_bytes",
    "xla-peak": "peak_bytes",
}
# a name standing for several figures
GROUPS: dict[str, tuple[str, ...]] = {"peak": ("live-peak", "footprint", "xla-peak")}
# the name of the tolerance for a copy present in both runs (for_figure("copies"))
COPIES = "copies"

_NAMES = (*FIGURES, *GROUPS, COPIES)
MAX_PERCENT = 10**9  # the largest percentage a tolerance takes (a smaller one than 1e-300% is read as 0)
_FIELD_NAMES = {field: name for name, field in FIGURES.items()}
_PERCENT = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*%\s*$")
_EXAMPLES = "write e.g. 2%, 1MiB, 5%+1MiB or peak:5%,temp:1MiB"


@dataclass(frozen=True)
class Tolerance:
    """Growth allowed for one figure: ``relative`` of the before value plus ``absolute`` bytes."""

    relative: float = 0.0  # fraction of the before value (2% -> 0.02)
    absolute: int = 0  # bytes

    def allowance(self, before: int) -> int:
        """The bytes ``before`` may grow by: ``floor(relative * before) + absolute``.

        ``relative`` is read through its shortest decimal form, so ``2%`` of
        1000 is exactly 20 (not 20.000000000000004, nor 19 after flooring).
        """
        share = int(Decimal(repr(self.relative)) * max(before, 0))
        return share + self.absolute

    def allows(self, before: int, after: int) -> bool:
        """True when ``after`` is at most ``before`` plus the allowance (shrinking always is)."""
        return after - before <= self.allowance(before)

    def describe(self) -> str:
        """``2%``, ``1MiB``, ``5%+1MiB`` or ``0``: text :meth:`Tolerances.parse` reads back."""
        parts = []
        if self.relative:
            parts.append(f"{_number(Decimal(repr(self.relative)) * 100)}%")
        if self.absolute:
            parts.append(_size(self.absolute))
        return "+".join(parts) or "0"


@dataclass(frozen=True)
class Tolerances:
    """A default tolerance and per-name ones (names of :data:`FIGURES`, or ``copies``). ``given``: the user
    set them (``--tolerance``, ``tolerance`` in ``[tool.fieldmem]``, even ``0``); where they did not, a move
    of a figure or a copy below ``--min-bytes`` is no change (4 B of alignment is not a regression)."""

    default: Tolerance = Tolerance()
    figures: tuple[tuple[str, Tolerance], ...] = ()
    given: bool = field(default=False, compare=False)

    def counts(self, before: int, after: int, min_bytes: int) -> bool:
        """Whether a move from ``before`` to ``after`` is one at all: any move under tolerances the user set,
        else one of at least ``min_bytes`` (the tolerance then says whether it is beyond it)."""
        return self.given or abs(after - before) >= max(min_bytes, 1)

    def for_figure(self, field_name: str) -> Tolerance:
        """The tolerance of a MemoryFigures field (``live_peak_bytes``), or of ``copies``."""
        name = _FIELD_NAMES.get(field_name, field_name)
        for figure, tolerance in self.figures:
            if figure == name:
                return tolerance
        return self.default

    def describe(self) -> str:
        """``exact``, or the text that parses back to these tolerances (``2%,temp:1MiB``)."""
        if self.default == Tolerance() and not self.figures:
            return "exact"
        parts = [self.default.describe()] if self.default != Tolerance() else []
        parts += [f"{name}:{tolerance.describe()}" for name, tolerance in self.figures]
        return ",".join(parts)

    @classmethod
    def parse(cls, text: str, option: str = "--tolerance") -> Tolerances:
        """Read ``"2%"``, ``"1MiB"``, ``"5%+1MiB"``, ``"peak:5%,temp:1MiB"`` (see the module doc).

        Raises:
            OptionError: naming ``option`` and the piece that is wrong: an
                unknown name (with a did-you-mean), a bad allowance, a name or
                the default given twice, or an empty text.
        """
        if not isinstance(text, str):
            raise OptionError(f"{option} {text!r} is not understood: {_EXAMPLES}")
        entries = [entry.strip() for entry in text.split(",")]
        if not any(entries):
            raise OptionError(f"{option} {text!r} is empty: {_EXAMPLES} (0 means exact)")
        default: Tolerance | None = None
        figures: dict[str, Tolerance] = {}
        for entry in entries:
            if not entry:
                continue
            name, sep, value = entry.partition(":")
            if not sep:
                if default is not None:
                    raise OptionError(
                        f"{option} {text!r}: {entry!r} gives the default a second time: "
                        "name the figure it is for, e.g. temp:1MiB"
                    )
                default = _parse_allowance(entry, text, option)
                continue
            name = name.strip().lower()
            if name not in _NAMES:
                close = difflib.get_close_matches(name, _NAMES, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise OptionError(f"{option} {text!r}: {name!r} is not a figure: {hint}use one of {', '.join(_NAMES)}")
            tolerance = _parse_allowance(value.strip(), text, option)
            for figure in GROUPS.get(name, (name,)):
                if figure in figures:
                    raise OptionError(f"{option} {text!r}: {figure!r} is given more than once")
                figures[figure] = tolerance
        ordered = tuple((name, figures[name]) for name in (*FIGURES, COPIES) if name in figures)
        return cls(default=default or Tolerance(), figures=ordered, given=True)


def _parse_allowance(piece: str, text: str, option: str) -> Tolerance:
    """``2%``, ``1MiB``, ``5%+1MiB`` (at most one of each) -> Tolerance."""
    if not piece:
        raise OptionError(f"{option} {text!r}: a name without an allowance: {_EXAMPLES}")
    relative: Decimal | None = None
    absolute: int | None = None
    for term in piece.split("+"):
        match = _PERCENT.match(term)
        if match:
            if relative is not None:
                raise OptionError(f"{option} {text!r}: {piece!r} has two percentages: {_EXAMPLES}")
            try:
                relative = Decimal(match.group(1)) / 100
            except InvalidOperation:  # pragma: no cover - the pattern only lets numbers through
                raise OptionError(f"{option} {text!r}: {term!r} is not a percentage") from None
            if relative > MAX_PERCENT / 100:  # past what a float holds (400 digits): no allowance to compute
                raise OptionError(
                    f"{option} {text!r}: {term.strip()!r} is too large: a percentage is at most {MAX_PERCENT:,}%"
                )
            continue
        if absolute is not None:
            raise OptionError(f"{option} {text!r}: {piece!r} has two sizes: {_EXAMPLES}")
        try:
            absolute = parse_bytes(term.strip())
        except OptionError as exc:
            hint = " (a tolerance is 0 or more)" if term.strip().startswith("-") else ""
            if "below 8 EiB" in exc.message:
                raise OptionError(f"{option} {text!r}: {term.strip()!r} is too large: a size is below 8 EiB") from None
            raise OptionError(
                f"{option} {text!r}: {term.strip()!r} is neither a percentage nor a size{hint}: {_EXAMPLES}"
            ) from None
    return Tolerance(relative=float(relative or 0), absolute=absolute or 0)


def _number(value: Decimal) -> str:
    """``Decimal('2.00')`` -> ``2``, ``Decimal('0.50')`` -> ``0.5``."""
    text = format(value.normalize(), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _size(value: int) -> str:
    """Exact bytes in the largest binary unit that divides them: 1048576 -> ``1MiB``."""
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value % factor == 0:
            return f"{value // factor}{unit}"
    return str(value)
