"""fieldmem: is your jitted JAX update really in place, and where does the memory go?

The public API is re-exported here explicitly. Importing fieldmem imports no
jax: ``fieldmem.case`` only registers, and the checking functions
(``check``, ``check_function``, ``assert_in_place``) import jax when they run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fieldmem.errors import FieldmemError
from fieldmem.request.registry import Case, case, chain
from fieldmem.version import __version__

if TYPE_CHECKING:
    from fieldmem.api import NotInPlaceError, assert_in_place, check_chain, check_function
    from fieldmem.report import Report

# what a user's module needs to register its cases (fieldmem.case, fieldmem.chain) is imported here; the
# checking API (and with it the report and its codec) when first used: tests/test_import_cost.py
_FROM_API = ("NotInPlaceError", "assert_in_place", "check_chain", "check_function")

__all__ = [
    "Case",
    "FieldmemError",
    "NotInPlaceError",
    "__version__",
    "assert_in_place",
    "case",
    "chain",
    "check",
    "check_chain",
    "check_function",
]


def check(*specs: str, **kwargs: Any) -> Report:
    """Check targets from Python, as ``fieldmem check`` does, and return the Report.

    Keyword arguments are those of :func:`fieldmem.engine.checker.check`
    (``target_options``, ``options``, ``progress``)::

        report = fieldmem.check("examples/field.py")
        assert report.results[0].verdict.in_place
    """
    from fieldmem.engine import checker

    return checker.check(specs, **kwargs)


def __getattr__(name: str) -> Any:
    """The checking API's names, imported on first use (``fieldmem.check_function``, ``from fieldmem import
    NotInPlaceError``)."""
    if name in _FROM_API:
        from fieldmem import api

        value = getattr(api, name)
        globals()[name] = value  # found directly from now on
        return value
    raise AttributeError(f"module 'fieldmem' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
