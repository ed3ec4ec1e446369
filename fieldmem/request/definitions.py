"""Where the user's code is, in words: a function's ``def`` line, its jit's donation line, a file's path.

``file.py:LINE`` of a target's definition and of the ``jax.jit`` that gives
its donation (read from the module's source, nothing run), a file's path as
the reports show it (relative to the working folder; an installed package's
from the package on), and the file a module name would load. No jax.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from fieldmem.model.libraries import install_targets

__all__ = ["definition_of", "display_path", "is_installed", "jit_definition_of", "module_file"]


def definition_of(fn: Any) -> str | None:
    """``file.py:LINE`` of the ``def`` behind ``fn``, or None.

    Wrappers are unwrapped as far as they go: ``functools.partial`` (and equinox's ``Partial``), a bound
    method (``solver.advance``), a ``jax.jit`` object (its ``_fun``), then the ``__wrapped__`` chain
    (``flax.nnx.jit`` and ``equinox.filter_jit`` set it to the user's function).
    """
    target = fn
    for _ in range(16):
        if isinstance(target, functools.partial) or type(target).__name__ == "Partial":
            target = getattr(target, "func", target)
        elif inspect.ismethod(target):
            target = target.__func__
        elif getattr(target, "_fun", None) is not None and hasattr(target, "lower"):
            target = target._fun
        else:
            break
    if callable(target):
        try:
            target = inspect.unwrap(target)
        except ValueError:  # a __wrapped__ cycle
            pass
    try:
        file = inspect.getsourcefile(target)
        _, line = inspect.getsourcelines(target)
    except (TypeError, OSError):
        return None
    if file is None:
        return None
    return f"{display_path(file)}:{line}"


_DONATION_KEYWORDS = ("donate_argnums", "donate_argnames", "donate")


def jit_definition_of(fn: Any, module: ModuleType | None, name: str) -> str | None:
    """``file.py:LINE`` where ``fn``, a jit object the user named ``name`` in ``module``, gets its donation:
    the line of its ``donate_argnums``/``donate_argnames`` keyword in ``name = jax.jit(step, ...)`` or in a
    ``@partial(jax.jit, ...)`` decorator of ``def name``, else the line of that assignment or decorator. None
    for a plain function, or where the module's source does not say (a jit made in a function, no file)."""
    if getattr(fn, "_fun", None) is None or not hasattr(fn, "lower") or module is None or "." in name:
        return None
    try:
        file = inspect.getsourcefile(module)
        source = Path(file).read_text(encoding="utf-8") if file else None
    except (TypeError, OSError, UnicodeDecodeError):
        return None
    if source is None or file is None:
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    line = _jit_line(tree, name)
    return f"{display_path(file)}:{line}" if line is not None else None


def _jit_line(tree: ast.Module, name: str) -> int | None:
    """The line of ``name``'s jit in a module's top level (see :func:`jit_definition_of`)."""
    found: int | None = None
    for node in tree.body:
        calls: list[ast.expr] = []
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            calls = [node.value]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            calls = [node.value] if node.value is not None else []
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            calls = list(node.decorator_list)
        else:
            continue
        found = calls[0].lineno if calls else node.lineno  # the last binding of the name wins, as in Python
        for call in calls:
            for inner in ast.walk(call):
                if isinstance(inner, ast.keyword) and inner.arg in _DONATION_KEYWORDS:
                    found = inner.value.lineno
                    break
    return found


_INSTALLED = ("site-packages", "dist-packages")


def display_path(file: str, cwd: str | None = None) -> str:
    """``file`` relative to the working directory (``cwd``, or the process's) when it lies below it, else as
    given; a file of an installed package (in site-packages, or a folder pip installed into on the path) from
    the package on (``optax/_src/transform.py``), the same on every machine."""
    return _display_path(file, os.getcwd() if cwd is None else cwd)


@functools.lru_cache(maxsize=8192)
def _display_path(file: str, cwd: str) -> str:
    # per working directory: a peak's thousands of frames name a few files (relpath is the cost)
    parts = file.replace("\\", "/").split("/")
    for folder in _INSTALLED:
        if folder in parts[:-1]:
            return "/".join(parts[len(parts) - parts[::-1].index(folder) :])
    for target in install_targets():  # pip install --target DIR, DIR on the path: as site-packages
        if file.startswith(target + os.sep):
            return file[len(target) + 1 :].replace("\\", "/")
    try:
        relative = os.path.relpath(file, cwd)
    except ValueError:
        return file
    return relative if not relative.startswith("..") else file


def is_installed(file: str) -> bool:
    """``file`` lies in an installed package (a ``site-packages`` or ``dist-packages`` folder)."""
    return any(folder in file.replace("\\", "/").split("/")[:-1] for folder in _INSTALLED)


def module_file(module_name: str) -> str | None:
    """The file of the module ``pkg.model``: the loaded module's, else the one importing it from the
    current folder would load (looked up on the file system, nothing imported); None when there is none
    (not found, a namespace package, a built-in module).

    Lets a target written as a module (``pkg.model:update``) be named like the same target written as a
    file (``pkg/model.py:update``) in a process that does not import the user's code (the CLI's parent).
    """
    loaded = sys.modules.get(module_name)
    if loaded is not None:
        file = getattr(loaded, "__file__", None)
        return str(file) if file else None
    if not module_name or not all(part.isidentifier() for part in module_name.split(".")):
        return None
    from importlib.machinery import PathFinder

    search: list[str] | None = [os.getcwd(), *(p or os.getcwd() for p in sys.path if isinstance(p, str))]
    found = None
    parts = module_name.split(".")
    for n in range(len(parts)):
        try:
            found = PathFinder.find_spec(".".join(parts[: n + 1]), search)
        except (ImportError, ValueError, OSError):
            return None
        if found is None:
            return None
        search = list(found.submodule_search_locations or []) if n + 1 < len(parts) else None
        if n + 1 < len(parts) and not search:
            return None
    origin = found.origin if found is not None else None
    return origin if origin and os.path.isfile(origin) else None
