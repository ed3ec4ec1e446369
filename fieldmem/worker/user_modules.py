"""The user's own modules in a worker that ``--watch`` keeps: which files a target spec depends on, and
loading them again after an edit.

A spec's files are its module's file and, followed through their ``import``
statements (read with :mod:`ast`, nothing executed), the local modules it
imports, directly or not: modules whose file is the user's (not the
standard library, an installed package or fieldmem,
:func:`~fieldmem.worker.fingerprint.is_local_file`) and already imported.
A module imported some other way (``importlib.import_module`` with a
computed name, ``__import__``) is not followed.

:func:`forget` drops the modules of edited files, and every local module
that imports one of them, from ``sys.modules``, so that loading a spec again
executes its module afresh (and :mod:`fieldmem.request.registry` replaces its
cases rather than adding them twice). No jax here.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import linecache
import os
import sys
import types
from collections.abc import Iterable

from fieldmem.request.loading import is_file_spec
from fieldmem.request.target import folder_targets
from fieldmem.worker.fingerprint import is_local_file

__all__ = ["forget", "spec_files"]


def _real(path: str) -> str:
    return os.path.normcase(os.path.realpath(path))  # a local module's file: a few of them


def _is_local(file: str | None) -> bool:
    return is_local_file(file)


def _local_modules() -> dict[str, str]:
    """Every imported module whose file is the user's: name -> its file (real path)."""
    found = {}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None) if isinstance(module, types.ModuleType) else None
        if isinstance(file, str) and _is_local(file):
            found[name] = _real(file)
    return found


_PARSED: dict[tuple[str, str], tuple[tuple[int, int], frozenset[str]]] = {}  # (file, package) -> (stat, names)


def _imported_names(module: types.ModuleType, file: str) -> frozenset[str]:
    """The module names ``file``'s import statements name (``from a import b``: ``a`` and ``a.b``); read
    again only when the file's modification time or size changed."""
    package = getattr(module, "__package__", None) or ""
    try:
        info = os.stat(file)
    except OSError:
        return frozenset()
    stamp = (info.st_mtime_ns, info.st_size)
    known = _PARSED.get((file, package))
    if known is not None and known[0] == stamp:
        return known[1]
    names = frozenset(_parse_imports(file, package))
    _PARSED[(file, package)] = (stamp, names)
    return names


def _parse_imports(file: str, package: str) -> set[str]:
    try:
        with open(file, "rb") as handle:
            tree = ast.parse(handle.read(), filename=file)
    except (OSError, SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                names.update(".".join(parts[: n + 1]) for n in range(len(parts)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".") if package else []
                anchor = anchor[: len(anchor) - (node.level - 1)] if node.level > 1 else anchor
                base = ".".join([*anchor, base] if base else anchor)
            if base:
                names.add(base)
            for alias in node.names:
                names.add(f"{base}.{alias.name}" if base else alias.name)
    return names


def _dependencies(local: dict[str, str]) -> dict[str, set[str]]:
    """Per local module, the local modules it imports (by name)."""
    graph: dict[str, set[str]] = {}
    for name, file in local.items():
        module = sys.modules.get(name)
        if module is None:
            continue
        graph[name] = {n for n in _imported_names(module, file) if n in local and n != name}
    return graph


def _module_of(spec_module: str, local: dict[str, str]) -> tuple[str | None, str | None]:
    """The module name (when imported) and file of a spec's module part."""
    if is_file_spec(spec_module):
        file = _real(spec_module)
        name = next((n for n, f in local.items() if f == file), None)
        return name, file
    if spec_module in local:
        return spec_module, local[spec_module]
    try:
        found = importlib.util.find_spec(spec_module)
    except (ImportError, ValueError, AttributeError):
        return None, None
    origin = getattr(found, "origin", None) if found is not None else None
    return None, (_real(origin) if origin and _is_local(origin) else None)


def spec_files(spec: str, also: Iterable[str] = ()) -> list[str]:
    """The files ``spec`` (as the user typed it) depends on: its module's file(s), the modules named
    ``also`` (those its targets' functions and factories come from), and the local modules they import,
    directly or not. A spec whose module failed to load still names its file when it can."""
    spec = spec.strip()
    module_part = spec.rpartition(":")[0] if ":" in spec else spec
    parts = folder_targets(module_part) or (module_part,)
    local = _local_modules()
    graph = _dependencies(local)
    files: set[str] = set()
    todo: list[str] = []
    for part in parts:
        name, file = _module_of(part, local)
        if file is not None:
            files.add(file)
        if name is not None:
            todo.append(name)
    todo.extend(name for name in also if name in local)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        files.add(local[name])
        todo.extend(graph.get(name, ()))
    return sorted(files)


def forget(files: Iterable[str]) -> list[str]:
    """Drop the modules of ``files`` (edited) and every local module importing one of them, directly or
    not, from ``sys.modules``; return their names. Their next import executes their file again.

    The bytecode cached for an edited file is removed: Python checks it by the source's size and its
    modification time in whole seconds, and an edit that keeps the size within one second would load the
    old code.
    """
    edited = {_real(f) for f in files}
    local = _local_modules()
    graph = _dependencies(local)
    dropped = {name for name, file in local.items() if file in edited}
    grew = True
    while grew:
        importers = {name for name, imports in graph.items() if imports & dropped and name not in dropped}
        grew = bool(importers)
        dropped |= importers
    for file in edited:
        try:
            os.remove(importlib.util.cache_from_source(file))
        except (OSError, ValueError, NotImplementedError):
            pass
    named = set(edited)
    for name in dropped:
        module = sys.modules.pop(name, None)
        origin = getattr(module, "__file__", None)
        if isinstance(origin, str):
            named.add(origin)
    importlib.invalidate_caches()
    for file in named:  # source lines (definitions, copies' lines) are read from the files as they are now
        linecache.checkcache(file)
    return sorted(dropped)
