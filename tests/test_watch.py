"""``fieldmem check --watch`` (issue 17, item 3): after the check, each save checks again what changed.

The real command runs in a subprocess on a tiny module in a temporary folder,
and the test edits the module as a user would: the first report is the one
``fieldmem check`` prints; dropping a donation shows the alias lost and the
copy that appeared; an edit of one function checks only that function; a
save of the same bytes does nothing; a syntax error is one line and the
loop goes on; a worker that dies is replaced; Ctrl-C ends it cleanly. The
pieces are tested on their own too: the file watch, the fingerprint and the
registry on reload, and the options --watch refuses.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

MODULE = """\
import jax.numpy as jnp
import fieldmem


def make():
    return (jnp.zeros((16, 16)), jnp.ones((16,)))


def step(u, row):
    return u.at[0].set(row)


def other(u, row):
    return u * 2.0 + row


fieldmem.case(step, args=make, donate=(0,))
fieldmem.case(other, args=make, donate=(0,))
"""


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ, COLUMNS="200", TMPDIR=str(tmp), JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    env.pop("FORCE_COLOR", None)
    return env


class _Session:
    """A ``fieldmem check --watch`` process, its stdout and stderr read line by line as they come."""

    def __init__(self, folder: Path, *args: str) -> None:
        temp = folder / "tmp"
        temp.mkdir(exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "fieldmem", "check", *args, "--watch", "--no-cache"],
            cwd=folder,
            env=_env(temp),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[tuple[str, str]] = queue.Queue()
        self.out: list[str] = []
        self.err: list[str] = []
        self.readers = [
            threading.Thread(target=self._read, args=(name, stream), daemon=True)
            for name, stream in (("out", self.process.stdout), ("err", self.process.stderr))
        ]
        for thread in self.readers:
            thread.start()

    def _read(self, name: str, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.put((name, line.rstrip("\n")))

    def until(self, marker: str, timeout: float = 120) -> tuple[list[str], list[str]]:
        """The stdout and stderr lines up to the stderr line containing ``marker``."""
        out: list[str] = []
        err: list[str] = []
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {marker!r} within {timeout} s; stderr: {err}; stdout: {out}")
            try:
                name, line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            (out if name == "out" else err).append(line)
            (self.out if name == "out" else self.err).append(line)
            if name == "err" and marker in line:
                for name, line in self.quiet(0.2):  # what the other stream still had
                    (out if name == "out" else err).append(line)
                return out, err

    def quiet(self, seconds: float) -> list[tuple[str, str]]:
        """What the process printed during ``seconds``."""
        got = []
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            try:
                name, line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            got.append((name, line))
            (self.out if name == "out" else self.err).append(line)
        return got

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for thread in self.readers:
            thread.join(timeout=5)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def _write(path: Path, text: str) -> None:
    """Save as an editor does, in two writes (the first one partial)."""
    with open(path, "w") as handle:
        handle.write(text[: len(text) // 2])
        handle.flush()
    time.sleep(0.01)
    path.write_text(text)


def _summary(err: list[str]) -> str:
    return next(line for line in err if "again in" in line)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


@pytest.mark.compile
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_watch_checks_again_only_what_an_edit_changed(tmp_path: Path) -> None:
    module = tmp_path / "tiny.py"
    module.write_text(MODULE)
    session = _Session(tmp_path, "tiny.py")
    try:
        out, err = session.until("watching")
        first = "\n".join(out)
        # the first report is the one fieldmem check prints: both targets, in place with donation
        assert "tiny.py:step" in first and "tiny.py:other" in first
        assert first.count("in place") >= 2 and "not in place" not in first
        assert not any("Traceback" in line for line in err)

        # dropping step's donation: the copy appears and the alias is lost; other is not checked again
        text = MODULE.replace(
            "fieldmem.case(step, args=make, donate=(0,))", "fieldmem.case(step, args=make, donate=())"
        )
        _write(module, text)
        out, err = session.until("again in")
        shown = "\n".join(out)
        assert "tiny.py:step: alias lost: u → out" in shown
        assert "tiny.py:step: new donated copy [parameter] of u at tiny.py:10" in shown
        assert "not in place" in shown and "tiny.py:other" not in shown
        assert "checked 1 target(s) again" in _summary(err) and "1 unchanged" in _summary(
            err
        )  # the registry is not doubled

        # an edit of the other function checks only it
        text = text.replace("u * 2.0 + row", "u * 3.0 + row")
        _write(module, text)
        out, err = session.until("again in")
        assert any(line.startswith("tiny.py:other") for line in out)
        assert not any(line.startswith("tiny.py:step") for line in out)
        assert "  tiny.py:other: no change since its last check" in out
        assert "checked 1 target(s) again" in _summary(err) and "1 unchanged" in _summary(err)

        # the same bytes saved again: nothing happens
        module.write_text(text)
        os.utime(module, None)
        assert session.quiet(1.0) == []

        # a syntax error: one line for the target, and the loop goes on
        _write(module, text.replace("def other(u, row):", "def other(u, row)"))
        out, err = session.until("again in")
        errors = [line for line in err if line.startswith("fieldmem: error:")]
        assert len(errors) == 1 and "SyntaxError" in errors[0], err
        assert not any("Traceback" in line for line in err)

        # fixed (and step donated again): step is checked, its alias is back
        fixed = text.replace("donate=())", "donate=(0,))")
        _write(module, fixed)
        out, err = session.until("again in")
        shown = "\n".join(out)
        assert "tiny.py:step: new alias: u → out" in shown
        assert "checked 1 target(s) again" in _summary(err) and "1 unchanged" in _summary(err)

        # the worker dies: the next save starts a new one, which checks the module's targets
        for child in _children(session.process.pid):
            os.kill(child, signal.SIGKILL)
        time.sleep(0.3)
        _write(module, fixed.replace("u * 3.0 + row", "u * 4.0 + row"))
        out, err = session.until("again in")
        assert any("a new one was started" in line for line in err), err
        assert "checked 2 target(s) again" in _summary(err)

        # Ctrl-C: a clean end, the exit code of the targets as last checked (all pass: 0)
        session.process.send_signal(signal.SIGINT)
        assert session.process.wait(timeout=30) == 0
        session.quiet(0.5)
        rest = session.err + [line for name, line in session.quiet(0.2) if name == "err"]
        assert not any("Traceback" in line for line in rest), rest
        assert any("watch stopped" in line for line in rest), rest
    finally:
        session.stop()
