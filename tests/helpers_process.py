"""What the process tests read of other processes, from /proc (Linux only), and how they start the ones they
interrupt."""

from __future__ import annotations

import signal
from pathlib import Path

__all__ = ["alive", "children", "ctrl_c_reaches_it"]


def ctrl_c_reaches_it() -> None:
    """A ``preexec_fn`` for a child the test will send SIGINT: SIGINT at its default, as in a terminal.

    A command that a non-interactive shell starts in the background (``sh -c '... &'``, as some CI runners start
    their jobs) inherits SIGINT ignored, and Python then never installs its KeyboardInterrupt handler: the child
    would sleep through the test's Ctrl-C and the test would time out on how it was started, not on fieldmem.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def children(pid: int) -> list[int]:
    """The process ids of ``pid``'s children (none when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie has ended, only its exit status is left to collect."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
