"""Nothing lost, nothing falsely passed: the baseline and the output files under attack (issue 19).

Each test here failed on the code before it (``main`` at a2ba642) and names
the issue item it covers:

- item 1: an output naming the baseline, or two outputs naming one file, is refused before compiling;
- item 2: two processes saving into one baseline keep both targets (the read-merge-write is locked);
- item 3: a baseline's target names do not depend on the folder fieldmem runs from, and a
  baseline none of whose targets was checked fails the gate;
- item 5 (the save): a save killed at random moments (SIGTERM, SIGKILL) leaves the old baseline
  whole and no temporary file behind;
- item 10: comparing and saving are linear in the entries, and a FIFO at the baseline path is
  refused, never waited on;
- item 14: negative sizes are refused; a read-only baseline is not replaced; a symbolic link is
  written through.

The processes that save run a small script on hand-built reports (no jax), so
twenty kills take seconds; the CLI tests of items 1 and 3 compile a tiny
function once each.
"""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fieldmem.frontends.cli import app
from fieldmem.gate import baseline as baseline_module
from fieldmem.gate.baseline import (
    SCHEMA,
    BaselineEntry,
    BaselineError,
    compare_to_baseline,
    load_baseline,
    project_name,
    project_spec,
    save_baseline,
)
from fieldmem.model import files
from fieldmem.model.errors import OptionError
from fieldmem.request.build import CheckFlags, build_request
from fieldmem.request.config import Config
from fieldmem.request.tolerance import Tolerances

from factories import make_report, make_result

REPO = Path(files.__file__).resolve().parents[2]  # the fieldmem under test: the saving processes import it too
TESTS = Path(__file__).resolve().parents[1]
runner = CliRunner()


def run_report(*names: str, spec: str = "model.py"):  # type: ignore[no-untyped-def]
    """A passing cpu report of targets ``names`` (all from ``spec``)."""
    return make_report(tuple(make_result(name, target=spec) for name in names))


def names_in(path: Path) -> list[str]:
    return [entry["name"] for entry in json.loads(path.read_text())["entries"]]


def json_names(document: bytes) -> list[str]:
    return [entry["name"] for entry in json.loads(document)["entries"]]


def leftovers(folder: Path) -> list[str]:
    """Temporary and lock files of writes, anywhere in ``folder``."""
    return sorted(n for n in os.listdir(folder) if n.endswith((".tmp", ".lock")))


# ---- item 1: outputs that collide --------------------------------------------


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (
            dict(save_baseline="b.json", html_output="b.json"),
            "--html 'b.json' and --save-baseline 'b.json' name the same file: both write 'b.json'",
        ),
        (
            dict(baseline="b.json", output_format="json", output="b.json"),
            "--output 'b.json' and --baseline 'b.json' name the same file: "
            "--output would replace the baseline 'b.json'",
        ),
        (dict(output="x", html_output="x"), "--output 'x' and --html 'x' name the same file: both write 'x'"),
        (dict(output="x", html_output="./sub/../x"), "name the same file"),
        (dict(save_baseline="b.json", output="link.json"), "name the same file"),  # link.json -> b.json
        (dict(save_baseline="b.json", html_output="hard.json"), "name the same file"),  # a hard link
        (
            dict(output="r.json", html_output="r.json", backend="cpu,gpu"),
            "--output 'r.cpu.json' and --html 'r.cpu.json' name the same file",
        ),
        (  # the file a deviceless backend's report is written to, as emit names it
            dict(output="r.json", save_baseline="r.tpu-v5e.json", backend="cpu,tpu:v5e"),
            "--output 'r.tpu-v5e.json' and --save-baseline 'r.tpu-v5e.json' name the same file",
        ),
    ],
)
def test_outputs_naming_one_file_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: dict[str, str], expected: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "b.json").write_text("{}")
    (tmp_path / "link.json").symlink_to("b.json")
    os.link(tmp_path / "b.json", tmp_path / "hard.json")
    paths = {"baseline", "save_baseline", "output", "html_output"}
    given = {k: Path(v) if k in paths else v for k, v in flags.items()}
    with pytest.raises(OptionError) as caught:
        build_request(CheckFlags(targets=("m:f",), **given), Config())  # type: ignore[arg-type]
    assert expected in caught.value.message and "\n" not in caught.value.message


def test_reading_and_saving_one_baseline_is_allowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "b.json").write_text("{}")
    request = build_request(
        CheckFlags(targets=("m:f",), baseline=Path("b.json"), save_baseline=Path("b.json"), output=Path("r.json")),
        Config(),
    )
    assert request.baseline.save_to == Path("b.json")


@pytest.mark.parametrize(
    "arguments",
    [
        ["--save-baseline", "b.json", "--html", "b.json"],
        ["--baseline", "b.json", "-f", "json", "-o", "b.json"],
    ],
)
def test_the_cli_refuses_before_compiling_and_keeps_the_baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arguments: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text("raise SystemExit('the target was imported')\n")
    save_baseline(tmp_path / "b.json", run_report("model:step"))
    before = (tmp_path / "b.json").read_bytes()
    result = runner.invoke(app, ["check", "model.py:step", "--no-cache", *arguments])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "name the same file" in result.stderr
    assert "imported" not in result.output  # refused before the target was even loaded
    assert (tmp_path / "b.json").read_bytes() == before


# ---- item 2: two saves at once ------------------------------------------------

SLOW_DISK = 0.2  # seconds each rename takes in the saving processes: the window a kill or a race must hit

SAVER = """
import os, sys, time
sys.path[:0] = [{repo!r}, {tests!r}]
replace = os.replace
def slow_replace(source, destination):  # a slow disk: the temporary file exists a while before the rename
    time.sleep({slow})
    replace(source, destination)
os.replace = slow_replace
from factories import make_report, make_result
from fieldmem.gate.baseline import save_baseline
path, name = sys.argv[1], sys.argv[2]
report = make_report((make_result(name, target="model.py"),))
print("ready", flush=True)
start = float(sys.stdin.readline())
while time.time() < start:
    time.sleep(0.001)
save_baseline(path, report)
print("saved", flush=True)
"""


def saver(tmp_path: Path) -> Path:
    script = tmp_path / "saver.py"
    script.write_text(SAVER.format(repo=str(REPO), tests=str(TESTS), slow=SLOW_DISK))
    return script


def seed(path: Path, count: int) -> bytes:
    """A baseline of ``count`` targets, big enough that a save takes a while to read, merge and write."""
    save_baseline(path, run_report(*(f"seed:t{i:04d}" for i in range(count))))
    return path.read_bytes()


def start_savers(script: Path, path: Path, names: list[str], delay: float = 0.05) -> list[subprocess.Popen[str]]:
    """One process per name, each saving that target into ``path``; all released at one instant, ``delay``
    seconds after the last is ready."""
    processes = [
        subprocess.Popen(
            [sys.executable, str(script), str(path), name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for name in names
    ]
    for process in processes:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
    at = time.time() + delay
    for process in processes:
        assert process.stdin is not None
        process.stdin.write(f"{at!r}\n")
        process.stdin.flush()
    return processes


def test_two_concurrent_saves_keep_both_targets(tmp_path: Path) -> None:
    script = saver(tmp_path)
    for round_ in range(4):
        path = tmp_path / f"b{round_}.json"
        seed(path, 300)
        processes = start_savers(script, path, ["a:f", "b:f"])
        for process in processes:
            process.communicate(timeout=60)
            assert process.returncode == 0
        names = names_in(path)
        assert "a:f" in names and "b:f" in names, f"round {round_}: a save was lost"
        assert len(names) == 302
    assert leftovers(tmp_path) == []


def test_a_lock_held_too_long_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    seed(path, 1)
    before = path.read_bytes()
    with files.locked(path, 1.0), pytest.raises(BaselineError) as caught:
        save_baseline(path, run_report("a:f"), lock_timeout=0.2)
    assert "held the lock" in caught.value.message and "\n" not in caught.value.message
    assert path.read_bytes() == before
    assert leftovers(tmp_path) == []


def test_the_lock_without_fcntl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where fcntl is missing (Windows) an exclusive-create lock file serialises saves; a dead holder's is taken."""
    monkeypatch.setattr(files, "fcntl", None)
    path = tmp_path / "b.json"
    lock = files.lock_path(path)
    lock.write_text("999999999")  # a holder that no longer exists
    save_baseline(path, run_report("a:f"))
    assert names_in(path) == ["a:f"] and not lock.exists()
    with files.locked(path, 1.0), pytest.raises(BaselineError, match="held the lock"):
        save_baseline(path, run_report("b:f"), lock_timeout=0.1)
    save_baseline(path, run_report("b:f"))
    assert names_in(path) == ["a:f", "b:f"]


# ---- item 5: killing a save ---------------------------------------------------


def test_killing_saves_at_random_moments_loses_nothing(tmp_path: Path) -> None:
    """20 saves killed (SIGTERM, SIGKILL; half when a temporary file shows, half at a random moment):
    the baseline is always the old file or the whole new one, and no temporary or lock file stays."""
    script = saver(tmp_path)
    path = tmp_path / "b.json"
    old = seed(path, 400)
    started = time.monotonic()
    save_baseline(tmp_path / "probe.json", run_report("probe:f"))  # how long one save takes here
    seed(tmp_path / "probe.json", 400)
    took = time.monotonic() - started + SLOW_DISK
    (tmp_path / "probe.json").unlink()
    rng = random.Random(19)
    killed_inside = 0
    sigkilled: set[int] = set()
    for round_ in range(20):
        number = signal.SIGTERM if round_ % 4 < 2 else signal.SIGKILL
        (process,) = start_savers(script, path, [f"new:t{round_}"], delay=0)
        at = time.time()  # released now
        deadline = at + (rng.uniform(0, took) if round_ % 2 else took * 2)
        while time.time() < deadline and process.poll() is None:
            if round_ % 2 == 0 and any(n.endswith(".tmp") for n in os.listdir(tmp_path)):
                break  # targeted: a temporary file is being written
        if process.poll() is None:
            process.send_signal(number)
            killed_inside += 1
        process.communicate(timeout=60)
        now = path.read_bytes()
        if now != old:  # the save finished before the signal: the whole new baseline
            assert set(names_in(path)) == {*json_names(old), f"new:t{round_}"}
            assert load_baseline(path).schema == SCHEMA
            old = now
        if number == signal.SIGKILL:
            sigkilled.add(process.pid)
        for name in leftovers(tmp_path):  # only the files of processes SIGKILLed, which the next save removes
            assert any(f".{pid}." in name for pid in sigkilled), (round_, name)  # never a lock file
    assert killed_inside >= 10  # the test did kill saves, not finished processes
    save_baseline(path, run_report("last:f"))
    assert leftovers(tmp_path) == []
    assert "last:f" in names_in(path)


def test_sigterm_inside_a_write_removes_the_temporary_file(tmp_path: Path) -> None:
    """The handler of files.terminating(): the write unwinds, then the process dies of the signal."""
    script = tmp_path / "writer.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, signal, sys
            sys.path.insert(0, {str(REPO)!r})
            from fieldmem.model import files
            real = files._write_all
            def slow(fd, data, mode):
                real(fd, data[:10], mode)
                os.kill(os.getpid(), signal.SIGTERM)
                real(fd, data, mode)
            files._write_all = slow
            files.write_atomic(sys.argv[1], "new text")
            """
        )
    )
    target = tmp_path / "out.json"
    target.write_text("old text")
    done = subprocess.run([sys.executable, str(script), str(target)], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert target.read_text() == "old text"
    assert leftovers(tmp_path) == []


def test_a_dead_writers_temporary_file_is_removed_by_the_next_write(tmp_path: Path) -> None:
    target = tmp_path / "b.json"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".b.json.{int(dead.stdout)}.0badc0de.tmp"
    alive = tmp_path / f".b.json.{os.getppid()}.0badc0de.tmp"  # a live process's: left alone
    stale.write_text("half")
    alive.write_text("half")
    files.write_atomic(target, "whole")
    assert target.read_text() == "whole" and not stale.exists() and alive.exists()


# ---- item 3: where fieldmem runs from -------------------------------------------

MODEL = """
import jax.numpy as jnp
import numpy as np

def upd(u):
    return u {op}

def args():
    return (np.ones(256, np.float32),)
"""


@pytest.mark.compile
def test_a_baseline_saved_at_the_root_gates_from_a_subfolder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "proj"
    (project / "sub" / "deeper").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[tool.fieldmem]\nbaseline = "fieldmem-baseline.json"\n')
    model = project / "good.py"
    model.write_text(MODEL.format(op="+ 1"))
    monkeypatch.chdir(project)
    saved = runner.invoke(
        app, ["check", "good.py:upd", "--args", "args", "--no-cache", "--save-baseline", "fieldmem-baseline.json"]
    )
    assert saved.exit_code == 0, saved.output
    assert names_in(project / "fieldmem-baseline.json") == ["good.py:upd"]

    monkeypatch.chdir(project / "sub" / "deeper")
    same = runner.invoke(app, ["check", "../../good.py:upd", "--args", "args", "--no-cache"])
    assert same.exit_code == 0, same.output
    assert "0 regressions" in same.output and "new target" not in same.output

    model.write_text(MODEL.format(op="+ 1, u[::-1] * 2"))  # a second output: a copy, a bigger footprint
    sys.modules.pop("good", None)  # the CLI runs in this process: load the changed file
    worse = runner.invoke(app, ["check", "../../good.py:upd", "--args", "args", "--no-cache"])
    assert worse.exit_code == 1, worse.output
    assert "0 regressions" not in worse.output


def test_project_names_do_not_depend_on_the_working_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "good.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert project_name("pkg/good.py:upd", "pkg/good.py:upd", tmp_path) == "pkg/good.py:upd"
    monkeypatch.chdir(tmp_path / "pkg" / "sub")
    assert project_name("../good.py:upd", "../good.py:upd", tmp_path) == "pkg/good.py:upd"
    assert project_name("../good.py:upd", "../good.py", tmp_path) == "pkg/good.py:upd"  # a bare file spec
    assert project_name("pkg.model:update", "pkg.model:update", tmp_path) == "pkg.model:update"  # a module
    assert project_name("my case", "../good.py", tmp_path) == "my case"  # a case's own name


def test_one_name_per_target_however_it_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module, a file and ./file name one target alike (issue 30, item 3); an installed module keeps its name."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text("")
    (tmp_path / "models" / "train.py").write_text("")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "models", raising=False)
    written = [
        ("models.train:step", "models.train:step"),
        ("models/train.py:step", "models/train.py"),
        ("./models/train.py:step", "./models/train.py:step"),
    ]
    assert {project_name(name, spec, tmp_path) for name, spec in written} == {"models/train.py:step"}
    assert {project_spec(spec, tmp_path) for _, spec in written} == {"models/train.py:step", "models/train.py"}
    # a chain's step results and a registered case without a name of its own
    assert project_name("models.train:a,b[2:b]", "models.train", tmp_path) == "models/train.py:a,b[2:b]"
    assert project_name("my case", "models.train", tmp_path) == "my case"
    assert project_name("optax:sgd", "optax:sgd", tmp_path) == "optax:sgd"  # installed: its module names it
    monkeypatch.chdir(tmp_path / "sub")
    assert project_name("../models/train.py:step", "../models/train.py:step", tmp_path) == "models/train.py:step"


def test_a_module_named_baseline_entry_is_migrated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry keyed ``mymodels:rollout`` (before issue 30) matches ``mymodels.py:rollout``; the next save writes
    the new key and loses no entry."""
    (tmp_path / "mymodels.py").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "mymodels", raising=False)
    path = tmp_path / "b.json"
    save_baseline(path, run_report("ci:other", "mymodels.py:rollout", spec="mymodels.py"))
    document = json.loads(path.read_text())
    for entry in document["entries"]:
        if entry["name"] == "mymodels.py:rollout":
            entry.update(name="mymodels:rollout", target="mymodels:rollout")  # as fieldmem check wrote a module
    path.write_text(json.dumps(document))
    compared = compare_to_baseline(run_report("mymodels.py:rollout", spec="mymodels.py:rollout"), load_baseline(path))
    assert compared.exit_code == 0 and compared.baseline is not None, compared.baseline
    assert not any("new target" in note for note in compared.baseline.notes), compared.baseline.notes
    save_baseline(path, compared)
    assert sorted(names_in(path)) == ["ci:other", "mymodels.py:rollout"]
    assert [e["target"] for e in json.loads(path.read_text())["entries"]] == ["mymodels.py", "mymodels.py:rollout"]


def test_a_baseline_none_of_whose_targets_ran_fails() -> None:
    before = _baseline(make_report((make_result("ci:a", target="a.py"), make_result("ci:b", target="b.py"))))
    compared = compare_to_baseline(run_report("other:x", spec="other.py"), before, Tolerances())
    assert compared.exit_code == 1
    assert compared.baseline is not None
    (regression,) = compared.baseline.regressions
    assert regression.subject == "missing" and "matches none of this run's targets" in regression.message
    # one line names both sides; the new target and the entries not checked are not said again
    assert "names ci:a, ci:b on cpu, this run checked other:x" in regression.message, regression.message
    assert not compared.baseline.notes, compared.baseline.notes
    some = compare_to_baseline(run_report("ci:a", spec="a.py"), before, Tolerances())
    assert some.exit_code == 0 and some.baseline is not None
    assert "1 of the baseline's 2 targets on cpu not checked in this run, so not compared: ci:b" in some.baseline.notes


def test_a_version_1_baseline_is_read_and_migrated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/1 names were relative to the folder it was saved from: read relative to this one, said so, rewritten as /2."""
    (tmp_path / "proj" / "sub").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "proj" / "sub")
    path = tmp_path / "proj" / "b.json"
    save_baseline(path, run_report("../good.py:upd", spec="../good.py"), root=tmp_path / "proj")
    document = json.loads(path.read_text())
    document["schema"] = "fieldmem.baseline/1"
    document["entries"][0].update(name="../good.py:upd", target="../good.py")  # as saved from sub/
    path.write_text(json.dumps(document))
    compared = compare_to_baseline(
        run_report("../good.py:upd", spec="../good.py"), load_baseline(path), root=tmp_path / "proj"
    )
    assert compared.exit_code == 0 and compared.baseline is not None
    assert any("fieldmem.baseline/1" in note for note in compared.baseline.notes)
    assert not any("new target" in note for note in compared.baseline.notes)
    save_baseline(path, run_report("ci:other"), root=tmp_path / "proj")
    assert json.loads(path.read_text())["schema"] == SCHEMA
    assert sorted(names_in(path)) == ["ci:other", "good.py:upd"]


def _baseline(report):  # type: ignore[no-untyped-def]
    from fieldmem.gate.baseline import Baseline, entry_from_result

    return Baseline(
        path="fieldmem-baseline.json",
        fieldmem_version="0.1.0",
        jax_version="0.10.2",
        jaxlib_version="0.10.2",
        backend="cpu",
        platform_version="cpu",
        device_kinds=("cpu",),
        entries=tuple(entry_from_result(r, report) for r in report.results),
    )


# ---- item 10: linear, and no FIFO ------------------------------------------------


def _count_equalities(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    real = BaselineEntry.__eq__

    def counting(self: BaselineEntry, other: object) -> bool:
        calls[0] += 1
        return real(self, other)

    monkeypatch.setattr(BaselineEntry, "__eq__", counting)
    return calls


@pytest.mark.parametrize("count", [2_000, 16_000])
def test_comparing_16000_entries_is_linear(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """No entry is compared with every other (the quadratic `e not in here`): counted, at 2,000 and 16,000."""
    calls = _count_equalities(monkeypatch)
    results = [make_result(f"ci:t{i:05d}", target=f"t{i:05d}.py") for i in range(count)]
    before = _baseline(make_report(tuple(results)))
    started = time.monotonic()
    run = make_report((*results[: count // 2], make_result("ci:new", target="new.py")))
    compared = compare_to_baseline(run, before, Tolerances())
    took = time.monotonic() - started
    assert compared.exit_code == 0 and compared.baseline is not None
    assert calls[0] <= count, f"{calls[0]} entry comparisons for {count} entries"
    assert took < 60  # generous: minutes on the quadratic code; the count above is the real check
    (unchecked,) = [n for n in compared.baseline.notes if "not checked" in n]
    assert unchecked.endswith(f"and {count // 2 - 10} more") and len(unchecked) < 400  # one bounded line


def test_saving_into_16000_entries_is_linear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "b.json"
    save_baseline(path, run_report(*(f"ci:t{i:05d}" for i in range(16_000))))
    calls = _count_equalities(monkeypatch)
    saved = save_baseline(path, run_report("ci:t00001", "ci:new"))
    assert len(saved.kept) == 15_999 and calls[0] <= 16_000
    assert len(names_in(path)) == 16_001


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_at_the_baseline_path_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "b.json")
    with pytest.raises(BaselineError, match="is not a regular file"):
        load_baseline(tmp_path / "b.json")  # used to block forever in open()
    with pytest.raises(BaselineError, match="not a regular file"):
        save_baseline(tmp_path / "b.json", run_report("a:f"))
    for option in ("--baseline", "--save-baseline"):
        with pytest.raises(OptionError, match=f"{option} 'b.json' is not a regular file"):
            build_request(CheckFlags(targets=("m:f",), **{option[2:].replace("-", "_"): Path("b.json")}), Config())
    assert stat.S_ISFIFO(os.stat(tmp_path / "b.json").st_mode)


# ---- item 14: sizes, read-only, links -----------------------------------------


@pytest.mark.parametrize("value", [-(2**40), -1, 2**63, 10**4000], ids=["-1TiB", "-1", "2**63", "10**4000"])
def test_sizes_no_run_could_measure_are_refused(tmp_path: Path, value: int) -> None:
    path = tmp_path / "b.json"
    save_baseline(path, run_report("a:f"))
    document = json.loads(path.read_text())
    document["entries"][0]["variants"]["donated"]["memory"]["peak_bytes"] = value
    path.write_text(json.dumps(document))
    with pytest.raises(BaselineError) as caught:
        load_baseline(path)
    message = caught.value.message
    # negative: this module's check; 2**63 and more: the codec's own 64-bit check may say it first
    assert "variants.donated.memory.peak_bytes" in message
    assert "not a byte count" in message or (value > 0 and "64-bit integer" in message)
    assert len(message) < 400


def test_a_read_only_baseline_is_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    save_baseline(path, run_report("a:f"))
    path.chmod(0o444)
    before = path.read_bytes()
    with pytest.raises(BaselineError, match="it is read-only; make it writable"):
        save_baseline(path, run_report("b:f"))
    assert path.read_bytes() == before and stat.S_IMODE(path.stat().st_mode) == 0o444
    assert leftovers(tmp_path) == []


def test_a_symlinked_baseline_is_written_through(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    real = tmp_path / "shared" / "b.json"
    save_baseline(real, run_report("a:f"))
    link = tmp_path / "b.json"
    link.symlink_to(real)
    save_baseline(link, run_report("b:f"))
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert names_in(real) == ["a:f", "b:f"]
    assert leftovers(tmp_path) == [] and leftovers(tmp_path / "shared") == []


def test_a_save_killed_holding_the_lock_leaves_no_lock_file(tmp_path: Path) -> None:
    """Issue 29, item 6: SIGKILL while the lock is held (the worst moment) leaves no ``.NAME.lock``, and the
    next save takes the lock at once."""
    path = tmp_path / "b.json"
    save_baseline(path, run_report("a:f"))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from fieldmem.model import files\n"
            f"with files.locked({str(path)!r}, 5.0):\n    print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])),
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(BaselineError, match="held the lock"):  # it is held
            save_baseline(path, run_report("b:f"), lock_timeout=0.1)
        holder.kill()
        holder.wait()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    assert leftovers(tmp_path) == []
    save_baseline(path, run_report("b:f"), lock_timeout=0.5)
    assert names_in(path) == ["a:f", "b:f"]


def test_the_lock_is_beside_the_file_a_link_names(tmp_path: Path) -> None:
    """Two links to one baseline share its lock: saving through either waits for the other."""
    real = tmp_path / "b.json"
    save_baseline(real, run_report("a:f"))
    (tmp_path / "l.json").symlink_to(real)
    with files.locked(real, 1.0), pytest.raises(BaselineError, match="held the lock"):
        save_baseline(tmp_path / "l.json", run_report("b:f"), lock_timeout=0.1)


def test_the_module_constants() -> None:
    assert SCHEMA == "fieldmem.baseline/2" and baseline_module.LOCK_TIMEOUT >= 10


def test_the_saved_line_stays_one_short_line_for_a_huge_baseline() -> None:
    """200,000 kept entries are counted, not listed: the line names a few and says how many in all."""
    from fieldmem.gate.baseline import Baseline, SavedBaseline
    from fieldmem.render.baseline import render_saved

    kept = tuple(f"pkg.mod:step_{i}" for i in range(200_000))
    saved = SavedBaseline(
        Baseline("b.json", "0", "0", "0", "cpu", None, (), ()), written=("a:f",), kept=kept, pruned=kept[:3]
    )
    line = render_saved(saved)
    assert line.count("\n") == 1 and len(line) < 1000
    assert "200000 kept from earlier runs (pkg.mod:step_0, " in line and "(200000 in all)" in line
    assert "3 pruned (pkg.mod:step_0, pkg.mod:step_1, pkg.mod:step_2)" in line


def test_fields_a_newer_fieldmem_wrote_are_kept_or_said_to_be_dropped(tmp_path: Path) -> None:
    """Issue 29, item 7: saving into a baseline a newer fieldmem wrote dropped the fields it does not know,
    silently. An entry this run does not write again keeps them as written; one it writes again loses them,
    and the save says which."""
    from fieldmem.render.baseline import render_saved

    path = tmp_path / "b.json"
    save_baseline(path, run_report("kept:f", "again:f"))
    document = json.loads(path.read_text())
    for entry in document["entries"]:
        entry["flame"] = {"model.py:3": 4096}  # a field from the future
        entry["variants"]["donated"]["padding_bytes"] = 12
    document["written_by"] = "fieldmem 9"
    path.write_text(json.dumps(document))
    saved = save_baseline(path, run_report("again:f"))
    after = {e["name"]: e for e in json.loads(path.read_text())["entries"]}
    assert after["kept:f"]["flame"] == {"model.py:3": 4096}
    assert after["kept:f"]["variants"]["donated"]["padding_bytes"] == 12
    assert "flame" not in after["again:f"]
    assert sorted(saved.dropped) == ["again:f: flame", "again:f: variants.donated.padding_bytes", "written_by"]
    line = render_saved(saved)
    assert "3 fields a newer fieldmem wrote and this one does not know not kept" in line
    assert load_baseline(path).entries  # still a baseline this fieldmem reads
