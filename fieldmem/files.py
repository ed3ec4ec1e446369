"""Reading JSON documents with one-line errors, and writing files without ever leaving a half-written one."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from fieldmem.errors import FieldmemError

__all__ = ["read_json", "write_atomic"]


def read_json(path: str | os.PathLike[str], what: str, error: type[FieldmemError], missing: str, hint: str) -> Any:
    """The JSON document in ``path``, or ``error`` with a one-line message naming the file.

    ``what`` names the document in messages (``baseline``, ``report``);
    ``missing`` ends the message for a file that does not exist, ``hint`` the
    others (what the user should give instead).
    """
    shown = os.fspath(path)
    file = Path(path)
    if file.is_dir():
        raise error(f"{what} {shown!r} is a folder: {hint}")
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{what} {shown!r} does not exist: {missing}") from None
    except UnicodeDecodeError:
        raise error(f"{what} {shown!r} is not JSON (not UTF-8 text): {hint}") from None
    except OSError as exc:
        raise error(f"cannot read the {what} {shown!r}: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(
            f"{what} {shown!r} is not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}): {hint}"
        ) from None
    except RecursionError:
        raise error(f"{what} {shown!r} is nested too deeply to be a fieldmem document: {hint}") from None
    except ValueError as exc:  # a number past Python's integer-digit limit
        raise error(f"{what} {shown!r} cannot be read ({exc}): {hint}") from None


def _mode_for(target: Path) -> int:
    """The permission bits the file should end with: the old file's, else what ``open()`` would give.

    ``mkstemp`` creates its file 0600; renamed into place as is, a baseline
    or report that was 0644 (or a new one) would become private to its owner.
    """
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename.

    A failure or an interruption leaves the previous file untouched (same
    bytes, same permissions) and no temporary file behind.
    """
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    mode = _mode_for(target)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            if hasattr(os, "fchmod"):  # not on Windows before Python 3.13
                os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
