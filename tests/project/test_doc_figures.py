"""Every measured figure in the docs comes from a stored result: a check in ``make test``.

The docs checked are README.md, CHANGELOG.md, benchmarks/README.md,
hardware/README.md and docs/*.md. A figure carries a marker right after it (units and bold between
them are fine)::

    1.22× <!-- figure: results/levers.json#medians[jobs 2, no cache]/medians[naive] -->
    0.64 s <!-- figure: results/parse.json#rows.1.s_per_10mb -->
    0.61 <!-- figure: results/probe-ci-failure.json#probe.growth -->
    63 <!-- figure: hardware/results/tpu-check.json#summary.targets -->

``results/FILE.json`` is a benchmark's current result file under
benchmarks/results/, written by the script that measured it (with its date);
``hardware/results/FILE.json`` is a hardware check's, under hardware/results/.
The docs quote only current figures: a marker into a file's ``history`` (the
earlier runs ``benchmarks/runner.py`` keeps there) or into a dated copy
(a file name with a date) fails, and results/ holds no dated copies. After
``#`` comes what to read:

- a path of segments joined by ``.``: a dict key, a list index, ``[key]``
  for a key with dots or spaces, ``[field=value,...]`` for the one list
  element whose fields have those values;
- ``median(PATH)`` of a list of numbers (or of the ``wall`` of each dict);
- ``total_median(PATH,KEY)``: the sum over the values of the dict at PATH
  of the median of each one's KEY list (compile-options.json's totals);
- ``A/B``: the ratio of two such values.

Then optionally ``|FORMAT``: ``pct`` (a fraction written as a percentage),
``ms``/``us`` (seconds written in ms/µs), ``mib`` (bytes written in MiB),
``min`` (seconds written in minutes), ``less`` (a ratio written as the
percentage saved: 0.56 as 44). The rule for rounding: the stored value,
scaled, rounded to as many decimals as the written number has, must equal it
(``0.61`` matches 0.6119; ``0.60`` does not match 0.6119).

A figure a test holds instead of a results file is marked
``<!-- figure: test:tests/test_x.py::test_name -->``; the test must exist.

Unmarked figures: outside code blocks and inline code, a decimal ratio
(``1.22×``, ``2.5x``), a time (``10.4 s``, ``129 ms``, ``9 min``) or a
relative change (``44% less``) without a marker fails the check, unless the
line holds an entry of ``NOT_MEASUREMENTS`` (a limit, a default, a target,
an option value: numbers nobody measured).
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks"  # a marker's "results/x.json" is relative to benchmarks/
HARDWARE = "hardware/"  # ... and "hardware/results/x.json" to the checkout: a hardware check's result
DOCS = [
    ROOT / "README.md",
    ROOT / "CHANGELOG.md",
    ROOT / "benchmarks" / "README.md",
    ROOT / "hardware" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]

NUMBER = r"[−-]?\d[\d,]*(?:\.\d+)?"
MARKER = re.compile(r"<!-- figure: (?P<ref>.*?) -->")
# the number right before a marker: only a unit, bold or spaces between them
BEFORE = re.compile(rf"(?P<number>{NUMBER})(?P<unit>[\s×x%*a-zA-Zµ]{{0,8}})$")
UNMARKED = re.compile(
    r"(?<![\w.\-])(?:"
    r"\d+\.\d+\s?[×x](?![\w])"  # a decimal ratio
    r"|\d[\d,]*(?:\.\d+)?\s?(?:s|ms|µs|min|sec|seconds)\b"  # a time
    r"|\d+(?:\.\d+)?% (?:less|more|faster|slower)\b"  # a relative change
    r")"
)
DATED = re.compile(r"\d{4}-\d{2}-\d{2}")  # a result file named for the day it ran: a dated copy
SCALE = {None: 1.0, "pct": 100.0, "ms": 1e3, "us": 1e6, "mib": 1 / 2**20, "min": 1 / 60, "less": -100.0}

# (file, text on the line): numbers there are not measurements (limits, defaults, targets, examples)
NOT_MEASUREMENTS: list[tuple[str, str]] = [
    ("README.md", "--timeout 60"),
    ("README.md", "the ≤ 0.6× target"),
    ("benchmarks/README.md", "at most 0.6×"),
    ("benchmarks/README.md", "every 5 ms"),  # compile_memory.py's sampling interval, a setting
    ("benchmarks/README.md", "every 20 ms"),  # the gate's sampling interval, a setting
    ("benchmarks/README.md", "the 1 s per 10 MB target"),
    ("docs/runtime.md", "4x larger"),
    ("docs/runtime.md", "2x for"),
    ("docs/runtime.md", "within --timeout"),
    ("docs/html-report.md", "within 3 s"),
    ("CHANGELOG.md", "(default 600 s)"),
    ("docs/isolation.md", "600 s) is that test"),
    ("CHANGELOG.md", "after 120 s of silence"),  # the start-up limit of a worker under another Python
    ("docs/versions.md", "no answer within 120 s of its start"),
]


def _strip_code(text: str) -> list[str]:
    """The lines of ``text`` with fenced code blocks blanked and inline code removed (numbering kept)."""
    text = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return [re.sub(r"`[^`\n]*`", "", line) for line in text.splitlines()]


def _segments(path: str) -> list[str]:
    """``a.b[c d].0[k=v]`` -> ``['a', 'b', '[c d]', '0', '[k=v]']``."""
    return [s for s in re.findall(r"\[[^\]]*\]|[^.\[\]]+", path) if s]


def _step(value: Any, segment: str, where: str) -> Any:
    if segment.startswith("["):
        inner = segment[1:-1]
        if "=" in inner and isinstance(value, list):
            wanted = dict(part.split("=", 1) for part in inner.split(","))
            found = [v for v in value if all(str(v.get(k)) == w for k, w in wanted.items())]
            assert len(found) == 1, f"{where}: {segment} selects {len(found)} elements"
            return found[0]
        segment = inner
    if isinstance(value, list):
        return value[int(segment)]
    assert isinstance(value, dict) and segment in value, f"{where}: no {segment!r} in {list(value)[:8]}"
    return value[segment]


def _term(document: Any, term: str, where: str) -> float:
    total = re.fullmatch(r"total_median\((.*),(.*)\)", term)
    if total:
        return float(
            sum(statistics.median(v[total.group(2)]) for v in _term_value(document, total.group(1), where).values())
        )
    median = re.fullmatch(r"median\((.*)\)", term)
    value = document
    for segment in _segments(median.group(1) if median else term):
        value = _step(value, segment, where)
    if median:
        numbers = [v["wall"] if isinstance(v, dict) else v for v in value]
        return float(statistics.median(numbers))
    assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{where}: {term} is {value!r}"
    return float(value)


def _term_value(document: Any, path: str, where: str) -> Any:
    value = document
    for segment in _segments(path):
        value = _step(value, segment, where)
    return value


def stored_value(ref: str, where: str, root: Path = ROOT) -> float | None:
    """The value a marker's reference names (None for a ``test:`` reference, which is checked to exist);
    ``root`` is the checkout that holds benchmarks/ and hardware/."""
    if ref.startswith("test:"):
        file, _, name = ref.removeprefix("test:").partition("::")
        source = ROOT / file
        assert source.is_file(), f"{where}: {file} does not exist"
        assert re.search(rf"^def {re.escape(name)}\(", source.read_text(), re.M), f"{where}: no test {name} in {file}"
        return None
    file, _, expression = ref.partition("#")
    folder = root if file.startswith(HARDWARE) else root / RESULTS.name
    assert file.removeprefix(HARDWARE).startswith("results/") and file.endswith(".json"), (
        f"{where}: {ref!r} is not results/FILE.json#... (benchmarks/) or hardware/results/FILE.json#..."
    )
    assert not DATED.search(file), f"{where}: {file} is a dated copy: quote the benchmark's current file"
    path = folder / file
    assert path.is_file(), f"{where}: {file} is not under {folder.relative_to(root)}/"
    document = json.loads(path.read_text())
    expression, _, fmt = expression.partition("|")
    assert (fmt or None) in SCALE, f"{where}: unknown format {fmt!r}"
    terms = re.findall(r"\w*\([^)]*\)|[^/]+", expression)
    for term in terms:
        inner = re.fullmatch(r"\w*\((.*?)(?:,[^,]*)?\)", term)
        first = _segments(inner.group(1) if inner else term)[:1]
        assert first not in (["history"], ["[history]"]), (
            f"{where}: {ref!r} reads an earlier run (the history): quote the current run's figure"
        )
    values = [_term(document, term, where) for term in terms]
    value = values[0] / values[1] if len(values) == 2 else values[0]
    if fmt == "less":
        return (1 - value) * 100
    return value * SCALE[fmt or None]


def _written(number: str) -> tuple[float, int]:
    text = number.replace("−", "-").replace(",", "")
    decimals = len(text.split(".")[1]) if "." in text else 0
    return float(text), decimals


def _name(doc: Path) -> str:
    return str(doc.relative_to(ROOT)) if doc.is_relative_to(ROOT) else doc.name


def marked_figures(doc: Path) -> list[tuple[str, str, str]]:
    """(where, written number, reference) for every marker of ``doc``."""
    found = []
    for number, line in enumerate(_strip_code(doc.read_text()), 1):
        for marker in MARKER.finditer(line):
            where = f"{_name(doc)}:{number}"
            before = BEFORE.search(line[: marker.start()].rstrip())
            assert before, f"{where}: no number right before the marker {marker.group(0)}"
            found.append((where, before.group("number"), marker.group("ref")))
    return found


def unmarked_figures(doc: Path) -> list[str]:
    """``file:line: figure`` for every measured-looking figure of ``doc`` that has no marker after it."""
    name = _name(doc)
    allowed = [text for file, text in NOT_MEASUREMENTS if file == name]
    problems = []
    for number, line in enumerate(_strip_code(doc.read_text()), 1):
        for hit in UNMARKED.finditer(line):
            rest = line[hit.end() :]
            if re.match(r"[\s×x%*]{0,4}<!-- figure: ", rest):
                continue
            if any(text in line and line.index(text) <= hit.start() < line.index(text) + len(text) for text in allowed):
                continue
            problems.append(f"{name}:{number}: {hit.group(0)!r}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_marked_figure_is_the_stored_value(doc: Path) -> None:
    wrong = []
    for where, number, ref in marked_figures(doc):
        value = stored_value(ref, where)
        if value is None:
            continue
        written, decimals = _written(number)
        if round(value, decimals) != pytest.approx(written, abs=1e-9):
            wrong.append(f"{where}: {number} is written, {ref} holds {value:.{decimals + 3}f}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_measured_figure_without_a_marker(doc: Path) -> None:
    problems = unmarked_figures(doc)
    assert not problems, (
        "figures without a <!-- figure: results/FILE.json#path --> marker (or an entry of NOT_MEASUREMENTS):\n"
        + "\n".join(problems)
    )


def test_results_hold_no_dated_copies() -> None:
    """One current file per benchmark: earlier runs live in its JSON's history, not in files named by date."""
    dated = sorted(
        str(p.relative_to(ROOT))
        for folder in (RESULTS, ROOT / "hardware")
        for p in (folder / "results").rglob("*")
        if DATED.search(p.name)
    )
    assert not dated, f"dated copies under results/ (fold them into their benchmark's history): {dated}"


def test_a_figure_of_an_earlier_run_is_refused(tmp_path: Path) -> None:
    """A marker into the history, or into a dated copy, fails even where the number is right."""
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "bench.json").write_text('{"ratio": 0.5, "history": [{"headline": {"ratio": 0.7}}]}')
    (results / "bench-2026-12-05.json").write_text('{"ratio": 0.7}')
    assert stored_value("results/bench.json#ratio", "doc:1", root=tmp_path) == 0.5
    for ref in (
        "results/bench.json#history.0.headline.ratio",
        "results/bench.json#[history].0.headline.ratio",
        "results/bench.json#ratio/history.0.headline.ratio",
        "results/bench.json#median(history)",
        "results/bench-2026-12-05.json#ratio",
    ):
        with pytest.raises(AssertionError, match=r"earlier run|dated copy"):
            stored_value(ref, "doc:1", root=tmp_path)


def test_the_check_catches_what_it_must(tmp_path: Path) -> None:
    """The checker on a made-up doc: a wrong figure, an unmarked ratio and time, a rounding rule."""
    doc = tmp_path / "selftest.md"
    doc.write_text(
        "from the cache 0.61× <!-- figure: results/levers.json#medians[cache warm]/medians[naive] -->\n"
        "wrong 0.60× <!-- figure: results/levers.json#medians[cache warm]/medians[naive] -->\n"
        "parse 0.64 s <!-- figure: results/parse.json#rows.1.s_per_10mb -->, growth **0.61** "
        "<!-- figure: results/probe-ci-failure.json#probe.growth -->\n"
        "on the chip 65 <!-- figure: hardware/results/tpu-check.json#summary.targets --> targets\n"
        "unmarked 1.22× and 10.4 s and 44% less, `7.5 s in code`\n"
        "```\n9.9 s in a block\n```\n"
    )
    figures = marked_figures(doc)
    values = [stored_value(ref, where) for where, _, ref in figures]
    checks = [round(v or 0, _written(n)[1]) == _written(n)[0] for (_, n, _), v in zip(figures, values)]
    assert checks == [True, False, True, True, True]
    assert [p.split(": ", 1)[1] for p in unmarked_figures(doc)] == ["'1.22×'", "'10.4 s'", "'44% less'"]
