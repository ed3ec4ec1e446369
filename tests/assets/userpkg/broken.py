"""A package module whose own import of a missing dependency fails."""

import fieldmem_no_such_dependency  # noqa: F401


def step(u):
    return u
