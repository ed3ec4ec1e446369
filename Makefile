# fieldmem: the two commands a newcomer needs are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo demo-backends test test-fast lint golden bench bench-quick bench-more bench-backends gpu-check tpu-check tpu-check-report tpu-wheels bench-host screenshot clean fuzz schema package-check

# The installers' output goes to a log, shown only when a step fails.
PIP := $(BIN)/pip install --quiet --disable-pip-version-check
INSTALL_LOG := $(VENV).install.log

# What the demo needs alone (requirements-demo.txt; flax without the dependencies flax.struct does not
# import), its modules compiled as they are first imported: about a quarter of the test setup (CHANGELOG).
DEMO_STAMP := $(VENV)/.demo-installed
DEMO_NO_DEPS := flax==0.12.8

$(DEMO_STAMP): pyproject.toml requirements-demo.txt
	@echo "make: installing fieldmem and what the demo needs into $(VENV): jax, jaxlib, flax (about 580 MB; log: $(INSTALL_LOG))"
	@{ $(PYTHON) -m venv $(VENV) && $(PIP) --upgrade pip && $(PIP) --no-compile -r requirements-demo.txt \
	  && $(PIP) --no-compile --no-deps $(DEMO_NO_DEPS) && $(PIP) --no-deps -e . ; } > $(INSTALL_LOG) 2>&1 \
	  || { cat $(INSTALL_LOG); exit 1; }
	@touch $(DEMO_STAMP)

# The test setup adds the test requirements, the GPU and TPU compilers among them, to the demo's, then writes
# the bytecode of everything installed and of fieldmem, as pip does when it installs: the demo's packages were
# installed without it, and where PYTHONDONTWRITEBYTECODE is set no process writes it, so each of the suite's
# hundreds of processes would compile jax's source again (`import jax` took 5.2 s against 2.1 s on 2 cores).
$(STAMP): $(DEMO_STAMP) requirements-test.txt
	@echo "make: installing the test requirements into $(VENV) (the GPU and TPU compilers among them; log: $(INSTALL_LOG))"
	@{ $(PIP) -r requirements-test.txt && $(PIP) --no-deps -e . \
	  && $(BIN)/python -m compileall -q -j 0 "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" fieldmem ; } \
	  > $(INSTALL_LOG) 2>&1 || { cat $(INSTALL_LOG); exit 1; }
	@touch $(STAMP)

setup: $(STAMP)

# Check the bundled examples: the table, then the Field example in detail.
# Each command is shown as a user would type it, then what fieldmem prints.
demo: $(DEMO_STAMP)
	@echo '$$ fieldmem check examples/field.py examples/sparse_row.py examples/stencil_scan.py examples/optimizer.py --html fieldmem-report.html'
	@$(BIN)/fieldmem check examples/field.py examples/sparse_row.py examples/stencil_scan.py examples/optimizer.py \
	  --html fieldmem-report.html; status=$$?; [ $$status -le 1 ] || exit $$status
	@echo; echo '$$ fieldmem check examples/field.py -v'
	@$(BIN)/fieldmem check examples/field.py -v
	@echo; echo '$$ fieldmem check examples/advisor.py --suggest'
	@$(BIN)/fieldmem check examples/advisor.py --suggest
	@echo; echo '$$ fieldmem check examples/forward.py:create_field,update1,update2 examples/precision_chain.py'
	@$(BIN)/fieldmem check examples/forward.py:create_field,update1,update2 examples/precision_chain.py
	@echo; echo '$$ fieldmem check examples/sharded.py examples/sparse_row.py --devices 4 --probe'
	@$(BIN)/fieldmem check examples/sharded.py examples/sparse_row.py --devices 4 --probe
	@echo; echo "the HTML report of the examples: fieldmem-report.html"
	@echo "make demo-backends: the same update compiled for an H100 and a TPU v5e without either (adds their compilers)"

# The GPU and TPU compilers (fieldmem[gpu,tpu], as pinned for the tests), then one update on three backends.
demo-backends: $(DEMO_STAMP)
	@echo "make: installing the GPU and TPU compilers into $(VENV) (log: $(INSTALL_LOG))"
	@$(PIP) --no-compile libtpu==0.0.42.1 jax-cuda12-plugin==0.10.2 jax-cuda12-pjrt==0.10.2 \
	  nvidia-cuda-nvcc-cu12==12.9.86 > $(INSTALL_LOG) 2>&1 || { cat $(INSTALL_LOG); exit 1; }
	@echo '$$ fieldmem check examples/interior.py --backend cpu,gpu:h100,tpu:v5e'
	@$(BIN)/fieldmem check examples/interior.py --backend cpu,gpu:h100,tpu:v5e

test: $(STAMP)
	$(BIN)/python -m pytest -q

# Pure parsing and option tests only (no XLA compile).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not compile"

# Fuzz the HLO parser and the buffer decoder for 2 minutes with a fresh seed (make test runs 3 s of it):
# mutants that fail other than with the reader's own error, or take over 2 s, go to tests/golden_fuzz/new/.
fuzz: $(STAMP)
	$(BIN)/python tests/fuzzing.py --seconds $${FUZZ_SECONDS:-120}

# ruff (rules and format in pyproject.toml) over the code and its tests, mypy over the package.
lint: $(STAMP)
	$(BIN)/ruff check fieldmem tests benchmarks hardware
	$(BIN)/ruff format --check fieldmem tests benchmarks hardware
	$(BIN)/mypy fieldmem

# The JSON Schemas of the report and the baseline (fieldmem/schemas), written again from the records
# (tests/render/test_schema.py fails while they differ).
schema: $(STAMP)
	$(BIN)/python -m fieldmem.render.schema

# Build the wheel and the sdist (dist/), install the wheel with the tpu and gpu extras into a fresh venv
# (build/package-check/venv) and run the demo from it, outside the checkout (about a minute; .ci/run runs it).
package-check: $(STAMP)
	$(BIN)/python tests/package_check.py

# The Field example's HTML report as a PNG for the docs (needs chromium).
screenshot: $(STAMP)
	$(BIN)/python docs/make_screenshot.py

# Regenerate both golden folders from real compiles (jax as pinned above): the HLO
# texts of tests/golden and the buffer assignments of tests/golden_buffers. With the
# pinned jax the committed files come back byte for byte (`git status` stays clean).
golden: $(STAMP)
	$(BIN)/python tests/golden/regenerate.py
	$(BIN)/python tests/golden_buffers/regenerate.py

clean:
	rm -rf $(VENV) .pytest_cache build dist *.egg-info

# Issues 17 and 32 in one run (about 35 minutes on 2 cores: benchmarks/results/fast.json's meta.seconds):
# fieldmem by default against the naive script, cold on fresh constants (20 functions; a compile-heavy
# training step), warm, its own overhead by leaves and functions, the bundled examples per backend, the
# 256-chip pod example, own time against HLO instructions, and the watch loop: writes
# benchmarks/results/fast.{json,md} (the run replaces the current one, which joins the JSON's history;
# a partial run joins the history alone); exit 1 when a target is missed. Run it on a quiet machine.
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_fast.py

# A smoke run of the same (a minute or two, one pair each): benchmarks/results/fast-quick.{json,md}.
bench-quick: $(STAMP)
	$(BIN)/python benchmarks/bench_fast.py --quick

# The older, longer benchmarks (about 10 minutes more): the bundled examples, the synthetic suite
# (functions, chain, leaves, sizes), HLO parsing, the speed levers and the in-place probe.
bench-more: $(STAMP)
	$(BIN)/python benchmarks/bench_examples.py
	$(BIN)/python benchmarks/bench_suite.py
	$(BIN)/python benchmarks/bench_parse.py
	$(BIN)/python benchmarks/bench_levers.py
	$(BIN)/python benchmarks/bench_probe.py

# Deviceless compile time per backend (cpu, gpu:h100, tpu:v5e) against the naive script, and the
# 256-chip pod example: writes benchmarks/results/backends.{json,md} (the pod check alone takes minutes).
bench-backends: $(STAMP)
	$(BIN)/python benchmarks/bench_backends.py

# On a machine with an NVIDIA GPU: fieldmem's prediction without the device against the GPU's own compile
# and memory_stats() (hardware/results/gpu-check.{json,md}). Without a GPU: one line, exit 2.
gpu-check: $(STAMP)
	$(BIN)/python hardware/gpu_check.py

# On a machine with a TPU chip (the image's python3, jax and libtpu; no package index there): fieldmem's static
# check and --run of the examples and of hardware/tpu_corpus.py, plain jax's truth on the corpus, and two
# programs near the chip's memory, each step in its own process, packed into $$OUT/tpu-check.tgz (default
# /tmp/tpu-check-out). fieldmem's dependencies travel as wheels in .whl-tpu/ (make tpu-wheels, here).
tpu-check:
	bash hardware/tpu_check_device.sh

# Then, on any machine with the venv: the chip's outputs against their truth and against the deviceless tpu:v5e
# reports compiled here: hardware/results/tpu-check.{json,md} (DIR=the .tgz or its folder); exit 1 on a miss.
tpu-check-report: $(STAMP)
	$(BIN)/python hardware/tpu_check.py compare $(DIR)

tpu-wheels: $(STAMP)
	bash hardware/tpu_wheels.sh

# `make bench` on the lent TPU machine's 13-core host (the image's python3 and jax, fieldmem's dependencies
# from .whl-tpu/, every timed process on the CPU or deviceless): ARGS go to bench_fast.py, results to $$OUT.
bench-host:
	bash benchmarks/bench_device.sh $(ARGS)
