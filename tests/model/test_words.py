"""Each word of the report is declared once (fieldmem/model/vocabulary.py): the ``Literal`` sets the codec reads, the
severities the findings are made with, the schema page and the renderers all follow the declarations; a copy kind
declared in a test alone is read, written, in the schema and shown by every renderer.

To write docs/report-schema.md's parts again after changing a declaration: ``python tests/model/test_words.py``.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path
from typing import get_args

import pytest

from fieldmem.model import report, vocabulary, word_sets
from fieldmem.model.vocabulary import (
    COPY_CAUSE_WORDS,
    COPY_KIND_WORDS,
    FINDING_WORDS,
    CopyKindWord,
    FindingWord,
    Word,
    copy_kind_label,
    finding_word,
)

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "docs" / "report-schema.md"
FINDINGS = ROOT / "fieldmem" / "findings"
_CELLS = {"copy kinds": ("kind", COPY_KIND_WORDS, ""), "copy causes": ("cause", COPY_CAUSE_WORDS, "")}
_CAUSE_TAIL = (
    ", or `null` (among `loop` copies: one of a value that is not the loop carry; `conditional` copies have none)"
)
_BLOCK_BEGIN, _BLOCK_END = "<!-- words: finding codes -->", "<!-- words: end -->"


def cell(words: tuple[Word, ...]) -> str:
    return ", ".join(f"`{w.name}` ({w.meaning})" for w in words)


def cell_line(name: str) -> str:
    key, words, _ = _CELLS[name]
    tail = _CAUSE_TAIL if key == "cause" else ""
    return f"| `{key}` | <!-- words: {name} --> {cell(words)}{tail} |"


def finding_table() -> str:
    lines = ["| code | severity | when |", "|---|---|---|"]
    for word in FINDING_WORDS:
        lines.append(f"| `{word.name}` | {' or '.join(word.severities)} | {word.meaning} |")
    return "\n".join(lines)


def write(text: str) -> str:
    """``text`` (the schema page) with the declared words in their places."""
    for name in _CELLS:
        text = re.sub(rf"^\| `[a-z]+` \| <!-- words: {name} -->.*$", lambda _m, n=name: cell_line(n), text, flags=re.M)
    head, rest = text.split(_BLOCK_BEGIN, 1)
    _, tail = rest.split(_BLOCK_END, 1) if _BLOCK_END in rest else ("", rest)
    return f"{head}{_BLOCK_BEGIN}\n{finding_table()}\n{_BLOCK_END}{tail}"


@pytest.mark.parametrize(
    ("literal", "words"),
    [
        (word_sets.CopyKind, COPY_KIND_WORDS),
        (word_sets.CopyCause, COPY_CAUSE_WORDS),
        (word_sets.FindingCode, FINDING_WORDS),
    ],
    ids=["copy kinds", "copy causes", "finding codes"],
)
def test_every_word_the_report_types_is_declared_once(literal: object, words: tuple[Word, ...]) -> None:
    names = [w.name for w in words]
    assert len(names) == len(set(names))
    assert set(names) == set(get_args(literal)), (
        "fieldmem/model/vocabulary.py and fieldmem/model/word_sets.py name different words"
    )


def test_the_schema_page_says_what_is_declared() -> None:
    text = SCHEMA.read_text(encoding="utf-8")
    assert text == write(text), "docs/report-schema.md is out of date: run python tests/model/test_words.py"
    for name in _CELLS:
        assert cell_line(name) in text.splitlines()


def _made_findings() -> list[tuple[str, str, int]]:
    """Every ``Finding(severity, code, ...)`` the findings package makes with a written severity and code, and the
    finding each copy kind's declaration names (fieldmem.findings.copy_findings.declared_copy_finding makes it with
    the severity declared for its code; line 0)."""
    made = [(finding_word(w.finding).severities[0], w.finding, 0) for w in COPY_KIND_WORDS if w.finding is not None]
    for path in sorted(FINDINGS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding" and len(node.args) >= 2:
                # either may be written as `"a" if ... else "b"` ("error" if breaks else "warning")
                for severity in _constants(node.args[0]):
                    for code in _constants(node.args[1]):
                        made.append((severity, code, node.lineno))
    return made


def _constants(node: ast.expr) -> list[str]:
    if isinstance(node, ast.IfExp):
        return _constants(node.body) + _constants(node.orelse)
    return [node.value] if isinstance(node, ast.Constant) and isinstance(node.value, str) else []


def test_findings_are_made_with_the_severities_declared_for_their_code() -> None:
    made = _made_findings()
    assert len({code for _, code, _ in made}) >= 15  # the walk found them
    wrong = [(s, c, n) for s, c, n in made if s not in finding_word(c).severities or finding_word(c).name != c]
    assert not wrong, wrong
    declared = {w.name for w in FINDING_WORDS} - {"unknown"}
    assert declared <= {c for _, c, _ in made}, declared - {c for _, c, _ in made}


def test_renderers_label_copy_kinds_from_the_declarations() -> None:
    """A copy of a kind a newer fieldmem wrote (read as ``unknown``) is shown with its declared label, in the
    verbose table and the HTML page."""
    from fieldmem.render import RenderOptions, get_renderer

    from factories import make_copy, make_report, make_result, make_variant

    assert copy_kind_label("unknown") == "unknown kind" and copy_kind_label("parameter") == "parameter"
    odd = make_result(donated=make_variant("donated", copies=(make_copy(kind="unknown"),)))
    for name in ("table", "html"):
        text = get_renderer(name).render(make_report((odd,)), RenderOptions(verbose=True, min_bytes=0))
        assert "unknown kind" in text, name


def test_a_copy_kind_needs_only_its_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 51 item 4: a copy kind declared in a test, the declaration table monkeypatched and nothing else, is one
    of the report's words: the schema lists it, a report holding it reads back with it (not ``unknown``), and the
    table, Markdown and HTML show it with its declared label and words; its declared finding is made with the
    severity declared for that finding's code."""
    from fieldmem.findings.copy_findings import declared_copy_finding
    from fieldmem.render import RenderOptions, get_renderer
    from fieldmem.render.schema import DOCUMENTS, document_schema

    from factories import make_copy, make_report, make_result, make_variant

    kind = CopyKindWord(
        "rematerialized",
        "a value XLA recomputes into a second buffer",
        label="remat",
        detail="{label} in {computation}",
        per_call="recomputed each call",
        finding="remat-copy",
        finding_words=" to recompute it",
    )
    code = FindingWord("remat-copy", "a rematerialized copy of at least `min_bytes`", severities=("info",))
    monkeypatch.setattr(vocabulary, "COPY_KIND_WORDS", (*COPY_KIND_WORDS, kind))
    monkeypatch.setattr(vocabulary, "FINDING_WORDS", (*FINDING_WORDS, code))

    copy = make_copy(kind="rematerialized")  # type: ignore[arg-type]  # declared in this test, not in the Literal
    finding = declared_copy_finding(copy, kind)
    assert (finding.severity, finding.code) == ("info", "remat-copy")
    assert finding.message == "a f32[512,512]{1,0} value (1.0 MiB) is copied at model.py:14 to recompute it"
    result = make_result(donated=make_variant("donated", copies=(copy,)), findings=(finding,))
    written = make_report((result,))

    schema = document_schema(DOCUMENTS[0])
    copy_schema = schema["$defs"]["Copy"]["properties"]["kind"]
    assert copy_schema["enum"][-1] == "rematerialized" and "parameter" in copy_schema["enum"]
    assert schema["$defs"]["Finding"]["properties"]["code"]["enum"][-1] == "remat-copy"

    options = RenderOptions(verbose=True, min_bytes=0)
    unknown: list[str] = []
    read = report.Report.from_dict(json.loads(get_renderer("json").render(written, options)), unknown)
    assert not unknown and read == written
    assert read.results[0].variants["donated"].copies[0].kind == "rematerialized"
    assert read.results[0].verdict.findings[0].code == "remat-copy"

    brief = get_renderer("table").render(read, RenderOptions(min_bytes=0))
    assert "donated copy: f32[512,512]{1,0} 1.0 MiB [remat in main.2] at model.py:14" in brief, brief
    table = get_renderer("table").render(read, options)  # -v: the copies table, the label and the per-call words
    assert re.search(r"remat +1\.0 MiB +recomputed each call ", table), table
    markdown = get_renderer("markdown").render(read, options)
    assert "| 0/1 |" in markdown, markdown
    html = get_renderer("html").render(read, options)
    assert '<span class="kind rematerialized">remat in main.2</span>' in html
    assert "recomputed each call" in html


if __name__ == "__main__":
    SCHEMA.write_text(write(SCHEMA.read_text(encoding="utf-8")), encoding="utf-8")
    sys.exit(0)
