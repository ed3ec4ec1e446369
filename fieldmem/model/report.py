"""The report document: :class:`Report` (one run) and :class:`Reports` (several), and their JSON
form ``fieldmem.report/2``.

Everything a user sees is rendered from a :class:`Report`; nothing is computed
in a renderer. ``Report.to_dict()`` is the JSON contract documented in
``docs/report-schema.md``; ``Report.from_dict()`` reads it back (unknown keys
are ignored, missing optional keys take their defaults) so later versions of
fieldmem can compare against reports saved by earlier ones. A document that
is not such a report (another schema, a required key missing, a value of the
wrong JSON type, a word outside its set) raises :class:`~fieldmem.model.errors.ReportError`.

The records it holds live in modules by subject: :mod:`~fieldmem.model.target` (a target's
result and its variants), :mod:`~fieldmem.model.copies`, :mod:`~fieldmem.model.memory`,
:mod:`~fieldmem.model.verdict`, :mod:`~fieldmem.model.advice`, :mod:`~fieldmem.model.run`,
:mod:`~fieldmem.model.transfers`, :mod:`~fieldmem.model.chain`, :mod:`~fieldmem.model.environment`,
:mod:`~fieldmem.model.comparison`; their sets of words in :mod:`~fieldmem.model.word_sets`.
This module imports nothing of fieldmem but the model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from typing import Any

from fieldmem.model.chain import Chain
from fieldmem.model.codec import decode, encode, unknown_values
from fieldmem.model.comparison import BaselineComparison
from fieldmem.model.environment import DeviceInfo, Deviceless, ModuleSettings
from fieldmem.model.errors import ReportError, quoted
from fieldmem.model.target import TargetResult, Variant
from fieldmem.model.verdict import Check

__all__ = [
    "DIFFERENCES",
    "REPORTS_SCHEMA",
    "SCHEMA",
    "SUPPORTED_SCHEMAS",
    "Report",
    "Reports",
    "impossible_size",
    "is_size",
]


# /2: ``backend`` may name a device kind compiled for without the device (``tpu:v5e:2x2``), and
# ``deviceless`` says so; a /1 report reads as one compiled on a real device
SCHEMA = "fieldmem.report/2"
SUPPORTED_SCHEMAS = ("fieldmem.report/1", "fieldmem.report/2")


@dataclass(frozen=True)
class Report:
    fieldmem_version: str
    jax_version: str
    jaxlib_version: str
    backend: str
    platform_version: str | None
    devices: tuple[DeviceInfo, ...]
    results: tuple[TargetResult, ...]
    min_bytes: int = 0
    created: str | None = None
    baseline: BaselineComparison | None = None
    chains: tuple[Chain, ...] = ()
    schema: str = SCHEMA
    deviceless: Deviceless | None = None  # compiled for a device kind this machine does not have
    # what the targets' modules set for jax at import (XLA_FLAGS, JAX_*, jax.config.update); () where none did
    module_settings: tuple[ModuleSettings, ...] = ()
    # the compiler plugins of the backend the report was made with, by distribution: libtpu for a TPU, the
    # CUDA plugin, its PJRT and nvcc for a GPU (empty: the CPU, or none installed)
    plugin_versions: dict[str, str] = field(default_factory=dict)
    # the releases of the libraries built on jax (flax, optax…) that the worker imported for these targets, by
    # distribution: under --jax or --python that environment's, which can differ from yours (empty: none)
    library_versions: dict[str, str] = field(default_factory=dict)
    # the backends the run judges, as named (--backend, or [tool.fieldmem] backends: where the user's code is
    # deployed), and who named them ("--backend", "[tool.fieldmem] backends"); () and None: jax's default
    judged_backends: tuple[str, ...] = ()
    judged_by: str | None = None

    @property
    def exit_code(self) -> int:
        """2 when a target could not be checked, else 1 when a check failed that the
        baseline does not accept or a baseline regressed, else 0."""
        if any(r.status == "error" for r in self.results):
            return 2
        if any(self.unaccepted_failures(r) for r in self.results) or any(c.failed_checks for c in self.chains):
            return 1
        if self.baseline is not None and self.baseline.regressions:
            return 1
        return 0

    def accepted_failures(self, result: TargetResult) -> tuple[Check, ...]:
        """``result``'s failed checks that the baseline accepts (recorded failing, failing the same way)."""
        baseline = self.baseline
        if baseline is None or not baseline.accepted:
            return ()
        return tuple(c for c in result.failed_checks if baseline.accepts(result.name, c.name))

    def unaccepted_failures(self, result: TargetResult) -> tuple[Check, ...]:
        """``result``'s failed checks that fail the run: all of them, but those the baseline accepts."""
        accepted = self.accepted_failures(result)
        return tuple(c for c in result.failed_checks if c not in accepted)

    def to_dict(self) -> dict[str, Any]:
        document = encode(replace(self, results=()))
        document["results"] = [encode(result) for result in self.results]  # in its place: keys keep their order
        return document

    @classmethod
    def from_dict(cls, data: dict[str, Any], unknown: list[str] | None = None) -> Report:
        """The report ``data`` holds; each word of an open set this fieldmem does not know (a newer
        fieldmem wrote it) reads as ``"unknown"``, and is said in ``unknown`` when a list is given.

        Raises:
            ReportError: not a report of a schema this fieldmem reads, or not matching it (a closed
                set's unknown word included).
        """
        if not isinstance(data, dict):
            raise ReportError("a fieldmem report is a JSON object")
        schema = data.get("schema")
        if schema not in SUPPORTED_SCHEMAS:
            raise ReportError(f"schema {schema!r} is not one this fieldmem reads ({', '.join(SUPPORTED_SCHEMAS)})")
        try:
            with unknown_values() as found:
                report = decode(cls, data)
        except (TypeError, ValueError, KeyError) as exc:
            raise ReportError(f"the report does not match {schema}: {exc}") from exc
        bad = impossible_size(report, "")
        if bad is not None:
            raise ReportError(f"the report does not match {schema}: {bad} is not a byte count (0 to 2**63-1)")
        report = _moves_apart(report)
        if unknown is not None:
            writer = report.fieldmem_version
            unknown.extend(
                f"{where} is {quoted(word)}, which this fieldmem does not know (the report is from fieldmem "
                f"{quoted(writer)}): read as {stand_in!r}"
                for where, word, stand_in in found
            )
        return report


def _moves_apart(report: Report) -> Report:
    """``report`` with each variant's staging copies among its ``moves``: a report written before the two were
    apart lists them among its copies, where they would count as copies of state."""

    def apart(variant: Variant) -> Variant:
        staged = tuple(c for c in variant.copies if c.kind == "staging")
        if not staged:
            return variant
        copies = tuple(c for c in variant.copies if c.kind != "staging")
        return replace(variant, copies=copies, moves=variant.moves + staged)

    def result_apart(result: TargetResult) -> TargetResult:
        variants = {name: apart(v) for name, v in result.variants.items()}
        if all(variants[name] is v for name, v in result.variants.items()):
            return result
        return replace(result, variants=variants)

    results = tuple(result_apart(r) for r in report.results)
    if all(a is b for a, b in zip(results, report.results)):
        return report
    return replace(report, results=results)


REPORTS_SCHEMA = "fieldmem.reports/1"


@dataclass(frozen=True)
class Reports:
    """Several reports as one document: what ``fieldmem check --format json`` prints on stdout for several
    backends or jax releases (``-o FILE`` writes one file per report instead), so that one ``json.load``
    reads the whole run. Each report is a ``fieldmem.report/2`` document, in the order of the run."""

    reports: tuple[Report, ...]
    schema: str = REPORTS_SCHEMA

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.schema, "reports": [report.to_dict() for report in self.reports]}

    @classmethod
    def from_dict(cls, data: dict[str, Any], unknown: list[str] | None = None) -> Reports:
        """The reports ``data`` holds (see :meth:`Report.from_dict`).

        Raises:
            ReportError: not a ``fieldmem.reports/1`` document, or a report in it that is not one.
        """
        if not isinstance(data, dict) or data.get("schema") != REPORTS_SCHEMA:
            raise ReportError(f"a document of several reports has the schema {REPORTS_SCHEMA!r}")
        items = data.get("reports")
        if not isinstance(items, list):
            raise ReportError(f"{REPORTS_SCHEMA}: 'reports' is a list of reports")
        return cls(tuple(Report.from_dict(item, unknown) for item in items))


DIFFERENCES = frozenset({"savings", "baseline", "changes"})  # fields of differences, which may be negative


def is_size(name: str) -> bool:
    """A field that holds a size or a count of bytes (not a difference, which may be negative)."""
    return ("bytes" in name and not name.startswith(("saved", "marginal", "delta"))) or name == "trip_count"


def impossible_size(value: Any, where: str) -> str | None:
    """The first byte count (a field named ``*bytes*``, a trip count) in ``value`` that no run could have
    measured, negative or 2**63 and more, named by its path; None: none."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for item in dataclasses.fields(value):
            if item.name in DIFFERENCES:
                continue
            inner = getattr(value, item.name)
            at = f"{where}.{item.name}" if where else item.name
            if isinstance(inner, int) and not isinstance(inner, bool):
                if is_size(item.name) and not 0 <= inner < 2**63:
                    return (
                        f"{at} = {inner if abs(inner) < 10**30 else 'a ' + str(len(str(abs(inner)))) + '-digit number'}"
                    )
            elif inner is not None and not isinstance(inner, (str, float, bool)):
                found = impossible_size(inner, at)
                if found is not None:
                    return found
    elif isinstance(value, (tuple, list)):
        for n, inner in enumerate(value):
            found = impossible_size(inner, f"{where}[{n}]")
            if found is not None:
                return found
    elif isinstance(value, dict):
        for key, inner in value.items():
            at = f"{where}.{key}"
            if isinstance(inner, int) and not isinstance(inner, bool):
                if is_size(str(key)) and not 0 <= inner < 2**63:
                    return f"{at} = {inner}"
            elif inner is not None and not isinstance(inner, (str, float)):
                found = impossible_size(inner, at)
                if found is not None:
                    return found
    return None
