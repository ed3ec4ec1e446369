"""The baseline gate, ``fieldmem compare`` and ``--watch`` agree on the same pair of runs.

All three read the deltas of one engine (:func:`fieldmem.gate.diff.diff_targets`) and only classify and
word them. Here one pair of hand-built reports goes to each: a copy that grew, one whose line moved
(lines above it were edited), one gone and one new; an alias lost and its donation become unusable; a
figure that grew; a verdict that turned. No compile.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fieldmem.gate.baseline import compare_to_baseline, entry_from_result, load_baseline, save_baseline
from fieldmem.gate.compare import compare_reports, result_changes
from fieldmem.gate.diff import Delta, diff_targets, facts_of_result
from fieldmem.gate.regressions import facts_of_entry
from fieldmem.model.comparison import Change
from fieldmem.model.copies import Alias, UnusableDonation
from fieldmem.model.report import Report

from factories import MIB, make_copy, make_memory, make_report, make_result, make_variant


def _pair() -> tuple[Report, Report]:
    u, v = Alias("u", 0, "out[0]", 0, MIB), Alias("v", 1, "out[1]", 1, MIB)
    before = make_result(
        donated=make_variant(
            "donated",
            make_memory(8 * MIB, 8 * MIB, 2 * MIB),
            aliases=(u, v),
            copies=(
                make_copy(MIB, kind="loop", source="model.py:20", trip_count=4, instruction="copy.1"),
                make_copy(MIB, of="u", source="model.py:30", instruction="copy.2"),
                make_copy(MIB, kind="other", source="model.py:40", shape="f32[256,1024]{1,0}", instruction="copy.3"),
            ),
        )
    )
    after = make_result(
        in_place=False,
        summary="not in place: v is donated but unusable",
        donated=make_variant(
            "donated",
            make_memory(8 * MIB, 8 * MIB, MIB),
            aliases=(u,),
            unusable_donations=(UnusableDonation("v", 1, MIB, "every output of its size is taken", "taken"),),
            copies=(
                # the same loop copy, grown (another instruction name: matched by what it copies)
                make_copy(2 * MIB, kind="loop", source="model.py:20", trip_count=4, shape="f32[1024,512]{1,0}"),
                # the same parameter copy, its line moved by an edit above it
                make_copy(MIB, of="u", source="model.py:33", instruction="copy.7"),
                make_copy(4 * MIB, kind="layout", source="model.py:50", instruction="copy.9"),  # new
            ),
        ),
    )
    return make_report((before,)), make_report((after,))


def _baseline_changes(before: Report, after: Report, tmp_path: Path) -> list[Change]:
    path = tmp_path / "baseline.json"
    save_baseline(path, before, root=tmp_path)
    gated = compare_to_baseline(after, load_baseline(path), root=tmp_path).baseline
    assert gated is not None
    return [*gated.regressions, *gated.improvements]


def _facts(change: Change) -> tuple[object, ...]:
    return (change.kind, change.before, change.after, change.source)


def test_watch_says_what_compare_says_in_the_same_words(tmp_path: Path) -> None:
    before, after = _pair()
    row = compare_reports([("a.json", before), ("b.json", after)]).rows[0]
    watched = result_changes(before.results[0], after.results[0], before.min_bytes)
    compared = [d.change for d in row.differences]
    assert [_facts(c) for c in watched] == [_facts(c) for c in compared]
    assert [f"b.json: {c.message}" for c in watched] == [c.message for c in compared]


def test_the_gate_and_compare_find_the_same_changes_of_the_donated_variant(tmp_path: Path) -> None:
    before, after = _pair()
    gated = _baseline_changes(before, after, tmp_path)
    row = compare_reports([("a.json", before), ("b.json", after)]).rows[0]
    compared = [d.change for d in row.differences if d.field.startswith("donated.") or d.field == "verdict"]

    def by_kind(changes: list[Change], kind: str) -> list[tuple[object, ...]]:
        return sorted((_facts(c) for c in changes if c.kind == kind), key=repr)

    # copies: the grown, the gone and the new one, by their bytes per call and line; the moved one is neither
    assert by_kind(gated, "copy") == by_kind(compared, "copy")
    assert sorted(((c.before, c.after) for c in gated if c.kind == "copy"), key=repr) == sorted(
        [(4 * MIB, 8 * MIB), (MIB, None), (None, 4 * MIB)], key=repr
    )
    assert not any("model.py:33" in c.message or "model.py:30" in c.message for c in [*gated, *compared])
    # aliases lost and donations become unusable: the same input leaves
    assert [c.subject for c in gated if c.kind == "alias"] == ["v"]
    assert [c.subject for c in compared if c.kind == "alias"] == ["v → out[1]"]
    assert [c.subject for c in gated if c.kind == "donation"] == [c.subject for c in compared if c.kind == "donation"]
    assert [c.subject for c in gated if c.kind == "donation"] == ["v"]
    # the figures that moved (exact tolerance), with the same before and after
    gated_figures = sorted((c.subject, c.before, c.after) for c in gated if c.kind == "figure")
    compared_figures = sorted(
        (c.subject.replace("XLA peak", "xla-peak").replace("live peak", "live-peak"), c.before, c.after)
        for c in compared
        if c.kind == "figure"
    )
    assert gated_figures == compared_figures and gated_figures
    assert [c.kind for c in gated].count("verdict") == [c.kind for c in compared].count("verdict") == 1


def test_a_baseline_entry_keeps_every_fact_the_gate_diffs() -> None:
    """The deltas against a baseline entry saved from a run are those against the run itself (the gated
    kinds, on the donated variant): a baseline loses nothing the gate reads."""
    before, after = _pair()
    from_entry = diff_targets(
        facts_of_entry(entry_from_result(before.results[0], before)), facts_of_result(after.results[0]), 1024
    )
    from_report = diff_targets(facts_of_result(before.results[0]), facts_of_result(after.results[0]), 1024)

    def gated(deltas: tuple[Delta, ...]) -> list[tuple[str, str, str, str | None]]:
        return [
            (d.kind, d.change, d.subject, d.variant)
            for d in deltas
            if d.kind in ("verdict", "alias", "donation", "copy", "figure")
        ]

    assert gated(from_entry) == gated(from_report)
    kinds = {(d.kind, d.change) for d in from_report}
    assert {("copy", "grew"), ("copy", "gone"), ("copy", "new"), ("alias", "gone"), ("donation", "new")} <= kinds
    assert ("copy", "shrank") not in kinds  # the moved copy is the same copy, unchanged


def test_a_donation_below_min_bytes_is_no_change_to_any_of_them(tmp_path: Path) -> None:
    """A 4-byte scalar whose donation becomes unusable decides no verdict (below --min-bytes), so the gate,
    compare and watch all leave it out; at min_bytes, all three report it."""
    for size, reported in ((4, False), (1024, True)):
        before, after = _pair()
        scalar = UnusableDonation("f", 2, size, "no output has its size", "no-output-of-size")
        donated = after.results[0].variants["donated"]
        donated = dataclasses.replace(donated, unusable_donations=(*donated.unusable_donations, scalar))
        after = make_report(
            (dataclasses.replace(after.results[0], variants={**after.results[0].variants, "donated": donated}),)
        )
        (tmp_path / str(size)).mkdir()
        gated = _baseline_changes(before, after, tmp_path / str(size))
        compared = [d.change for d in compare_reports([("a.json", before), ("b.json", after)]).rows[0].differences]
        watched = result_changes(before.results[0], after.results[0], before.min_bytes)
        for changes in (gated, compared, watched):
            assert ("f" in [c.subject for c in changes if c.kind == "donation"]) is reported, changes
