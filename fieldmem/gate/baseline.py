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
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fieldmem.gate.diff import (
    CopyRecord,
    Delta,
    TargetFacts,
    VariantFacts,
    change_text,
    copy_record,
    diff_targets,
    facts_of_result,
    moved,
    peak_line_source,
    peak_line_text,
    peak_lines_of,
)
from fieldmem.model.codec import decode, encode
from fieldmem.model.comparison import Accepted, BaselineComparison, Change
from fieldmem.model.errors import FieldmemError
from fieldmem.model.files import LockTimeout, lock_path, locked, read_json, terminating, write_atomic
from fieldmem.model.memory import MEMORY_FIGURES
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult, Variant
from fieldmem.model.units import format_bytes
from fieldmem.model.verdict import Check
from fieldmem.request.target import is_file_spec, is_installed, module_file
from fieldmem.request.tolerance import COPIES, FIGURES, Tolerance, Tolerances

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

SCHEMA = "fieldmem.baseline/2"
LEGACY_SCHEMA = "fieldmem.baseline/1"  # file targets named relative to the folder it was saved from
SUPPORTED_SCHEMAS = (SCHEMA, LEGACY_SCHEMA)
VARIANTS = ("plain", "donated")
LOCK_TIMEOUT = 60.0  # seconds a save waits for another process's save of the same baseline
_LARGEST = 2**63  # a byte count at or above this is no real size
_LISTED = 10  # names listed in one note before "and N more"


class BaselineError(FieldmemError):
    """A baseline file cannot be read, or this run must not be saved as one. Exit code 2."""

    kind = "baseline"


# ----------------------------------------------------------------------------
# The records


@dataclass(frozen=True)
class AliasRecord:
    """A donated input leaf whose buffer an output reuses."""

    input: str
    output: str
    bytes: int


@dataclass(frozen=True)
class DonationRecord:
    """A donated input leaf no output reuses, with the analysis' code and reason."""

    input: str
    bytes: int
    code: str
    reason: str


@dataclass(frozen=True)
class AcceptedCheck:
    """A check that failed when the entry was recorded (``--accept-current``): the gate accepts it while it
    fails the same way, i.e. a check of this name with this limit (a budget's bytes; None for an
    expectation)."""

    name: str
    limit: int | None = None


@dataclass(frozen=True)
class VariantRecord:
    memory: dict[str, int | None]
    aliases: tuple[AliasRecord, ...] = ()
    unusable_donations: tuple[DonationRecord, ...] = ()
    copies: tuple[CopyRecord, ...] = ()
    # bytes at the live peak by the user's line (an argument by its path), the largest kept:
    # gate.diff.peak_lines_of (None: not recorded, as in baselines written before them)
    peak_lines: dict[str, int] | None = None
    peak_lines_floor: int = 0


@dataclass(frozen=True)
class BaselineEntry:
    """One target's findings on one backend and device kind."""

    name: str
    target: str  # the spec as typed: an entry whose spec ran but whose name is gone has disappeared
    backend: str
    device_kind: str | None
    status: str
    in_place: bool | None
    verdict: str | None
    definition: str | None
    donate: str | None
    expect: str | None
    min_bytes: int
    fieldmem_version: str
    jax_version: str
    jaxlib_version: str
    variants: dict[str, VariantRecord] = field(default_factory=dict)
    # the checks failing when it was recorded, accepted while they fail the same way; written only when there
    # are some, absent in files before issue 30 (none accepted)
    accepted_checks: tuple[AcceptedCheck, ...] = ()

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.name, self.backend, self.device_kind or "")


@dataclass(frozen=True)
class Baseline:
    """A baseline file as read (``path``) or as written."""

    path: str
    fieldmem_version: str
    jax_version: str
    jaxlib_version: str
    backend: str
    platform_version: str | None
    device_kinds: tuple[str, ...]
    entries: tuple[BaselineEntry, ...]
    schema: str = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        data = encode(self)
        del data["path"]
        for entry in data["entries"]:
            for name in _OPTIONAL_ENTRY_FIELDS:
                if not entry.get(name):
                    del entry[name]  # none: the file stays as a fieldmem before the field wrote it
        return {"schema": data.pop("schema"), **data}


#: entry fields written only when they hold something (older files lack them, and mean "none")
_OPTIONAL_ENTRY_FIELDS = ("accepted_checks",)


@dataclass(frozen=True)
class SavedBaseline:
    """What :func:`save_baseline` wrote: the entries of this run, those kept, those pruned."""

    baseline: Baseline
    written: tuple[str, ...]
    kept: tuple[str, ...]
    pruned: tuple[str, ...]
    # fields a newer fieldmem wrote that this one does not know, in entries this run wrote again (or at
    # the top of the file): not kept, and said so. Those of the entries kept are kept as they were.
    dropped: tuple[str, ...] = ()


# ----------------------------------------------------------------------------
# From a report


def _device_kind(report: Report) -> str | None:
    """The kind of the run's first device (``cpu``, ``NVIDIA H100 80GB HBM3``, ``TPU v5 lite``)."""
    if not report.devices:
        return None
    first = report.devices[0]
    return first.kind or first.platform


def _variant_record(variant: Variant) -> VariantRecord:
    memory = {name: getattr(variant.memory, name) for name in MEMORY_FIGURES}
    return VariantRecord(
        memory=memory,
        aliases=tuple(AliasRecord(a.input, a.output, a.bytes) for a in variant.aliases),
        unusable_donations=tuple(
            DonationRecord(d.input, d.bytes, d.code, d.reason) for d in variant.unusable_donations
        ),
        copies=tuple(copy_record(c) for c in variant.copies),
        **peak_lines_of(variant.peak),
    )


def entry_from_result(result: TargetResult, report: Report, *, accept_current: bool = False) -> BaselineEntry:
    """The baseline entry recording ``result`` (a checked target of ``report``).

    Its accepted checks: every failed check with ``accept_current``, else those the report's own
    baseline comparison accepted (a refresh keeps accepting what still fails the same way).
    """
    failed = result.failed_checks if accept_current else report.accepted_failures(result)
    return BaselineEntry(
        name=result.name,
        target=result.target,
        backend=report.backend,
        device_kind=_device_kind(report),
        status=result.status,
        in_place=result.verdict.in_place if result.verdict is not None else None,
        verdict=result.verdict.summary if result.verdict is not None else None,
        definition=result.definition,
        donate=result.donate,
        expect=result.expect,
        min_bytes=report.min_bytes,
        fieldmem_version=report.fieldmem_version,
        jax_version=report.jax_version,
        jaxlib_version=report.jaxlib_version,
        variants={name: _variant_record(result.variants[name]) for name in VARIANTS},
        accepted_checks=tuple(AcceptedCheck(c.name, c.limit) for c in failed),
    )


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
            f"{where}: the run failed ({_listed(failed)}); a baseline records a passing run, or, with "
            "--accept-current, the run as it is (the gate then fails only when something changes)"
        )
    if report.baseline is not None and report.baseline.regressions:
        raise BaselineError(
            f"{where}: the run has {len(report.baseline.regressions)} regression(s) against "
            f"{report.baseline.path!r}; review them, then refresh without --baseline"
        )


def project_name(name: str, spec: str, root: str | os.PathLike[str]) -> str:
    """A target's name as a baseline records it: the same wherever fieldmem runs from, and whether the
    target was written as a file or as a module.

    A name starting with its spec's file or module (``../../good.py:upd`` from
    ``proj/sub``, ``pkg.model:update``) starts instead with the path of that file
    relative to ``root`` (the folder of the ``pyproject.toml`` holding
    ``[tool.fieldmem]``, else the baseline's folder), with ``/`` separators:
    ``good.py:upd``, ``pkg/model.py:update`` (:func:`key_path`). A module of an
    installed package (or one whose file is not found) keeps its module name,
    and a case keeps its own name.
    """
    module_part = _module_part(spec)
    if not module_part or not name.startswith(module_part):
        return name
    rest = name[len(module_part) :]
    if rest and not rest.startswith(":"):
        return name
    path = key_path(module_part, root)
    return name if path is None else path + rest


def refuse_shared_names(report: Report, root: str | os.PathLike[str] | None = None) -> None:
    """Refuse two targets of ``report`` that share a name: a report, a comparison and a baseline hold one
    result per name, so one would stand for the other (the second file's change read against the first
    file's entry, a failure accepted on the strength of the other's). With ``root``, their names as a
    baseline records them (:func:`project_name`) must differ too.

    Two cases of one module with one name are that module's error already (``step (2)``); this is the
    clash across targets: two files each registering ``fieldmem.case(..., name="step")``.

    Raises:
        BaselineError: one line naming the name and both targets (the specs as typed).
    """
    seen: dict[str, TargetResult] = {}
    for result in report.results:
        name = result.name if root is None else project_name(result.name, result.target, root)
        first = seen.setdefault(name, result)
        if first is result or first.target == result.target:
            continue
        both = (
            f"both have a target named {name!r}: a report and a baseline hold"
            if root is None or name == result.name
            else f"are both named {name!r} in a baseline: it holds"
        )
        raise BaselineError(
            f"{first.target} and {result.target} {both} one result per name, so one would stand for the other; "
            "give one of them its own name (fieldmem.case(..., name=...))"
        )


def _file_of(spec: str) -> str | None:
    """The file a spec as a baseline records it names (``models/step.py``), or None (a module of an
    installed package, a function in hand named by its own name)."""
    module_part = _module_part(spec)
    return module_part if module_part and is_file_spec(module_part) else None


def project_spec(spec: str, root: str | os.PathLike[str]) -> str:
    """A target spec as a baseline records it: its file's path relative to ``root`` (see :func:`project_name`)."""
    module_part, sep, attr = spec.rpartition(":") if ":" in spec else (spec, "", "")
    path = key_path(module_part, root) if module_part else None
    return spec if path is None else path + sep + attr


def key_path(module_part: str, root: str | os.PathLike[str]) -> str | None:
    """The path a baseline names the file or module ``module_part`` of a spec by, relative to ``root``
    (``../shared/step.py`` for a file outside it); None for a module of an installed package or one whose
    file is not found (named by its module)."""
    if is_file_spec(module_part):
        return _project_path(module_part, root)
    file = module_file(module_part)
    if file is None or is_installed(file):
        return None
    return _project_path(file, root)


def _project_path(file: str, root: str | os.PathLike[str]) -> str:
    try:
        absolute = os.path.realpath(file)
    except ValueError:  # a NUL in it: no file has that path, so it is kept as written
        return file
    try:
        relative = os.path.relpath(absolute, os.path.realpath(root))
    except ValueError:  # another drive (Windows)
        relative = absolute
    return relative.replace(os.sep, "/")


def default_root(baseline_path: str | os.PathLike[str]) -> Path:
    """Where names are relative to when no ``[tool.fieldmem]`` config is found: the baseline's own folder."""
    return Path(os.path.realpath(baseline_path)).parent


def _root(root: str | os.PathLike[str] | None, baseline_path: str | os.PathLike[str]) -> str:
    return os.fspath(root) if root is not None else os.fspath(default_root(baseline_path))


def _migrated(baseline: Baseline, root: str) -> tuple[BaselineEntry, ...]:
    """The entries keyed as this fieldmem keys them (:func:`project_name`).

    A module target named by its module (``mymodels:rollout``, as fieldmem
    named module targets before issue 30) is read as the file that module is
    now (``mymodels.py:rollout``), so it matches the target however it is
    written; a name this fieldmem wrote is unchanged by this (an installed
    module keeps its name), and so is a file target's.
    ``fieldmem.baseline/1`` named a file target by its path as typed, relative
    to the folder fieldmem ran in when saving, which the file does not record:
    those names are read relative to the current folder, as the fieldmem that
    wrote them read them (exact when it runs from the folder it was saved
    from). Saving the baseline again writes the names as read; no entry is lost.
    """
    legacy = baseline.schema == LEGACY_SCHEMA
    migrated = []
    for e in baseline.entries:
        if legacy or not is_file_spec(_module_part(e.target)):
            e = dataclasses.replace(e, name=project_name(e.name, e.target, root), target=project_spec(e.target, root))
        if any(c.name != _check_name(c.name) for c in e.accepted_checks):  # a budget's name before issue 48
            renamed = tuple(dataclasses.replace(c, name=_check_name(c.name)) for c in e.accepted_checks)
            e = dataclasses.replace(e, accepted_checks=renamed)
        migrated.append(e)
    return tuple(migrated)


def _module_part(spec: str) -> str:
    return spec.rpartition(":")[0] if ":" in spec else spec


def _legacy_note(baseline: Baseline, root: str) -> str | None:
    """Say so when a ``fieldmem.baseline/1`` file's names were rebased (they depend on the folder it was saved from)."""
    if baseline.schema != LEGACY_SCHEMA:
        return None
    if all(
        project_name(e.name, e.target, root) == e.name for e in baseline.entries if is_file_spec(_module_part(e.target))
    ):
        return None
    return (
        f"the baseline {baseline.path!r} is {LEGACY_SCHEMA}: its file targets are named relative to the "
        "folder it was saved from, read here as relative to the current folder; save it again "
        "(--save-baseline) so the names no longer depend on where fieldmem runs"
    )


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_LISTED])
    return shown + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")


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
    base = _root(root, path)
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
            existing = _migrated(old, root)
        except BaselineError as exc:
            raise BaselineError(f"not overwriting {shown!r}: {exc.message}") from None
        if old.schema == SCHEMA:
            raw = _raw_document(file)
            entries = raw.get("entries")
            if isinstance(entries, list) and len(entries) == len(existing):
                raw_entries = {e.key: r for e, r in zip(existing, entries) if isinstance(r, dict)}
    fresh = {entry.key: entry for entry in _entries(report, root, accept_current)}
    backend, kind = report.backend, _device_kind(report) or ""
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
        unknown = _unknown_fields(before, written[n], "", skip=_OPTIONAL_ENTRY_FIELDS)
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
    refuse_shared_names(report, _root(root, path))
    if not report.results or any(
        r.status == "error" or any(v not in r.variants for v in VARIANTS) for r in report.results
    ):
        return report
    base = _root(root, path)
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
        return value is not None and not 0 <= value < _LARGEST

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


# ----------------------------------------------------------------------------
# Comparing


_VERSION = re.compile(r"^(\d+)\.(\d+)")


def _minor(version: str) -> tuple[int, int] | None:
    match = _VERSION.match(version)
    return (int(match.group(1)), int(match.group(2))) if match else None


@dataclass
class _Collector:
    """Regressions, improvements and notes of one comparison, in the order found."""

    regressions: list[Change] = field(default_factory=list)
    improvements: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, worse: bool, change: Change) -> None:
        """``change`` as a regression when ``worse``, else as an improvement."""
        (self.regressions if worse else self.improvements).append(change)


def _at(source: str | None) -> str:
    return f" at {source}" if source else ""


def facts_of_entry(entry: BaselineEntry) -> TargetFacts:
    """What the diff engine reads of a baseline entry (it records no checks, timeline or reasons)."""
    return TargetFacts(
        name=entry.name,
        status=entry.status,
        in_place=entry.in_place,
        verdict=entry.verdict,
        definition=entry.definition,
        variants={
            name: VariantFacts(
                memory=record.memory,
                aliases=record.aliases,
                unusable=record.unusable_donations,
                copies=record.copies,
                peak_lines=record.peak_lines,
                peak_lines_floor=record.peak_lines_floor,
            )
            for name, record in entry.variants.items()
        },
    )


def _classify(
    entry: BaselineEntry, result: TargetResult, min_bytes: int, tolerances: Tolerances, found: _Collector
) -> None:
    """The deltas from ``entry`` to ``result`` (:func:`~fieldmem.gate.diff.diff_targets`), each filed as a
    regression, an improvement or a note: the figures of both variants, then the donated variant's
    copies, aliases and donations, then the verdict. What is not gated: the plain variant's copies,
    aliases and donations (what a caller who donates runs is the donated variant), a rerouted alias
    (the donated buffer is still reused), the checks (a baseline keeps none)."""
    now = facts_of_result(result)
    deltas = diff_targets(facts_of_entry(entry), now, min_bytes)
    figures = [d for d in deltas if d.kind in ("figure", "peak-line")]
    _gate_figures(result, now, figures, tolerances, found, min_bytes)
    donated = [d for d in deltas if d.variant == "donated"]
    copies = [d for d in donated if d.kind == "copy" and _counts(d, tolerances, min_bytes)]
    _gate_copies(result.name, copies, tolerances.for_figure(COPIES), found)
    _gate_donation(result, donated, found)
    for delta in deltas:
        if delta.kind == "verdict" and delta.after is not None and delta.before is not None:
            _gate_verdict(result, bool(delta.before), found)


def _counts(delta: Delta, tolerances: Tolerances, min_bytes: int) -> bool:
    """Whether a copy's change is one: a copy new or gone always; one that grew or shrank, by at least
    ``min_bytes`` unless the user set the tolerances (:meth:`Tolerances.counts`)."""
    if delta.change not in ("grew", "shrank"):
        return True
    return tolerances.counts(delta.before.per_call, delta.after.per_call, min_bytes)


def _gate_figures(
    result: TargetResult,
    now: TargetFacts,
    deltas: list[Delta],
    tolerances: Tolerances,
    found: _Collector,
    min_bytes: int = 0,
) -> None:
    """Figures of the donated variant; the plain variant's where the donated one stayed within tolerance.

    The donated variant is what a caller who donates runs; a growth that only
    the plain variant shows is what every caller that does not donate pays,
    and is reported on its own rather than twice.
    """
    by_key = {(d.variant, d.subject): d for d in deltas if d.kind == "figure"}
    peak_lines = {
        variant: [d for d in deltas if d.kind == "peak-line" and d.variant == variant]
        for variant in ("donated", "plain")
    }
    reported: set[tuple[str, bool]] = set()  # (figure name, grew) already said of the donated variant
    for variant in ("donated", "plain"):
        for name, figure in FIGURES.items():
            delta = by_key.get((variant, figure))
            if delta is None or delta.before is None:
                continue  # unchanged, or the baseline has no value to compare with
            before, after = delta.before, delta.after
            if after is None:
                reason = now.variants[variant].unavailable.get(figure, "not given")
                found.notes.append(f"{result.name}: {variant} {name} not compared: this run has no value ({reason})")
                continue
            tolerance = tolerances.for_figure(figure)
            direction = moved(tolerance, before, after) if tolerances.counts(before, after, min_bytes) else 0
            grew = direction > 0
            if not direction or (variant == "plain" and (name, grew) in reported):
                continue
            reported.add((name, grew))
            source = (now.variants[variant].peak_source if figure == "live_peak_bytes" else None) or result.definition
            subject = f"{variant} {name}"
            message = f"{result.name}: {subject} {change_text(before, after)}"
            lines = peak_lines[variant] if figure == "live_peak_bytes" else []
            if grew:
                # the lines whose bytes at the peak moved say where, better than the peak's one point
                message += f", beyond the tolerance {_tolerance_text(tolerance)}{'' if lines else _at(source)}"
            if lines:
                message += ": " + ", ".join(peak_line_text(d) for d in lines[:_PEAK_LINES_SAID])
                # the annotation goes to the first line the message names
                source = next((s for s in map(peak_line_source, lines[:_PEAK_LINES_SAID]) if s), source)
            found.add(
                grew,
                Change(
                    target=result.name,
                    kind="figure",
                    subject=subject,
                    message=message,
                    before=before,
                    after=after,
                    source=source,
                ),
            )


#: how many lines a change of live peak names (the largest moves)
_PEAK_LINES_SAID = 3


def _tolerance_text(tolerance: Tolerance) -> str:
    return "exact (0)" if tolerance == Tolerance() else tolerance.describe()


def _copy_subject(copy: CopyRecord) -> str:
    """``parameter copy of field.v`` / ``loop copy f32[64,64]{1,0}``: what the user recognises."""
    what = f"of {copy.input}" if copy.input else (f"into {copy.output}" if copy.output else copy.shape)
    return f"{copy.kind} copy {what}"


def _copy_size(copy: CopyRecord) -> str:
    if copy.bytes_per_call is not None and copy.bytes_per_call != copy.bytes:
        return f"{format_bytes(copy.bytes)} x{copy.trip_count} = {format_bytes(copy.bytes_per_call)} per call"
    return format_bytes(copy.bytes)


def _gate_copies(target: str, deltas: list[Delta], tolerance: Tolerance, found: _Collector) -> None:
    """The donated variant's copies: a new one always regresses (the largest first), one grown beyond the
    tolerance regresses and one shrunk beyond it improves, and one gone improves."""
    for delta in sorted((d for d in deltas if d.change == "new"), key=lambda d: -d.after.per_call):
        copy: CopyRecord = delta.after
        cause = f" ({copy.cause})" if copy.cause else ""
        found.regressions.append(
            Change(
                target=target,
                kind="copy",
                subject=_copy_subject(copy),
                message=f"{target}: new {_copy_subject(copy)} ({_copy_size(copy)}){_at(copy.source)}{cause}",
                before=None,
                after=copy.per_call,
                source=copy.source,
            )
        )
    for delta in deltas:
        if delta.change in ("grew", "shrank"):
            _gate_copy_size(target, delta.before, delta.after, tolerance, found)
    for delta in deltas:
        if delta.change == "gone":
            gone: CopyRecord = delta.before
            found.improvements.append(
                Change(
                    target=target,
                    kind="copy",
                    subject=_copy_subject(gone),
                    message=f"{target}: {_copy_subject(gone)} ({_copy_size(gone)}) is gone"
                    f" (was{_at(gone.source) or ' without a source line'})",
                    before=gone.per_call,
                    after=None,
                    source=gone.source,
                )
            )


def _gate_copy_size(target: str, old: CopyRecord, now: CopyRecord, tolerance: Tolerance, found: _Collector) -> None:
    """A copy in both runs: grown beyond the tolerance regresses, shrunk beyond it improves."""
    direction = moved(tolerance, old.per_call, now.per_call)
    subject = _copy_subject(now)
    if not direction:
        return
    change = change_text(old.per_call, now.per_call)
    if direction > 0:
        message = f"{target}: {subject} grew {change} per call, beyond the tolerance {_tolerance_text(tolerance)}"
    else:
        message = f"{target}: {subject} shrank {change} per call"
    found.add(
        direction > 0,
        Change(
            target=target,
            kind="copy",
            subject=subject,
            message=message + _at(now.source),
            before=old.per_call,
            after=now.per_call,
            source=now.source,
        ),
    )


def _gate_donation(result: TargetResult, deltas: list[Delta], found: _Collector) -> None:
    """Aliases lost or gained, donations becoming unusable or usable (donated variant, by input leaf), in
    the engine's order (aliases lost, new; donations become unusable, usable again).

    An alias rerouted to another output still reuses the donated buffer: neither better nor worse."""
    name = result.name
    where = result.jit_definition or result.definition  # a donation is changed where the jit sets it
    for delta in deltas:
        worse = delta.change == "new" if delta.kind == "donation" else delta.change == "gone"
        if delta.kind == "alias" and delta.change in ("gone", "new"):
            alias = delta.before if worse else delta.after
            what = f"{alias.input} → {alias.output} ({format_bytes(alias.bytes)})"
            message = (
                f"{name}: alias lost: {what} no longer reuses the donated buffer{_at(where)}"
                if worse
                else f"{name}: new alias {what}"
            )
            before, after = (alias.output, None) if worse else (None, alias.output)
        elif delta.kind == "donation":
            donation = delta.after if worse else delta.before
            message = (
                f"{name}: donation of {donation.input} ({format_bytes(donation.bytes)}) became unusable "
                f"({donation.code}): {donation.reason}"
                if worse
                else f"{name}: donation of {donation.input} is no longer unusable (was {donation.code})"
            )
            before, after = (None, donation.code) if worse else (donation.code, None)
        else:
            continue
        found.add(worse, Change(name, delta.kind, delta.subject, message, before, after, where))


def _verdict_source(result: TargetResult) -> str | None:
    if result.verdict is not None:
        for finding in result.verdict.findings:
            if finding.severity == "error" and finding.source:
                return finding.source
    return result.definition


def _gate_verdict(result: TargetResult, was_in_place: bool, found: _Collector) -> None:
    """A verdict that turned: from in place to not regresses, the other way improves."""
    assert result.verdict is not None  # a result the diff read as checked
    source = _verdict_source(result)
    if was_in_place:
        found.regressions.append(
            Change(
                target=result.name,
                kind="verdict",
                subject="in place",
                message=f"{result.name}: verdict in place → {result.verdict.summary}",
                before="in place",
                after="not in place",
                source=source,
            )
        )
    else:
        found.improvements.append(
            Change(
                target=result.name,
                kind="verdict",
                subject="in place",
                message=f"{result.name}: verdict not in place → in place",
                before="not in place",
                after="in place",
                source=source,
            )
        )


def _version_notes(compared: list[BaselineEntry], report: Report, found: _Collector) -> None:
    """A baseline from another jax minor version is compared, and said to be."""
    now = _minor(report.jax_version)
    versions = sorted({e.jax_version for e in compared if e.jax_version != report.jax_version})
    for version in versions:
        then = _minor(version)
        names = [e.name for e in compared if e.jax_version == version]
        if then is None or now is None or then[0] != now[0] or now[1] - then[1] >= 2:
            found.notes.append(
                f"the baseline of {', '.join(names)} was made with jax {version}, much older than or unlike "
                f"this run's jax {report.jax_version}: compared, but XLA's choices may have changed for reasons "
                "unrelated to your code; review, then refresh it with --save-baseline"
            )
        elif then != now:
            found.notes.append(
                f"the baseline of {', '.join(names)} was made with jax {version}, this run uses jax "
                f"{report.jax_version}: compared, but figures can move between jax minor versions"
            )


def compare_to_baseline(
    report: Report,
    baseline: Baseline,
    tolerances: Tolerances = Tolerances(),
    *,
    root: str | os.PathLike[str] | None = None,
) -> Report:
    """``report`` with ``baseline=BaselineComparison(...)``: every regression and improvement.

    Entries are matched by target name (:func:`project_name`, relative to
    ``root``; default: the baseline's folder) on this run's backend and device
    kind; entries of another backend or device kind are not compared but
    noted. A regression: a gated figure growing beyond its tolerance, a new or
    grown copy, an alias lost, a donation becoming unusable, a verdict turning
    from in place to not, a target that now errors or whose spec ran but no
    longer yields it, and a baseline none of whose entries this run could
    compare (every target missing: the gate would otherwise pass on nothing).
    Targets new to the baseline, or not checked in this run, are notes. Linear
    in the entries and results.

    Each target compared is listed in the comparison's ``accepted``, with its
    failed checks that the entry accepts (recorded failing by ``--save-baseline
    --accept-current``, failing the same way: same name, same limit), which
    then do not fail the run (``Report.exit_code``); an accepted check that now
    passes is an improvement. A failed check the entry does not accept fails
    the run as it does without a baseline.
    """
    found = _Collector()
    base = _root(root, baseline.path)
    refuse_shared_names(report, base)
    backend, kind = report.backend, _device_kind(report)
    here: list[BaselineEntry] = []
    elsewhere: list[BaselineEntry] = []
    for item in _migrated(baseline, base):
        (here if item.backend == backend and (item.device_kind or None) == kind else elsewhere).append(item)
    by_name = {e.name: e for e in here}
    other_names = {e.name for e in elsewhere}
    compared: list[BaselineEntry] = []
    names: set[str] = set()
    new: list[str] = []
    accepted: list[Accepted] = []
    matched = 0
    made_with: dict[str, str] = {}  # target -> the jax its entry was recorded with, where not this run's
    for result in report.results:
        name = project_name(result.name, result.target, base)
        names.add(name)
        entry = by_name.get(name)
        if entry is None:
            if name not in other_names:
                new.append(result.name)
            continue
        matched += 1
        if entry.jax_version and entry.jax_version != report.jax_version:
            made_with[result.name] = entry.jax_version
        if result.status == "error":
            message = result.error.message if result.error is not None else "it could not be checked"
            found.regressions.append(
                Change(
                    target=result.name,
                    kind="status",
                    subject="status",
                    message=f"{result.name}: now errors: {message}",
                    before=entry.status,
                    after="error",
                    source=result.definition,
                )
            )
            continue
        compared.append(entry)
        _classify(entry, result, report.min_bytes, tolerances, found)
        recorded_in, checked_in = _file_of(entry.target), _file_of(project_spec(result.target, base))
        if entry.accepted_checks and recorded_in and checked_in and recorded_in != checked_in:
            # recorded failing from another file: what it accepted is that file's, never this one's
            found.notes.append(
                f"{result.name}: the baseline's entry was recorded from {recorded_in}, and this target is in "
                f"{checked_in}: the failures it accepted there are not accepted here"
            )
            entry = dataclasses.replace(entry, accepted_checks=())
        accepted.append(_gate_checks(entry, result, found))

    specs = {project_spec(r.target, base) for r in report.results}
    unchecked = []
    for entry in here:
        if entry.name in names:
            continue
        if entry.target in specs:
            matched += 1  # its spec ran: the gate did look for it
            found.regressions.append(
                Change(
                    target=entry.name,
                    kind="status",
                    subject="disappeared",
                    message=f"{entry.name}: disappeared: {entry.target} no longer yields this target "
                    "(renamed or unregistered? refresh the baseline with --save-baseline --prune-baseline)",
                    before=entry.status,
                    after=None,
                    source=entry.definition,
                )
            )
        else:
            unchecked.append(entry.name)
    if here and not matched:
        # one line says it all: the new targets and the entries not checked are the two lists it names
        found.regressions.append(_nothing_compared(baseline, report, [e.name for e in here], base))
        new, unchecked = [], []
    if len(new) > _LISTED:
        found.notes.append(f"{len(new)} new targets, not in the baseline (--save-baseline adds them): {_listed(new)}")
    else:
        found.notes.extend(f"{n}: new target, not in the baseline (--save-baseline adds it)" for n in new)
    if unchecked:
        found.notes.append(
            f"{len(unchecked)} of the baseline's {len(here)} targets on {backend} not checked in this run, "
            f"so not compared: {_listed(unchecked)}"
        )
    groups: dict[tuple[str, str | None], list[str]] = {}
    for entry in elsewhere:
        groups.setdefault((entry.backend, entry.device_kind), []).append(entry.name)
    for (other_backend, other_kind), entry_names in groups.items():
        found.notes.append(
            f"{len(entry_names)} baseline entr{'y' if len(entry_names) == 1 else 'ies'} for {other_backend} "
            f"({other_kind}) not compared: this run is on {backend} ({kind}): {_listed(entry_names)}"
        )
    legacy = _legacy_note(baseline, base)
    if legacy is not None:
        found.notes.append(legacy)
    _version_notes(compared, report, found)
    found.regressions[:] = [_the_upgrades(change, made_with, report.jax_version) for change in found.regressions]
    comparison = BaselineComparison(
        path=baseline.path,
        regressions=tuple(found.regressions),
        improvements=tuple(found.improvements),
        notes=tuple(found.notes),
        tolerance=tolerances.describe(),
        accepted=tuple(accepted),
    )
    return dataclasses.replace(report, baseline=comparison)


def _the_upgrades(change: Change, made_with: dict[str, str], now: str) -> Change:
    """A regression of a target whose entry was recorded under another jax, said to come with the upgrade
    (``fieldmem check --jax NEW --baseline OLD.json``): the code may have changed too, which only the
    user knows."""
    then = made_with.get(change.target)
    if then is None:
        return change
    cause = f" [jax {then} → {now}: the upgrade's, unless the code changed too]"
    return dataclasses.replace(change, message=change.message + cause, cause=f"jax {then} → {now}")


def _gate_checks(entry: BaselineEntry, result: TargetResult, found: _Collector) -> Accepted:
    """The failed checks of ``result`` that ``entry`` accepts; an accepted check now passing is an
    improvement, one failing with another limit or no longer made is noted."""
    recorded = {(_check_name(a.name), a.limit) for a in entry.accepted_checks}
    accepted = tuple(c.name for c in result.failed_checks if (_check_name(c.name), c.limit) in recorded)
    by_name: dict[str, Check] = {_check_name(c.name): c for c in result.checks}
    for was in entry.accepted_checks:
        check = by_name.get(_check_name(was.name))
        if check is None:
            found.notes.append(
                f"{result.name}: {was.name} is no longer checked (the baseline accepted it failing); "
                "refresh the baseline with --save-baseline"
            )
        elif check.passed:
            found.improvements.append(
                Change(
                    target=result.name,
                    kind="check",
                    subject=was.name,
                    message=f"{result.name}: {was.name} passes now (the baseline accepted it failing)",
                    before="failed",
                    after="passed",
                    source=result.definition,
                )
            )
        elif check.limit != was.limit:
            found.notes.append(
                f"{result.name}: {was.name} fails with the limit {_limit(check.limit)}; the baseline accepted it "
                f"failing with the limit {_limit(was.limit)}, not this one"
            )
    return Accepted(target=result.name, checks=accepted)


def _check_name(name: str) -> str:
    """A check's name as this fieldmem names it: ``max-peak`` (the footprint budget before issue 48) is
    ``max-footprint``."""
    return "max-footprint" if name == "max-peak" else name


def _limit(limit: int | None) -> str:
    return "none" if limit is None else format_bytes(limit)


def _nothing_compared(baseline: Baseline, report: Report, here: Sequence[str], root: str) -> Change:
    """The regression of a gate that compared nothing: the baseline matches none of the run's targets on this
    backend. One line, naming both sides: the gate would otherwise pass on nothing."""
    checked = _listed([r.name for r in report.results]) or "nothing"
    return Change(
        target=baseline.path,
        kind="status",
        subject="missing",
        message=f"the baseline {baseline.path!r} matches none of this run's targets, so nothing was gated: it "
        f"names {_listed(list(here))} on {report.backend}, this run checked {checked} (names are relative to "
        f"{root!r}); check the targets, refresh the baseline with --save-baseline, or run with --no-baseline",
        before=len(here),
        after=0,
    )
