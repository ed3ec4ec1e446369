# fieldmem: the two commands a newcomer needs are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-fast lint golden bench bench-quick screenshot clean fuzz

$(STAMP): pyproject.toml requirements-test.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-test.txt
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

# Check the bundled examples: the table, then the Field example in detail.
demo: $(STAMP)
	$(BIN)/fieldmem check examples/field.py examples/sparse_row.py examples/stencil_scan.py examples/optimizer.py \
	  --html fieldmem-report.html; \
	  status=$$?; [ $$status -le 1 ] || exit $$status
	$(BIN)/fieldmem check examples/field.py -v
	$(BIN)/fieldmem check examples/advisor.py --suggest
	$(BIN)/fieldmem check examples/forward.py:create_field,update1,update2 examples/precision_chain.py
	$(BIN)/fieldmem check examples/sharded.py examples/sparse_row.py --devices 4 --probe
	@echo "the HTML report of the examples: fieldmem-report.html"

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
	$(BIN)/ruff check fieldmem tests benchmarks
	$(BIN)/ruff format --check fieldmem tests benchmarks
	$(BIN)/mypy fieldmem

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
	rm -rf $(VENV) .pytest_cache build *.egg-info

# fieldmem vs the naive baseline (examples, synthetic modules, HLO parsing):
# writes benchmarks/results/*.md; under ~10 minutes on 2 cores.
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_examples.py
	$(BIN)/python benchmarks/bench_suite.py
	$(BIN)/python benchmarks/bench_parse.py
	$(BIN)/python benchmarks/bench_levers.py
	$(BIN)/python benchmarks/bench_probe.py

# A smoke run of the synthetic suite (a minute): results go to benchmarks/results/suite-quick.*
bench-quick: $(STAMP)
	$(BIN)/python benchmarks/bench_suite.py --quick
