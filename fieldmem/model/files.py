"""Reading JSON documents with one-line errors, and writing files without ever leaving a half-written one.

:func:`write_atomic` replaces a file through a temporary file in the same
folder and a rename, so a reader sees the old file or the new one, never a
mix. What is left behind when the writer is killed:

- SIGTERM, SIGHUP or Ctrl-C: nothing. While a write (or a :func:`terminating`
  block) runs, those signals become an exception, the temporary file is
  removed, and the signal is then delivered again so the process ends as it
  was asked to.
- SIGKILL: on Linux the text is written to an unnamed file (``O_TMPFILE``),
  which the kernel frees with the process; it gets a name only for the
  instant between ``linkat`` and the rename. A temporary file that a killed
  writer did leave (named ``.NAME.PID.XXXX.tmp``, on file systems without
  ``O_TMPFILE``) is removed by the next write into the same folder once
  process PID is gone.

:func:`locked` serialises the read-modify-write of one file between processes
(``fcntl.flock`` on the folder holding it, which leaves no file; an exclusive-create lock file
where a folder cannot be locked).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fieldmem.model.errors import FieldmemError

try:  # not on Windows
    import fcntl
except ImportError:  # pragma: no cover - exercised by monkeypatching in the tests
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "LockTimeout",
    "NotRegularFile",
    "append_to_file",
    "locked",
    "not_a_file",
    "process_alive",
    "read_json",
    "remove_stale_scratch",
    "same_file",
    "scratch_folder",
    "temporary_files",
    "terminating",
    "write_atomic",
]


def read_json(path: str | os.PathLike[str], what: str, error: type[FieldmemError], missing: str, hint: str) -> Any:
    """The JSON document in ``path``, or ``error`` with a one-line message naming the file.

    ``what`` names the document in messages (``baseline``, ``report``);
    ``missing`` ends the message for a file that does not exist, ``hint`` the
    others (what the user should give instead). Only a regular file is read:
    a FIFO, a device or a socket at ``path`` is refused at once, never waited on.
    """
    shown = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise error(f"{what} {shown!r} does not exist: {missing}") from None
    except IsADirectoryError:
        raise error(f"{what} {shown!r} is a folder: {hint}") from None
    except OSError as exc:
        raise error(f"cannot read the {what} {shown!r}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise error(f"{what} {shown!r} is a folder: {hint}")
        if not stat.S_ISREG(mode):
            raise error(f"{what} {shown!r} is not a regular file (a FIFO, device or socket): {hint}")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            raw = handle.read()
    except OSError as exc:
        raise error(f"cannot read the {what} {shown!r}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{what} {shown!r} is not JSON (not UTF-8 text): {hint}") from None
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


# ----------------------------------------------------------------------------
# Termination signals during a write


class _Terminated(BaseException):
    """SIGTERM/SIGHUP arrived inside :func:`terminating`: unwind (cleaning up), then die of it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
_active = [False]  # a terminating() block is running (main thread only)


@contextlib.contextmanager
def terminating() -> Iterator[None]:
    """Run the block so that SIGTERM/SIGHUP unwind it (``finally`` and ``except`` clauses run) first.

    When the block ends because of such a signal, the previous handlers are
    put back and the signal is raised again: the process ends as it would
    have, only without leaving files behind. Off the main thread (where
    Python cannot set handlers) the block runs unchanged. Nested blocks share
    the outermost one's handlers.
    """
    if threading.current_thread() is not threading.main_thread() or _active[0]:
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise _Terminated(signum)

    previous = {}
    for number in _SIGNALS:
        try:
            previous[number] = signal.signal(number, handler)
        except (OSError, ValueError):  # pragma: no cover - a signal this platform will not let us catch
            pass
    _active[0] = True
    try:
        yield
    except _Terminated as exc:
        _active[0] = False
        for number, old in previous.items():
            signal.signal(number, old)
        previous.clear()
        signal.raise_signal(exc.signum)
        raise  # the previous handler returned: keep unwinding
    finally:
        _active[0] = False
        for number, old in previous.items():
            signal.signal(number, old)


# ----------------------------------------------------------------------------
# Writing


class NotRegularFile(OSError):
    """The path to write holds what is not a regular file (``kind``: a FIFO, a device, a socket, a folder):
    it is never replaced. Its text says what the path holds."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"it is not a regular file ({kind})")
        self.kind = kind


def _kind(mode: int) -> str | None:
    """What a file of ``mode`` is, where it is not a regular file (nor a symbolic link): ``a FIFO``..."""
    for test, kind in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return None


def not_a_file(path: str | os.PathLike[str], *, through_link: bool = False) -> str | None:
    """What ``path`` holds where a write must not replace it (``a FIFO``, ``a character device``, ``a
    socket``, ``a folder``), else None (a regular file, nothing, or a symbolic link, which a write
    replaces unless ``through_link``: then what it points to)."""
    try:
        info = os.stat(path) if through_link else os.lstat(path)
    except (OSError, ValueError):
        return None
    return _kind(info.st_mode)


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether ``a`` and ``b`` name one file: the same path once links are resolved, or the same inode."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def append_to_file(path: str | os.PathLike[str], text: str) -> None:
    """Append ``text`` (UTF-8; a lone surrogate as its escape) to the regular file ``path``, made when
    missing. A FIFO is never waited on (opened without blocking, then refused), a device or a socket never
    written to.

    Raises:
        NotRegularFile: ``path`` is a FIFO, a device, a socket or a folder.
        OSError: it cannot be written.
    """
    kind = not_a_file(path, through_link=True)
    if kind is not None:
        raise NotRegularFile(kind)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0), 0o666)
    try:
        kind = _kind(os.fstat(fd).st_mode)  # what was opened, should the path have changed meanwhile
        if kind is not None:
            raise NotRegularFile(kind)
        view = memoryview(text.encode("utf-8", errors="backslashreplace"))
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


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


def _temporary_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"^\.{re.escape(name)}\.(\d+)\.[0-9a-f]+\.tmp$")


def temporary_files(path: str | os.PathLike[str]) -> list[Path]:
    """The temporary files of writes to ``path`` present in its folder (of any process)."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    pattern = _temporary_pattern(target.name)
    try:
        return sorted(folder / n for n in os.listdir(folder) if pattern.match(n))
    except OSError:
        return []


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` may still run: this one, one that exists, or one that cannot be asked about
    (someone else's): only a process known to have ended is not."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError):
        return True  # someone else's process, or a pid we cannot ask about: leave its file alone
    return True


# ----------------------------------------------------------------------------
# Scratch folders: what a worker writes (XLA's dumps of a deviceless compile) lives in a folder its
# parent names and removes, so a worker killed or aborting in XLA leaves nothing behind

_SCRATCH = "fieldmem-xla-"
_SCRATCH_NAME = re.compile(rf"^{re.escape(_SCRATCH)}(\d+)-[0-9a-f]{{8}}$")


def scratch_folder() -> str:
    """A new scratch folder's path for this process's workers, in the temporary directory: not created
    (a worker creates it when it first needs it); ``fieldmem-xla-PID-XXXXXXXX``."""
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"{_SCRATCH}{os.getpid()}-{secrets.token_hex(4)}")


def remove_stale_scratch() -> list[str]:
    """Remove the scratch folders of fieldmem processes that are gone (killed before they could remove
    their own); the paths removed."""
    import shutil
    import tempfile

    folder = tempfile.gettempdir()
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    removed = []
    for name in names:
        found = _SCRATCH_NAME.match(name)
        if found is None or process_alive(int(found.group(1))):
            continue
        path = os.path.join(folder, name)
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            removed.append(path)
    return removed


def _remove_stale(target: Path) -> None:
    """Remove the temporary files that killed writers of ``target`` left (their process is gone)."""
    pattern = _temporary_pattern(target.name)
    for file in temporary_files(target):
        match = pattern.match(file.name)
        if match and not process_alive(int(match.group(1))):
            with contextlib.suppress(OSError):
                os.unlink(file)


def _temporary_name(folder: Path, target: Path) -> Path:
    return folder / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def _write_all(fd: int, data: bytes, mode: int) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    if hasattr(os, "fchmod"):  # not on Windows before Python 3.13
        os.fchmod(fd, mode)
    os.fsync(fd)


_UNNAMED: dict[int, bool] = {}  # st_dev -> whether O_TMPFILE + linkat worked there


def _write_unnamed(folder: Path, target: Path, data: bytes, mode: int) -> bool:
    """Linux: write into an ``O_TMPFILE`` file, name it, rename it. False where that is not supported.

    The file has no name while it is written, so a SIGKILL then leaves
    nothing; it is named (``linkat`` through ``/proc/self/fd``) just before
    the rename. Some file systems and sandboxes refuse one step or the other:
    then False, remembered per device, and the caller writes a named file.
    """
    flag = getattr(os, "O_TMPFILE", 0)
    if not flag or not os.path.isdir("/proc/self/fd"):
        return False
    try:
        device = os.stat(folder).st_dev
    except OSError:
        return False
    if not _UNNAMED.get(device, True):
        return False
    try:
        fd = os.open(folder, flag | os.O_WRONLY, 0o600)
    except OSError:  # a file system without O_TMPFILE (EOPNOTSUPP, EISDIR on old kernels)
        _UNNAMED[device] = False
        return False
    named: Path | None = None
    try:
        _write_all(fd, data, mode)
        named = _temporary_name(folder, target)
        try:
            os.link(f"/proc/self/fd/{fd}", named, follow_symlinks=True)  # linkat(AT_SYMLINK_FOLLOW)
        except OSError:  # EXDEV, EPERM, ENOENT: this system does not name an O_TMPFILE file this way
            named = None
            _UNNAMED[device] = False
            return False
        _UNNAMED[device] = True
        os.replace(named, target)
        named = None
    finally:
        os.close(fd)
        if named is not None:
            with contextlib.suppress(OSError):
                os.unlink(named)
    return True


def write_atomic(path: str | os.PathLike[str], text: str, *, through_link: bool = False) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename.

    A failure or an interruption (an exception, SIGTERM, SIGHUP, Ctrl-C)
    leaves the previous file untouched (same bytes, same permissions) and no
    temporary file behind; see the module docstring for SIGKILL.
    ``through_link``: when ``path`` is a symbolic link, replace the file it
    points to and keep the link (by default the link itself is replaced).

    Raises:
        NotRegularFile: ``path`` holds a FIFO, a device, a socket or a folder (never replaced, never
            waited on).
        OSError: the file cannot be written.
    """
    target = Path(path)
    if through_link and target.is_symlink():
        target = Path(os.path.realpath(target))
    kind = not_a_file(target)
    if kind is not None:
        raise NotRegularFile(kind)
    folder = target.parent if str(target.parent) else Path(".")
    mode = _mode_for(target)
    data = text.encode("utf-8")
    with terminating():
        _remove_stale(target)
        if _write_unnamed(folder, target, data, mode):
            return
        temporary = _temporary_name(folder, target)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
        try:
            try:
                _write_all(fd, data, mode)
            finally:
                os.close(fd)
            os.replace(temporary, target)
        except BaseException:  # Ctrl-C too: no temporary file is left beside the target
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise


# ----------------------------------------------------------------------------
# Locking


class LockTimeout(OSError):
    """The lock of a file was held by another process for longer than the caller would wait."""


def lock_path(path: str | os.PathLike[str]) -> Path:
    """The lock file of ``path``: ``.NAME.lock`` beside it."""
    target = Path(path)
    return target.with_name(f".{target.name}.lock")


@contextlib.contextmanager
def locked(path: str | os.PathLike[str], timeout: float, *, shared: bool = False) -> Iterator[None]:
    """Hold the exclusive lock of ``path`` for the block (other processes calling this wait).

    ``shared``: a shared lock, which other shared holders take too and an exclusive one waits for (held by
    the users of something an exclusive holder would remove). Where folders cannot be locked there is no
    shared lock file: the block then runs without one.

    The lock is ``flock`` on the folder holding ``path``: no file is created, so a process killed while
    it holds the lock leaves nothing behind (the kernel drops a dead process's ``flock``). Where a folder
    cannot be locked (``fcntl`` missing, a file system that refuses ``flock`` on a folder), a lock file
    ``.NAME.lock`` beside ``path`` is created exclusively and removed when the block ends; one whose
    process is gone is taken over.

    Raises:
        LockTimeout: another process held the lock for ``timeout`` seconds.
        OSError: the folder cannot be opened and the lock file cannot be created (a read-only folder).
    """
    deadline = time.monotonic() + timeout
    folder = Path(path).parent
    fd = _folder_fd(folder) if fcntl is not None else None
    if fd is None:
        if shared:
            yield
            return
        with _locked_exclusive(lock_path(path), deadline, timeout):
            yield
        return
    try:
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(f"another fieldmem held the lock on {str(folder)!r} for {timeout:g} s") from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # closing drops the flock


def _folder_fd(folder: Path) -> int | None:
    """An open descriptor of ``folder`` that ``flock`` accepts (tried once, released at once); None: none."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # does this file system lock folders at all?
    except BlockingIOError:
        return fd  # it does: another process holds it
    except OSError:  # NFS (flock emulated by byte-range locks on a read-only descriptor) and the like
        os.close(fd)
        return None
    fcntl.flock(fd, fcntl.LOCK_UN)
    return fd


@contextlib.contextmanager
def _locked_exclusive(file: Path, deadline: float, timeout: float) -> Iterator[None]:
    """The lock without ``fcntl``: create ``file`` exclusively, holding our pid; a dead holder's is taken over."""
    while True:
        try:
            fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                holder = int(file.read_text(encoding="ascii").strip() or "0")
            except (OSError, ValueError):
                holder = 0
            if holder and not process_alive(holder):
                with contextlib.suppress(OSError):
                    os.unlink(file)
                continue
            if time.monotonic() >= deadline:
                raise LockTimeout(f"another fieldmem held the lock {str(file)!r} for {timeout:g} s") from None
            time.sleep(0.02)
            continue
        try:
            os.write(fd, str(os.getpid()).encode("ascii"))
        finally:
            os.close(fd)
        break
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(file)
