"""Every renderer, on an empty report and on a hand-made one (no compile)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fieldmem.model.codec import builtins
from fieldmem.model.copies import Alias, Copy, UnusableDonation
from fieldmem.model.errors import OptionError
from fieldmem.model.memory import Timeline
from fieldmem.model.target import TargetResult, Variant
from fieldmem.model.verdict import Check, Finding, Verdict
from fieldmem.render import RENDERERS, RenderOptions, get_renderer, jsonout
from fieldmem.render.table import sparkline

from factories import MIB, make_error_result, make_memory, make_report, make_timeline

COPY_V = Copy(
    bytes=MIB,
    shape="f32[512,512]{1,0}",
    kind="parameter",
    of_parameter="field.v",
    input_index=1,
    computation="main.2",
    instruction="copy",
    source="model.py:14",
    source_role="definition",
    output="out.v",
    cause="input-kept-intact",
)
TINY = Copy(
    bytes=4,
    shape="s32[]",
    kind="other",
    of_parameter=None,
    input_index=None,
    computation="main.2",
    instruction="copy.8",
    source=None,
    source_role=None,
)
GOOD = TargetResult(
    target="model.py",
    name="model:update",
    status="ok",
    definition="model.py:12",
    donate="auto",
    expect="in-place",
    variants={
        "plain": Variant("plain", (), make_memory(2 * MIB, 2 * MIB, 0, live_peak_bytes=None), copies=(COPY_V, TINY)),
        "donated": Variant(
            "donated",
            ("field",),
            make_memory(2 * MIB, 2 * MIB, 2 * MIB, live_peak_bytes=None),
            aliases=(
                Alias("field.u", 0, "out.u", 0, MIB),
                Alias("field.v", 1, "out.v", 1, MIB),
            ),
            unusable_donations=(UnusableDonation("f", 2, 4, "no output has its size (4 B)", "no-output-of-size"),),
            copies=(TINY,),
        ),
    },
    verdict=Verdict(
        in_place=True,
        summary="in place with donation: 2 output(s) reuse donated input buffers (2.0 MiB)",
        findings=(
            Finding(
                "info",
                "plain-copy",
                "without donation, field.v is copied (1.0 MiB) at model.py:14",
                source="model.py:14",
            ),
        ),
    ),
    savings={"footprint_bytes": 2 * MIB, "peak_bytes": 2 * MIB},
    checks=(Check("expect-in-place", True, "in place with donation"),),
)
BAD = make_error_result(
    "model.py:stepp", "target", "module 'model' has no 'stepp'; did you mean 'step'?", target="model.py:stepp"
)
FAILED = TargetResult(
    target="model.py",
    name="model:cast",
    status="ok",
    definition="model.py:30",
    donate="auto",
    expect="in-place",
    variants={
        "plain": Variant("plain", (), make_memory(MIB, MIB // 2, 0, live_peak_bytes=None)),
        "donated": Variant("donated", ("x",), make_memory(MIB, MIB // 2, 0, live_peak_bytes=None)),
    },
    verdict=Verdict(
        in_place=False,
        summary="not in place: out (bfloat16[512,512], 512.0 KiB) is written to a new buffer at model.py:31: no input has its size",
        findings=(
            Finding(
                "error",
                "new-buffer",
                "out (bfloat16[512,512], 512.0 KiB) is written to a new buffer at model.py:31: no input has its size",
            ),
        ),
    ),
    savings={"footprint_bytes": 0},
    checks=(Check("expect-in-place", False, "expected in place with donation, but it is not (see the findings)"),),
)


@pytest.mark.parametrize("name", sorted(RENDERERS))
@pytest.mark.parametrize("results", [(), (GOOD, BAD, FAILED)], ids=["empty", "mixed"])
@pytest.mark.parametrize("verbose", [False, True], ids=["compact", "verbose"])
def test_every_renderer_renders(name: str, results: tuple[TargetResult, ...], verbose: bool) -> None:
    text = RENDERERS[name].render(make_report(results), RenderOptions(verbose=verbose, width=120))
    assert isinstance(text, str) and text.endswith("\n")
    for result in results:
        assert result.name in text


def test_json_renderer_is_the_report_dict() -> None:
    report = make_report((GOOD, BAD))
    assert json.loads(get_renderer("json").render(report, RenderOptions())) == report.to_dict()


@pytest.mark.parametrize("name", ["model:step", "modèle→\U0001d535:step"], ids=["ascii", "beyond-ascii"])
def test_json_written_by_msgspec_is_the_text_pythons_json_writes(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The records written straight by msgspec: the very text of the builtins written by Python's json (ASCII,
    every other character its escape, a surrogate pair beyond the basic plane), one result per line."""
    report = make_report((dataclasses.replace(GOOD, name=name), BAD))
    expected = jsonout.document_text(builtins(report))

    def refused(document: object) -> str:
        raise AssertionError("Python's json wrote it")

    monkeypatch.setattr(jsonout, "document_text", refused)
    text = get_renderer("json").render(report, RenderOptions())
    assert text == expected and text.isascii()
    assert json.loads(text)["results"][0]["name"] == name


def test_json_of_a_name_msgspec_refuses_is_written_by_pythons_json() -> None:
    """A lone surrogate (UTF-8 cannot hold it): msgspec refuses the report, Python's json writes it, escaped."""
    report = make_report((dataclasses.replace(GOOD, name="bad\udcff:step"),))
    text = get_renderer("json").render(report, RenderOptions())
    assert text == jsonout.document_text(builtins(report)) and "\\udcff" in text


def test_table_shows_verdicts_sizes_and_sources() -> None:
    text = get_renderer("table").render(make_report((GOOD, BAD, FAILED)), RenderOptions(width=160))
    assert "in place" in text and "not in place" in text
    assert "4.0 MiB → 2.0 MiB" in text  # footprint plain -> donated
    assert "field.v 1.0 MiB [parameter] at model.py:14" in text
    assert "did you mean 'step'?" in text
    assert "✗ expect-in-place" in text
    # the 4-byte copy stays out of the table (below --min-bytes) but counts in JSON
    assert "s32[]" not in text
    assert "1 devices" not in text and "1 device " in text


@pytest.mark.parametrize("width", [80, 100, 200])
def test_the_summary_fits_the_terminal(width: int) -> None:
    """Wide when one row per target fits, else stacked; never a line past the width, no name folded."""
    report = make_report((GOOD, BAD, FAILED))
    text = get_renderer("table").render(report, RenderOptions(width=width))
    summary = text.split(f"\n{GOOD.name}  (")[0]  # the table, before the first target's details
    assert all(len(line) <= width for line in summary.splitlines()), summary
    for result in (GOOD, BAD, FAILED):
        assert result.name in summary
    stacked = "(saves 2.0 MiB)" in summary  # the stacked form's footprint line
    assert stacked == (width < 120), summary
    assert "4.0 MiB → 2.0 MiB" in summary


def test_verbose_table_lists_aliases_and_unusable_donations() -> None:
    text = get_renderer("table").render(make_report((GOOD,)), RenderOptions(verbose=True, width=160))
    assert "field.u" in text and "out.u" in text
    assert "no output has its size (4 B)" in text
    assert "footprint_bytes" in text


def test_table_has_no_color_codes_unless_asked() -> None:
    plain = get_renderer("table").render(make_report((GOOD,)), RenderOptions(color=False))
    colored = get_renderer("table").render(make_report((GOOD,)), RenderOptions(color=True))
    assert "\x1b[" not in plain
    assert "\x1b[" in colored


def test_unknown_renderer_lists_the_known_ones() -> None:
    with pytest.raises(OptionError, match="use one of table, json"):
        get_renderer("yaml")


@pytest.mark.parametrize(
    ("timeline", "scale", "width", "expected"),
    [
        # one column per schedule point: each value in eighths of the scale
        (make_timeline((1, 2, 3, 4, 5, 6, 7, 8)), 8, 8, "▁▂▃▄▅▆▇█"),
        # fewer points than columns: each value holds over its share of the width
        (make_timeline((1, 2, 3, 4, 5, 6, 7, 8)), 8, 16, "▁▁▂▂▃▃▄▄▅▅▆▆▇▇██"),
        # more points than columns: a column shows the largest value in it, so a one-point spike survives
        (make_timeline((1,) * 5 + (8,) + (1,) * 10), 8, 4, "▁█▁▁"),
        # a decimated timeline: a kept sample holds until the next one; the last column takes the max of two
        (make_timeline((2, 8, 2, 4), positions=(0, 10, 90, 99), length=100), 8, 10, "▂████████▄"),
        # the same scale for both variants: half the scale is half a block high; zero is blank
        (make_timeline((0, 4, 4, 0)), 8, 4, " ▄▄ "),
        # anything above zero shows; 20 bytes over half of 4 MiB is still half a block
        (make_timeline((1, 2 * 1024 * 1024 + 20)), 4 * 1024 * 1024 + 20, 2, "▁▄"),
    ],
    ids=["one-per-column", "stretched", "max-per-column", "decimated", "same-scale", "rounding"],
)
def test_sparkline_resamples_by_max_per_column(timeline: Timeline, scale: int, width: int, expected: str) -> None:
    assert sparkline(timeline, scale, width) == expected


def _with_timelines(result: TargetResult) -> TargetResult:
    """GOOD with a plain curve peaking at 4 MiB (16 points) and a donated one at 2 MiB (8 points)."""
    plain = make_timeline(
        tuple(MIB * v for v in (1, 1, 2, 2, 3, 3, 4, 4, 4, 4, 3, 3, 2, 2, 1, 1)),
        peak_position=6,
        peak_instruction="copy",
        peak_source="model.py:14",
    )
    donated = make_timeline(tuple(MIB * v for v in (1, 1, 2, 2, 2, 2, 1, 1)), peak_position=2, peak_instruction="add")
    variants = {
        "plain": dataclasses.replace(result.variants["plain"], timeline=plain),
        "donated": dataclasses.replace(result.variants["donated"], timeline=donated),
    }
    return dataclasses.replace(result, variants=variants)


def test_verbose_table_shows_plain_and_donated_sparklines_on_one_scale() -> None:
    text = get_renderer("table").render(
        make_report((_with_timelines(GOOD), BAD)), RenderOptions(verbose=True, width=160)
    )
    lines = text.splitlines()
    assert any("memory over the schedule, plain vs donated" in line and "█ = 4.0 MiB" in line for line in lines)
    plain = "▂" * 7 + "▄" * 7 + "▆" * 7 + "█" * 14 + "▆" * 7 + "▄" * 7 + "▂" * 7
    donated = "▂" * 14 + "▄" * 28 + "▂" * 14
    assert len(plain) == len(donated) == 56
    assert (
        "    plain   " + plain + " peak 4.0 MiB at copy (model.py:14)"
        in lines[lines.index(next(line for line in lines if "memory over the schedule" in line)) + 1]
    )
    assert any(line.startswith("    donated " + donated + " peak 2.0 MiB at add") for line in lines)


def test_sparklines_are_only_in_the_verbose_view() -> None:
    report = make_report((_with_timelines(GOOD),))
    assert "memory over the schedule" not in get_renderer("table").render(report, RenderOptions(width=160))
    # a report without timelines (saved by an older fieldmem) has no sparkline, and no error
    assert "memory over the schedule" not in get_renderer("table").render(
        make_report((GOOD,)), RenderOptions(verbose=True)
    )


def _render_imports() -> dict[str, set[str]]:
    """Each module of fieldmem.render -> the fieldmem.render modules it imports (also inside functions)."""
    import ast
    from pathlib import Path

    import fieldmem.render

    folder = Path(fieldmem.render.__file__).parent
    graph: dict[str, set[str]] = {}
    for path in folder.glob("*.py"):
        name = "fieldmem.render" if path.stem == "__init__" else f"fieldmem.render.{path.stem}"
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fieldmem.render"):
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names if a.name.startswith("fieldmem.render"))
        graph[name] = imported - {name}
    return graph


def test_the_shared_pieces_import_no_renderer_and_renderers_form_no_cycle() -> None:
    graph = _render_imports()
    assert graph["fieldmem.render.pieces"] == set()
    assert graph["fieldmem.render.layout"] == set()  # the terminal's layout pieces: rich only
    assert graph["fieldmem.render.chains"] <= {"fieldmem.render.pieces", "fieldmem.render.layout"}

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import cycle: {' -> '.join(path + (module,))}"
        for imported in graph.get(module, ()):
            visit(imported, path + (module,))

    for module in graph:
        visit(module, ())


@pytest.mark.parametrize("name", ["table", "markdown", "github", "html"])
def test_a_report_from_another_environment_names_its_libraries_after_jax(name: str) -> None:
    """Checked under --jax/--python, a report says which flax and optax that environment had (they can differ
    from yours); a report of your own environment says nothing of them."""
    report = make_report((), jax_version="0.7.2", library_versions={"flax": "0.12.0", "optax": "0.2.5"})
    text = get_renderer(name).render(report, RenderOptions(width=200))
    assert "flax" in text and "0.12.0" in text and "optax" in text and "0.2.5" in text
    if name != "html":
        assert "jax 0.7.2 (flax 0.12.0, optax 0.2.5)" in text
    assert "flax" not in get_renderer(name).render(make_report(()), RenderOptions(width=200))
