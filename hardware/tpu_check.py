"""``make tpu-check``: fieldmem on a TPU chip against the chip's own truth and against the deviceless report.

On a machine with a TPU chip, ``hardware/tpu_check_device.sh`` runs (each in its own process, the chip
opened by each): fieldmem's static check and ``--run`` of the bundled examples and of the corpus
(``hardware/tpu_corpus.py``), the corpus with plain jax (``hardware/tpu_truth.py``), and two programs
near the chip's memory (``hardware/tpu_capacity.py``) as the user's own calls and under fieldmem. Then,
on any machine::

    python hardware/tpu_check.py compare DIR        # DIR: the device script's folder (or its .tgz)

compiles the same examples and corpus for ``tpu:v5e`` without the device (here, unless ``--deviceless
DIR`` has them) and writes ``hardware/results/tpu-check.{json,md}``:

- every corpus case: fieldmem's figures on the chip against ``memory_analysis()`` of the user's own jit,
  its aliases against the buffers the donated call reused (pointers, ``is_deleted()``), the inputs it says
  nothing reuses against those jax kept alive, its copies in device memory against a count read from the
  optimized HLO by a pattern of its own; the library steps' aliases against ``--run``'s buffer identities;
- every target, examples and corpus: the chip's report against the deviceless ``tpu:v5e`` report, figure
  by figure, alias by alias, copy by copy, verdict and peak by line;
- every ``--run`` call: the measured peak against the plan (on a TPU the arguments, the new outputs and the
  executable's code), the calls whose peak could not be read, and ``run-peak-above-plan`` findings; the
  examples' runs twice, in two processes;
- the time of ``fieldmem check examples/ --run`` against the static check;
- the two programs near the chip's memory: fieldmem's verdicts, ``--expect fits``, and the runs, against the
  user's own calls.

Exit 1 when a check fails (the table says which), 2 when the folder lacks what it needs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hardware"))

from hlo_count import array_bytes  # noqa: E402

RESULTS = ROOT / "hardware" / "results"
FIGURES = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "generated_code_bytes", "peak_bytes")
COMPARED = (*FIGURES, "footprint_bytes", "live_peak_bytes", "constant_bytes")
PLAN_TOLERANCE = 0.005  # a measured peak within 0.5% of the plan
MIB = 1 << 20
MIN_COPY_BYTES = 1024  # fieldmem's default --min-bytes: copies it counts in its tables


def _load(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


def _results(report: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in (report or {}).get("results", [])}


def _deviceless(specs: list[str], out: Path) -> dict[str, Any]:
    """``fieldmem check SPECS --backend tpu:v5e -f json`` here, without the device."""
    done = subprocess.run(
        [sys.executable, "-m", "fieldmem", "check", *specs, "--backend", "tpu:v5e", "-f", "json", "-o", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])},
    )
    if not out.exists():
        raise SystemExit(f"tpu_check: the deviceless check failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.read_text())


# ---- the corpus against the chip's truth ---------------------------------------------------------------


def corpus_rows(static: dict[str, Any], run: dict[str, Any] | None, truth: dict[str, Any]) -> list[dict[str, Any]]:
    results = _results(static)
    runs = _results(run)
    rows = []
    for case in truth["cases"]:
        result = results.get(case["name"])
        row: dict[str, Any] = {"case": case["name"], "differences": []}
        if result is None or result["status"] != "ok":
            row["differences"].append(f"fieldmem gave no result ({(result or {}).get('error')})")
            rows.append(row)
            continue
        for name in ("plain", "donated"):
            memory = result["variants"][name]["memory"]
            for figure in FIGURES:
                if memory.get(figure) != case[name].get(figure):
                    row["differences"].append(
                        f"{name} {figure}: fieldmem {memory.get(figure)}, jax {case[name].get(figure)}"
                    )
        donated = result["variants"]["donated"]
        aliases = sorted([a["input_index"], a["output_index"]] for a in donated["aliases"])
        if aliases != case["aliases"]:
            row["differences"].append(f"aliases: fieldmem {aliases}, at run time {case['aliases']}")
        unusable = sorted(u["input_index"] for u in donated["unusable_donations"])
        if unusable != case["kept_alive"]:
            row["differences"].append(f"unusable donations: fieldmem {unusable}, kept alive {case['kept_alive']}")
        for name in ("plain", "donated"):
            variant = result["variants"][name]
            # sized as the HLO count sizes them: the elements, not a tiled layout's padding
            shown = [
                c for c in variant["copies"] + variant.get("moves", []) if array_bytes(c["shape"]) >= MIN_COPY_BYTES
            ]
            device = sum(1 for c in shown if (c["source_memory_space"], c["memory_space"]) == (0, 0))
            total = len(shown)
            counted = case["device_copies"][name]
            if (device, total) != (counted["device"], counted["all"]):
                row["differences"].append(
                    f"{name} copies in device memory / all: fieldmem {device}/{total}, HLO {counted['device']}/{counted['all']}"
                )
        row["verdict"] = result["verdict"]["kind"]
        row["aliases"] = len(aliases)
        row["copies"] = f"{len(result['variants']['plain']['copies'])} → {len(donated['copies'])}"
        row["moves"] = f"{len(result['variants']['plain'].get('moves', []))} → {len(donated.get('moves', []))}"
        ran = runs.get(case["name"])
        if ran is not None and ran["status"] == "ok" and ran["variants"]["donated"].get("run"):
            missing = [a for a in ran["variants"]["donated"]["run"]["aliases"] if not a["confirmed"]]
            if missing:
                row["differences"].append(f"--run: {len(missing)} planned alias(es) not confirmed")
        rows.append(row)
    for name, result in results.items():  # the wrapped steps: --run's buffer identities are their truth
        if not name.startswith("library:") or any(r["case"] == name for r in rows):
            continue
        ran = runs.get(name)
        row = {"case": name, "differences": [], "verdict": result.get("verdict", {}).get("kind")}
        if ran is None or ran["status"] != "ok":
            row["differences"].append(f"--run gave no result ({(ran or {}).get('error')})")
        else:
            checks = ran["variants"]["donated"]["run"]["aliases"]
            row["aliases"] = len(checks)
            if not checks or not all(a["confirmed"] for a in checks):
                row["differences"].append(
                    f"--run confirmed {sum(a['confirmed'] for a in checks)} of {len(checks)} aliases"
                )
        rows.append(row)
    return rows


# ---- the chip's report against the deviceless one ----------------------------------------------------


def _copy_key(copy: dict[str, Any]) -> tuple[Any, ...]:
    return (copy["kind"], copy["bytes"], copy.get("of_parameter"), copy.get("source"))


def same_reports(chip: dict[str, Any], deviceless: dict[str, Any]) -> list[dict[str, Any]]:
    """Per target of the chip's report: what differs from the deviceless report (empty: nothing)."""
    there = _results(deviceless)
    rows = []
    for name, result in _results(chip).items():
        other = there.get(name)
        row: dict[str, Any] = {"target": name, "differences": []}
        if other is None or other["status"] != result["status"]:
            row["differences"].append("status or presence differs")
            rows.append(row)
            continue
        if result["status"] != "ok":
            rows.append(row)
            continue
        for variant in ("plain", "donated"):
            mine, theirs = result["variants"][variant], other["variants"][variant]
            for figure in COMPARED:
                if mine["memory"].get(figure) != theirs["memory"].get(figure):
                    row["differences"].append(
                        f"{variant} {figure}: chip {mine['memory'].get(figure)}, deviceless {theirs['memory'].get(figure)}"
                    )
            if [(a["input"], a["output"]) for a in mine["aliases"]] != [
                (a["input"], a["output"]) for a in theirs["aliases"]
            ]:
                row["differences"].append(f"{variant} aliases differ")
            if sorted(map(_copy_key, mine["copies"])) != sorted(map(_copy_key, theirs["copies"])):
                row["differences"].append(f"{variant} copies differ")
            if len(mine.get("moves", [])) != len(theirs.get("moves", [])):
                row["differences"].append(
                    f"{variant} moves: chip {len(mine.get('moves', []))}, deviceless {len(theirs.get('moves', []))}"
                )
            lines = [(p["label"], p["bytes"]) for p in ((mine.get("peak") or {}).get("lines") or [])]
            other_lines = [(p["label"], p["bytes"]) for p in ((theirs.get("peak") or {}).get("lines") or [])]
            if lines != other_lines:
                row["differences"].append(f"{variant} peak by line differs")
            if mine.get("peak") is None or mine["memory"].get("live_peak_bytes") is None:
                row["differences"].append(f"{variant}: no live peak or peak by line on the chip")
        if (
            result["verdict"]["kind"] != other["verdict"]["kind"]
            or result["verdict"]["summary"] != other["verdict"]["summary"]
        ):
            row["differences"].append("verdict differs")
        rows.append(row)
    return rows


# ---- runs against the plan ----------------------------------------------------------------------------


def run_rows(report: dict[str, Any] | None) -> list[dict[str, Any]]:
    rows = []
    for result in (report or {}).get("results", []):
        if result["status"] != "ok":
            rows.append({"target": result["name"], "error": (result.get("error") or {}).get("message")})
            continue
        for variant in ("donated", "plain"):
            run = result["variants"][variant].get("run")
            if run is None:
                rows.append({"target": result["name"], "variant": variant, "not_run": True})
                continue
            for device in run["devices"]:
                measured, predicted = device.get("measured_peak"), device.get("predicted")
                rows.append(
                    {
                        "target": result["name"],
                        "variant": variant,
                        "measured": measured,
                        "predicted": predicted,
                        "code": device.get("code_bytes"),
                        "error": (measured - predicted) / predicted if measured is not None and predicted else None,
                        "unavailable": device.get("unavailable"),
                    }
                )
        above = [f for f in result["verdict"]["findings"] if f["code"] == "run-peak-above-plan"]
        if above:
            rows.append({"target": result["name"], "above_plan": [f["message"] for f in above]})
    return rows


# ---- putting it together -------------------------------------------------------------------------------


def _run_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How many calls were measured, how many equal their plan to the byte, and the largest difference."""
    measured = [r for r in rows if r.get("measured") is not None]
    worst = max(measured, key=lambda r: abs(r["error"]), default=None)
    return {
        "calls": len(measured),
        "exact": sum(1 for r in measured if r["measured"] == r["predicted"]),
        "within_half_percent": sum(1 for r in measured if abs(r["error"]) <= PLAN_TOLERANCE),
        "largest_error": worst["error"] if worst else None,
        "largest_error_call": f"{worst['target']} {worst['variant']}" if worst else None,
        "largest_bytes_above": max((r["measured"] - r["predicted"] for r in measured), default=None),
    }


def _step_seconds(folder: Path) -> dict[str, dict[str, Any]]:
    steps = {}
    for line in (folder / "steps.jsonl").read_text().splitlines() if (folder / "steps.jsonl").exists() else []:
        item = json.loads(line)
        steps[item["step"]] = item
    return steps


def _python_calls(folder: Path) -> dict[str, Any]:
    found = {}
    for path in sorted(folder.glob("capacity-python-*.txt")):
        lines = [line for line in path.read_text().splitlines() if line.startswith("{")]
        found[path.stem.removeprefix("capacity-python-")] = json.loads(lines[-1]) if lines else path.read_text()[-400:]
    return found


def compare(folder: Path, deviceless_dir: Path | None) -> int:
    if folder.suffix == ".tgz" or folder.name.endswith(".tar.gz"):
        unpacked = Path(tempfile.mkdtemp(prefix="tpu-check-"))
        with tarfile.open(folder) as archive:
            archive.extractall(unpacked, filter="data")
        folder = next(p for p in unpacked.iterdir() if p.is_dir())
    needed = ["env.json", "examples-static.json", "corpus-static.json", "corpus-truth.json"]
    missing = [n for n in needed if not (folder / n).exists()]
    if missing:
        print(f"tpu_check: {folder} lacks {', '.join(missing)}", file=sys.stderr)
        return 2
    env = _load(folder / "env.json")
    scratch = deviceless_dir or Path(tempfile.mkdtemp(prefix="tpu-deviceless-"))
    examples_deviceless = _load(scratch / "examples-deviceless.json") or _deviceless(
        ["examples/"], scratch / "examples-deviceless.json"
    )
    corpus_deviceless = _load(scratch / "corpus-deviceless.json") or _deviceless(
        ["hardware/tpu_corpus.py"], scratch / "corpus-deviceless.json"
    )
    truth = _load(folder / "corpus-truth.json")
    corpus = corpus_rows(_load(folder / "corpus-static.json"), _load(folder / "corpus-run.json"), truth)
    same = same_reports(_load(folder / "examples-static.json"), examples_deviceless) + same_reports(
        _load(folder / "corpus-static.json"), corpus_deviceless
    )
    example_runs = run_rows(_load(folder / "examples-run.json"))
    again = run_rows(_load(folder / "examples-run-2.json"))
    runs = example_runs + run_rows(_load(folder / "corpus-run.json"))
    steps = _step_seconds(folder)
    static_s = steps.get("examples-static", {}).get("seconds")
    run_s = steps.get("examples-run", {}).get("seconds")
    capacity = {
        "static": _load(folder / "capacity-fits.json"),
        "run": _load(folder / "capacity-run.json"),
        "python": _python_calls(folder),
        "refusal": (folder / "capacity-refusal.txt").read_text()[-2000:]
        if (folder / "capacity-refusal.txt").exists()
        else None,
        "steps": {k: v for k, v in steps.items() if k.startswith("capacity")},
    }
    measured = [r for r in example_runs + again if r.get("measured") is not None]
    calls = [r for r in runs + again if "variant" in r and not r.get("not_run")]
    checks = {
        "corpus agrees with the chip's truth": all(not r["differences"] for r in corpus),
        "chip reports equal the deviceless ones": all(not r["differences"] for r in same),
        "bundled examples: every --run peak within 0.5% of the plan (both runs)": bool(measured)
        and all(abs(r["error"]) <= PLAN_TOLERANCE for r in measured),
        "every --run call measured": all(r.get("measured") is not None for r in calls),
        "no run-peak-above-plan finding": not any("above_plan" in r for r in runs + again),
        "examples --run within 2x the static check": static_s is not None
        and run_s is not None
        and run_s <= 2 * static_s,
    }
    document = {
        "summary": {
            "examples": _run_summary(example_runs),
            "examples_again": _run_summary(again),
            "corpus": _run_summary(run_rows(_load(folder / "corpus-run.json"))),
            "corpus_cases": len(corpus),
            "same_reports": sum(1 for r in same if not r["differences"]),
            "targets": len(same),
            "run_over_static": round(run_s / static_s, 4) if static_s and run_s else None,
        },
        "date": datetime.date.today().isoformat(),
        "env": env,
        "checks": checks,
        "seconds": {"examples_static": static_s, "examples_run": run_s, "steps": steps},
        "corpus": corpus,
        "same_reports": same,
        "runs": runs,
        "runs_again": again,
        "capacity": capacity,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "tpu-check.json").write_text(json.dumps(document, indent=1) + "\n")
    (RESULTS / "tpu-check.md").write_text(markdown(document))
    print((RESULTS / "tpu-check.md").read_text())
    return 0 if all(checks.values()) else 1


def _bytes(value: int | None) -> str:
    return "—" if value is None else f"{value / MIB:.2f} MiB"


def markdown(document: dict[str, Any]) -> str:
    env = document["env"]
    lines = [
        f"# tpu-check: fieldmem on a {env.get('device_kind')} chip",
        "",
        f"- date: {document['date']}; jax {env.get('jax')}, jaxlib {env.get('jaxlib')}, libtpu {env.get('libtpu')}, "
        f"python {env.get('python')}, {env.get('cpus')} CPUs; `make tpu-check` (hardware/tpu_check.py)",
        f"- the chip's memory for a program (`bytes_limit`): {_bytes((env.get('memory_stats') or {}).get('bytes_limit'))}",
        "",
        "| check | |",
        "|---|---|",
        *(f"| {name} | {'yes' if ok else '**no**'} |" for name, ok in document["checks"].items()),
        "",
        f"`fieldmem check examples/` took {document['seconds']['examples_static']} s on the chip, with `--run` "
        f"{document['seconds']['examples_run']} s (each one process, the chip opened once).",
        "",
        "## The corpus against the chip's own truth",
        "",
        "| case | verdict | aliases | copies plain → donated | moves plain → donated | differences |",
        "|---|---|---:|---|---|---|",
    ]
    for row in document["corpus"]:
        lines.append(
            f"| {row['case']} | {row.get('verdict', '—')} | {row.get('aliases', '—')} | {row.get('copies', '—')} | "
            f"{row.get('moves', '—')} | {'; '.join(row['differences']) or 'none'} |"
        )
    differing = [r for r in document["same_reports"] if r["differences"]]
    lines += [
        "",
        "## The chip's report against the deviceless `tpu:v5e` one",
        "",
        f"{len(document['same_reports']) - len(differing)} of {len(document['same_reports'])} targets identical "
        "(every figure of both variants, aliases, copies, moves, peak by line, verdict).",
        "",
        *(f"- {r['target']}: {'; '.join(r['differences'])}" for r in differing),
        "",
        "## `--run`: measured peak against the plan",
        "",
        "The plan on a TPU: the arguments, the outputs that reuse no donated input and the executable's code "
        "(what the chip's allocator counts: docs/peaks.md). `again`: the bundled examples run once more, in "
        "another process.",
        "",
        "| target | variant | measured | planned | of it code | measured − planned | again |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    again = {(r["target"], r.get("variant")): r for r in document.get("runs_again", [])}
    for row in document["runs"]:
        if "variant" not in row or row.get("not_run"):
            continue
        error = f"{row['error'] * 100:+.3f}%" if row.get("error") is not None else (row.get("unavailable") or "—")[:80]
        other = again.get((row["target"], row["variant"]), {})
        other_error = f"{other['error'] * 100:+.3f}%" if other.get("error") is not None else ""
        lines.append(
            f"| {row['target']} | {row['variant']} | {_bytes(row.get('measured'))} | {_bytes(row.get('predicted'))} | "
            f"{_bytes(row.get('code'))} | {error} | {other_error} |"
        )
    capacity = document["capacity"]
    lines += ["", "## Near the chip's memory", "", "The user's own calls (plain jax, one process each):", ""]
    for name, call in capacity["python"].items():
        if isinstance(call, dict):
            lines.append(f"- {name}: {'ran' if call.get('ran') else 'failed: ' + str(call.get('error'))[:200]}")
    for key in ("static", "run"):
        report = capacity.get(key)
        for result in (report or {}).get("results", []):
            verdict = result.get("verdict") or {}
            notes = [
                f["message"]
                for f in verdict.get("findings", [])
                if f["code"] in ("exceeds-device-memory", "run-not-made")
            ]
            checks = [f"{c['name']} {'passed' if c['passed'] else 'failed'}" for c in result.get("checks", [])]
            lines.append(
                f"- fieldmem{' --run' if key == 'run' else ''} {result['name']}: {result['status']}, "
                f"{verdict.get('summary') or (result.get('error') or {}).get('message')}"
                f"{'; ' + '; '.join(checks) if checks else ''}{'; ' + ' '.join(notes) if notes else ''}"
            )
    steps = capacity["steps"]
    lines += ["", "Exit codes: " + ", ".join(f"{k} {v['rc']}" for k, v in steps.items()), ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("compare")
    one.add_argument("folder", type=Path)
    one.add_argument("--deviceless", type=Path, default=None)
    args = parser.parse_args(argv)
    return compare(args.folder, args.deviceless)


if __name__ == "__main__":
    raise SystemExit(main())
