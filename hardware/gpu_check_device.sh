#!/usr/bin/env bash
# `make gpu-check` on a lent GPU machine that has no package registry: the image's own python3 and jax, with
# what fieldmem needs beyond them carried as wheels in .whl/ (msgspec; nvidia-cuda-nvcc 13, whose ptxas the
# deviceless gpu:KIND compile uses with jax's CUDA 13 plugin). Writes under $OUT (default /tmp/gpu-check):
# env.txt (machine, versions, one fieldmem check --run of the Field example), gpu_check.log, and
# gpu-check.{json,md,predicted.json,measured.json} (hardware/gpu_check.py), and verdict-backend.json with
# corpus-gpu.txt: the verdict corpus with jax on the GPU, fieldmem's verdicts against those jax's own facts
# admit there (hardware/verdict_backend.py). Each step has its own time limit
# so that a failing one still leaves the others' files.
set -u
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="/tmp/site:$PWD"
{
  date -u
  nvidia-smi -L
  python3 -c "import sys, jax, jaxlib; print(sys.version); print('jax', jax.__version__, 'jaxlib', jaxlib.__version__); print(jax.devices())"
  python3 -m pip list 2>/dev/null | grep -i -E "^(jax|nvidia-cuda|msgspec|protobuf|typer|rich|numpy|flax|optax|equinox)"
  echo "--- fieldmem check examples/field.py --backend gpu --run -v"
  timeout 90 python3 -m fieldmem check examples/field.py --backend gpu --run --no-cache -v
  echo "rc=$?"
} > "$out/env.txt" 2>&1
timeout 300 python3 hardware/gpu_check.py --out "$out" > "$out/gpu_check.log" 2>&1
echo "rc=$?" >> "$out/gpu_check.log"
JAX_PLATFORMS=cuda,cpu timeout 150 python3 hardware/verdict_backend.py --out "$out" > "$out/corpus-gpu.txt" 2>&1
echo "rc=$?" >> "$out/corpus-gpu.txt"
tail -n 5 "$out/gpu_check.log" "$out/corpus-gpu.txt"
