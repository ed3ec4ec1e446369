"""Golden-text tests of the HLO reader (``fieldmem/xla/hlo/``: model, parse, queries).

Every test reads HLO text from ``tests/golden`` and never compiles anything
(no jax import here). The ``<case>.<plain|donated>.hlo`` files are real
``Compiled.as_text()`` outputs of the functions in ``tests/golden/functions.py``
(jax 0.10.2, CPU; regenerate with ``make golden``); the ``hand_*.hlo`` files
are written by hand for what this CPU jax does not print (tuple parameters,
async copies, older metadata, names without ``%``, nested loops,
conditionals on a predicate and on an index inside a loop).

Source lines are not hard-coded: they are the lines of ``functions.py`` that
carry a ``# golden: <marker>`` comment, so editing that file (and
regenerating) moves both together.
"""

from __future__ import annotations

import ast
import gc
import random
import re
from pathlib import Path

import pytest

from fieldmem.xla import hlo
from fieldmem.xla.hlo import (
    AliasEntry,
    CopySite,
    HloModule,
    HloParseError,
    LoopInfo,
    SourceLocation,
    find_copies,
    loop_bodies,
    output_values,
    parse_hlo_module,
    shape_bytes,
    view_source,
)
from fieldmem.xla.hlo import parse as hlo_parse

GOLDEN = Path(__file__).parents[1] / "golden"
FUNCTIONS = "tests/golden/functions.py"
FIELD = "f32[64,128]{1,0}"
FIELD_BYTES = 64 * 128 * 4
CASES = ("dtype_change", "loop_copy", "scan_stepper", "several_outputs", "sparse_row", "unused_arg", "while_loop")
HAND = ("hand_async_copy", "hand_cond_in_loop", "hand_nested_loop", "hand_tuple_param")

_cache: dict[str, HloModule] = {}


def text(name: str) -> str:
    return (GOLDEN / f"{name}.hlo").read_text()


def module(name: str) -> HloModule:
    if name not in _cache:
        _cache[name] = parse_hlo_module(text(name))
    return _cache[name]


def entry_source(m: HloModule, instruction) -> SourceLocation | None:
    """An entry value's source line as the report's outputs take it (fieldmem.findings.program.ProgramLeaves.output_location)."""
    return view_source(instruction, m.entry.by_name())


def line(marker: str) -> int:
    """Line of functions.py that carries ``# golden: <marker>``."""
    found = [
        number
        for number, source in enumerate((GOLDEN / "functions.py").read_text().splitlines(), start=1)
        if source.rstrip().endswith(f"# golden: {marker}")
    ]
    assert len(found) == 1, f"marker {marker!r} found {len(found)} times in functions.py"
    return found[0]


def at(marker: str, function: str | None) -> SourceLocation:
    return SourceLocation(FUNCTIONS, line(marker), function)


def copies_by_name(name: str) -> dict[str, CopySite]:
    sites = find_copies(module(name))
    by_name = {site.instruction: site for site in sites}
    assert len(by_name) == len(sites), "a copy was reported twice"
    return by_name


# ----------------------------------------------------------------------------
# The golden files themselves


def test_every_golden_file_is_there_and_parses() -> None:
    expected = {f"{c}.{v}.hlo" for c in CASES for v in ("plain", "donated")} | {f"{h}.hlo" for h in HAND}
    # the TPU and GPU compiles of tests/golden_buffers/accelerators.py (tests/xla/test_accelerator_hlo.py)
    expected |= {
        f"acc_{c}.{b}.{v}.hlo"
        for c in ("sparse_add", "stepper", "kv_write", "sgd")
        for b in ("tpu_v5e", "gpu_h100")
        for v in ("plain", "donated")
    }
    present = {p.name for p in GOLDEN.glob("*.hlo")}
    assert present == expected
    for name in sorted(expected):
        parsed = module(name[: -len(".hlo")])
        assert parsed.is_scheduled
        assert parsed.entry.is_entry


@pytest.mark.parametrize("case", CASES)
def test_compiled_goldens_hold_no_machine_specific_path(case: str) -> None:
    for variant in ("plain", "donated"):
        body = text(f"{case}.{variant}")
        files = re.findall(r'^\d+ "(.*)"$', body.split("FunctionNames")[0], re.MULTILINE)
        # the call in regenerate.py is a user frame too; both are repository-relative
        assert FUNCTIONS in files
        assert set(files) <= {FUNCTIONS, "tests/golden/regenerate.py"}
        assert "/home/" not in body and "/work/" not in body and "/tmp/" not in body


XLA_PACKAGE = Path(hlo.__file__).parent.parent  # fieldmem/xla


def _imports(path: Path) -> list[tuple[int, str]]:
    """(level, module) of every import in a file: level 0 absolute, 1 for ``from .x``..."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.extend((0, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or ""))
    return found


@pytest.mark.parametrize("path", sorted(XLA_PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(XLA_PACKAGE)))
def test_xla_modules_are_pure_and_say_so(path: Path) -> None:
    # no jax, jaxlib or numpy; of fieldmem, only the xla package itself
    for level, name in _imports(path):
        top = name.split(".")[0]
        assert level or top not in {"jax", "jaxlib", "numpy"}, (path, name)
        assert level or top != "fieldmem" or name.startswith("fieldmem.xla"), (path, name)
    docstring = ast.get_docstring(ast.parse(path.read_text()))
    assert docstring and "no jax" in docstring.lower(), path


def test_hlo_package_imports_nothing_outside_itself() -> None:
    for path in sorted(Path(hlo.__file__).parent.glob("*.py")):
        for level, name in _imports(path):
            assert level == 1 or name.split(".")[0] not in {"fieldmem", "google"}, (path, name)


def test_public_names() -> None:
    for name in (
        "parse_hlo_module",
        "find_copies",
        "shape_bytes",
        "output_values",
        "view_source",
        "loop_bodies",
        "HloModule",
        "CopySite",
        "SourceLocation",
        "AliasEntry",
        "HloParseError",
        "LoopInfo",
    ):
        assert name in hlo.__all__
        assert hasattr(hlo, name)
    assert issubclass(HloParseError, ValueError)


# ----------------------------------------------------------------------------
# sparse_row: u.at[idx].set(row), v passed through


def test_sparse_row_plain_header() -> None:
    m = module("sparse_row.plain")
    assert m.name == "jit_sparse_row"
    assert m.aliases == ()
    assert m.buffer_donors == ()
    assert m.entry.name == "main.2"
    assert m.entry_parameter_shapes == (FIELD, FIELD, "s32[]", "f32[128]{0}")
    assert m.entry_result_shape == f"({FIELD}, {FIELD})"
    assert loop_bodies(m) == {}


def test_sparse_row_plain_copies_both_inputs() -> None:
    sites = find_copies(module("sparse_row.plain"))
    assert [s.instruction for s in sites] == ["copy.1", "copy.2"]
    u_copy, v_copy = sites
    # the defensive copy of u: no metadata of its own, the update that reads it names the line
    assert u_copy == CopySite(
        instruction="copy.1",
        computation="main.2",
        shape=FIELD,
        bytes=FIELD_BYTES,
        operand="u.1",
        parameter_number=0,
        parameter_index=(),
        layout_change=False,
        loop=None,
        source=at("sparse_row update", "sparse_row"),
        source_role="user",
        feeds_output=False,
        output_indices=(),
    )
    # the passed-through v is copied straight into output 1; nothing names a line
    assert v_copy == CopySite(
        instruction="copy.2",
        computation="main.2",
        shape=FIELD,
        bytes=FIELD_BYTES,
        operand="v.1",
        parameter_number=1,
        parameter_index=(),
        layout_change=False,
        loop=None,
        source=None,
        source_role=None,
        feeds_output=True,
        output_indices=((1,),),
    )
    assert str(u_copy.source) == f"{FUNCTIONS}:{line('sparse_row update')}"


def test_sparse_row_plain_outputs() -> None:
    m = module("sparse_row.plain")
    outputs = output_values(m)
    assert [(o.name, o.opcode, o.shape) for o in outputs if o] == [
        ("select_dynamic-update-slice_fusion", "fusion", FIELD),
        ("copy.2", "copy", FIELD),
    ]
    assert entry_source(m, outputs[0]) == at("sparse_row update", "sparse_row")
    assert entry_source(m, outputs[1]) is None  # a copy of a parameter: no line
    assert outputs[0].op_name == "jit(sparse_row)/scatter"
    assert outputs[0].operands == ("copy.1", "add_select_fusion", "row.1", "and_reduce_fusion")
    assert entry_source(m, None) is None


def test_sparse_row_donated_aliases_both_and_copies_nothing() -> None:
    m = module("sparse_row.donated")
    assert m.aliases == (
        AliasEntry(output_index=(0,), parameter_number=0, parameter_index=(), kind="may-alias"),
        AliasEntry(output_index=(1,), parameter_number=1, parameter_index=(), kind="may-alias"),
    )
    assert m.buffer_donors == ()
    assert find_copies(m) == []
    outputs = output_values(m)
    assert [o.name for o in outputs if o] == ["select_dynamic-update-slice_fusion", "v.1"]
    assert outputs[1].opcode == "parameter" and outputs[1].parameter_number == 1
    assert outputs[1].op_name == "v"
    assert entry_source(m, outputs[1]) is None


def test_parameters_and_their_names() -> None:
    entry = module("sparse_row.plain").entry
    params = [(i.name, i.parameter_number, i.shape) for i in entry.instructions if i.opcode == "parameter"]
    assert params == [("u.1", 0, FIELD), ("v.1", 1, FIELD), ("idx.1", 2, "s32[]"), ("row.1", 3, "f32[128]{0}")]
    assert entry.root is not None and entry.root.name == "tuple.5" and entry.root.is_root
    assert entry.root.bytes == 2 * FIELD_BYTES


def test_fusion_calls_and_stack_frame_function_names() -> None:
    m = module("sparse_row.plain")
    fusion = m.entry.by_name()["select_dynamic-update-slice_fusion"]
    assert fusion.called == ("fused_computation",)
    body = m.computation("fused_computation")
    assert body is not None and not body.is_entry
    root = body.root
    assert root is not None and root.opcode == "dynamic-update-slice"
    assert root.source == at("sparse_row update", "sparse_row")
    assert m.computation("no_such_computation") is None


# ----------------------------------------------------------------------------
# scan_stepper: lax.scan, the new carry is copied back every step


def test_scan_stepper_loop_copy() -> None:
    m = module("scan_stepper.plain")
    loop = LoopInfo(
        instruction="while.5",
        computation="main.6",
        trip_count=8,
        source=at("scan_stepper scan", "scan_stepper"),
    )
    bodies = loop_bodies(m)
    assert bodies["region_0.4"] == loop
    assert bodies["region_1.5"] == loop
    assert "main.6" not in bodies
    sites = copies_by_name("scan_stepper.plain")
    assert set(sites) == {"copy.5", "copy.6", "copy.7"}
    carry = sites["copy.5"]
    assert carry.computation == "region_0.4"
    assert carry.bytes == FIELD_BYTES
    assert carry.loop == loop
    assert carry.loop.total_trip_count == 8 and carry.loop.depth == 1
    assert carry.operand == "multiply_add_fusion"
    assert carry.parameter_number is None
    assert carry.source == at("scan_stepper carry", "scan_stepper.<locals>.step")
    assert carry.source_role == "operand"
    assert not carry.feeds_output
    # the entry copies u before the loop (plain) and the induction variable's start
    assert (sites["copy.6"].parameter_number, sites["copy.6"].loop, sites["copy.6"].bytes) == (0, None, FIELD_BYTES)
    assert sites["copy.6"].source == at("scan_stepper scan", "scan_stepper")
    assert sites["copy.6"].source_role == "user"
    assert (sites["copy.7"].operand, sites["copy.7"].bytes, sites["copy.7"].parameter_number) == ("constant.9", 4, None)


def test_scan_stepper_donated() -> None:
    m = module("scan_stepper.donated")
    assert m.aliases == (AliasEntry((), 0, (), "may-alias"),)
    assert m.entry_result_shape == FIELD
    sites = copies_by_name("scan_stepper.donated")
    assert set(sites) == {"copy.5", "copy.8"}
    assert sites["copy.5"].loop is not None and sites["copy.5"].loop.trip_count == 8
    assert sites["copy.8"].bytes == 4 and sites["copy.8"].loop is None


# ----------------------------------------------------------------------------
# loop_copy: the old carry is a per-step output, so it is copied every iteration


def test_loop_copy_reports_copies_inside_the_scan_body() -> None:
    sites = copies_by_name("loop_copy.plain")
    assert set(sites) == {"copy.6", "copy.5", "copy", "copy.11", "copy.12"}
    loop = LoopInfo("while.6", "main.7", 4, at("loop_copy scan", "loop_copy"))
    in_loop = {name for name, site in sites.items() if site.loop is not None}
    assert in_loop == {"copy.6", "copy.5", "copy"}
    for name in in_loop:
        assert sites[name].loop == loop
        assert sites[name].computation == "region_0.5"
        assert sites[name].parameter_number is None  # not the entry: no parameter tracing
    old_carry = sites["copy.6"]
    assert (old_carry.operand, old_carry.bytes, old_carry.shape) == ("get-tuple-element.25", FIELD_BYTES, FIELD)
    assert old_carry.source == at("loop_copy scan", "loop_copy")
    assert old_carry.source_role == "copy"  # this copy carries its own metadata
    second = sites["copy"]
    assert (second.operand, second.source_role, second.bytes) == ("copy.6", "operand", FIELD_BYTES)
    counter = sites["copy.5"]
    assert (counter.bytes, counter.shape, counter.source_role) == (4, "s32[]", "user")
    u_copy = sites["copy.11"]
    assert (u_copy.loop, u_copy.parameter_number, u_copy.parameter_index) == (None, 0, ())


def test_loop_copy_loop_bodies_cover_fusions_called_from_the_body() -> None:
    bodies = loop_bodies(module("loop_copy.plain"))
    assert set(bodies) == {
        "region_0.5",
        "region_2.6",
        "fused_computation",
        "fused_computation.1",
        "fused_computation.2",
        "fused_computation.3",
        "fused_computation.4",
        "and.reduce_sub_computation",
        "wrapped_add_computation",
        "wrapped_compare_computation",
    }
    assert {info.instruction for info in bodies.values()} == {"while.6"}


def test_loop_copy_donated() -> None:
    m = module("loop_copy.donated")
    assert m.aliases == (AliasEntry((0,), 0, (), "may-alias"),)
    assert m.entry_result_shape == f"({FIELD}, f32[4,64,128]{{2,1,0}})"
    sites = copies_by_name("loop_copy.donated")
    assert set(sites) == {"copy.6", "copy.5", "copy", "copy.13"}  # the copy of u is gone
    assert sites["copy.6"].loop is not None and sites["copy.6"].loop.trip_count == 4
    outputs = output_values(m)
    assert [o.shape for o in outputs if o] == [FIELD, "f32[4,64,128]{2,1,0}"]
    assert [entry_source(m, o) for o in outputs] == [at("loop_copy scan", "loop_copy")] * 2


# ----------------------------------------------------------------------------
# while_loop: a data-dependent trip count


def test_while_loop_has_no_known_trip_count() -> None:
    m = module("while_loop.plain")
    bodies = loop_bodies(m)
    loop = LoopInfo("while.5", "main.4", None, at("while_loop call", "while_loop"))
    assert bodies["region_0.1"] == loop
    assert loop.total_trip_count is None
    assert m.entry_parameter_shapes == (FIELD, "f32[]")
    assert m.entry_result_shape == f"({FIELD}, s32[])"
    sites = copies_by_name("while_loop.plain")
    assert set(sites) == {"copy.6", "copy.7"}
    assert all(site.loop is None for site in sites.values())
    assert (sites["copy.6"].parameter_number, sites["copy.6"].bytes) == (0, FIELD_BYTES)
    assert sites["copy.6"].source == at("while_loop call", "while_loop")
    donated = copies_by_name("while_loop.donated")
    assert set(donated) == {"copy.8"} and donated["copy.8"].bytes == 4
    assert module("while_loop.donated").aliases == (AliasEntry((0,), 0, (), "may-alias"),)


# ----------------------------------------------------------------------------
# several_outputs


def test_several_outputs_shapes_and_sources() -> None:
    m = module("several_outputs.plain")
    assert m.entry_result_shape == f"({FIELD}, {FIELD}, f32[], pred[64,128]{{1,0}})"
    assert shape_bytes(m.entry_result_shape) == 2 * FIELD_BYTES + 4 + 64 * 128
    assert hlo.tuple_elements(m.entry_result_shape) == [FIELD, FIELD, "f32[]", "pred[64,128]{1,0}"]
    outputs = output_values(m)
    assert [(o.name, o.shape) for o in outputs if o] == [
        ("broadcast_add_fusion", FIELD),
        ("broadcast_multiply_fusion", FIELD),
        ("ynn_fusion", "f32[]"),
        ("broadcast_compare_fusion", "pred[64,128]{1,0}"),
    ]
    ret = at("several return", "several_outputs")
    assert [entry_source(m, o) for o in outputs] == [ret, ret, at("several total", "several_outputs"), ret]
    assert find_copies(m) == []


def test_several_outputs_donated_still_copies_a() -> None:
    # a is read by three fusions while output 0 is written into its buffer
    m = module("several_outputs.donated")
    assert m.aliases == (AliasEntry((0,), 0, (), "may-alias"), AliasEntry((1,), 1, (), "may-alias"))
    (site,) = find_copies(m)
    assert (site.instruction, site.operand, site.parameter_number, site.bytes) == ("copy", "a.1", 0, FIELD_BYTES)
    assert site.source == at("several return", "several_outputs") and site.source_role == "user"
    assert not site.feeds_output


# ----------------------------------------------------------------------------
# dtype_change and unused_arg: donations no output can take


def test_dtype_change_donated_is_a_buffer_donor_not_an_alias() -> None:
    m = module("dtype_change.donated")
    assert m.aliases == ()
    assert m.buffer_donors == ((0, ()),)
    assert m.entry_parameter_shapes == (FIELD,)
    assert m.entry_result_shape == "bf16[64,128]{1,0}"
    assert shape_bytes(m.entry_result_shape) == FIELD_BYTES // 2
    (out,) = output_values(m)
    assert out is not None and out.is_root and out.opcode == "fusion"
    assert entry_source(m, out) == at("dtype_change", "dtype_change")
    plain = module("dtype_change.plain")
    assert plain.buffer_donors == () and plain.aliases == ()
    assert find_copies(m) == [] and find_copies(plain) == []


def test_unused_donated_argument_is_dropped_from_the_program() -> None:
    for variant in ("plain", "donated"):
        m = module(f"unused_arg.{variant}")
        assert m.entry_parameter_shapes == (FIELD,)  # two arguments, one parameter
        assert [i.name for i in m.entry.instructions if i.opcode == "parameter"] == ["x.1"]
        assert m.entry_result_shape == FIELD
    assert module("unused_arg.donated").aliases == (AliasEntry((), 0, (), "may-alias"),)
    assert module("unused_arg.plain").aliases == ()
    assert module("unused_arg.donated").buffer_donors == ()


# ----------------------------------------------------------------------------
# Hand-written: tuple parameter, tuple alias indices, older metadata, layout copy


def test_tuple_parameter_aliases_and_donors() -> None:
    m = module("hand_tuple_param")
    assert m.name == "jit_step"
    assert m.aliases == (
        AliasEntry(output_index=(0,), parameter_number=0, parameter_index=(1,), kind="may-alias"),
        AliasEntry(output_index=(1,), parameter_number=0, parameter_index=(0,), kind="must-alias"),
    )
    assert m.buffer_donors == ((1, ()),)
    assert m.entry_parameter_shapes == (f"({FIELD}, {FIELD})", FIELD)
    assert hlo.tuple_elements(m.entry_parameter_shapes[0]) == [FIELD, FIELD]
    assert m.entry_result_shape == f"({FIELD}, {FIELD}, f32[64,128]{{0,1}})"


def test_tuple_parameter_copies() -> None:
    sites = find_copies(module("hand_tuple_param"))
    # copy.9 sits inside a fusion: a register move, not reported
    assert [s.instruction for s in sites] == ["copy.5", "copy.6"]
    element, transposed = sites
    assert (element.parameter_number, element.parameter_index) == (0, (1,))
    assert element.source == SourceLocation("/x/model.py", 15, None)
    assert element.source_role == "user"
    assert not element.layout_change and not element.feeds_output
    assert transposed == CopySite(
        instruction="copy.6",
        computation="main.9",
        shape="f32[64,128]{0,1}",
        bytes=FIELD_BYTES,
        operand="w.2",
        parameter_number=1,
        parameter_index=(),
        layout_change=True,
        loop=None,
        source=SourceLocation("/x/model.py", 17, None),
        source_role="copy",
        feeds_output=True,
        output_indices=((2,),),
    )


def test_older_style_metadata() -> None:
    m = module("hand_tuple_param")
    fusion = m.entry.by_name()["add_fusion"]
    assert fusion.op_name == "jit(step)/add"
    assert fusion.source == SourceLocation("/x/model.py", 14)
    assert str(fusion.source) == "/x/model.py:14"
    state = m.entry.by_name()["state.1"]
    assert (state.op_name, state.source, state.parameter_number) == ("state", None, 0)
    gte = m.entry.by_name()["get-tuple-element.4"]
    assert (gte.tuple_index, gte.operands) == (1, ("state.1",))


# ----------------------------------------------------------------------------
# Hand-written: async copies, names without %, inline operand shapes, host thread


def test_names_without_percent_and_inline_operand_shapes() -> None:
    m = module("hand_async_copy")
    assert [c.name for c in m.computations] == ["fused_computation", "host_fn", "main.12"]
    assert m.entry.name == "main.12"
    by_name = m.entry.by_name()
    assert by_name["tuple.7"].operands == ("async-done.12", "multiply_fusion", "copy-done.6", "convert.11")
    assert by_name["copy-done.6"].operands == ("copy-start.4",)
    assert by_name["negate.5"].operands == ("x.1",)
    assert by_name["multiply_fusion"].called == ("fused_computation",)
    assert by_name["async-start.9"].called == ("host_fn",)
    assert by_name["copy-start.8"].shape == "(bf16[8,16]{1,0:S(5)}, bf16[8,16]{1,0}, u32[])"
    fused_root = m.computation("fused_computation").root
    assert fused_root.operands == ("param_0", "broadcast.2")
    assert m.computation("host_fn").root.name == "copy.0"


def test_async_copies() -> None:
    sites = copies_by_name("hand_async_copy")
    assert set(sites) == {"copy.0", "copy-start.4", "copy-start.8"}
    kept = sites["copy-start.4"]
    assert kept == CopySite(
        instruction="copy-start.4",
        computation="main.12",
        shape=FIELD,  # the destination, not the (dest, src, context) tuple
        bytes=FIELD_BYTES,
        operand="u.2",
        parameter_number=1,
        parameter_index=(),
        layout_change=False,
        loop=None,
        source=None,
        source_role=None,
        feeds_output=True,  # through its copy-done
        output_indices=((2,),),
    )
    offload = sites["copy-start.8"]
    assert (offload.shape, offload.bytes, offload.parameter_number) == ("bf16[8,16]{1,0:S(5)}", 256, 2)
    assert not offload.layout_change  # a memory-space move, same layout
    assert offload.source == SourceLocation("/x/model.py", 25) and offload.source_role == "user"
    assert not offload.feeds_output
    host = sites["copy.0"]
    assert (host.computation, host.bytes, host.loop, host.parameter_number) == ("host_fn", 12, None, None)
    assert host.source == SourceLocation("/x/model.py", 21) and host.source_role == "copy"


def test_async_outputs() -> None:
    m = module("hand_async_copy")
    outputs = output_values(m)
    assert [o.name for o in outputs if o] == ["async-done.12", "multiply_fusion", "copy-done.6", "convert.11"]
    assert [entry_source(m, o) for o in outputs] == [
        None,
        SourceLocation("/x/model.py", 22),
        None,  # copy-done -> copy-start -> parameter u: no line
        SourceLocation("/x/model.py", 25),
    ]
    assert m.aliases == (AliasEntry((1,), 1, (), "may-alias"),)
    assert m.entry_parameter_shapes == ("f32[3]{0}", FIELD, "bf16[8,16]{1,0}")


# ----------------------------------------------------------------------------
# Hand-written: nested loops, trip count printed as a quoted string


def test_nested_loops() -> None:
    m = module("hand_nested_loop")
    outer = LoopInfo("while.33", "main.30", 3, SourceLocation("/x/model.py", 28))
    inner = LoopInfo("while.18", "outer_body", 5, SourceLocation("/x/model.py", 30), outer=outer)
    assert loop_bodies(m) == {
        "outer_body": outer,
        "outer_cond": outer,
        "inner_body": inner,
        "inner_cond": inner,
    }
    assert (outer.depth, outer.total_trip_count) == (1, 3)
    assert (inner.depth, inner.total_trip_count) == (2, 15)
    sites = copies_by_name("hand_nested_loop")
    assert set(sites) == {"copy.6", "copy.15"}
    assert sites["copy.6"].loop == inner
    assert sites["copy.6"].source == SourceLocation("/x/model.py", 31)
    assert sites["copy.6"].source_role == "copy"
    assert sites["copy.15"].loop == outer
    # read only by a tuple, which feeds the inner while: the while names the line
    assert sites["copy.15"].source == SourceLocation("/x/model.py", 30)
    assert sites["copy.15"].source_role == "user"


# ----------------------------------------------------------------------------
# Hand-written: conditionals inside a loop body (jax-md's neighbour-list rebuild)


def test_copies_in_a_branch_name_the_branch_and_the_conditional() -> None:
    m = module("hand_cond_in_loop")
    branches = hlo.conditional_branches(m)
    assert set(branches) == {"rebuild", "keep", "on_index_0", "on_index_1"}
    assert (branches["rebuild"].branch, branches["keep"].branch) == ("true", "false")  # on a predicate
    assert (branches["on_index_0"].branch, branches["on_index_1"].branch) == ("0", "1")  # on an index
    assert branches["rebuild"].conditional == "conditional.30" and branches["rebuild"].computation == "body"
    assert branches["on_index_1"].branches == 2

    sites = copies_by_name("hand_cond_in_loop")
    rebuild, indexed = sites["copy.5"], sites["copy.13"]
    assert rebuild.branch is not None and indexed.branch is not None
    assert (rebuild.branch.branch, rebuild.branch.source) == ("true", SourceLocation("/x/neighbors.py", 40))
    assert (indexed.branch.branch, indexed.branch.source) == ("1", SourceLocation("/x/neighbors.py", 44))
    # the copy's own line: the broadcast it copies
    assert (rebuild.source, rebuild.source_role) == (SourceLocation("/x/neighbors.py", 41), "operand")
    # both are in the loop too (its trip count bounds how often), but neither is the loop carry
    assert rebuild.loop is not None and rebuild.loop.trip_count == 10
    assert rebuild.carry is None and indexed.carry is None


def test_only_copies_of_the_carry_are_carry_copies() -> None:
    sites = copies_by_name("hand_cond_in_loop")
    # copies the carry the body was given
    assert sites["copy.36"].carry == "old" and sites["copy.36"].branch is None
    # a copy of a broadcast the body computes, read by a multiply: not the carry
    assert sites["copy.38"].carry is None and sites["copy.38"].loop is not None
    # the real compiles: the carry copies keep their roles
    loop_copy = copies_by_name("loop_copy.donated")
    assert {n: s.carry for n, s in loop_copy.items() if s.loop is not None} == {
        "copy.6": "old",  # the old carry, still read after the update
        "copy.5": "old",
        "copy": "new",  # the buffer the in-place update of the new carry is written into
    }
    assert {n: s.carry for n, s in copies_by_name("scan_stepper.donated").items() if s.loop is not None} == {
        "copy.5": "new"  # returned as the new carry
    }
    assert all(s.branch is None for s in loop_copy.values())


# ----------------------------------------------------------------------------
# shape_bytes


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ("f32[]", 4),
        ("s32[]", 4),
        ("pred[]", 1),
        ("pred[64,128]{1,0}", 8192),
        ("bf16[64,128]{1,0}", 16384),
        ("f16[3]{0}", 6),
        ("f64[2,2]{1,0}", 32),
        ("c64[4]{0}", 32),
        ("c128[4]{0}", 64),
        ("s8[10]{0}", 10),
        ("u64[]", 8),
        ("f32[64,128]{0,1}", FIELD_BYTES),
        ("f32[64,128]{1,0:T(8,128)}", FIELD_BYTES),
        ("bf16[8,16]{1,0:S(5)}", 256),
        ("f32[<=8,128]{1,0}", 8 * 128 * 4),
        ("f32[<=8,<=4]", 128),
        ("f8e4m3fn[16]{0}", 16),
        ("f8e5m2[4,4]{1,0}", 16),
        ("f8e4m3b11fnuz[2]{0}", 2),
        ("f8e8m0fnu[3]{0}", 3),
        ("f4e2m1fn[8]{0}", 8),
        ("s4[8]{0}", 8),
        ("u1[8]{0}", 8),
        ("token[]", 0),
        ("()", 0),
        ("(f32[], s32[])", 8),
        ("(f32[64,128]{1,0}, (bf16[2]{0}, pred[]))", FIELD_BYTES + 4 + 1),
        ("(s32[], f32[64,128]{1,0}, f32[4,64,128]{2,1,0}, s32[4]{0})", 4 + FIELD_BYTES + 4 * FIELD_BYTES + 16),
    ],
)
def test_shape_bytes(shape: str, expected: int) -> None:
    assert shape_bytes(shape) == expected


@pytest.mark.parametrize("shape", ["q7[3]", "f32[?]", "f32[3,x]"])
def test_shape_bytes_rejects_what_it_cannot_size(shape: str) -> None:
    with pytest.raises(HloParseError):
        shape_bytes(shape)


def test_tuple_elements() -> None:
    assert hlo.tuple_elements(FIELD) == [FIELD]
    assert hlo.tuple_elements("()") == []
    assert hlo.tuple_elements("(f32[], (s32[], pred[]))") == ["f32[]", "(s32[], pred[])"]


# ----------------------------------------------------------------------------
# Text that is not (all) there


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "   \n\n",
        "hello world",
        "ENTRY %main (x: f32[]) -> f32[] {\n  ROOT %x = f32[] parameter(0)\n}\n",  # no header
        "HloModule jit_f, is_scheduled=true\n",  # no computation
        "HloModule jit_f, entry_computation_layout={(f32[64",  # cut in the header
        "HloModule m\n\n%c (x: f32[]) -> f32[] {\n  ROOT %x = f32[] parameter(0)\n}\n",  # no ENTRY
        "HloModule m\n\nENTRY %main (x: f32[]) -> f32[] {\n  ROOT %x = f32[] garbage\n}\n",
        'HloModule m\n\nENTRY %main (x: f32[]) -> f32[] {\n  ROOT %x = f32[] parameter(0), metadata={op_name="x"\n}\n',
    ],
)
def test_garbage_raises(bad: str) -> None:
    with pytest.raises(HloParseError):
        parse_hlo_module(bad)


@pytest.mark.parametrize("name", ["sparse_row.plain", "loop_copy.donated", "hand_async_copy"])
def test_truncated_text_raises(name: str) -> None:
    full = text(name)
    end = full.rstrip().rfind("\n}")  # the ENTRY's closing brace
    assert end > 0
    for cut in range(0, end, 41):
        with pytest.raises(HloParseError):
            parse_hlo_module(full[:cut])
    # cut anywhere on the last instruction line, and just before the final brace
    for cut in range(full.rfind("\n", 0, end), end + 1, 7):
        with pytest.raises(HloParseError):
            parse_hlo_module(full[:cut])


def test_only_the_first_module_is_read() -> None:
    both = text("sparse_row.plain") + "\n" + text("loop_copy.plain")
    m = parse_hlo_module(both)
    assert m == module("sparse_row.plain")
    assert loop_bodies(m) == {}


def test_instruction_printed_over_several_lines() -> None:
    one_line = text("hand_tuple_param")
    split = one_line.replace(
        " tuple(%add_fusion, %multiply.7, %copy.6)", " tuple(%add_fusion,\n    %multiply.7, %copy.6)"
    )
    assert split != one_line
    m = parse_hlo_module(split)
    assert m.entry.root.operands == ("add_fusion", "multiply.7", "copy.6")
    assert find_copies(m) == find_copies(module("hand_tuple_param"))


def test_leading_text_before_the_header_is_skipped() -> None:
    m = parse_hlo_module("# compiled by jax\n" + text("unused_arg.donated"))
    assert m == module("unused_arg.donated")


def test_sub_shape() -> None:
    nested = "(f32[], (s32[2]{0}, pred[]))"
    assert hlo.sub_shape(nested, ()) == nested
    assert hlo.sub_shape(nested, (0,)) == "f32[]"
    assert hlo.sub_shape(nested, (1, 0)) == "s32[2]{0}"
    assert hlo.sub_shape(nested, (2,)) is None  # no such element
    assert hlo.sub_shape("f32[4]{0}", (0,)) is None  # not a tuple


# ----------------------------------------------------------------------------
# Which parameters each output is computed from (the advisor's preferred pairing)


def test_output_parameters_follow_operands_in_the_entry() -> None:
    # sparse_row(u, v, idx, row): out[0] = u.at[idx].set(row), out[1] = v
    assert hlo.output_parameters(module("sparse_row.plain")) == [
        frozenset({(0, ()), (2, ()), (3, ())}),
        frozenset({(1, ())}),
    ]
    # several_outputs(a, b): a + 1, b * 2, sum(a), a > 0
    assert hlo.output_parameters(module("several_outputs.donated")) == [
        frozenset({(0, ())}),
        frozenset({(1, ())}),
        frozenset({(0, ())}),
        frozenset({(0, ())}),
    ]


def test_output_parameters_of_a_loop_count_everything_passed_to_it() -> None:
    # while_loop(u, tol): both outputs come out of one while, which reads u and tol
    assert hlo.output_parameters(module("while_loop.plain")) == [frozenset({(0, ()), (1, ())})] * 2


def test_output_parameters_name_tuple_elements() -> None:
    # hand_tuple_param: add(state[0], w), multiply(copy(state[1])), copy(w)
    assert hlo.output_parameters(module("hand_tuple_param")) == [
        frozenset({(0, (0,)), (1, ())}),
        frozenset({(0, (1,))}),
        frozenset({(1, ())}),
    ]


# ----------------------------------------------------------------------------
# The fast path of the instruction parser reads what the general one reads

# lines the fast path must either read exactly like _parse_instruction_general or
# hand over to it: strings holding commas and brackets, call keys out of order,
# repeated keys, inline and nested shapes, tabs, non-ASCII names, cut-off tails
EDGE_LINES = (
    '  %x = f32[] add(%a, %b), metadata={op_name="a, b=c {(" stack_frame_id=1}',
    '  %x = f32[] add(%a, %b), metadata={op_name="q\\"x" source_file="/a.py" source_line=3}',
    '  %x = f32[] add(%a, %b), metadata={op_name="x" stack_frame_id=99}',
    '  %x = f32[] add(%a, %b), metadata={op_name="x" stack_frame_id=abc}',
    '  %x = f32[] add(%a, %b), metadata={op_name="x" stack_frame_id=2 stack_frame_id=3}',
    '  %x = f32[] add(%a, %b), metadata={op_name="x"}, metadata={op_name="y"}',
    '  %w = (s32[], f32[2]{0}) while(%t), body=%b, condition=%c, backend_config={"known_trip_count":{"n":"5"}}',
    '  %w = (s32[], f32[2]{0}) while(%t), condition=%c, body=%b, backend_config="{\\"known_trip_count\\":{}}"',
    "  %g = f32[] get-tuple-element(%t), index=1, index=2",
    "  %g = f32[] get-tuple-element(%t), index=x",
    "  %g = f32[] get-tuple-element(%t), index={1}",
    "  %p = f32[] parameter(0 )",
    "  %p = f32[] parameter(x)",
    "  %p = (f32[], s32[]) parameter(1)",
    "  %c = f32[3]{0} constant({1, 2, 3})",
    "  %c = f32[2,2]{1,0} constant({ {1, 2}, {3, 4} })",
    "  %c = f32[] constant(-inf)",
    "  %n = f32[] negate(f32[] %x)",
    "  %n = f32[2]{0} add(f32[2]{0} %x, f32[2]{0} y.1)",
    "  ROOT %t = (f32[], (s32[], pred[])) tuple(%a, %b)",
    "  ROOT %t = (f32[], (s32[], (pred[], u8[]))) tuple(%a, %b)",
    '  %a = ((f32[3]{0}), f32[3]{0}, s32[]) async-start(%x), async_execution_thread="host", calls=%host_fn',
    '  %c = f32[] call(%x), to_apply=%f, frontend_attributes={_xla="1"}',
    "  %k = f32[] conditional(%p, %a, %b), branch_computations={%br0, %br1}",
    '  %x = f32[] custom-call(%y), custom_call_target="foo,bar", api_version=API_VERSION_STATUS_RETURNING',
    "  %x = f32[64,128]{1,0:T(8,128)S(1)} copy(%y)",
    "  %x = f32[64, 128]{1,0} copy(%y)",
    "  %x = f32[]{ 0 } copy(%y)",
    "  %x = f32[] add(%a , %b )",
    "  %x = f32[] add(%a %b)",
    "  %x = f32[] add(%a, , %b)",
    "  %x = f32[] add()",
    "  %x = f32[] add(%a, %b)  ",
    "  %x = f32[] add(%a, %b),",
    "  %x = f32[] add(%a, %b), foo",
    "  %x = f32[] add(%a, %b) , kind=kLoop",
    "  %x = f32[] add(%a, %b), kind = kLoop",
    "  %x = f32[] add(%a, %b), slice={[0:1], [0:128]}",
    "  %x = f32[] add(%a, %b), sharding={devices=[2,1]<=[2]}",
    "  %x = f32[]  add(%a, %b)",
    "  %x = f32[] add (%a, %b)",
    "\t%x = f32[] negate(%y)",
    "  ROOT  %x = f32[] negate(%y)",
    "  ROOT = f32[] negate(%y)",
    "  %\u00e9 = f32[] negate(%\u00e0, %b\u00a0)",
    "  %x = f32[] add(%a, %b), a=1)",
    '  %x = f32[] add(%a, %b), metadata={op_name="x"',
    '  %x = f32[] add(%a, %b), metadata={op_name="x}',
    "  %x = f32[] add(%a, %b",
    "  %x = (f32[], s32[] tuple(%a)",
    "  %x = f32[] garbage",
    "  x = f32[]",
)


def _instruction_lines() -> list[str]:
    lines = {
        line
        for path in sorted(GOLDEN.glob("*.hlo"))
        for line in path.read_text().splitlines()
        if " = " in line and not line.startswith("HloModule")
    }
    return sorted(lines)


def _read(parse, line: str, tables) -> tuple:
    try:
        return ("read", parse(line, tables))
    except HloParseError:
        return ("raises",)


def test_fast_and_general_instruction_parsers_agree() -> None:
    tables = hlo_parse._parse_tables(text("loop_copy.plain").splitlines())  # stack frames 1..13
    lines = _instruction_lines() + list(EDGE_LINES)
    # and the golden lines with a few characters inserted, deleted or cut off
    rng = random.Random(7)
    pieces = list(' ,(){}[]="\\%\t\u00e9x0.-:') + [", index=1", ', b="x,y"', " ROOT ", ", calls=%c"]
    for _ in range(3000):
        line = rng.choice(lines)
        for _ in range(rng.randint(1, 3)):
            at = rng.randint(0, len(line))
            roll = rng.random()
            if roll < 0.5:
                line = line[:at] + rng.choice(pieces) + line[at:]
            elif roll < 0.85:
                line = line[:at] + line[at + rng.randint(1, 5) :]
            else:
                line = line[:at]
        lines.append(line)
    for line in lines:
        assert _read(hlo_parse._parse_instruction, line, tables) == _read(
            hlo_parse._parse_instruction_general, line, tables
        ), line


@pytest.mark.parametrize("case", CASES)
def test_compiled_goldens_take_the_fast_path(case: str) -> None:
    # a regex that stopped matching XLA's layout would still parse right, only slowly
    for variant in ("plain", "donated"):
        m = module(f"{case}.{variant}")
        for line in text(f"{case}.{variant}").splitlines():
            match = hlo_parse._FAST_INSTRUCTION.fullmatch(line)
            if match is None:
                assert " = " not in line or line.startswith("HloModule"), line
                continue
            tail = match.group(8)
            assert not any(hlo_parse._ATTRIBUTE.split(tail)[::3]), line
        assert m.entry.instructions


def test_whole_modules_read_the_same_by_the_general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = {name: parse_hlo_module(text(name) + "\n") for name in (p.stem for p in sorted(GOLDEN.glob("*.hlo")))}
    monkeypatch.setattr(
        hlo_parse,
        "_parse_instruction",
        lambda line, tables, cache=None: hlo_parse._parse_instruction_general(line, tables),
    )
    for name, parsed in fast.items():
        general = parse_hlo_module(text(name) + "\n\n")  # another text: not the cached module
        assert general == parsed, name
        assert find_copies(general) == find_copies(parsed), name


def test_parsing_leaves_the_garbage_collector_alone() -> None:
    """The parser is a pure reader: it neither pauses nor resumes the collector (its callers pause it,
    from fieldmem.model.collector, outside this package)."""
    assert gc.isenabled()
    parse_hlo_module(text("sparse_row.plain") + "\n# gc on\n")
    assert gc.isenabled()
    with pytest.raises(HloParseError):
        parse_hlo_module("HloModule m\n\nENTRY %main (x: f32[]) -> f32[] {\n  ROOT %x = f32[] garbage\n}\n")
    assert gc.isenabled()
    gc.disable()
    try:
        parse_hlo_module(text("sparse_row.plain") + "\n# gc off\n")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_one_parser_shared_by_threads_gives_each_the_module_a_parse_from_scratch_gives() -> None:
    """A parser's lock lets one parse at a time read and replace what it keeps: four threads parsing two
    programs that share lines, through one parser, each get the modules a fresh parse gives."""
    import threading

    texts = [text("acc_kv_write.gpu_h100.plain"), text("acc_kv_write.gpu_h100.donated")]
    alone = [parse_hlo_module(t) for t in texts]
    parser = hlo.HloParser(keep=0)  # nothing kept whole: every parse runs, sharing lines
    barrier = threading.Barrier(4)
    wrong: list[str] = []

    def parse(n: int) -> None:
        barrier.wait()
        for round in range(6):
            which = (n + round) % 2
            if parse_hlo_module(texts[which], parser) != alone[which]:
                wrong.append(f"thread {n}, round {round}")

    threads = [threading.Thread(target=parse, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
    assert parser.parsed == 24


def test_a_parser_keeps_its_last_modules_and_no_other_parser_sees_them() -> None:
    first, second = text("sparse_row.plain"), text("sparse_row.donated")
    parser, other = hlo.HloParser(keep=1), hlo.HloParser()
    module = parse_hlo_module(first, parser)
    assert parse_hlo_module(first, parser) is module and parser.parsed == 1
    assert parse_hlo_module(first, other) is not module and other.parsed == 1  # owned, not shared
    parse_hlo_module(second, parser)
    assert parse_hlo_module(first, parser) is not module and parser.parsed == 3  # keep=1: the first went
    assert parse_hlo_module(first) is not parse_hlo_module(first)  # no parser: nothing kept


_GPU_TUPLE_PASS = """HloModule jit_update, entry_computation_layout={(f32[8,128]{1,0}, f32[8,128]{1,0})->(f32[8,128]{1,0}, f32[8,128]{1,0})}

ENTRY %main.2 (field_u.1: f32[8,128], field_v.1: f32[8,128]) -> (f32[8,128], f32[8,128]) {
  %field_v.1 = f32[8,128]{1,0} parameter(1), metadata={op_name="field.v"}
  %field_u.1 = f32[8,128]{1,0} parameter(0), metadata={op_name="field.u"}
  %negate.1 = f32[8,128]{1,0} negate(%field_u.1)
  %tuple.9 = (f32[8,128]{1,0}, f32[8,128]{1,0}) tuple(%negate.1, %field_v.1)
  %get-tuple-element.21 = f32[8,128]{1,0} get-tuple-element(%tuple.9), index=0
  %get-tuple-element.22 = f32[8,128]{1,0} get-tuple-element(%tuple.9), index=1
  %copy.1 = f32[8,128]{1,0} copy(%get-tuple-element.22)
  ROOT %tuple.10 = (f32[8,128]{1,0}, f32[8,128]{1,0}) tuple(%get-tuple-element.21, %copy.1)
}
"""


def test_a_copy_through_a_tuple_and_its_element_is_of_the_parameter_in_it() -> None:
    """XLA:GPU leaves get-tuple-element(tuple(a, v), 1) in the entry (the H100 compile of
    examples/field.py): the copy of it is a copy of parameter 1, as XLA:CPU's direct copy is."""
    (site,) = find_copies(hlo.parse_hlo_module(_GPU_TUPLE_PASS))
    assert (site.instruction, site.parameter_number, site.parameter_index) == ("copy.1", 1, ())
    assert site.feeds_output and site.output_indices == ((1,),)


@pytest.mark.parametrize(("first", "second"), [("acc_kv_write.gpu_h100.plain", "acc_kv_write.gpu_h100.donated")])
def test_lines_the_module_parsed_before_had_parse_as_they_did(first: str, second: str) -> None:
    """The donated program is parsed right after the plain one and shares most of its lines: those are taken
    from it. The result is the module a parse from scratch gives."""
    alone = parse_hlo_module(text(second))
    parser = hlo.HloParser()
    parse_hlo_module(text(first), parser)
    shared = set(parser._lines[1])
    after = parse_hlo_module(text(second), parser)
    assert after == alone
    taken = [line for line in text(second).splitlines() if line in shared]
    assert len(taken) > 10  # the case is one where lines are shared


def test_a_computation_every_line_of_which_the_module_before_had_is_taken_whole() -> None:
    """The donated program's computations that are the plain one's, line for line, are the very objects the
    plain parse built (with what they built of themselves); the module equals a parse from scratch."""
    first, second = text("acc_kv_write.gpu_h100.plain"), text("acc_kv_write.gpu_h100.donated")
    alone = parse_hlo_module(second)
    parser = hlo.HloParser()
    before = {c.name: c for c in parse_hlo_module(first, parser).computations}
    after = parse_hlo_module(second, parser)
    assert after == alone
    taken = [c for c in after.computations if before.get(c.name) is c]
    assert taken and len(taken) < len(after.computations)  # the entry differs (its aliases): parsed anew
    assert all(not c.is_entry for c in taken)


def test_a_computation_taken_whole_is_checked_only_where_it_passed_before() -> None:
    """A module that failed its structure check lends no computation as checked: the same broken
    computation in the next module fails again."""
    broken = (
        "HloModule m\n\n%body (p: f32[]) -> f32[] {\n  %p = f32[] parameter(0)\n"
        "  ROOT %r = f32[] add(%p, %missing)\n}\n\n"
        "ENTRY %main (x: f32[]) -> f32[] {\n  %x = f32[] parameter(0)\n"
        "  ROOT %c = f32[] call(%x), to_apply=%body\n}\n"
    )
    parser = hlo.HloParser()
    for _ in range(2):
        with pytest.raises(hlo.HloStructureError, match="missing"):
            parse_hlo_module(broken, parser)


def test_a_module_with_other_source_tables_takes_no_line_from_the_one_before() -> None:
    """The same line under other FileNames names another file: it is parsed again."""
    original = text("acc_kv_write.gpu_h100.plain")
    renamed = original.replace('1 "tests/', '1 "elsewhere/tests/', 1)
    assert renamed != original
    parser = hlo.HloParser()
    before = parse_hlo_module(original, parser)
    after = parse_hlo_module(renamed, parser)
    assert after == parse_hlo_module(renamed)
    sources = {i.source for c in before.computations for i in c.instructions} - {None}
    assert sources and sources != {i.source for c in after.computations for i in c.instructions} - {None}


# ---- why a donated parameter's old value is kept (hand-written modules, no compile) ----------------------------

_OLD_VALUE = """HloModule m, is_scheduled=true, input_output_alias={ {0}: (0, {}, may-alias) }

%body (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  ROOT %n = f32[8]{0} negate(%p)
}

ENTRY %main (x: f32[8]) -> (f32[8], f32[8]) {
  %x = f32[8]{0} parameter(0)
  %c = f32[8]{0} copy(%x)
BODY
}
"""


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # the old value (its copy) is an output beside the update
        (
            "  %u = f32[8]{0} fusion(%x), kind=kLoop, calls=%body\n  ROOT %t = (f32[8]{0}, f32[8]{0}) tuple(%u, %c)",
            "returned",
        ),
        # r reads the old value and the updated one: it must run after the update
        (
            "  %u = f32[8]{0} fusion(%x), kind=kLoop, calls=%body\n  %r = f32[8]{0} add(%c, %u)\n"
            "  ROOT %t = (f32[8]{0}, f32[8]{0}) tuple(%u, %r)",
            "read-after-update",
        ),
        # through a bitcast of the update: still after it
        (
            "  %u = f32[8]{0} fusion(%x), kind=kLoop, calls=%body\n  %b = f32[8]{0} bitcast(%u)\n"
            "  %r = f32[8]{0} add(%c, %u)\n  ROOT %t = (f32[8]{0}, f32[8]{0}) tuple(%b, %r)",
            "read-after-update",
        ),
        # r reads only the old value: it could run first, and the copy is the compiler's choice
        (
            "  %r = f32[8]{0} fusion(%c), kind=kLoop, calls=%body\n  %u = f32[8]{0} fusion(%c), kind=kLoop, "
            "calls=%body\n  ROOT %t = (f32[8]{0}, f32[8]{0}) tuple(%u, %r)",
            "scheduling",
        ),
    ],
    ids=["returned", "read-after-update", "through-a-bitcast", "scheduling"],
)
def test_why_a_donated_inputs_old_value_is_kept(body: str, expected: str) -> None:
    from fieldmem.xla.hlo import old_value_use

    module = parse_hlo_module(_OLD_VALUE.replace("BODY", body))
    assert old_value_use(module, 0) == expected


def test_an_input_no_output_reuses_has_no_old_value_reason() -> None:
    from fieldmem.xla.hlo import old_value_use

    text = _OLD_VALUE.replace("input_output_alias={ {0}: (0, {}, may-alias) }", "").replace(
        "BODY", "  %u = f32[8]{0} fusion(%x), kind=kLoop, calls=%body\n  ROOT %t = (f32[8]{0}, f32[8]{0}) tuple(%u, %c)"
    )
    module = parse_hlo_module(text)
    assert old_value_use(module, 0) is None
    assert old_value_use(module, 5) is None  # no such parameter
