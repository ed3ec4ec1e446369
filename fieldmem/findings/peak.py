"""Where the live peak comes from: every byte live at it, grouped by the user's code.

The liveness analysis (:mod:`fieldmem.xla.buffers.liveness`) gives the distinct
allocation slices live at the peak, each with the bytes it adds to it and the
value that took it. Here each slice goes to one :class:`~fieldmem.model.memory.PeakSource`:

- an argument's buffer (a parameter, or a donated input's buffer that already
  holds what was written into it) by the argument's pytree path;
- a value the program computes by the Python stack of the operation that made it
  (the HLO metadata's stack frames: the user's outermost frame first, library
  frames under the user's line kept), and by the result leaf it is when the
  program returns it; a value XLA kept no metadata for takes its readers' line,
  a fusion its fused operations' (see the liveness module);
- the executable's constants, together.

:class:`~fieldmem.model.memory.PeakLine` adds them up by the user's own line (an
argument by its path): what ``--top`` lists and a change of peak is worded by.
Both add up to the live peak exactly, since each slice is counted once, with
the bytes it shares with a slice counted before it left out.

Pure: records in, records out; no jax.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping
from typing import cast

from fieldmem.model.libraries import is_library_file
from fieldmem.model.memory import PeakBreakdown, PeakBuffer, PeakLine, PeakSource, StackFrame
from fieldmem.model.word_sets import LiveBufferKind, PeakSourceKind
from fieldmem.request.definitions import display_path
from fieldmem.xla import buffers, hlo

__all__ = ["peak_breakdown", "user_stack"]

_TILES = re.compile(r"(?<=[:)])T(\([0-9,]*\))+")  # a layout's tiling: T(8,128)(2,1)


def _element_bytes(shape: str | None) -> int | None:
    """The bytes of an array shape's elements, without the padding a tiled layout adds."""
    if not shape or shape.startswith("("):
        return None
    try:
        return hlo.shape_bytes(_TILES.sub("", shape))
    except hlo.HloParseError:
        return None


_FIELDMEM_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the fieldmem package


@functools.lru_cache(maxsize=8192)
def _is_fieldmem_file(file: str, cwd: str) -> bool:
    """A file of fieldmem's own package (here, or a worker's: the same package path from another root), a
    relative name read from ``cwd``; cached, since a peak's thousands of frames name a few files."""
    path = file.replace("\\", "/")
    return (
        os.path.normpath(os.path.join(cwd, file)).startswith(_FIELDMEM_FOLDER + os.sep) or "/fieldmem/driver/" in path
    )


def user_stack(
    location: hlo.SourceLocation, is_library: Callable[[str], bool] = is_library_file, cwd: str | None = None
) -> tuple[tuple[StackFrame, ...], str]:
    """The stack of ``location``, outermost first, and the user's line in it (``file:line``).

    The frames above the user's outermost one (whatever called fieldmem, fieldmem's
    own driver, the interpreter's) are left out; the library frames under the user's line (flax,
    optax) are kept, marked. When every frame is library code the whole stack is
    kept and its innermost frame is the line. ``cwd``: the working directory names are shown from (default:
    the process's).
    """
    cwd = os.getcwd() if cwd is None else cwd
    outermost_first = list(reversed(location.stack))
    # what called fieldmem (a script, a notebook cell, a test) is above fieldmem's own frames: not the
    # program's; the stack starts under the innermost frame of fieldmem's
    ours = [i for i, f in enumerate(outermost_first) if _is_fieldmem_file(f.file, cwd)]
    if ours:
        outermost_first = outermost_first[ours[-1] + 1 :] or outermost_first
    frames = [StackFrame(display_path(f.file, cwd), f.line, f.function, is_library(f.file)) for f in outermost_first]
    first_user = next((i for i, f in enumerate(frames) if not f.library), None)
    if first_user is None:
        innermost = frames[-1]
        return tuple(frames), f"{innermost.file}:{innermost.line}"
    frames = frames[first_user:]
    line = next(f for f in reversed(frames) if not f.library)
    return tuple(frames), f"{line.file}:{line.line}"


def peak_breakdown(
    live: buffers.LiveAnalysis,
    input_of_parameter: Callable[[int, tuple[int, ...]], str | None],
    output_path: Callable[[tuple[int, ...]], str | None],
    allocations: Mapping[int, buffers.Allocation],
    entry_parameters: Mapping[tuple[str, str], int],
    copied_sources: Mapping[str, str | None] | None = None,
    definition: str | None = None,
    memory_space: int = 0,
) -> PeakBreakdown:
    """Every byte live at the peak of ``live``, by source.

    ``entry_parameters``: (computation, instruction) -> parameter number of the
    entry computation's parameters; ``input_of_parameter(number, index)``: the argument leaf's path of an entry
    parameter (None when unknown); ``output_path(index)``: the result leaf's path
    at an index of the entry's result; ``copied_sources``: the line of each copy
    of an input fieldmem reports (a copy XLA kept no metadata for is placed there); ``definition``: the
    function's own line, where a result no operation of which has a line is placed (the index table of
    the tuple it returns); ``memory_space``: whose peak (0, the device's default memory, is the live
    peak; another, a TPU's VMEM say, at its own peak).
    """
    copied_sources = copied_sources or {}
    cwd = os.getcwd()
    groups: dict[tuple[object, ...], dict[str, object]] = {}
    if memory_space == 0:
        slices, peak, index = live.live_at_peak, live.live_peak_bytes, live.peak_index
    else:
        space = next(s for s in live.memory_spaces if s.memory_space == memory_space)
        slices, peak, index = space.live_at_peak, space.live_peak_bytes, space.peak_index
    for live_slice in slices:
        value = live_slice.value
        kind, line, stack, input_path, output = _classify(
            live_slice, value, live, input_of_parameter, output_path, allocations, entry_parameters, copied_sources, cwd
        )
        if kind == "output" and line is None:
            line = definition
        key = (kind, line if not stack else None, stack, input_path, output)
        group = groups.setdefault(
            key,
            {"kind": kind, "line": line, "stack": stack, "input": input_path, "output": output, "buffers": []},
        )
        elements = _element_bytes(value.shape)
        padding = max(0, live_slice.bytes - elements) if elements is not None else 0
        cast(list, group["buffers"]).append(
            PeakBuffer(
                bytes=live_slice.counted_bytes,
                kind=cast(LiveBufferKind, live_slice.kind),
                instruction=value.instruction,
                shape=value.shape,
                padding_bytes=padding,
            )
        )
    sources: list[PeakSource] = []
    for group in groups.values():
        members = sorted(cast(list, group["buffers"]), key=lambda b: (-b.bytes, b.instruction or ""))
        sources.append(
            PeakSource(
                kind=cast(PeakSourceKind, group["kind"]),
                bytes=sum(b.bytes for b in members),
                line=cast("str | None", group["line"]),
                stack=cast("tuple[StackFrame, ...]", group["stack"]),
                input=cast("str | None", group["input"]),
                output=cast("str | None", group["output"]),
                padding_bytes=sum(b.padding_bytes for b in members),
                buffers=tuple(members),
            )
        )
    sources.sort(key=lambda s: (-s.bytes, _label(s)))
    point = live.schedule[index] if index is not None and index < len(live.schedule) else None
    return PeakBreakdown(
        bytes=peak,
        memory_space=memory_space,
        sources=tuple(sources),
        lines=_lines(sources, peak),
        padding_bytes=sum(s.padding_bytes for s in sources),
        peak_instruction=point.instruction if point is not None else None,
    )


def _classify(
    live_slice: buffers.LiveSlice,
    value: buffers.ValueInfo,
    live: buffers.LiveAnalysis,
    input_of_parameter: Callable[[int, tuple[int, ...]], str | None],
    output_path: Callable[[tuple[int, ...]], str | None],
    allocations: Mapping[int, buffers.Allocation],
    entry_parameters: Mapping[tuple[str, str], int],
    copied_sources: Mapping[str, str | None],
    cwd: str,
) -> tuple[PeakSourceKind, str | None, tuple[StackFrame, ...], str | None, str | None]:
    """(kind, line, stack, input, output) of one live slice."""
    if live_slice.kind == "constant":
        return "constant", None, (), None, None
    number = entry_parameters.get((value.computation or "", value.instruction or ""))
    if value.opcode == "parameter" and number is not None:
        path = input_of_parameter(number, value.shape_index)
        return "argument", None, (), path or f"parameter {number}{_index(value.shape_index)}", None
    allocation = allocations.get(live_slice.slice.allocation)
    if allocation is not None and allocation.parameter_number is not None:
        # a donated input's buffer, after its last read holding the value written into it
        number, index = allocation.parameter_number, allocation.parameter_shape_index
        return "argument", None, (), input_of_parameter(number, index) or f"parameter {number}{_index(index)}", None
    returned = live.output_index.get(value.id)
    output = output_path(returned) if returned is not None else None
    kind: PeakSourceKind = "output" if returned is not None else "temporary"
    if value.source is not None:
        stack, line = user_stack(value.source, cwd=cwd)
        return kind, line, stack, None, output
    return kind, copied_sources.get(value.instruction or ""), (), None, output


def _index(index: tuple[int, ...]) -> str:
    return "{" + ",".join(map(str, index)) + "}" if index else ""


def _label(source: PeakSource) -> str:
    """What a source is called in a line of ``--top`` and in a change of peak."""
    if source.kind == "argument":
        return source.input or "argument"
    if source.kind == "constant":
        return "constants"
    if source.line:
        return source.line
    instruction = source.buffers[0].instruction if source.buffers else None
    return f"{instruction or 'a value'} (no source)"


def _lines(sources: list[PeakSource], peak: int) -> tuple[PeakLine, ...]:
    totals: dict[str, list[object]] = {}
    for source in sources:
        entry = totals.setdefault(_label(source), [source.kind, 0, 0, 0])
        entry[1] = cast(int, entry[1]) + source.bytes
        entry[2] = cast(int, entry[2]) + len(source.buffers)
        if source.bytes > cast(int, entry[3]):  # the kind of its largest source
            entry[0], entry[3] = source.kind, source.bytes
    lines = [
        PeakLine(
            label=label,
            kind=cast(PeakSourceKind, kind),
            bytes=cast(int, size),
            buffers=cast(int, count),
            share=round(cast(int, size) / peak, 4) if peak else 0.0,
        )
        for label, (kind, size, count, _) in totals.items()
    ]
    lines.sort(key=lambda line: (-line.bytes, line.label))
    return tuple(lines)
