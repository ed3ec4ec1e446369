"""fieldmem's worker under several jax releases: does each give a complete, correct report of every example?

For each environment folder given (a venv with jax, jaxlib, flax and optax installed, and nothing of
fieldmem's: the worker runs there with ``PYTHONPATH`` at this checkout), every bundled example
(``examples/*.py`` and ``examples/upgrade/*.py``) is checked by this checkout's parent with its workers
under that venv's Python (``fieldmem.parent.isolate.check_reports`` with an ``Interpreter``), twice:

- as ``fieldmem check`` does (``--fast-compile``, the default);
- as the reference: a default compile (no ``--fast-compile``), whose figures are the release's own
  ``memory_analysis()`` of the same lowered program.

A release *works* when every target's status is ``ok``, no memory figure is unavailable (but the
generated code's size, which ``--fast-compile`` always leaves out), every figure (argument, output,
alias, temp, peak, host ones) equals the reference's and the aliases (input -> output) are the same.

``examples/upgrade/loop_update.py`` is openxla/xla#45912's program: its figures are also read directly
in the venv (``jax.jit(..., donate_argnums=0).lower(...).compile().memory_analysis()``, no fieldmem on
the way) and written out per release, with the temporary fieldmem finds live at the peak.

Writes ``results/versions.{json,md}`` through ``results_file.py`` (the run replaces the current one,
which joins the JSON's ``history``).

Usage: ``python benchmarks/versions.py ENV [ENV ...] [--out benchmarks/results]`` (e.g.
``/tmp/fm-envs/jax-0.7.1``). Make an ENV with ``python3.11 -m venv ENV && ENV/bin/pip install
jax==V jaxlib==V flax optax``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import results_file  # noqa: E402

sys.path.insert(0, str(ROOT))

from fieldmem.model.codec import encode  # noqa: E402
from fieldmem.parent import isolate  # noqa: E402
from fieldmem.parent.spawn import Interpreter  # noqa: E402
from fieldmem.request.options import CheckOptions  # noqa: E402
from fieldmem.request.target import TargetOptions  # noqa: E402

COMPARED = (
    "argument_bytes",
    "output_bytes",
    "alias_bytes",
    "temp_bytes",
    "peak_bytes",
    "host_argument_bytes",
    "host_output_bytes",
    "host_alias_bytes",
    "host_temp_bytes",
)
FAST_ONLY = "generated_code_bytes"  # left out by --fast-compile, on every release
REGRESSION = ROOT / "examples" / "upgrade" / "loop_update.py"
DIRECT = """
import importlib.util, json, sys, jax
spec = importlib.util.spec_from_file_location("loop_update", sys.argv[1])
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
m = jax.jit(module.loop_update, donate_argnums=0).lower(*module.loop_args()).compile().memory_analysis()
print(json.dumps({k: getattr(m, k, None) for k in ("argument_size_in_bytes", "output_size_in_bytes",
      "alias_size_in_bytes", "temp_size_in_bytes", "peak_memory_in_bytes")}))
"""


def _jax_version(env: Path) -> str:
    out = subprocess.run(
        [str(env / "bin" / "python"), "-c", "import jax, jaxlib; print(jax.__version__, jaxlib.__version__)"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    return out.stdout.split()[0]


def _targets() -> list[Path]:
    return sorted((ROOT / "examples").glob("*.py")) + sorted((ROOT / "examples" / "upgrade").glob("*.py"))


def _check(env: Path, target: Path, fast: bool) -> list[dict[str, Any]]:
    """The results of ``target`` checked by workers under ``env``'s Python."""
    interpreter = Interpreter(python=str(env / "bin" / "python"), environ=(("PYTHONPATH", str(ROOT)),))
    here, path = os.getcwd(), sys.path[:]
    os.chdir(target.parent)
    sys.path.insert(0, str(target.parent))
    try:
        options = dataclasses.replace(CheckOptions(cache_dir=None), fast_compile=fast)
        (report,) = isolate.check_reports(
            [isolate.Unit(target.name, TargetOptions())], [None], options, check_backends=False, interpreter=interpreter
        )
    finally:
        os.chdir(here)
        sys.path[:] = path
    return list(encode(report)["results"])


def _aliases(variant: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((a["input"], a["output"]) for a in variant.get("aliases") or [])


def _compare(fast: dict[str, Any], reference: dict[str, Any] | None) -> list[str]:
    """What is wrong with one result: not ok, a figure unavailable or unequal to the reference, aliases."""
    name = fast["name"]
    if fast["status"] != "ok":
        return [f"{name}: {fast['status']}: {(fast.get('error') or {}).get('message', '')}"]
    wrong = []
    for vname, variant in (fast.get("variants") or {}).items():
        memory = variant.get("memory") or {}
        for field, why in (memory.get("unavailable") or {}).items():
            if field != FAST_ONLY:
                wrong.append(f"{name} {vname}: {field} unavailable ({why})")
        ref = ((reference or {}).get("variants") or {}).get(vname)
        if ref is None:
            wrong.append(f"{name} {vname}: no reference result")
            continue
        for field in COMPARED:
            if memory.get(field) != (ref.get("memory") or {}).get(field):
                wrong.append(
                    f"{name} {vname}: {field} {memory.get(field)} != {ref['memory'].get(field)} (default compile)"
                )
        if _aliases(variant) != _aliases(ref):
            wrong.append(f"{name} {vname}: aliases differ from the default compile's")
    return wrong


def _direct(env: Path) -> dict[str, Any]:
    out = subprocess.run(
        [str(env / "bin" / "python"), "-c", DIRECT, str(REGRESSION)],
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    return json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {"error": out.stderr[-500:]}


def _regression(results: list[dict[str, Any]]) -> dict[str, Any]:
    donated = results[0]["variants"]["donated"]
    memory = donated["memory"]
    temporaries = [b for b in donated.get("live_at_peak") or [] if b["kind"] == "temporary" and b["bytes"] >= 1024]
    return {
        "temp_bytes": memory["temp_bytes"],
        "peak_bytes": memory["peak_bytes"],
        "live_peak_bytes": memory.get("live_peak_bytes"),
        "verdict": results[0]["verdict"]["kind"],
        "temporaries_at_peak": [f"{b['bytes']} B {b['instruction']} at {b['source']}" for b in temporaries],
    }


def run_env(env: Path) -> dict[str, Any]:
    version = _jax_version(env)
    began = time.monotonic()
    entry: dict[str, Any] = {"jax": version, "env": str(env), "targets": {}, "wrong": [], "unavailable": set()}
    for target in _targets():
        try:
            fast = _check(env, target, True)
            reference = {r["name"]: r for r in _check(env, target, False)}
        except Exception as exc:  # the whole run failed under this release
            entry["wrong"].append(f"{target.name}: {type(exc).__name__}: {exc}")
            continue
        entry["targets"][target.name] = [r["name"] for r in fast]
        for result in fast:
            wrong = _compare(result, reference.get(result["name"]))
            entry["wrong"].extend(wrong)
            entry["unavailable"].update(
                w.split(": ", 1)[1].split(" unavailable")[0] for w in wrong if "unavailable" in w
            )
        if target == REGRESSION and fast and fast[0]["status"] == "ok":
            entry["regression"] = {**_regression(fast), "direct": _direct(env)}
    entry["unavailable"] = sorted(entry["unavailable"])
    entry["works"] = not entry["wrong"]
    entry["seconds"] = round(time.monotonic() - began, 1)
    return entry


def _markdown(document: dict[str, Any]) -> str:
    """``versions.md`` of a run, from its JSON document alone."""
    entries = document["entries"]
    lines = [
        "# fieldmem's worker under several jax releases",
        "",
        f"Written by `benchmarks/versions.py` on {document['date']} (CPU, Python {document['python']}).",
        "Each release: a venv with jax, jaxlib (same version), flax and optax; the worker runs there with",
        "`PYTHONPATH` at this checkout; every example checked as `fieldmem check` does (`--fast-compile`) and",
        "again with a default compile, whose `memory_analysis()` is the reference.",
        "",
        "| jax | works | unavailable | what fails |",
        "|---|---|---|---|",
    ]
    for e in entries:
        failing = [w for w in e["wrong"] if " unavailable (" not in w]
        fails = "<br>".join(w.replace("|", "\\|") for w in failing[:6]) + (
            f"<br>… ({len(failing)} in all)" if len(failing) > 6 else ""
        )
        lines.append(
            f"| {e['jax']} | {'yes' if e['works'] else 'no'} | {', '.join(e['unavailable']) or '-'} | {fails or '-'} |"
        )
    lines += [
        "",
        "## openxla/xla#45912 (`examples/upgrade/loop_update.py`, donated variant)",
        "",
        "| jax | temp bytes | XLA peak bytes | fieldmem live peak bytes | temporaries at the peak | "
        "direct `memory_analysis()` temp / peak |",
        "|---|---|---|---|---|---|",
    ]
    for e in entries:
        r = e.get("regression")
        if r is None:
            lines.append(f"| {e['jax']} | - | - | - | (no result) | - |")
            continue
        d = r["direct"]
        direct = f"{d.get('temp_size_in_bytes')} / {d.get('peak_memory_in_bytes')}" if "error" not in d else "failed"
        lines.append(
            f"| {e['jax']} | {r['temp_bytes']} | {r['peak_bytes']} | {r['live_peak_bytes']} | "
            f"{'; '.join(r['temporaries_at_peak']) or 'none'} | {direct} |"
        )
    return "\n".join(lines) + "\n"


BENCHMARK = results_file.Benchmark(
    "versions",
    _markdown,
    lambda document: {f"jax {e['jax']}: works": e["works"] for e in document["entries"]},
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("envs", nargs="*", type=Path)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--markdown-only", action="store_true", help="write versions.md again from versions.json")
    args = parser.parse_args()
    if args.markdown_only:
        results_file.render(args.out / "versions.json", BENCHMARK)
        return 0
    os.environ["JAX_PLATFORMS"] = "cpu"
    entries = []
    for env in args.envs:
        entry = run_env(env.resolve())
        print(f"jax {entry['jax']}: {'works' if entry['works'] else 'fails'} ({entry['seconds']} s)", flush=True)
        for wrong in entry["wrong"]:
            print(f"  {wrong}", flush=True)
        entries.append(entry)
    document = {
        "date": datetime.date.today().isoformat(),
        "machine": "CPU",
        "python": sys.version.split()[0],
        "entries": json.loads(json.dumps(entries, default=str)),
    }
    results_file.write(args.out, BENCHMARK, document)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
