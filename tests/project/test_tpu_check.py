"""``make tpu-check``'s reading, without a chip: its HLO count on golden text, and its stored results.

The chip's run is recorded (``hardware/results/tpu-check-raw.tgz``); what these tests hold is that the
independent copy count agrees with fieldmem's on the TPU goldens, that the comparison finds a difference
where there is one, and that the markdown in ``hardware/results`` is the one its JSON makes.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from fieldmem.findings.variant import analyze_variant
from fieldmem.model.readings import CompiledVariant

ROOT = Path(__file__).resolve().parents[2]
HARDWARE = ROOT / "hardware"


@pytest.fixture
def tpu_check(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(HARDWARE))
    sys.modules.pop("tpu_check", None)
    return importlib.import_module("tpu_check")


@pytest.mark.parametrize("stem", ["tpu_v5e_sparse_add_plain", "tpu_v5e_sgd_plain", "tpu_v5e_kv_write_donated"])
def test_the_hlo_count_agrees_with_fieldmem_s_copies_and_moves(stem: str, tpu_check: Any) -> None:
    from hlo_count import MIN_BYTES, array_bytes, device_copies

    text = (ROOT / "tests" / "golden_buffers" / f"{stem}.hlo.txt").read_text()
    variant = CompiledVariant(
        name="plain",
        donated_arguments=(),
        inputs=(),
        outputs=(),
        hlo_text=text,
        memory={},
        memory_unavailable={},
        lowering_warnings=(),
        tuple_args=False,
        lower_seconds=0.0,
        compile_seconds=0.0,
        platform="tpu",
    )
    analysed, _ = analyze_variant(variant)
    shown = [c for c in analysed.copies + analysed.moves if array_bytes(c.shape) >= MIN_BYTES]
    counted = device_copies(text)
    assert counted["all"] == len(shown)
    assert counted["device"] == sum(1 for c in shown if (c.source_memory_space, c.memory_space) == (0, 0))


def _result(name: str, argument_bytes: int, alias: tuple[int, int] | None) -> dict[str, Any]:
    memory = dict.fromkeys(tpu_check_figures(), 0) | {"argument_bytes": argument_bytes}
    variant = {"memory": memory, "aliases": [], "unusable_donations": [], "copies": [], "moves": []}
    donated = {**variant, "aliases": [{"input_index": alias[0], "output_index": alias[1]}] if alias else []}
    return {
        "name": name,
        "status": "ok",
        "variants": {"plain": variant, "donated": donated},
        "verdict": {"kind": "in-place"},
    }


def tpu_check_figures() -> tuple[str, ...]:
    return ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "generated_code_bytes", "peak_bytes")


def test_the_corpus_comparison_names_what_differs(tpu_check: Any) -> None:
    truth_case = {
        "name": "corpus:scale",
        "plain": dict.fromkeys(tpu_check_figures(), 0) | {"argument_bytes": 16384},
        "donated": dict.fromkeys(tpu_check_figures(), 0) | {"argument_bytes": 16384},
        "aliases": [[0, 0]],
        "kept_alive": [],
        "device_copies": {"plain": {"all": 0, "device": 0}, "donated": {"all": 0, "device": 0}},
    }
    agreeing = {"results": [_result("corpus:scale", 16384, (0, 0))]}
    (row,) = tpu_check.corpus_rows(agreeing, None, {"cases": [truth_case]})
    assert row["differences"] == []
    differing = {"results": [_result("corpus:scale", 8192, None)]}
    (row,) = tpu_check.corpus_rows(differing, None, {"cases": [truth_case]})
    assert "plain argument_bytes: fieldmem 8192, jax 16384" in row["differences"]
    assert "aliases: fieldmem [], at run time [[0, 0]]" in row["differences"]


def test_the_stored_markdown_is_the_one_its_json_makes(tpu_check: Any) -> None:
    document = json.loads((HARDWARE / "results" / "tpu-check.json").read_text())
    assert tpu_check.markdown(document) == (HARDWARE / "results" / "tpu-check.md").read_text()
    summary = document["summary"]
    assert summary["corpus_cases"] >= 30 and summary["same_reports"] == summary["targets"]
