"""What the process tests read of other processes, from /proc (Linux only)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["alive", "children"]


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
