# rollcall: `make test` (lint + every test that needs no cluster or GPU), `make e2e-local` (the roll call on
# this machine), `make e2e` (the roll call against the current kube context). Each installs what it needs.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
UV_VERSION := 0.13.9
# The uv binary itself: run as `python3 -m uv` it would install into that python, not the venv.
UV = $(shell python3 -c 'import uv; print(uv.find_uv_bin())' 2>/dev/null || echo uv)
export UV_PYTHON_DOWNLOADS := never
NODES ?= 2
PYTEST_ARGS ?=

.PHONY: help setup lock lint test test-unit e2e e2e-local bench clean

help:
	@echo "make test       lint + all tests that need no cluster or GPU"
	@echo "make e2e-local  the roll call on this machine (local backend, $(NODES) nodes, cpu unless GPUs)"
	@echo "make e2e        the roll call against the current kube context (NODES=$(NODES))"
	@echo "make setup      create $(VENV) from requirements.lock"

# The venv is rebuilt when the lock changes; uv's cache makes a rebuild take seconds once torch is cached.
$(VENV)/.installed: requirements.lock pyproject.toml
	@python3 -c 'import uv' 2>/dev/null || python3 -m pip install -q "uv==$(UV_VERSION)"
	$(UV) venv -q --allow-existing -p "$$(command -v python3)" $(VENV)
	$(UV) pip sync -q --compile-bytecode --python $(PY) requirements.lock
	$(UV) pip install -q --python $(PY) --no-deps -e .
	@touch $@

setup: $(VENV)/.installed

lock:
	$(UV) pip compile -q pyproject.toml --extra dev --extra workload -c requirements.in \
	  -o requirements.lock --python-version 3.11

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test-unit: setup
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test: lint
	$(PY) -m pytest tests/unit tests/local $(PYTEST_ARGS)

e2e-local: setup
	$(PY) -m pytest tests/e2e --backend local --nodes $(NODES) $(PYTEST_ARGS)

e2e: setup
	$(PY) -m pytest tests/e2e --backend kubernetes --nodes $(NODES) $(PYTEST_ARGS)

bench: setup
	$(PY) bench/parser.py

clean:
	rm -rf $(VENV) artifacts .pytest_cache .mypy_cache .ruff_cache
