"""``fieldmem check --watch``: is an edited function checked again within its own compiles + 10%?

Writes a synthetic module (``synth.py``: 20 functions, each a chain of 20
steps over 4 leaves of f32[64,64]; then, unless ``--quick``, one of 60 steps) to a temporary folder and starts
``fieldmem check MODULE --watch`` on it (its own, empty compilation cache
folder), in the same environment as the baseline (``JAX_PLATFORMS=cpu``).
Once the first report is printed, it edits ONE function per round
(``update7``: the constant of its step index grows by a multiple of 5, so
the steps keep their kind but every program differs from all before it, and
no cache can help) and times from the save (the file written and closed)
to the line fieldmem prints after the new rows (``checked 1 target(s) again
in ...``). The time counts everything the user waits for: the poll that sees
the save (``fieldmem.frontends.watch.POLL``), the wait for the file to settle
(``SETTLE``), loading the module again, the fingerprints of the 20 targets,
the re-check and the printing.

The reference is the function's own compiles: in a separate, warm Python
process (jax imported, one unrelated function compiled first), each edited
version of ``update7`` is lowered and compiled twice, without and with
donation, ``jax.jit(fn, donate_argnums=...).lower(*args).compile()`` with the
compiler options fieldmem uses by default for a static check
(``fieldmem.driver.lowering.FAST_COMPILE_OPTIONS``), one after the other,
as the requirement defines "its own compiles". fieldmem runs with its
default ``--jobs`` (``fieldmem.request.options.default_jobs()``, recorded):
with 2 or more, its two variants compile side by side. The two alternate, edit by edit (a
re-check, then the same edit's reference compiles), and never run at the
same time: a load from elsewhere on the machine reaches both alike.

Writes ``results/watch.json`` (date, machine, jax, raw times, medians, the
ratio; earlier runs' headline figures in its ``history``) and ``results/watch.md``
from it, through ``runner.py``; a quick run (no heavy module) never replaces
a complete one. ``run(repeat=...)`` returns this run's dict for ``make bench``.

    python benchmarks/bench_watch.py [--repeat 11] [--quick]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import queue
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import runner  # noqa: E402

from synth import write_module  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
FUNCTIONS, CHAIN, LEAVES, SIZE = 20, 20, 4, 64
HEAVY_CHAIN = 60  # a module whose functions take about three times as long to compile
EDITED = 7  # the function edited: update7
LIMIT = 30.0  # the most to wait for a re-check: the 10% requirement is far below it

_OWN = r"""
import importlib.util, json, os, sys, time
sys.modules["fieldmem"] = None  # the module's registrations are skipped: only jax here
import jax
from fieldmem_options import FAST
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
warm = load(sys.argv[1], "warm")
fn, make_args, donate = warm.CASES[0]
for d in ((), donate):  # a warm process: jax started, one program compiled
    jax.jit(fn, donate_argnums=d).lower(*make_args()).compile(compiler_options=FAST)
print("ready", flush=True)
for n, line in enumerate(sys.stdin):  # one edited module per line: its function's two compiles, timed
    module = load(line.strip(), f"edited{n}")
    fn, make_args, donate = module.CASES[int(os.environ["EDITED"])]
    args = make_args()
    start = time.perf_counter()
    for d in ((), donate):
        jax.jit(fn, donate_argnums=d).lower(*args).compile(compiler_options=FAST)
    print(json.dumps(time.perf_counter() - start), flush=True)
"""


def _edit(text: str, round_: int) -> str:
    """``update7`` with its step index offset by ``5 * round_`` (the same kinds of step, new constants)."""
    old = f"            x = _step(x, w, k + {EDITED})\n"
    assert old in text, "synth.py's function template changed: update bench_watch._edit"
    head, _, tail = text.partition(f"def update{EDITED}(")
    return (
        head
        + f"def update{EDITED}("
        + tail.replace(old, f"            x = _step(x, w, k + {EDITED} + {5 * round_})\n", 1)
    )


_EXTRA_ENV: dict[str, str] = {}  # run(env=...): given by make bench
_WORK: Path | None = None  # run(work=...): where the temporary folders go


def _environment() -> dict[str, str]:
    env = dict(os.environ, **_EXTRA_ENV)
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), COLUMNS="160")
    env.pop("FORCE_COLOR", None)
    return env


class _Watch:
    """``fieldmem check MODULE --watch``, its stderr lines timestamped as they arrive."""

    def __init__(self, folder: Path, module: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "fieldmem", "check", module.name, "--watch", "--cache-dir", str(folder / "cache")],
            cwd=folder,
            env=_environment(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.put((time.perf_counter(), line.rstrip("\n")))

    def until(self, pattern: str, timeout: float) -> tuple[float, str]:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                when, line = self.lines.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                break
            if re.search(pattern, line):
                return when, line
        raise RuntimeError(f"fieldmem --watch printed no {pattern!r} within {timeout:g} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(2)  # Ctrl-C
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.reader.join(timeout=5)
        if self.process.stderr is not None:
            self.process.stderr.close()


class _Own:
    """The reference: a warm process that compiles the edited function's two variants on request."""

    def __init__(self, folder: Path, text: str) -> None:
        from fieldmem.driver.lowering import FAST_COMPILE_OPTIONS

        self.folder = folder
        (folder / "fieldmem_options.py").write_text(f"FAST = {FAST_COMPILE_OPTIONS!r}\n")
        warm = folder / "own_warm.py"
        warm.write_text(text.replace("k + 0)", "k + 0 + 1000)"))  # another program than any edit
        env = dict(_environment(), EDITED=str(EDITED), PYTHONPATH=f"{folder}{os.pathsep}{ROOT}")
        self.process = subprocess.Popen(
            [sys.executable, "-c", _OWN, str(warm)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=folder,
        )
        self._answer()  # "ready"

    def _answer(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the reference process ended")
        return line.strip()

    def compiles(self, edited: str, n: int) -> float:
        """Seconds for the two compiles of ``update7`` as ``edited`` defines it."""
        path = self.folder / f"own_{n}.py"
        path.write_text(edited)
        assert self.process.stdin is not None
        self.process.stdin.write(f"{path}\n")
        self.process.stdin.flush()
        return float(json.loads(self._answer()))

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def _measure(folder: Path, module: Path, text: str, repeat: int) -> tuple[list[float], list[float], list[float]]:
    """Per edit, alternating: the seconds from the save to fieldmem's line after the new rows, then the
    seconds of the edited function's own two compiles in the warm reference process (same edit)."""
    own = _Own(folder, text)
    watch = _Watch(folder, module)
    rechecks: list[float] = []
    compiles: list[float] = []
    session: list[float] = []  # the re-check as fieldmem times it: the worker's part, without the poll and print
    try:
        watch.until(r"^fieldmem: watching", timeout=900)
        for round_ in range(1, repeat + 1):
            edited = _edit(text, round_)
            time.sleep(0.3)  # the loop idles, as between two saves
            with open(module, "w") as handle:
                handle.write(edited)
            saved = time.perf_counter()
            when, line = watch.until(r"checked \d+ target\(s\) again", timeout=LIMIT)
            if not line.startswith("fieldmem: checked 1 target(s) again"):
                raise RuntimeError(f"expected one target checked again, got: {line}")
            rechecks.append(when - saved)
            session.append(float(re.search(r"again in ([\d.]+) s", line).group(1)))  # type: ignore[union-attr]
            compiles.append(own.compiles(edited, round_))
    finally:
        watch.stop()
        own.stop()
    return rechecks, compiles, session


def _one(chain: int, repeat: int) -> dict[str, Any]:
    """The re-checks and reference compiles of one module (``chain`` steps per function)."""
    with tempfile.TemporaryDirectory(prefix="fieldmem-bench-watch-", dir=_WORK) as temp:
        folder = Path(temp)
        module = write_module(folder / "watched.py", functions=FUNCTIONS, chain=chain, leaves=LEAVES, size=SIZE)
        rechecks, own, session = _measure(folder, module, module.read_text(), repeat)
    recheck_median, own_median = statistics.median(rechecks), statistics.median(own)
    return {
        "module": {"functions": FUNCTIONS, "chain": chain, "leaves": LEAVES, "size": SIZE, "edited": f"update{EDITED}"},
        "recheck_s": [round(t, 4) for t in rechecks],
        "own_compiles_s": [round(t, 4) for t in own],
        "median": {"recheck_s": round(recheck_median, 4), "own_compiles_s": round(own_median, 4)},
        "ratio": round(recheck_median / own_median, 3),
        "over_own_s": round(recheck_median - own_median, 4),
        # fieldmem's own "checked ... again in X s": the request to the worker and back (reload, fingerprints,
        # the check); the rest of save -> print is the poll, the settle and the printing
        "session_s": session,
        "median_session_s": round(statistics.median(session), 4),
        "median_poll_and_print_s": round(statistics.median(r - t for r, t in zip(rechecks, session)), 4),
        "within_10_percent": recheck_median <= 1.10 * own_median,
    }


def run(
    repeat: int | None = None,
    heavy: bool | None = None,
    quick: bool = False,
    work: Path | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Measure ``repeat`` edits (default 11; ``quick``: 3) on the 20-step module and, with ``heavy``
    (default: not ``quick``), on one whose functions take about three times as long to compile; write
    ``RESULTS``/watch.{json,md}; return what was written. ``work``: the folder for temporary files;
    ``env``: variables for every process started (``make bench`` passes its own).

    The top-level ``median``, ``ratio`` and ``module`` are the 20-step module's; ``heavy`` holds the other.
    """
    global _EXTRA_ENV, _WORK
    repeat = repeat if repeat is not None else (3 if quick else 11)
    heavy = heavy if heavy is not None else not quick
    _EXTRA_ENV, _WORK = dict(env or {}), work
    import jax

    from fieldmem.driver.lowering import FAST_COMPILE_OPTIONS
    from fieldmem.frontends import watch as loop
    from fieldmem.request.options import default_jobs

    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    main_module = _one(CHAIN, repeat)
    heavy_module = _one(HEAVY_CHAIN, repeat) if heavy else None
    result: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "processor": platform.machine(), "cpus": os.cpu_count()},
        "commit": runner.commit(ROOT),
        "load_average_1min": {
            "before": load_before,
            "after": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        },
        "pairs": "alternating: each edit's re-check, then the same edit's reference compiles",
        "python": platform.python_version(),
        "jax": jax.__version__,
        "fieldmem_jobs": default_jobs(),
        "poll_s": loop.POLL,
        "settle_s": loop.SETTLE,
        "poll_latency_counted": True,
        "compiler_options": FAST_COMPILE_OPTIONS,
        "repeat": repeat,
        **main_module,
        "heavy": heavy_module,
    }
    runner.write(RESULTS, BENCHMARK, result)
    return result


def headline(result: dict[str, Any]) -> dict[str, Any]:
    """A run's headline figures: the medians and ratio of each module."""
    figures = {
        "re-check median (s)": result["median"]["recheck_s"],
        "own compiles median (s)": result["median"]["own_compiles_s"],
        "re-check / own compiles": result["ratio"],
    }
    if result.get("heavy"):
        figures["heavy module: re-check / own compiles"] = result["heavy"]["ratio"]
    return figures


def _markdown(result: dict[str, Any]) -> str:
    rows = []
    for one in (result, result["heavy"]):
        if one is None:
            continue
        m, median = one["module"], one["median"]
        rows.append(
            f"| {m['functions']} functions × {m['chain']} steps × {m['leaves']} leaves of f32[{m['size']},{m['size']}] "
            f"| {median['recheck_s']:.3f} s ({', '.join(f'{t:.3f}' for t in one['recheck_s'])}) "
            f"| {median['own_compiles_s']:.3f} s ({', '.join(f'{t:.3f}' for t in one['own_compiles_s'])}) "
            f"| **{one['ratio']:.3f}** | {'met' if one['within_10_percent'] else 'NOT met'} |"
        )
    return (
        "# fieldmem check --watch: an edited function checked again vs its own compiles\n\n"
        f"{result['date']} · {result['machine']['platform']} · {result['machine']['cpus']} CPUs · "
        f"jax {result['jax']} · `benchmarks/bench_watch.py`\n\n"
        f"`update{EDITED}` edited {result['repeat']} times per module, each time with new constants. Re-check: "
        f"from the save to the line printed after the new rows (`--watch`, --jobs {result['fieldmem_jobs']}, "
        f"poll {result['poll_s']} s and settle {result['settle_s']} s counted). Own compiles: lower + compile of "
        f"its two variants, one after the other, in a warm process, {result['compiler_options']}. The two "
        "alternate edit by edit.\n\n"
        "| module | re-check, median (each) | own compiles, median (each) | ratio | ≤ 1.10 |\n|---|---|---|---|---|\n"
        + "\n".join(rows)
        + f"\n\nLoad average (1 min) {result['load_average_1min']['before']} before, "
        f"{result['load_average_1min']['after']} after, on {result['machine']['cpus']} CPUs.\n"
    )


BENCHMARK = runner.Benchmark(
    "watch",
    lambda result: _markdown(result),
    headline,
    complete=lambda result: bool(result.get("heavy")),
    partial=lambda result: "the 20-step module (no heavy module)",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=11, help="edits timed per module (default 11)")
    parser.add_argument("--quick", action="store_true", help="3 edits, the 20-step module only: a smoke run")
    options = parser.parse_args()
    result = run(repeat=3 if options.quick else options.repeat, quick=options.quick)
    print(_markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
