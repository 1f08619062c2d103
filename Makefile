# Two commands do everything on a fresh machine:  make lab  ·  make test
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PORT ?= 8888
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
# nbval and the browser tests start kernels from this environment
export PATH := $(abspath $(VENV))/bin:$(PATH)
export PYTHONUNBUFFERED := 1

.PHONY: help install lab test test-fast notebooks nav lint bench bench-browser clean

help:
	@echo "make lab        start JupyterLab (127.0.0.1, token) at chapter 00"
	@echo "make test       the whole suite: pytest over tests/, nbval over chapters/, browser tests"
	@echo "make notebooks  rebuild every chapter from chapters/src and Restart & Run All in place"
	@echo "make bench      explorer latency benchmark (python -m gradlab.bench)"
	@echo "make lint       ruff over gradlab, tests, tools and the notebooks"

# Re-installs only when requirements.txt or pyproject.toml change (seconds otherwise).
$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	@touch $(STAMP)

install: $(STAMP)

# Token authentication is JupyterLab's default; the URL with the token is printed on start.
lab: install
	$(VENV)/bin/jupyter lab --ip=127.0.0.1 --port=$(PORT) --no-browser $(ALLOW_ROOT) \
		--ServerApp.root_dir="$(CURDIR)" \
		--LabApp.default_url=/lab/tree/chapters/00-introduction.ipynb

test: install
	$(PY) -m pytest

test-fast: install
	$(PY) -m pytest -m "not browser" tests

notebooks: install
	$(PY) tools/build_notebooks.py

nav: install
	$(PY) tools/add_navigation.py

lint: install
	$(VENV)/bin/ruff check gradlab tests tools chapters

bench: install
	$(PY) -m gradlab.bench

bench-browser: install
	GRADLAB_BROWSER_BENCH=1 $(PY) -m pytest -s -m browser tests/browser -k bench

clean:
	rm -rf $(VENV) test-artifacts
