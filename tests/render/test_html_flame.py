"""The HTML report's flame graph of the live peak: its tree, its data, its table, and Chromium's drawing.

The tree (:func:`fieldmem.render.flame.peak_tree`) is checked without a browser: on hand-built
breakdowns for its shape, its caps and its escaping, on a real compile of
``examples/train_step.py`` (flax linen and optax frames under the user's lines) for its sums. Then
headless Chromium opens that report with a checking script injected into a copy of the page: it
measures the icicle the page's script drew, types a line into the search box, clicks a frame and the
root, and writes what it saw as JSON that ``--dump-dom`` returns; the tests compare that with the
Report. Without a browser those tests skip, saying why, unless ``FIELDMEM_REQUIRE_BROWSER=1``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fieldmem.model.memory import PeakBreakdown, PeakBuffer, PeakLine, PeakSource, StackFrame
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult
from fieldmem.model.units import format_bytes
from fieldmem.render import RenderOptions, get_renderer
from fieldmem.render.flame import MAX_BUFFERS, MAX_CHILDREN, FlameNode, flame_data, peak_tree

from browser import dump_dom, require_browser
from factories import KIB, MIB, make_memory, make_report, make_result, make_variant

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TRAIN_STEP = "examples/train_step.py"


def _html(report: Report) -> str:
    return get_renderer("html").render(report, RenderOptions(min_bytes=1024))


def _buffer(size: int, instruction: str, kind: str = "temporary") -> PeakBuffer:
    return PeakBuffer(bytes=size, kind=kind, instruction=instruction, shape="f32[8,8]{1,0}")  # type: ignore[arg-type]


def _user(line: int, function: str = "step") -> StackFrame:
    return StackFrame("model.py", line, function)


LIBRARY = StackFrame("flax/linen/linear.py", 287, "Dense.__call__", library=True)


def _breakdown(sources: list[PeakSource]) -> PeakBreakdown:
    total = sum(s.bytes for s in sources)
    labels: dict[str, int] = {}
    for source in sources:
        label = source.input if source.kind == "argument" else source.line or "constants"
        labels[str(label)] = labels.get(str(label), 0) + source.bytes
    lines = tuple(
        PeakLine(label, "temporary", size, 1, round(size / total, 4))
        for label, size in sorted(labels.items(), key=lambda item: -item[1])
    )
    return PeakBreakdown(bytes=total, sources=tuple(sources), lines=lines)


def _source(kind: str, size: int, **fields: Any) -> PeakSource:
    return PeakSource(kind=kind, bytes=size, buffers=(_buffer(size, f"{kind}.{size}"),), **fields)  # type: ignore[arg-type]


def _with_peaks(plain: PeakBreakdown, donated: PeakBreakdown, name: str = "model:step") -> TargetResult:
    return make_result(
        name,
        plain=make_variant("plain", make_memory(4 * MIB, 4 * MIB, live_peak_bytes=plain.bytes), peak=plain),
        donated=make_variant("donated", make_memory(4 * MIB, 4 * MIB, live_peak_bytes=donated.bytes), peak=donated),
    )


def _sums_hold(tree: FlameNode, sizes: list[int]) -> None:
    """Every node's bytes are its children's sum, a leaf's its sources'; each source is held once."""
    held: list[int] = []
    for node in tree.walk():
        held.extend(node.sources)
        if node.children:
            assert node.bytes == sum(child.bytes for child in node.children), node.search
            assert not node.sources or node.kind == "more", node.search
        else:
            assert node.bytes == sum(sizes[i] for i in node.sources), node.search
    assert sorted(held) == list(range(len(sizes)))


# ----------------------------------------------------------------------------
# The tree, without a browser.


def test_the_tree_groups_arguments_by_path_and_values_by_their_frames() -> None:
    sources = [
        _source("argument", 4 * MIB, input="params['dense']['kernel']"),
        _source("argument", 1 * MIB, input="params['dense']['bias']"),
        _source("argument", 2 * MIB, input="x"),
        _source("temporary", 3 * MIB, line="model.py:20", stack=(_user(10), _user(20, "loss"), LIBRARY)),
        _source("temporary", 1 * MIB, line="model.py:20", stack=(_user(10), _user(20, "loss"))),
        _source("output", 2 * MIB, line="model.py:12", stack=(_user(12),), output="out[0]['dense']"),
        _source("temporary", 512 * KIB, line="model.py:30"),  # a copy XLA kept no metadata for
        _source("temporary", 256 * KIB),  # no source at all
        _source("constant", 64 * KIB),
    ]
    breakdown = _breakdown(sources)
    tree = peak_tree(breakdown)
    _sums_hold(tree, [s.bytes for s in sources])
    assert tree.bytes == breakdown.bytes and tree.kind == "root"
    # arguments first, constants last, the computed values by their outermost frame, largest first
    assert [c.name for c in tree.children] == [
        "arguments",
        "step model.py:10",
        "step model.py:12",
        "model.py:30",
        "no source",
        "constants",
    ]
    arguments = tree.children[0]
    assert [(c.name, c.bytes) for c in arguments.children] == [("params", 5 * MIB), ("x", 2 * MIB)]
    kernel = arguments.children[0].children[0].children[0]
    assert (kernel.name, kernel.search, kernel.kind) == ("['kernel']", "params['dense']['kernel']", "argument")
    # under the user's frames, the library frame marked so; the frame's own temporaries a leaf of their own
    loss = tree.children[1].children[0]
    assert loss.search == "model.py:20 loss" and loss.bytes == 4 * MIB
    assert [(c.name, c.kind, c.bytes) for c in loss.children] == [
        ("Dense.__call__ linear.py:287", "library", 3 * MIB),
        ("temporaries", "temporary", 1 * MIB),
    ]
    assert loss.children[0].search == "flax/linen/linear.py:287 Dense.__call__"
    # an output's path is a leaf under its frames
    [output] = tree.children[2].children
    assert (output.name, output.kind, output.bytes) == ("out[0]['dense']", "output", 2 * MIB)


def test_a_path_that_is_not_a_pytree_path_is_one_leaf() -> None:
    odd = ["parameter 0{1}", "a]b['c", "x['it''s']"]
    sources = [_source("argument", KIB * (i + 1), input=path) for i, path in enumerate(odd)]
    tree = peak_tree(_breakdown(sources))
    leaves = {n.search: n for n in tree.walk() if not n.children}
    assert set(leaves) == set(odd) and all(leaves[p].name == p for p in odd)


def test_many_leaves_are_capped_per_node_and_the_sums_still_hold() -> None:
    sources = [_source("argument", KIB * (i + 1), input=f"params['w{i}']") for i in range(300)]
    sources.append(
        PeakSource(
            "temporary",
            sum(range(1, 41)),
            line="model.py:9",
            stack=(_user(9),),
            buffers=tuple(_buffer(size, f"fusion.{size}") for size in range(40, 0, -1)),
        )
    )
    breakdown = _breakdown(sources)
    tree = peak_tree(breakdown)
    _sums_hold(tree, [s.bytes for s in sources])
    params = tree.children[0].children[0]
    assert len(params.children) == MAX_CHILDREN
    more = params.children[-1]
    hidden = 300 - (MAX_CHILDREN - 1)
    assert (more.kind, more.name, more.hidden) == ("more", f"… {hidden} more", hidden)
    assert more.bytes == KIB * sum(range(1, hidden + 1))  # the smallest ones
    # the page's data: a source's largest buffers, and a count of the rest
    data = flame_data(_with_peaks(breakdown, breakdown))
    assert data is not None and data["scale"] == breakdown.bytes
    [temporary] = [s for s in data["variants"][0]["sources"] if s[1] == "temporary"]
    assert [b[0] for b in temporary[2]] == list(range(40, 40 - MAX_BUFFERS, -1))
    assert temporary[3:] == [40 - MAX_BUFFERS, sum(range(1, 40 - MAX_BUFFERS + 1))]
    assert data["variants"][0]["capped"] == 1 and data["variants"][0]["buffers_capped"] == 1
    page = _html(make_report((_with_peaks(breakdown, breakdown),)))
    assert f"each frame shows its {MAX_CHILDREN - 1} largest children" in page
    assert f"at most {MAX_BUFFERS} buffers of each source" in page


def test_no_path_can_break_out_of_the_data_block() -> None:
    evil = "x['</script><script>alert(1)</script><!--']"
    sources = [
        _source("argument", 2 * MIB, input=evil),
        _source("temporary", MIB, line="a&b.py:3", stack=(StackFrame("a&b.py", 3, "<lambda>"),)),
    ]
    breakdown = _breakdown(sources)
    page = _html(make_report((_with_peaks(breakdown, breakdown, name="<b>m</b>:step"),)))
    assert "<script>alert" not in page and "<!--" not in page and "<b>m</b>" not in page
    assert page.count("<script>") == 1  # the page's own script; the data blocks are typed JSON
    [block] = re.findall(r'<script type="application/json" id="[^"]+-flame-data">(.*?)</script>', page, re.S)
    assert "<" not in block and ">" not in block and "&" not in block
    data = json.loads(block)
    names = {node[1] or node[0] for node in _nodes(data["variants"][0]["root"])}
    assert evil in names and "a&b.py:3 <lambda>" in names


def _nodes(node: list[Any]) -> list[list[Any]]:
    found = [node]
    for child in node[5]:
        found.extend(_nodes(child))
    return found


def test_the_peak_by_line_table_adds_up_to_each_live_peak() -> None:
    plain = _breakdown([_source("temporary", KIB * (i + 1), line=f"model.py:{i}") for i in range(250)])
    donated = _breakdown([_source("temporary", KIB * (i + 1), line=f"model.py:{i}") for i in range(150, 250)])
    page = _html(make_report((_with_peaks(plain, donated),)))
    table = re.search(r'<table class="peak-lines">.*?</table>', page, re.S)
    assert table is not None
    rows = re.findall(r"<tr>(.*?)</tr>", table.group(0), re.S)[1:]
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in rows]
    assert len(cells) == 200 + 2  # the 200 largest lines, the rest, the live peak
    assert "model.py:249" in cells[0][0] and cells[0][2] == cells[0][4] == format_bytes(250 * KIB)
    assert "model.py:149" in cells[100][0] and cells[100][2] == format_bytes(150 * KIB) and cells[100][4] == ""
    assert cells[-2][0] == "<em>50 more lines</em>"
    assert cells[-2][2] == format_bytes(KIB * sum(range(1, 51))) and cells[-2][4] == format_bytes(0)
    assert (
        cells[-1][2] == f"<b>{format_bytes(plain.bytes)}</b>"
        and cells[-1][4] == f"<b>{format_bytes(donated.bytes)}</b>"
    )
    assert f"live peak by line (plain {format_bytes(plain.bytes)} → donated {format_bytes(donated.bytes)}" in page


def test_a_five_thousand_leaf_step_makes_a_bounded_page_quickly() -> None:
    """Arguments, outputs and per-leaf temporaries of a 5,000-leaf step: the caps keep the page small."""
    leaves = 5000
    frames = (_user(10, "train_step"), _user(20, "loss"), LIBRARY)
    sources = [_source("argument", 4 * KIB, input=f"params['layer{i // 10}']['w{i % 10}']") for i in range(leaves)]
    sources += [_source("argument", 4 * KIB, input=f"opt_state['mu'][{i}]") for i in range(leaves)]
    sources += [
        _source("output", 4 * KIB, line="model.py:30", stack=(_user(30, "train_step"),), output=f"out[0][{i}]")
        for i in range(leaves)
    ]
    sources.append(
        PeakSource(
            "temporary",
            leaves * KIB,
            line="model.py:20",
            stack=frames,
            buffers=tuple(_buffer(KIB, f"fusion.{i}") for i in range(leaves)),
        )
    )
    breakdown = _breakdown(sources)
    report = make_report((_with_peaks(breakdown, breakdown),))
    start = time.perf_counter()
    page = _html(report)
    elapsed = time.perf_counter() - start
    assert elapsed < 6.0, f"{elapsed:.2f} s"  # about 2 s on two busy cores; without the caps, far more
    size = len(page.encode())
    assert size < 1 * MIB, format_bytes(size)  # 0.5 MiB
    _sums_hold(peak_tree(breakdown), [s.bytes for s in sources])


# ----------------------------------------------------------------------------
# In headless Chromium, on a real report of examples/train_step.py.


def _line_of(text: str) -> int:
    lines = (EXAMPLES / "train_step.py").read_text().splitlines()
    return next(number for number, line in enumerate(lines, start=1) if text in line)


MLP = _line_of("h = nn.gelu(nn.Dense(D_MLP)(h))")  # its hidden activations are the largest temporaries
STEP = _line_of("loss, grads = jax.value_and_grad(loss_fn)(params, x, y)")
QUERY = f"train_step.py:{MLP}"
CLICK = f"examples/train_step.py:{MLP} Block.__call__"

_CHECKER = """
<script type="application/json" id="fieldmem-flame-check"></script>
<script>
(function(){
var QUERY=__QUERY__,CLICK=__CLICK__;
var sec=document.querySelector('section.flame'),out={panels:{}};
function frames(icicle){return [].map.call(icicle.querySelectorAll('.fr'),function(d){var r=d.getBoundingClientRect();
return {x:r.x,w:r.width,h:r.height,depth:+d.getAttribute('data-depth'),bytes:+d.getAttribute('data-bytes'),text:d.textContent,
title:d.title,cls:d.className,shown:d.checkVisibility()};});}
function icicle(name){return sec.querySelector('.flame-panel[data-variant="'+name+'"] .icicle');}
out.nojs=!!sec.querySelector('.flame-nojs');
sec.querySelectorAll('.flame-panel').forEach(function(p){var name=p.getAttribute('data-variant'),r=icicle(name).getBoundingClientRect();
out.panels[name]={x:r.x,w:r.width,h:r.height,peak:p.querySelector('.flame-peak').textContent,frames:frames(icicle(name))};});
var box=sec.querySelector('.flame-controls input'),found=sec.querySelector('.flame-found');
box.value=QUERY;box.dispatchEvent(new Event('input'));
out.search={text:found.textContent,plain:found.getAttribute('data-plain'),donated:found.getAttribute('data-donated'),
matched:[].map.call(sec.querySelectorAll('.icicle .fr.match'),function(d){return d.title;}),
dimmed:sec.querySelectorAll('.icicle.searching .fr:not(.match)').length};
box.value='';box.dispatchEvent(new Event('input'));
var target=[].filter.call(icicle('plain').querySelectorAll('.fr'),function(d){return d.title.indexOf(CLICK)>=0;})[0];
target.click();
var detail=sec.querySelector('.flame-detail');
out.click={hidden:detail.hidden,variant:detail.getAttribute('data-variant'),heading:detail.querySelector('h4').textContent,
rows:[].map.call(detail.querySelectorAll('tbody tr'),function(r){return [].map.call(r.cells,function(c){return c.textContent;});}),
frames:frames(icicle('plain'))};
icicle('plain').querySelector('.fr.k-root').click();
out.reset=frames(icicle('plain'));
document.getElementById('fieldmem-flame-check').textContent=JSON.stringify(out);
})();
</script>
"""


@pytest.fixture(scope="module")
def train_report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    """The report of examples/train_step.py as ``fieldmem check`` makes it: its stacks start at the
    user's code (in this process, ``fieldmem.check``'s would start at this test)."""
    written = tmp_path_factory.mktemp("train") / "report.json"
    process = subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", TRAIN_STEP, "-f", "json", "-o", str(written)],
        cwd=EXAMPLES.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode in (0, 1) and written.is_file(), process.stderr
    report = Report.from_dict(json.loads(written.read_text(encoding="utf-8")))
    assert [r.status for r in report.results] == ["ok"], [r.error for r in report.results]
    return report


@pytest.mark.compile
def test_the_tree_of_a_real_train_step_adds_up_to_its_live_peak(train_report: Report) -> None:
    [result] = train_report.results
    for variant in result.variants.values():
        assert variant.peak is not None
        tree = peak_tree(variant.peak)
        assert tree.bytes == variant.peak.bytes == variant.memory.live_peak_bytes
        _sums_hold(tree, [s.bytes for s in variant.peak.sources])
        searched = {node.search for node in tree.walk()}
        # the user's frames, and flax's under them, marked as library code
        assert f"examples/train_step.py:{STEP} train_step" in searched and CLICK in searched
        assert any(n.kind == "library" and n.search.startswith("flax/linen/") for n in tree.walk())


@pytest.fixture(scope="module")
def shown(train_report: Report, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What Chromium drew and did on the train step's page, measured by the injected script."""
    browser = require_browser()
    page = _html(train_report)
    checked = tmp_path_factory.mktemp("flame") / "checked.html"
    checker = _CHECKER.replace("__QUERY__", json.dumps(QUERY)).replace("__CLICK__", json.dumps(CLICK))
    checked.write_text(page.replace("</body>", checker + "</body>"), encoding="utf-8")
    dom = dump_dom(browser, checked)
    match = re.search(r'<script type="application/json" id="fieldmem-flame-check">(.*?)</script>', dom, re.S)
    assert match and match.group(1).strip(), f"the checking script wrote nothing; the browser returned:\n{dom[:2000]}"
    return json.loads(match.group(1))


def _root(frames: list[dict[str, Any]]) -> dict[str, Any]:
    [root] = [f for f in frames if "k-root" in f["cls"]]
    return root


@pytest.mark.compile
def test_chromium_draws_both_icicles_on_one_scale_rooted_at_the_live_peak(
    shown: dict[str, Any], train_report: Report
) -> None:
    [result] = train_report.results
    assert not shown["nojs"]  # the script replaced the no-JavaScript note
    scale = max(v.memory.live_peak_bytes or 0 for v in result.variants.values())
    for name, variant in result.variants.items():
        panel = shown["panels"][name]
        peak = variant.memory.live_peak_bytes
        assert peak is not None
        text = format_bytes(peak)
        assert panel["peak"] == text
        root = _root(panel["frames"])
        assert root["text"] == f"live peak {text}" and root["bytes"] == peak and root["shown"]
        assert root["w"] == pytest.approx(panel["w"] * peak / scale, abs=1.0)
        assert panel["w"] > 400 and panel["h"] >= 4 * root["h"]
        # every box is as wide as its bytes, on the target's one scale, and lies inside its parent's
        per_byte = panel["w"] / scale
        drawn = panel["frames"]
        assert len(drawn) > 20
        for frame in drawn:
            assert frame["w"] == pytest.approx(frame["bytes"] * per_byte, abs=1.0), frame["title"]
        for parent in drawn:
            children = [
                f
                for f in drawn
                if f["depth"] == parent["depth"] + 1
                and f["x"] >= parent["x"] - 0.5
                and f["x"] + f["w"] <= parent["x"] + parent["w"] + 0.5
            ]
            assert sum(c["bytes"] for c in children) <= parent["bytes"]
        # the first level is the tree's, less the frames under 1/2000 of the scale (the script's MIN), which
        # the tree's sums count and the drawing leaves as a gap of under a pixel
        assert variant.peak is not None
        tree = peak_tree(variant.peak)
        layer = [f for f in drawn if f["depth"] == 1]
        drawable = [c for c in tree.children if c.bytes >= 0.0005 * scale]
        assert sorted(f["bytes"] for f in layer) == sorted(c.bytes for c in drawable)
        assert sum(c.bytes for c in tree.children) == peak
        # hover: the title says the bytes and the share of the peak
        assert f"{text} · 100.0 % of the" in root["title"]


@pytest.mark.compile
def test_chromium_search_highlights_a_line_with_the_tables_bytes(shown: dict[str, Any], train_report: Report) -> None:
    [result] = train_report.results
    search = shown["search"]
    assert search["matched"] and all(QUERY in title for title in search["matched"])
    assert search["dimmed"] > 0
    for name, variant in result.variants.items():
        assert variant.peak is not None
        [line] = [line for line in variant.peak.lines if line.label == f"examples/{QUERY}"]
        assert int(search[name]) == line.bytes  # the same bytes as the peak-by-line table's row
        share = f"{100 * line.bytes / variant.peak.bytes:.1f} %"
        assert f"{name}: {format_bytes(line.bytes)}, {share} of the live peak" in search["text"]


@pytest.mark.compile
def test_chromium_click_lists_the_frames_buffers_and_zooms(shown: dict[str, Any], train_report: Report) -> None:
    [result] = train_report.results
    peak = result.variants["plain"].peak
    assert peak is not None
    [node] = [n for n in peak_tree(peak).walk() if n.search == CLICK]
    buffers = sorted(
        (b for n in node.walk() for i in n.sources for b in peak.sources[i].buffers), key=lambda b: -b.bytes
    )
    click = shown["click"]
    assert not click["hidden"] and click["variant"] == "plain"
    assert click["heading"].startswith(f"plain (no donation) · {node.name}: {format_bytes(node.bytes)}")
    assert len(click["rows"]) == len(buffers)
    assert [row[0] for row in click["rows"]] == [format_bytes(b.bytes) for b in buffers]  # largest first
    assert sorted((row[0], row[3], row[2], row[1]) for row in click["rows"]) == sorted(
        (format_bytes(b.bytes), b.instruction or "", b.shape or "", b.kind) for b in buffers
    )
    # zoomed: the frame spans the panel, its ancestors above it; the root click zooms back out
    width = shown["panels"]["plain"]["w"]
    [zoomed] = [f for f in click["frames"] if CLICK in f["title"] and "ancestor" not in f["cls"] and f["depth"] == 3]
    assert zoomed["w"] == pytest.approx(width, abs=1.0)
    assert all(f["w"] == pytest.approx(width, abs=1.0) for f in click["frames"] if "ancestor" in f["cls"])
    assert _root(shown["reset"])["w"] == pytest.approx(_root(shown["panels"]["plain"]["frames"])["w"], abs=0.5)
    assert len(shown["reset"]) == len(shown["panels"]["plain"]["frames"])


def test_the_flame_section_is_absent_without_a_breakdown() -> None:
    result = make_result()
    assert all(v.peak is None for v in result.variants.values())
    page = _html(make_report((dataclasses.replace(result),)))
    assert 'class="flame"' not in page and "peak-lines" not in page
