"""Whether a program fits the device it is compiled for: the ``exceeds-device-memory`` findings and the
``expect-fits`` check (``--expect fits``).

The device's memory comes with the compiled variant (:attr:`~fieldmem.model.readings.CompiledVariant.device_memory`:
a deviceless kind's, or jax's allocator limit on a local GPU or TPU; None on XLA:CPU). What a program needs
per device is its footprint (argument + output + temp - alias + constants: what the executable holds at once,
the figure ``--max-peak`` budgets). Where XLA gives no footprint (it said its own calculation is wrong, so its
plan is not told), the arguments and outputs alone are what it needs at least: above the device's memory, it
does not fit; below, whether it fits is not known, and ``--expect fits`` fails. A compiler that refused the
program for not fitting (libtpu's RESOURCE_EXHAUSTED) is taken at its word.

This module never prints and never imports jax.
"""

from __future__ import annotations

from dataclasses import dataclass

from fieldmem.findings.verdict import expectation_met
from fieldmem.model.memory import MemoryFigures
from fieldmem.model.readings import CompiledVariant, DeviceMemory
from fieldmem.model.units import format_bytes
from fieldmem.model.verdict import Check, Finding, Verdict

__all__ = ["Need", "fit_check", "fit_findings", "need"]


@dataclass(frozen=True)
class Need:
    """What a program needs at once per device: ``bytes`` (None: not known, ``why``), exactly (its footprint)
    or ``at_least`` (its arguments and outputs alone, where XLA gives no footprint)."""

    bytes: int | None
    at_least: bool = False
    why: str | None = None

    def words(self) -> str:
        size = format_bytes(self.bytes)
        if self.at_least:
            return f"needs at least {size} per device (its arguments and outputs alone)"
        return f"needs {size} per device"


def need(memory: MemoryFigures) -> Need:
    """What the program with ``memory``'s figures needs per device (:class:`Need`)."""
    if memory.footprint_bytes is not None:
        return Need(memory.footprint_bytes)
    # the temporaries' reason says more than the footprint's ("needs XLA's temp figure") where it is one
    why = memory.unavailable.get("temp_bytes") or memory.unavailable.get("footprint_bytes") or "not given"
    parts = (memory.argument_bytes, memory.output_bytes, memory.alias_bytes)
    if any(p is None for p in parts):
        return Need(None, why=why)
    argument, output, alias = (int(p) for p in parts)  # type: ignore[arg-type]
    return Need(argument + output - alias, at_least=True, why=why)


def _exceeds(program: Need, capacity: DeviceMemory | None, refused: str | None) -> bool:
    if refused is not None:
        return True
    return capacity is not None and program.bytes is not None and program.bytes > capacity.bytes


def _words(program: Need, capacity: DeviceMemory | None, refused: str | None) -> str:
    said = [program.words()] if program.bytes is not None else []
    if capacity is not None:
        said.append(capacity.words())
    if refused is not None:
        said.append(f"the compiler refused it: {refused}")
    return "; ".join(said)


def fit_findings(
    plain: CompiledVariant, donated: CompiledVariant, plain_memory: MemoryFigures, donated_memory: MemoryFigures
) -> list[Finding]:
    """The ``exceeds-device-memory`` findings: an error when the donated program does not fit its device (the
    verdict is then does not fit), a note when only the plain one does not (donating makes it fit)."""
    capacity = donated.device_memory
    program = need(donated_memory)
    if _exceeds(program, capacity, donated.out_of_memory):
        return [
            Finding(
                "error",
                "exceeds-device-memory",
                _words(program, capacity, donated.out_of_memory),
                bytes=program.bytes,
            )
        ]
    without = need(plain_memory)
    if _exceeds(without, plain.device_memory, plain.out_of_memory):
        return [
            Finding(
                "info",
                "exceeds-device-memory",
                f"without donation it would not fit: {_words(without, plain.device_memory, plain.out_of_memory)}",
                bytes=without.bytes,
            )
        ]
    return []


def fit_check(verdict: Verdict, donated: CompiledVariant, memory: MemoryFigures) -> Check:
    """The ``expect-fits`` check on the donated variant, as :func:`~fieldmem.findings.verdict.expectation_met`
    decides it: passes only where the device's memory and what the program needs are both known and the
    verdict is not does not fit; anything not known fails it, never passes."""
    capacity = donated.device_memory
    program = need(memory)
    limit = capacity.bytes if capacity is not None else None
    known = capacity is not None and program.bytes is not None and not program.at_least
    if expectation_met(verdict.kind, "fits", known):
        assert capacity is not None
        return Check("expect-fits", True, f"fits: {program.words()}; {capacity.words()}", limit, program.bytes)
    if verdict.kind == "does-not-fit" or _exceeds(program, capacity, donated.out_of_memory):
        words = _words(program, capacity, donated.out_of_memory)
        message = f"expected to fit, but it does not: {words}"
    elif capacity is None:
        message = (
            "expected to fit, but this device's memory is not known (jax gives no memory limit for it): compile "
            "for a device kind without the device (--backend gpu:h100, tpu:v5e) or check on a GPU or TPU"
        )
    else:
        known_part = f"; {program.words()}" if program.bytes is not None else ""
        message = f"expected to fit, but what it needs is not known ({program.why}){known_part}; {capacity.words()}"
    return Check("expect-fits", False, message, limit, program.bytes)
