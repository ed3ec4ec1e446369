"""The verdict corpus on whatever backend jax runs on: fieldmem's verdict against the verdicts jax's own facts admit.

tests/findings/test_verdict_corpus.py holds each case's verdict, read on the CPU, to jax there. A GPU (or TPU) may
decide otherwise (it can write a ``lax.cond``'s update in place where the CPU copies), so this script does
not use those verdicts: for each case it runs the case's function with its donation under plain jax, reads
the facts the test reads (buffer pointers, ``is_deleted()``, ``memory_analysis()``), finds which of the three
verdicts those facts admit, and checks fieldmem's verdict for the same case on the same backend against them.
Writes ``verdict-backend.json`` under ``--out`` and exits 1 when a verdict is not one the facts admit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "findings"), str(ROOT)]

KINDS = ("in-place", "not-in-place", "nothing-to-update")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "hardware" / "results")
    args = parser.parse_args(argv)

    import jax
    from test_verdict_corpus import MIN, _truth, _truth_agrees
    from verdict_cases import CASES

    from fieldmem.parent.checker import check_targets
    from fieldmem.request.options import CheckOptions

    from helpers_compile import make_target

    targets = [
        make_target(
            case.jitted if case.jitted is not None else case.fn,
            (lambda case=case: case.args()),
            donate=list(case.donate) if case.donate is not None else None,
            static=list(case.static) or None,
            name=case.name,
        )
        for case in CASES
    ]
    report = check_targets(targets, CheckOptions(min_bytes=MIN, isolate=False))
    results = {r.name: r for r in report.results}
    rows = []
    for case in CASES:
        truth = _truth(case)
        admitted = [k for k in KINDS if _truth_agrees(dataclasses.replace(case, kind=k), truth) is None]
        result = results[case.name]
        kind = result.verdict.kind if result.verdict is not None else None
        rows.append(
            {
                "case": case.name,
                "cpu_verdict": case.kind,
                "admitted_by_jax": admitted,
                "fieldmem": kind,
                "agrees": kind in admitted,
                "summary": result.verdict.summary if result.verdict is not None else result.error,
            }
        )
    document = {
        "backend": jax.default_backend(),
        "device_kind": jax.devices()[0].device_kind,
        "jax": jax.__version__,
        "cases": len(rows),
        "agree": sum(r["agrees"] for r in rows),
        "differ_from_cpu": [r["case"] for r in rows if r["fieldmem"] != r["cpu_verdict"]],
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "verdict-backend.json").write_text(json.dumps(document, indent=2) + "\n")
    for r in rows:
        mark = "ok " if r["agrees"] else "BAD"
        print(f"{mark} {r['case']:<24} fieldmem {r['fieldmem']:<18} jax admits {','.join(r['admitted_by_jax']) or '-'}")
    print(f"{document['agree']} of {len(rows)} agree on {document['backend']} ({document['device_kind']})")
    return 0 if document["agree"] == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
