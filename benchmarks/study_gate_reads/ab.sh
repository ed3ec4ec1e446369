#!/usr/bin/env bash
# Issue 47 study (benchmarks/results/gate-reads.md): fieldmem check at 100 functions and 5,000 leaves with this
# tree (new) and with it but for the compile gate of .whl-tpu/ov/compile_memory.old.py (old: the gate at 7c1e8a9),
# alternating, on the lent machine (`git show 7c1e8a9:fieldmem/driver/compile_memory.py > .whl-tpu/ov/compile_memory.old.py`,
# then run: bash benchmarks/study_gate_reads/ab.sh, carrying .whl-tpu).
set -u
ROOT=$PWD
ls /tmp/site/typer >/dev/null 2>&1 || pip install --isolated -q --no-index --no-deps --target /tmp/site .whl-tpu/*.whl 2>&1 | tail -2
rm -rf /tmp/old; mkdir -p /tmp/old; cp -r fieldmem benchmarks /tmp/old/; cp .whl-tpu/ov/compile_memory.old.py /tmp/old/fieldmem/driver/compile_memory.py
python3 -m compileall -q -j 0 /tmp/site fieldmem benchmarks /tmp/old >/dev/null 2>&1
export JAX_PLATFORMS=cpu
BASE="${PYTHONPATH:-}:/tmp/site"
mkdir -p /tmp/ov; PYTHONPATH="$ROOT:$BASE" python3 - <<'PY'
import sys; sys.path.insert(0,'benchmarks')
from synth import write_module
from pathlib import Path
write_module(Path('/tmp/ov/f100.py'), salt=11, functions=100, chain=5, leaves=1, size=128)
write_module(Path('/tmp/ov/l5000.py'), salt=12, functions=1, chain=1, leaves=5000, size=8)
write_module(Path('/tmp/ov/f1.py'), salt=13, functions=1, chain=5, leaves=1, size=128)
PY
t() { local s=$(date +%s.%N); "$@" >/dev/null 2>&1; local e=$(date +%s.%N); python3 -c "print(round($e-$s,3))"; }
xla() { PYTHONPATH="$ROOT:$BASE" python3 -c "
import sys; sys.path.insert(0,'benchmarks')
from bench_fast import xla_seconds
from pathlib import Path
print(round(xla_seconds(Path('/tmp/ov/r.json'))[0],3))"; }
for m in ${MODS:-f100 f100 f100 l5000}; do
  for v in old new; do
    if [ $v = old ]; then P="/tmp/old:$BASE"; D=/tmp/old; else P="$ROOT:$BASE"; D=$ROOT; fi
    fl=$(PYTHONPATH="$P" t python3 -c 'import jax')
    w=$(cd $D && PYTHONPATH="$P" t python3 -m fieldmem check /tmp/ov/$m.py -f json -o /tmp/ov/r.json --jobs 1 --no-cache)
    x=$(xla)
    echo "$m $v floor $fl wall $w xla $x own $(python3 -c "print(round($w-$fl-$x,3))") share $(python3 -c "print(round(($w-$fl-$x)/$w,3))")"
  done
done
