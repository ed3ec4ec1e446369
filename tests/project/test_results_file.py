"""benchmarks/runner.py's result files: one current result file per benchmark, its earlier runs in its history.

Tested on made-up runs (nothing is measured here): a new run replaces the
current one and the replaced run's headline joins the history; a partial run
never replaces a complete one; a write that fails part way leaves the file as
it was; the markdown is made from the JSON alone. Then the committed result
files of the benchmarks ``make bench`` and ``make bench-more`` run, held to
that: their .md is what their .json renders to.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers_bench import load_benchmark as _load

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


runner = _load("runner")


def _markdown(document: dict[str, Any]) -> str:
    return f"# toy\n\nratio {document['ratio']} on {document['meta']['date']}\n"


TOY = runner.Benchmark(
    "toy",
    _markdown,
    lambda document: {"ratio": document["ratio"]},
    complete=lambda document: not document["meta"].get("skipped"),
    partial=lambda document: "skipped " + ", ".join(document["meta"]["skipped"]),
)


def _run(date: str, ratio: float, skipped: tuple[str, ...] = ()) -> dict[str, Any]:
    meta = {"date": date, "machine": "x86_64, 2 cores", "fieldmem_commit": f"c{ratio}", "skipped": list(skipped)}
    return {"meta": meta, "ratio": ratio, "runs": [ratio, ratio]}


def test_the_first_run_is_current_with_an_empty_history(tmp_path: Path) -> None:
    written = runner.write(tmp_path, TOY, _run("2026-12-01", 0.5))
    stored = json.loads((tmp_path / "toy.json").read_text())
    assert stored == written == {**_run("2026-12-01", 0.5), "history": []}
    text = (tmp_path / "toy.md").read_text()
    assert text.startswith("# toy\n\nratio 0.5 on 2026-12-01\n")
    assert "| ratio | 0.5 |" in text


def test_a_new_run_replaces_the_current_one_which_joins_the_history(tmp_path: Path) -> None:
    for date, ratio in (("2026-12-01", 0.5), ("2026-12-02", 0.6), ("2026-12-03", 0.7)):
        runner.write(tmp_path, TOY, _run(date, ratio))
    stored = json.loads((tmp_path / "toy.json").read_text())
    assert runner.current(stored) == _run("2026-12-03", 0.7)
    assert stored["history"] == [
        {"date": "2026-12-01", "machine": "x86_64, 2 cores", "commit": "c0.5", "headline": {"ratio": 0.5}},
        {"date": "2026-12-02", "machine": "x86_64, 2 cores", "commit": "c0.6", "headline": {"ratio": 0.6}},
    ]
    table = (tmp_path / "toy.md").read_text().split("## History", 1)[1]
    assert "| date | 2026-12-03 | 2026-12-02 | 2026-12-01 |" in table  # the current run first, then newest first
    assert "| ratio | 0.7 | 0.6 | 0.5 |" in table


def test_a_partial_run_joins_the_history_and_never_replaces_a_complete_one(tmp_path: Path) -> None:
    runner.write(tmp_path, TOY, _run("2026-12-01", 0.5))
    written = runner.write(tmp_path, TOY, _run("2026-12-02", 0.9, skipped=("pod",)), file="x.json")
    assert runner.current(written) == _run("2026-12-01", 0.5)
    assert written["history"] == [
        {
            "date": "2026-12-02",
            "machine": "x86_64, 2 cores",
            "commit": "c0.9",
            "partial": "skipped pod",
            "file": "x.json",
            "headline": {"ratio": 0.9},
        }
    ]
    assert "| measured only |  | skipped pod |" in (tmp_path / "toy.md").read_text()
    # a complete run after it replaces the current one as usual
    written = runner.write(tmp_path, TOY, _run("2026-12-03", 0.4))
    assert runner.current(written)["ratio"] == 0.4
    assert [entry["date"] for entry in written["history"]] == ["2026-12-02", "2026-12-01"]


def test_an_old_run_whose_headline_cannot_be_read_never_costs_the_new_run(tmp_path: Path) -> None:
    old_layout = {"meta": {"date": "2026-11-30", "skipped": []}, "speed": 2.0}  # no "ratio": an older layout
    (tmp_path / "toy.json").write_text(json.dumps(old_layout))
    written = runner.write(tmp_path, TOY, _run("2026-12-01", 0.5))
    assert runner.current(written) == _run("2026-12-01", 0.5)
    [moved] = written["history"]
    assert moved["date"] == "2026-11-30" and moved["headline"] == {}
    assert moved["headline_unreadable"] == "KeyError: 'ratio'"


def test_a_partial_run_replaces_a_partial_one(tmp_path: Path) -> None:
    runner.write(tmp_path, TOY, _run("2026-12-01", 0.5, skipped=("pod",)))
    written = runner.write(tmp_path, TOY, _run("2026-12-02", 0.6, skipped=("cold",)))
    assert runner.current(written)["ratio"] == 0.6
    assert written["history"][0]["partial"] == "skipped pod"


def test_a_write_that_fails_part_way_leaves_the_files_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner.write(tmp_path, TOY, _run("2026-12-01", 0.5))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def fail(*args: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        runner.write(tmp_path, TOY, _run("2026-12-02", 0.6))
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no half file, no temporary left


def test_a_run_that_brings_its_own_history_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="history"):
        runner.write(tmp_path, TOY, {**_run("2026-12-01", 0.5), "history": []})
    assert not list(tmp_path.iterdir())


def test_the_markdown_is_made_from_the_json_alone(tmp_path: Path) -> None:
    runner.write(tmp_path, TOY, _run("2026-12-01", 0.5))
    runner.write(tmp_path, TOY, _run("2026-12-02", 0.6))
    path = tmp_path / "toy.json"
    document = json.loads(path.read_text())
    document["ratio"] = 0.65  # an edit of the JSON: the .md follows it
    document["history"][0]["headline"]["ratio"] = 0.55
    path.write_text(json.dumps(document))
    (tmp_path / "toy.md").unlink()
    text = runner.render(path, TOY)
    assert (tmp_path / "toy.md").read_text() == text
    assert "ratio 0.65 on 2026-12-02" in text and "| ratio | 0.65 | 0.55 |" in text


def test_fold_keeps_each_runs_file(tmp_path: Path) -> None:
    runs = [
        (_run("2026-12-01", 0.5), "a.json"),
        (_run("2026-12-02", 0.9, skipped=("pod",)), "b.json"),
        (_run("2026-12-03", 0.6), "c.json"),
    ]
    folded = runner.fold(runs, TOY)
    assert runner.current(folded) == _run("2026-12-03", 0.6)
    assert [(e["date"], e["file"], e.get("partial")) for e in folded["history"]] == [
        ("2026-12-02", "b.json", "skipped pod"),
        ("2026-12-01", "a.json", None),
    ]


def test_a_json_only_benchmark_gets_a_markdown_of_its_identity_and_headline(tmp_path: Path) -> None:
    plain = runner.Benchmark(
        "plain", runner.headline_markdown("Plain", "what"), lambda document: {"start (s)": document["s"]}
    )
    runner.write(tmp_path, plain, {"date": "2026-12-03", "machine": "2 cores", "what": "a start", "s": 1.44})
    text = (tmp_path / "plain.md").read_text()
    assert text.startswith("# Plain\n\n- date: 2026-12-03; machine: 2 cores\n- a start\n")
    assert "| start (s) | 1.44 |" in text


def test_identity_reads_the_date_machine_and_commit_where_a_script_puts_them() -> None:
    watch_like = {"date": "2026-12-05T21:10:48+00:00", "machine": {"processor": "x86_64", "cpus": 2}}
    assert runner.identity(watch_like) == {
        "date": "2026-12-05T21:10:48+00:00",
        "machine": "x86_64, 2 cores",
        "commit": None,
    }
    pod_like = {"date": "2026-12-06 08:36 UTC", "machine": "13 cores, 45 GiB (the TPU host)", "commit": "19c2043"}
    assert runner.identity(pod_like)["commit"] == "19c2043"


def _bench_fast_run(skipped: list[str], summary: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    meta = {"date": "2026-12-06 10:00 UTC", "machine": "x86_64, 2 cores, Linux", "skipped": skipped}
    return {"meta": {**meta, **extra.pop("meta", {})}, "summary": summary, **extra}


def test_make_bench_runs_that_are_partial() -> None:
    bench_fast = _load("bench_fast")
    every = list(bench_fast.SECTIONS)
    complete = _bench_fast_run([], [], **{s: {} for s in every})
    assert bench_fast.complete(complete)
    overhead_only = _bench_fast_run([s for s in every if s != "overhead"], [], overhead={})
    assert not bench_fast.complete(overhead_only)
    assert bench_fast.measured_sections(overhead_only) == "overhead"
    points = _bench_fast_run([], [], meta={"overhead_points": ["leaves=5000"]}, **{s: {} for s in every})
    assert not bench_fast.complete(points)
    stopped = _bench_fast_run([], [], error="a tool failed", cold={})
    assert not bench_fast.complete(stopped)
    assert bench_fast.measured_sections(stopped) == "cold; stopped"
    rows = [
        {"target": "cold", "measured": 0.57, "limit": 0.75, "pass": True, "note": ""},
        {"target": "pod: skipped", "measured": None, "limit": None, "pass": None, "note": ""},
    ]
    assert bench_fast.headline(_bench_fast_run([], rows)) == {"cold": 0.57}


@pytest.mark.parametrize(
    ("name", "benchmark"),
    [
        ("fast", lambda: _load("bench_fast").benchmark("fast")),
        ("overhead-13cores", lambda: _load("bench_fast").benchmark("overhead-13cores")),
        ("overhead-2cores", lambda: _load("bench_fast").benchmark("overhead-2cores")),
        ("fast-13cores", lambda: _load("bench_fast").benchmark("fast-13cores")),
        ("watch", lambda: _load("bench_watch").BENCHMARK),
        ("backends", lambda: _load("bench_backends").BENCHMARK),
        ("suite", lambda: _load("bench_suite").benchmark("suite")),
        ("suite-quick", lambda: _load("bench_suite").benchmark("suite-quick")),
        ("levers", lambda: _load("bench_levers").BENCHMARK),
        ("parse", lambda: _load("bench_parse").BENCHMARK),
        ("probe", lambda: _load("bench_probe").benchmark("probe")),
        ("probe-load2", lambda: _load("bench_probe").benchmark("probe-load2")),
        ("examples", lambda: _load("bench_examples").BENCHMARK),
        ("scaling", lambda: _load("scaling").BENCHMARK),
    ],
)
def test_the_committed_markdown_is_what_its_json_renders_to(name: str, benchmark: Any) -> None:
    path = BENCH / "results" / f"{name}.json"
    document = json.loads(path.read_text())
    assert isinstance(document.get("history"), list)
    assert path.with_suffix(".md").read_text() == runner.markdown(document, benchmark())
