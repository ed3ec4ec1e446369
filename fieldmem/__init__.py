"""fieldmem: is your jitted JAX update really in place, and where does the memory go?

The public API is re-exported here explicitly. Importing fieldmem imports no
jax: ``fieldmem.case`` only registers, and the checking functions import jax
when they run.
"""

from __future__ import annotations

__version__ = "0.1.0"

from fieldmem.errors import FieldmemError
from fieldmem.registry import Case, case

__all__ = [
    "Case",
    "FieldmemError",
    "__version__",
    "case",
    "check",
]


def check(*specs: str, **kwargs: object) -> "object":
    """Check targets from Python; see :func:`fieldmem.checker.check`. Returns a Report."""
    from fieldmem.checker import check as _check

    return _check(specs, **kwargs)  # type: ignore[arg-type]
