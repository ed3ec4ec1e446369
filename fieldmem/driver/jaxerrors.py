"""jax's exceptions in one line, for the messages of fieldmem's errors (a traceback is no message).

Imports nothing: the text of any exception, whatever raised it.
"""

from __future__ import annotations

__all__ = ["first_line"]


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (the type alone when the message is empty)."""
    text = str(exc).strip().splitlines()
    head = text[0] if text else ""
    return f"{type(exc).__name__}: {head}" if head else type(exc).__name__
