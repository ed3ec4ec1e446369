"""The one place a target's error result is made: a target that failed to load, prepare, compile, analyse or run.

The checker, the ``--run`` parent and its worker all report a failure as a
:class:`~fieldmem.model.target.TargetResult` with status ``error``, so one broken
target never hides the others. An exception that is not a
:class:`~fieldmem.model.errors.FieldmemError` (a fieldmem bug, or a library call
fieldmem did not expect to fail) becomes an :class:`InternalError` of that
target through :func:`internal_error`: one line, kind ``internal``, no
traceback — unless ``FIELDMEM_DEBUG=1`` is set, which re-raises it with its
traceback for whoever debugs fieldmem. No jax.
"""

from __future__ import annotations

import os

from fieldmem.model.errors import FieldmemError
from fieldmem.model.target import ErrorInfo, TargetResult

__all__ = ["DEBUG_VARIABLE", "ExitError", "InternalError", "contained", "error_result", "internal_error"]

DEBUG_VARIABLE = "FIELDMEM_DEBUG"  # set (not "" or "0"): an unexpected exception is raised with its traceback


class InternalError(FieldmemError):
    """An unexpected exception while checking one target: a fieldmem bug, that target's error (exit 2)."""

    kind = "internal"


def debugging() -> bool:
    """Whether ``FIELDMEM_DEBUG`` asks for unexpected exceptions to be raised rather than contained."""
    return os.environ.get(DEBUG_VARIABLE, "").strip() not in ("", "0")


def internal_error(exc: Exception, stage: str) -> InternalError:
    """``exc``, raised while ``stage`` (e.g. "compiling it"), as one line that says it is a fieldmem bug.

    Raises:
        Exception: ``exc`` itself, with its traceback, when ``FIELDMEM_DEBUG`` is set.
    """
    if debugging():
        raise exc
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    what = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return InternalError(
        f"internal error while {stage}: {what} — a fieldmem bug, please report it "
        f"(run with {DEBUG_VARIABLE}=1 for the traceback)"
    )


class ExitError(FieldmemError):
    """The user's code ended the check of one target: ``sys.exit``, another ``BaseException``, or (in a
    worker) the worker's death. That target's error (exit 2), kind ``crash``."""

    kind = "crash"


def contained(exc: BaseException, stage: str) -> FieldmemError:
    """``exc``, raised while ``stage``, as the error of the target it stopped (one line, no traceback).

    A :class:`FieldmemError` is itself; another ``Exception`` is an :class:`InternalError`
    (:func:`internal_error`); a ``SystemExit`` or another ``BaseException`` is an :class:`ExitError`.

    Raises:
        KeyboardInterrupt: ``exc`` itself: Ctrl-C stops the run, it is no target's error.
        BaseException: ``exc`` itself, with ``FIELDMEM_DEBUG`` set, when it is not a fieldmem error.
    """
    if isinstance(exc, KeyboardInterrupt):
        raise exc
    if isinstance(exc, FieldmemError):
        return exc
    if isinstance(exc, Exception):
        return internal_error(exc, stage)
    if debugging():
        raise exc
    if isinstance(exc, SystemExit):
        return ExitError(f"called sys.exit({exc.code!r}) while {stage}")
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    what = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return ExitError(f"raised {what} while {stage}")


def error_result(spec: str, name: str, error: FieldmemError, definition: str | None = None) -> TargetResult:
    """The result of target ``name`` (from ``spec``, defined at ``definition``) that ``error`` stopped."""
    return TargetResult(
        target=spec,
        name=name,
        status="error",
        definition=definition,
        error=ErrorInfo(kind=error.kind, message=error.message),
    )
