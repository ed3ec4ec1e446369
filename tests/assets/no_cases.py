"""A user's module with functions but no fieldmem.case registration; it imports a callable first, which a
suggestion must not name (``functools.partial`` is not the user's function)."""

from functools import partial  # noqa: F401


def update(u):
    return u + 1
