# forescale: two commands set up everything on a fresh machine.
#   make backtest   the main job: backtest on the bundled real trace (base install: no torch, no test tools)
#   make test       the whole test suite (everything: probe + test extras, Prometheus, chromium, Helm engine)
# On a machine whose pip would pick a CUDA torch, get the CPU build with
#   make test TORCH_INDEX=https://download.pytorch.org/whl/cpu
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
BASE_STAMP := $(VENV)/.installed-base
FULL_STAMP := $(VENV)/.installed-full
TORCH_INDEX ?=
# the lock: every distribution's version as CI tested it (refresh: `make lock`, see docs/development.md)
LOCK := constraints.txt
LOCK_EXTRAS := --extra probe --extra test --extra docs --extra dev --extra models --extra fleet

.PHONY: install backtest test bench protos docs reference lock clean test-loaded lint format

$(BIN)/python:
	$(PY) -m venv $(VENV)

# `pip install '.[fast]'` as a user would: the scaler and the backtest with the compiled HPA loop, no torch
$(BASE_STAMP): pyproject.toml $(LOCK) | $(BIN)/python
	$(BIN)/pip install -q -c $(LOCK) -e '.[fast]'
	touch $@

# everything the tests need: the probe's torch==2.13.0 (CPU unless TORCH_INDEX says otherwise) and the test tools
$(FULL_STAMP): pyproject.toml $(LOCK) | $(BIN)/python
	$(if $(TORCH_INDEX),$(BIN)/pip install -q --index-url $(TORCH_INDEX) torch==2.13.0)
	$(BIN)/pip install -q -c $(LOCK) -e '.[probe,test]'
	touch $@ $(BASE_STAMP)

install: $(FULL_STAMP)

backtest: $(BASE_STAMP)
	$(BIN)/forescale backtest $(ARGS)

test: $(FULL_STAMP)
	bash tests/system-deps.sh
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(FULL_STAMP)
	for b in tests/bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

protos: $(FULL_STAMP)
	$(BIN)/python -m scaler.protogen

# the CLI and metadata reference, generated from click and spec.KEYS (a test checks it is current)
reference: $(BASE_STAMP)
	$(BIN)/python -m scaler.cli.docref > docs/reference.md

docs: $(FULL_STAMP)
	$(BIN)/python -m mkdocs build --strict

# refresh the lock after changing pyproject's dependencies (UPGRADE=1: move every pin to the newest release)
lock: | $(BIN)/python
	$(BIN)/pip install -q uv==0.13.8
	$(BIN)/uv pip compile pyproject.toml $(LOCK_EXTRAS) --python-version 3.11 --universal --no-header \
		$(if $(UPGRADE),--upgrade) -o $(LOCK)

clean:
	rm -rf $(VENV) build *.egg-info

# the whole suite beside LOAD_BURNERS CPU-burning processes: a test may not depend on the machine being idle
LOAD_BURNERS ?= 2
test-loaded: $(FULL_STAMP)
	bash tests/system-deps.sh
	bash tests/loaded.sh $(LOAD_BURNERS) $(BIN)/python -m pytest $(PYTEST_ARGS)

# ruff's lint and mypy as the suite runs them (tests/test_lint.py; rules and strictness in pyproject.toml)
lint: $(FULL_STAMP)
	$(BIN)/ruff check scaler forecaster tests examples
	$(BIN)/mypy

# ruff's formatter over the tree (tests/test_lint.py checks the modules formatted so far)
format: $(FULL_STAMP)
	$(BIN)/ruff format scaler forecaster tests examples
