"""``make gpu-check``: fieldmem's GPU prediction, made without the device, against the machine's real GPU.

For every bundled example (``examples/*.py``) two fieldmem runs, each in its
own process:

- **predicted**: ``fieldmem check EXAMPLES --backend gpu:KIND`` compiled without
  the device (``KIND`` is the machine's GPU when fieldmem ships its spec, e.g.
  an H200 is predicted as ``gpu:h200``; else ``gpu:h100``; ``--kind`` chooses);
- **measured**: ``fieldmem check EXAMPLES --backend gpu --run`` on the GPU: the
  same figures compiled on the device (with XLA's autotuning), and each
  variant run once, its peak read from ``Device.memory_stats()``.

Per example and variant it writes the predicted figures against the ones
compiled on the GPU and the measured peak into ``hardware/results/gpu-check.json``
and a markdown table ``gpu-check.md`` (dated). Without a GPU it says so in one
line and exits 2. ``--predicted P.json --measured M.json`` builds the table from
two reports already written (no compile; the tests use it with a recorded reading).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "hardware" / "results"
# the figures compared, in the report's names
FIGURES = ("footprint_bytes", "live_peak_bytes", "temp_bytes", "peak_bytes")
# jax's device_kind (a part of it) -> fieldmem's deviceless GPU kind
KINDS = {"H100": "h100", "H200": "h200", "A100": "a100", "B200": "b200"}


class NoGpu(Exception):
    """There is no GPU here for jax to run on."""


def examples() -> list[str]:
    return [str(p.relative_to(ROOT)) for p in sorted((ROOT / "examples").glob("*.py"))]


def find_gpu(python: str = sys.executable) -> str:
    """The device kind of the machine's first GPU, asked of jax in a fresh process.

    Raises:
        NoGpu: jax sees no GPU (the reason in one line).
    """
    probe = "import jax; print(jax.devices('gpu')[0].device_kind)"
    try:
        done = subprocess.run(
            [python, "-c", probe], capture_output=True, text=True, timeout=300, env=_environment(), cwd=ROOT
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NoGpu(f"cannot ask jax for a GPU: {exc}") from None
    if done.returncode != 0 or not done.stdout.strip():
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        reason = lines[-1].strip() if lines else f"exit {done.returncode}"
        raise NoGpu(f"jax finds no GPU here ({reason[:200]})")
    return done.stdout.strip().splitlines()[-1]


def predicted_kind(device_kind: str, asked: str) -> str:
    """The deviceless GPU kind to predict with: ``asked``, or (``auto``) the machine's own when known."""
    if asked != "auto":
        return asked
    upper = device_kind.upper()
    return next((kind for part, kind in KINDS.items() if part in upper), "h100")


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def run_fieldmem(backend: str, output: Path, *extra: str, python: str = sys.executable) -> None:
    """``fieldmem check`` of every bundled example on ``backend``, its JSON report written to ``output``."""
    command = [python, "-m", "fieldmem", "check", *examples(), "--backend", backend, "--min-bytes", "0"]
    command += ["-f", "json", "-o", str(output), "--no-cache", *extra]
    done = subprocess.run(command, cwd=ROOT, env=_environment(), capture_output=True, text=True)
    if done.returncode not in (0, 1) or not output.exists():
        lines = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
        # the whole end of what it said, for a run on a lent machine that cannot be repeated at will
        print("\n".join(lines[-40:]), file=sys.stderr)
        raise SystemExit(f"gpu-check: fieldmem check --backend {backend} failed: {lines[-1]}")


def _figures(variant: dict[str, Any] | None) -> dict[str, int | None]:
    memory = (variant or {}).get("memory", {})
    return {name: memory.get(name) for name in FIGURES}


def _measured_peak(variant: dict[str, Any] | None) -> int | None:
    """The measured peak of the variant's run (the device with the largest one), from memory_stats()."""
    run = (variant or {}).get("run") or {}
    peaks = [d.get("measured_peak") for d in run.get("devices", ()) if d.get("measured_peak") is not None]
    return max(peaks) if peaks else None


def compare(predicted: dict[str, Any], measured: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target and variant: predicted figures, the same compiled on the GPU, the measured peak."""
    on_gpu = {r["name"]: r for r in measured.get("results", ())}
    rows = []
    for result in predicted.get("results", ()):
        other = on_gpu.get(result["name"])
        for variant in ("plain", "donated"):
            mine = (result.get("variants") or {}).get(variant)
            theirs = ((other or {}).get("variants") or {}).get(variant)
            figures, compiled = _figures(mine), _figures(theirs)
            # a figure one side cannot give (a compile on the GPU may lack the buffer assignment that the live
            # peak is read from) is compared with nothing: it is listed, not counted as a difference
            both = [f for f in FIGURES if figures[f] is not None and compiled[f] is not None]
            peak = _measured_peak(theirs)
            footprint = figures["footprint_bytes"]
            rows.append(
                {
                    "target": result["name"],
                    "variant": variant,
                    "status": {"predicted": result.get("status"), "measured": (other or {}).get("status", "missing")},
                    "predicted": figures,
                    "compiled_on_gpu": compiled,
                    "copies": {
                        "predicted": len((mine or {}).get("copies", ())),
                        "compiled_on_gpu": len((theirs or {}).get("copies", ())) if theirs else None,
                    },
                    "measured_peak_bytes": peak,
                    "measured_minus_predicted_footprint": None
                    if peak is None or footprint is None
                    else peak - footprint,
                    "figures_compared": both,
                    "figures_missing_on_gpu": [f for f in FIGURES if figures[f] is not None and compiled[f] is None],
                    "same_figures": theirs is not None and bool(both) and all(figures[f] == compiled[f] for f in both),
                }
            )
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    measured = [r for r in rows if r["measured_minus_predicted_footprint"] is not None]
    return {
        "rows": len(rows),
        "same_figures": sum(1 for r in rows if r["same_figures"]),
        "figures_missing_on_gpu": sorted({f for r in rows for f in r.get("figures_missing_on_gpu", ())}),
        "measured": len(measured),
        "largest_abs_difference_bytes": max(
            (abs(r["measured_minus_predicted_footprint"]) for r in measured), default=None
        ),
    }


def _size(value: int | None) -> str:
    if value is None:
        return "—"
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale:
            return f"{sign}{value / scale:.2f} {unit}"
    return f"{sign}{value} B"


def markdown(document: dict[str, Any]) -> str:
    lines = [
        f"# gpu-check: {document['predicted_backend']} predicted without the device vs {document['gpu']}",
        "",
        f"- date: {document['date']}",
        f"- jax {document['jax']}; predicted: `fieldmem check --backend {document['predicted_backend']}` "
        "(compiled without the device); on the GPU: `fieldmem check --backend gpu --run`",
        f"- {document['summary']['same_figures']} of {document['summary']['rows']} variants have the same "
        "figures compiled with and without the device (each figure both compiles give)",
        *(
            [f"- not given by the compile on the GPU: {', '.join(missing)}"]
            if (missing := document["summary"].get("figures_missing_on_gpu"))
            else []
        ),
        "",
        "| target | variant | footprint predicted | footprint on GPU | temp predicted | temp on GPU "
        "| copies predicted / on GPU | measured peak | measured − predicted |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in document["rows"]:
        p, g = row["predicted"], row["compiled_on_gpu"]
        copies = row["copies"]
        lines.append(
            f"| {row['target']} | {row['variant']} | {_size(p['footprint_bytes'])} | {_size(g['footprint_bytes'])} "
            f"| {_size(p['temp_bytes'])} | {_size(g['temp_bytes'])} "
            f"| {copies['predicted']} / {'—' if copies['compiled_on_gpu'] is None else copies['compiled_on_gpu']} "
            f"| {_size(row['measured_peak_bytes'])} | {_size(row['measured_minus_predicted_footprint'])} |"
        )
    return "\n".join(lines) + "\n"


def write_results(predicted: dict[str, Any], measured: dict[str, Any], out: Path, date: str | None = None) -> dict:
    """Write ``gpu-check.json`` and ``gpu-check.md`` under ``out`` from the two reports; return the document."""
    rows = compare(predicted, measured)
    deviceless = predicted.get("deviceless") or {}
    kinds = [d.get("kind") for d in measured.get("devices", ()) if d.get("kind")]
    document = {
        "date": date or datetime.date.today().isoformat(),
        "gpu": kinds[0] if kinds else measured.get("backend", "?"),
        "predicted_backend": deviceless.get("backend") or predicted.get("backend", "?"),
        "jax": predicted.get("jax_version"),
        "rows": rows,
        "summary": summary(rows),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu-check.json").write_text(json.dumps(document, indent=2) + "\n")
    (out / "gpu-check.md").write_text(markdown(document))
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", default="auto", help="deviceless GPU kind to predict with (default: the GPU's own)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for gpu-check.json and gpu-check.md")
    parser.add_argument("--predicted", type=Path, help="a report already written (with --measured: no compile)")
    parser.add_argument("--measured", type=Path, help="a --backend gpu --run report already written")
    args = parser.parse_args(argv)
    if (args.predicted is None) != (args.measured is None):
        print("gpu-check: give both --predicted and --measured, or neither", file=sys.stderr)
        return 2
    if args.predicted is None:
        try:
            device_kind = find_gpu()
        except NoGpu as exc:
            print(f"gpu-check: {exc}: run it on a machine with an NVIDIA GPU", file=sys.stderr)
            return 2
        kind = predicted_kind(device_kind, args.kind)
        args.out.mkdir(parents=True, exist_ok=True)
        args.predicted, args.measured = args.out / "gpu-check.predicted.json", args.out / "gpu-check.measured.json"
        run_fieldmem(f"gpu:{kind}", args.predicted)
        run_fieldmem("gpu", args.measured, "--run")
    try:
        predicted = json.loads(args.predicted.read_text())
        measured = json.loads(args.measured.read_text())
    except (OSError, ValueError) as exc:
        print(f"gpu-check: cannot read the reports: {exc}", file=sys.stderr)
        return 2
    document = write_results(predicted, measured, args.out)
    print(f"gpu-check: {len(document['rows'])} variants compared; {args.out / 'gpu-check.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
