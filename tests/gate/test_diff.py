"""The one diff engine, and the two front-ends that use it agreeing on the same pair of reports.

No compile: the reports are built by hand. ``before`` and ``after`` are two
runs of one target where a copy's line moved (lines were inserted above it),
a copy grew (its shape changed), a copy vanished, a copy is new, an alias was
lost and another gained, and the donated footprint grew.
"""

from __future__ import annotations

from fieldmem.gate.baseline import Baseline, compare_to_baseline, entry_from_result
from fieldmem.gate.compare import compare_reports
from fieldmem.gate.diff import CopyRecord, change_text, copy_record, match_aliases, match_copies, moved
from fieldmem.model.comparison import Change
from fieldmem.model.copies import Alias, Copy
from fieldmem.model.memory import MemoryFigures
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult
from fieldmem.model.word_sets import CopyKind
from fieldmem.request.tolerance import FIGURES, Tolerance, Tolerances

from factories import KIB, MIB, make_copy, make_memory, make_report, make_result, make_variant


def _memory(footprint: int) -> MemoryFigures:
    """1 MiB in, out and aliased; peak, footprint and live peak all ``footprint``."""
    return make_memory(MIB, MIB, MIB, peak_bytes=footprint, footprint_bytes=footprint)


def _copy(
    source: str, nbytes: int, *, kind: CopyKind = "loop", shape: str = "f32[256,256]{1,0}", of: str | None = None
) -> Copy:
    """A copy at ``source`` whose instruction is named after its line."""
    return make_copy(
        nbytes, kind=kind, of=of, source=source, shape=shape, computation="main", instruction=f"copy.{source[-2:]}"
    )


MOVED_BEFORE = _copy("model.py:14", MIB, kind="parameter", shape="f32[512,512]{1,0}", of="state.u")
MOVED_AFTER = _copy("model.py:17", MIB, kind="parameter", shape="f32[512,512]{1,0}", of="state.u")
GROWN_BEFORE = _copy("model.py:20", 256 * KIB)
GROWN_AFTER = _copy("model.py:20", MIB, shape="f32[512,512]{1,0}")
VANISHED = _copy("model.py:30", 64 * KIB, kind="other", shape="f32[128,128]{1,0}")
NEW = _copy("model.py:40", 128 * KIB, shape="f32[128,256]{1,0}")


def _result(copies: tuple[Copy, ...], aliases: tuple[Alias, ...], footprint: int) -> TargetResult:
    return make_result(
        plain=make_variant("plain", _memory(8 * MIB)),
        donated=make_variant(
            "donated", _memory(footprint), donated_arguments=("state",), aliases=aliases, copies=copies
        ),
    )


U = Alias("state.u", 0, "out.u", 0, MIB)
V = Alias("state.v", 1, "out.v", 1, MIB)
W = Alias("state.w", 2, "out.w", 2, MIB)
BEFORE = make_report((_result((MOVED_BEFORE, GROWN_BEFORE, VANISHED), (U, V), 2 * MIB),))
AFTER = make_report((_result((MOVED_AFTER, GROWN_AFTER, NEW), (U, W), 3 * MIB),))


def _gate(before: Report, after: Report) -> tuple[Change, ...]:
    """Every change the baseline gate finds: regressions, then improvements."""
    baseline = Baseline(
        path="base.json",
        fieldmem_version="0.1.0",
        jax_version=before.jax_version,
        jaxlib_version=before.jaxlib_version,
        backend=before.backend,
        platform_version=before.platform_version,
        device_kinds=("cpu",),
        entries=tuple(entry_from_result(r, before) for r in before.results),
    )
    gated = compare_to_baseline(after, baseline, Tolerances()).baseline
    assert gated is not None
    return gated.regressions + gated.improvements


def _compared(before: Report, after: Report) -> tuple[tuple[str, Change], ...]:
    """Every significant difference ``compare`` finds, with its field."""
    (row,) = compare_reports([("before.json", before), ("after.json", after)]).rows
    return tuple((d.field, d.change) for d in row.differences if d.significant)


# ----------------------------------------------------------------------------
# The engine


def test_copies_match_across_a_moved_line_and_a_changed_shape_but_not_a_vanished_copy() -> None:
    before = [copy_record(c) for c in (MOVED_BEFORE, GROWN_BEFORE, VANISHED)]
    after = [copy_record(c) for c in (MOVED_AFTER, GROWN_AFTER, NEW)]
    pairs = match_copies(before, after)
    assert [(p.before, p.after) for p in pairs] == [
        (before[0], after[0]),  # the line moved: the same copy
        (before[1], after[1]),  # the shape changed: the same copy, grown
        (before[2], None),  # vanished
        (None, after[2]),  # new
    ]


def test_the_strictest_match_wins_and_layouts_do_not_count() -> None:
    here = CopyRecord("loop", MIB, "f32[512,512]{1,0}", None, "model.py:20")
    there = CopyRecord("loop", MIB, "f32[512,512]{1,0}", None, "model.py:40")
    gpu = CopyRecord("loop", MIB, "f32[512,512]{0,1:T(8,128)}", None, "model.py:40")
    pairs = match_copies([here, there], [gpu, here])
    assert [(p.before, p.after) for p in pairs] == [(here, here), (there, gpu)]


def test_two_equal_copies_pair_one_to_one() -> None:
    loop = CopyRecord("loop", MIB, "f32[512,512]{1,0}", None, "model.py:20")
    pairs = match_copies([loop], [loop, loop])
    assert [(p.before, p.after) for p in pairs] == [(loop, loop), (None, loop)]


def test_aliases_match_by_donated_input_leaf() -> None:
    rerouted = Alias("state.u", 0, "out.x", 3, MIB)
    aliases = match_aliases((U, V), (rerouted, W))
    assert (aliases.lost, aliases.new, aliases.rerouted) == ((V,), (W,), ((U, rerouted),))


def test_moved_measures_both_directions_on_the_reference() -> None:
    ten_percent = Tolerance(relative=0.1)
    assert [moved(ten_percent, 1000, after) for after in (1100, 1101, 900, 899)] == [0, 1, 0, -1]
    assert [moved(Tolerance(), 1000, after) for after in (1000, 1001, 999)] == [0, 1, -1]


def test_one_change_text() -> None:
    assert change_text(2 * MIB, 4 * MIB) == "2.0 MiB → 4.0 MiB (+2.0 MiB, +100.0%)"
    assert change_text(4 * MIB, 2 * MIB) == "4.0 MiB → 2.0 MiB (-2.0 MiB, -50.0%)"
    assert change_text(0, KIB) == "0 B → 1.0 KiB (+1.0 KiB)"


# ----------------------------------------------------------------------------
# The baseline gate and compare agree


def _copy_changes(changes: tuple[Change, ...]) -> set[tuple[object, object, str | None]]:
    return {(c.before, c.after, c.source) for c in changes if c.kind == "copy"}


def test_gate_and_compare_find_the_same_copy_changes() -> None:
    gated = _gate(BEFORE, AFTER)
    compared = tuple(change for field, change in _compared(BEFORE, AFTER) if field == "donated.copies")
    expected = {
        (256 * KIB, MIB, "model.py:20"),  # grew
        (64 * KIB, None, "model.py:30"),  # vanished
        (None, 128 * KIB, "model.py:40"),  # new
    }
    assert _copy_changes(gated) == _copy_changes(compared) == expected
    # the copy whose line moved is the same copy to both, and unchanged
    assert not [c for c in gated + compared if c.source in ("model.py:14", "model.py:17")]


def test_gate_and_compare_find_the_same_alias_changes() -> None:
    gated = {(c.subject, c.after is None) for c in _gate(BEFORE, AFTER) if c.kind == "alias"}
    compared = {(c.subject.split(" → ")[0], c.after is None) for _, c in _compared(BEFORE, AFTER) if c.kind == "alias"}
    assert gated == compared == {("state.v", True), ("state.w", False)}


def test_gate_and_compare_find_the_same_figure_changes() -> None:
    gated = {
        (FIGURES[c.subject.removeprefix("donated ")], c.before, c.after)
        for c in _gate(BEFORE, AFTER)
        if c.kind == "figure"
    }
    compared = {
        (field.removeprefix("donated."), c.before, c.after)
        for field, c in _compared(BEFORE, AFTER)
        if c.kind == "figure"
    }
    figures = {"footprint_bytes", "live_peak_bytes", "peak_bytes"}
    assert gated == compared == {(figure, 2 * MIB, 3 * MIB) for figure in figures}


def test_the_same_report_twice_is_no_change_to_either() -> None:
    assert _gate(AFTER, AFTER) == ()
    assert _compared(AFTER, AFTER) == ()


def test_compare_shows_exactly_the_figures_a_baseline_gates() -> None:
    from fieldmem.gate import compare

    assert sorted(compare.FIGURES) == sorted(FIGURES.values()) == sorted(compare.FIGURE_LABELS)
