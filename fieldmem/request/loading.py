"""Loading what a target spec names: ``pkg.module`` or ``path/to/file.py``, an attribute path in it, the
``--args`` factory.

A spec that cannot be loaded raises :class:`~fieldmem.model.errors.TargetError`
(an ``--args`` factory :class:`~fieldmem.model.errors.ArgumentsError`) with a
suggestion; never prints. The user's module is imported here; the factory is
not called.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from fieldmem.model.errors import ArgumentsError, TargetError, quoted

__all__ = ["is_file_spec", "load_factory", "load_module", "resolve_object", "with_article"]


def is_file_spec(module_part: str) -> bool:
    """``path/to/file.py`` (or any path with a separator) rather than ``pkg.module``."""
    return module_part.endswith(".py") or "/" in module_part or os.sep in module_part


def load_module(module_part: str) -> ModuleType:
    """Import ``pkg.module`` or load ``path/to/file.py`` (its folder goes on sys.path)."""
    if is_file_spec(module_part):
        path = Path(module_part)
        if not path.is_file():
            hint = " (a module is written pkg.module, a file path/to/file.py)" if not path.suffix else ""
            raise TargetError(f"file {quoted(module_part)} does not exist{hint}")
        path = path.resolve()
        _refuse_non_utf8(module_part, str(path))
        folder = str(path.parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        name = path.stem
        existing = sys.modules.get(name)
        if existing is not None:
            if (file := getattr(existing, "__file__", None)) and Path(file).resolve() == path:
                return existing
            name = f"_fieldmem_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
            if name in sys.modules:
                return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise TargetError(f"file {quoted(module_part)} cannot be loaded as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:
            del sys.modules[name]
            raise TargetError(f"loading {quoted(module_part)} raised {_describe(exc)}") from exc
        return module

    if not all(part.isidentifier() for part in module_part.split(".")):
        raise TargetError(
            f"{quoted(module_part)} is not a module name: use the form pkg.module:function or path/to/file.py:function"
        )
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_part)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_part == missing or module_part.startswith(missing + ".")):
            raise TargetError(
                f"module {quoted(module_part)} not found: is it installed or under the current directory? "
                "(a file also works: path/to/model.py:function)"
            ) from exc
        raise TargetError(f"importing {quoted(module_part)} raised {_describe(exc)}") from exc
    except (Exception, SystemExit) as exc:
        raise TargetError(f"importing {quoted(module_part)} raised {_describe(exc)}") from exc


def _refuse_non_utf8(module_part: str, path: str) -> None:
    """A file whose path has a byte that is not UTF-8 (decoded by Python as a lone surrogate, ``\\udcff``) is
    refused: jax records the file of each line it traces, and fails on such a name (``std::bad_cast``).

    Raises:
        TargetError: the path is not valid UTF-8.
    """
    try:
        path.encode("utf-8")
    except UnicodeEncodeError as exc:
        found = ord(exc.object[exc.start])
        byte = f"the byte 0x{found - 0xDC00:02x}" if 0xDC80 <= found <= 0xDCFF else f"{chr(found)!r}"
        raise TargetError(
            f"file {quoted(module_part)}: its path holds {byte}, which is not UTF-8, and jax cannot compile code "
            "from such a file: rename it (or the folder holding it)"
        ) from None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r}) (it calls sys.exit() at import: guard it with if __name__ == '__main__')"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def with_article(noun: str) -> str:
    """``int`` -> ``an int``, ``tuple`` -> ``a tuple``."""
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


def resolve_object(module: ModuleType, module_part: str, attr_path: str) -> Any:
    """``obj.attr`` inside ``module``, with a close-name suggestion when missing."""
    obj: Any = module
    walked = module_part
    for part in attr_path.split("."):
        if not part.isidentifier():
            raise TargetError(f"{quoted(attr_path)} is not an attribute path: use function or obj.method")
        try:
            value = getattr(obj, part)
        except AttributeError:
            names = [n for n in dir(obj) if not n.startswith("__")]
            close = difflib.get_close_matches(part, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            what = "module" if isinstance(obj, ModuleType) else type(obj).__name__
            raise TargetError(f"{what} {quoted(walked)} has no {quoted(part)}{hint}") from None
        except Exception as exc:
            raise TargetError(f"reading {quoted(part)} of {quoted(walked)} raised {_describe(exc)}") from exc
        obj = value
        walked = f"{walked}:{part}" if walked == module_part else f"{walked}.{part}"
    return obj


def load_factory(spec: str, module: ModuleType | None = None, module_name: str = "") -> tuple[Callable[[], Any], str]:
    """The ``--args`` factory: ``MODULE:FACTORY``, or a bare ``FACTORY`` in the target's own module."""
    module_part, sep, attr = spec.rpartition(":")
    if not sep and spec.strip() and module is not None:
        attr = spec.strip()
        # a bare name is looked up beside the target (a factory in the target's own module)
        if all(part.isidentifier() for part in attr.split(".")):
            try:
                factory = resolve_object(module, module_name, attr)
            except TargetError as exc:
                raise ArgumentsError(
                    f"--args {quoted(spec)}: the target's module {module_name!r} has no {attr!r} "
                    f"({exc.message}); name another module's factory as MODULE:FACTORY"
                ) from exc
            if not callable(factory):
                raise ArgumentsError(
                    f"--args {quoted(spec)} is {with_article(type(factory).__name__)}, not a callable returning the arguments"
                )
            return factory, f"{module_name}:{attr}"
    if not sep or not module_part or not attr:
        raise ArgumentsError(
            f"--args {quoted(spec)} is not FACTORY or MODULE:FACTORY (e.g. --args make_args, a factory in the "
            "target's module, or --args pkg.model:make_args)"
        )
    try:
        factory = resolve_object(load_module(module_part), module_part, attr)
    except TargetError as exc:
        raise ArgumentsError(f"--args {quoted(spec)}: {exc.message}") from exc
    if not callable(factory):
        raise ArgumentsError(
            f"--args {quoted(spec)} is {with_article(type(factory).__name__)}, not a callable returning the arguments"
        )
    return factory, spec
