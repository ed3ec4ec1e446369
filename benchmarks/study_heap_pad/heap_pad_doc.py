"""Write benchmarks/results/heap-pad.{json,md} from the study's raw outputs (kept in this script's inputs)."""
import json, re, statistics
from pathlib import Path

def jl(p): return [json.loads(l) for l in Path(p).read_text().splitlines() if l.strip()]

first_13_modes = jl("/work/.device/1/fc.jsonl")            # warm-ups: none / tiny compile first / tiny in a thread
first_13_tuned = jl("/work/.device/5/fc.jsonl")            # base vs three tunables, twice
first_13_single = jl("/work/.device/6/fc.jsonl")           # one tunable at a time
first_2 = jl("/tmp/p/fc3.jsonl")                           # 2 cores: base vs top pad, three times
ab13 = [l.split() for l in Path("/work/.device/6/ab.txt").read_text().splitlines() if " rc=" in l]
ab2 = [l.split() for l in Path("/tmp/p/ab2.txt").read_text().splitlines() if "fm_heavy" in l]
vlog = {}
for machine, path in (("2 cores", "/tmp/p/vlog.txt"), ("13 cores", "/work/.device/1/vlog.txt")):
    passes = {}
    for line in Path(path).read_text().splitlines():
        m = re.search(r"HLO pass: (\S+) time: [^(]*\((\d+) us\)", line)
        if m:
            passes.setdefault(m[1], []).append(int(m[2]) / 1e6)
    top = sorted(passes, key=lambda k: -sum(passes[k]))[:4]
    vlog[machine] = {k: [round(x, 3) for x in passes[k]] for k in top}
# the bench-host run at 1c223da (stopped at its backends section: no GPU plugin on the host), its pairs as printed
log = Path("/work/.device/8/bh.log").read_text()
pairs = {}
for sec, a, b in re.findall(r"(cold|heavy|warm) pair \d: naive ([\d.]+)s fieldmem ([\d.]+)s", log):
    pairs.setdefault(sec, []).append({"naive_s": float(a), "fieldmem_s": float(b)})
bench13 = {sec: {"pairs": rows, "naive_median_s": statistics.median(r["naive_s"] for r in rows),
                 "fieldmem_median_s": statistics.median(r["fieldmem_s"] for r in rows)} for sec, rows in pairs.items()}
for sec in bench13.values():
    sec["ratio"] = round(sec["fieldmem_median_s"] / sec["naive_median_s"], 3)

def compiles(rows):
    return [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items() if k.split("_")[0] in ("env", "mode", "tiny", "plain", "donated") and "plain2" not in k} for r in rows]

doc = {
    "date": "2026-12-07 02:20-03:00 UTC",
    "machine": "2 cores and 13 cores (the TPU host, whose Linux is a sandbox's: /proc/version says 4.4.0)",
    "commit": "58e9ad1 (the worker pads its heap); the A/B before it at e20dfe0 with the environment variables",
    "what": "why the compile-heavy step's first XLA:CPU compile took 11 s on the 13-core host and 6 s on 2 cores, and glibc's heap padding (M_TOP_PAD) that ends it; the study's scripts at 09e7b3f (benchmarks/study_heap_pad/)",
    "first_compile": {
        "how": "one process: import jax, lower and compile the heavy step (benchmarks/heavy.py, fresh constants) plain then donated; compile seconds, process system and user CPU seconds of each (getrusage)",
        "13 cores, warm-ups": compiles(first_13_modes),
        "13 cores, all three tunables (MALLOC_TOP_PAD_=512 MiB, MALLOC_TRIM_THRESHOLD_=4 GiB, MALLOC_MMAP_THRESHOLD_=32 MiB) against none": compiles(first_13_tuned),
        "13 cores, one tunable at a time": compiles(first_13_single),
        "2 cores, MALLOC_TOP_PAD_=512 MiB against none": compiles(first_2),
    },
    "hlo_passes_seconds": {"how": "TF_CPP_VMODULE=hlo_pass_pipeline=1: each pass's time, the plain then the donated compile (one process each machine)", **vlog},
    "fieldmem_check_heavy": {
        "how": "fieldmem check HEAVY (default flags, a fresh cache folder) with the environment's MALLOC_TOP_PAD_=512 MiB (13 cores: and the two other tunables) against without, each on fresh constants; 13 cores: beside the naive script",
        "13 cores": [{"run": r[0], "seconds": float(r[2])} for r in ab13],
        "2 cores": [{"run": r[0] + " " + r[1], "seconds": float(r[2]), "peak_rss_kib": int(r[4])} for r in ab2],
    },
    "bench_host_at_1c223da": {
        "how": "make bench-host (bench_fast.py --skip scaling,watch) at 1c223da, the padding in the worker: it stopped at its backends section (the host has no GPU plugin for gpu:h100), so nothing was written; its cold, heavy and warm pairs as it printed them (alternating fresh processes, naive first). Its pod section, run alone after, is benchmarks/results/fast-13cores.json",
        **bench13,
    },
}
Path("/work/main/benchmarks/results/heap-pad.json").write_text(json.dumps(doc, indent=1) + "\n")
print(json.dumps(bench13, indent=0)[:600])
print(vlog)


def md(doc):
    out = ["# Heap padding: why the first compile was slow on the 13-core host (issue 47)", ""]
    out += [f"- date: {doc['date']}; machine: {doc['machine']}", f"- fieldmem: {doc['commit']}", f"- {doc['what']}", ""]
    fc = doc["first_compile"]
    out += ["## One process compiling the compile-heavy step, plain then donated", "", fc["how"], ""]
    out += ["| machine, setting | plain compile (s) | donated compile (s) | plain: system CPU (s) |", "|---|---:|---:|---:|"]
    for key in ("13 cores, warm-ups", "13 cores, all three tunables (MALLOC_TOP_PAD_=512 MiB, MALLOC_TRIM_THRESHOLD_=4 GiB, MALLOC_MMAP_THRESHOLD_=32 MiB) against none", "13 cores, one tunable at a time", "2 cores, MALLOC_TOP_PAD_=512 MiB against none"):
        for r in fc[key]:
            label = r.get("env") or ("none" if r["mode"] == "plain" else {"tiny": "none; a tiny compile first", "thread": "none; a tiny compile in a thread beside"}[r["mode"]])
            if label == "base":
                label = "none"
            if label == "tuned":
                label = "all three"
            if label == "pad":
                label = "MALLOC_TOP_PAD_=536870912"
            sys_s = r.get("plain_sys", "")
            out.append(f"| {key.split(',')[0]}: {label} | {r['plain_compile']} | {r['donated_compile']} | {sys_s} |")
    out += ["", "## XLA's passes (TF_CPP_VMODULE=hlo_pass_pipeline=1), no padding: seconds, plain then donated", ""]
    out += ["| pass | 2 cores | 13 cores |", "|---|---|---|"]
    hp = doc["hlo_passes_seconds"]
    for name in hp["13 cores"]:
        out.append(f"| {name} | {', '.join(map(str, hp['2 cores'].get(name, [])))} | {', '.join(map(str, hp['13 cores'][name]))} |")
    ab = doc["fieldmem_check_heavy"]
    out += ["", "## fieldmem check of the compile-heavy step and the pod example, with and without the padding", "", ab["how"], ""]
    out += ["| machine | run | seconds |", "|---|---|---:|"]
    for r in ab["13 cores"]:
        out.append(f"| 13 cores | {r['run']} | {r['seconds']} |")
    for r in ab["2 cores"]:
        out.append(f"| 2 cores | {r['run']} (peak RSS {r['peak_rss_kib'] // 1024} MiB) | {r['seconds']} |")
    b = doc["bench_host_at_1c223da"]
    out += ["", "## make bench-host at 1c223da (the padding in the worker): its cold, heavy and warm sections", "", b["how"], ""]
    out += ["| section | naive median (s) | fieldmem median (s) | fieldmem / naive |", "|---|---:|---:|---:|"]
    for sec in ("cold", "heavy", "warm"):
        out.append(f"| {sec} | {b[sec]['naive_median_s']} | {b[sec]['fieldmem_median_s']} | {b[sec]['ratio']} |")
    out.append("")
    return "\n".join(out)


Path("/work/main/benchmarks/results/heap-pad.md").write_text(md(doc))
