#!/usr/bin/env bash
# The wheels `make tpu-check` carries to a TPU machine with no package index (hardware/tpu_check_device.sh
# installs them with --target): what fieldmem's command and the corpus import beyond the image's python3, jax,
# jaxlib, libtpu and numpy, at the versions of requirements-test.txt (read from this checkout's .venv), for
# CPython 3.11 on x86-64 Linux. Writes .whl-tpu/ (ignored by git; about 5 MB).
set -euo pipefail
cd "$(dirname "$0")/.."
pip=.venv/bin/pip
packages="absl-py annotated-doc equinox flax jaxtyping msgpack msgspec optax rich markdown-it-py mdurl pygments
shellingham treescope typer wadler-lindig PyYAML protobuf typing_extensions"
specs=()
for name in $packages; do
  specs+=("$name==$($pip show "$name" | sed -n 's/^Version: //p')")
done
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl-tpu "${specs[@]}"
ls .whl-tpu
