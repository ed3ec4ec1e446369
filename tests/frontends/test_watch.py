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

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers_process import children

ROOT = Path(__file__).resolve().parents[2]

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
    """Save as most editors do: a new file renamed over the old one (a save in two writes is
    test_the_file_watch_waits_for_a_file_written_twice)."""
    temporary = path.with_name(f".{path.name}.saving")
    temporary.write_text(text)
    os.replace(temporary, path)


def _summary(err: list[str]) -> str:
    return next(line for line in err if "again in" in line)


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
        _write(module, text)
        os.utime(module, ns=(time.time_ns(), time.time_ns() + 10**9))
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
        assert "tiny.py:step: verdict not in place → in place" in shown
        assert "gone (its module" not in shown  # the failed load was no target
        assert "checked 1 target(s) again" in _summary(err) and "1 unchanged" in _summary(err)

        # the worker dies: the next save starts a new one, which checks the module's targets
        for child in children(session.process.pid):
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


HELPER_MODULE = """\
import jax.numpy as jnp
import fieldmem
from helpers import SCALE


def make():
    return (jnp.zeros((8, 8)),)


def scaled(u):
    return u * SCALE


def plain(u):
    return u + 1.0


fieldmem.case(scaled, args=make)
fieldmem.case(plain, args=make)
"""


@pytest.mark.compile
def test_watch_follows_a_local_module_the_target_imports(tmp_path: Path) -> None:
    (tmp_path / "helpers.py").write_text("SCALE = 2.0\n")
    (tmp_path / "model.py").write_text(HELPER_MODULE)
    session = _Session(tmp_path, "model.py", "-f", "json", "-o", "r.json")
    try:
        _, err = session.until("watching")
        assert "watching 2 file(s)" in err[-1]
        first = json.loads((tmp_path / "r.json").read_text())
        written = (tmp_path / "r.json").stat().st_mtime_ns
        _write(tmp_path / "helpers.py", "SCALE = 3.0\n")
        out, err = session.until("again in")
        again = json.loads((tmp_path / "r.json").read_text())  # -o is written again, with every target
        assert [r["name"] for r in again["results"]] == [r["name"] for r in first["results"]]
        assert (tmp_path / "r.json").stat().st_mtime_ns != written
        assert any("helpers.py changed" in line for line in err)
        assert "checked 1 target(s) again" in _summary(err) and "1 unchanged" in _summary(err)
        assert any(line.startswith("model.py:scaled") for line in out)
        assert not any(line.startswith("model.py:plain") for line in out)

        # a case no longer registered is gone
        _write(tmp_path / "model.py", HELPER_MODULE.replace("fieldmem.case(plain, args=make)\n", ""))
        out, err = session.until("again in")
        assert "  model.py:plain: gone (its module no longer has it)" in out
        assert "checked 0 target(s) again" in _summary(err) and "1 unchanged" in _summary(err)
    finally:
        session.stop()


# ----------------------------------------------------------------------------
# The pieces: options, the file watch, reloading, fingerprints


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--run"], "--run would run your code"),
        (["--probe"], "--probe would run your code"),
        (["--save-baseline", "b.json"], "--save-baseline records one finished run"),
        (["--no-isolate"], "drop --no-isolate"),
        (["--format", "json"], "--format json needs -o FILE"),
    ],
)
def test_watch_refuses_what_makes_no_sense_with_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, extra: list[str], words: str
) -> None:
    from fieldmem.frontends.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text("def f(x):\n    return x\n")
    assert main(["check", "m.py:f", "--watch", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fieldmem: error: --") and words in err[0], err


def test_watch_writes_json_to_a_file(tmp_path: Path) -> None:
    from fieldmem.request.build import CheckFlags, build_request
    from fieldmem.request.config import Config

    flags = CheckFlags(targets=("m.py:f",), watch=True, output_format="json", output=tmp_path / "r.json")
    assert build_request(flags, Config()).watch


def test_the_file_watch_sees_new_bytes_only(tmp_path: Path) -> None:
    from fieldmem.frontends.watch import FileWatch

    path = tmp_path / "m.py"
    path.write_text("A = 1\n")
    files = FileWatch([str(path)])
    assert files.edited() == []
    path.write_text("A = 1\n")  # the same bytes, a new modification time
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert files.edited() == []
    path.write_text("A = 2\n")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    assert files.edited() == [str(path)]
    assert files.edited() == []
    path.unlink()
    assert files.edited() == [str(path)]


def test_the_file_watch_waits_for_a_file_written_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fieldmem.frontends import watch

    path = tmp_path / "m.py"
    path.write_text("A = 1\n")
    files = watch.FileWatch([str(path)])
    writes = iter(["A = 2\nB = 3\n"])  # the editor's second write comes while the first settles
    waited: list[float] = []

    def sleep(seconds: float) -> None:
        waited.append(seconds)
        text = next(writes, None)
        if text is not None:
            path.write_text(text)
            os.utime(path, ns=(time.time_ns(), time.time_ns() + 3 * 10**9))

    path.write_text("A = 2\n")  # the first, partial write
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    monkeypatch.setattr(watch.time, "sleep", sleep)
    assert files.edited() == [str(path)]
    assert waited == [watch.SETTLE, watch.SETTLE]  # it waited again after the second write
    assert files.edited() == []  # read once, in its final form
    assert path.read_text() == "A = 2\nB = 3\n"


REGISTERING = """\
import fieldmem


def a(x):
    return x + {n}


def b(x):
    return x * 2


fieldmem.case(a)
fieldmem.case(b)
"""


def test_a_reloaded_module_registers_its_cases_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fieldmem.request.registry import registered_cases
    from fieldmem.request.target import TargetOptions, resolve_target
    from fieldmem.worker.user_modules import forget, spec_files

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "registering_mod.py"
    path.write_text(REGISTERING.format(n=1))
    try:
        first = resolve_target("registering_mod.py", TargetOptions())
        assert [t.name for t in first] == ["registering_mod.py:a", "registering_mod.py:b"]
        assert spec_files("registering_mod.py") == [os.path.realpath(path)]
        path.write_text(REGISTERING.format(n=2))
        assert forget([str(path)]) == ["registering_mod"]
        again = resolve_target("registering_mod.py", TargetOptions())
        assert [t.name for t in again] == [t.name for t in first]
        assert len(registered_cases("registering_mod")) == 2
        assert again[0].function is not first[0].function and again[0].function(1) == 3
    finally:
        sys.modules.pop("registering_mod", None)


FINGERPRINTED = """\
import functools
import jax
import jax.numpy as jnp
import fieldmem

SCALE = {scale}


def _helper(x):
    return x * SCALE


@functools.partial(jax.jit, donate_argnums={donate})
def jitted(u):
    return _helper(u) + 1.0


def alone(u):
    return u - {alone}


fieldmem.case(jitted, args=lambda: (jnp.zeros((4,)),))
fieldmem.case(alone, args=lambda: (jnp.zeros((4,)),))
"""


def _prints(tmp_path: Path, name: str, **values: object) -> dict[str, str | None]:
    from fieldmem.request.target import TargetOptions, resolve_target
    from fieldmem.worker.fingerprint import target_fingerprint
    from fieldmem.worker.user_modules import forget

    path = tmp_path / f"{name}.py"
    settings = {"scale": 2.0, "donate": 0, "alone": 1.0, **values}
    path.write_text(FINGERPRINTED.format(**settings))
    forget([str(path)])
    targets = resolve_target(f"{name}.py", TargetOptions())
    return {t.name.split(":")[1]: target_fingerprint(t) for t in targets}


def test_a_fingerprint_changes_with_what_the_check_depends_on_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        base = _prints(tmp_path, "fp_mod")
        assert all(base.values())
        assert _prints(tmp_path, "fp_mod") == base  # loaded again, unchanged: the same
        scaled = _prints(tmp_path, "fp_mod", scale=3.0)  # a global the jitted function reads through a helper
        assert scaled["jitted"] != base["jitted"] and scaled["alone"] == base["alone"]
        donated = _prints(tmp_path, "fp_mod", donate="()")  # the jit's own options
        assert donated["jitted"] != base["jitted"] and donated["alone"] == base["alone"]
        alone = _prints(tmp_path, "fp_mod", alone=2.0)
        assert alone["alone"] != base["alone"] and alone["jitted"] == base["jitted"]
    finally:
        sys.modules.pop("fp_mod", None)


def test_a_fingerprint_it_cannot_vouch_for_is_none() -> None:
    import io

    from fieldmem.worker.fingerprint import target_fingerprint

    thing = io.StringIO()  # a library's object, of no known kind

    def uses(x: object) -> object:
        return thing

    def computes(x: object) -> object:
        return globals()["thing"]

    assert target_fingerprint(uses) is None
    assert target_fingerprint(computes) is None


class _Settings:
    def __init__(self, rate: float) -> None:
        self.rate = rate


def test_an_object_of_the_users_own_class_is_hashed_by_its_attributes() -> None:
    from fieldmem.worker.fingerprint import target_fingerprint

    def step(settings: _Settings) -> object:
        return lambda x: x * settings.rate

    first, same, other = _Settings(0.5), _Settings(0.5), _Settings(0.25)
    assert target_fingerprint((step, first)) == target_fingerprint((step, same)) is not None
    assert target_fingerprint((step, other)) != target_fingerprint((step, first))


# ----------------------------------------------------------------------------
# No false pass (issue 29, item 1): watch never ends 0 on a state a fresh check fails

GUARDED = """\
import jax.numpy as jnp
import fieldmem


def make():
    return (jnp.zeros((16, 16)),)


def update(u):
    return u.at[0].set(1.0)


fieldmem.case(update, args=make, donate=(0,), expect="in-place")
"""


def _fresh_check(folder: Path, *args: str) -> int:
    return subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", *args, "--no-cache"],
        cwd=folder,
        env=_env(folder),
        capture_output=True,
        text=True,
        timeout=300,
    ).returncode


@pytest.mark.compile
def test_watch_forgets_cases_a_module_no_longer_registers(tmp_path: Path) -> None:
    module = tmp_path / "guarded.py"
    module.write_text(GUARDED)
    session = _Session(tmp_path, "guarded.py")
    try:
        session.until("watching")
        # the case line removed, and the function no longer in place: a fresh check fails (no case)
        edited = GUARDED.replace('fieldmem.case(update, args=make, donate=(0,), expect="in-place")\n', "")
        _write(module, edited.replace("u.at[0].set(1.0)", "u.T.at[0].set(1.0)"))
        out, err = session.until("again in")
        errors = [line for line in err if line.startswith("fieldmem: error:")]
        assert len(errors) == 1 and "registers no fieldmem.case" in errors[0], err
        assert "1 unchanged" not in _summary(err)
        assert not any("gone (its module" in line for line in out)
        session.process.send_signal(signal.SIGINT)
        code = session.process.wait(timeout=30)
    finally:
        session.stop()
    assert code == _fresh_check(tmp_path, "guarded.py") == 2


@pytest.mark.compile
def test_watch_reports_a_worker_that_ends_at_import_as_its_death(tmp_path: Path) -> None:
    module = tmp_path / "guarded.py"
    module.write_text(GUARDED)
    session = _Session(tmp_path, "guarded.py")
    try:
        session.until("watching")
        _write(module, "import os\nos._exit(0)\n" + GUARDED)
        out, err = session.until("again in")
        errors = [line for line in err if line.startswith("fieldmem: error:")]
        assert len(errors) == 1 and "worker process" in errors[0] and "exit" in errors[0], err
        assert not any("gone (its module" in line for line in out), out
        assert not any("Traceback" in line for line in err)
        session.process.send_signal(signal.SIGINT)
        code = session.process.wait(timeout=30)
    finally:
        session.stop()
    assert code == _fresh_check(tmp_path, "guarded.py") == 2


def test_a_long_change_line_wraps_under_itself() -> None:
    """A change line wider than the terminal wraps at words, each continuation two columns further in than
    the line (as the report's own lines wrap); user text is shown as fieldmem shows it."""
    from fieldmem.render import RenderOptions
    from fieldmem.render.table import render_lines

    long = "model.py:step: new donated copy [parameter] of u at model.py:10 (256.0 KiB)"
    text = render_lines(
        [long, "model.py:relax: no change since its last check", "bad\x1b[31m: gone"], RenderOptions(width=40)
    )
    lines = text.splitlines()
    assert lines[0] == "  model.py:step: new donated copy"
    assert all(line.startswith("    ") and len(line) <= 40 for line in lines[1:3]), lines
    assert " ".join(line.strip() for line in lines[:3]) == long
    assert lines[3:5] == ["  model.py:relax: no change since its", "    last check"]  # 40 columns: it wraps too
    assert "\x1b" not in text and "bad\\x1b[31m: gone" in text
