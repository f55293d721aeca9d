# The two commands of the README: `make demo` (an end-to-end run) and `make test`;
# `make gpu-check` on a machine with a CUDA GPU (and a CUDA build of torch in the venv).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.odet-installed

.PHONY: setup test test-all lint demo gpu-check clean

$(STAMP): requirements-cpu.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-cpu.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

setup: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests $(wildcard benchmarks results)
	$(VENV)/bin/ruff format --check src tests $(wildcard benchmarks results)

test: $(STAMP) lint
	$(PY) -m pytest -q -n 2 --durations=15

test-all: $(STAMP) lint
	$(PY) -m pytest -q -n 2 --durations=15 --runslow

demo: $(STAMP)
	$(VENV)/bin/odet demo

gpu-check: $(STAMP)
	$(PY) -m benchmarks.gpu_check $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
