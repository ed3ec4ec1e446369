#!/usr/bin/env bash
# A/B: glibc malloc tunables for fieldmem's worker, on the heavy step and the pod; alternate; walls to $OUT/ab.txt
set -u
export PYTHONPATH="$PWD:${PYTHONPATH:-}:/tmp/site" JAX_PLATFORMS=cpu PYTHONUNBUFFERED=1
TUNE="MALLOC_TOP_PAD_=536870912 MALLOC_TRIM_THRESHOLD_=4294967296 MALLOC_MMAP_THRESHOLD_=33554432"
log=$OUT/ab.txt
t() { local tag=$1; shift; local s=$(date +%s.%N); timeout 200 "$@" < /dev/null > $OUT/last.log 2>&1; local rc=$?; local e=$(date +%s.%N); echo "$tag rc=$rc $(python3 -c "print(round($e-$s,2))")" | tee -a $log; }
# single tunables on the first compile
for one in "MALLOC_MMAP_THRESHOLD_=33554432" "MALLOC_TRIM_THRESHOLD_=4294967296" "MALLOC_TOP_PAD_=536870912"; do
  env TAG=$one $one timeout 100 python3 .whl-test/first_compile.py plain $OUT/fc.jsonl < /dev/null 2>/dev/null | python3 -c "import json,sys;r=json.loads(sys.stdin.read());print(r['env'],round(r['plain_compile'],2),round(r['donated_compile'],2),r['plain_sys'])" | tee -a $log
done
for i in 1 2; do
  m=/tmp/heavy_ab_$i.py; python3 -c "import sys;sys.path.insert(0,'benchmarks');import heavy;from pathlib import Path;heavy.write_module(Path('$m'),salt=$RANDOM)"
  t naive_heavy python3 benchmarks/naive.py $m
  m2=/tmp/heavy_ab_b$i.py; python3 -c "import sys;sys.path.insert(0,'benchmarks');import heavy;from pathlib import Path;heavy.write_module(Path('$m2'),salt=$RANDOM)"
  FIELDMEM_CACHE_DIR=/tmp/fmc_a$i t fm_heavy python3 -m fieldmem check $m2
  m3=/tmp/heavy_ab_c$i.py; python3 -c "import sys;sys.path.insert(0,'benchmarks');import heavy;from pathlib import Path;heavy.write_module(Path('$m3'),salt=$RANDOM)"
  env FIELDMEM_CACHE_DIR=/tmp/fmc_b$i $TUNE bash -c "$(declare -f t); log=$log OUT=$OUT; t fm_heavy_tuned python3 -m fieldmem check $m3"
done
t naive_pod python3 benchmarks/naive.py --backend pod
t fm_pod python3 -m fieldmem check examples/pod/train_step.py --backend tpu:v5e:16x16 -f json -o /tmp/pod.json --no-cache
env $TUNE bash -c "$(declare -f t); log=$log OUT=$OUT; t fm_pod_tuned python3 -m fieldmem check examples/pod/train_step.py --backend tpu:v5e:16x16 -f json -o /tmp/pod2.json --no-cache"
env $TUNE bash -c "$(declare -f t); log=$log OUT=$OUT; t fm_pod_tuned_j1 python3 -m fieldmem check examples/pod/train_step.py --backend tpu:v5e:16x16 -f json -o /tmp/pod3.json --no-cache -j 1"
