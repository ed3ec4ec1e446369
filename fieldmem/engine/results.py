"""The one place a target's error result is made: a target that failed to load, prepare, compile, analyse or run.

The checker, the ``--run`` parent and its worker all report a failure as a
:class:`~fieldmem.report.TargetResult` with status ``error``, so one broken
target never hides the others. No jax.
"""

from __future__ import annotations

from fieldmem.errors import FieldmemError
from fieldmem.report import ErrorInfo, TargetResult

__all__ = ["error_result"]


def error_result(spec: str, name: str, error: FieldmemError, definition: str | None = None) -> TargetResult:
    """The result of target ``name`` (from ``spec``, defined at ``definition``) that ``error`` stopped."""
    return TargetResult(
        target=spec,
        name=name,
        status="error",
        definition=definition,
        error=ErrorInfo(kind=error.kind, message=error.message),
    )
