"""What the benchmarks share: the machine a run is made on, how a timed process is run, and the result files.

- The machine, for every result file: its cores, memory, processor and accelerator. fieldmem's
  machine-dependent rules (the default ``--jobs``, the malloc arenas of a ``--jobs 1`` worker, the compiles at
  once by memory) are chosen from measurements on two machines: the 2-core development machine and the
  13-core host of the lent TPU v5e machine. Each result file names which one it was measured on with
  :func:`describe` (the figures) and :func:`label` (one line).
- The processes ``bench_fast.py`` times: the one environment each runs in (:func:`environment`), its wall
  seconds (:func:`timed`), a crash as :class:`BenchError`, and :func:`median`.
- One current result file per benchmark, with its earlier runs inside it. A benchmark writes ``NAME.json`` and
  ``NAME.md`` under ``benchmarks/results/`` through :func:`write`:

  - ``NAME.json`` is the current run's document (what the docs quote: ``tests/project/test_doc_figures.py``
    reads only its current figures) plus ``"history"``: one entry per earlier run, oldest first, each with its
    date, machine, commit and headline figures (the run's full document stays in git history: ``file`` names
    it where the run was once a file of its own).
  - ``NAME.md`` is made from ``NAME.json`` alone: the benchmark's own markdown of the current run, then a table
    of the headline figures of every run, the current one first. :func:`render` writes it again.
  - A new run replaces the current one, which moves to the history as its headline figures. A partial run (a
    section skipped, a run stopped part way) does not replace a complete one: it joins the history alone.
  - Both files are written atomically (a temporary file in the same folder, then ``os.replace``): a run
    stopped while writing leaves the previous files whole, never half of one.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _accelerator() -> str | None:
    """A TPU's device files (``/dev/accel*``, ``/dev/vfio/N``) or an NVIDIA GPU's; None: none found."""
    dev = Path("/dev")
    if any(dev.glob("accel*")) or any(p.name.isdigit() for p in (dev / "vfio").glob("*")):
        return "TPU"
    if any(dev.glob("nvidia[0-9]*")):
        return "NVIDIA GPU"
    return None


def describe() -> dict[str, Any]:
    """The machine's figures: usable cores (the affinity mask), all cores, memory, processor, accelerator."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    return {
        "arch": platform.machine(),
        "system": platform.system(),
        "cores": usable,
        "cpu_count": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "cpu": _cpu_model(),
        "accelerator": _accelerator(),
        "label": label_of(usable, _memory_gib(), _accelerator()),
    }


def label_of(cores: int, memory_gib: float | None, accelerator: str | None) -> str:
    host = "the TPU host" if accelerator == "TPU" else ("a GPU host" if accelerator else "no accelerator")
    memory = f", {memory_gib:.0f} GiB" if memory_gib is not None else ""
    return f"{cores} cores{memory} ({host})"


def label() -> str:
    """One line: ``13 cores, 40 GiB (the TPU host)``, ``2 cores, 24 GiB (no accelerator)``."""
    return str(describe()["label"])


def commit(root: Path) -> str:
    """The short commit of the checkout at ``root``, with ``+changes`` where its fieldmem/ differs from it; in a
    copy without a git checkout of its own (the lent machine's, which may sit inside another checkout: its
    HEAD is not this copy's), ``$BENCH_COMMIT``, else ``unknown``."""
    import subprocess

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root.resolve():
        return os.environ.get("BENCH_COMMIT", "unknown")
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "fieldmem") else "")


# ---------------------------------------------------------------- timed processes (bench_fast.py)


class BenchError(Exception):
    """The run cannot measure what it must: one line, exit 2."""


def environment(cache: Path) -> dict[str, str]:
    """The one environment every timed process runs in (naive and fieldmem alike)."""
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["FIELDMEM_CACHE_DIR"] = str(cache)  # fieldmem's default cache, in this run's folder
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env.pop("XLA_FLAGS", None)
    return env


def timed(command: list[str], env: dict[str, str], log: Path) -> float:
    """Wall seconds of one fresh process (its output to ``log``); a crash is a BenchError."""
    with open(log, "wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, _ = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):  # fieldmem exits 1 when a check fails: still a complete run
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise BenchError(f"{' '.join(command)} exited {code}: {' | '.join(tail)}")
    return wall


def median(values: list[float]) -> float:
    return statistics.median(values)


# ---------------------------------------------------------------- result files (every benchmark)

HISTORY = "history"

Headline = dict[str, Any]


def _complete(document: Mapping[str, Any]) -> bool:
    return True


@dataclass(frozen=True)
class Benchmark:
    """How one benchmark's result file is made: its name, its markdown and its headline figures."""

    name: str
    markdown: Callable[[dict[str, Any]], str]  # the current run's markdown, from its document (no history)
    headline: Callable[[dict[str, Any]], Headline]  # the figures a run is remembered by: label -> number
    complete: Callable[[dict[str, Any]], bool] = _complete  # False: a partial run, never replacing a complete one
    partial: Callable[[dict[str, Any]], str] = lambda document: "partial"  # what a partial run measured


def headline_markdown(title: str, what_key: str | None = None) -> Callable[[dict[str, Any]], str]:
    """A markdown for a benchmark whose script wrote JSON alone: its title, date, machine and commit (and the
    document's ``what_key`` line); the headline figures follow in the history table, every figure in the JSON."""

    def render(document: dict[str, Any]) -> str:
        who = [f"{k}: {v}" for k, v in identity(document).items() if v is not None]
        lines = [f"# {title}", "", "- " + "; ".join(who)]
        if what_key and document.get(what_key):
            lines.append(f"- {document[what_key]}")
        lines += ["", "Every figure is in the JSON this file is made from; the headline ones are in the table below."]
        return "\n".join(lines) + "\n"

    return render


def _field(document: Mapping[str, Any], *names: str) -> Any:
    meta = document.get("meta")
    for source in (meta if isinstance(meta, Mapping) else {}, document):
        for name in names:
            if source.get(name) not in (None, ""):
                return source[name]
    return None


def _machine(value: Any) -> str | None:
    if isinstance(value, Mapping):
        if value.get("label"):
            return str(value["label"])
        cores = value.get("cpus", value.get("cores"))
        return ", ".join(str(v) for v in (value.get("processor"), cores and f"{cores} cores") if v) or None
    return None if value is None else str(value)


def identity(document: Mapping[str, Any]) -> dict[str, Any]:
    """The date, machine and commit a run's document names (at its top or under ``meta``); None where it has none."""
    return {
        "date": _field(document, "date"),
        "machine": _machine(_field(document, "machine")),
        "commit": _field(document, "commit", "fieldmem_commit"),
    }


def entry(document: dict[str, Any], benchmark: Benchmark, **extra: Any) -> dict[str, Any]:
    """A run's history entry: its identity, whether it was partial, its headline figures (and ``extra``)."""
    record = identity(document)
    if not benchmark.complete(document):
        record["partial"] = benchmark.partial(document)
    record.update({k: v for k, v in extra.items() if v is not None})
    try:
        record["headline"] = benchmark.headline(document)
    except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError) as exc:
        # a run written in a layout today's script no longer reads: never lose the new run over it
        record["headline"] = {}
        record["headline_unreadable"] = f"{type(exc).__name__}: {exc}"
    return record


def current(document: Mapping[str, Any]) -> dict[str, Any]:
    """The current run's document alone (without the history)."""
    return {k: v for k, v in document.items() if k != HISTORY}


def write_atomically(path: Path, text: str) -> None:
    """``path`` holds ``text`` or what it held before, never a part of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read(path: Path) -> dict[str, Any] | None:
    """The document at ``path``, or None where there is none yet."""
    if not path.is_file():
        return None
    document = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(document, dict):
        raise ValueError(f"{path}: not a result document (a JSON object)")
    return document


def merged(
    previous: dict[str, Any] | None, document: dict[str, Any], benchmark: Benchmark, **extra: Any
) -> dict[str, Any]:
    """The file's document once ``document`` (a new run) joins ``previous`` (the file's document, or None)."""
    if HISTORY in document:
        raise ValueError("a new run's document has no history of its own")
    if previous is None:
        return {**document, HISTORY: []}
    history = list(previous.get(HISTORY, []))
    old = current(previous)
    if benchmark.complete(old) and not benchmark.complete(document):
        return {**old, HISTORY: [*history, entry(document, benchmark, **extra)]}
    return {**document, HISTORY: [*history, entry(old, benchmark)]}


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value).replace("|", "/")


def history_markdown(document: dict[str, Any], benchmark: Benchmark) -> str:
    """The headline figures of every run, a column each: the current one, then the history newest first."""
    earlier = sorted(document.get(HISTORY, []), key=lambda run: str(run.get("date") or ""), reverse=True)
    runs = [{**identity(document), "headline": benchmark.headline(current(document))}, *earlier]
    labels: list[str] = []
    for run in runs:
        labels += [label for label in run["headline"] if label not in labels]
    head = ["", "current", *("partial" if run.get("partial") else "earlier" for run in earlier)]
    rows = [
        ["date", *(_cell(run.get("date")) for run in runs)],
        ["machine", *(_cell(run.get("machine")) for run in runs)],
        ["commit", *(_cell(run.get("commit")) for run in runs)],
    ]
    if any(run.get("partial") for run in runs):
        rows.append(["measured only", *(_cell(run.get("partial")) for run in runs)])
    rows += [[label, *(_cell(run["headline"].get(label)) for run in runs)] for label in labels]
    lines = [
        "## History",
        "",
        f"The headline figures of every run of this benchmark, from `{benchmark.name}.json`'s `history` "
        "(an earlier run's full results: its `file` in git history, or this file at its commit).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]
    return "\n".join(lines) + "\n"


def markdown(document: dict[str, Any], benchmark: Benchmark) -> str:
    """``NAME.md``: the benchmark's markdown of the current run, then the history table."""
    return benchmark.markdown(current(document)).rstrip("\n") + "\n\n" + history_markdown(document, benchmark)


def fold(runs: list[tuple[dict[str, Any], str | None]], benchmark: Benchmark) -> dict[str, Any]:
    """The file's document after ``runs`` (oldest first; each with the file it was once written to, or None)."""
    document: dict[str, Any] | None = None
    file_of_current: str | None = None
    for run, file in runs:
        replaces = document is None or not (benchmark.complete(current(document)) and not benchmark.complete(run))
        document = merged(document, run, benchmark, file=file)
        if replaces:
            if file_of_current is not None and document[HISTORY]:
                moved = document[HISTORY][-1]
                headline = moved.pop("headline")
                moved.update(file=file_of_current, headline=headline)
            file_of_current = file
    if document is None:
        raise ValueError("no run to fold")
    return document


def write(out: Path, benchmark: Benchmark, document: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """Write a new run into ``out/NAME.json`` and ``out/NAME.md``; return the file's document.

    ``extra``: fields for the run's history entry should it join the history (``file=``: the dated file a run
    was once written to)."""
    path = out / f"{benchmark.name}.json"
    written = merged(read(path), document, benchmark, **extra)
    write_atomically(path, json.dumps(written, indent=1) + "\n")
    write_atomically(path.with_suffix(".md"), markdown(written, benchmark))
    return written


def render(path: Path, benchmark: Benchmark) -> str:
    """Write ``NAME.md`` again from ``NAME.json`` at ``path``; return it."""
    document = read(path)
    if document is None:
        raise FileNotFoundError(path)
    text = markdown(document, benchmark)
    write_atomically(path.with_suffix(".md"), text)
    return text
