# forescale: two commands set up everything on a fresh machine.
#   make backtest   the main job: backtest on the bundled real trace (no cluster needed)
#   make test       the whole test suite (installs Prometheus and kubectl checks it needs)
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install backtest test bench protos clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	# torch==2.13.0 (CPU) is taken from the machine's wheel cache; never a CUDA build
	$(BIN)/pip install -q -e '.[probe,test]'
	touch $(STAMP)

install: $(STAMP)

backtest: $(STAMP)
	$(BIN)/forescale backtest $(ARGS)

test: $(STAMP)
	bash tests/system-deps.sh
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	for b in tests/bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

protos: $(STAMP)
	$(BIN)/python -m scaler.protogen

clean:
	rm -rf $(VENV) build *.egg-info
