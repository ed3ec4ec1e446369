#!/usr/bin/env bash
# `make bench-host`: `make bench` (benchmarks/bench_fast.py) on the lent TPU machine's 13-core host, which has no
# package registry: the image's python3 and jax, with what fieldmem needs beyond them carried as wheels in
# .whl-tpu/ (make tpu-wheels, here), installed under /tmp/site as `make tpu-check` does. Every timed process
# runs with JAX_PLATFORMS=cpu (bench_fast.py sets it; the pod section compiles for tpu:v5e:16x16 without the
# chip), so the chip is never opened. Arguments go to bench_fast.py (e.g. `--skip watch,scaling,backends`:
# one call of the lent machine runs at most 10 minutes, so a whole run is made of several); the results
# go under $OUT (default /tmp/bench-host-out), to be copied into benchmarks/results/ here.
set -u
out=${OUT:-/tmp/bench-host-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if ls .whl-tpu/*.whl >/dev/null 2>&1; then
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site .whl-tpu/*.whl || exit 2
  # their bytecode, as pip writes it when it installs: the image sets PYTHONDONTWRITEBYTECODE, so without it
  # every timed process would compile typer's, rich's and protobuf's source again (0.45 s a run there,
  # benchmarks/results/profile-overhead-13cores.md: 1,300 calls of compile())
  python3 -m compileall -q -j 0 /tmp/site >/dev/null || exit 2
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/site"
fi
python3 -c 'import jax, typer, rich, msgspec' 2>/dev/null || {
  echo "no jax or no carried wheels here: make bench-host runs on the lent machine with .whl-tpu/ (make tpu-wheels)"
  exit 2
}
exec python3 benchmarks/bench_fast.py --out "$out" "$@"
