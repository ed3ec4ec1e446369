"""jax's exceptions in one line, for the messages of fieldmem's errors (a traceback is no message).

Imports nothing: the text of any exception, whatever raised it.
"""

from __future__ import annotations

__all__ = ["first_line", "message_lines"]

_TRACEBACK = "Traceback (most recent call last):"


def message_lines(exc: BaseException) -> list[str]:
    """The non-blank lines of ``exc``'s message, stripped, with any Python traceback it carries cut out.

    A host callback that raised (``jax.pure_callback``, ``jax.debug.callback``)
    comes back from XLA as ``INTERNAL: CpuCallback error calling callback:
    Traceback (most recent call last): File … MemoryError: …``: the first
    line ends where the cause is about to be said. Here the traceback's frames
    are dropped and its last line, the exception that was raised, joins the
    line that introduced it: ``… calling callback: MemoryError: …``.
    """
    lines = [line.rstrip() for line in str(exc).strip().splitlines() if line.strip()]
    result: list[str] = []
    n = 0
    while n < len(lines):
        line = lines[n]
        at = line.find(_TRACEBACK)
        if at < 0:
            result.append(line.strip())
            n += 1
            continue
        head = line[:at].strip()
        # the frames are indented; the raised exception is the first line after them that is not
        end = n + 1
        while end < len(lines) and (lines[end].startswith((" ", "\t")) or not lines[end].strip()):
            end += 1
        cause = lines[end].strip() if end < len(lines) else "(the cause was not given)"
        result.append(f"{head} {cause}".strip())
        n = end + 1
    return result


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (the type alone when the message is empty); a Python traceback
    inside the message gives its raised exception instead (:func:`message_lines`)."""
    text = message_lines(exc)
    head = text[0] if text else ""
    return f"{type(exc).__name__}: {head}" if head else type(exc).__name__
