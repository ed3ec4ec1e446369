"""fieldmem: is your jitted JAX update really in place, and where does the memory go?

The public API is re-exported here explicitly. Importing fieldmem imports no
jax: ``fieldmem.case`` only registers, and the checking functions
(``check``, ``check_function``, ``assert_in_place``) import jax when they run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fieldmem.model import __version__

if TYPE_CHECKING:
    from fieldmem.frontends.api import NotInPlaceError, assert_in_place, check_chain, check_function, check_releases
    from fieldmem.frontends.fit_api import FitError, assert_fits, fit
    from fieldmem.model.errors import FieldmemError
    from fieldmem.model.fit_report import FitReport
    from fieldmem.model.report import Report
    from fieldmem.request.registry import Case, case, chain

# every name is imported when first used: registering cases (fieldmem.case, fieldmem.chain) brings the
# registry, the checking API the report and its codec (tests/frontends/test_import_cost.py). The package itself
# loads nothing, so the ``fieldmem`` command starts its worker before any of it (fieldmem.frontends.entry).
_LAZY = {
    "FieldmemError": "fieldmem.model.errors",
    "Case": "fieldmem.request.registry",
    "case": "fieldmem.request.registry",
    "chain": "fieldmem.request.registry",
    "NotInPlaceError": "fieldmem.frontends.api",
    "assert_in_place": "fieldmem.frontends.api",
    "check_chain": "fieldmem.frontends.api",
    "check_function": "fieldmem.frontends.api",
    "check_releases": "fieldmem.frontends.api",
    "fit": "fieldmem.frontends.fit_api",
    "assert_fits": "fieldmem.frontends.fit_api",
    "FitError": "fieldmem.frontends.fit_api",
    "FitReport": "fieldmem.model.fit_report",
}

__all__ = [
    "Case",
    "FieldmemError",
    "FitError",
    "FitReport",
    "NotInPlaceError",
    "__version__",
    "assert_fits",
    "assert_in_place",
    "case",
    "chain",
    "check",
    "check_chain",
    "check_function",
    "check_releases",
    "fit",
]


def check(*specs: str, **kwargs: Any) -> Report:
    """Check targets from Python, as ``fieldmem check`` does, and return the Report.

    Keyword arguments are those of :func:`fieldmem.parent.checker.check`
    (``target_options``, ``options``, ``progress``)::

        report = fieldmem.check("examples/field.py")
        assert report.results[0].verdict.in_place
    """
    from fieldmem.parent import checker

    return checker.check(specs, **kwargs)


def __getattr__(name: str) -> Any:
    """The public names, imported on first use (``fieldmem.case``, ``from fieldmem import NotInPlaceError``)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fieldmem' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
