"""``fieldmem fit``: knobs, the search, what moved the peak, the gates, the document and its renderers.

The search is driven here by a stand-in checker that answers each point from a formula (no compile), so
that the bisection can be held against brute force over many ranges, seeds and frontiers, and the
compile bound of ⌈log2(count)⌉ + 2 per row checked on every one. Real compiles of the same search are in
``tests/frontends/test_fit_compile.py``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest

from fieldmem.findings.fit import fit_checks, fit_point, monotone_notes
from fieldmem.gate.fit import baseline_to_save, compare_fits, compare_to_baseline, load_fit_report
from fieldmem.model.errors import OptionError
from fieldmem.model.fit_report import FitPoint, FitReport, FitRow, Knob, KnobValue
from fieldmem.model.memory import MemoryFigures, PeakBreakdown, PeakLine
from fieldmem.model.report import Report
from fieldmem.model.target import ErrorInfo, TargetResult, Variant
from fieldmem.model.verdict import Check, Finding, Verdict
from fieldmem.parent.fit import search
from fieldmem.render import RenderOptions
from fieldmem.render.fit import FIT_RENDERERS, render_comparison
from fieldmem.render.schema import DOCUMENTS, document_schema
from fieldmem.request.fit import (
    FitFlags,
    build_fit_request,
    fit_plan,
    parse_fit_tables,
    parse_floor,
    parse_knob,
    parse_knob_value,
    parse_knobs,
)

GiB = 2**30
MiB = 2**20
CAPACITY = 16 * GiB

HEADER = Report(
    fieldmem_version="0.1.0",
    jax_version="0.10.2",
    jaxlib_version="0.10.2",
    backend="tpu:v5e",
    platform_version=None,
    devices=(),
    results=(),
)


# ---- knobs (pure) --------------------------------------------------------------------------------


def test_a_range_a_stepped_range_a_list_and_one_value() -> None:
    batch = parse_knob("batch=1..4096")
    assert (batch.kind, batch.low, batch.high, batch.step, batch.count, batch.bound) == ("range", 1, 4096, 1, 4096, 14)
    stepped = parse_knob("batch=8..4100:8")  # the last value the steps reach
    assert (stepped.high, stepped.count, stepped.value(2), stepped.index(24), stepped.index(25)) == (
        4096,
        512,
        24,
        2,
        None,
    )
    remat = parse_knob("remat=none,dots,full")
    assert (
        remat.kind == "list" and remat.values == ("none", "dots", "full") and remat.describe() == "remat=none,dots,full"
    )
    assert parse_knob("seq=1024").values == (1024,)
    assert [parse_knob_value(t) for t in ("256", "-3", "0.5", "1e3", "true", "false", "dots", "2x2")] == [
        256,
        -3,
        0.5,
        1000.0,
        True,
        False,
        "dots",
        "2x2",
    ]
    assert [type(v) for v in parse_knob("x=1,true,1.0,a").values] == [int, bool, float, str]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("batch", "write --vary NAME=LOW..HIGH"),
        ("=1..4", "write --vary NAME=LOW..HIGH"),
        ("1batch=1..4", "is not a keyword parameter name"),
        ("batch=8..1", "the range ends below its start"),
        ("batch=1..8:0", "the step must be at least 1"),
        ("batch=1..x", "a range is two integers"),
        ("remat=none,,full", "an empty value"),
        ("remat=", "an empty value"),
        ("remat=none,none", "'none' is listed twice"),
        ("batch=0..9999999999999999999999", "more than 2**62 values"),
    ],
)
def test_a_knob_that_does_not_parse_is_one_line(text: str, says: str) -> None:
    with pytest.raises(OptionError) as raised:
        parse_knob(text)
    assert says in raised.value.message and "\n" not in raised.value.message


def test_knobs_together() -> None:
    with pytest.raises(OptionError, match="batch and seq are both ranges"):
        parse_knobs(["batch=1..8", "seq=128..1024"])
    with pytest.raises(OptionError, match="batch is varied twice"):
        parse_knobs(["batch=1..8", "batch=2,4"])
    knobs = parse_knobs({"batch": range(8, 4097, 8), "remat": ["none", "full"], "seq": 2048}, "vary=")
    assert [k.describe() for k in knobs] == ["batch=8..4096:8", "remat=none,full", "seq=2048"]
    assert parse_knobs(["batch=8..8"])[0].kind == "list"  # one value: nothing to search
    assert parse_floor("batch=256") == ("batch", 256)
    with pytest.raises(OptionError, match="with an integer"):
        parse_floor("batch=lots")


def test_a_floor_is_on_the_range() -> None:
    knobs = parse_knobs(["batch=1..64", "remat=none,full"])
    with pytest.raises(OptionError, match="the range knob is batch"):
        fit_plan("m:step", knobs, floors=(("remat", 1),))
    with pytest.raises(OptionError, match=r"above the range batch=1\.\.64"):
        fit_plan("m:step", knobs, floors=(("batch", 65),))
    with pytest.raises(OptionError, match="nothing to vary"):
        fit_plan("m:step", ())
    with pytest.raises(OptionError, match="expects fits"):
        fit_plan("m:step", knobs, expect="in-place")


# ---- the search against brute force (a stand-in checker) --------------------------------------------


def _result(
    footprint: int | None, lines: dict[str, int] | None = None, capacity: int | None = CAPACITY
) -> TargetResult:
    lines = lines if lines is not None else {"model.py:10": footprint or 0}
    peak_total = sum(lines.values())
    memory = MemoryFigures(
        argument_bytes=MiB,
        output_bytes=MiB,
        alias_bytes=MiB,
        temp_bytes=None if footprint is None else footprint - MiB,
        footprint_bytes=footprint,
        live_peak_bytes=peak_total,
    )
    peak = PeakBreakdown(
        bytes=peak_total,
        lines=tuple(
            PeakLine(label, "temporary", size, 1, round(size / peak_total, 4) if peak_total else 0.0)
            for label, size in sorted(lines.items(), key=lambda item: -item[1])
        ),
    )
    variant = Variant(name="donated", donated_arguments=("u",), memory=memory, peak=peak)
    fits = capacity is not None and footprint is not None and footprint <= capacity
    findings: tuple[Finding, ...] = ()
    if capacity is not None and footprint is not None and footprint > capacity:
        findings = (Finding("error", "exceeds-device-memory", "needs more than the chip has", bytes=footprint),)
    verdict = Verdict(in_place=fits, summary="", kind="in-place" if not findings else "does-not-fit", findings=findings)
    check = Check("expect-fits", fits, "fits" if fits else "expected to fit, but", capacity, footprint)
    return TargetResult(
        target="m:step",
        name="m:step",
        status="ok",
        definition="m.py:3",
        donate="all",
        variants={"plain": variant, "donated": variant},
        verdict=verdict,
        checks=(check,),
    )


class Stand:
    """A checker whose step needs ``need(values)`` bytes; counts and records every call."""

    def __init__(self, need: Callable[[dict[str, KnobValue]], int | None], capacity: int | None = CAPACITY) -> None:
        self.need, self.capacity = need, capacity
        self.calls: list[dict[str, KnobValue] | None] = []

    def __call__(self, values: dict[str, KnobValue] | None, donate: Any, suggest: bool) -> tuple[Report, TargetResult]:
        self.calls.append(None if values is None else dict(values))
        size = self.need(values if values is not None else {})
        lines = {"model.py:10": int((size or 0) * 0.75), "argument params": (size or 0) - int((size or 0) * 0.75)}
        return HEADER, _result(size, lines, self.capacity)


def _linear(per: int, base: int = 0, knob: str = "batch") -> Callable[[dict[str, KnobValue]], int]:
    return lambda values: base + per * int(values[knob])  # type: ignore[arg-type]


def _brute(knob: Knob, need: Callable[[dict[str, KnobValue]], int], fixed: dict[str, KnobValue]) -> KnobValue | None:
    fitting = [knob.value(i) for i in range(knob.count) if need({**fixed, knob.name: knob.value(i)}) <= CAPACITY]
    return max(fitting, default=None)  # type: ignore[type-var]


@pytest.mark.parametrize(
    ("spec", "per"),
    [
        ("batch=1..4096", GiB // 7),  # fits up to 112
        ("batch=1..4096", GiB * 20),  # none fits
        ("batch=1..4096", MiB),  # every value fits
        ("batch=8..4096:8", GiB // 13),  # stepped
        ("batch=3..5", 4 * GiB),  # tiny
        ("batch=1..2", 16 * GiB),  # 1 fits, 2 does not
        ("batch=100..100000", MiB // 3),
        ("batch=1..1000000", 12345),
    ],
)
def test_the_bisection_finds_what_brute_force_finds_within_the_bound(spec: str, per: int) -> None:
    knob = parse_knob(spec)
    stand = Stand(_linear(per))
    found = search(fit_plan("m:step", (knob,)), stand, backend="tpu:v5e", min_bytes=1024)
    (row,) = found.rows
    expected = _brute(knob, _linear(per), {})
    assert row.largest == expected
    assert row.compiles == len(stand.calls) == found.compiles <= knob.bound == math.ceil(math.log2(knob.count)) + 2
    if expected is None:
        assert row.status == "none-fit" and row.smallest_failing == knob.low and row.compiles == 1
    elif expected == knob.high:
        assert row.status == "all-fit" and row.smallest_failing is None
    else:
        assert row.status == "found" and row.smallest_failing == expected + knob.step  # type: ignore[operator]
        assert row.boundary is not None and row.boundary.between == "boundary"
    assert len({json.dumps(c, sort_keys=True) for c in stand.calls}) == len(stand.calls)  # no point twice


def test_every_frontier_and_seed_within_the_bound() -> None:
    """Over every frontier position of several ranges, with and without a floor as the first row's seed,
    and with the rows after it seeded by the row before: the answer is brute force's, never past the bound."""
    for spec in ("batch=1..37", "batch=4..64:4", "batch=1..256"):
        knob = parse_knob(spec)
        for frontier in range(knob.count + 1):  # how many values fit (0: none, count: all)
            threshold = knob.value(frontier - 1) if frontier else knob.low - 1  # type: ignore[operator]
            for floor in (None, knob.low, knob.value(knob.count // 2), knob.high):

                def need(values: dict[str, KnobValue], knob: Knob = knob, threshold: int = threshold) -> int:
                    shift = {"none": 0, "dots": knob.step * 3, "full": -knob.step * 2}[str(values["remat"])]
                    return CAPACITY + (int(values["batch"]) - threshold - shift) * MiB  # type: ignore[arg-type]

                plan = fit_plan(
                    "m:step",
                    (knob, parse_knob("remat=none,dots,full")),
                    floors=((knob.name, floor),) if floor is not None else (),
                )
                stand = Stand(need)
                found = search(plan, stand, backend="tpu:v5e", min_bytes=1024)
                for row in found.rows:
                    assert row.largest == _brute(knob, need, row.fixed), (spec, frontier, floor, row)
                    assert row.compiles <= knob.bound, (spec, frontier, floor, row.compiles)
                assert found.compiles == len(stand.calls) <= found.bound


def test_each_row_starts_where_the_row_before_stopped_fitting_and_says_what_moved() -> None:
    def need(values: dict[str, KnobValue]) -> int:
        per = {"none": GiB // 4, "full": GiB // 16}[str(values["remat"])]
        return per * int(values["batch"])  # type: ignore[arg-type]

    plan = fit_plan("m:step", parse_knobs(["batch=1..1024", "remat=none,full"]))
    stand = Stand(need)
    found = search(plan, stand, backend="tpu:v5e", min_bytes=1024)
    none, full = found.rows
    assert (none.largest, none.smallest_failing, full.largest) == (64, 65, 256)
    first_of_full = stand.calls[none.compiles]
    assert first_of_full == {"remat": "full", "batch": 65}  # the seed: where remat=none stopped fitting
    (change,) = found.changes
    assert change.between == "rows" and change.before == {"remat": "none", "batch": 65}
    assert change.after == {"remat": "full", "batch": 65}
    moved = {m.label: m.delta for m in change.moves}
    assert moved["model.py:10"] < 0 and change.live_peak_after_bytes < change.live_peak_before_bytes  # type: ignore[operator]


def test_the_floor_is_the_first_compile_and_at_least_gates_each_row() -> None:
    plan = fit_plan("m:step", parse_knobs(["batch=1..1024", "remat=none,full"]), floors=(("batch", 100),))
    stand = Stand(lambda v: (GiB // 4 if v["remat"] == "none" else GiB // 16) * int(v["batch"]))  # type: ignore[arg-type]
    found = search(plan, stand, backend="tpu:v5e", min_bytes=1024)
    assert stand.calls[0] == {"remat": "none", "batch": 100}
    checks = {c.fixed["remat"]: c for c in found.checks}
    assert not checks["none"].passed and "is 64, below the floor of 100" in checks["none"].message
    assert checks["full"].passed and found.exit_code == 1


def test_expect_fits_compiles_the_factorys_defaults_once() -> None:
    plan = fit_plan("m:step", parse_knobs(["batch=1..8"]), expect="fits")
    stand = Stand(lambda v: GiB * int(v.get("batch", 100)))  # type: ignore[arg-type]
    found = search(plan, stand, backend="tpu:v5e", min_bytes=1024)
    assert stand.calls[0] is None and found.extra_compiles == 1 and found.compiles == found.rows[0].compiles + 1
    assert found.shipped is not None and found.shipped.fits == "no"
    (check,) = found.checks
    assert check.name == "expect-fits" and not check.passed and "at the factory's defaults" in check.message


def test_the_budget_stops_the_search_and_keeps_the_bracket() -> None:
    plan = fit_plan("m:step", parse_knobs(["batch=1..4096", "remat=a,b"]), budget=5, floors=(("batch", 2),))
    stand = Stand(lambda v: GiB // 7 * int(v["batch"]))  # type: ignore[arg-type]
    found = search(plan, stand, backend="tpu:v5e", min_bytes=1024)
    first, second = found.rows
    assert found.compiles == 5 == len(stand.calls)
    assert first.status == "budget" and first.largest is not None and first.smallest_failing is not None
    assert first.largest < 113 <= first.smallest_failing  # type: ignore[operator]
    assert second.status == "budget" and second.compiles == 0 and not second.points
    passed = {c.fixed["remat"]: c.passed for c in found.checks}
    assert passed == {"a": True, "b": False}  # a: a known fit above the floor settles it; b: not known


def test_a_point_that_does_not_compile_ends_its_row_with_exit_2() -> None:
    def check(values: Any, donate: Any, suggest: bool) -> tuple[Report, TargetResult]:
        if values["batch"] % 2:
            error = TargetResult(target="m:step", name="m:step", status="error", error=ErrorInfo("arguments", "odd"))
            return HEADER, error
        return HEADER, _result(GiB * values["batch"])

    found = search(fit_plan("m:step", parse_knobs(["batch=2..9"])), check, backend="tpu:v5e", min_bytes=1024)
    (row,) = found.rows
    assert row.status == "error" and row.error == "odd" and found.exit_code == 2


@pytest.mark.parametrize(("frontier", "status", "largest"), [(64, "found", 64), (200, "unknown", 100)])
def test_a_point_whose_fit_is_not_known_is_not_shown_to_fit(frontier: int, status: str, largest: int) -> None:
    """Above batch=100 XLA doubts its figures (no footprint): the search goes below such a point as below one
    that does not fit, and a frontier that ends at one is not called found."""
    per = CAPACITY // frontier
    stand = Stand(lambda v: None if int(v["batch"]) > 100 else per * int(v["batch"]))  # type: ignore[arg-type]
    found = search(fit_plan("m:step", parse_knobs(["batch=1..4096"])), stand, backend="gpu:h100", min_bytes=1024)
    (row,) = found.rows
    assert (row.status, row.largest, row.smallest_failing) == (status, largest, largest + 1)
    assert row.compiles <= row.bound and found.error is None
    if status == "unknown":
        assert row.error is not None and row.error.startswith("whether batch=101 fits is not known: what it needs")


def test_a_memory_that_is_not_known_is_the_searchs_error() -> None:
    stand = Stand(lambda v: MiB, capacity=None)
    found = search(fit_plan("m:step", parse_knobs(["batch=1..8"])), stand, backend="cpu", min_bytes=1024)
    assert found.error is not None and "give a budget (--max-peak" in found.error.message and found.exit_code == 2
    assert len(stand.calls) == 1
    budget = search(
        fit_plan("m:step", parse_knobs(["batch=1..8"]), max_peak=3 * MiB),
        Stand(lambda v: MiB * int(v["batch"]), capacity=None),
        backend="cpu",
        min_bytes=1024,
    )  # type: ignore[arg-type]
    assert budget.error is None and budget.rows[0].largest == 3


def test_a_footprint_that_shrinks_as_the_value_grows_is_said() -> None:
    points = [
        FitPoint({"batch": 8}, "yes", 1, footprint_bytes=4 * GiB),
        FitPoint({"batch": 16}, "yes", 2, footprint_bytes=3 * GiB),
        FitPoint({"batch": 32}, "no", 3, footprint_bytes=20 * GiB),
        FitPoint({"batch": 64}, "yes", 4, footprint_bytes=2 * GiB),
    ]
    notes = monotone_notes(points, "batch", 1024)
    assert len(notes) == 2  # 16 -> 32 grows as assumed
    assert "batch=16 needs 3.0 GiB, less than batch=8 (4.0 GiB)" in notes[0]
    assert "batch=32 does not fit but batch=64 does" in notes[1]


def test_a_compiler_refusal_is_does_not_fit_and_another_error_is_an_error() -> None:
    refused = TargetResult(
        target="m:step",
        name="m:step",
        status="error",
        error=ErrorInfo("out-of-memory", "does not fit a TPU v5e chip: libtpu refuses to compile it"),
    )
    assert fit_point(refused, {"batch": 9}, 1).fits == "no"
    crashed = TargetResult(
        target="m:step", name="m:step", status="error", error=ErrorInfo("out-of-memory", "the worker died")
    )
    assert fit_point(crashed, {"batch": 9}, 1).fits == "error"
    over_budget = fit_point(_result(2 * GiB), {"batch": 9}, 1, max_peak=GiB)
    assert over_budget.fits == "no" and "--max-peak budget of 1.0 GiB" in over_budget.reason
    assert over_budget.headroom == -GiB


# ---- the document, its renderers, baselines and side by side ----------------------------------------


def _report() -> FitReport:
    plan = fit_plan(
        "m:step", parse_knobs(["batch=1..1024", "remat=none,full"]), floors=(("batch", 100),), expect="fits"
    )
    stand = Stand(lambda v: (GiB // 4 if v.get("remat", "none") == "none" else GiB // 16) * int(v.get("batch", 8)))  # type: ignore[arg-type]
    return FitReport("0.1.0", (search(plan, stand, backend="tpu:v5e", min_bytes=1024),), min_bytes=1024)


def test_the_document_reads_back_and_matches_its_schema() -> None:
    report = _report()
    text = FIT_RENDERERS["json"].render(report, RenderOptions())
    data = json.loads(text)
    assert data["schema"] == "fieldmem.fit/1"
    assert FitReport.from_dict(data) == report
    (document,) = [d for d in DOCUMENTS if d.name == "fit"]
    jsonschema.validate(data, document_schema(document))
    with pytest.raises(Exception, match="is not one this fieldmem reads as a fit document"):
        FitReport.from_dict({**data, "schema": "fieldmem.report/2"})


@pytest.mark.parametrize("name", sorted(FIT_RENDERERS))
def test_every_renderer_on_a_search_and_on_nothing(name: str) -> None:
    renderer = FIT_RENDERERS[name]
    text = renderer.render(_report(), RenderOptions(width=100, verbose=True))
    assert text.strip()
    empty = renderer.render(FitReport("0.1.0", ()), RenderOptions())
    assert empty is not None
    if name == "table":
        assert "largest batch" in text and "what moved the peak" in text and "✗ at-least" in text
        assert "batch=64 fits, 65 does not" in text
    if name == "svg":
        assert text.startswith("<svg") and text.count("<polyline") == 2


def test_a_lower_frontier_against_the_baseline_is_a_regression(tmp_path: Any) -> None:
    before = _report()
    path = tmp_path / "fit.json"
    path.write_text(FIT_RENDERERS["json"].render(baseline_to_save(path, before), RenderOptions()))
    read = load_fit_report(path)
    assert compare_to_baseline(before, read, str(path)).searches[0].baseline.regressions == ()  # type: ignore[union-attr]
    search_ = before.searches[0]
    row = search_.rows[0]
    lowered = FitRow(row.fixed, "found", row.compiles, row.bound, largest=50, smallest_failing=51, points=row.points)
    now = before.with_searches((search_.__class__(**{**search_.__dict__, "rows": (lowered, *search_.rows[1:])}),))
    gated = compare_to_baseline(now, read, str(path))
    (regression,) = gated.searches[0].baseline.regressions  # type: ignore[union-attr]
    assert regression == "remat=none: the largest batch that fits went from 64 to 50"
    assert gated.exit_code == 1
    side = compare_fits([("before", read), ("now", now)])
    assert side.moved == 1
    assert "≠" in render_comparison(side, RenderOptions(width=100))


def test_a_check_document_is_not_a_fit_baseline(tmp_path: Any) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"schema": "fieldmem.report/2", "results": []}))
    with pytest.raises(Exception, match=r"it is fieldmem\.report/2, written by fieldmem check"):
        load_fit_report(path)


# ---- [[tool.fieldmem.fit]] and the request --------------------------------------------------------


def test_fit_tables_and_the_command_line_over_them(tmp_path: Any) -> None:
    tables = parse_fit_tables(
        [
            {
                "target": "m:step",
                "args": "m:make_args",
                "vary": {"batch": "1..64", "remat": ["a", "b"]},
                "at-least": {"batch": 8},
                "budget": 20,
            }
        ],
        "pyproject.toml:",
        lambda spec: spec,
        lambda path: path,
    )
    request = build_fit_request(FitFlags(), tables)
    (plan,) = request.plans
    assert [k.describe() for k in plan.knobs] == ["batch=1..64", "remat=a,b"] and plan.floors == (("batch", 8),)
    overridden = build_fit_request(FitFlags(target="m:step", vary=("batch=1..32",), budget=3), tables)
    assert overridden.plans[0].knobs[0].describe() == "batch=1..32" and overridden.plans[0].budget == 3
    with pytest.raises(OptionError, match="unknown key 'vari': did you mean 'vary'"):
        parse_fit_tables({"target": "m:step", "vari": {}}, "pyproject.toml:", str, str)
    with pytest.raises(OptionError, match="nothing to fit"):
        build_fit_request(FitFlags(), ())
    with pytest.raises(OptionError, match="--format svg is a picture"):
        build_fit_request(FitFlags(target="m:f", vary=("b=1..2",), output_format="svg"), ())


def test_a_point_whose_worker_crashed_on_a_tpu_is_checked_again_without_libtpus_second_compile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """libtpu 0.0.42.1 crashes compiling some programs it refused for not fitting again without that check:
    the point is checked once more with FIELDMEM_TPU_OOM_FIGURES=0, where the driver takes the refusal as
    the answer."""
    import os

    from fieldmem.parent.fit import WorkerChecker
    from fieldmem.request.fit import TPU_OOM_FIGURES_ENV
    from fieldmem.request.options import CheckOptions

    monkeypatch.delenv(TPU_OOM_FIGURES_ENV, raising=False)
    asked: list[str | None] = []

    class Session:
        def check(self, unit: Any, backend: str, options: Any) -> Report:
            asked.append(os.environ.get(TPU_OOM_FIGURES_ENV))
            if os.environ.get(TPU_OOM_FIGURES_ENV) != "0":
                error = ErrorInfo("crash", "its worker process was killed by SIGSEGV while checking it")
            else:
                error = ErrorInfo("out-of-memory", "does not fit a TPU v5e chip: libtpu refuses to compile it")
            result = TargetResult(target="m:step", name="m:step", status="error", error=error)
            return dataclasses.replace(HEADER, results=(result,))

    plan = fit_plan("m:step", parse_knobs(["batch=8..16:8"]))
    _, result = WorkerChecker(plan, "tpu:v5e", CheckOptions(), Session())({"batch": 16}, None, False)
    assert asked == [None, "0"] and TPU_OOM_FIGURES_ENV not in os.environ
    assert result.error is not None and result.error.kind == "out-of-memory"
    assert "(compiled again without that check, the worker crashed)" in result.error.message
    assert fit_point(result, {"batch": 16}, 1).fits == "no"
    asked.clear()
    _, on_cpu = WorkerChecker(plan, "cpu", CheckOptions(), Session())({"batch": 16}, None, False)
    assert on_cpu.error is not None and on_cpu.error.kind == "crash" and asked == [None]  # not asked again

    # a worker that dies again as it starts (libtpu's lockfile held elsewhere) is tried again, a few times
    import fieldmem.parent.fit as engine

    monkeypatch.setattr(engine, "RECHECK_WAIT", 0.0)
    starts: list[int] = []

    class Flaky(Session):
        def check(self, unit: Any, backend: str, options: Any) -> Report:
            starts.append(1)
            if len(starts) == 2:  # the first check again: its worker dies as it loads libtpu
                error = ErrorInfo("crash", "its worker process was killed by SIGABRT while checking it")
                result = TargetResult(target="m:step", name="m:step", status="error", error=error)
                return dataclasses.replace(HEADER, results=(result,))
            return super().check(unit, backend, options)

    _, result = WorkerChecker(plan, "tpu:v5e", CheckOptions(), Flaky())({"batch": 16}, None, False)
    assert len(starts) == 3 and result.error is not None and result.error.kind == "out-of-memory"


def test_a_refused_program_is_not_compiled_again_where_the_environment_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fieldmem.driver.dumps import refusal
    from fieldmem.model.errors import CompileError
    from fieldmem.request.backends import device_memory, parse_backend
    from fieldmem.request.fit import TPU_OOM_FIGURES_ENV

    memory = device_memory(parse_backend("tpu:v5e"))
    said = Exception("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required exceeds available HBM")
    monkeypatch.delenv(TPU_OOM_FIGURES_ENV, raising=False)
    assert refusal(said, "tpu", memory, "tpu:v5e") == (
        "Ran out of memory on HBM, the total memory required exceeds available HBM"
    )  # compiled again without the check
    monkeypatch.setenv(TPU_OOM_FIGURES_ENV, "0")
    with pytest.raises(CompileError) as raised:
        refusal(said, "tpu", memory, "tpu:v5e")
    assert raised.value.kind == "out-of-memory"
    assert raised.value.message.startswith("does not fit a TPU v5e chip: libtpu refuses to compile it for tpu:v5e")
    assert refusal(Exception("INVALID_ARGUMENT: odd"), "tpu", memory, "tpu:v5e") is None  # not a refusal


@pytest.mark.parametrize(
    ("row", "passed", "value", "message"),
    [
        (
            FitRow({"remat": "none"}, "none-fit", smallest_failing=8),
            False,
            None,
            "no batch fits (remat=none): not even 8, below the floor of 100",
        ),
        (
            FitRow({}, "budget", points=(FitPoint({"batch": 128}, "yes"), FitPoint({"batch": 512}, "unknown"))),
            True,
            128,
            "batch=128 fits, at least 100 (the search stopped before its largest: budget)",
        ),
        (
            FitRow({}, "unknown", points=(FitPoint({"batch": 64}, "yes"), FitPoint({"batch": 96}, "no"))),
            False,
            None,
            "batch=96 does not fit, so the largest that fits is below the floor of 100",
        ),
        (
            FitRow({}, "budget", points=(FitPoint({"batch": 64}, "yes"),)),
            False,
            None,
            "the largest batch that fits is not known (--budget stopped the search), so the floor of 100 is not "
            "shown to hold",
        ),
        (
            FitRow({}, "error", error="the worker crashed"),
            False,
            None,
            "the largest batch that fits is not known (the worker crashed), so the floor of 100 is not shown to hold",
        ),
    ],
)
def test_a_row_the_search_did_not_finish_gates_only_on_what_it_found(
    row: FitRow, passed: bool, value: int | None, message: str
) -> None:
    (check,) = fit_checks([row], "batch", [("batch", 100)], None)
    assert (check.name, check.passed, check.value, check.message) == ("at-least", passed, value, message)
    assert (check.knob, check.floor, check.fixed) == ("batch", 100, row.fixed)
