"""Byte sizes: parsing ``"64MiB"`` and formatting ``1.5 KiB``. Pure Python, no jax."""

from __future__ import annotations

import re
from decimal import Decimal

from fieldmem.errors import OptionError

__all__ = ["format_bytes", "option_label", "parse_bytes"]


def option_label(option: str, value: object) -> str:
    """``--donate '0,x'`` for a command-line option, ``donate=(0, 'x')`` for an API argument."""
    return f"{option}{value!r}" if option.endswith("=") else f"{option} {value!r}"


_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
    "ti": 1024**4,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*$")


def parse_bytes(text: str | int, option: str | None = None) -> int:
    """``"64MiB"`` -> 67108864; ``"1.5GB"`` -> 1500000000; a bare number is bytes.

    ``option`` (``--max-peak``, ``max_peak=``) names the setting in messages.
    Fractions are exact (``"4.1MB"`` is 4100000) and rounded down to whole bytes.

    Raises:
        OptionError: the text is not a non-negative size with a known unit.
    """
    label = option_label(option, text) if option else f"size {text!r}"
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise OptionError(f"{label} is not understood: write e.g. 64MiB, 512KiB, 2GB or 1048576")
    if isinstance(text, int):
        if text < 0:
            raise OptionError(f"{label} is negative: a size is 0 or more bytes")
        return text
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS:
        hint = " (a size is 0 or more bytes)" if text.strip().startswith("-") else ""
        raise OptionError(f"{label} is not understood{hint}: write e.g. 64MiB, 512KiB, 2GB or 1048576")
    return int(Decimal(match.group(1)) * _UNITS[unit])


def format_bytes(value: int | None) -> str:
    """Human size in binary units: 1536 -> '1.5 KiB'; None -> 'n/a'."""
    if value is None:
        return "n/a"
    sign = "-" if value < 0 else ""
    size = float(abs(value))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            if unit == "B":
                return f"{sign}{int(size)} B"
            return f"{sign}{size:.1f} {unit}"
        size /= 1024
    return f"{sign}{size:.1f} TiB"  # pragma: no cover
