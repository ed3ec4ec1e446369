"""Byte sizes: parsing ``"64MiB"`` and formatting ``1.5 KiB``. Pure Python, no jax."""

from __future__ import annotations

import re
from decimal import Decimal

from fieldmem.model.errors import OptionError

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
        return _bounded(text, label)
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS:
        hint = " (a size is 0 or more bytes)" if text.strip().startswith("-") else ""
        raise OptionError(f"{label} is not understood{hint}: write e.g. 64MiB, 512KiB, 2GB or 1048576")
    return _bounded(int(Decimal(match.group(1)) * _UNITS[unit]), label)


LARGEST = 2**63  # no buffer, device or report holds this many bytes (XLA's sizes are 64-bit signed)


def _bounded(value: int, label: str) -> int:
    """``value``, refused when it is no size a device could have: a budget or a threshold that large
    would silently turn its check off."""
    if value >= LARGEST:
        raise OptionError(f"{label} is more than any device holds: a size is below 8 EiB (2**63 bytes)")
    return value


def format_bytes(value: int | None) -> str:
    """Human size in binary units: 1536 -> '1.5 KiB'; None -> 'n/a'.

    Any integer is formatted, however large (a size read from a hand-edited
    baseline): exact integer arithmetic, no float to overflow.
    """
    if value is None:
        return "n/a"
    sign = "-" if value < 0 else ""
    size = abs(int(value))
    if size < 1024:
        return f"{sign}{size} B"
    power = next((p for p in (1, 2, 3) if size < 1024 ** (p + 1)), 4)
    unit = ("KiB", "MiB", "GiB", "TiB")[power - 1]
    scale = 1024**power
    tenths = (size * 10 + scale // 2) // scale  # rounded to the nearest tenth, as f"{x:.1f}" does
    if tenths >= 10**18:  # no one reads a 19-digit size: its order of magnitude says it all
        return f"{sign}about 10^{len(str(tenths // 10)) - 1} {unit}" if tenths < 10**4000 else f"{sign}over 10^4000 TiB"
    return f"{sign}{tenths // 10}.{tenths % 10} {unit}"
