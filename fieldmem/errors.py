"""User-facing errors. The core raises them; only the CLI turns them into exit codes.

Every message says what was given, what is wrong and what would work, on one
line, so that the CLI can print it without a traceback.
"""

from __future__ import annotations

__all__ = [
    "ArgumentsError",
    "CompileError",
    "DonationError",
    "FieldmemError",
    "OptionError",
    "RunError",
    "TargetError",
]


class FieldmemError(Exception):
    """Base class: a problem with what the user gave. Exit code 2."""

    exit_code = 2
    kind = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class OptionError(FieldmemError):
    """A command-line option or API argument has a value fieldmem cannot use."""

    kind = "bad-option"


class TargetError(FieldmemError):
    """A target (``module:fn``, ``file.py:fn``) cannot be loaded."""

    kind = "target"


class ArgumentsError(FieldmemError):
    """Example arguments are missing, or their factory raised or returned nonsense."""

    kind = "arguments"


class DonationError(FieldmemError):
    """``--donate``/``--static`` names arguments the call does not have."""

    kind = "donation"


class CompileError(FieldmemError):
    """The function fails to trace, lower or compile with the given arguments."""

    kind = "compile"


class RunError(FieldmemError):
    """Running a compiled variant (``--run``) failed: it raised, ran out of memory, crashed or hung.

    ``kind`` is ``run`` unless the cause is known: ``out-of-memory``,
    ``crash`` (the worker process died), ``timeout`` (past ``--timeout``).
    """

    kind = "run"

    def __init__(self, message: str, kind: str = "run") -> None:
        super().__init__(message)
        self.kind = kind
