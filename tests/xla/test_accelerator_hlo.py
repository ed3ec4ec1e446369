"""Accelerator programs read right: TPU v5e and H100 compiles made without the device (issue 16, item 2).

Pure: reads the goldens of tests/golden_buffers/accelerators.py (``make golden``), compiles
nothing. Independent truth: XLA's own buffer assignment (the size and color of every
logical buffer), ``memory_analysis()`` (``*.memory.json``), and counts made from the text
with a few lines of regex here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fieldmem.findings import analysis
from fieldmem.model.readings import CompiledVariant, InputLeaf, OutputLeaf
from fieldmem.render import RenderOptions
from fieldmem.render import table as table_renderer
from fieldmem.xla import buffers, hlo
from tests.factories import make_report

GOLDEN_BUFFERS = Path(__file__).parents[1] / "golden_buffers"
GOLDEN = Path(__file__).parents[1] / "golden"
BACKENDS = ("tpu_v5e", "gpu_h100")
CASES = ("sparse_add", "stepper", "kv_write", "sgd")
VARIANTS = ("plain", "donated")
STEMS = [f"{b}_{c}_{v}" for b in BACKENDS for c in CASES for v in VARIANTS]
N = 256  # accelerators.N
KIB = 1024


def files(stem: str) -> tuple[str, bytes, bytes, dict[str, int]]:
    return (
        (GOLDEN_BUFFERS / f"{stem}.hlo.txt").read_text(),
        (GOLDEN_BUFFERS / f"{stem}.buffer_assignment.pb").read_bytes(),
        (GOLDEN_BUFFERS / f"{stem}.hlo_module.pb").read_bytes(),
        json.loads((GOLDEN_BUFFERS / f"{stem}.memory.json").read_text()),
    )


def decoded(stem: str) -> tuple[hlo.HloModule, buffers.BufferAssignment]:
    text, assignment, module, _ = files(stem)
    return hlo.parse_hlo_module(text), buffers.decode_buffer_assignment(assignment, module)


# ----------------------------------------------------------------------------
# Shapes: tiling padding and memory spaces


@pytest.mark.parametrize(
    ("shape", "size", "space"),
    [
        ("f32[1024,1024]{1,0:T(8,128)}", 4 * 1024 * 1024, 0),
        # 1022 rows pad to 1024 (a whole 8-row tile): XLA allocates 4 MiB, not 1022 x 4 KiB
        ("f32[1022,1024]{1,0:T(8,128)S(1)}", 4 * 1024 * 1024, 1),
        ("s32[]{:T(128)}", 128 * 4, 0),  # a scalar fills a 128-element tile
        ("u32[]{:S(2)}", 4, 2),
        ("f32[3,5]{1,0:T(8,128)}", 8 * 128 * 4, 0),
        ("f32[10,3]{0,1:T(8,128)}", 8 * 128 * 4, 0),  # column-major: 3 pads to 8, 10 to 128
        ("bf16[3,5]{1,0:T(8,128)(2,1)}", 8 * 128 * 2, 0),  # the (2,1) tile divides (8,128): no more padding
        ("bf16[4,64,128]{2,1,0:T(16,128)(2,1)}", 4 * 64 * 128 * 2, 0),
        ("bf16[4,9,128]{2,1,0:T(16,128)(2,1)}", 4 * 16 * 128 * 2, 0),
        ("pred[7]{0:T(1024)E(32)}", 1024 * 4, 0),  # a widened element: 32 bits each
        ("f32[64,128]{1,0}", 64 * 128 * 4, 0),  # untiled: as before
        ("f32[2]", 8, 0),
    ],
)
def test_tiled_byte_sizes_and_memory_spaces(shape: str, size: int, space: int) -> None:
    assert hlo.shape_bytes(shape) == size
    assert hlo.memory_space(shape) == space


def test_a_layout_that_does_not_fit_its_dimensions_is_a_parse_error() -> None:
    with pytest.raises(hlo.HloParseError):
        hlo.shape_bytes("f32[4,4]{2,0:T(8,128)}")
    with pytest.raises(hlo.HloParseError):
        hlo.shape_bytes("f32[4,4]{1,0:T(8,x)}")


@pytest.mark.parametrize("stem", STEMS)
def test_every_buffer_size_and_memory_space_is_xlas(stem: str) -> None:
    """shape_bytes and memory_space of each array value equal the size and color XLA assigned it."""
    module, assignment = decoded(stem)
    shapes = {i.name: i.shape for c in module.computations for i in c.instructions}
    checked = 0
    for buffer in assignment.logical_buffers:
        if buffer.instruction not in shapes:
            continue  # the root of an async op's wrapped computation, which the text leaves out
        shape = hlo.sub_shape(shapes[buffer.instruction], buffer.shape_index)
        assert shape is not None
        if shape.startswith("("):
            continue  # a tuple's index table: its size is the backend's pointer table
        assert (hlo.shape_bytes(shape), hlo.memory_space(shape)) == (buffer.size, buffer.color), (
            buffer.instruction,
            shape,
        )
        checked += 1
    assert checked >= 3


# ----------------------------------------------------------------------------
# Copies counted in the text, and staging copies


_COPY = re.compile(r"^\s+(?:ROOT )?%(\S+) = (.*?) (copy|copy-start)\(%(\S+?)\)", re.MULTILINE)
_SPACE = re.compile(r"S\((\d+)\)")


def text_copies(text: str) -> dict[str, tuple[str, int]]:
    """Every copy/copy-start outside fusion bodies: name -> (opcode, memory space of its destination),
    read from the text alone (a fusion body is a computation some ``calls=`` of a fusion names)."""
    fused = set(re.findall(r" fusion\(.*?calls=%([\w.\-]+)", text))
    found: dict[str, tuple[str, int]] = {}
    for block in text.split("\n\n"):
        header = re.match(r"^(?:ENTRY )?%([\w.\-]+) ", block.strip())
        if header is None or header.group(1) in fused:
            continue
        for name, shape, opcode, _ in _COPY.findall(block):
            destination = shape[1:].split(", ")[0] if opcode == "copy-start" else shape
            space = _SPACE.search(destination)
            found[name] = (opcode, int(space.group(1)) if space else 0)
    return found


@pytest.mark.parametrize("stem", STEMS)
def test_copies_and_their_memory_spaces_as_counted_in_the_text(stem: str) -> None:
    text = files(stem)[0]
    counted = text_copies(text)
    sites = hlo.find_copies(hlo.parse_hlo_module(text))
    assert {s.instruction: s.memory_space for s in sites} == {n: space for n, (_, space) in counted.items()}
    assert sum(1 for op, _ in counted.values() if op == "copy-start") == sum(
        1 for s in sites if s.instruction.startswith("copy-start")
    )
    # whatever lands outside device memory only stages; nothing else on a GPU
    for site in sites:
        if site.memory_space != 0:
            assert site.staging
        if stem.startswith("gpu"):
            assert not site.staging and site.memory_space == site.source_memory_space == 0


def test_the_issues_sparse_update_on_tpu_is_one_copy_and_two_stagings() -> None:
    """``u.at[1:-1].add(g[1:-1])`` without donation (issue 16: "TPU v5e 3 copies, two staging
    through VMEM; H100 1 copy"): the TPU copies u into VMEM, updates it there and copies it back
    into the new output buffer; g is prefetched into VMEM."""
    module = hlo.parse_hlo_module(files("tpu_v5e_sparse_add_plain")[0])
    sites = hlo.find_copies(module)
    assert len(sites) == 3
    staging = [s for s in sites if s.staging]
    assert sorted((s.source_memory_space, s.memory_space) for s in staging) == [(0, 1), (0, 1)]
    (kept,) = [s for s in sites if not s.staging]
    assert (kept.source_memory_space, kept.memory_space) == (1, 0)  # the copy back is the one that counts
    assert kept.parameter_number == 0 and kept.bytes == N * N * 4  # a copy of u
    gpu = hlo.find_copies(hlo.parse_hlo_module(files("gpu_h100_sparse_add_plain")[0]))
    assert [(s.parameter_number, s.staging) for s in gpu] == [(0, False)]
    for backend in BACKENDS:  # donated: in place, nothing copied
        assert hlo.find_copies(hlo.parse_hlo_module(files(f"{backend}_sparse_add_donated")[0])) == []


# ----------------------------------------------------------------------------
# Live ranges and memory spaces


def test_the_tpu_sparse_update_by_memory_space() -> None:
    """Device memory: u, g and the output (3 x 256 KiB), the two s32 index constants (512 B each,
    tiled) and the 512 B index table of the async copy's tuple; VMEM: staged u, staged g and the
    fusion's result (3 x 256 KiB). XLA's argument/output/temp figures hold no VMEM byte."""
    module, assignment = decoded("tpu_v5e_sparse_add_plain")
    memory = files("tpu_v5e_sparse_add_plain")[3]
    live = buffers.analyze_liveness(assignment, module)
    spaces = {s.memory_space: s for s in live.memory_spaces}
    block = N * N * 4
    assert spaces[1].live_peak_bytes == spaces[1].allocated_bytes == 3 * block
    assert live.constant_bytes == 2 * 512
    assert live.live_peak_bytes == spaces[0].live_peak_bytes == 3 * block + 2 * 512 + 512
    footprint = memory["argument_bytes"] + memory["output_bytes"] + memory["temp_bytes"] - memory["alias_bytes"]
    assert footprint == 3 * block  # VMEM is in none of XLA's figures
    # the same allocations, summed by color straight from the decoded proto
    by_color: dict[int, int] = {}
    for allocation in assignment.allocations:
        if not allocation.is_thread_local:
            by_color[allocation.color] = by_color.get(allocation.color, 0) + allocation.size
    assert {s.memory_space: s.allocated_bytes for s in live.memory_spaces} == by_color


def test_an_async_copy_keeps_its_destination_live_until_the_copy_done_is_read() -> None:
    module, assignment = decoded("tpu_v5e_sparse_add_plain")
    live = buffers.analyze_liveness(assignment, module)
    points = {p.instruction: p.index for p in live.schedule}
    users = module.entry.users()
    for start in (i for i in module.entry.instructions if i.opcode == "copy-start"):
        (done,) = [u for u in users[start.name] if u.opcode == "copy-done"]
        last_read = max((points[u.name] for u in users.get(done.name, [])), default=points[done.name])
        (destination,) = [r for r in live.ranges if r.value.instruction == start.name and r.value.shape_index == (0,)]
        assert destination.end >= last_read


def test_values_of_async_wrapped_ops_are_placed_at_their_start() -> None:
    """The TPU reads the sgd step's gradients through ``slice-start``/``slice-done`` into VMEM; the
    text prints neither the ``async-start`` nor the computation it wraps, whose root defines the
    slice. Each is placed at element 1 of its start, so every value is scheduled."""
    for variant in VARIANTS:
        text = files(f"tpu_v5e_sgd_{variant}")[0]
        module, assignment = decoded(f"tpu_v5e_sgd_{variant}")
        starts = len(re.findall(r" slice-start\(", text))
        assert starts > 0 and len(assignment.async_wrappers) == starts
        live = buffers.analyze_liveness(assignment, module)
        assert live.unscheduled == ()
        wrapped = {(c, r) for c, r, _, _ in assignment.async_wrappers}
        placed = [
            v
            for v in live.values
            if v.opcode is not None and v.instruction in {s for *_, s in assignment.async_wrappers}
        ]
        assert len([v for v in placed if v.shape_index[:1] == (1,)]) == starts
        # without them, those slices would be in no live range
        bare = buffers.BufferAssignment(assignment.logical_buffers, assignment.allocations)
        assert len(buffers.analyze_liveness(bare, module).unscheduled) == len(wrapped) == starts


# ----------------------------------------------------------------------------
# The findings and the report


def compiled_variant(stem: str, name: str, inputs: list[tuple[str, int]], outputs: list[str]) -> CompiledVariant:
    text, data, module_proto, memory = files(stem)
    donated = name == "donated"
    return CompiledVariant(
        name=name,
        donated_arguments=("u",) if donated else (),
        inputs=tuple(
            InputLeaf(i, path, path, (N, N), "float32", size, donated and i == 0, i, True)
            for i, (path, size) in enumerate(inputs)
        ),
        outputs=tuple(OutputLeaf(i, path, (N, N), "float32", N * N * 4) for i, path in enumerate(outputs)),
        hlo_text=text,
        memory={**memory, "generated_code_bytes": 0},
        memory_unavailable={},
        lowering_warnings=(),
        tuple_args=False,
        lower_seconds=0.0,
        compile_seconds=0.0,
        buffer_assignment=data,
        hlo_module_proto=module_proto,
        platform=stem.split("_")[0],  # tpu_v5e_… -> "tpu", gpu_h100_… -> "gpu"
    )


def sparse_result(backend: str):
    leaves = [("u", N * N * 4), ("g", N * N * 4)]
    return analysis.analyze_target(
        target="acc:sparse_add",
        name="sparse_add",
        definition=None,
        donate="u",
        expect="in-place",
        max_peak=None,
        plain=compiled_variant(f"{backend}_sparse_add_plain", "plain", leaves, ["out"]),
        donated=compiled_variant(f"{backend}_sparse_add_donated", "donated", leaves, ["out"]),
        min_bytes=0,
    )


def test_a_staging_copy_is_a_move_apart_from_the_copies_and_no_finding() -> None:
    result = sparse_result("tpu_v5e")
    plain = result.variants["plain"]
    # the HBM -> VMEM prefetches are moves, not copies: the copy count is the one real copy in HBM
    assert [c.kind for c in plain.copies] == ["parameter"]
    assert [c.kind for c in plain.moves] == ["staging", "staging"]
    (copy,) = plain.copies
    assert copy.of_parameter == "u" and (copy.source_memory_space, copy.memory_space) == (1, 0)
    assert {(c.source_memory_space, c.memory_space) for c in plain.moves} == {(0, 1)}
    assert result.verdict is not None and result.verdict.in_place
    # the plain variant's one real copy is the one the verdict explains; the stagings add nothing
    (note,) = [f for f in result.verdict.findings if f.code == "plain-copy"]
    assert note.input == "u"
    assert not [f for f in result.verdict.findings if "staging" in f.message or "VMEM" in f.message]
    gpu = sparse_result("gpu_h100")
    assert [c.kind for c in gpu.variants["plain"].copies] == ["parameter"]


def test_the_report_splits_the_figures_by_memory_space() -> None:
    result = sparse_result("tpu_v5e")
    block = N * N * 4
    plain, donated = result.variants["plain"].memory, result.variants["donated"].memory
    assert [(s.memory_space, s.live_peak_bytes) for s in plain.memory_spaces] == [
        (0, 3 * block + 3 * 512),
        (1, 3 * block),
        (2, 4),
    ]
    assert plain.live_peak_bytes == 3 * block + 3 * 512
    # footprint: XLA's figures (device memory only) and the constants, 2 x 512 B
    assert plain.footprint_bytes == 3 * block + 2 * 512
    assert donated.footprint_bytes == 2 * block + 2 * 512
    assert [s.memory_space for s in donated.memory_spaces] == [0, 1]
    text = table_renderer.render(make_report((result,)), RenderOptions(verbose=True, width=160))
    assert (
        "memory space 1 (VMEM) — on the chip: the footprint and the live peak leave it out: allocated 768.0 KiB → "
        "256.0 KiB, live peak 768.0 KiB → 256.0 KiB" in text
    )
    assert "plain 2 moves, 512.0 KiB: 2 HBM → VMEM (512.0 KiB); donated none" in text
    assert re.search(r"HBM → VMEM +256.0 KiB +f32\[256,256\]", text)  # the -v table of moves
    assert "peak_bytes: XLA's peak counts the TPU's on-chip memory beside HBM (VMEM 256.0 KiB" in text
    gpu = sparse_result("gpu_h100")
    assert [s.memory_space for s in gpu.variants["plain"].memory.memory_spaces] == [0]
    assert "memory space" not in table_renderer.render(make_report((gpu,)), RenderOptions(verbose=True, width=160))


# ----------------------------------------------------------------------------
# Asynchronous collectives (hand-written: a one-chip compile has none)

_ASYNC_COLLECTIVES = """HloModule collectives, is_scheduled=true

ENTRY %main (p: f32[4]) -> f32[16] {
  %p = f32[4]{0} parameter(0)
  %ars = f32[4]{0} all-reduce-start(%p), replica_groups={}
  %ags = (f32[4]{0}, f32[16]{0}) all-gather-start(%p), dimensions={0}
  %x = f32[4]{0} negate(%p)
  %ard = f32[4]{0} all-reduce-done(%ars)
  %agd = f32[16]{0} all-gather-done(%ags)
  %y = f32[4]{0} add(%ard, %x)
  ROOT %r = f32[16]{0} pad(%agd, %y), padding=0_0
}
"""


def _buffer(id_: int, name: str, size: int, index: tuple[int, ...] = ()) -> buffers.LogicalBuffer:
    return buffers.LogicalBuffer(id_, size, id_, name, "main", index)


def _allocation(index: int, size: int, buffer_id: int, **flags: bool) -> buffers.Allocation:
    return buffers.Allocation(
        index=index,
        size=size,
        is_entry_computation_parameter=flags.get("parameter", False),
        parameter_number=0 if flags.get("parameter", False) else None,
        parameter_shape_index=(),
        maybe_live_out=flags.get("output", False),
        is_tuple=False,
        is_constant=False,
        is_thread_local=False,
        color=0,
        assigned=(buffers.AssignedBuffer(buffer_id, 0, size),),
    )


def test_async_collectives_keep_their_results_live_until_read_after_the_done() -> None:
    """An ``all-reduce-start`` defines its result, which ``all-reduce-done`` returns; an
    ``all-gather-start``'s element 1 is the gathered result, which ``all-gather-done``
    returns: each is live from its start to the last reader of its done."""
    module = hlo.parse_hlo_module(_ASYNC_COLLECTIVES)
    logical = (
        _buffer(1, "p", 16),
        _buffer(2, "ars", 16),
        _buffer(3, "ags", 16, ()),
        _buffer(4, "ags", 64, (1,)),
        _buffer(5, "x", 16),
        _buffer(6, "y", 16),
        _buffer(7, "r", 64),
    )
    allocations = (
        _allocation(0, 16, 1, parameter=True),
        _allocation(1, 16, 2),
        _allocation(2, 16, 3),
        _allocation(3, 64, 4),
        _allocation(4, 16, 5),
        _allocation(5, 16, 6),
        _allocation(6, 64, 7, output=True),
    )
    live = buffers.analyze_liveness(buffers.BufferAssignment(logical, allocations), module)
    point = {p.instruction: p.index for p in live.schedule}
    ranges = {(r.value.instruction, r.value.shape_index): (r.start, r.end) for r in live.ranges}
    assert ranges[("ars", ())] == (point["ars"], point["y"])  # read through all-reduce-done by y
    assert ranges[("ags", (1,))] == (point["ags"], point["r"])  # read through all-gather-done by r
    # at y: p, the reduced value, the gathered one, x and y (ags' index table was last read by its done)
    assert live.curve[point["y"]] == 16 + 16 + 64 + 16 + 16
