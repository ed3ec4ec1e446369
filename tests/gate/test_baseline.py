"""Baselines: save, load and compare, on synthetic reports (pure, fast), then the whole CI loop.

The synthetic reports are built with the shared factories, with the figures
and copies each test needs; the last tests compile the little project in
``examples/ci`` for real, change its update so it copies a field, and check
what ``fieldmem check --baseline`` says — and that no failure or interruption
ever damages a saved baseline.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fieldmem.gate.baseline import (
    SCHEMA,
    Baseline,
    BaselineError,
    compare_to_baseline,
    entry_from_result,
    gate_as_recorded,
    load_baseline,
    refuse_shared_names,
    save_baseline,
)
from fieldmem.model.comparison import Accepted, BaselineComparison, Change
from fieldmem.model.copies import Alias, Copy, UnusableDonation
from fieldmem.model.environment import DeviceInfo
from fieldmem.model.memory import MemoryFigures
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult
from fieldmem.model.verdict import Check
from fieldmem.request.tolerance import Tolerances

from factories import KIB, make_copy, make_error_result, make_memory, make_report, make_result, make_variant

EXAMPLE_CI = Path(__file__).resolve().parents[2] / "examples" / "ci"


# ---- synthetic reports --------------------------------------------------------


def memory(live_peak: int = 32 * KIB, footprint: int = 32 * KIB, temp: int = 0, peak: int = 32 * KIB) -> MemoryFigures:
    """32 KiB in, out and aliased, with the other figures as given."""
    return make_memory(
        32 * KIB, 32 * KIB, 32 * KIB, temp, peak_bytes=peak, footprint_bytes=footprint, live_peak_bytes=live_peak
    )


def copy(of: str | None = "state.u", source: str | None = "model.py:16", nbytes: int = 16 * KIB, **fields: Any) -> Copy:
    """16 KiB of ``of``, f32[64,64], kept intact for its user at ``source``; keywords go to ``make_copy``."""
    fields.setdefault("shape", "f32[64,64]{1,0}")
    return make_copy(nbytes, of=of, source=source, source_role="user", cause="input-kept-intact", **fields)


ALIASES = (Alias("state.u", 0, "out.u", 0, 16 * KIB), Alias("state.v", 1, "out.v", 1, 16 * KIB))


def result(
    name: str = "ci:step",
    *,
    spec: str = "model.py",
    donated: MemoryFigures | None = None,
    plain: MemoryFigures | None = None,
    copies: tuple[Copy, ...] = (),
    aliases: tuple[Alias, ...] = ALIASES,
    unusable: tuple[UnusableDonation, ...] = (),
    in_place: bool = True,
    checks: tuple[Check, ...] = (),
    seconds: float = 0.5,
) -> TargetResult:
    """``name`` in ``spec`` donating ``state``: one parameter copy without donation, ``copies`` with it."""
    return make_result(
        name,
        plain=make_variant(
            "plain",
            plain or memory(64 * KIB, 64 * KIB, 0, 64 * KIB),
            copies=(copy(instruction="copy.7"),),
            lower_seconds=seconds,
        ),
        donated=make_variant(
            "donated",
            donated or memory(),
            donated_arguments=("state",),
            aliases=aliases,
            unusable_donations=unusable,
            copies=copies,
            lower_seconds=seconds,
            compile_seconds=seconds,
        ),
        in_place=in_place,
        summary=None if in_place else "not in place: out[1]",
        target=spec,
        definition="model.py:15",
        donate="all",
        expect="any",
        checks=checks,
    )


def report(
    *results: TargetResult,
    backend: str = "cpu",
    kind: str = "cpu",
    jax: str = "0.10.2",
    created: str = "2025-01-01T00:00:00+00:00",
) -> Report:
    return make_report(
        results,
        jax_version=jax,
        jaxlib_version=jax,
        backend=backend,
        platform_version=backend,
        devices=(DeviceInfo(0, backend, kind),),
        created=created,
    )


def baseline_of(*results: TargetResult, **kwargs: Any) -> Baseline:
    """The baseline ``save_baseline`` would write for these results, without a file."""
    run = report(*results, **kwargs)
    return Baseline(
        path="fieldmem-baseline.json",
        fieldmem_version="0.1.0",
        jax_version=run.jax_version,
        jaxlib_version=run.jaxlib_version,
        backend=run.backend,
        platform_version=run.platform_version,
        device_kinds=(run.devices[0].kind or "",),
        entries=tuple(entry_from_result(r, run) for r in run.results),
    )


def compare(before: Baseline, *results: TargetResult, tolerance: str = "0", **kwargs: Any) -> BaselineComparison:
    compared = compare_to_baseline(report(*results, **kwargs), before, Tolerances.parse(tolerance))
    assert compared.baseline is not None
    return compared.baseline


def subjects(items: tuple[Change, ...]) -> list[tuple[str, str]]:
    return [(r.kind, r.subject) for r in items]


# ---- save and load ------------------------------------------------------------


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "fieldmem-baseline.json"
    run = report(result(copies=(copy(),)), result("ci:other", spec="other.py"))
    saved = save_baseline(path, run, root=Path.cwd())  # file specs are recorded relative to root
    assert saved.written == ("ci:step", "ci:other") and saved.kept == () and saved.pruned == ()
    loaded = load_baseline(path)
    assert loaded.path == str(path)
    assert json.loads(path.read_text())["schema"] == SCHEMA == loaded.schema
    assert (loaded.backend, loaded.device_kinds, loaded.jax_version) == ("cpu", ("cpu",), "0.10.2")
    assert loaded.entries == tuple(sorted((entry_from_result(r, run) for r in run.results), key=lambda e: e.key))
    (entry,) = [e for e in loaded.entries if e.name == "ci:step"]
    (recorded,) = entry.variants["donated"].copies
    assert (recorded.kind, recorded.input, recorded.bytes, recorded.source) == (
        "parameter",
        "state.u",
        16 * KIB,
        "model.py:16",
    )
    assert entry.variants["donated"].memory["live_peak_bytes"] == 32 * KIB
    assert (entry.backend, entry.device_kind, entry.in_place, entry.status) == ("cpu", "cpu", True, "ok")


def test_a_saved_baseline_changes_only_when_the_findings_do(tmp_path: Path) -> None:
    """Timings, the run's time and HLO instruction names are not recorded: a refresh is a no-op in git."""
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    save_baseline(first, report(result(copies=(copy(instruction="copy.1"),), seconds=0.1)))
    save_baseline(
        second, report(result(copies=(copy(instruction="copy.42"),), seconds=9.0), created="2030-06-06T00:00:00+00:00")
    )
    assert first.read_bytes() == second.read_bytes()
    assert "copy.1" not in first.read_text() and "seconds" not in first.read_text()


def test_saving_keeps_other_targets_and_backends_and_prunes_on_request(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    save_baseline(path, report(result("ci:gone", spec="gone.py"), result()))
    save_baseline(path, report(result(), backend="gpu", kind="NVIDIA H100"))
    saved = save_baseline(path, report(result()))
    assert saved.kept == ("ci:gone", "ci:step")  # gone.py on cpu, and ci:step on the gpu
    keys = {(e.name, e.backend) for e in load_baseline(path).entries}
    assert keys == {("ci:gone", "cpu"), ("ci:step", "cpu"), ("ci:step", "gpu")}
    pruned = save_baseline(path, report(result()), prune=True)
    assert pruned.pruned == ("ci:gone",)  # this backend's only; the gpu entry stays
    assert {(e.name, e.backend) for e in load_baseline(path).entries} == {("ci:step", "cpu"), ("ci:step", "gpu")}


@pytest.mark.parametrize(
    ("run", "message"),
    [
        (report(), "the run checked no target"),
        (report(result(), make_error_result("ci:bad", target="bad.py")), "1 target(s) could not be checked (ci:bad)"),
        (report(result(checks=(Check("max-peak", False, "over budget", 1, 2),))), "the run failed (ci:step max-peak)"),
        (
            dataclasses.replace(
                report(result()),
                baseline=BaselineComparison(
                    "old.json", regressions=(Change("ci:step", "figure", "donated temp", "grew"),)
                ),
            ),
            "1 regression(s) against 'old.json'",
        ),
    ],
    ids=["empty", "errored", "failed-check", "regressed"],
)
def test_an_incomplete_or_failing_run_is_never_saved(tmp_path: Path, run: Report, message: str) -> None:
    path = tmp_path / "b.json"
    save_baseline(path, report(result()))
    before = path.read_bytes()
    with pytest.raises(BaselineError, match=message.replace("(", r"\(").replace(")", r"\)")):
        save_baseline(path, run)
    assert path.read_bytes() == before
    with pytest.raises(BaselineError):
        save_baseline(tmp_path / "new.json", run)
    assert not (tmp_path / "new.json").exists()


def test_a_file_that_is_not_a_baseline_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report(result()).to_dict()))
    before = path.read_bytes()
    with pytest.raises(BaselineError, match=r"not overwriting .*a fieldmem report is not a baseline"):
        save_baseline(path, report(result()))
    assert path.read_bytes() == before


def test_a_failure_inside_the_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "b.json"
    save_baseline(path, report(result()))
    before = path.read_bytes()

    def fail(*_args: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(BaselineError, match=r"cannot write the baseline .*No space left on device"):
        save_baseline(path, report(result(donated=memory(live_peak=64 * KIB))))
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]


def test_a_refreshed_baseline_keeps_its_permissions(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    save_baseline(path, report(result()))
    assert stat.S_IMODE(path.stat().st_mode) & 0o044  # readable by others, like any new file (umask 022)
    path.chmod(0o640)
    save_baseline(path, report(result(donated=memory(live_peak=64 * KIB))))
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist: create it with fieldmem check ... --save-baseline"),
        ("{not json", "is not JSON (Expecting property name enclosed in double quotes at line 1, column 2)"),
        ('{"schema": "fieldmem.baseline/9"}', "has schema 'fieldmem.baseline/9', not one this fieldmem reads"),
        ("[1, 2]", "has no fieldmem schema"),
        ('{"schema": "fieldmem.report/1"}', "a fieldmem report is not a baseline"),
        ('{"schema": "fieldmem.baseline/1", "backend": "cpu"}', "does not match fieldmem.baseline/1: "),
        (None, "is a folder"),
    ],
    ids=["missing", "bad-json", "other-schema", "not-an-object", "a-report", "missing-key", "folder"],
)
def test_load_errors_are_one_line(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "b.json"
    if content is not None:
        path.write_text(content)
    elif "folder" in message:
        path.mkdir()
    with pytest.raises(BaselineError) as error:
        load_baseline(path)
    assert message in error.value.message and "\n" not in error.value.message
    assert str(path) in error.value.message


def test_a_value_of_the_wrong_type_names_its_key(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    save_baseline(path, report(result()))
    data = json.loads(path.read_text())
    data["entries"][0]["variants"]["donated"]["memory"]["temp_bytes"] = "lots"
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError, match=r"entries\[0\]\.variants\.donated\.memory\.temp_bytes should be int"):
        load_baseline(path)


# ---- compare ------------------------------------------------------------------


def test_the_same_findings_compare_clean() -> None:
    before = baseline_of(result(copies=(copy(),)))
    comparison = compare(before, result(copies=(copy(instruction="copy.99"),)))  # renamed instruction
    assert (comparison.regressions, comparison.improvements, comparison.notes) == ((), (), ())
    assert comparison.tolerance == "exact" and comparison.path == "fieldmem-baseline.json"


@pytest.mark.parametrize(("tolerance", "limit"), [("0", 32 * KIB), ("1%", 32 * KIB + 327), ("1KiB", 33 * KIB)])
def test_a_figure_on_both_sides_of_its_tolerance(tolerance: str, limit: int) -> None:
    before = baseline_of(result())
    within = compare(before, result(donated=memory(live_peak=limit)), tolerance=tolerance)
    assert within.regressions == ()
    beyond = compare(before, result(donated=memory(live_peak=limit + 1)), tolerance=tolerance)
    (regression,) = beyond.regressions
    assert (regression.kind, regression.subject, regression.before, regression.after) == (
        "figure",
        "donated live-peak",
        32 * KIB,
        limit + 1,
    )
    assert "ci:step: donated live-peak 32.0 KiB → " in regression.message
    assert regression.source == "model.py:15"


def test_every_gated_figure_and_the_named_tolerances() -> None:
    before = baseline_of(result())
    grown = memory(live_peak=40 * KIB, footprint=40 * KIB, temp=8 * KIB, peak=40 * KIB)
    comparison = compare(before, result(donated=grown), tolerance="peak:25%")
    assert subjects(comparison.regressions) == [("figure", "donated temp")]  # the peaks grew exactly 25%
    comparison = compare(before, result(donated=grown))
    assert [s for _, s in subjects(comparison.regressions)] == [
        "donated live-peak",
        "donated footprint",
        "donated temp",
        "donated xla-peak",
    ]


def test_the_plain_variant_only_where_the_donated_one_says_nothing() -> None:
    before = baseline_of(result())
    both = compare(before, result(donated=memory(live_peak=40 * KIB), plain=memory(80 * KIB, 64 * KIB, 0, 64 * KIB)))
    assert subjects(both.regressions) == [("figure", "donated live-peak")]
    plain_only = compare(before, result(plain=memory(80 * KIB, 64 * KIB, 0, 64 * KIB)))
    assert subjects(plain_only.regressions) == [("figure", "plain live-peak")]


def test_a_new_copy_is_always_a_regression_with_its_input_and_line() -> None:
    before = baseline_of(result())
    comparison = compare(before, result(copies=(copy(source="model.py:31"),)), tolerance="1000%+1GiB")
    (regression,) = comparison.regressions
    assert (regression.kind, regression.subject, regression.after, regression.source) == (
        "copy",
        "parameter copy of state.u",
        16 * KIB,
        "model.py:31",
    )
    assert regression.message == (
        "ci:step: new parameter copy of state.u (16.0 KiB) at model.py:31 (input-kept-intact)"
    )
    assert compare(before, result(copies=(copy(nbytes=KIB - 1),))).regressions == ()  # under --min-bytes


def test_a_growing_copy_against_the_copies_tolerance() -> None:
    before = baseline_of(result(copies=(copy(kind="loop", of=None, trip_count=10),)))
    grown = result(copies=(copy(kind="loop", of=None, trip_count=11),))
    (regression,) = compare(before, grown).regressions
    assert (regression.kind, regression.before, regression.after) == ("copy", 160 * KIB, 176 * KIB)
    assert "loop copy f32[64,64]{1,0} grew 160.0 KiB → 176.0 KiB" in regression.message
    assert compare(before, grown, tolerance="copies:10%").regressions == ()
    assert len(compare(before, grown, tolerance="copies:16KiB-1".replace("-1", "")).regressions) == 0
    assert len(compare(before, grown, tolerance="copies:16383").regressions) == 1
    shape_changed = result(copies=(copy(kind="loop", of=None, trip_count=10, nbytes=32 * KIB, shape="f32[128,64]"),))
    (regression,) = compare(before, shape_changed).regressions
    assert "grew" in regression.message  # matched by kind and source despite its new shape


def test_copies_match_across_renames_and_moved_lines() -> None:
    before = baseline_of(result(copies=(copy(source="model.py:16"), copy(of="state.v", source="model.py:17"))))
    moved = result(
        copies=(
            copy(of="state.v", source="model.py:21", instruction="copy.3"),
            copy(source="model.py:20", instruction="copy.8"),
        )
    )
    comparison = compare(before, moved)
    assert comparison.regressions == () and comparison.improvements == ()


def test_improvements_mirror_regressions() -> None:
    worse = result(
        donated=memory(live_peak=48 * KIB),
        copies=(copy(),),
        in_place=False,
        aliases=ALIASES[:1],
        unusable=(UnusableDonation("state.v", 1, 16 * KIB, "never read", "unused"),),
    )
    regressions = compare(baseline_of(result()), worse).regressions
    improvements = compare(baseline_of(worse), result()).improvements
    expected = [
        ("figure", "donated live-peak"),
        ("copy", "parameter copy of state.u"),
        ("alias", "state.v"),
        ("donation", "state.v"),
        ("verdict", "in place"),
    ]
    assert subjects(regressions) == expected
    assert subjects(improvements) == expected
    by_kind = {r.kind: r for r in regressions}
    assert "alias lost: state.v → out.v (16.0 KiB)" in by_kind["alias"].message
    assert "donation of state.v (16.0 KiB) became unusable (unused): never read" in by_kind["donation"].message
    assert by_kind["verdict"].message == "ci:step: verdict in place → not in place: out[1]"


def test_exit_code_counts_regressions() -> None:
    before = baseline_of(result())
    assert compare_to_baseline(report(result()), before).exit_code == 0
    assert compare_to_baseline(report(result(copies=(copy(),))), before).exit_code == 1


def test_targets_that_error_disappear_or_are_new() -> None:
    before = baseline_of(result(), result("ci:other", spec="model.py"), result("lib:f", spec="lib.py"))
    comparison = compare(before, make_error_result("ci:step"), result("ci:new", spec="model.py"))
    assert subjects(comparison.regressions) == [("status", "status"), ("status", "disappeared")]
    assert comparison.regressions[0].message == "ci:step: now errors: tracing failed"
    assert comparison.regressions[1].target == "ci:other"  # model.py ran but no longer yields it
    assert comparison.notes == (
        "ci:new: new target, not in the baseline (--save-baseline adds it)",
        "1 of the baseline's 3 targets on cpu not checked in this run, so not compared: lib:f",  # lib.py did not run
    )


def test_another_backend_is_flagged_not_compared() -> None:
    before = baseline_of(result(), backend="gpu", kind="NVIDIA H100")
    comparison = compare(before, result(copies=(copy(),)))
    assert comparison.regressions == ()
    assert comparison.notes == (
        "1 baseline entry for gpu (NVIDIA H100) not compared: this run is on cpu (cpu): ci:step",
    )
    other_kind = compare(baseline_of(result(), backend="cpu", kind="other-cpu"), result(copies=(copy(),)))
    assert other_kind.regressions == () and "not compared" in other_kind.notes[0]


@pytest.mark.parametrize(
    ("then", "note"),
    [
        ("0.10.0", None),
        ("0.9.1", "figures can move between jax minor versions"),
        ("0.7.0", "much older"),
        ("1.10.2", "much older than or unlike"),
    ],
)
def test_another_jax_version_is_compared_and_flagged(then: str, note: str | None) -> None:
    before = baseline_of(result(), jax=then)
    comparison = compare(before, result(copies=(copy(),)))
    assert len(comparison.regressions) == 1  # compared all the same
    if note is None:
        assert comparison.notes == ()
    else:
        (text,) = comparison.notes
        assert note in text and f"jax {then}" in text


def test_a_regression_under_another_jax_names_the_upgrade_as_its_cause() -> None:
    """``fieldmem check --jax NEW --baseline OLD.json``: what the upgrade breaks fails the gate, named."""
    before = baseline_of(result(), jax="0.9.2")
    comparison = compare(before, result(copies=(copy(),)), jax="0.10.2")
    (regression,) = comparison.regressions
    assert regression.cause == "jax 0.9.2 → 0.10.2"
    assert regression.message.startswith("ci:step: new parameter copy of state.u")
    assert regression.message.endswith("[jax 0.9.2 → 0.10.2: the upgrade's, unless the code changed too]")
    # under the same jax, a regression is the code's: no cause is named
    (same,) = compare(baseline_of(result()), result(copies=(copy(),))).regressions
    assert same.cause is None and "upgrade" not in same.message


# ---- recording a run as it is (--accept-current) ------------------------------

NOT_IN_PLACE = Check("expect-in-place", False, "expected in place with donation, but it is not")


def not_yet(*checks: Check, copies: tuple[Copy, ...] = ()) -> TargetResult:
    """``ci:step`` as a team adopting fieldmem finds it: not in place, its expectation failing."""
    return result(in_place=False, checks=checks or (NOT_IN_PLACE,), copies=copies)


def test_accept_current_records_the_failing_checks_and_the_gate_accepts_them_while_they_fail_alike(
    tmp_path: Path,
) -> None:
    path = tmp_path / "b.json"
    first = report(not_yet())
    with pytest.raises(BaselineError, match="--accept-current"):  # the refusal says how to record it as it is
        save_baseline(path, first)
    save_baseline(path, first, accept_current=True)
    (entry,) = json.loads(path.read_text())["entries"]
    assert entry["accepted_checks"] == [{"name": "expect-in-place", "limit": None}]
    before = load_baseline(path)

    # the same check failing the same way: accepted, shown as such, exit 0
    again = compare_to_baseline(report(not_yet()), before)
    assert again.exit_code == 0 and again.baseline is not None
    assert again.baseline.accepted == (Accepted("ci:step", ("expect-in-place",)),)
    assert again.accepted_failures(again.results[0]) == (NOT_IN_PLACE,)
    assert again.baseline.regressions == ()
    # ... but not a regression: a new copy still fails the run
    assert compare_to_baseline(report(not_yet(copies=(copy(),))), before).exit_code == 1
    # a check the baseline did not accept fails the run
    over = Check("max-peak", False, "over budget", 1024, 32 * KIB)
    assert compare_to_baseline(report(not_yet(NOT_IN_PLACE, over)), before).exit_code == 1
    # an accepted check that passes now is an improvement
    fixed = compare_to_baseline(report(result(checks=(dataclasses.replace(NOT_IN_PLACE, passed=True),))), before)
    assert fixed.exit_code == 0 and fixed.baseline is not None
    assert [(c.kind, c.subject, c.before, c.after) for c in fixed.baseline.improvements][-1] == (
        "check",
        "expect-in-place",
        "failed",
        "passed",
    )

    # a budget is accepted failing at the limit it was recorded with, not at another
    save_baseline(path, report(not_yet(over)), accept_current=True)
    budget = load_baseline(path)
    assert compare_to_baseline(report(not_yet(over)), budget).exit_code == 0
    tighter = compare_to_baseline(report(not_yet(dataclasses.replace(over, limit=512))), budget)
    assert tighter.exit_code == 1 and tighter.baseline is not None
    assert any("accepted it failing with the limit 1.0 KiB" in note for note in tighter.baseline.notes)


def test_a_refresh_keeps_accepting_what_still_fails_and_an_older_file_accepts_nothing(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    save_baseline(path, report(not_yet()), accept_current=True)
    gated = compare_to_baseline(report(not_yet()), load_baseline(path))
    save_baseline(path, gated)  # a plain refresh of a run the baseline accepted: allowed, still accepted
    assert json.loads(path.read_text())["entries"][0]["accepted_checks"] == [{"name": "expect-in-place", "limit": None}]
    # a passing run's entry has no such key: files are written as before the field existed
    save_baseline(path, report(result()))
    assert "accepted_checks" not in json.loads(path.read_text())["entries"][0]
    # a file without it (any fieldmem before issue 30): nothing accepted, the failed check fails the run
    assert compare_to_baseline(report(not_yet()), load_baseline(path)).exit_code == 1


def test_two_files_with_one_target_name_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    """Issue 49: ``fieldmem.case(..., name="dupsz")`` in a.py and in b.py. One entry would hold one of them,
    and the other's change (or failure, with --accept-current) would be read against it."""
    path = tmp_path / "b.json"
    run = report(result("dupsz", spec="a.py"), not_yet_in("dupsz", "b.py"))
    for save in (
        lambda: save_baseline(path, run, root=tmp_path),
        lambda: save_baseline(path, run, root=tmp_path, accept_current=True),
        lambda: gate_as_recorded(run, path, root=tmp_path),
        lambda: compare_to_baseline(run, baseline_of(result("dupsz", spec="a.py")), root=tmp_path),
    ):
        with pytest.raises(BaselineError) as refused:
            save()
        assert refused.value.message.startswith("a.py and b.py both have a target named 'dupsz'"), refused.value
        assert "\n" not in refused.value.message
    assert not path.exists()
    # one file, two names, and two files, two names: nothing to refuse
    refuse_shared_names(report(result("dupsz", spec="a.py"), result("other", spec="b.py")), tmp_path)


def test_two_names_one_baseline_entry_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file target and the same file written as a module are two names in a report, one in a baseline."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "model.py").write_text("def step(u):\n    return u\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    run = report(result("pkg/model.py:step", spec="pkg/model.py:step"), result("pkg.model:step", spec="pkg.model:step"))
    refuse_shared_names(run)  # as a report names them: two names
    with pytest.raises(BaselineError, match=r"are both named 'pkg/model.py:step' in a baseline"):
        save_baseline(tmp_path / "b.json", run, root=tmp_path)


def test_a_failure_accepted_for_one_file_is_never_accepted_for_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 49: the entry of ``dupsz`` was recorded failing from b.py (--accept-current); a.py's target of that
    name failing the same way is not accepted by it."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "b.json"
    save_baseline(path, report(not_yet_in("dupsz", "b.py")), root=tmp_path, accept_current=True)
    recorded = load_baseline(path)
    assert compare_to_baseline(report(not_yet_in("dupsz", "b.py")), recorded, root=tmp_path).exit_code == 0
    moved = compare_to_baseline(report(not_yet_in("dupsz", "a.py")), recorded, root=tmp_path)
    assert moved.exit_code == 1 and moved.baseline is not None
    assert moved.baseline.accepted == (Accepted("dupsz", ()),)
    assert any("recorded from b.py, and this target is in a.py" in note for note in moved.baseline.notes)


def not_yet_in(name: str, spec: str) -> TargetResult:
    """``name`` in ``spec``, not in place, its expectation failing."""
    return dataclasses.replace(not_yet(), name=name, target=spec)


def test_accept_current_never_records_a_target_that_could_not_be_checked(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    with pytest.raises(BaselineError, match=r"could not be checked \(ci:bad\)"):
        save_baseline(path, report(not_yet(), make_error_result("ci:bad", target="bad.py")), accept_current=True)
    assert not path.exists()


# ---- the whole loop, for real -------------------------------------------------

runner = CliRunner()


def fieldmem(*args: str) -> Any:
    """``fieldmem check ARGS`` in-process, from the current folder; the user's module is imported afresh."""
    from fieldmem.frontends.cli import app

    sys.modules.pop("model", None)  # the test edits model.py between runs
    return runner.invoke(app, ["check", *args], env={"COLUMNS": "200"})


@pytest.fixture
def ci_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    project = tmp_path / "ci"
    shutil.copytree(EXAMPLE_CI, project, ignore=shutil.ignore_patterns("__pycache__", "fieldmem-baseline.json"))
    monkeypatch.chdir(project)
    yield project
    sys.modules.pop("model", None)


def _copy_a_field(project: Path) -> int:
    """Make ``step`` also return the old ``state.u``; returns the line of the update that now copies it."""
    model = project / "model.py"
    text = model.read_text()
    original = "    return State(u=u, v=state.v * 0.5)\n"
    assert original in text
    model.write_text(text.replace(original, "    return State(u=u, v=state.v * 0.5), state.u\n"))
    lines = text.splitlines()
    return next(n for n, line in enumerate(lines, 1) if "state.u.at[0]" in line)


@pytest.mark.compile
def test_the_ci_example_loop(ci_project: Path) -> None:
    original = (ci_project / "model.py").read_text()
    first = fieldmem()
    assert first.exit_code == 2 and "does not exist: create it" in first.stderr  # the config names it
    saved = fieldmem("--save-baseline", "fieldmem-baseline.json")
    assert saved.exit_code == 0, saved.output
    assert "saved the baseline fieldmem-baseline.json: 1 target recorded" in saved.stderr
    clean = fieldmem()
    assert clean.exit_code == 0, clean.output
    assert "baseline fieldmem-baseline.json (tolerance exact): 0 regressions, 0 improvements" in clean.stdout

    line = _copy_a_field(ci_project)
    regressed = fieldmem()
    assert regressed.exit_code == 1, regressed.output
    section = regressed.stdout[regressed.stdout.index("baseline fieldmem-baseline.json") :]
    assert f"new parameter copy of state.u (16.0 KiB) at model.py:{line}" in section  # field and line
    assert "ci:step: donated live-peak 32.0 KiB → 48.0 KiB" in section  # the figure
    assert "verdict in place → not in place" in section
    baseline_bytes = (ci_project / "fieldmem-baseline.json").read_bytes()
    refused = fieldmem("--save-baseline", "fieldmem-baseline.json")  # a regressed run is never saved
    assert refused.exit_code == 1 and "not saving the baseline" in refused.stderr
    assert (ci_project / "fieldmem-baseline.json").read_bytes() == baseline_bytes

    (ci_project / "model.py").write_text(original)
    reverted = fieldmem()
    assert reverted.exit_code == 0, reverted.output
    assert "0 regressions" in reverted.stdout


@pytest.mark.compile
def test_a_failing_target_leaves_the_baseline_byte_identical(ci_project: Path) -> None:
    assert fieldmem("--save-baseline", "fieldmem-baseline.json").exit_code == 0
    before = (ci_project / "fieldmem-baseline.json").read_bytes()
    (ci_project / "broken.py").write_text("def f(x):\n    return x\n")
    result = fieldmem("model.py", "broken.py:f", "--save-baseline", "fieldmem-baseline.json")
    assert result.exit_code == 2, result.output
    assert "fieldmem: error: not saving the baseline 'fieldmem-baseline.json'" in result.stderr
    assert (ci_project / "fieldmem-baseline.json").read_bytes() == before
    assert sorted(p.name for p in ci_project.iterdir() if p.name.startswith(".")) == []


@pytest.mark.compile
def test_a_first_baseline_on_code_not_yet_in_place_is_one_command(ci_project: Path) -> None:
    """``--save-baseline FILE --accept-current`` records the code as it is, its failing expectation included;
    the gate then passes until something changes."""
    from fieldmem.frontends.cli import app

    assert fieldmem("--save-baseline", "b.json", "--accept-current", "--baseline", "b.json").exit_code == 2
    assert fieldmem("--accept-current").exit_code == 2  # it records: only with --save-baseline
    _copy_a_field(ci_project)  # not in place: the old state.u is returned beside its update
    refused = fieldmem("--expect", "in-place", "--save-baseline", "fieldmem-baseline.json")
    assert refused.exit_code == 1 and "--accept-current" in refused.stderr, refused.output
    assert not (ci_project / "fieldmem-baseline.json").exists()

    recorded = fieldmem("--expect", "in-place", "--save-baseline", "fieldmem-baseline.json", "--accept-current")
    assert recorded.exit_code == 0, recorded.output
    assert "saved the baseline fieldmem-baseline.json: 1 target recorded" in recorded.stderr
    assert "not in place ✗ expect-in-place (accepted)" in recorded.stdout  # shown, not hidden

    again = fieldmem("--expect", "in-place")  # [tool.fieldmem] names the baseline
    assert again.exit_code == 0, again.output
    assert "0 regressions" in again.stdout
    assert "ci:step: expect-in-place fails as recorded: accepted by the baseline" in again.stdout
    github = runner.invoke(app, ["check", "--expect", "in-place", "--format", "github"], env={"COLUMNS": "200"})
    assert github.exit_code == 0, github.output
    assert not any(line.startswith("::error") for line in github.stdout.splitlines())
    assert "::notice file=model.py,line=30,title=fieldmem%3A ci%3Astep%3A expect-in-place failing%2C accepted" in (
        github.stdout
    )

    model = ci_project / "model.py"
    model.write_text(model.read_text().replace(", state.u\n", ", state.u, state.v\n"))  # a copy more
    changed = fieldmem("--expect", "in-place")
    assert changed.exit_code == 1, changed.output
    assert "ci:step: new parameter copy of state.v" in changed.stdout


WIDE = """
import jax.numpy as jnp

import fieldmem


def step(fields):
    return [f.at[0].add(1.0) for f in fields]


def make_args():
    return ([jnp.zeros((32, 32), jnp.float32) + i for i in range(10)],)


fieldmem.case(step, args=make_args, name="wide:step")
"""


@pytest.mark.compile
def test_the_regression_is_the_only_error_annotation_beside_20_accepted_findings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--format github`` with a baseline: what it accepts (20 findings, more than the 10 error annotations
    GitHub shows) is not an error, the regression is the first and only one, and the job summary has all."""
    from fieldmem.frontends.cli import app

    monkeypatch.chdir(tmp_path)
    wide = tmp_path / "wide.py"
    wide.write_text(WIDE)  # not donated: each of the 10 fields is written to a new buffer and copied
    options = ["wide.py", "--donate", "none", "--tolerance", "peak:10%"]
    assert fieldmem(*options, "--save-baseline", "b.json").exit_code == 0
    wide.write_text(WIDE.replace("for f in fields]", "for f in fields], fields[0]"))  # a copy of fields[0] more
    summary = tmp_path / "summary.md"
    summary.write_text("an earlier step's summary\n")
    sys.modules.pop("wide", None)
    run = runner.invoke(
        app,
        ["check", *options, "--baseline", "b.json", "--format", "github"],
        env={"COLUMNS": "200", "GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert run.exit_code == 1, run.output
    lines = run.stdout.splitlines()
    errors = [line for line in lines if line.startswith("::error")]
    assert errors == lines[:1], lines
    assert "title=fieldmem%3A wide%3Astep%3A new copy%2C 1 regression against the baseline::" in errors[0]
    assert "new parameter copy of fields[0] (4.0 KiB) at wide.py:" in errors[0]
    assert not any("new-buffer" in line or "parameter-copy" in line for line in lines)  # accepted: not annotated
    assert lines[-1].startswith("::notice::") and "1 regression" in lines[-1]

    text = summary.read_text()
    assert text.startswith("an earlier step's summary\n## ❌ fieldmem: ")  # appended, as GitHub expects
    assert "\n- ❌ `wide:step`: not in place: " in text  # the target's headline, with its regression
    assert "**1 regression**: new parameter copy of fields\\[0\\]" in text
    for n in range(10):  # every finding, annotated or not
        assert f"fields\\[{n}\\] is not donated and is copied" in text
        assert f"out\\[0\\]\\[{n}\\] (float32\\[32,32\\], 4.0 KiB) is written to a new buffer" in text


SLOW_MODEL = """
import time
from pathlib import Path

import jax.numpy as jnp

import fieldmem


def step(u):
    return u.at[0].add(1.0)


def make_args():
    Path("started").write_text("")
    time.sleep(60)  # the run is interrupted here
    return (jnp.zeros((64, 64), jnp.float32),)


fieldmem.case(step, args=make_args, name="slow:step")
"""


@pytest.mark.compile
@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_interrupted_run_leaves_the_baseline_byte_identical(ci_project: Path, workers: str) -> None:
    """Ctrl-C while a slow target is checked: exit 130, the baseline as it was; with two workers too (only the
    main thread gets the signal: both workers end with it)."""
    assert fieldmem("--save-baseline", "fieldmem-baseline.json").exit_code == 0
    before = (ci_project / "fieldmem-baseline.json").read_bytes()
    (ci_project / "slow.py").write_text(SLOW_MODEL)
    env = dict(os.environ, COLUMNS="120", FIELDMEM_WORKERS=workers)
    process = subprocess.Popen(
        [sys.executable, "-m", "fieldmem", "check", "model.py", "slow.py", "--save-baseline", "fieldmem-baseline.json"],
        cwd=ci_project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (ci_project / "started").exists():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the run never reached the slow target"
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, stderr
    assert "fieldmem: interrupted" in stderr
    assert (ci_project / "fieldmem-baseline.json").read_bytes() == before
    assert [p.name for p in ci_project.iterdir() if p.name.endswith(".tmp")] == []


def test_a_move_below_min_bytes_is_no_regression_unless_a_tolerance_is_set() -> None:
    """Without a tolerance the user set, a figure that grew by less than --min-bytes (4 B) is no regression;
    by more it is; a tolerance the user sets, even 0, decides instead (issue 48)."""
    before = baseline_of(result())
    unset = compare_to_baseline(report(result(donated=memory(live_peak=32 * KIB + 4))), before, Tolerances())
    assert unset.baseline is not None and unset.baseline.regressions == ()
    grown = compare_to_baseline(report(result(donated=memory(live_peak=34 * KIB))), before, Tolerances())
    assert grown.baseline is not None and subjects(grown.baseline.regressions) == [("figure", "donated live-peak")]
    exact = compare(before, result(donated=memory(live_peak=32 * KIB + 4)), tolerance="0")
    assert subjects(exact.regressions) == [("figure", "donated live-peak")]
