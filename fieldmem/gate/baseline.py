"""Baselines: save a run's findings, and compare a later run against them.

A baseline file (``fieldmem.baseline/2``, documented in ``docs/baselines.md``)
holds one entry per target name (:func:`project_name`: one name per target, however it is
written and wherever fieldmem runs), backend and device kind: the memory figures
of both variants, the aliases, unusable donations and copies of the donated
variant, the verdict, the checks failing when it was recorded with
``--accept-current`` (accepted while they fail the same way), and the
versions that produced them. It records only
what is stable from one run of the same code to the next (no timings, no HLO
instruction names), so a refreshed baseline changes in git exactly when the
findings change.

:func:`compare_to_baseline` collects *every* regression and improvement (each a
:class:`~fieldmem.model.comparison.Change`; which copies and aliases are the same in the
two runs is :mod:`fieldmem.gate.diff`'s to say) into the report's
:class:`~fieldmem.model.comparison.BaselineComparison`; the exit code
(``Report.exit_code``) then fails once. Nothing here prints; files are
written only through :func:`fieldmem.model.files.write_atomic`.

This module saves and loads the file and re-exports the names above; the records are in
:mod:`fieldmem.gate.records`, naming targets in :mod:`fieldmem.gate.target_names`, and the comparison in
:mod:`fieldmem.gate.regressions`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path
from typing import Any

from fieldmem.gate.records import (
    LARGEST,
    LOCK_TIMEOUT,
    OPTIONAL_ENTRY_FIELDS,
    SCHEMA,
    SUPPORTED_SCHEMAS,
    VARIANTS,
    AcceptedCheck,
    AliasRecord,
    Baseline,
    BaselineEntry,
    BaselineError,
    DonationRecord,
    SavedBaseline,
    VariantRecord,
    entry_from_result,
    first_device_kind,
)
from fieldmem.gate.regressions import compare_to_baseline
from fieldmem.gate.target_names import (
    listed_names,
    migrated_entries,
    project_name,
    project_spec,
    refuse_shared_names,
    root_or_default,
)
from fieldmem.model.codec import decode
from fieldmem.model.files import LockTimeout, lock_path, locked, read_json, terminating, write_atomic
from fieldmem.model.report import Report

__all__ = [
    "SCHEMA",
    "AcceptedCheck",
    "AliasRecord",
    "Baseline",
    "BaselineEntry",
    "BaselineError",
    "DonationRecord",
    "SavedBaseline",
    "VariantRecord",
    "compare_to_baseline",
    "gate_as_recorded",
    "load_baseline",
    "refuse_shared_names",
    "save_baseline",
]


# ----------------------------------------------------------------------------
# Saving and loading


def _refuse_incomplete(report: Report, path: str, accept_current: bool = False) -> None:
    """A baseline records a complete, passing run; anything else would hide a problem. With
    ``accept_current`` a failed check is recorded (as accepted), but a target that errored is not."""
    where = f"not saving the baseline {path!r}"
    if not report.results:
        raise BaselineError(f"{where}: the run checked no target")
    errored = [r.name for r in report.results if r.status == "error"]
    if errored:
        raise BaselineError(
            f"{where}: {len(errored)} target(s) could not be checked ({', '.join(errored)}); fix them first"
        )
    incomplete = [r.name for r in report.results if any(v not in r.variants for v in VARIANTS)]
    if incomplete:
        raise BaselineError(f"{where}: {', '.join(incomplete)} lack the plain or donated variant")
    failed = (
        [] if accept_current else [f"{r.name} {c.name}" for r in report.results for c in report.unaccepted_failures(r)]
    )
    if failed:
        raise BaselineError(
            f"{where}: the run failed ({listed_names(failed)}); a baseline records a passing run, or, with "
            "--accept-current, the run as it is (the gate then fails only when something changes)"
        )
    if report.baseline is not None and report.baseline.regressions:
        raise BaselineError(
            f"{where}: the run has {len(report.baseline.regressions)} regression(s) against "
            f"{report.baseline.path!r}; review them, then refresh without --baseline"
        )


def _check_replaceable(file: Path, shown: str) -> None:
    """A baseline file that is not a regular file, or is read-only, is never replaced."""
    try:
        info = file.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise BaselineError(f"cannot read the baseline {shown!r}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file (a FIFO, device or socket)"
        raise BaselineError(f"not overwriting {shown!r}: it is {kind}; name a baseline file")
    if not stat.S_IMODE(info.st_mode) & 0o222:
        raise BaselineError(
            f"not overwriting {shown!r}: it is read-only; make it writable (chmod u+w) to refresh it, "
            "or save to another file"
        )


def save_baseline(
    path: str | os.PathLike[str],
    report: Report,
    *,
    prune: bool = False,
    root: str | os.PathLike[str] | None = None,
    lock_timeout: float = LOCK_TIMEOUT,
    accept_current: bool = False,
) -> SavedBaseline:
    """Record ``report`` in the baseline file at ``path``, atomically and under its lock.

    Entries of this run replace those of the same target, backend and device
    kind; every other entry in an existing file is kept (another backend's,
    or targets this run did not check). ``prune=True`` drops the entries of
    this run's backend and device kind whose target is not in this run.
    Targets are named relative to ``root`` (:func:`project_name`; default:
    the baseline's folder). The read-merge-write holds the lock beside the
    file (:func:`fieldmem.model.files.locked`), so two processes saving into one
    baseline at once keep both their targets. A symbolic link at ``path`` is
    kept: the file it points to is replaced. A read-only baseline is refused.

    A failed check is refused, unless the report's baseline comparison accepts
    it (then it stays accepted) or ``accept_current`` records the run as it
    is: each entry then lists its failed checks in ``accepted_checks``, and
    :func:`compare_to_baseline` accepts them while they fail the same way.

    Raises:
        BaselineError: a target errored, a check failed (without
            ``accept_current``, and not accepted by the compared baseline), the run regressed
            against a baseline, the run is empty, the existing file is not a
            fieldmem baseline, not a regular file or read-only (it is never
            overwritten), the lock stayed held for ``lock_timeout`` seconds,
            or the file cannot be written. The existing file is then left
            exactly as it was.
    """
    shown = os.fspath(path)
    base = root_or_default(root, path)
    refuse_shared_names(report, base)
    _refuse_incomplete(report, shown, accept_current)
    file = Path(os.path.realpath(path))  # a link is written through: the file it points to is replaced
    _check_replaceable(file, shown)
    try:
        with terminating(), locked(file, lock_timeout):
            return _merge_and_write(file, shown, report, prune, base, accept_current)
    except LockTimeout as exc:
        raise BaselineError(
            f"not saving the baseline {shown!r}: {exc}; is another fieldmem saving it?"
            + (f" (a stale lock file {str(stale)!r} can be removed)" if (stale := lock_path(file)).exists() else "")
        ) from None
    except OSError as exc:
        raise BaselineError(f"cannot write the baseline {shown!r}: {exc.strerror or exc}") from None


def _merge_and_write(
    file: Path, shown: str, report: Report, prune: bool, root: str, accept_current: bool = False
) -> SavedBaseline:
    """The read-merge-write of :func:`save_baseline`, under the lock."""
    existing: tuple[BaselineEntry, ...] = ()
    raw: dict[str, Any] = {}  # the file as written: what a newer fieldmem put there that this one does not read
    raw_entries: dict[tuple[str, str, str], dict[str, Any]] = {}
    if os.path.lexists(file):
        _check_replaceable(file, shown)
        try:
            old = load_baseline(file)
            existing = migrated_entries(old, root)
        except BaselineError as exc:
            raise BaselineError(f"not overwriting {shown!r}: {exc.message}") from None
        if old.schema == SCHEMA:
            raw = _raw_document(file)
            entries = raw.get("entries")
            if isinstance(entries, list) and len(entries) == len(existing):
                raw_entries = {e.key: r for e, r in zip(existing, entries) if isinstance(r, dict)}
    fresh = {entry.key: entry for entry in _entries(report, root, accept_current)}
    backend, kind = report.backend, first_device_kind(report) or ""
    kept, pruned = [], []
    merged = dict(fresh)
    for entry in existing:
        if entry.key in fresh:
            continue
        if prune and (entry.backend, entry.device_kind or "") == (backend, kind):
            pruned.append(entry.name)
            continue
        kept.append(entry.name)
        merged[entry.key] = entry
    baseline = _written_by(report, shown, tuple(merged[key] for key in sorted(merged)))
    document = baseline.to_dict()
    dropped = [f"{name}" for name in _unknown_fields(raw, document, "", skip=("entries",))]
    written = document["entries"]
    for n, key in enumerate(sorted(merged)):
        before = raw_entries.get(key)
        if before is None:
            continue
        unknown = _unknown_fields(before, written[n], "", skip=OPTIONAL_ENTRY_FIELDS)
        if not unknown:
            continue
        if key in fresh:  # measured again: what this fieldmem cannot write is gone, and said so
            dropped.extend(f"{key[0]}: {path}" for path in unknown)
        else:  # kept as the newer fieldmem wrote it
            written[n] = before
    write_atomic(file, json.dumps(document, indent=2) + "\n")
    return SavedBaseline(
        baseline=baseline,
        written=tuple(e.name for e in fresh.values()),
        kept=tuple(kept),
        pruned=tuple(pruned),
        dropped=tuple(dropped),
    )


def _entries(report: Report, root: str, accept_current: bool) -> list[BaselineEntry]:
    """The entries recording ``report``'s targets, named relative to ``root``."""
    entries = []
    for result in report.results:
        entry = entry_from_result(result, report, accept_current=accept_current)
        entries.append(
            dataclasses.replace(
                entry, name=project_name(entry.name, entry.target, root), target=project_spec(entry.target, root)
            )
        )
    return entries


def gate_as_recorded(
    report: Report, path: str | os.PathLike[str], *, root: str | os.PathLike[str] | None = None
) -> Report:
    """``report`` gated against the baseline ``--save-baseline PATH --accept-current`` records of it.

    Every failed check is accepted (nothing else can differ from itself), so the
    run shows what the next run with ``--baseline PATH`` accepts, and passes
    as that run will until something changes. A report that cannot be
    recorded (a target errored or lacks a variant, no target) is returned as it is:
    the save refuses it.
    """
    shown = os.fspath(path)
    refuse_shared_names(report, root_or_default(root, path))
    if not report.results or any(
        r.status == "error" or any(v not in r.variants for v in VARIANTS) for r in report.results
    ):
        return report
    base = root_or_default(root, path)
    recorded = _written_by(report, shown, tuple(_entries(report, base, accept_current=True)))
    gated = compare_to_baseline(report, recorded, root=base)
    assert gated.baseline is not None
    accepted = sum(len(a.checks) for a in gated.baseline.accepted)
    checks = f"{accepted} failing check{'' if accepted == 1 else 's'} accepted" if accepted else "no check fails"
    note = (
        f"this run is recorded as it is (--accept-current), {checks}: the next run with --baseline {shown} "
        "fails only on a regression or a check failing that the baseline does not accept"
    )
    return dataclasses.replace(gated, baseline=dataclasses.replace(gated.baseline, notes=(*gated.baseline.notes, note)))


def _written_by(report: Report, shown: str, entries: tuple[BaselineEntry, ...]) -> Baseline:
    """A baseline of ``entries`` as ``report``'s run writes it (its versions, backend and device kinds)."""
    return Baseline(
        path=shown,
        fieldmem_version=report.fieldmem_version,
        jax_version=report.jax_version,
        jaxlib_version=report.jaxlib_version,
        backend=report.backend,
        platform_version=report.platform_version,
        device_kinds=tuple(dict.fromkeys(d.kind or d.platform for d in report.devices)),
        entries=entries,
    )


def _raw_document(file: Path) -> dict[str, Any]:
    try:
        with open(file, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _unknown_fields(raw: Any, known: Any, where: str, skip: tuple[str, ...] = ()) -> list[str]:
    """The paths of the fields of ``raw`` (a document as a newer fieldmem wrote it) that ``known`` (the same
    document as this fieldmem writes it) lacks, at any depth."""
    found: list[str] = []
    if isinstance(raw, dict) and isinstance(known, dict):
        for key, value in raw.items():
            if key in skip:
                continue
            at = f"{where}.{key}" if where else str(key)
            if key not in known:
                found.append(at)
            else:
                found.extend(_unknown_fields(value, known[key], at))
    elif isinstance(raw, list) and isinstance(known, list) and len(raw) == len(known):
        for n, (value, mine) in enumerate(zip(raw, known)):
            found.extend(_unknown_fields(value, mine, f"{where}[{n}]"))
    return found


def load_baseline(path: str | os.PathLike[str]) -> Baseline:
    """Read a baseline file (``fieldmem.baseline/2``, or ``/1`` as an older fieldmem wrote it).

    Raises:
        BaselineError: the file is missing, unreadable or not a regular file
            (a FIFO is refused, never waited on), is not JSON, has another
            schema, does not match it, or holds a size that is negative or
            not below 2**63; each with a one-line message naming the file.
    """
    shown = os.fspath(path)
    data = read_json(
        path,
        "baseline",
        BaselineError,
        missing=f"create it with fieldmem check ... --save-baseline {shown}",
        hint="give a baseline written by fieldmem check --save-baseline",
    )
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema not in SUPPORTED_SCHEMAS:
        what = f"schema {schema!r}" if schema is not None else "no fieldmem schema"
        hint = (
            "; a fieldmem report is not a baseline: save one with --save-baseline"
            if schema and str(schema).startswith("fieldmem.report/")
            else ""
        )
        raise BaselineError(
            f"baseline {shown!r} has {what}, not one this fieldmem reads ({', '.join(SUPPORTED_SCHEMAS)}){hint}"
        )
    try:
        fields = {k: v for k, v in data.items() if k not in ("schema", "path")}
        baseline = decode(Baseline, {**fields, "path": shown, "schema": schema})
    except (TypeError, ValueError, KeyError) as exc:
        raise BaselineError(f"baseline {shown!r} does not match {schema}: {exc}") from None
    bad = _bad_size(baseline)
    if bad is not None:
        raise BaselineError(
            f"baseline {shown!r} does not match {schema}: {bad} is not a byte count (0 to 2**63-1); "
            "was the file edited by hand? save it again with --save-baseline"
        )
    return baseline


def _bad_size(baseline: Baseline) -> str | None:
    """The first size of ``baseline`` that no run could have measured (negative, or 2**63 and more), named."""

    def wrong(value: int | None) -> bool:
        return value is not None and not 0 <= value < LARGEST

    for n, entry in enumerate(baseline.entries):
        where = f"entries[{n}] ({entry.name!r})"
        if wrong(entry.min_bytes):
            return f"{where}.min_bytes = {_short(entry.min_bytes)}"
        for i, check in enumerate(entry.accepted_checks):
            if wrong(check.limit):
                return f"{where}.accepted_checks[{i}].limit = {_short(check.limit)}"
        for variant_name, variant in entry.variants.items():
            at = f"{where}.variants.{variant_name}"
            for figure, value in variant.memory.items():
                if wrong(value):
                    return f"{at}.memory.{figure} = {_short(value)}"
            for kind, records in (
                ("aliases", variant.aliases),
                ("unusable_donations", variant.unusable_donations),
                ("copies", variant.copies),
            ):
                for i, record in enumerate(records):
                    for size_field in ("bytes", "bytes_per_call", "trip_count"):
                        value = getattr(record, size_field, None)
                        if isinstance(value, int) and wrong(value):
                            return f"{at}.{kind}[{i}].{size_field} = {_short(value)}"
    return None


def _short(value: int | None) -> str:
    text = (
        str(value)
        if value is None or abs(value) < 10**30
        else f"{'-' if value < 0 else ''}a {len(str(abs(value)))}-digit number"
    )
    return text
