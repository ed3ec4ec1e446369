"""The worker's answers pipe: each event written whole, holding the GIL (fieldmem.worker.main._Answers)."""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from fieldmem.worker import main as worker_main
from fieldmem.worker.protocol import write_event


def _pipe() -> tuple[int, int]:
    read, write = os.pipe()
    return read, write


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.skipif(not sys.platform.startswith(("linux", "darwin")), reason="libc's write is POSIX")
def test_libc_write_keeps_the_gil() -> None:
    # a write through ctypes.CDLL lets go of the GIL, as os.write does: only PyDLL's functions hold it
    write = worker_main._WRITE
    assert write is not None
    assert type(write)._flags_ & ctypes._FUNCFLAG_PYTHONAPI  # type: ignore[attr-defined]


def test_an_event_arrives_whole_on_the_pipe() -> None:
    read, write = _pipe()
    answers = worker_main._Answers(write)
    text = "é" * 10_000  # past a pipe's atomic write, and not ASCII
    write_event(answers, "plain", encoded={"reading": f'"{text}"'}, b=0)
    os.close(write)
    assert _read_all(read) == ('{"e":"plain","b":0,"reading":"' + text + '"}\n').encode()
    os.close(read)


def test_a_write_cut_short_or_interrupted_goes_on_by_os_write() -> None:
    data = b"x" * 5000 + b"\n"

    def short(fd: int, chunk: bytes, size: int) -> int:  # libc wrote a part, then a signal came
        return os.write(fd, chunk[:1000])

    def interrupted(fd: int, chunk: bytes, size: int) -> int:
        ctypes.set_errno(errno.EINTR)
        return -1

    for write in (short, interrupted):
        read, end = _pipe()
        worker_main._write_holding_gil(end, data, write)
        os.close(end)
        assert _read_all(read) == data
        os.close(read)


def test_a_write_refused_raises_and_the_answers_say_the_pipe_is_lost() -> None:
    def refused(fd: int, chunk: bytes, size: int) -> int:
        ctypes.set_errno(errno.EBADF)
        return -1

    with pytest.raises(OSError, match=os.strerror(errno.EBADF)) as raised:
        worker_main._write_holding_gil(1, b"x\n", refused)
    assert raised.value.errno == errno.EBADF
    # the parent gone: its end of the pipe closed (Python ignores SIGPIPE: libc's write says EPIPE); a descriptor
    # the user's code closed is held end to end (tests/render/test_hostile_names.py, os.closerange)
    read, write = _pipe()
    os.close(read)
    with pytest.raises(worker_main._PipeLost):
        worker_main._Answers(write).write("line\n")
    os.close(write)


def test_a_write_larger_than_a_pipe_lets_go_of_the_gil() -> None:
    """An answer past a pipe's capacity waits for the parent to read it: by os.write, not holding the GIL."""
    called: list[int] = []

    def held(fd: int, chunk: bytes, size: int) -> int:
        called.append(size)
        return os.write(fd, chunk)

    read, end = _pipe()
    small, large = b"s" * 100 + b"\n", b"l" * (worker_main._HOLD_LIMIT + 1)
    worker_main._write_holding_gil(end, small, held)
    received = os.read(read, 1 << 16)
    with ThreadPoolExecutor(1) as reader:  # the pipe drained while the large write waits
        drained = reader.submit(_read_all, read)
        worker_main._write_holding_gil(end, large, held)
        os.close(end)
        assert received + drained.result(timeout=10) == small + large
    assert called == [len(small)]
    os.close(read)
