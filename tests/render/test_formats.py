"""The CI formats: GitHub workflow annotations and the Markdown job summary.

Hand-made reports (no compile) cover escaping, errored targets, failed checks
and baselines; one real report of ``examples/field.py``, checked without
donation so that it fails, shows annotations land on real source lines.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import fieldmem
from fieldmem.model.comparison import Accepted, BaselineComparison, Change
from fieldmem.model.copies import Alias, Copy
from fieldmem.model.environment import DeviceInfo
from fieldmem.model.errors import OptionError
from fieldmem.model.report import Report
from fieldmem.model.target import ErrorInfo, TargetResult, Variant
from fieldmem.model.verdict import Check, Finding, Verdict
from fieldmem.render import RENDERERS, RenderOptions, formats, get_renderer
from fieldmem.render.formats import COMPARISON, DOCUMENTS, FIT, REPORT, format_help, register, renderers
from fieldmem.render.github import annotation, escape_data, escape_property, location
from fieldmem.render.pieces import code, escape
from fieldmem.request.spec import DonateSpec
from fieldmem.request.target import TargetOptions

from factories import MIB, make_error_result, make_memory, make_report

ROOT = Path(__file__).resolve().parents[2]


def _report(results: tuple[TargetResult, ...], baseline: BaselineComparison | None = None) -> Report:
    # two devices and a jaxlib apart from jax: the environment lines must show both
    return make_report(
        results,
        jaxlib_version="0.10.1",
        devices=(DeviceInfo(0, "cpu", "cpu"), DeviceInfo(1, "cpu", "cpu")),
        baseline=baseline,
    )


COPY_V = Copy(
    bytes=MIB,
    shape="f32[512,512]{1,0}",
    kind="parameter",
    of_parameter="field.v",
    input_index=1,
    computation="main",
    instruction="copy",
    source="model.py:14",
    source_role="definition",
    output="out.v",
)
GOOD = TargetResult(
    target="model.py",
    name="model:update",
    status="ok",
    definition="model.py:12",
    expect="in-place",
    variants={
        "plain": Variant("plain", (), make_memory(2 * MIB, 2 * MIB, 0), copies=(COPY_V,)),
        "donated": Variant(
            "donated",
            ("field",),
            make_memory(2 * MIB, 2 * MIB, 2 * MIB),
            aliases=(Alias("field.u", 0, "out.u", 0, MIB), Alias("field.v", 1, "out.v", 1, MIB)),
        ),
    },
    verdict=Verdict(
        True,
        "in place with donation: 2 output(s) reuse donated input buffers (2.0 MiB)",
        (
            Finding(
                "info",
                "plain-copy",
                "without donation, field.v is copied (1.0 MiB) at model.py:14",
                source="model.py:14",
            ),
        ),
    ),
    savings={"footprint_bytes": 2 * MIB},
    checks=(Check("expect-in-place", True, "in place with donation"),),
)
FAILED = TargetResult(
    target="model.py",
    name="model:cast",
    status="ok",
    definition="model.py:30",
    expect="in-place",
    variants={
        "plain": Variant("plain", (), make_memory(MIB, MIB // 2, 0)),
        "donated": Variant("donated", ("x",), make_memory(MIB, MIB // 2, 0)),
    },
    verdict=Verdict(
        False,
        "not in place: out (bfloat16[512,512], 512.0 KiB) is written to a new buffer at model.py:31",
        (
            Finding(
                "error",
                "new-buffer",
                "out (bfloat16[512,512], 512.0 KiB) is written to a new buffer at model.py:31",
                source="model.py:31",
            ),
            Finding("warning", "unusable-donation", "x is donated but no output reuses it: 100% wasted"),
        ),
    ),
    savings={"footprint_bytes": 0},
    checks=(Check("expect-in-place", False, "expected in place with donation, but it is not (see the findings)"),),
)
BROKEN = make_error_result(
    "model.py:stepp", "target", "module 'model' has no 'stepp'; did you mean 'step'?", target="model.py:stepp"
)
CRASHED = make_error_result(
    "model:boom",
    "compile",
    "XLA compilation failed: RuntimeError: 50% of\nsomething",
    target="model.py:boom",
    definition="model.py:40",
)
BASELINE = BaselineComparison(
    path="fieldmem-baseline.json",
    regressions=(
        Change(
            "model:update", "copy", "field.v", "new copy of field.v (1.0 MiB) at model.py:14", None, MIB, "model.py:14"
        ),
        Change("model:update", "figure", "live peak", "live peak 2.0 MiB → 3.0 MiB", 2 * MIB, 3 * MIB),
    ),
    improvements=(Change("model:cast", "figure", "temp", "temp 1.0 MiB → 0 B", MIB, 0),),
    notes=("the baseline was made on gpu, this run is on cpu",),
    tolerance="2%",
)


def _lines(text: str) -> list[str]:
    assert text.endswith("\n")
    return text[:-1].split("\n")


# ----------------------------------------------------------------------------
# GitHub annotations


def test_github_escapes_messages_and_properties() -> None:
    assert escape_data("50% done\r\nnext: a,b") == "50%25 done%0D%0Anext: a,b"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    assert annotation("error", "x\ny", title="t: 1, 2", source="pkg/model.py:14") == (
        "::error file=pkg/model.py,line=14,title=t%3A 1%2C 2::x%0Ay"
    )
    assert annotation("warning", "plain") == "::warning::plain"
    assert annotation("notice", "n", source="not-a-location") == "::notice::n"


def test_github_locations_are_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert location(f"{tmp_path / 'pkg' / 'model.py'}:7") == ("pkg/model.py", 7)
    outside = "/elsewhere/site-packages/lib.py" if os.name != "nt" else "Z:/elsewhere/lib.py"
    assert location(f"{outside}:3") == (outside, 3)
    assert location("model.py:12") == ("model.py", 12)
    assert location("model.py") is None and location(None) is None and location("model.py:x") is None


def test_github_annotates_each_offending_thing_at_its_line() -> None:
    text = get_renderer("github").render(_report((GOOD, FAILED, BROKEN, CRASHED)), RenderOptions())
    lines = _lines(text)
    # errors first (GitHub shows 10 of each kind): one per cause, at the line its message names, the failed
    # expectation the detail of the cause it names; then the targets that could not be checked
    assert lines[:-1] == [
        "::error file=model.py,line=31,title=fieldmem%3A model%3Acast%3A new-buffer (expect-in-place failed)::"
        "out (bfloat16[512,512], 512.0 KiB) is written to a new buffer at model.py:31",
        "::error title=fieldmem%3A model.py%3Astepp could not be checked::"
        "target: module 'model' has no 'stepp'; did you mean 'step'?",
        "::error file=model.py,line=40,title=fieldmem%3A model%3Aboom could not be checked::"
        "compile: XLA compilation failed: RuntimeError: 50%25 of%0Asomething",
        # a finding without a source sits at the function's definition
        "::warning file=model.py,line=30,title=fieldmem%3A model%3Acast%3A unusable-donation::"
        "x is donated but no output reuses it: 100%25 wasted",
    ]
    summary = lines[-1]
    assert summary.startswith("::notice::fieldmem (jax 0.10.2, cpu): 4 targets: ")
    assert "1 in place (model:update)" in summary and "1 not in place (model:cast)" in summary
    assert "2 could not be checked (model.py:stepp, model:boom)" in summary
    assert "1 check failed" in summary


def test_github_with_a_baseline_puts_regressions_first_and_leaves_accepted_findings_out() -> None:
    compared = replace(BASELINE, accepted=(Accepted("model:update"), Accepted("model:cast")))
    text = get_renderer("github").render(_report((GOOD, FAILED, BROKEN, CRASHED), compared), RenderOptions())
    lines = _lines(text)
    assert lines[:-1] == [
        # one cause: the new copy, at its line, with the growth it brings as its detail
        "::error file=model.py,line=14,title=fieldmem%3A model%3Aupdate%3A new copy%2C 2 regressions against the "
        "baseline::new copy of field.v (1.0 MiB) at model.py:14; with it (1 more): live peak 2.0 MiB → 3.0 MiB",
        # the baseline did not accept it failing: an error still
        "::error file=model.py,line=30,title=fieldmem%3A model%3Acast%3A expect-in-place failed::"
        "expected in place with donation, but it is not (see the findings)",
        "::error title=fieldmem%3A model.py%3Astepp could not be checked::"
        "target: module 'model' has no 'stepp'; did you mean 'step'?",
        "::error file=model.py,line=40,title=fieldmem%3A model%3Aboom could not be checked::"
        "compile: XLA compilation failed: RuntimeError: 50%25 of%0Asomething",
        # model:cast's findings are the baseline's: in the job summary, not annotated
        "::warning title=fieldmem%3A baseline fieldmem-baseline.json::the baseline was made on gpu, this run is on cpu",
    ]
    summary = lines[-1]
    assert "1 check failed" in summary and "2 regressions, 1 improvement" in summary
    # the check accepted failing is a notice, and no longer fails the run
    accepting = replace(BASELINE, regressions=(), accepted=(Accepted("model:cast", ("expect-in-place",)),))
    report = _report((GOOD, FAILED), accepting)
    assert report.exit_code == 0
    lines = _lines(get_renderer("github").render(report, RenderOptions()))
    assert not any(line.startswith("::error") for line in lines)
    assert lines[-2] == (
        "::notice file=model.py,line=30,title=fieldmem%3A model%3Acast%3A expect-in-place failing%2C accepted by the "
        "baseline::expected in place with donation, but it is not (see the findings)"
    )
    assert "1 failing check accepted by the baseline" in lines[-1]
    # a target new to the baseline: its error finding is a warning (nothing fails on it)
    assert "::warning file=model.py,line=31,title=fieldmem%3A model%3Acast%3A new-buffer::" in get_renderer(
        "github"
    ).render(_report((GOOD, FAILED), replace(accepting, accepted=(Accepted("model:update"),))), RenderOptions())


def test_github_beyond_the_annotation_limits_the_job_summary_has_everything() -> None:
    """GitHub shows 10 annotations of each kind per step: what fails comes first, the summary notice is
    always shown and says how many went beyond, and the job summary lists every one, a headline per target."""
    from fieldmem.render.github import ANNOTATIONS_SHOWN, job_summary

    names = [f"model:t{n:02d}" for n in range(14)]
    results = tuple(replace(FAILED, name=name, definition=f"model.py:{100 + n}") for n, name in enumerate(names))
    regressions = tuple(
        Change(name, "copy", "field.v", f"{name}: new copy of field.v (1.0 MiB) at model.py:{200 + n}", None, MIB)
        for n, name in enumerate(names[:12])
    )
    comparison = BaselineComparison(
        "b.json",
        regressions=regressions,
        accepted=tuple(Accepted(name, ("expect-in-place",)) for name in names),
    )
    report = _report(results, comparison)
    lines = _lines(get_renderer("github").render(report, RenderOptions()))
    errors = [line for line in lines if line.startswith("::error")]
    notices = [line for line in lines if line.startswith("::notice")]
    assert errors == lines[:12] and all("new copy%2C 1 regression against the baseline" in line for line in errors)
    assert not any(line.startswith("::warning") for line in lines)  # the accepted findings: not annotated
    assert len(notices) == ANNOTATIONS_SHOWN and notices[-1] == lines[-1]  # the summary is among those shown
    assert all("expect-in-place failing%2C accepted by the baseline" in line for line in notices[:-1])
    assert "14 failing checks accepted by the baseline" in lines[-1]
    assert "2 errors, 5 notices not annotated: the job summary lists everything" in lines[-1]

    summary = job_summary(report, RenderOptions())
    for name in names:
        assert f"- ❌ `{name}`: not in place: " in summary or f"- ☑️ `{name}`: not in place: " in summary  # headline
        assert f"- ☑️ `{name}`: expect-in-place: expected in place with donation" in summary  # the baseline's list
    assert summary.count("- ☑️ expect-in-place (failing, accepted by the baseline): ") == 14  # each target's section
    assert summary.count("- ❌ `model:t") == 12 + 12  # 12 headlines with a regression, 12 regressions listed
    assert "- ☑️ `model:t13`: not in place: out (bfloat16\\[512,512\\], 512.0 KiB)" in summary
    assert summary.index("**12 regressions**") < summary.index("### `model:t00`")  # regressions first
    assert "- ⚠️ x is donated but no output reuses it: 100% wasted" in summary  # every finding
    assert report.exit_code == 1


def test_the_job_summary_stays_within_what_github_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    from fieldmem.render import github

    report = _report((GOOD, FAILED))
    whole = github.job_summary(report, RenderOptions())
    assert "- ℹ️ without donation, field.v is copied" in whole  # -v: the info findings too
    monkeypatch.setattr(github, "SUMMARY_LIMIT", len(whole.encode()) - 1)
    shorter = github.job_summary(report, RenderOptions())
    assert "ℹ️" not in shorter and "- ❌ `model:cast`: not in place" in shorter  # the headlines stay
    monkeypatch.setattr(github, "SUMMARY_LIMIT", 800)
    cut = github.job_summary(report, RenderOptions())
    assert len(cut.encode()) <= 800 and cut.endswith("`--format json -o FILE` writes the whole report.**\n")


def test_github_emits_only_the_summary_for_fine_results() -> None:
    assert _lines(get_renderer("github").render(_report((GOOD,)), RenderOptions())) == [
        "::notice::fieldmem (jax 0.10.2, cpu): 1 target: 1 in place (model:update)"
    ]
    assert _lines(get_renderer("github").render(_report(()), RenderOptions())) == [
        "::notice::fieldmem (jax 0.10.2, cpu): no targets were checked"
    ]


def test_github_keeps_every_command_on_one_line() -> None:
    nasty = TargetResult(
        target="a,b:c",
        name="a,b:c%",
        status="error",
        definition="dir,1/m:od.py:9",
        error=ErrorInfo("arguments", "line one\r\nline two"),
    )
    lines = _lines(get_renderer("github").render(_report((nasty,)), RenderOptions()))
    assert lines[0] == (
        "::error file=dir%2C1/m%3Aod.py,line=9,title=fieldmem%3A a%2Cb%3Ac%25 could not be checked::"
        "arguments: line one%0D%0Aline two"
    )
    assert len(lines) == 2 and lines[1].startswith("::notice::")


# ----------------------------------------------------------------------------
# Markdown


def test_markdown_code_spans_and_escapes_survive_tables() -> None:
    assert code("model:update") == "`model:update`"
    assert code("a|b") == "`a\\|b`"
    assert code("x`y") == "``x`y``"
    assert code("`a``") == "``` `a`` ```"
    assert escape("a|b*c_d [e] <f>\nnext") == r"a\|b\*c\_d \[e\] \<f\> next"


def test_markdown_summary_of_a_mixed_run() -> None:
    text = get_renderer("markdown").render(_report((GOOD, FAILED, BROKEN), BASELINE), RenderOptions())
    lines = _lines(text)
    assert lines[0] == "## ❌ fieldmem: 1 of 3 targets in place, 1 could not be checked, 1 check failed, 2 regressions"
    assert "| `model:update` | ✅ in place | 4.0 MiB → 2.0 MiB | 4.0 MiB → 2.0 MiB | 2.0 MiB | 1/0 |" in lines
    assert (
        "| `model:cast` | ❌ not in place; ❌ expect-in-place | 1.5 MiB → 1.5 MiB | 1.5 MiB → 1.5 MiB | 0 B | 0/0 |"
        in lines
    )
    assert "| `model.py:stepp` | ❌ error | | | | |" in lines
    # the fine target has no section; the failing ones do, with their findings and sources
    assert not any(line.startswith("### `model:update`") for line in lines)
    assert "### `model:cast`: ❌ not in place; ❌ expect-in-place (`model.py:30`)" in lines
    assert "- ❌ expect-in-place: expected in place with donation, but it is not (see the findings)" in lines
    assert "- ⚠️ x is donated but no output reuses it: 100% wasted" in lines
    assert "- ❌ could not be checked: target: module 'model' has no 'stepp'; did you mean 'step'?" in lines
    # the baseline
    assert "### Against the baseline `fieldmem-baseline.json`" in lines
    assert "- ❌ `model:update`: new copy of field.v (1.0 MiB) at model.py:14" in lines
    assert "- ❌ `model:update`: live peak 2.0 MiB → 3.0 MiB" in lines
    assert "- ✅ `model:cast`: temp 1.0 MiB → 0 B" in lines
    assert "- ⚠️ the baseline was made on gpu, this run is on cpu" in lines
    # the environment
    assert any("jax 0.10.2 · jaxlib 0.10.1 · backend cpu (cpu) · devices: 2 × cpu" in line for line in lines)


def test_markdown_escapes_names_and_passes_a_clean_run() -> None:
    weird = TargetResult(
        target="m.py",
        name="m:f|`g`",
        status="ok",
        definition="m.py:1",
        variants=GOOD.variants,
        verdict=GOOD.verdict,
        savings=GOOD.savings,
    )
    lines = _lines(get_renderer("markdown").render(_report((weird,)), RenderOptions()))
    assert lines[0] == "## ✅ fieldmem: 1 of 1 target in place"
    row = next(line for line in lines if line.startswith("| ``"))
    assert row.startswith("| `` m:f\\|`g` `` | ✅ in place |")  # padded: it ends with a backtick
    assert row.count(" | ") == 5  # six cells: the escaped pipe splits nothing
    verbose = get_renderer("markdown").render(_report((weird,)), RenderOptions(verbose=True))
    assert "- ℹ️ without donation, field.v is copied (1.0 MiB) at model.py:14" in verbose


def test_markdown_without_targets() -> None:
    text = get_renderer("markdown").render(_report(()), RenderOptions())
    assert "No targets were checked." in text and text.startswith("## ✅ fieldmem: 0 of 0 targets in place")


# ----------------------------------------------------------------------------
# Registration


def test_every_format_the_request_accepts_has_a_renderer_and_no_other() -> None:
    from fieldmem.request.fit import FIT_FORMATS
    from fieldmem.request.options import FORMATS

    assert formats.formats(REPORT) == FORMATS and formats.formats(FIT) == FIT_FORMATS


def test_ci_formats_are_registered_with_extensions() -> None:
    assert (RENDERERS["github"].extension, RENDERERS["markdown"].extension) == (".txt", ".md")
    assert RENDERERS is renderers(REPORT) and {"table", "json", "github", "markdown"} <= set(RENDERERS)
    # html is registered exactly when its module exists
    assert ("html" in RENDERERS) == formats._available("fieldmem.render.html")
    assert not formats._available("fieldmem.render.no_such_format")
    with pytest.raises(OptionError, match="use one of table, json, github, markdown"):
        get_renderer("yaml")
    with pytest.raises(OptionError, match=r"not known for compare: use one of table, json, markdown$"):
        get_renderer("html", COMPARISON)


def test_the_cli_help_lists_each_documents_formats_from_the_registry() -> None:
    """``--format``'s help of check, compare and fit says what the registry holds (the help strings stay
    literal in the CLI: reading the registry there would load fieldmem.render, ~300 ms, into ``--help``)."""
    import typer

    from fieldmem.frontends.cli import app

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    helps = {
        name: next(p.help for p in commands[name].params if "--format" in p.opts)
        for name in ("check", "compare", "fit")
    }
    assert helps == {"check": format_help(REPORT), "compare": format_help(COMPARISON), "fit": format_help(FIT)}
    assert format_help(FIT) == "table (default) | json | markdown | svg (a picture; needs -o)"


@pytest.fixture
def scratch_registry() -> Iterator[None]:
    """The registry as it was, after the test."""
    saved = {document: dict(renderers(document)) for document in DOCUMENTS}
    modules = dict(formats._MODULES)
    yield
    for document, table in saved.items():
        renderers(document).clear()
        renderers(document).update(table)
    formats._MODULES.clear()
    formats._MODULES.update(modules)


CSV_RENDERER = """
def render(document, options):
    return type(document).__name__ + " as csv"
"""


def test_a_format_registered_in_one_place_is_offered_by_each_document_it_declares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scratch_registry: None
) -> None:
    """A new format is its renderer module and its rows: nothing else changes for the lookups, the lists
    errors give, the help and preloading to offer it (with its suffix) for the documents it names."""
    from fieldmem.gate.compare import compare_reports
    from fieldmem.render.compare import COMPARE_RENDERERS, get_compare_renderer
    from fieldmem.render.fit import get_fit_renderer

    (tmp_path / "csv_renderer.py").write_text(CSV_RENDERER)
    monkeypatch.syspath_prepend(str(tmp_path))
    for document in (REPORT, COMPARISON):
        assert register(document, "csv", ".csv", "csv_renderer:render") is not None
    assert register(FIT, "csv", ".csv", "no_such_csv_renderer:render") is None  # not installed: not offered

    report = make_report(())
    assert get_renderer("csv").extension == ".csv" and "csv" in RENDERERS
    assert get_renderer("csv").render(report, RenderOptions()) == "Report as csv"
    comparison = compare_reports([("a", report), ("b", report)])
    assert COMPARE_RENDERERS["csv"].extension == ".csv"
    assert get_compare_renderer("csv").render(comparison, RenderOptions()) == "Comparison as csv"
    assert format_help(REPORT).endswith("| html | csv") and format_help(COMPARISON).endswith("| markdown | csv")
    with pytest.raises(OptionError, match=r"use one of table, json, markdown, svg$"):
        get_fit_renderer("csv")
    formats.preload(["csv"])
    assert "csv_renderer" in sys.modules
    monkeypatch.delitem(sys.modules, "csv_renderer")


def test_importing_the_renderers_imports_no_renderer_and_no_jax() -> None:
    code_ = (
        "import sys, fieldmem.render as r; "
        "assert 'jax' not in sys.modules, 'jax'; "
        "assert [m for m in sys.modules if m.startswith('fieldmem.render.')] == ['fieldmem.render.formats'], "
        "sorted(sys.modules); "
        "print(','.join(r.RENDERERS))"
    )
    done = subprocess.run([sys.executable, "-c", code_], capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("table,json,github,markdown")


# ----------------------------------------------------------------------------
# A real report


@pytest.fixture(scope="module")
def undonated_field() -> Report:
    """examples/field.py checked without donation: expect-in-place fails, field.v is copied."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)
        return fieldmem.check("examples/field.py", target_options=TargetOptions(donate=DonateSpec.parse("none")))


@pytest.mark.compile
def test_github_on_a_real_report_points_at_real_lines(undonated_field: Report) -> None:
    result = undonated_field.results[0]
    assert result.status == "ok" and not result.verdict.in_place
    lines = _lines(get_renderer("github").render(undonated_field, RenderOptions()))
    errors = [line for line in lines if line.startswith("::error ")]
    assert errors and lines[-1].startswith("::notice::")
    source = (ROOT / "examples" / "field.py").read_text().splitlines()
    for line in errors:
        properties = dict(p.split("=", 1) for p in line[len("::error ") :].split("::", 1)[0].split(","))
        assert properties["file"] == "examples/field.py", line
        assert source[int(properties["line"]) - 1].strip(), line  # a real, non-blank line
    # one change (donate field) is one error: its outputs in new buffers and field.v's copy its detail
    (error,) = errors
    assert "the donation (expect-in-place failed)" in error and "field.v is not donated and is copied" in error


@pytest.mark.compile
def test_markdown_on_a_real_report(undonated_field: Report) -> None:
    text = get_renderer("markdown").render(undonated_field, RenderOptions())
    assert text.startswith("## ❌ fieldmem: 0 of 1 target in place, 1 check failed")
    assert "| `field:update` | ❌ not in place; ❌ expect-in-place |" in text
    assert "### `field:update`" in text and "examples/field.py:25" in text
    assert f"jax {undonated_field.jax_version}" in text and f" · jaxlib {undonated_field.jaxlib_version}" in text
