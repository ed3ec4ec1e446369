"""Which libraries built on jax a report names: installed distributions read as files, no compile.

``fieldmem.driver.backends.imported_libraries`` names each imported distribution that requires jax, with
its version; these tests lay out distributions of their own on ``sys.path`` and hold each rule.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest

from fieldmem.driver.backends import imported_libraries, read_libraries_ahead


def _dist(
    where: Path, name: str, version: str, requires: list[str], top: list[str] | None, record: list[str] = ()
) -> None:
    info = where / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n\nA description.\n")
    if top is not None:
        (info / "top_level.txt").write_text("\n".join(top) + "\n")
    (info / "RECORD").write_text("".join(f"{path},,\n" for path in record))


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    monkeypatch.setattr(sys, "path", [str(first), str(second)])
    for module in ("jaxlike_nn", "jaxlike_opt", "plainlib", "extra_only", "recorded", "cudaplug", "twice"):
        monkeypatch.setitem(sys.modules, module, types.ModuleType(module))
    monkeypatch.setitem(sys.modules, "recorded.sub", types.ModuleType("recorded.sub"))
    return first, second


def test_an_imported_distribution_that_requires_jax_is_named_with_its_version(site: tuple[Path, Path]) -> None:
    first, second = site
    _dist(first, "Jaxlike-NN", "1.2.3", ["jax>=0.4", "numpy"], ["jaxlike_nn"])
    _dist(first, "jaxlike_opt", "0.9", ['jax (>=0.4.20) ; python_version >= "3.10"'], ["jaxlike_opt"])
    _dist(first, "not-imported", "1.0", ["jax"], ["nobody_imports_this"])
    _dist(first, "plainlib", "2.0", ["numpy"], ["plainlib"])
    _dist(first, "extra-only", "3.0", ['jax ; extra == "jax"'], ["extra_only"])
    _dist(first, "jax-cudaplug", "4.0", ["jax"], ["cudaplug"])
    _dist(first, "jaxlibish", "5.0", ["jaxlib"], ["plainlib"])
    _dist(
        first,
        "recorded",
        "6.0",
        ["jax"],
        None,
        ["recorded/__init__.py", "recorded/sub.py", "recorded-6.0.dist-info/RECORD"],
    )
    _dist(first, "twice", "7.0", ["jax"], ["twice"])
    _dist(second, "twice", "8.0", ["jax"], ["twice"])  # shadowed: the first on sys.path is the one imported

    assert imported_libraries() == {
        "jaxlike-nn": "1.2.3",
        "jaxlike-opt": "0.9",
        "recorded": "6.0",
        "twice": "7.0",
    }


def test_a_distribution_without_readable_metadata_is_left_out(site: tuple[Path, Path]) -> None:
    first, _ = site
    _dist(first, "jaxlike_nn", "1.0", ["jax"], ["jaxlike_nn"])
    broken = first / "broken-1.0.dist-info"
    broken.mkdir()
    (broken / "METADATA").write_bytes(b"\xff\xfe not text")

    assert imported_libraries() == {"jaxlike-nn": "1.0"}


def test_a_folder_is_read_once_while_unchanged_and_again_once_changed(
    site: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from importlib import metadata

    first, second = site
    _dist(first, "jaxlike_nn", "1.0", ["jax"], ["jaxlike_nn"])
    os.utime(second, ns=(0, 0))  # last changed long ago: a distribution installed below changes it for certain
    reads: list[tuple[str, ...]] = []
    original = metadata.distributions

    def counted(**kwargs: object):  # type: ignore[no-untyped-def]
        reads.append(tuple(kwargs.get("path", ())))  # type: ignore[arg-type]
        return original(**kwargs)

    monkeypatch.setattr(metadata, "distributions", counted)
    read_libraries_ahead()  # a worker waiting for its request
    assert sorted(reads) == sorted([(str(first),), (str(second),)])
    assert imported_libraries() == {"jaxlike-nn": "1.0"}
    assert len(reads) == 2  # neither folder read again
    _dist(second, "jaxlike_opt", "2.0", ["jax"], ["jaxlike_opt"])  # installed since: the folder changed
    assert imported_libraries() == {"jaxlike-nn": "1.0", "jaxlike-opt": "2.0"}
    assert reads[2:] == [(str(second),)]


@pytest.mark.usefixtures("site")
def test_a_folder_the_request_adds_and_the_working_directory_are_read_at_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read_libraries_ahead()
    users = tmp_path / "users"
    _dist(users, "jaxlike_opt", "3.0", ["jax"], ["jaxlike_opt"])
    here = tmp_path / "here"
    _dist(here, "jaxlike_nn", "4.0", ["jax"], ["jaxlike_nn"])
    monkeypatch.chdir(here)
    monkeypatch.setattr(sys, "path", ["", str(users), *sys.path])  # the parent's path: its folders, then ours
    assert imported_libraries() == {"jaxlike-nn": "4.0", "jaxlike-opt": "3.0"}


def test_the_reading_a_compile_wait_starts_is_made_once_and_awaited_by_the_report(
    site: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread about to wait for a compile starts the reading in a thread of its own (once a process); the
    report's list waits for it and reads no folder twice."""
    import threading
    from importlib import metadata

    from fieldmem.driver import backends

    first, _ = site
    _dist(first, "jaxlike_nn", "1.0", ["jax"], ["jaxlike_nn"])
    monkeypatch.setattr(backends, "_READING", [])
    release = threading.Event()
    reads: list[object] = []
    original = metadata.distributions

    def held(**kwargs: object):  # type: ignore[no-untyped-def]
        release.wait(10)
        reads.append(kwargs.get("path"))
        return original(**kwargs)

    monkeypatch.setattr(metadata, "distributions", held)
    backends.read_libraries_meanwhile()
    backends.read_libraries_meanwhile()
    assert len(backends._READING) == 1 and backends._READING[0].is_alive()
    threading.Timer(0.2, release.set).start()
    assert imported_libraries() == {"jaxlike-nn": "1.0"}
    assert len(reads) == 2 and not backends._READING[0].is_alive()


@pytest.mark.parametrize("sent", [True, False], ids=["request-waiting", "none-yet"])
def test_a_worker_reads_the_libraries_ahead_only_while_no_request_waits(sent: bool) -> None:
    """Where the parent's request is on stdin when numpy and jaxlib are loaded, the warm-up leaves the libraries
    for the first compile's wait (they would delay the request's check); else it reads them while it waits."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    code = (
        "import sys; import fieldmem.worker.main as m; m._warm_up()\n"
        "from fieldmem.driver import backends\n"
        "print(m._request_waiting(), bool(backends._REQUIRING_JAX), flush=True)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert process.stdin is not None and process.stdout is not None
    if sent:
        process.stdin.write(b'{"a request": 1}\n')
        process.stdin.flush()
    try:
        waiting, read = process.stdout.readline().decode().split()
    finally:
        process.stdin.close()
        process.stdout.close()
        process.wait(timeout=60)
    assert waiting == str(sent)
    assert read == str(not sent)  # read in the warm-up only where no request waited
