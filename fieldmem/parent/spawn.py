"""Starting the worker process, with nothing but the standard library: the ``fieldmem`` command starts
its worker (:func:`prestart`) before it even loads its command-line libraries.

:mod:`fieldmem.parent.isolate` supervises the worker this starts.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Sequence

__all__ = [
    "Interpreter",
    "Spawned",
    "discard_prestarted",
    "end_group",
    "prestart",
    "prestart_for",
    "spawn",
    "take_prestarted",
]


@dataclasses.dataclass(frozen=True)
class Interpreter:
    """Another Python to run workers under (another venv, with another jax): ``python`` its executable,
    ``environ`` what its workers' environment adds to this process's (``PYTHONPATH`` with the folder of
    fieldmem's own package, so that ``fieldmem.driver`` imports there), ``label`` how reports name it
    (``jax 0.9.2``)."""

    python: str
    environ: tuple[tuple[str, str], ...] = ()
    label: str = ""
    # what to do when it cannot run a worker (starts no program, has no working jax): one sentence
    remedy: str = ""
    # folders its workers look in last, for what its installation lacks (the pytest a test module imports)
    fallback_path: tuple[str, ...] = ()
    # the cached environment it belongs to (its folder), held in use while its workers run; "" for none
    env_folder: str = ""


@dataclasses.dataclass(frozen=True)
class Spawned:
    """A worker process, and the read end of the pipe it answers on."""

    process: subprocess.Popen[bytes]
    answers: int


def spawn(interpreter: Interpreter | None = None) -> Spawned:
    """Start a worker (under ``interpreter``, else this Python). It waits for its request on stdin: it takes
    its environment, working directory and ``sys.path`` from it, not from the moment it started."""
    answers, answer_end = os.pipe()
    python = interpreter.python if interpreter is not None else sys.executable
    environ = {**os.environ, **dict(interpreter.environ)} if interpreter is not None else os.environ.copy()
    try:
        process = subprocess.Popen(
            [python, "-m", "fieldmem.worker.main", str(answer_end), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(answer_end,),
            env=environ,
            # a process group of its own: what the user's code starts in it ends with it (end_group)
            start_new_session=os.name == "posix",
        )
    except BaseException:  # Ctrl-C too: no pipe end is left open
        os.close(answers)
        raise
    finally:
        os.close(answer_end)
    return Spawned(process, answers)


_prestarted: Spawned | None = None


def prestart() -> None:
    """Start the first worker now, before the command line is even parsed (``fieldmem check``).

    The worker loads numpy and jaxlib while it waits (:func:`fieldmem.worker.main.main`),
    which takes longer than this process takes to parse its options, read its
    configuration and the baseline: that start-up runs side by side instead of
    one after the other. The first :func:`supervise` uses it; where none does
    (a usage error, ``--no-isolate``), :func:`fieldmem.frontends.cli.main` ends it
    (:func:`discard_prestarted`), and at the latest it ends with this process
    (its stdin ends; on Linux the kernel kills it too).
    """
    global _prestarted
    if _prestarted is None:
        try:
            _prestarted = spawn()
        except OSError:  # it is only a head start: a worker starts again when one is needed
            _prestarted = None


def end_group(process: subprocess.Popen[bytes]) -> None:
    """Kill a worker and every process still in its group (a child its target started and left running);
    the worker is waited for."""
    if os.name == "posix":
        import signal

        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:  # the group is empty (or was never ours)
            pass
    if process.poll() is None:
        process.kill()
    process.wait()


def _close(spawned: Spawned) -> None:
    os.close(spawned.answers)
    for stream in (spawned.process.stdin, spawned.process.stdout):
        if stream is not None:
            stream.close()


def take_prestarted() -> Spawned | None:
    """The worker :func:`prestart` started, if it is still alive (it can be taken once)."""
    global _prestarted
    spawned, _prestarted = _prestarted, None
    if spawned is not None and spawned.process.poll() is not None:
        _close(spawned)
        return None
    return spawned


def discard_prestarted() -> None:
    """End the worker :func:`prestart` started, where nothing took it (a usage error, ``--no-isolate``):
    at once, and its pipes closed, rather than when this process ends (a caller of
    :func:`fieldmem.frontends.cli.main` in its own process, such as a test, goes on)."""
    spawned = take_prestarted()
    if spawned is not None:
        end_group(spawned.process)
        _close(spawned)


def prestart_for(argv: Sequence[str]) -> None:
    """:func:`prestart` for a ``fieldmem`` command line that checks in a worker (``check``, isolated, or
    ``fit``; not asking for help)."""
    if list(argv[:1]) not in (["check"], ["fit"]) or any(a in ("--no-isolate", "--help", "-h") for a in argv):
        return
    prestart()
