"""The HTML report: its text (no browser), its scale, and what headless Chromium renders.

The browser tests open a real report of ``examples/field.py`` in headless
Chromium with a checking script injected into a copy of the page. The script
measures the layout the browser computed (the chart's size, each curve's
points, where the peak markers sit against the rendered byte ticks, the
tables' visible text, which sections are open) and writes its findings as
JSON into an element that ``--dump-dom`` returns; the tests compare them
with the numbers in the Report. Without a browser those tests skip, saying
why — unless ``FIELDMEM_REQUIRE_BROWSER=1`` (as in CI), where they fail.
"""

from __future__ import annotations

import dataclasses
import json
import re
import struct
import time
from pathlib import Path
from typing import Any

import pytest

import fieldmem
from fieldmem.model.comparison import BaselineComparison, Change
from fieldmem.model.copies import Alias
from fieldmem.model.memory import LiveBuffer, Timeline
from fieldmem.model.report import Report
from fieldmem.model.target import ErrorInfo, TargetResult, Variant
from fieldmem.model.units import format_bytes
from fieldmem.model.verdict import Check, Finding, Verdict
from fieldmem.render import RenderOptions, get_renderer
from fieldmem.render.html import OPEN_ALL_UP_TO

from browser import dump_dom, require_browser, screenshot
from factories import (
    MIB,
    make_copy,
    make_error_result,
    make_memory,
    make_report,
    make_result,
    make_timeline,
    make_variant,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _html(report: Report, min_bytes: int = 1024) -> str:
    return get_renderer("html").render(report, RenderOptions(min_bytes=min_bytes))


def _report(results: tuple[TargetResult, ...], baseline: BaselineComparison | None = None) -> Report:
    return make_report(results, created="2025-01-01T00:00:00+00:00", baseline=baseline)


# ----------------------------------------------------------------------------
# A synthetic report: any number of targets, timelines of any length.


def _timeline(points: int, base: int, bump: int, peak_at: int) -> Timeline:
    """``points`` samples over a schedule 50x longer: ``base`` plus a sawtooth, ``bump`` at ``peak_at``."""
    positions = tuple(i * 50 for i in range(points))
    values = [base + (i % 17) * 1024 for i in range(points)]
    values[peak_at] = base + bump
    return make_timeline(
        tuple(values),
        positions,
        length=points * 50,
        peak_position=positions[peak_at],
        peak_instruction=f"fusion.{peak_at}",
        peak_source="model.py:40",
    )


def _variant(name: str, peak: int, points: int, copies: int) -> Variant:
    live = tuple(
        LiveBuffer(
            bytes=peak // 4,
            kind="temporary",
            instruction=f"fusion.{k}",
            shape="f32[512,512]{1,0}",
            source=f"model.py:{k + 10}",
        )
        for k in range(4)
    )
    return make_variant(
        name,
        make_memory(peak // 2, peak // 2),
        donated_arguments=("state",) if name == "donated" else (),
        aliases=(Alias("state.u", 0, "out.u", 0, MIB),) if name == "donated" else (),
        copies=tuple(
            make_copy(
                MIB,
                kind="loop",
                source="model.py:41",
                trip_count=40,
                computation="body.1",
                instruction=f"copy.{k}",
                cause="old-carry-read-after-update",
            )
            for k in range(copies)
        ),
        live_at_peak=live,
        timeline=_timeline(points, peak // 2, peak // 2, points // 3 if name == "plain" else points // 2),
    )


def _synthetic(index: int, points: int = 802, in_place: bool = True) -> TargetResult:
    return make_result(
        f"model{index}:step",
        plain=_variant("plain", 8 * MIB, points, 2),
        donated=_variant("donated", 4 * MIB, points, 0),
        findings=() if in_place else (Finding("error", "loop-copy", "a loop value is copied every iteration"),),
        target=f"pkg.model{index}",
        definition=f"pkg/model{index}.py:12",
        donate="auto",
        expect="in-place",
        savings={"footprint_bytes": 4 * MIB, "live_peak_bytes": 4 * MIB},
        checks=(Check("expect-in-place", in_place, "in place with donation" if in_place else "expected in place"),),
    )


ERRORED = make_error_result(
    "model.py:stepp", "target", "module 'model' has no 'stepp'; did you mean 'step'?", target="model.py:stepp"
)


def _sections(page: str) -> dict[str, bool]:
    """Each target section's id -> whether it starts open."""
    return {
        m.group(1): m.group(2) is not None
        for m in re.finditer(r'<details class="target[^"]*" id="([^"]+)"[^>]*?( open)?>', page)
    }


def test_five_hundred_targets_render_fast_and_bounded() -> None:
    results = tuple(_synthetic(i, in_place=i % 50 != 7) for i in range(500))
    report = _report(results)
    start = time.perf_counter()
    page = _html(report)
    elapsed = time.perf_counter() - start
    assert elapsed < 3.0, f"{elapsed:.2f} s for 500 targets"
    size = len(page.encode())
    assert size < 20 * MIB, format_bytes(size)
    sections = _sections(page)
    assert len(sections) == 500
    # many targets: only the ten that are not in place start open
    assert sorted(i for i, name in enumerate(sections) if sections[name]) == [i for i in range(500) if i % 50 == 7]
    # and the top of the page links to them, ahead of the 500-row summary
    attention = re.search(r'<p class="attention">Needs a look \(10:.*?</p>', page)
    assert attention and attention.start() < page.index('id="summary"')
    assert re.findall(r'href="#t(\d+)-', attention.group(0)) == [str(i) for i in range(500) if i % 50 == 7]
    # each curve is drawn from the decimated timeline: at most one step per kept sample, never more
    curves = re.findall(
        r'<path class="curve (plain|donated)" data-variant="\w+" data-samples="(\d+)" d="([^"]*)"', page
    )
    assert len(curves) == 1000
    assert all(int(samples) == 802 and 400 < path.count("H") <= 802 for _, samples, path in curves)


def test_a_few_targets_all_start_open() -> None:
    results = tuple(_synthetic(i, points=20, in_place=i != 1) for i in range(OPEN_ALL_UP_TO)) + (ERRORED,)
    many = _sections(_html(_report(results)))
    assert len(many) == OPEN_ALL_UP_TO + 1 and sum(many.values()) == 2  # target 1 and the error
    few = _sections(_html(_report(results[: OPEN_ALL_UP_TO - 1] + (ERRORED,))))
    assert len(few) == OPEN_ALL_UP_TO and all(few.values())
    fine = tuple(_synthetic(i, points=20) for i in range(OPEN_ALL_UP_TO + 1))
    page = _html(_report(fine))
    assert not any(_sections(page).values())
    assert f"All {OPEN_ALL_UP_TO + 1} targets are in place and pass their checks." in page


def test_everything_user_supplied_is_escaped() -> None:
    evil = "<script>alert('x')</script>"
    result = dataclasses.replace(
        _synthetic(0, points=10),
        name=f"model:{evil}",
        definition=f"{evil}.py:1",
        verdict=Verdict(
            False, f"not in place {evil}", (Finding("warning", "other-copy", f"see {evil} & <b>this</b>"),)
        ),
    )
    error = dataclasses.replace(ERRORED, name=evil, error=ErrorInfo("target", f"no {evil} here"))
    page = _html(_report((result, error)))
    assert evil not in page and "<b>this</b>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "see &lt;script&gt;" in page and "&amp; &lt;b&gt;this&lt;/b&gt;" in page
    # the page's only script is its own
    assert page.count("<script>") == 1


def test_the_page_is_self_contained() -> None:
    page = _html(_report((_synthetic(0, points=30), ERRORED)))
    assert not re.search(r"https?://|//cdn|@import|<link|<img|<iframe", page)
    # every href is an in-page anchor, and there is no src attribute at all
    assert all(h.startswith("#") for h in re.findall(r'href="([^"]*)"', page))
    assert " src=" not in page


def test_error_results_show_their_error_and_the_header_its_facts() -> None:
    page = _html(_report((ERRORED,)))
    assert "did you mean &#x27;step&#x27;?" in page
    assert '<span class="verdict error">error</span>' in page
    for fact in ("0.10.2", "2025-01-01T00:00:00+00:00", "1.0 KiB", "figures are per device"):
        assert fact in page


def test_empty_report_is_a_page_too() -> None:
    page = _html(_report(()))
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</html>\n")
    assert "No targets were checked." in page


def test_baseline_regressions_improvements_and_notes_are_shown() -> None:
    baseline = BaselineComparison(
        path="fieldmem-baseline.json",
        regressions=(
            Change(
                "model0:step",
                "figure",
                "footprint_bytes",
                "footprint_bytes grew 4.0 MiB -> 8.0 MiB",
                4 * MIB,
                8 * MIB,
                "model.py:12",
            ),
        ),
        improvements=(Change("model0:step", "copy", "copy", "the copy at model.py:41 is gone"),),
        notes=("the baseline was recorded on gpu",),
        tolerance="2%",
    )
    page = _html(_report((_synthetic(0, points=10),), baseline))
    assert "fieldmem-baseline.json" in page and "(tolerance 2%)" in page
    assert "1 regression, 1 improvement" in page
    assert "footprint_bytes grew 4.0 MiB -&gt; 8.0 MiB" in page
    assert "the copy at model.py:41 is gone" in page and "the baseline was recorded on gpu" in page


def test_copies_below_min_bytes_stay_out_of_the_tables() -> None:
    result = _synthetic(0, points=10)
    shown = _html(_report((result,)), min_bytes=MIB)
    assert "copies in the plain (no donation) variant" in shown
    assert "<td>old-carry-read-after-update</td>" in shown  # each row says why XLA kept the copy
    hidden = _html(_report((result,)), min_bytes=MIB + 1)
    assert "copies in the plain (no donation) variant" not in hidden and "old-carry-read-after-update" not in hidden


# ----------------------------------------------------------------------------
# In headless Chromium, on a real report of examples/field.py.

_CHECKER = """
<script type="application/json" id="fieldmem-check"></script>
<script>
var EXPECTED=__EXPECTED__;
(function(){
function box(el){var r=el.getBoundingClientRect();return {x:r.x,y:r.y,w:r.width,h:r.height};}
function shown(el){return el.checkVisibility?el.checkVisibility():!!(el.offsetWidth||el.offsetHeight||el.getClientRects().length);}
var out={sections:{},summary:null};
var summary=document.getElementById('summary');if(summary)out.summary=summary.innerText;
document.querySelectorAll('details.target').forEach(function(s){
  var t={open:s.open,height:box(s).h,summary:s.querySelector('summary').innerText,tables:{},curves:{},peaks:{},ticks:[]};
  var words=s.querySelector('p.verdict-words');t.verdict=words?words.innerText:null;
  var svg=s.querySelector('svg.timeline');t.chart_shown=svg?shown(svg):null;
  if(svg){t.svg=box(svg);t.plot=box(svg.querySelector('rect.plot'));
    var plotBox=svg.querySelector('rect.plot').getBBox(),tickBoxes=[];
    svg.querySelectorAll('g.ytick').forEach(function(g){tickBoxes.push([+g.getAttribute('data-bytes'),g.querySelector('line').getBBox().y]);});
    var low=tickBoxes[0],high=tickBoxes[tickBoxes.length-1];
    svg.querySelectorAll('path.curve').forEach(function(c){var name=c.getAttribute('data-variant');
      var samples=(EXPECTED[s.id]||{})[name],hits=0,misses=[];
      /* each kept sample's step starts at (its position, its bytes): is that point on the drawn stroke? */
      (samples?samples.positions:[]).forEach(function(position,k){
        var x=plotBox.x+position/samples.length*plotBox.width;
        var y=low[1]+(samples.bytes[k]-low[0])/(high[0]-low[0])*(high[1]-low[1]);
        if(c.isPointInStroke(new DOMPoint(x,y)))hits++;else if(misses.length<5)misses.push([position,samples.bytes[k]]);});
      var off=new DOMPoint(plotBox.x+plotBox.width/2,plotBox.y-20);
      t.curves[name]={hits:hits,misses:misses,off_curve_hit:c.isPointInStroke(off),box:box(c),shown:shown(c)};});
    svg.querySelectorAll('g.peak').forEach(function(g){var c=box(g.querySelector('circle'));
      t.peaks[g.getAttribute('data-variant')]={cx:c.x+c.w/2,cy:c.y+c.h/2,label:g.querySelector('text').textContent};});
    svg.querySelectorAll('g.ytick').forEach(function(g){
      t.ticks.push({bytes:+g.getAttribute('data-bytes'),y:box(g.querySelector('line')).y,label:g.querySelector('text').textContent});});}
  s.querySelectorAll('table').forEach(function(tb){t.tables[tb.className]=tb.innerText;});
  out.sections[s.id]=t;});
var filter=document.getElementById('filter');
if(filter){filter.value='not in place';filter.dispatchEvent(new Event('input'));
  out.filtered=[].slice.call(document.querySelectorAll('details.target')).filter(function(s){return !s.hidden;}).map(function(s){return s.id;});
  out.rows_after_filter=[].slice.call(document.querySelectorAll('#summary tbody tr')).filter(function(r){return !r.hidden;}).length;}
document.getElementById('fieldmem-check').textContent=JSON.stringify(out);
})();
</script>
"""


@pytest.fixture(scope="module")
def browser() -> str:
    return require_browser()


def test_without_a_browser_the_tests_skip_unless_ci_requires_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no browser anywhere
    monkeypatch.delenv("FIELDMEM_REQUIRE_BROWSER", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no headless browser: none of chromium, chromium-browser"):
        require_browser()
    monkeypatch.setenv("FIELDMEM_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="FIELDMEM_REQUIRE_BROWSER=1 but no headless browser"):
        require_browser()


@pytest.fixture(scope="module")
def field_report() -> Report:
    report = fieldmem.check(str(EXAMPLES / "field.py"))
    assert [r.status for r in report.results] == ["ok"], report.results
    return report


def _rendered(browser: str, report: Report, folder: Path) -> dict[str, Any]:
    """What the browser laid out for ``report``'s page, as measured by the injected script."""
    page = _html(report)
    assert page.count("</body>") == 1
    checked = folder / "checked.html"
    # the samples each curve must pass through, keyed by section id (ids are t<index>-<name>)
    expected = {
        re.search(rf'<details class="target[^"]*" id="(t{i}-[^"]*)"', page).group(1): {  # type: ignore[union-attr]
            name: {"length": v.timeline.length, "positions": v.timeline.positions, "bytes": v.timeline.live_bytes}
            for name, v in result.variants.items()
            if v.timeline is not None
        }
        for i, result in enumerate(report.results)
        if result.status == "ok"
    }
    checker = _CHECKER.replace("__EXPECTED__", json.dumps(expected))
    checked.write_text(page.replace("</body>", checker + "</body>"), encoding="utf-8")
    dom = dump_dom(browser, checked)
    match = re.search(r'<script type="application/json" id="fieldmem-check">(.*?)</script>', dom, re.S)
    assert match and match.group(1).strip(), f"the checking script wrote nothing; the browser returned:\n{dom[:2000]}"
    return json.loads(match.group(1))


def _bytes_at(y: float, ticks: list[dict[str, Any]]) -> float:
    """The byte value at screen height ``y``, read off the rendered axis ticks."""
    bottom = min(ticks, key=lambda t: t["bytes"])
    top = max(ticks, key=lambda t: t["bytes"])
    return bottom["bytes"] + (bottom["y"] - y) / (bottom["y"] - top["y"]) * (top["bytes"] - bottom["bytes"])


@pytest.mark.compile
def test_chromium_renders_the_field_report(browser: str, field_report: Report, tmp_path: Path) -> None:
    shown = _rendered(browser, field_report, tmp_path)
    [result] = field_report.results
    [section] = shown["sections"].values()
    plain, donated = result.variants["plain"], result.variants["donated"]
    assert result.verdict is not None and result.verdict.in_place

    # the summary row and the section say what the report says
    pair = f"{format_bytes(plain.memory.footprint_bytes)} → {format_bytes(donated.memory.footprint_bytes)}"
    live = f"{format_bytes(plain.memory.live_peak_bytes)} → {format_bytes(donated.memory.live_peak_bytes)}"
    assert result.name in shown["summary"] and pair in shown["summary"] and live in shown["summary"]
    assert "in place" in shown["summary"] and "not in place" not in shown["summary"]
    assert section["open"] and section["verdict"] == result.verdict.summary

    # the chart is laid out, both curves drawn through every kept sample of their timeline
    assert section["chart_shown"] and section["svg"]["w"] > 600 and section["svg"]["h"] > 200
    plot = section["plot"]
    ticks = section["ticks"]
    assert [t["label"] for t in ticks] == [format_bytes(t["bytes"]) for t in ticks]
    assert ticks[0]["bytes"] == 0 and ticks[-1]["bytes"] >= plain.memory.live_peak_bytes
    for variant in (plain, donated):
        timeline = variant.timeline
        assert timeline is not None
        curve = section["curves"][variant.name]
        assert curve["shown"] and curve["hits"] == len(timeline.positions), curve["misses"]
        assert not curve["off_curve_hit"]
        # the peak marker sits inside the plot, at the peak's place in the schedule and at its bytes
        peak = section["peaks"][variant.name]
        assert plot["x"] <= peak["cx"] <= plot["x"] + plot["w"] and plot["y"] <= peak["cy"] <= plot["y"] + plot["h"]
        assert timeline.peak_position is not None
        expected_x = (timeline.peak_position + 0.5) / timeline.length
        assert (peak["cx"] - plot["x"]) / plot["w"] == pytest.approx(expected_x, abs=0.01)
        assert variant.memory.live_peak_bytes is not None
        assert _bytes_at(peak["cy"], ticks) == pytest.approx(
            variant.memory.live_peak_bytes, abs=0.01 * ticks[-1]["bytes"]
        )
        assert format_bytes(variant.memory.live_peak_bytes) in peak["label"]
        # the curve's highest point is the marked peak
        assert curve["box"]["y"] == pytest.approx(peak["cy"], abs=1.5)
    assert section["peaks"]["donated"]["cy"] > section["peaks"]["plain"]["cy"]  # lower on screen: fewer bytes

    # the tables show the report's figures: live buffers, aliases, copies with their source lines
    for variant in (plain, donated):
        text = section["tables"][f"live {variant.name}"]
        assert format_bytes(variant.memory.live_peak_bytes) in text
        for buffer in variant.live_at_peak:
            assert format_bytes(buffer.bytes) in text and (buffer.instruction or "") in text
    assert "field.v" in section["tables"]["live plain"] and "copy" in section["tables"]["live plain"]
    aliases = section["tables"]["aliases"]
    for alias in donated.aliases:
        assert alias.input in aliases and alias.output in aliases
    copies = section["tables"]["copies plain"]
    for copy in (c for c in plain.copies if c.bytes >= 1024):
        assert format_bytes(copy.bytes) in copies and (copy.of_parameter or "") in copies
        assert copy.source and copy.source in copies
    assert "copies donated" not in section["tables"]  # in place: no copy worth showing
    figures = section["tables"]["figures"]
    assert (
        format_bytes(plain.memory.footprint_bytes) in figures
        and format_bytes(donated.memory.footprint_bytes) in figures
    )


@pytest.mark.compile
def test_chromium_collapses_what_needs_no_look_and_filters(browser: str, field_report: Report, tmp_path: Path) -> None:
    [real] = field_report.results
    assert real.verdict is not None
    broken = dataclasses.replace(
        real,
        name="field:broken",
        verdict=dataclasses.replace(real.verdict, kind="not-in-place", summary="not in place: test"),
    )
    results = tuple(dataclasses.replace(real, name=f"field:copy{i}") for i in range(OPEN_ALL_UP_TO)) + (broken,)
    shown = _rendered(browser, _report(results), tmp_path)
    sections = shown["sections"]
    assert len(sections) == OPEN_ALL_UP_TO + 1
    opened = [s for s in sections.values() if s["open"]]
    assert [s["verdict"] for s in opened] == ["not in place: test"]
    assert opened[0]["chart_shown"] and opened[0]["svg"]["h"] > 200
    for closed in (s for s in sections.values() if not s["open"]):
        assert closed["chart_shown"] is False and closed["height"] < 80
    # the filter box (JavaScript) keeps only the matching section and summary row
    assert [sections[i]["verdict"] for i in shown["filtered"]] == ["not in place: test"]
    assert shown["rows_after_filter"] == 1


@pytest.mark.compile
def test_chromium_screenshot_is_a_real_picture(browser: str, field_report: Report, tmp_path: Path) -> None:
    page = tmp_path / "field.html"
    page.write_text(_html(field_report), encoding="utf-8")
    png = screenshot(browser, page, tmp_path / "field.png", window=(1280, 1800))
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert struct.unpack(">II", data[16:24]) == (1280, 1800)
    # a blank or near-blank page of that size compresses to a few KiB; the report is text, lines and colour
    assert len(data) > 60 * 1024, format_bytes(len(data))
