"""The JSON report ``fieldmem.report/2``: a real report survives a round trip; bad documents are refused.

The report comes from real compiles (one of each kind of finding, and a
target that fails), so the round trip covers what the analysis really
produces, not only hand-made values.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import jax.numpy as jnp
import pytest
from jax import lax

from fieldmem.model.errors import ArgumentsError, ReportError
from fieldmem.model.report import SCHEMA, Report

from helpers_compile import check_reports, make_target

pytestmark = pytest.mark.compile


def pair_update(s):
    return s["u"].at[0].set(1.0), s["v"]


def unused_middle(a, b, c):
    return a + 1.0, c.astype(jnp.bfloat16)


def scan_stepper(u, n):
    def step(c, _):
        return c + 0.1 * (jnp.roll(c, 1, axis=0) - c), None

    return lax.scan(step, u, None, length=n)[0]


def broken_factory():
    raise RuntimeError("no data here")


@pytest.fixture(scope="module")
def report() -> Report:
    z = lambda *s: jnp.zeros(s or (64, 64), jnp.float32)  # noqa: E731
    targets = [
        make_target(pair_update, lambda: ({"u": z(), "v": z(32, 64)},), name="pair", expect="in-place"),
        make_target(pair_update, lambda: ({"u": z(), "v": z(32, 64)},), donate="none", name="pair-none"),
        make_target(unused_middle, lambda: (z(), z(32, 32), z(16, 64)), name="unused", definition="x.py:3"),
        make_target(scan_stepper, lambda: (z(), 5), name="scan"),
        make_target(pair_update, broken_factory, name="broken"),
    ]
    return check_reports(targets, min_bytes=1024)


@pytest.fixture
def document(report: Report) -> dict[str, Any]:
    return json.loads(json.dumps(report.to_dict()))


def test_the_report_covers_every_kind_of_finding(report: Report) -> None:
    """Guard the round trip's coverage: aliases, unusable donations, copies, findings, an error."""
    by_name = {r.name: r for r in report.results}
    assert by_name["pair"].variants["donated"].aliases
    assert by_name["unused"].variants["donated"].unusable_donations
    assert any(c.kind == "loop" for c in by_name["scan"].variants["donated"].copies)
    assert any(c.kind == "parameter" for c in by_name["pair-none"].variants["donated"].copies)
    assert by_name["pair"].checks and {f.code for f in by_name["pair"].verdict.findings} == {"plain-copy"}
    assert by_name["broken"].status == "error" and by_name["broken"].error.kind == ArgumentsError.kind
    assert report.exit_code == 2


def test_round_trip_through_json_is_exact(report: Report, document: dict[str, Any]) -> None:
    assert document["schema"] == SCHEMA == "fieldmem.report/2"
    back = Report.from_dict(document)
    assert back == report
    assert back.to_dict() == report.to_dict()
    assert isinstance(back.results[0].inputs[0].shape, tuple)
    assert isinstance(back.results[0].variants["donated"].aliases, tuple)


def test_the_document_is_plain_json(document: dict[str, Any]) -> None:
    text = json.dumps(document, allow_nan=False)
    assert json.loads(text) == document
    assert set(document["results"][0]["variants"]) == {"plain", "donated"}
    for key in ("fieldmem_version", "jax_version", "jaxlib_version", "backend", "platform_version", "devices"):
        assert key in document


def test_unknown_keys_are_ignored(report: Report, document: dict[str, Any]) -> None:
    document["future_top_level"] = {"anything": [1, 2]}
    result = document["results"][0]
    result["future_field"] = "x"
    result["variants"]["donated"]["aliases"][0]["future"] = 1
    result["variants"]["donated"]["memory"]["future_figure"] = 7
    result["verdict"]["future"] = None
    assert Report.from_dict(document) == report


def test_missing_optional_keys_take_their_defaults(document: dict[str, Any]) -> None:
    del document["created"]
    del document["min_bytes"]
    result = document["results"][0]
    del result["savings"], result["checks"]
    del result["variants"]["donated"]["copies"]
    back = Report.from_dict(document)
    assert back.created is None and back.min_bytes == 0
    assert back.results[0].savings == {} and back.results[0].checks == ()
    assert back.results[0].variants["donated"].copies == ()


@pytest.mark.parametrize("schema", ["fieldmem.report/3", "fieldmem.report", "other/1", None, 1])
def test_a_wrong_schema_is_refused(document: dict[str, Any], schema: Any) -> None:
    document["schema"] = schema
    with pytest.raises(ReportError, match="schema"):
        Report.from_dict(document)


def test_a_missing_schema_is_refused(document: dict[str, Any]) -> None:
    del document["schema"]
    with pytest.raises(ReportError, match="schema"):
        Report.from_dict(document)


@pytest.mark.parametrize("value", [[], "report", 3, None])
def test_a_document_that_is_not_an_object_is_refused(value: Any) -> None:
    with pytest.raises(ReportError):
        Report.from_dict(value)


def _set(document: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    target = document
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value


_DELETE = object()

MALFORMED = {
    "results-not-a-list": (("results",), {"a": 1}),
    "result-not-an-object": (("results", 0), "pair"),
    "result-without-name": (("results", 0, "name"), _DELETE),
    "result-without-status": (("results", 0, "status"), _DELETE),
    "variants-not-an-object": (("results", 0, "variants"), ["plain", "donated"]),
    "variant-without-memory": (("results", 0, "variants", "donated", "memory"), _DELETE),
    "alias-without-input": (("results", 0, "variants", "donated", "aliases", 0, "input"), _DELETE),
    "shape-not-a-list": (("results", 0, "inputs", 0, "shape"), "64,64"),
    "index-a-string": (("results", 0, "inputs", 0, "index"), "0"),
    "bytes-a-float": (("results", 0, "inputs", 0, "bytes"), 1.5),
    "donated-a-string": (("results", 0, "inputs", 0, "donated"), "yes"),
    "figure-a-string": (("results", 0, "variants", "plain", "memory", "peak_bytes"), "12 MiB"),
    "figure-a-bool": (("results", 0, "variants", "plain", "memory", "peak_bytes"), True),
    "verdict-in-place-a-number": (("results", 0, "verdict", "in_place"), 1),
    "summary-not-a-string": (("results", 0, "verdict", "summary"), ["in place"]),
    "devices-not-a-list": (("devices",), "cpu"),
    "device-id-a-string": (("devices", 0, "id"), "cpu:0"),
    "min-bytes-a-string": (("min_bytes",), "1KiB"),
    "version-a-number": (("jax_version",), 0.10),
    "savings-not-an-object": (("results", 0, "savings"), [1, 2]),
    "saving-a-string": (("results", 0, "savings", "peak_bytes"), "big"),
    # the report's closed sets of words (a status, an expectation, a severity): one outside its set is refused
    "status-unknown": (("results", 0, "status"), "fine"),
    "expect-unknown": (("results", 0, "expect"), "in_place"),
    "severity-unknown": (("results", 0, "verdict", "findings", 0, "severity"), "fatal"),
    "finding-code-not-a-word": (("results", 0, "verdict", "findings", 0, "code"), 3),
    "copy-kind-not-valid-unicode": (("results", 0, "variants", "plain", "copies", 0, "kind"), "\ud800"),
}


def test_a_word_a_newer_fieldmem_wrote_reads_as_unknown_and_is_said(document: dict[str, Any]) -> None:
    """An open set (a copy kind, a finding code, a check name) may grow in a newer fieldmem: a word this one
    does not know reads as "unknown", each named by its path, instead of refusing the whole report."""
    newer = copy.deepcopy(document)
    newer["fieldmem_version"] = "0.9.0"
    _set(newer, ("results", 0, "variants", "plain", "copies", 0, "kind"), "dma")
    _set(newer, ("results", 0, "verdict", "findings", 0, "code"), "plain-copies")
    _set(newer, ("results", 0, "checks", 0, "name"), "max-transfer")
    notes: list[str] = []
    report = Report.from_dict(newer, notes)
    result = report.results[0]
    assert result.variants["plain"].copies[0].kind == "unknown"
    assert result.verdict is not None and result.verdict.findings[0].code == "unknown"
    assert (
        result.checks[0].name == "unknown" and result.checks[0].passed == document["results"][0]["checks"][0]["passed"]
    )
    assert notes == [
        "results[0].variants.plain.copies[0].kind is 'dma', which this fieldmem does not know "
        "(the report is from fieldmem '0.9.0'): read as 'unknown'",
        "results[0].verdict.findings[0].code is 'plain-copies', which this fieldmem does not know "
        "(the report is from fieldmem '0.9.0'): read as 'unknown'",
        "results[0].checks[0].name is 'max-transfer', which this fieldmem does not know "
        "(the report is from fieldmem '0.9.0'): read as 'unknown'",
    ]
    assert Report.from_dict(newer) == report  # without a list: read the same, said nowhere
    # everything else is as written
    assert dataclasses.replace(result, variants=report.results[0].variants).name == document["results"][0]["name"]


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_document_is_refused(document: dict[str, Any], case: str) -> None:
    path, value = MALFORMED[case]
    broken = copy.deepcopy(document)
    _set(broken, path, value)
    with pytest.raises(ReportError, match=r"does not match fieldmem\.report/2"):
        Report.from_dict(broken)


# ----------------------------------------------------------------------------
# Timeline decimation (fieldmem.findings.liveness.decimate: pure, no compile)


def test_decimate_keeps_short_curves_whole():
    from fieldmem.findings.liveness import decimate

    assert decimate([3, 1, 2], buckets=4) == ((0, 1, 2), (3, 1, 2))


def test_decimate_keeps_peak_envelope_and_ends():
    import random

    from fieldmem.findings.liveness import decimate

    rng = random.Random(7)
    curve = [rng.randrange(1000) for _ in range(50_000)]
    curve[31_337] = 5000  # the one peak
    curve[123] = -1  # the one trough
    positions, values = decimate(curve, buckets=100)
    assert len(positions) <= 2 * 100 + 2  # two per bucket, and both ends
    assert positions[0] == 0 and positions[-1] == len(curve) - 1
    assert list(positions) == sorted(set(positions))
    assert all(curve[p] == v for p, v in zip(positions, values))
    assert 31_337 in positions and max(values) == 5000
    assert 123 in positions and min(values) == -1
