# The two commands a newcomer runs: `make demo` and `make test`.
# Both create .venv on first use: torch's CPU wheel is pinned here (GPU users
# install their own torch first; the package itself only asks for torch>=2.4).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_PIN ?= torch==2.13.0
EXTRAS ?= all

.PHONY: venv demo test lint bench clean

$(BIN)/sparsegnn: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet "$(TORCH_PIN)"
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $(BIN)/sparsegnn

venv: $(BIN)/sparsegnn

demo: venv
	$(BIN)/sparsegnn demo

# One torch thread per test process: multi-rank tests start up to eight ranks on a small
# machine, and oversubscribed threads make them slower, not faster. Two pytest workers
# (TEST_WORKERS): many tests wait on real processes and timeouts (namespace hosts,
# stopped ranks), and the other worker computes meanwhile; a worker that runs out of
# tests takes half of the other's (worksteal), so neither idles at the end.
TEST_WORKERS ?= 2
test: venv
	$(BIN)/ruff check src tests benchmarks testbed
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal tests

lint: venv
	$(BIN)/ruff check src tests benchmarks testbed

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
