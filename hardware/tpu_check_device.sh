#!/usr/bin/env bash
# `make tpu-check`, the part that runs on a machine with a TPU chip and no package registry: the image's own
# python3, jax and libtpu, with what fieldmem needs beyond them carried as wheels in .whl-tpu/ (typer, rich,
# msgspec, protobuf, flax, optax, equinox and what they import). Each step has a time limit of its own, so a
# failing one still leaves the others' files; every file goes under $DIR (default /tmp/tpu-check), packed into
# $OUT/tpu-check.tgz after each step, with the log in $OUT/tpu-check.log. `hardware/tpu_check.py compare`
# reads the folder (on any machine) and writes hardware/results/tpu-check.{json,md}.
set -u
out=${OUT:-/tmp/tpu-check-out}
dir=${DIR:-/tmp/tpu-check}
mkdir -p "$out" "$dir"
export PYTHONUNBUFFERED=1
if ls .whl-tpu/*.whl >/dev/null 2>&1; then
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site .whl-tpu/*.whl || exit 2
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/site"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
log="$out/tpu-check.log"
: > "$log"
pack() { tar czf "$out/tpu-check.tgz" -C "$(dirname "$dir")" "$(basename "$dir")" 2>/dev/null; }
# step NAME LIMIT COMMAND...: run it timed, its stdout and stderr to $dir/NAME.txt, its exit code and seconds
# to $dir/steps.jsonl
step() {
  local name=$1 limit=$2
  shift 2
  local began ended rc ms
  began=$(date +%s%N)
  timeout "$limit" "$@" > "$dir/$name.txt" 2>&1
  rc=$?
  ended=$(date +%s%N)
  ms=$(( (ended - began) / 1000000 ))
  printf '{"step": "%s", "rc": %d, "seconds": %d.%03d}\n' "$name" "$rc" $((ms / 1000)) $((ms % 1000)) >> "$dir/steps.jsonl"
  echo "$name rc=$rc $((ms / 1000)).$((ms % 1000)) s" | tee -a "$log"
  pack
}
python3 - > "$dir/env.json" <<'EOF' || { echo "no TPU here: make tpu-check runs on a machine with a TPU chip" | tee -a "$log"; exit 2; }
import json, platform, sys
import jax, jaxlib
devices = jax.devices()
assert devices[0].platform == "tpu", devices
try:
    import importlib.metadata as md
    libtpu = md.version("libtpu")
except Exception:
    libtpu = None
print(json.dumps({"python": sys.version.split()[0], "jax": jax.__version__, "jaxlib": jaxlib.__version__,
                  "libtpu": libtpu, "devices": [str(d) for d in devices], "device_kind": devices[0].device_kind,
                  "memory_stats": devices[0].memory_stats(), "machine": platform.machine(),
                  "cpus": __import__("os").cpu_count()}))
EOF
cat "$dir/env.json" | tee -a "$log"
fm="python3 -m fieldmem"
# the examples: the static check, then with --run (one chip open each)
step examples-static 300 $fm check examples/ -f json -o "$dir/examples-static.json" --no-cache
step examples-run 400 $fm check examples/ --run -f json -o "$dir/examples-run.json" --no-cache
step examples-run-2 400 $fm check examples/ --run -f json -o "$dir/examples-run-2.json"
# the corpus: the chip's report, its runs, and the runtime truth of plain jax
step corpus-static 300 $fm check hardware/tpu_corpus.py -f json -o "$dir/corpus-static.json" --no-cache
step corpus-run 400 $fm check hardware/tpu_corpus.py --run -f json -o "$dir/corpus-run.json" --no-cache
step corpus-truth 300 python3 hardware/tpu_truth.py "$dir/corpus-truth.json"
# near the chip's memory: libtpu's words, the user's own calls, then fieldmem (static with --expect fits, and runs)
step capacity-refusal 120 python3 hardware/tpu_capacity.py refusal
for call in "fits_with_donation donated" "fits_with_donation plain" "by_a_hair plain" "by_a_hair donated"; do
  set -- $call
  step "capacity-python-$1-$2" 180 python3 hardware/tpu_capacity.py "$1" "$2"
done
step capacity-fits 180 $fm check hardware/tpu_capacity.py:fits_with_donation \
  hardware/tpu_capacity.py:by_a_hair --expect fits -f json -o "$dir/capacity-fits.json" --no-cache
step capacity-run 300 $fm check hardware/tpu_capacity.py:fits_with_donation_run \
  hardware/tpu_capacity.py:by_a_hair_run --run -f json -o "$dir/capacity-run.json" --no-cache
pack
tail -n 30 "$log"
