"""User-facing errors. The core raises them; only the CLI turns them into exit codes.

Every message says what was given, what is wrong and what would work, on one
line, so that the CLI can print it without a traceback.

Text that comes from the user (a target, a key of the config, a value read
from a baseline or report, an exception's message) can be any length: every
message is one line of at most :data:`MAX_LINE` characters
(:func:`one_line`, applied by :class:`FieldmemError` itself), and the helpers
:func:`quoted` and :func:`listing` keep a value or a list short where it
enters a message, so the part that says what is wrong stays on screen.

Every :class:`FieldmemError` (exit code 2; ``kind`` is the word a report and the
API record for a target's error):

- here, the model's and those every layer raises: :class:`OptionError`,
  :class:`TargetError`, :class:`ArgumentsError`, :class:`DonationError`,
  :class:`CompileError`, :class:`EnvError`, :class:`RunError`,
  :class:`UnsupportedJaxError` (``--jax``: a release the worker does not support),
  :class:`ReportError` (a document is not a report; also a ``ValueError``),
  :class:`FitReportError` (not a ``fieldmem.fit`` document);
- beside the one layer's code that raises each: ``request/config.py``
  ``ConfigError``; ``parent/worker_process.py`` ``WorkerFailure``; ``worker/results.py``
  ``InternalError`` and ``ExitError``; ``gate/records.py`` ``BaselineError``;
  ``gate/compare.py`` ``ReportFileError``; ``gate/fit.py`` ``FitBaselineError``;
  ``frontends/output.py`` ``WriteError``.

They stay there rather than here: each is raised only by the code beside it, and
``fieldmem.frontends.api`` picks the class of a target's recorded ``kind`` in the order the
classes were made, which a move would change for ``crash`` (``WorkerFailure`` and
``ExitError`` share it). ``tests/model/test_errors.py`` keeps this list whole.

Not FieldmemErrors, since they are not a user's mistake: ``files.py``'s ``NotRegularFile``
and ``LockTimeout`` (``OSError`` subclasses that their callers turn into one), the HLO and
buffer-assignment parsers' ``ValueError`` subclasses in ``xla/``, and the ``AssertionError``
subclasses the Python API raises for a failed expectation (``NotInPlaceError``, ``FitError``).
"""

from __future__ import annotations

from collections.abc import Iterable

from fieldmem.model.escaping import visible

__all__ = [
    "ArgumentsError",
    "CompileError",
    "DonationError",
    "EnvError",
    "FieldmemError",
    "FitReportError",
    "OptionError",
    "ReportError",
    "RunError",
    "TargetError",
    "UnsupportedJaxError",
    "listing",
    "one_line",
    "quoted",
]

MAX_LINE = 2000  # characters in one error line; past it, the end is cut and its length said
MAX_VALUE = 120  # characters of one quoted value inside a message
MAX_ITEMS = 12  # names of a list shown inside a message


def one_line(text: str, limit: int = MAX_LINE) -> str:
    """``text`` as one line (line breaks become spaces) of at most ``limit`` characters.

    A longer text keeps its beginning and says how long it was:
    ``abc… (200000000 characters)``. What is left that would act rather than
    show (a control character, a lone surrogate, the start of a GitHub workflow
    command) is shown as its escape (:func:`fieldmem.model.escaping.visible`), so the
    line can be printed on any terminal, log or UTF-8 stream as it is.
    """
    length = len(text)
    if length > limit:  # escaping never has to look past what can be shown
        text = text[:limit]
    if "\n" in text or "\r" in text:
        text = " ".join(line.strip() for line in text.splitlines() if line.strip())
    text = visible(text)
    if length > limit or len(text) > limit:
        note = f"… ({length} characters)"
        text = text[: max(0, limit - len(note))] + note
    return text


def quoted(value: object, limit: int = MAX_VALUE) -> str:
    """``repr(value)``, cut to ``limit`` characters (with the length said) and never raising.

    An integer too long to print (Python refuses ints past 4300 digits) is
    described by its number of digits.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * limit:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    if isinstance(value, str) and len(value) > limit:
        return repr(value[:limit]) + f"… ({len(value)} characters)"
    try:
        text = repr(value)
    except Exception:  # a user object whose repr raises
        return f"a {type(value).__name__}"
    return one_line(text, limit)


def listing(items: Iterable[object], limit: int = MAX_ITEMS) -> str:
    """``a, b, c``: the first ``limit`` items of ``items`` joined by commas, then ``… (40000 in all)``."""
    names = [str(item) for item in items]
    shown = ", ".join(one_line(name, MAX_VALUE) for name in names[:limit])
    return shown + (f", … ({len(names)} in all)" if len(names) > limit else "")


class FieldmemError(Exception):
    """Base class: a problem with what the user gave. Exit code 2."""

    exit_code = 2
    kind = "error"

    def __init__(self, message: str) -> None:
        message = one_line(message)
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


class EnvError(FieldmemError):
    """A jax environment (``--jax``, ``fieldmem envs``) cannot be made, found or removed: a release the
    package index does not have, packages that do not work with that jax, the index out of reach."""

    kind = "environment"


class RunError(FieldmemError):
    """Running a compiled variant (``--run``) failed: it raised, ran out of memory, crashed or hung.

    ``kind`` is ``run`` unless the cause is known: ``out-of-memory``,
    ``crash`` (the worker process died), ``timeout`` (past ``--timeout``),
    ``not-run`` (the call was left out before it was made, and the message
    says why: the brain decides whether that is an error).
    """

    kind = "run"

    def __init__(self, message: str, kind: str = "run") -> None:
        super().__init__(message)  # one line, bounded
        self.kind = kind


class UnsupportedJaxError(FieldmemError):
    """A jax release outside the range fieldmem's worker supports (or not a release number). Exit code 2."""

    kind = "environment"


class ReportError(FieldmemError, ValueError):
    """A JSON document is not a fieldmem report this version can read (:meth:`fieldmem.model.report.Report.from_dict`).

    Also a ``ValueError``, as it was before it joined the hierarchy, for callers that catch that.
    """

    kind = "report"


class FitReportError(FieldmemError):
    """A file is not a ``fieldmem.fit`` document this fieldmem reads. Exit code 2."""

    kind = "report"
