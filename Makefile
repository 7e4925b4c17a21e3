# BLOOM Runtime. `make` lists the targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash

BOOTSTRAP := .cache/uv-bootstrap
UV := $(shell command -v uv 2>/dev/null || echo $(BOOTSTRAP)/bin/uv)
RUN := $(UV) run --frozen

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(BOOTSTRAP)/bin/uv:
	@echo "uv not found: installing it into $(BOOTSTRAP) (project-local)"
	python3 -m venv $(BOOTSTRAP)
	$(BOOTSTRAP)/bin/pip install --quiet uv

# Bytecode is compiled ahead: every test starts dozens of server processes, and where
# PYTHONDONTWRITEBYTECODE is set (as on our CI machines) each would otherwise compile every module
# it imports from source again (measured: 5 s instead of 2 s to import the runtime's app).
.venv/.synced: pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen --quiet --compile-bytecode
	@touch $@

bytecode: install
	@$(RUN) python -m compileall -q src

install: .venv/.synced ## Create .venv with the locked dependencies

# `make run PORT=5100`: the runtime on 5100, Membridge and the model at their offsets from it.
UP_PORT = $(if $(PORT),--port $(PORT))

run: install ## Start BLOOM locally: `bloom up` (Membridge, runtime, a worker) under ./.bloom
	$(RUN) bloom up $(UP_PORT)

demo: install ## The same with the echo model standing in for Claude's API: no key needed
	$(RUN) bloom up --demo-model $(UP_PORT)

# Three test processes (pytest-xdist) on two cores, each file kept whole in one: most tests wait
# on servers, not on the CPU. Each process starts its own PostgreSQL cluster and S3 server.
# Coverage is measured apart (`make coverage`): its tracer made the in-process tests 1.7 times
# slower (tests/integration/test_projects.py: 30 s, 50 s with it), the suite 34 minutes in CI.
PYTEST_ALL := pytest -n 3 --dist loadfile

test: install bytecode claude-cli codex-cli gemini-cli ## Run the whole test suite (every tier, PostgreSQL and SQLite)
	$(RUN) $(PYTEST_ALL)

coverage: install bytecode claude-cli codex-cli gemini-cli ## The whole test suite with a branch-coverage report (slower)
	$(RUN) $(PYTEST_ALL) --cov --cov-report=term:skip-covered

test-fast: install bytecode ## The edit loop: unit and integration tests on SQLite, no processes (about two minutes)
	$(RUN) pytest -q tests/unit tests/integration -m "not postgres and not process and not claude and not s3"

claude-cli: install ## The pinned Claude CLI the tests run: found, or fetched into .cache/claude-cli with npm
	@$(RUN) bloom claude path >/dev/null 2>&1 \
	  || { command -v npm >/dev/null && $(RUN) bloom claude install >/dev/null; } \
	  || echo "No Claude CLI, and no npm to fetch it: the tests that run it will be skipped"

codex-cli: install ## The pinned Codex CLI the tests run: found, or fetched into .cache/codex-cli with npm
	@$(RUN) bloom agents install codex >/dev/null 2>&1 \
	  || echo "No Codex CLI, and no npm to fetch it: the tests that run it will be skipped"

gemini-cli: install ## The pinned Gemini CLI the tests run: found, or fetched into .cache/gemini-cli with npm
	@$(RUN) bloom agents install gemini >/dev/null 2>&1 \
	  || echo "No Gemini CLI, and no npm to fetch it: the tests that run it will be skipped"

lint: install ## ruff: lint and formatting
	$(RUN) ruff check src tests
	$(RUN) ruff format --check src tests

typecheck: install ## mypy, strict
	$(RUN) mypy

arch: install ## The layers docs/architecture.md states (import-linter contracts in pyproject.toml)
	$(RUN) lint-imports

check: lint typecheck arch test ## Everything CI runs

bench: install ## Benchmark the lease engine over HTTP (SQLite; see docs/benchmarks.md)
	$(RUN) bloom bench

clean: ## Remove local state and caches (not .venv)
	rm -rf .bloom .pytest_cache .mypy_cache .ruff_cache .hypothesis .coverage

.PHONY: help install bytecode run demo test coverage test-fast claude-cli codex-cli gemini-cli lint typecheck arch check bench clean
