"""docs/verdicts.md shows the verdict rule as fieldmem applies it: the table between its markers is the one
:data:`fieldmem.findings.verdict.RULES` renders, and every finding code that can break in place has a row.

To write the table again after changing the rule: ``python tests/findings/test_verdict_table.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fieldmem.findings.verdict import RULES
from fieldmem.model.word_sets import FINDING_CODES

DOC = Path(__file__).resolve().parents[2] / "docs" / "verdicts.md"
BEGIN, END = (
    "<!-- verdict-table: begin (tests/findings/test_verdict_table.py writes it) -->",
    "<!-- verdict-table: end -->",
)
_WORDS = {
    "in-place": "in place",
    "in-place-as-written": "in place as written",
    "not-in-place": "not in place",
    "nothing-to-update": "nothing to update in place",
    "does-not-fit": "does not fit",
}
# the codes that say the program does not fit its device (as errors: the verdict is then does not fit)
FIT = ("exceeds-device-memory",)
# the codes of a copy the compiler keeps by its own choice (warnings: the verdict is then in place as written)
CHOICE = ("compiler-copy",)
# the codes that can break in place: a finding of one of them may be made with severity "error"
BREAKING = (
    "parameter-copy",
    "loop-copy",
    "output-copy",
    "new-buffer",
    "state-grows",
    "unusable-donation",
    "donation-dropped",
    "resharded-donation",
    "shared-donation",
    "run-alias-missing",
)


def table() -> str:
    lines = [
        "| # | verdict | when | finding codes | example | `--expect in-place` | `--expect fits` | `--expect any` |",
        "|--:|:--|:--|:--|:--|:--|:--|:--|",
    ]
    for number, rule in enumerate(RULES, 1):
        codes = ", ".join(f"`{c}`" for c in rule.codes) or "—"
        expect = "passes (exit 0)" if rule.expect_in_place_passes else "fails (exit 1)"
        fits = "passes (exit 0) where the device's memory is known" if rule.expect_fits_passes else "fails (exit 1)"
        lines.append(
            f"| {number} | **{_WORDS[rule.kind]}** | {rule.when} | {codes} | {rule.example} | {expect} | {fits} "
            "| passes (exit 0) |"
        )
    return "\n".join(lines)


def _written() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def test_the_docs_show_the_rule_fieldmem_applies() -> None:
    assert _written() == table(), "docs/verdicts.md is out of date: run python tests/findings/test_verdict_table.py"


def test_every_breaking_code_has_its_row() -> None:
    named = {code for rule in RULES for code in rule.codes}
    assert set(BREAKING) | set(FIT) <= set(FINDING_CODES)
    assert named == set(BREAKING) | set(FIT) | set(CHOICE)
    assert all(rule.kind == "does-not-fit" for rule in RULES if set(rule.codes) & set(FIT))
    assert all(rule.kind == "in-place-as-written" for rule in RULES if set(rule.codes) & set(CHOICE))
    assert all(rule.expect_in_place_passes for rule in RULES if set(rule.codes) & set(CHOICE))
    assert all(rule.kind == "not-in-place" for rule in RULES if set(rule.codes) & set(BREAKING))


if __name__ == "__main__":
    text = DOC.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{table()}\n{END}{tail}", encoding="utf-8")
    sys.exit(0)
