"""Issue 47 study: the pod example's peak RSS and wall time against the size of the malloc heap pad.

fieldmem's workers pad the malloc heap (``M_TOP_PAD``, 512 MiB: ``fieldmem.model.machine.HEAP_PAD``) and
keep a ``MALLOC_TOP_PAD_`` the user set: this sets it per run. Alternating runs, naive first, every process
fresh, ``JAX_PLATFORMS=cpu``; peak RSS of all of a run's processes together, sampled as ``bench_backends``
samples it. Writes ``$OUT/pod-{pads,arenas}.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_backends  # noqa: E402

#: each setting: the environment a fieldmem run gets (None: unset), by name
SETTINGS: dict[str, dict[str, dict[str, str | None]]] = {
    "pads": {
        f"pad {name}": {"MALLOC_TOP_PAD_": pad}
        for name, pad in (
            ("glibc's 128 KiB", "131072"),
            ("64 MiB", str(64 << 20)),
            ("128 MiB", str(128 << 20)),
            ("256 MiB", str(256 << 20)),
            ("512 MiB", None),
        )
    },
    "arenas": {f"arenas {n}": {"MALLOC_ARENA_MAX": n} for n in ("8", "16", None)},
    "arenas26": {f"arenas {n}": {"MALLOC_ARENA_MAX": n} for n in ("26", "16", None)},
}
KNOBS = ("MALLOC_TOP_PAD_", "MALLOC_ARENA_MAX")


def main() -> None:
    out = Path(os.environ.get("OUT", "/tmp/pod-pad"))
    out.mkdir(parents=True, exist_ok=True)
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    which = sys.argv[2] if len(sys.argv) > 2 else "pads"
    PADS = SETTINGS[which]
    os.environ["JAX_PLATFORMS"] = "cpu"
    for knob in KNOBS:
        os.environ.pop(knob, None)
    report = str(out / "pod-report.json")
    runs: dict[str, list[dict[str, float]]] = {"naive": [], **{name: [] for name in PADS}}
    for _ in range(rounds):
        seconds, largest, tree = bench_backends.measured_tree(
            [sys.executable, "benchmarks/naive.py", "--backend", "pod"]
        )
        runs["naive"].append({"wall_s": seconds, "largest_mib": largest, "tree_mib": tree})
        print(f"naive {seconds:.1f} s {tree:.0f} MiB", flush=True)
        for name, setting in PADS.items():
            for knob, value in setting.items():
                if value is None:
                    os.environ.pop(knob, None)
                else:
                    os.environ[knob] = value
            command = bench_backends.fieldmem_command([bench_backends.POD], bench_backends.POD_BACKEND, report)
            seconds, largest, tree = bench_backends.measured_tree(command)
            runs[name].append({"wall_s": seconds, "largest_mib": largest, "tree_mib": tree})
            print(f"{name}: {seconds:.1f} s {tree:.0f} MiB", flush=True)
        for knob in KNOBS:
            os.environ.pop(knob, None)
    naive_wall = statistics.median(r["wall_s"] for r in runs["naive"])
    naive_tree = max(r["tree_mib"] for r in runs["naive"])
    summary = {
        name: {
            "median_wall_s": round(statistics.median(r["wall_s"] for r in rs), 2),
            "most_tree_mib": round(max(r["tree_mib"] for r in rs)),
            "wall_over_naive": round(statistics.median(r["wall_s"] for r in rs) / naive_wall, 3),
            "tree_over_naive": round(max(r["tree_mib"] for r in rs) / naive_tree, 3),
        }
        for name, rs in runs.items()
    }
    document = {
        "meta": {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "cores": os.cpu_count(),
            "rounds": rounds,
            "settings": which,
            "command": "fieldmem check examples/pod/train_step.py --backend tpu:v5e:16x16 -f json --no-cache",
        },
        "runs": runs,
        "summary": summary,
    }
    (out / f"pod-{which}.json").write_text(json.dumps(document, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
