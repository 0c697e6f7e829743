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

.PHONY: install backtest test bench protos clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

# `pip install .` as a user would: the scaler and the backtest, no torch
$(BASE_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

# everything the tests need: the probe's torch==2.13.0 (CPU unless TORCH_INDEX says otherwise) and the test tools
$(FULL_STAMP): pyproject.toml | $(BIN)/python
	$(if $(TORCH_INDEX),$(BIN)/pip install -q --index-url $(TORCH_INDEX) torch==2.13.0)
	$(BIN)/pip install -q -e '.[probe,test]'
	touch $@ $(BASE_STAMP)

install: $(FULL_STAMP)

backtest: $(BASE_STAMP)
	$(BIN)/forescale backtest $(ARGS)

test: $(FULL_STAMP)
	bash tests/system-deps.sh
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(FULL_STAMP)
	for b in tests/bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

protos: $(BASE_STAMP)
	$(BIN)/python -m scaler.protogen

clean:
	rm -rf $(VENV) build *.egg-info
