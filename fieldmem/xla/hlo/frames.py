"""Which frames of a source stack are the user's own code, and the call site of a line in a library.

A copy XLA keeps is often placed, by its metadata, on a line of flax, optax or
another library the user's step calls: that line is where the value was made,
not where the user can change anything. The stack jax records with each
instruction (:attr:`~.model.SourceLocation.callers`) leads back to the user's
code, and :func:`call_site` picks the frame there.

What is library code is the caller's to say (``is_library_file``: fieldmem's one definition is
:func:`fieldmem.model.libraries.is_library_file`, the files of the interpreter's installation folders, of
any ``site-packages``, of fieldmem, and no file at all): this module reads no installation. Pure, no jax.
"""

from __future__ import annotations

from collections.abc import Callable

from .model import SourceLocation

__all__ = ["call_site"]


def call_site(location: SourceLocation | None, is_library_file: Callable[[str], bool]) -> SourceLocation | None:
    """The innermost frame of the user's own code that led to ``location``, when ``location`` is library code.

    None when ``location`` is the user's code already (it is its own call site),
    when no caller is known (the metadata printed no stack), or when every
    known frame is library code.
    """
    if location is None or not is_library_file(location.file):
        return None
    for frame in location.callers:
        if not is_library_file(frame.file):
            return frame
    return None
