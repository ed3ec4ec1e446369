"""The ``--suggest`` section of the terminal view: a Suggestion as rich text.

It formats what :class:`~fieldmem.model.advice.Suggestion` holds and decides
nothing. The table renderer calls :func:`suggestion_renderables` under each
target's verdict; the default view gives the code to write and one line per
argument, the verbose view adds every leaf and the measured figures.
"""

from __future__ import annotations

from rich.console import RenderableType

from fieldmem.model.advice import Suggestion
from fieldmem.model.memory import MEMORY_FIGURES
from fieldmem.model.units import format_bytes
from fieldmem.render.layout import Column, fitted_table, hanging

__all__ = ["named_code", "suggestion_renderables"]


def _target_name(target: str | None) -> str | None:
    """The Python name a ``module:name`` target was given (``adamw_step``), None for a module or a chain."""
    if not target or ":" not in target:
        return None
    name = target.rpartition(":")[2].strip()
    return name if name.isidentifier() else None


def named_code(code: str, target: str | None) -> str:
    """``code`` as the user writes it: ``adamw_step = jax.jit(step, ...)`` when the target's name is not
    the function's (a jit object or an alias named differently from the function it wraps)."""
    name = _target_name(target)
    head, sep, rest = code.partition("(")
    function = rest.split(",", 1)[0].split(")", 1)[0].strip()
    if name is None or not sep or not head.endswith("jit") or function == name:
        return code
    return f"{name} = {code}"


def suggestion_renderables(
    suggestion: Suggestion,
    verbose: bool = False,
    min_bytes: int = 0,
    width: int = 160,
    target: str | None = None,
) -> list[RenderableType]:
    """Lines (and, verbose, tables) showing ``suggestion``, indented like the verdict's findings.

    Without ``verbose``, arguments left undonated that are smaller than
    ``min_bytes`` (an index, a scalar) are counted instead of listed.
    ``target`` (the spec as given, ``module:adamw_step``) names the code the
    way the user's module names the target; ``width`` is the terminal's.
    """
    items: list[RenderableType] = [hanging("suggest: ", suggestion.summary, style="bold")]
    if suggestion.code is not None:
        items.append(hanging("", named_code(suggestion.code, target), style="green", indent=4))
        if suggestion.alternative_code is not None:
            items.append(hanging("or: ", named_code(suggestion.alternative_code, target), style="dim", indent=4))
    hidden = 0
    for argument in suggestion.arguments:
        if not verbose and not argument.donate and argument.bytes < min_bytes:
            hidden += 1
            continue
        mark, style = ("✓", "green") if argument.donate else ("✗", "dim")
        saved = ""
        if argument.donate and argument.marginal_bytes is not None:
            saved = f" saves {format_bytes(argument.marginal_bytes)} given the others"
        elif argument.donate:
            saved = f" lends {format_bytes(argument.saved_bytes)}"
        items.append(hanging(f"{mark} ", f"{argument.argument}{saved}: {argument.reason}", style=style, indent=4))
    if hidden:
        items.append(
            hanging(
                "… ",
                f"{hidden} argument(s) under {format_bytes(min_bytes)} not donated (use -v)",
                style="dim",
                indent=4,
            )
        )
    for note in suggestion.notes:
        items.append(hanging("note: ", note, style="dim", indent=4))
    if not verbose:
        return items
    tried = ", ".join(suggestion.tried) or "none"
    items.append(
        hanging(
            "verified by: ",
            f"{suggestion.verified_by}; compiles added: {suggestion.compiles} (tried: {tried})",
            style="dim",
            indent=4,
        )
    )
    items.append(
        fitted_table(
            [
                Column("argument", records=False),  # a leaf's name starts with its argument's
                Column("#", "right"),
                Column("leaf"),
                Column("bytes", "right"),
                Column("outcome"),
                Column("saved", "right"),
                Column("output", below="→"),
                Column("reason", below=""),
            ],
            [
                (
                    argument.argument,
                    str(leaf.input_index),
                    leaf.input,
                    format_bytes(leaf.bytes),
                    leaf.code,
                    format_bytes(leaf.saved_bytes),
                    leaf.output or "",
                    leaf.reason,
                )
                for argument in suggestion.arguments
                for leaf in argument.leaves
            ],
            width,
            title="suggestion per leaf (saved = buffer reused minus the copies donation adds)",
        )
    )
    if suggestion.memory is not None:
        memory = suggestion.memory
        items.append(
            fitted_table(
                [Column("figure"), Column("suggested", "right"), Column("saved vs plain", "right")],
                [
                    (name, format_bytes(getattr(memory, name)), format_bytes(suggestion.savings.get(name)))
                    for name in (
                        "footprint_bytes",
                        "live_peak_bytes",
                        *[m for m in MEMORY_FIGURES if m not in ("footprint_bytes", "live_peak_bytes")],
                    )
                ],
                width,
                title="suggested variant (measured)",
            )
        )
    return items
