"""``fieldmem compare``: loading saved reports, the comparison, its renderers and the command.

Hand-made reports pin each kind of difference and both sides of a tolerance;
two real reports of ``examples/field.py`` (donated by default, and with
``--donate none``) show what the comparison finds on compiled programs.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import fieldmem
from fieldmem.gate.compare import (
    COMPARE_SCHEMA,
    Comparison,
    ReportFileError,
    compare_files,
    compare_reports,
    load_report,
)
from fieldmem.model.copies import Alias, Copy
from fieldmem.model.environment import DeviceInfo
from fieldmem.model.errors import FieldmemError, OptionError
from fieldmem.model.files import write_atomic
from fieldmem.model.memory import MemoryFigures
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult
from fieldmem.model.word_sets import CopyKind
from fieldmem.render import RenderOptions
from fieldmem.render.compare import COMPARE_RENDERERS, get_compare_renderer
from fieldmem.request.spec import DonateSpec
from fieldmem.request.target import TargetOptions
from fieldmem.request.tolerance import Tolerances

from factories import MIB, make_copy, make_error_result, make_memory, make_report, make_result, make_variant

ROOT = Path(__file__).resolve().parents[2]


def _memory(footprint: int, live_peak: int | None = None) -> MemoryFigures:
    """Figures where argument, output, alias, peak and footprint are all ``footprint``."""
    return make_memory(footprint, footprint, footprint, live_peak_bytes=footprint if live_peak is None else live_peak)


def _copy(source: str, nbytes: int = MIB, *, kind: CopyKind = "loop", shape: str = "f32[512,512]{1,0}") -> Copy:
    return make_copy(nbytes, kind=kind, source=source, shape=shape, computation="body")


def _result(
    name: str = "model:step",
    *,
    footprint: int = 4 * MIB,
    live_peak: int | None = None,
    copies: tuple[Copy, ...] = (),
    aliases: tuple[Alias, ...] = (Alias("u", 0, "out", 0, 4 * MIB),),
    in_place: bool = True,
) -> TargetResult:
    """``model:step``: 8 MiB plain, ``footprint`` donated, with these copies and aliases."""
    return make_result(
        name,
        plain=make_variant("plain", _memory(8 * MIB)),
        donated=make_variant("donated", _memory(footprint, live_peak), aliases=aliases, copies=copies),
        in_place=in_place,
        summary=None if in_place else "not in place: a loop copies u",
    )


def _report(*results: TargetResult, backend: str = "cpu", kind: str = "cpu") -> Report:
    return make_report(results, backend=backend, platform_version=None, devices=(DeviceInfo(0, backend, kind),))


def _compare(*reports: Report, tolerance: str | None = None) -> Comparison:
    tolerances = None
    if tolerance is not None:
        tolerances = Tolerances.parse(tolerance)
    return compare_reports([(f"r{n}.json", r) for n, r in enumerate(reports)], tolerances)


# ----------------------------------------------------------------------------
# Differences


def test_identical_reports_do_not_differ() -> None:
    comparison = _compare(_report(_result()), _report(_result()))
    assert [row.name for row in comparison.rows] == ["model:step"]
    assert comparison.rows[0].differences == () and comparison.significant == ()
    assert comparison.exit_code(fail_on_diff=True) == 0


def test_one_new_copy_is_exactly_one_difference() -> None:
    loop = _copy("model.py:14")
    comparison = _compare(_report(_result()), _report(_result(copies=(loop,))))
    (difference,) = comparison.rows[0].differences
    assert (difference.column, difference.field, difference.change.kind) == (1, "donated.copies", "copy")
    assert difference.change.message == "r1.json: new donated copy [loop] of f32[512,512] at model.py:14 (1.0 MiB)"
    assert (difference.change.before, difference.change.after, difference.change.source) == (None, MIB, "model.py:14")
    assert difference.significant
    assert comparison.exit_code(fail_on_diff=True) == 1 and comparison.exit_code(fail_on_diff=False) == 0
    cells = comparison.rows[0].cells
    assert (cells[0].copies["donated"].count, cells[1].copies["donated"].count) == (0, 1)
    assert cells[1].copies["donated"].bytes == MIB


def test_a_vanished_copy_a_grown_copy_and_copies_below_min_bytes() -> None:
    tiny = _copy("model.py:3", 4, kind="other", shape="s32[]")
    before = _report(_result(copies=(_copy("model.py:14"), _copy("model.py:20"), tiny)))
    after = _report(_result(copies=(_copy("model.py:20", 2 * MIB),)))
    messages = [d.change.message for d in _compare(before, after).rows[0].differences]
    assert messages == [
        "r1.json: donated copy [loop] of f32[512,512] at model.py:14 is gone (1.0 MiB)",
        "r1.json: donated copy [loop] of f32[512,512] at model.py:20: 1.0 MiB → 2.0 MiB (+1.0 MiB, +100.0%)",
    ]  # the 4-byte copy is below min_bytes: neither counted nor compared


def test_a_copy_whose_layout_differs_is_the_same_copy() -> None:
    gpu_layout = _copy("model.py:14", shape="f32[512,512]{0,1:T(8,128)}")
    assert (
        _compare(_report(_result(copies=(_copy("model.py:14"),))), _report(_result(copies=(gpu_layout,)))).significant
        == ()
    )


def test_verdict_aliases_and_figures() -> None:
    before = _report(_result())
    after = _report(_result(footprint=6 * MIB, aliases=(), in_place=False))
    differences = _compare(before, after).rows[0].differences
    by_field = {d.field: d for d in differences}
    assert (
        by_field["verdict"].change.message == "r1.json: verdict in place → not in place (not in place: a loop copies u)"
    )
    assert by_field["donated.aliases"].change.message == "r1.json: alias lost: u → out"
    assert by_field["donated.footprint_bytes"].change.message == (
        "r1.json: donated footprint: 4.0 MiB → 6.0 MiB (+2.0 MiB, +50.0%)"
    )
    assert {d.field for d in differences} == {
        "verdict",
        "donated.aliases",
        "donated.footprint_bytes",
        "donated.live_peak_bytes",
        "donated.peak_bytes",
    }  # nothing in the plain variant changed
    assert all(d.significant for d in differences)
    gained = _compare(after, before).rows[0].differences
    assert any(d.change.message == "r1.json: new alias: u → out" for d in gained)


def test_an_alias_returned_as_another_output_is_one_rerouted_alias() -> None:
    after = _report(_result(aliases=(Alias("u", 0, "out2", 1, 4 * MIB),)))
    (difference,) = _compare(_report(_result()), after).rows[0].differences
    assert difference.change.message == "r1.json: alias rerouted: u → out is now u → out2"
    assert (difference.change.before, difference.change.after, difference.significant) == ("u → out", "u → out2", True)


def test_a_copy_whose_line_moved_is_the_same_copy() -> None:
    moved = _compare(_report(_result(copies=(_copy("model.py:14"),))), _report(_result(copies=(_copy("model.py:17"),))))
    assert moved.rows[0].differences == ()


def test_a_figure_one_report_lacks_is_a_significant_difference() -> None:
    lacking = dataclasses.replace(
        _result(),
        variants={
            **_result().variants,
            "donated": dataclasses.replace(
                _result().variants["donated"], memory=make_memory(4 * MIB, 4 * MIB, 4 * MIB, live_peak_bytes=None)
            ),
        },
    )
    (difference,) = _compare(_report(_result()), _report(lacking)).rows[0].differences
    assert difference.field == "donated.live_peak_bytes" and difference.significant
    assert "n/a" in difference.change.message and "not comparable" in difference.change.message


def test_missing_and_errored_targets() -> None:
    broken = make_error_result("model:x", message="XLA failed", target="model.py:x")
    reference = _report(_result("model:a"), broken, _result("model:b"))
    other = _report(_result("model:b"), dataclasses.replace(broken), _result("model:new"))
    comparison = _compare(reference, other)
    rows = {row.name: row for row in comparison.rows}
    assert list(rows) == ["model:a", "model:x", "model:b", "model:new"]
    assert rows["model:x"].differences == ()  # failed in both: nothing new
    assert [c.status for c in rows["model:a"].cells] == ["ok", "missing"]
    assert [d.change.message for d in rows["model:a"].differences] == [
        "r1.json: checked in the reference, missing here"
    ]
    assert [d.change.message for d in rows["model:new"].differences] == [
        "r1.json: missing in the reference, checked here"
    ]
    fixed = _compare(other, reference)
    assert [d.change.message for d in {r.name: r for r in fixed.rows}["model:a"].differences] == [
        "r1.json: missing in the reference, checked here"
    ]
    failing = _compare(_report(_result("model:x")), _report(broken))
    assert (
        failing.rows[0].differences[0].change.message
        == "r1.json: checked in the reference, could not be checked here: XLA failed"
    )


def test_three_reports_are_each_compared_with_the_first() -> None:
    comparison = _compare(_report(_result()), _report(_result()), _report(_result(footprint=5 * MIB)))
    assert {d.column for d in comparison.rows[0].differences} == {2}
    assert [c.label for c in comparison.columns] == ["r0.json", "r1.json", "r2.json"]


def test_columns_say_where_each_report_comes_from() -> None:
    comparison = compare_reports(
        [
            ("main/report.json", _report(_result())),
            ("branch/report.json", _report(_result(), backend="gpu", kind="H100")),
        ]
    )
    assert [c.label for c in comparison.columns] == ["main/report.json", "branch/report.json"]
    gpu = comparison.columns[1]
    assert (gpu.backend, gpu.device_kind, gpu.device_count, gpu.jax_version) == ("gpu", "H100", 1, "0.10.2")
    same = compare_reports([("a.json", _report()), ("a.json", _report())])
    assert [c.label for c in same.columns] == ["a.json", "a.json (2)"]


def test_columns_name_the_libraries_whose_releases_differ_and_say_jax_once() -> None:
    """Reports made under two --jax releases whose environments resolved flax differently: each column names
    its flax, not the optax both share, and its jax once; the markdown table lists every library."""
    import dataclasses

    from fieldmem.frontends.output import report_labels

    reports = [
        dataclasses.replace(_report(_result()), jax_version=v, library_versions={"flax": flax, "optax": "0.2.5"})
        for v, flax in (("0.7.1", "0.11.2"), ("0.7.2", "0.12.0"))
    ]
    comparison = compare_reports(list(zip(report_labels(reports), reports)))
    text = get_compare_renderer("table").render(comparison, RenderOptions(width=160))
    assert "flax 0.11.2" in text and "flax 0.12.0" in text and "optax" not in text, text
    assert text.count("jax 0.7.2") == 1, text
    markdown = get_compare_renderer("markdown").render(comparison, RenderOptions())
    assert "| libraries | flax 0.11.2, optax 0.2.5 | flax 0.12.0, optax 0.2.5 |" in markdown, markdown
    plain = get_compare_renderer("markdown").render(_compare(_report(_result()), _report(_result())), RenderOptions())
    assert "| libraries |" not in plain  # your own environment: no row of empty cells


def test_compare_needs_two_reports() -> None:
    with pytest.raises(OptionError, match="at least two reports, got 1"):
        compare_reports([("a.json", _report())])
    with pytest.raises(OptionError, match="at least two reports, got 0"):
        compare_files([])


# ----------------------------------------------------------------------------
# Tolerances


@pytest.mark.parametrize(
    ("tolerance", "significant", "words"),
    [
        (None, True, "exact"),
        ("5%", False, "5%"),
        ("4%", False, "4%"),  # exactly the allowance
        ("3.9%", True, "3.9%"),
        ("live-peak:5%", False, "live-peak:5%"),
        ("live-peak:3%,5%", True, "5%,live-peak:3%"),  # the default first
        ("4MiB", False, "4MiB"),
        ("4194303", True, "4194303"),  # one byte short of 4 MiB
    ],
)
def test_figures_against_the_tolerance(tolerance: str | None, significant: bool, words: str) -> None:
    """The live peak grows 100 MiB -> 104 MiB (4%)."""
    before = _report(_result(footprint=4 * MIB, live_peak=100 * MIB))
    after = _report(_result(footprint=4 * MIB, live_peak=104 * MIB))
    comparison = _compare(before, after, tolerance=tolerance)
    (difference,) = comparison.rows[0].differences
    assert difference.field == "donated.live_peak_bytes"
    assert difference.significant is significant
    assert comparison.exit_code(fail_on_diff=True) == int(significant)
    assert comparison.tolerance == words


@pytest.mark.parametrize(("tolerance", "significant"), [("5%", True), ("100%", False)])
def test_a_shrinking_figure_is_judged_too(tolerance: str, significant: bool) -> None:
    """Compare is about differences, not only growth: 100 MiB -> 90 MiB is 11% of the smaller."""
    before = _report(_result(live_peak=100 * MIB))
    after = _report(_result(live_peak=90 * MIB))
    (difference,) = _compare(before, after, tolerance=tolerance).rows[0].differences
    assert difference.significant is significant


@pytest.mark.parametrize(
    ("tolerance", "significant"), [("copies:10%", False), ("copies:5%", True), ("10%,copies:0", True)]
)
def test_a_growing_copy_against_the_copies_tolerance(tolerance: str, significant: bool) -> None:
    before = _report(_result(copies=(_copy("model.py:14", 100 * 1024),)))
    after = _report(_result(copies=(_copy("model.py:14", 108 * 1024),)))
    (difference,) = _compare(before, after, tolerance=tolerance).rows[0].differences
    assert difference.change.kind == "copy" and difference.significant is significant


def test_a_new_copy_is_significant_whatever_the_tolerance() -> None:
    comparison = _compare(_report(_result()), _report(_result(copies=(_copy("model.py:14"),))), tolerance="1000%")
    assert len(comparison.significant) == 1


# ----------------------------------------------------------------------------
# Loading


def _write(path: Path, report: Report) -> Path:
    write_atomic(path, json.dumps(report.to_dict()))
    return path


def test_compare_files_reads_saved_reports(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.json", _report(_result()))
    b = _write(tmp_path / "b.json", _report(_result(copies=(_copy("model.py:14"),))))
    comparison = compare_files([a, b])
    assert [c.label for c in comparison.columns] == ["a.json", "b.json"]
    assert [c.path for c in comparison.columns] == [str(a), str(b)]
    assert len(comparison.significant) == 1


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "does not exist"),
        ("", "is not JSON (Expecting value at line 1, column 1)"),
        ('{"schema": ', "is not JSON"),
        (b"\xff\xfe", "is not JSON (not UTF-8 text)"),
        ("[1, 2]", "is not a fieldmem report: a fieldmem report is a JSON object"),
        ('{"schema": "fieldmem.baseline/1"}', "is not a fieldmem report: schema 'fieldmem.baseline/1'"),
        (
            '{"schema": "fieldmem.report/1", "backend": "cpu"}',
            "is not a fieldmem report: the report does not match",
        ),
    ],
)
def test_unreadable_reports_are_one_line_errors(tmp_path: Path, content: str | bytes | None, expected: str) -> None:
    path = tmp_path / "r.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(ReportFileError) as caught:
        load_report(path)
    assert isinstance(caught.value, FieldmemError)
    assert expected in caught.value.message and str(path) in caught.value.message
    assert "\n" not in caught.value.message


def test_a_folder_is_not_a_report(tmp_path: Path) -> None:
    with pytest.raises(ReportFileError, match="is a folder"):
        load_report(tmp_path)


# ----------------------------------------------------------------------------
# Renderers


def _mixed() -> Comparison:
    broken = make_error_result("model:x", message="XLA failed", target="m.py")
    before = _report(_result(live_peak=100 * MIB), _result("model:a|`b`"), broken)
    after = _report(_result(live_peak=104 * MIB, copies=(_copy("model.py:14"),)), _result("model:a|`b`"))
    return _compare(before, after, tolerance="5%")


@pytest.mark.parametrize("name", sorted(COMPARE_RENDERERS))
@pytest.mark.parametrize("verbose", [False, True], ids=["compact", "verbose"])
def test_every_compare_renderer_renders(name: str, verbose: bool) -> None:
    comparison = _mixed()
    text = COMPARE_RENDERERS[name].render(comparison, RenderOptions(verbose=verbose, width=160))
    assert text.endswith("\n")
    for row in comparison.rows:
        assert row.name.split("|")[0] in text
    empty = compare_reports([("a.json", _report()), ("b.json", _report())])
    assert COMPARE_RENDERERS[name].render(empty, RenderOptions()).endswith("\n")


def test_table_marks_what_differs() -> None:
    text = get_compare_renderer("table").render(_mixed(), RenderOptions(width=160))
    lines = text.splitlines()
    assert lines[0].startswith("fieldmem compare · reference: r0.json · tolerance: 5%")
    live_peak = next(line for line in lines if "live peak (donated)" in line)  # model:step comes first
    assert live_peak.rstrip().endswith("104.0 MiB ≈")  # 4% is within 5%
    assert any(line.rstrip().endswith("1 (1.0 MiB) ≠") and "copies (donated)" in line for line in lines)
    assert any("≠ r1.json: new donated copy [loop] of f32[512,512] at model.py:14 (1.0 MiB)" in line for line in lines)
    assert any("≈ r1.json: donated live peak: 100.0 MiB → 104.0 MiB (+4.0 MiB, +4.0%)" in line for line in lines)
    assert any("≠ r1.json: could not be checked in the reference, missing here" in line for line in lines)
    assert "2 significant differences, 1 within the tolerance from r0.json (tolerance: 5%)" in text
    assert "\x1b[" not in text
    assert "\x1b[" in get_compare_renderer("table").render(_mixed(), RenderOptions(color=True))


def test_verbose_table_lists_aliases() -> None:
    compact = get_compare_renderer("table").render(_mixed(), RenderOptions(width=160))
    verbose = get_compare_renderer("table").render(_mixed(), RenderOptions(width=160, verbose=True))
    assert "u → out" not in compact and "u → out" in verbose


def test_markdown_compare_escapes_and_marks() -> None:
    text = get_compare_renderer("markdown").render(_mixed(), RenderOptions())
    lines = text.splitlines()
    assert (
        lines[0]
        == "## ❌ fieldmem compare: 2 significant differences, 1 within the tolerance from r0.json (tolerance: 5%)"
    )
    assert "| | `r0.json` | `r1.json` |" in lines
    assert "### `` model:a\\|`b` ``" in lines
    assert "| live peak (donated) | 100.0 MiB | **104.0 MiB** ≈ |" in lines
    assert "| copies (donated) | 0 | **1 (1.0 MiB)** ≠ |" in lines
    assert "| status | error: XLA failed | **missing** ≠ |" in lines
    assert "- ≠ r1.json: new donated copy \\[loop\\] of f32\\[512,512\\] at model.py:14 (1.0 MiB)" in lines


def test_json_compare_document() -> None:
    comparison = _mixed()
    document = json.loads(get_compare_renderer("json").render(comparison, RenderOptions()))
    assert document == json.loads(json.dumps(comparison.to_dict()))
    assert document["schema"] == COMPARE_SCHEMA == "fieldmem.compare/1"
    assert document["tolerance"] == "5%" and document["min_bytes"] == 1024
    assert document["significant_differences"] == 2
    assert [c["label"] for c in document["columns"]] == ["r0.json", "r1.json"]
    row = document["rows"][0]
    assert row["name"] == "model:step"
    assert row["cells"][1]["figures"]["donated"]["live_peak_bytes"] == 104 * MIB
    assert row["cells"][1]["copies"]["donated"] == {"count": 1, "bytes": MIB}
    assert row["cells"][0]["aliases"] == [
        {"input": "u", "input_index": 0, "output": "out", "output_index": 0, "bytes": 4 * MIB}
    ]
    assert {d["field"]: d["significant"] for d in row["differences"]} == {
        "donated.copies": True,
        "donated.live_peak_bytes": False,
    }


def test_unknown_compare_format_lists_the_known_ones() -> None:
    with pytest.raises(OptionError, match="use one of table, json, markdown"):
        get_compare_renderer("github")


def test_comparing_imports_no_jax() -> None:
    code = (
        "import sys, fieldmem.gate.compare, fieldmem.render.compare, fieldmem.request.tolerance; "
        "assert 'jax' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr


# ----------------------------------------------------------------------------
# Two real reports


@pytest.fixture(scope="module")
def field_reports() -> tuple[Report, Report]:
    """examples/field.py as it is (donated) and with ``--donate none``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)
        donated = fieldmem.check("examples/field.py")
        undonated = fieldmem.check("examples/field.py", target_options=TargetOptions(donate=DonateSpec.parse("none")))
    return donated, undonated


@pytest.mark.compile
def test_real_reports_differ_only_in_the_donated_variant(field_reports: tuple[Report, Report]) -> None:
    comparison = compare_reports([("donated.json", field_reports[0]), ("none.json", field_reports[1])])
    (row,) = comparison.rows
    assert row.name == "field:update"
    fields = {d.field for d in row.differences}
    assert not any(f.startswith("plain.") for f in fields), fields  # the same plain program twice
    assert {"verdict", "checks", "donated.aliases", "donated.copies", "donated.footprint_bytes"} <= fields
    messages = [d.change.message for d in row.differences]
    assert "none.json: alias lost: field.u → out.u" in messages
    assert "none.json: alias lost: field.v → out.v" in messages
    assert "none.json: check expect-in-place now fails" in messages
    (copy,) = [d for d in row.differences if d.change.kind == "copy"]
    assert copy.change.message.startswith(
        "none.json: new donated copy [parameter] of field.v (returned as out.v) at examples/field.py:"
    )
    assert all(d.significant for d in row.differences)
    same = compare_reports([("a.json", field_reports[0]), ("b.json", field_reports[0])])
    assert same.rows[0].differences == ()


# ----------------------------------------------------------------------------
# The command (wired into fieldmem.frontends.cli by the lead)


runner = CliRunner()


def invoke(*args: str) -> Any:
    from fieldmem.frontends.cli import app

    return runner.invoke(app, ["compare", *args], env={"COLUMNS": "120"})


@pytest.fixture
def saved(tmp_path: Path) -> dict[str, str]:
    """Three saved reports: a reference, one with a new copy, one with a live peak 4% larger."""
    return {
        "ref": str(_write(tmp_path / "ref.json", _report(_result(live_peak=100 * MIB)))),
        "copy": str(
            _write(tmp_path / "copy.json", _report(_result(live_peak=100 * MIB, copies=(_copy("model.py:14"),))))
        ),
        "peak": str(_write(tmp_path / "peak.json", _report(_result(live_peak=104 * MIB)))),
    }


def test_cli_compare_shows_the_difference_and_exits_0(saved: dict[str, str]) -> None:
    result = invoke(saved["ref"], saved["copy"])
    assert result.exit_code == 0, result.output
    assert "new donated copy [loop] of f32[512,512] at model.py:14" in result.stdout


@pytest.mark.parametrize(
    ("other", "options", "code"),
    [
        ("copy", [], 1),
        ("copy", ["--tolerance", "1000%"], 1),  # a new copy is never within a tolerance
        ("peak", [], 1),
        ("peak", ["--tolerance", "5%"], 0),
        ("peak", ["--tolerance", "live-peak:3%"], 1),
        ("ref", [], 0),
    ],
)
def test_cli_fail_on_diff(saved: dict[str, str], other: str, options: list[str], code: int) -> None:
    result = invoke(saved["ref"], saved[other], "--fail-on-diff", *options)
    assert result.exit_code == code, result.output


def test_cli_compare_formats_and_output(saved: dict[str, str], tmp_path: Path) -> None:
    result = invoke(saved["ref"], saved["peak"], "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["schema"] == "fieldmem.compare/1"
    summary = tmp_path / "compare.md"
    result = invoke(saved["ref"], saved["peak"], "--format", "markdown", "-o", str(summary))
    assert result.exit_code == 0, result.output
    assert summary.read_text().startswith("## ❌ fieldmem compare")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["missing.json", "{ref}"], "does not exist"),
        (["{ref}"], "at least two reports"),
        (["{ref}", "{peak}", "--tolerance", "peek:5%"], "did you mean 'peak'?"),
        (["{ref}", "{peak}", "--format", "github"], "use one of table, json, markdown"),
    ],
)
def test_cli_compare_mistakes_are_one_line(saved: dict[str, str], args: list[str], expected: str) -> None:
    result = invoke(*(a.format(**saved) for a in args))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("fieldmem: error: ") and expected in lines[0], result.stderr


def test_a_report_from_a_newer_fieldmem_with_a_copy_kind_this_one_does_not_know_is_compared(tmp_path: Path) -> None:
    """An older reader keeps the report: the unknown kind reads as "unknown", the copy is still compared (as
    new: no copy of the reference is of that kind), and a note names the file, the path and the word."""
    ref = _write(tmp_path / "ref.json", _report(_result(live_peak=100 * MIB)))
    document = _report(_result(live_peak=100 * MIB, copies=(_copy("model.py:14"),))).to_dict()
    document["fieldmem_version"] = "0.9.0"
    document["results"][0]["variants"]["donated"]["copies"][0]["kind"] = "dma"
    newer = tmp_path / "newer.json"
    write_atomic(newer, json.dumps(document))
    result = invoke(str(ref), str(newer))
    assert result.exit_code == 0, result.output
    assert "new donated copy [unknown] of f32[512,512] at model.py:14" in result.stdout
    note = (
        f"note: {newer}: results[0].variants.donated.copies[0].kind is 'dma', which this fieldmem does not know "
        "(the report is from fieldmem '0.9.0'): read as 'unknown'"
    )
    assert note in " ".join(result.stdout.split())
    as_json = json.loads(invoke(str(ref), str(newer), "-f", "json").stdout)
    assert as_json["notes"] == [note.removeprefix("note: ")]
    assert json.loads(invoke(str(ref), str(ref), "-f", "json").stdout)["notes"] == []


def test_a_donation_become_unusable_is_listed_but_marks_no_alias_count_that_did_not_change() -> None:
    """A donated leaf no output takes now (the aliases as they were): one difference of its own field, so the
    table does not mark the aliases row, whose counts are equal, as differing."""
    from fieldmem.model.copies import UnusableDonation

    before = _result()
    donated = dataclasses.replace(
        before.variants["donated"],
        unusable_donations=(UnusableDonation("v", 1, MIB, "no output has its size", "no-output-of-size"),),
    )
    after = dataclasses.replace(before, variants={**before.variants, "donated": donated})
    comparison = _compare(_report(before), _report(after))
    (difference,) = comparison.rows[0].differences
    assert (difference.field, difference.change.kind, difference.change.subject) == (
        "donated.unusable_donations",
        "donation",
        "v",
    )
    text = get_compare_renderer("table").render(comparison, RenderOptions(width=160))
    aliases_row = next(line for line in text.splitlines() if "aliases (donated)" in line)
    assert "≠" not in aliases_row and "≈" not in aliases_row
    assert "≠ r1.json: donation of v is now unusable (1.0 MiB): no output has its size" in text


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda d: d["results"][0]["variants"]["donated"]["memory"].__setitem__("temp_bytes", -5), "temp_bytes = -5"),
        (lambda d: d.__setitem__("min_bytes", -1), "min_bytes = -1"),
        (lambda d: d["results"][0]["variants"]["plain"]["memory"].__setitem__("peak_bytes", 2**63), "peak_bytes"),
        (
            lambda d: d["results"][0]["variants"]["donated"]["copies"][0].__setitem__("bytes", -1),
            "copies[0].bytes = -1",
        ),
    ],
)
def test_a_report_with_a_size_no_run_could_measure_is_refused(tmp_path: Path, edit: Any, named: str) -> None:
    """Issue 29, item 7: compare read ``temp_bytes=-5`` or ``min_bytes=-1`` as figures; one line, exit 2."""
    ref = _write(tmp_path / "ref.json", _report(_result(live_peak=100 * MIB, copies=(_copy("model.py:14"),))))
    document = json.loads(ref.read_text())
    edit(document)
    bad = tmp_path / "bad.json"
    write_atomic(bad, json.dumps(document))
    with pytest.raises(ReportFileError) as caught:
        load_report(bad)
    assert named in caught.value.message and "\n" not in caught.value.message
    result = invoke(str(ref), str(bad))
    assert result.exit_code == 2


def test_a_move_below_min_bytes_is_no_difference_unless_a_tolerance_is_set() -> None:
    """4 B of alignment is not a change (issue 48): without --tolerance, a figure that moved by less than
    --min-bytes is no difference and marks no cell; a tolerance the user sets (even 0) decides instead."""
    small = _compare(_report(_result()), _report(_result(footprint=4 * MIB + 4)))
    assert small.significant == () and all(not row.differences for row in small.rows)
    table = get_compare_renderer("table").render(small, RenderOptions(width=120))
    assert not [line for line in table.splitlines() if "MiB" in line and "≠" in line], table
    large = _compare(_report(_result()), _report(_result(footprint=4 * MIB + 2048)))
    assert "donated.footprint_bytes" in [d.field for _, d in large.significant]
    exact = _compare(_report(_result()), _report(_result(footprint=4 * MIB + 4)), tolerance="0")
    assert "donated.footprint_bytes" in [d.field for _, d in exact.significant]
