"""Hand-built report records for the tests that need no compile: renderers, formats, compare, baselines, chains.

One place for the values every such record carries; a test passes only what
it is about (a figure, a copy's line, an error finding) and keyword
arguments replace any other field. The defaults describe one small update,
``model:step`` in ``model.py``, donating its argument ``u``. Nothing here
compiles or imports jax.
"""

from __future__ import annotations

import json
from typing import Any

from fieldmem.model.copies import Copy
from fieldmem.model.environment import DeviceInfo
from fieldmem.model.memory import MemoryFigures, Timeline
from fieldmem.model.report import Report
from fieldmem.model.target import ErrorInfo, InputInfo, OutputInfo, TargetResult, Variant
from fieldmem.model.verdict import Finding, Verdict
from fieldmem.model.word_sets import CopyKind

__all__ = [
    "KIB",
    "MIB",
    "make_copy",
    "make_error_result",
    "make_input",
    "make_memory",
    "make_output",
    "make_report",
    "make_result",
    "make_timeline",
    "make_variant",
    "without_timings",
]

KIB = 1024
MIB = 1024 * 1024


def make_report(results: tuple[TargetResult, ...], **overrides: Any) -> Report:
    """A cpu, one-device, jax 0.10.2 report of ``results``; keyword arguments replace any field."""
    fields: dict[str, Any] = dict(
        fieldmem_version="0.1.0",
        jax_version="0.10.2",
        jaxlib_version="0.10.2",
        backend="cpu",
        platform_version="cpu",
        devices=(DeviceInfo(id=0, platform="cpu", kind="cpu"),),
        results=results,
        min_bytes=1024,
    )
    fields.update(overrides)
    return Report(**fields)


def make_memory(argument: int = 0, output: int = 0, alias: int = 0, temp: int = 0, **figures: Any) -> MemoryFigures:
    """Figures related as a compile's are, unless a keyword (``live_peak_bytes=None``) sets one.

    ``peak_bytes`` = argument + output - alias, ``footprint_bytes`` = that +
    temp, ``live_peak_bytes`` = the footprint, ``generated_code_bytes`` 0.
    """
    fields: dict[str, Any] = dict(
        argument_bytes=argument,
        output_bytes=output,
        alias_bytes=alias,
        temp_bytes=temp,
        generated_code_bytes=0,
        peak_bytes=argument + output - alias,
        footprint_bytes=argument + output + temp - alias,
    )
    fields.update(figures)
    fields.setdefault("live_peak_bytes", fields["footprint_bytes"])
    return MemoryFigures(**fields)


def make_copy(
    nbytes: int = MIB,
    *,
    kind: CopyKind = "parameter",
    of: str | None = None,
    source: str | None = "model.py:14",
    trip_count: int | None = None,
    **fields: Any,
) -> Copy:
    """A copy of ``nbytes`` at ``source``; ``of`` is the input leaf (index 0) a parameter copy copies.

    A copy with a ``trip_count`` (a loop copy) also has its bytes per call.
    """
    values: dict[str, Any] = dict(
        bytes=nbytes,
        shape="f32[512,512]{1,0}",
        kind=kind,
        of_parameter=of,
        input_index=0 if of else None,
        computation="main.2",
        instruction="copy.1",
        source=source,
        source_role="copy" if source else None,
        trip_count=trip_count,
        bytes_per_call=nbytes * trip_count if trip_count else None,
    )
    values.update(fields)
    return Copy(**values)


def make_variant(name: str = "donated", memory: MemoryFigures | None = None, **fields: Any) -> Variant:
    """The ``plain`` or ``donated`` compile; the donated one donates ``u``.

    The default figures: 4 MiB in, 4 MiB out, and for the donated variant the
    output in the input's buffer (footprint 8 MiB plain, 4 MiB donated).
    """
    donated = name == "donated"
    values: dict[str, Any] = dict(
        name=name,
        donated_arguments=("u",) if donated else (),
        memory=memory or make_memory(4 * MIB, 4 * MIB, 4 * MIB if donated else 0),
    )
    values.update(fields)
    return Variant(**values)


def make_result(
    name: str = "model:step",
    *,
    plain: Variant | None = None,
    donated: Variant | None = None,
    findings: tuple[Finding, ...] = (),
    in_place: bool | None = None,
    summary: str | None = None,
    **fields: Any,
) -> TargetResult:
    """An ``ok`` result of ``model.py`` with both variants and a verdict.

    The verdict is in place unless a finding is an error (or ``in_place`` says
    otherwise); its summary is then the first error's message.
    """
    errors = [f for f in findings if f.severity == "error"]
    in_place = not errors if in_place is None else in_place
    if summary is None:
        summary = "in place with donation" if in_place else f"not in place: {errors[0].message if errors else 'u'}"
    values: dict[str, Any] = dict(
        target="model.py",
        name=name,
        status="ok",
        definition="model.py:10",
        variants={"plain": plain or make_variant("plain"), "donated": donated or make_variant("donated")},
        verdict=Verdict(in_place=in_place, summary=summary, findings=findings),
    )
    values.update(fields)
    return TargetResult(**values)


def make_error_result(
    name: str = "model:step", kind: str = "compile", message: str = "tracing failed", **fields: Any
) -> TargetResult:
    """A target that could not be checked: an ``error`` result with ``kind`` and ``message``."""
    values: dict[str, Any] = dict(target="model.py", name=name, status="error", error=ErrorInfo(kind, message))
    values.update(fields)
    return TargetResult(**values)


def make_input(path: str = "u", index: int = 0, **fields: Any) -> InputInfo:
    """A donated, used float32[32,32] input leaf (4 KiB)."""
    values: dict[str, Any] = dict(
        index=index, path=path, shape=(32, 32), dtype="float32", bytes=4 * KIB, donated=True, used=True
    )
    values.update(fields)
    return InputInfo(**values)


def make_output(path: str = "out", index: int = 0, **fields: Any) -> OutputInfo:
    """A float32[32,32] output leaf (4 KiB)."""
    values: dict[str, Any] = dict(index=index, path=path, shape=(32, 32), dtype="float32", bytes=4 * KIB)
    values.update(fields)
    return OutputInfo(**values)


def make_timeline(
    values: tuple[int, ...], positions: tuple[int, ...] | None = None, length: int | None = None, **fields: Any
) -> Timeline:
    """Live bytes ``values`` at ``positions`` (default: one per point) of a schedule of ``length`` points."""
    positions = positions if positions is not None else tuple(range(len(values)))
    return Timeline(length=length or len(values), positions=positions, live_bytes=values, **fields)


def without_timings(document: dict[str, Any]) -> dict[str, Any]:
    """A report document without what differs between two runs of the same check (times, date)."""
    document = json.loads(json.dumps(document))
    document.pop("created", None)
    for result in document["results"]:
        for variant in result.get("variants", {}).values():
            variant.pop("lower_seconds", None)
            variant.pop("compile_seconds", None)
    return document
