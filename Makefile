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
LOCK_EXTRAS := --extra probe --extra test --extra docs --extra dev --extra models --extra fleet --extra drill

.PHONY: install backtest test bench protos docs reference lock clean drill drill-build drill-short test-loaded lint format

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

# ---- the drill: the real etcd, kube-apiserver, kube-controller-manager, KEDA and KWOK, built from the Go module
# proxy by the wrapper modules under drill/ (each binary's version is its go.mod's), then forescale driven by them.
# Go's module and build caches make a rebuild of what is current cost nothing; these rules skip even that.
DRILL_STAMP := $(VENV)/.installed-drill
DRILL_BIN := build/drill/bin
GO_BUILD := CGO_ENABLED=0 go build -trimpath
GO_CHECK := command -v go >/dev/null || { echo "the drill builds its parts with Go (>= 1.26) from the Go module proxy: install Go" >&2; exit 2; }
modver = $$(cd drill/$(1) && go list -m -f '{{.Version}}' $(2))
K ?= 5
SCENARIOS ?= all
DRILL_ARGS ?=

$(DRILL_STAMP): pyproject.toml $(LOCK) | $(BIN)/python
	$(BIN)/pip install -q -c $(LOCK) -e '.[fast,drill]'
	touch $@ $(BASE_STAMP)

$(DRILL_BIN)/etcd: drill/etcd/go.mod drill/etcd/go.sum drill/etcd/main.go
	@$(GO_CHECK)
	cd drill/etcd && $(GO_BUILD) -o ../../$(DRILL_BIN)/etcd .

$(DRILL_BIN)/kube-apiserver $(DRILL_BIN)/kube-controller-manager &: drill/kube/go.mod drill/kube/go.sum
	@$(GO_CHECK)
	v=$(call modver,kube,k8s.io/kubernetes); minor=$$(echo $$v | cut -d. -f2); pkg=k8s.io/component-base/version; \
	cd drill/kube && $(GO_BUILD) -ldflags "-X $$pkg.gitVersion=$$v -X $$pkg.gitMajor=1 -X $$pkg.gitMinor=$$minor \
		-X $$pkg.gitTreeState=clean" -o ../../$(DRILL_BIN)/ k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager

$(DRILL_BIN)/keda-operator $(DRILL_BIN)/keda-adapter &: drill/keda/go.mod drill/keda/go.sum
	@$(GO_CHECK)
	v=$(call modver,keda,github.com/kedacore/keda/v2); pkg=github.com/kedacore/keda/v2/version; \
	cd drill/keda && $(GO_BUILD) -ldflags "-X $$pkg.Version=$${v#v} -X $$pkg.GitCommit=$$v" \
		-o ../../$(DRILL_BIN)/keda-operator github.com/kedacore/keda/v2/cmd/operator && \
	$(GO_BUILD) -ldflags "-X $$pkg.Version=$${v#v} -X $$pkg.GitCommit=$$v" \
		-o ../../$(DRILL_BIN)/keda-adapter github.com/kedacore/keda/v2/cmd/adapter

$(DRILL_BIN)/kwok: drill/kwok/go.mod drill/kwok/go.sum
	@$(GO_CHECK)
	cd drill/kwok && $(GO_BUILD) -o ../../$(DRILL_BIN)/kwok sigs.k8s.io/kwok/cmd/kwok

DRILL_BINARIES := $(addprefix $(DRILL_BIN)/,etcd kube-apiserver kube-controller-manager keda-operator keda-adapter kwok)

drill-build: $(DRILL_BINARIES)

# every scenario in both cache modes at K (default 5); a user's own: make drill TRACE=traffic.csv MANIFEST=so.yaml
drill: $(DRILL_STAMP) $(DRILL_BINARIES)
	bash tests/system-deps.sh
	$(BIN)/forescale drill --bin-dir $(DRILL_BIN) --out build/drill --k $(K) \
		$(if $(TRACE),--trace $(TRACE)) $(if $(MANIFEST),--scaledobject $(MANIFEST),--scenarios $(SCENARIOS)) $(DRILL_ARGS)

# CI's short drill: one scenario, both cache modes
drill-short: $(DRILL_STAMP) $(DRILL_BINARIES)
	bash tests/system-deps.sh
	$(BIN)/forescale drill --bin-dir $(DRILL_BIN) --out build/drill --k $(K) --scenarios step --short $(DRILL_ARGS)

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
