"""Which baseline entry is which target: one name per target however it is written and wherever fieldmem
runs (:func:`project_name`), the folder those names are relative to, and older baselines' entries keyed again.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from fieldmem.gate.records import LEGACY_SCHEMA, Baseline, BaselineEntry, BaselineError, check_name
from fieldmem.model.report import Report
from fieldmem.model.target import TargetResult
from fieldmem.request.definitions import is_installed, module_file
from fieldmem.request.loading import is_file_spec

LISTED = 10  # names listed in one note before "and N more"


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


def file_of(spec: str) -> str | None:
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


def root_or_default(root: str | os.PathLike[str] | None, baseline_path: str | os.PathLike[str]) -> str:
    return os.fspath(root) if root is not None else os.fspath(default_root(baseline_path))


def migrated_entries(baseline: Baseline, root: str) -> tuple[BaselineEntry, ...]:
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
        if any(c.name != check_name(c.name) for c in e.accepted_checks):  # a budget's name before issue 48
            renamed = tuple(dataclasses.replace(c, name=check_name(c.name)) for c in e.accepted_checks)
            e = dataclasses.replace(e, accepted_checks=renamed)
        migrated.append(e)
    return tuple(migrated)


def _module_part(spec: str) -> str:
    return spec.rpartition(":")[0] if ":" in spec else spec


def legacy_note(baseline: Baseline, root: str) -> str | None:
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


def listed_names(names: list[str]) -> str:
    shown = ", ".join(names[:LISTED])
    return shown + (f" and {len(names) - LISTED} more" if len(names) > LISTED else "")
