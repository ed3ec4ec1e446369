"""fieldmem.xla.buffers: decoding XLA's buffer assignment, live ranges, the live peak.

Golden tests decode bytes stored in tests/golden_buffers (written by its
regenerate.py) without compiling. Compile tests (marked ``compile``) check the
live ranges and the live peak (per allocation, the union of the live slices'
byte ranges) against XLA's own dumps.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from pathlib import Path

import pytest

from fieldmem.xla.buffers import (
    BufferAssignmentError,
    LiveAnalysis,
    LiveRange,
    Slice,
    ValueInfo,
    analyze_liveness,
    decode_buffer_assignment,
    decode_instruction_ids,
    liveness,
)
from fieldmem.xla.hlo import parse_hlo_module

GOLDEN = Path(__file__).parents[1] / "golden_buffers"
CASES = ("straight", "sparse_plain", "sparse_donated", "scan", "while", "several")


def golden(name: str) -> tuple[bytes, bytes, str, dict[str, int]]:
    return (
        (GOLDEN / f"{name}.buffer_assignment.pb").read_bytes(),
        (GOLDEN / f"{name}.hlo_module.pb").read_bytes(),
        (GOLDEN / f"{name}.hlo.txt").read_text(),
        json.loads((GOLDEN / f"{name}.memory.json").read_text()),
    )


def live_analysis(buffer_assignment: bytes, module_proto: bytes, hlo_text: str) -> LiveAnalysis:
    """The product's path (fieldmem.findings.liveness): decode, parse, analyse."""
    return analyze_liveness(decode_buffer_assignment(buffer_assignment, module_proto), parse_hlo_module(hlo_text))


def compiled_analysis(compiled) -> LiveAnalysis:
    module = compiled.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()
    return live_analysis(compiled.memory_analysis().serialized_buffer_assignment_proto, module, compiled.as_text())


def golden_analysis(name: str) -> LiveAnalysis:
    data, module, text, _ = golden(name)
    return live_analysis(data, module, text)


def footprint(memory: dict[str, int]) -> int:
    return memory["argument_bytes"] + memory["output_bytes"] + memory["temp_bytes"] - memory["alias_bytes"]


# ----------------------------------------------------------------------------
# Decoding golden bytes (no compile)


def test_decode_sparse_plain_exactly() -> None:
    data, module, _, _ = golden("sparse_plain")
    assignment = decode_buffer_assignment(data, module)
    names = {b.id: (b.instruction, b.shape_index, b.size) for b in assignment.logical_buffers}
    assert names[30] == ("u.1", (), 8192)
    assert names[31] == ("copy.1", (), 8192)
    assert names[38] == ("select_dynamic-update-slice_fusion", (), 8192)
    assert names[34] == ("row.1", (), 128)
    assert {b.computation for b in assignment.logical_buffers if b.id >= 30} == {"main.2"}
    by_index = {a.index: a for a in assignment.allocations}
    out = by_index[0]
    assert (out.size, out.maybe_live_out, out.is_entry_computation_parameter) == (8192, True, False)
    assert {(x.logical_buffer_id, x.offset, x.size) for x in out.assigned} == {(31, 0, 8192), (38, 0, 8192)}
    assert out.kind == "output"
    u = by_index[1]
    assert (u.is_entry_computation_parameter, u.parameter_number, u.maybe_live_out) == (True, 0, False)
    assert u.kind == "parameter"
    assert by_index[3].is_constant and by_index[3].kind == "constant"
    assert by_index[5].is_thread_local and by_index[5].kind == "thread_local"
    temp = by_index[8]
    assert temp.size == 129 and temp.kind == "temporary"
    assert {(x.logical_buffer_id, x.offset, x.size) for x in temp.assigned} == {(33, 64, 4), (36, 0, 8), (37, 128, 1)}
    # the copy and the in-place update share one buffer: decoded when first read (the analysis reads none)
    assert "aliases" not in vars(assignment)
    assert {(a.source_buffer_id, a.instruction) for a in assignment.aliases} == {
        (31, "select_dynamic-update-slice_fusion"),
        (38, "copy.1"),
    }
    assert assignment.heap_traces == ()  # XLA:CPU records none


def test_decode_sparse_donated_aliases_parameter() -> None:
    data, module, _, _ = golden("sparse_donated")
    assignment = decode_buffer_assignment(data, module)
    (param,) = [a for a in assignment.allocations if a.parameter_number == 0 and a.is_entry_computation_parameter]
    assert param.maybe_live_out and param.kind == "aliased" and param.size == 8192
    by_id = {b.id: b for b in assignment.logical_buffers}
    held = {by_id[x.logical_buffer_id].instruction for x in param.assigned}
    assert held == {"u.1", "select_dynamic-update-slice_fusion"}
    assert not any(b.instruction and b.instruction.startswith("copy") for b in assignment.logical_buffers)


@pytest.mark.parametrize("name", CASES)
def test_every_buffer_is_named_and_placed(name: str) -> None:
    data, module, text, _ = golden(name)
    assignment = decode_buffer_assignment(data, module)
    hlo = parse_hlo_module(text)
    instructions = {(c.name, i.name) for c in hlo.computations for i in c.instructions}
    placement = assignment.placement()
    for buffer in assignment.logical_buffers:
        assert (buffer.computation, buffer.instruction) in instructions
        allocation, assigned = placement[buffer.id]
        assert assigned.offset + assigned.size <= allocation.size


def test_instruction_ids_decode() -> None:
    _, module, _, _ = golden("while")
    ids = decode_instruction_ids(module)
    assert ("main.3", "while.5") in ids.values()
    # XLA unique ids: computation id in the high 32 bits
    assert all(i >> 32 > 0 for i in ids)


def test_unknown_and_missing_fields_are_tolerated() -> None:
    data, module, _, _ = golden("straight")
    # an unknown field 99 (varint 7) appended, as a newer XLA might write
    extra = data + bytes([0x98, 0x06, 0x07])
    assert decode_buffer_assignment(extra, module) == decode_buffer_assignment(data, module)
    empty = decode_buffer_assignment(b"")
    assert empty.logical_buffers == () and empty.allocations == ()
    # without the module proto, ids are kept and names are unknown
    unnamed = decode_buffer_assignment(data)
    assert all(b.instruction is None for b in unnamed.logical_buffers)
    with pytest.raises(BufferAssignmentError, match="names no instructions"):
        analyze_liveness(unnamed, parse_hlo_module(golden("straight")[2]))


def test_garbage_is_an_error() -> None:
    with pytest.raises(BufferAssignmentError):
        decode_buffer_assignment(b"\xff\xff\xff\xff")
    with pytest.raises(BufferAssignmentError):
        decode_instruction_ids(b"\x0a\xff")


@pytest.mark.parametrize("name", CASES)
def test_goldens_hold_no_machine_specific_path(name: str) -> None:
    # regenerate.py records source files relative to the repository root, in the
    # text and in the module proto alike
    _, module, text, _ = golden(name)
    files = re.findall(r'^\d+ "(.*)"$', text.split("FunctionNames")[0], re.MULTILINE)
    assert files == ["tests/golden_buffers/regenerate.py"]
    for body in (text.encode(), module):
        assert b"/home/" not in body and b"/work/" not in body and b"/tmp/" not in body


# exact figures of the stored compiles (jax 0.10.2, CPU); see the report table
EXPECTED = {
    # name: (live_peak_bytes, peak instruction, schedule length); the peaks include the
    # constant allocations (live from the start to the end): 8 B in the sparse updates
    # (two s32 indices), 16 in scan, 12 in while
    "straight": (16384, "ynn_fusion", 5),
    "sparse_plain": (16529 + 8, "and_reduce_fusion", 9),
    "sparse_donated": (8337 + 8, "and_reduce_fusion", 8),
    "scan": (12312 + 16, "copy.5", 26),
    "while": (8213 + 12, "wrapped_compare", 18),
    "several": (16412, "tuple.1", 6),
}


@pytest.mark.parametrize("name", CASES)
def test_golden_live_peak(name: str) -> None:
    analysis = golden_analysis(name)
    memory = golden(name)[3]
    peak, instruction, length = EXPECTED[name]
    assert analysis.live_peak_bytes == peak
    assert analysis.peak_point is not None and analysis.peak_point.instruction == instruction
    assert len(analysis.schedule) == length
    assert max(analysis.curve) == peak == sum(s.counted_bytes for s in analysis.live_at_peak)
    assert analysis.live_peak_bytes <= footprint(memory) + analysis.constant_bytes
    assert not analysis.unscheduled
    for t in range(len(analysis.schedule)):
        live = {r.value.slice for r in analysis.ranges if r.start <= t <= r.end}
        # the swept curve is the distinct slices live at each point
        assert analysis.curve[t] == sum(s.size for s in live)
        # live slices never partially overlap: distinct slices are disjoint bytes
        spans = sorted((s.allocation, s.offset, s.offset + s.size) for s in live)
        for (a1, _, e1), (a2, s2, _) in itertools.pairwise(spans):
            assert a1 != a2 or e1 <= s2


def test_golden_sparse_plain_copy_is_live_at_peak() -> None:
    plain, donated = golden_analysis("sparse_plain"), golden_analysis("sparse_donated")
    held = {v.instruction: s for s in plain.live_at_peak for v in s.values}
    copy = held["copy.1"]
    assert copy.bytes == 8192 and copy.kind == "output"
    assert copy.value.opcode == "copy" and copy.value.shape == "f32[64,32]{1,0}"
    assert copy.value.source is not None and copy.value.source_role == "user"
    assert copy.value.source.file.endswith("regenerate.py")
    assert held["u.1"].kind == "parameter"
    assert plain.live_peak_bytes - donated.live_peak_bytes == 8192
    assert {s.kind for s in donated.live_at_peak} >= {"aliased"}
    assert not any(v.opcode == "copy" for s in donated.live_at_peak for v in s.values)


def test_golden_while_body_points_fold_onto_the_while() -> None:
    analysis = golden_analysis("while")
    inside = [p for p in analysis.schedule if p.computation != "main.3"]
    assert inside and {p.entry_instruction for p in inside} == {"while.5"}
    # the body's points sit just before the while: the entry instructions, runs folded,
    # are the entry computation in order
    runs = [p.entry_instruction for p in analysis.schedule]
    folded = [name for i, name in enumerate(runs) if i == 0 or runs[i - 1] != name]
    assert folded == [i.name for i in parse_hlo_module(golden("while")[2]).entry.instructions]


def test_golden_ranges() -> None:
    analysis = golden_analysis("sparse_plain")
    ranges = {r.value.instruction: (r.start, r.end) for r in analysis.ranges}
    assert ranges == {
        "u.1": (0, 8),
        "idx.1": (0, 8),
        "row.1": (0, 8),
        "copy.1": (4, 8),
        "add_select_fusion": (5, 8),
        "bitcast_concatenate_fusion": (6, 7),
        "and_reduce_fusion": (7, 8),
        "select_dynamic-update-slice_fusion": (8, 8),
        "constant.20": (0, 8),  # a constant is held by the executable throughout
    }


# ----------------------------------------------------------------------------
# Against XLA's own dumps (compiles)

_ALLOCATION = re.compile(r"^allocation (\d+): size (\d+)(.*):$")
_VALUE = re.compile(r"^ value: <(\d+) ([^\s{>]+)(\{[\d,]*\})?(?: \(phi\))? @\d+> \(size=(\d+),offset=(\d+)\)")
_RANGE = re.compile(r"^\s+([^\s{]+)(\{[\d,]*\}):(\d+)-(\d+)$")
_SEQUENCE = re.compile(r"^\s+(\d+):(\S+)$")


def _index(text: str | None) -> tuple[int, ...]:
    text = (text or "{}").strip("{}")
    return tuple(int(x) for x in text.split(",") if x)


def parse_dumps(folder: Path) -> tuple[dict, dict, list[str], int]:
    """XLA's *-buffer-assignment.txt and *-live-range.txt, read as far as the test needs.

    Returns (values: id -> (name, index, Slice, counts_as_memory, is_constant),
    ranges: (name, index) -> (start, end), sequence, max time).
    """
    (assignment_file,) = folder.glob("*after_optimizations-buffer-assignment.txt")
    (range_file,) = folder.glob("*after_optimizations-live-range.txt")
    values: dict[int, tuple[str, tuple[int, ...], Slice, bool, bool]] = {}
    allocation, memory, constant = -1, True, False
    for line in assignment_file.read_text().splitlines():
        found = _ALLOCATION.match(line)
        if found:
            allocation = int(found.group(1))
            flags = found.group(3)
            memory = "thread-local" not in flags
            constant = "constant" in flags
            continue
        found = _VALUE.match(line)
        if found:
            values[int(found.group(1))] = (
                found.group(2),
                _index(found.group(3)),
                Slice(allocation, int(found.group(5)), int(found.group(4))),
                memory,
                constant,
            )
    ranges: dict[tuple[str, tuple[int, ...]], tuple[int, int]] = {}
    sequence: list[str] = []
    section, last = "", 0
    for line in range_file.read_text().splitlines():
        if line.startswith("HloLiveRange"):
            last = int(re.search(r"max (\d+)", line).group(1))
        stripped = line.strip()
        if stripped.endswith(":") and not stripped[0].isdigit():
            section = stripped
            continue
        if section == "InstructionSequence:" and (m := _SEQUENCE.match(line)):
            sequence.append(m.group(2))
        elif section == "BufferLiveRange:" and (m := _RANGE.match(line)):
            ranges[(m.group(1), _index(m.group(2)))] = (int(m.group(3)), int(m.group(4)))
    return values, ranges, sequence, last


def xla_union_peak(values: dict, ranges: dict, last: int) -> int:
    """The peak implied by XLA's dumps: per allocation, the union of the live slices'
    byte ranges (thread-local left out; a constant is live throughout: the executable holds it)."""
    best = 0
    for t in range(last + 1):
        live = {
            s
            for name, index, s, memory, constant in values.values()
            if memory
            and (constant or ((name, index) in ranges and ranges[(name, index)][0] <= t <= ranges[(name, index)][1]))
        }
        covered = set()
        for s in live:
            covered |= {(s.allocation, b) for b in range(s.offset, s.offset + s.size)}
        best = max(best, len(covered))
    return best


def _value(value_id: int, allocation: int, offset: int, size: int) -> ValueInfo:
    return ValueInfo(
        id=value_id,
        instruction=f"v{value_id}",
        computation="main",
        opcode="fusion",
        shape_index=(),
        shape=None,
        bytes=size,
        slice=Slice(allocation, offset, size),
        kind="temporary",
        source=None,
    )


def test_overlapping_slices_count_once() -> None:
    # allocation 0: a 4096 B slice live 0-3, a 1024 B slice at offset 0 (inside it) live 1-2,
    # a 1024 B slice at 3584 (half outside: 512 B new) live 2-4; allocation 1: 100 B live 2
    ranges = [
        LiveRange(_value(1, 0, 0, 4096), 0, 3),
        LiveRange(_value(2, 0, 0, 1024), 1, 2),
        LiveRange(_value(3, 0, 3584, 1024), 2, 4),
        LiveRange(_value(4, 1, 0, 100), 2, 2),
    ]
    assert liveness._curve(ranges, 6) == [4096, 4096, 4096 + 512 + 100, 4096 + 512, 1024, 0]
    slices = liveness._live_slices(ranges, 2)
    assert [(s.slice.size, s.shared_bytes) for s in slices] == [(4096, 0), (1024, 1024), (1024, 512), (100, 0)]
    assert sum(s.counted_bytes for s in slices) == 4096 + 512 + 100


@pytest.fixture(scope="module")
def regenerate():
    sys.path.insert(0, str(GOLDEN))
    try:
        import regenerate as module
    finally:
        sys.path.remove(str(GOLDEN))
    return module


@pytest.mark.compile
@pytest.mark.parametrize("name", CASES)
def test_against_xla_dumps(name: str, regenerate, tmp_path: Path) -> None:
    fn, args, donate = regenerate.cases()[name]
    compiled = regenerate.compile_case(fn, args, donate, {"xla_dump_to": str(tmp_path), "xla_dump_hlo_as_text": True})
    memory = compiled.memory_analysis()
    analysis = compiled_analysis(compiled)
    values, ranges, sequence, last = parse_dumps(tmp_path)

    # same ids, same instructions, same slices as XLA's own listing
    mine = {v.id: v for v in analysis.values}
    assert set(mine) == set(values)
    for value_id, (dump_name, index, dump_slice, _, _) in values.items():
        assert (mine[value_id].instruction, mine[value_id].shape_index, mine[value_id].slice) == (
            dump_name,
            index,
            dump_slice,
        )
    # same flattened schedule
    assert [p.instruction for p in analysis.schedule] == sequence
    assert last == len(sequence)  # XLA's "end of program" is one past the last point

    # same live ranges (XLA's end-of-program time is our last point)
    for live in analysis.ranges:
        key = (live.value.instruction, live.value.shape_index)
        if live.value.kind == "constant":
            assert (live.start, live.end) == (0, last - 1)  # held by the executable, before and after
            continue
        start, end = ranges[key]
        assert (live.start, live.end) == (start, min(end, last - 1)), key

    # the same peak: per allocation, the union of the live slices' byte ranges
    assert analysis.live_peak_bytes == xla_union_peak(values, ranges, last)
    # XLA's own "peak usage" adds up values (constants included), so it can only be
    # higher: in the plain sparse update it counts the copy and the update written
    # into the same slice twice (an understood difference, not a disagreement)
    (range_file,) = tmp_path.glob("*after_optimizations-live-range.txt")
    total = re.search(r"peak usage: ([\d ]+) bytes", range_file.read_text())
    assert total is not None
    xla_sum = int(total.group(1).replace(" ", ""))
    # (XLA's sum counts a constant only over its own range; fieldmem holds it throughout)
    assert xla_sum + analysis.constant_bytes >= analysis.live_peak_bytes
    if name == "sparse_plain":
        assert xla_sum > analysis.live_peak_bytes  # 24,713 vs 16,529 B on jax 0.10.2
    fp = (
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        + memory.temp_size_in_bytes
        - memory.alias_size_in_bytes
    )
    assert analysis.live_peak_bytes <= fp + analysis.constant_bytes


@pytest.mark.compile
def test_sparse_update_donation_lowers_the_peak_by_u(regenerate) -> None:
    fn, args, _ = regenerate.cases()["sparse_plain"]
    results = {}
    for donate in ((), (0,)):
        results[donate] = compiled_analysis(regenerate.compile_case(fn, args, donate))
    plain, donated = results[()], results[(0,)]
    copies = [v for s in plain.live_at_peak for v in s.values if v.opcode == "copy"]
    assert copies and copies[0].bytes == args[0].nbytes
    assert plain.live_peak_bytes - donated.live_peak_bytes == args[0].nbytes


def _length_delimited(number: int, data: bytes) -> bytes:
    from google.protobuf.internal.encoder import _VarintBytes

    return _VarintBytes((number << 3) | 2) + _VarintBytes(len(data)) + data


def test_a_dumped_hlo_proto_splits_into_the_assignment_and_module_a_local_compile_gives() -> None:
    """A deviceless compile's ``*after_optimizations.hlo.pb`` is an HloProto: module as field 1, buffer
    assignment as field 3; both come out byte for byte, and an unknown field is skipped."""
    from fieldmem.xla.buffers import BufferAssignmentError, split_hlo_proto

    folder = Path(__file__).parents[1] / "golden_buffers"
    assignment = (folder / "gpu_h100_sparse_add_plain.buffer_assignment.pb").read_bytes()
    module = (folder / "gpu_h100_sparse_add_plain.hlo_module.pb").read_bytes()
    dumped = _length_delimited(1, module) + _length_delimited(7, b"newer") + _length_delimited(3, assignment)
    assert split_hlo_proto(dumped) == (assignment, module)
    assert split_hlo_proto(_length_delimited(1, module)) == (None, module)
    with pytest.raises(BufferAssignmentError, match="dumped HloProto"):
        split_hlo_proto(b"\xff\xff\xff")
