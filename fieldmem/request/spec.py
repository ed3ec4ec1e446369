"""Small option values parsed once from strings: donation, static args, shapes.

Pure Python, no jax: the CLI, the registration API and the config share these
parsers, and each rejects a bad value with a message listing what is allowed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fieldmem.model.errors import OptionError
from fieldmem.model.units import option_label

__all__ = [
    "DonateSpec",
    "StaticSpec",
    "parse_shapes",
]

_DONATE_MODES = ("auto", "all", "none")


def _items(text: str, option: str) -> tuple[int | str, ...]:
    items: list[int | str] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        if item.lstrip("-").isdigit():
            number = int(item)
            if number < 0:
                raise OptionError(f"{option_label(option, text)}: argument numbers start at 0, {number} is not one")
            items.append(number)
        elif item.isidentifier():
            items.append(item)
        else:
            raise OptionError(
                f"{option_label(option, text)}: {item!r} is neither an argument number nor an argument name "
                "(use e.g. 0,2 or params,opt_state)"
            )
    return tuple(items)


def _join(value: tuple | list, option: str) -> str:
    """A tuple/list of numbers and names as the comma-separated text the parsers read."""
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise OptionError(
                f"{option_label(option, value)}: {v!r} is neither an argument number nor an argument name "
                "(use e.g. (0, 2) or ('params', 'opt_state'))"
            )
    return ",".join(str(v) for v in value)


@dataclass(frozen=True)
class DonateSpec:
    """Which arguments the donated variant donates.

    ``auto`` (the default) is the target's own jit donation when it is a
    ``jax.jit`` object, else ``all``: every argument that holds arrays.
    """

    mode: str = "auto"  # auto | all | none | list
    items: tuple[int | str, ...] = ()

    @classmethod
    def parse(cls, value: str | int | tuple | list | DonateSpec | None, option: str = "--donate") -> DonateSpec:
        """Read ``"all"``, ``"none"``, ``"0,2"``, ``"params,opt_state"``, an int or a sequence.

        ``option`` names the setting in messages (``--donate`` or ``donate=``).

        Raises:
            OptionError: the value is none of these, or an argument number is negative.
        """
        if value is None:
            return cls()
        if isinstance(value, DonateSpec):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 0:
                raise OptionError(f"{option_label(option, value)}: argument numbers start at 0")
            return cls("list", (value,))
        if isinstance(value, (tuple, list)):
            joined = _join(value, option)
            return cls("list", _items(joined, option)) if joined else cls("none")
        if not isinstance(value, str):
            raise OptionError(
                f"{option_label(option, value)} is not understood: use 'all', 'none', argument numbers (0,2) "
                "or names (params,opt_state)"
            )
        text = value.strip()
        if text.lower() in _DONATE_MODES:
            return cls(text.lower())
        items = _items(text, option)
        if not items:
            raise OptionError(
                f"{option_label(option, value)} is empty: use one of {', '.join(_DONATE_MODES)}, "
                "argument numbers (0,2) or names (params,opt_state)"
            )
        return cls("list", items)

    def describe(self) -> str:
        return self.mode if self.mode != "list" else ",".join(str(i) for i in self.items)


@dataclass(frozen=True)
class StaticSpec:
    """Arguments to treat as static in addition to those holding no array."""

    items: tuple[int | str, ...] = ()

    @classmethod
    def parse(cls, value: str | int | tuple | list | StaticSpec | None, option: str = "--static") -> StaticSpec:
        """Read ``"2,3"``, ``"n_steps"``, an int or a sequence of numbers and names.

        Raises:
            OptionError: the value is none of these, or an argument number is negative.
        """
        if value is None:
            return cls()
        if isinstance(value, StaticSpec):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 0:
                raise OptionError(f"{option_label(option, value)}: argument numbers start at 0")
            return cls((value,))
        if isinstance(value, (tuple, list)):
            return cls(_items(_join(value, option), option))
        if not isinstance(value, str):
            raise OptionError(
                f"{option_label(option, value)} is not understood: use argument numbers or names, e.g. 2,3 or n_steps"
            )
        return cls(_items(value, option))


# ----------------------------------------------------------------------------
# Shapes

_DTYPES = {
    "f16": "float16",
    "bf16": "bfloat16",
    "f32": "float32",
    "f64": "float64",
    "s8": "int8",
    "s16": "int16",
    "s32": "int32",
    "s64": "int64",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
    "pred": "bool",
    "bool": "bool",
    "c64": "complex64",
    "c128": "complex128",
}
_NUMPY_NAMES = set(_DTYPES.values())
_SHAPE = re.compile(r"^([A-Za-z][A-Za-z0-9]*)\[((?:[0-9]+(?:,[0-9]+)*)?)\]$")


def parse_shapes(text: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """``"f32[4096,4096] f32[4096]"`` -> ``(("float32", (4096, 4096)), ("float32", (4096,)))``.

    Entries are separated by spaces or ``;``; spaces inside the brackets are
    allowed (``f32[2, 3]``). ``s32[]`` is a scalar.

    Raises:
        OptionError: an entry is not ``DTYPE[DIMS]`` or names an unknown dtype.
    """
    # glue "f32 [2, 3]" into "f32[2,3]" before splitting on spaces
    compact = re.sub(r"\s*([\[,])\s*", r"\1", text.replace(";", " "))
    compact = re.sub(r"\s+\]", "]", compact)
    entries = compact.split()
    if not entries:
        raise OptionError("--shapes is empty: give one array per argument, e.g. --shapes 'f32[4096,4096] f32[4096]'")
    result = []
    for entry in entries:
        match = _SHAPE.match(entry)
        if not match:
            raise OptionError(f"--shapes entry {entry!r} is not DTYPE[DIMS]: write e.g. f32[4096,4096], bf16[8], s32[]")
        dtype = match.group(1).lower()
        dtype = _DTYPES.get(dtype, dtype)
        if dtype not in _NUMPY_NAMES:
            raise OptionError(
                f"--shapes entry {entry!r} has unknown dtype {match.group(1)!r}; known: {', '.join(sorted(_DTYPES))}"
            )
        dims = tuple(int(d) for d in match.group(2).split(",")) if match.group(2) else ()
        result.append((dtype, dims))
    return tuple(result)
