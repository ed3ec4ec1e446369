"""Comparing a run against its baseline: :func:`compare_to_baseline` collects *every* regression and
improvement (each a :class:`~fieldmem.model.report.Change`; which copies and aliases are the same in the
two runs is :mod:`fieldmem.gate.diff`'s to say), within the tolerances, into the report's
:class:`~fieldmem.model.report.BaselineComparison`; the exit code (``Report.exit_code``) then fails once.
Nothing here prints.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from fieldmem.gate.diff import (
    CopyRecord,
    Delta,
    TargetFacts,
    VariantFacts,
    change_text,
    diff_targets,
    facts_of_result,
    moved,
    peak_line_source,
    peak_line_text,
)
from fieldmem.gate.records import Baseline, BaselineEntry, check_name, first_device_kind
from fieldmem.gate.target_names import (
    LISTED,
    file_of,
    legacy_note,
    listed_names,
    migrated_entries,
    project_name,
    project_spec,
    refuse_shared_names,
    root_or_default,
)
from fieldmem.model.comparison import Accepted, BaselineComparison, Change
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult
from fieldmem.model.units import format_bytes
from fieldmem.model.verdict import Check
from fieldmem.request.tolerance import COPIES, FIGURES, Tolerance, Tolerances

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
    base = root_or_default(root, baseline.path)
    refuse_shared_names(report, base)
    backend, kind = report.backend, first_device_kind(report)
    here: list[BaselineEntry] = []
    elsewhere: list[BaselineEntry] = []
    for item in migrated_entries(baseline, base):
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
        recorded_in, checked_in = file_of(entry.target), file_of(project_spec(result.target, base))
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
    if len(new) > LISTED:
        found.notes.append(
            f"{len(new)} new targets, not in the baseline (--save-baseline adds them): {listed_names(new)}"
        )
    else:
        found.notes.extend(f"{n}: new target, not in the baseline (--save-baseline adds it)" for n in new)
    if unchecked:
        found.notes.append(
            f"{len(unchecked)} of the baseline's {len(here)} targets on {backend} not checked in this run, "
            f"so not compared: {listed_names(unchecked)}"
        )
    groups: dict[tuple[str, str | None], list[str]] = {}
    for entry in elsewhere:
        groups.setdefault((entry.backend, entry.device_kind), []).append(entry.name)
    for (other_backend, other_kind), entry_names in groups.items():
        found.notes.append(
            f"{len(entry_names)} baseline entr{'y' if len(entry_names) == 1 else 'ies'} for {other_backend} "
            f"({other_kind}) not compared: this run is on {backend} ({kind}): {listed_names(entry_names)}"
        )
    legacy = legacy_note(baseline, base)
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
    recorded = {(check_name(a.name), a.limit) for a in entry.accepted_checks}
    accepted = tuple(c.name for c in result.failed_checks if (check_name(c.name), c.limit) in recorded)
    by_name: dict[str, Check] = {check_name(c.name): c for c in result.checks}
    for was in entry.accepted_checks:
        check = by_name.get(check_name(was.name))
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


def _limit(limit: int | None) -> str:
    return "none" if limit is None else format_bytes(limit)


def _nothing_compared(baseline: Baseline, report: Report, here: Sequence[str], root: str) -> Change:
    """The regression of a gate that compared nothing: the baseline matches none of the run's targets on this
    backend. One line, naming both sides: the gate would otherwise pass on nothing."""
    checked = listed_names([r.name for r in report.results]) or "nothing"
    return Change(
        target=baseline.path,
        kind="status",
        subject="missing",
        message=f"the baseline {baseline.path!r} matches none of this run's targets, so nothing was gated: it "
        f"names {listed_names(list(here))} on {report.backend}, this run checked {checked} (names are relative to "
        f"{root!r}); check the targets, refresh the baseline with --save-baseline, or run with --no-baseline",
        before=len(here),
        after=0,
    )
