"""Record, or compare against a record, the JSON reports of the bundled examples.

A refactoring must leave every report identical. This script runs fieldmem's
command line (as a user would, in fresh processes) on every bundled example and
on the runs that exercise the optional paths: ``--suggest``, chains, ``--run``,
``--devices 4`` with ``--probe``, a baseline comparison and ``fieldmem compare``.
Each report is normalised (timings, the creation time and ``--run`` timings/
device statistics that differ from one run to the next are dropped) and written
to a folder.

    python benchmarks/same_reports.py record  DIR   # before the change
    python benchmarks/same_reports.py compare DIR   # after: exit 1 on any difference

What is dropped, and why: ``*_seconds`` and ``seconds`` (wall time),
``created`` (the clock), the probe's ``growth`` and the times in its message
(wall time), and temporary folder names.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIELDMEM = [sys.executable, "-m", "fieldmem"]

EXAMPLES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("*.py"))

#: name -> arguments after ``fieldmem``; every run writes JSON to {out}.
RUNS: dict[str, list[str]] = {
    **{f"example-{Path(e).stem}": ["check", e] for e in EXAMPLES},
    "suggest-advisor": ["check", "examples/advisor.py", "--suggest"],
    "suggest-optimizer": ["check", "examples/optimizer.py", "--suggest"],
    # every example in one command: several workers share them (one per spec, at most --jobs)
    "all-examples": ["check", *EXAMPLES, "--jobs", "2"],
    "chain-forward": ["check", "examples/forward.py:create_field,update1,update2"],
    "chain-precision": ["check", "examples/precision_chain.py"],
    "run-field": ["check", "examples/field.py", "examples/sparse_row.py", "--run"],
    "run-noisolate": ["check", "examples/stencil_scan.py", "--run", "--no-isolate"],
    "devices4-probe": [
        "check",
        "examples/sharded.py",
        "examples/sparse_row.py",
        "--devices",
        "4",
        "--probe",
    ],
    "verbose-min-bytes": ["check", "examples/field.py", "examples/optimizer.py", "--min-bytes", "0"],
    "shapes": ["check", "examples/sparse_row.py:set_row", "--shapes", "f32[256,128] s32[] f32[128]"],
    "donate-none": ["check", "examples/field.py", "--donate", "none"],
    "deviceless-backends": ["check", "examples/interior.py", "--backend", "gpu:h100,tpu:v5e"],
}

#: Keys whose values are clocks or wall times: dropped.
VOLATILE_KEYS = {"created", "seconds", "growth"}
#: A measured time inside a sentence (the probe's message): replaced by <t>.
MEASURED_TIME = re.compile(r"\d+(?:\.\d+)? (?:ns|µs|ms|s)(?= with | at )")
TEMPORARY = re.compile(re.escape(tempfile.gettempdir()) + r"/[^/\s\"']+")


def _normalise(value: object) -> object:
    if isinstance(value, dict):
        return {
            key: _normalise(item)
            for key, item in value.items()
            if key not in VOLATILE_KEYS and not key.endswith("_seconds")
        }
    if isinstance(value, list):
        return [_normalise(item) for item in value]
    if isinstance(value, str):
        return TEMPORARY.sub("<tmp>", MEASURED_TIME.sub("<t>", value))
    return value


def _run(name: str, args: list[str], folder: Path) -> dict[str, object]:
    out = folder / f"{name}.json"
    env = {**os.environ, "COLUMNS": "120"}
    proc = subprocess.run(
        [*FIELDMEM, *args, "-f", "json", "-o", str(out), "--no-cache"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    record: dict[str, object] = {"exit_code": proc.returncode}
    per_backend = sorted(folder.glob(f"{name}.*.json"))  # several backends: report.<backend>.json each
    if out.exists():
        record["report"] = _normalise(json.loads(out.read_text()))
    elif per_backend:
        record["reports"] = {p.name: _normalise(json.loads(p.read_text())) for p in per_backend}
    else:
        record["stderr"] = proc.stderr.strip().splitlines()[-1:] if proc.stderr else []
    return record


def _baseline_and_compare(folder: Path) -> dict[str, object]:
    """A baseline saved from one run, gated by another; and `fieldmem compare` on two reports."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base.json"
        a, b = Path(tmp) / "a.json", Path(tmp) / "b.json"
        env = {**os.environ, "COLUMNS": "120"}

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*FIELDMEM, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False)

        saved = run("check", "examples/field.py", "--save-baseline", str(base), "--no-cache")
        gated = run(
            "check",
            "examples/field.py",
            "--donate",
            "none",
            "--baseline",
            str(base),
            "-f",
            "json",
            "-o",
            str(a),
            "--no-cache",
        )
        run("check", "examples/field.py", "-f", "json", "-o", str(b), "--no-cache")
        compared = run("compare", str(a), str(b), "-f", "json")
        return {
            "save_exit": saved.returncode,
            "gate_exit": gated.returncode,
            "gate_report": _normalise(json.loads(a.read_text())) if a.exists() else None,
            "compare_exit": compared.returncode,
            "compare": _normalise(json.loads(compared.stdout)) if compared.stdout.strip() else compared.stderr,
        }


def collect(folder: Path) -> dict[str, object]:
    folder.mkdir(parents=True, exist_ok=True)
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in RUNS.items():
            print(f"  {name}", file=sys.stderr, flush=True)
            results[name] = _run(name, args, Path(tmp))
    print("  baseline-and-compare", file=sys.stderr, flush=True)
    results["baseline-and-compare"] = _baseline_and_compare(folder)
    return results


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in {"record", "compare"}:
        print(__doc__, file=sys.stderr)
        return 2
    mode, folder = argv[0], Path(argv[1])
    results = collect(Path(tempfile.mkdtemp()))
    text = {name: json.dumps(result, indent=1, sort_keys=True) for name, result in results.items()}
    if mode == "record":
        folder.mkdir(parents=True, exist_ok=True)
        for name, body in text.items():
            (folder / f"{name}.json").write_text(body + "\n")
        print(f"recorded {len(text)} runs in {folder}")
        return 0
    differing = 0
    for name, body in text.items():
        recorded = folder / f"{name}.json"
        before = recorded.read_text().rstrip("\n") if recorded.exists() else ""
        if before != body:
            differing += 1
            print(f"DIFFERENT: {name}")
            diff = difflib.unified_diff(before.splitlines(), body.splitlines(), "before", "after", lineterm="", n=2)
            print("\n".join(list(diff)[:60]))
    print(f"{len(text) - differing} of {len(text)} runs identical")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
