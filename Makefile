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

.PHONY: help install lab lab-zh catalog catalog-check test test-fast test-cpu-order test-matrix notebooks nav lint bench bench-browser clean book book-data pdf
.PHONY: test-oldest wheel

help:
	@echo "make lab        start JupyterLab (127.0.0.1, token) at chapter 00"
	@echo "make lab-zh     the same in Chinese: JupyterLab's Chinese UI at the Chinese chapter 00"
	@echo "make catalog    extract gradlab's messages, update and compile the translations (Babel)"
	@echo "make test       the whole suite: builds the book, then pytest over tests/, nbval over chapters/, browser tests"
	@echo "make test-fast  a quick check (under 3 minutes): gradlab's core and engine tests and chapter 05"
	@echo "make test-cpu-order  nbval of the CPU-sensitive chapters under another summation order"
	@echo "make test-matrix  the third model matrix with its slow pairs (tests/test_models_matrix3.py)"
	@echo "make test-oldest  the tools' tests on the oldest TensorFlow and Keras gradlab supports (from its wheel)"
	@echo "make wheel      gradlab's wheel into dist/ (pip install dist/gradlab-*.whl: the tools in your own environment)"
	@echo "make book       the static site of both editions into build/book/ (stored outputs, offline; open index.html)"
	@echo "make pdf        one PDF per edition into build/pdf/ (stored outputs, offline; Chromium prints them)"
	@echo "make book-data  recompute the kernel-free explorers' grids (book/data/) with gradlab's engines"
	@echo "make notebooks  rebuild every chapter from chapters/src and Restart & Run All in place"
	@echo "make bench      explorer latency benchmark (python -m benchmarks.explorers)"
	@echo "make lint       ruff over gradlab, tests, tools and the notebooks; lint-imports (the layers)"

# Re-installs only when requirements.txt or pyproject.toml change (seconds otherwise).
# One line per stage; `make install PIP_QUIET=` shows pip's own progress bars too.
PIP_QUIET ?= --quiet
$(STAMP): requirements.txt pyproject.toml
	@echo "[1/3] virtual environment $(VENV)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "[2/3] upgrading pip"
	$(PY) -m pip install $(PIP_QUIET) --upgrade pip
	@echo "[3/3] installing requirements.txt (TensorFlow is about 2.6 GB: minutes on a first install)"
	$(PY) -m pip install $(PIP_QUIET) -r requirements.txt
	@touch $(STAMP)
	@echo "installed into $(VENV)"

install: $(STAMP)

# Token authentication is JupyterLab's default; the URL with the token is printed on start.
# Saved explorers keep the learner's last picture (not "Error displaying widget") through
# gradlab_jupyter's pre-save hook, which installing gradlab enables in the environment
# (etc/jupyter/jupyter_server_config.d/gradlab.json): a plain `jupyter lab` has it too.
# Each edition keeps its own workspace (open tabs, layout), so neither reopens the other's
# tabs with kernels of their own.
LAB_WORKSPACES := $(abspath $(VENV))/share/gradlab/workspaces
lab: install
	PYTHONPATH="$(CURDIR)" $(VENV)/bin/jupyter lab --ip=127.0.0.1 --port=$(PORT) --no-browser $(ALLOW_ROOT) \
		--ServerApp.root_dir="$(CURDIR)" --LabApp.workspaces_dir="$(LAB_WORKSPACES)/en" \
		--LabApp.default_url=/lab/tree/chapters/00-introduction.ipynb

# JupyterLab in Simplified Chinese (language pack) at the Chinese twin of chapter 00. The locale
# is an override of the setting's default in a settings dir inside .venv: your own JupyterLab
# settings are not touched, and a language you picked in Settings > Language still wins.
LAB_ZH_SETTINGS := $(abspath $(VENV))/share/gradlab/lab-zh
lab-zh: install
	$(PY) tools/lab_zh.py "$(LAB_ZH_SETTINGS)" >/dev/null
	PYTHONPATH="$(CURDIR)" $(VENV)/bin/jupyter lab --ip=127.0.0.1 --port=$(PORT) --no-browser $(ALLOW_ROOT) \
		--ServerApp.root_dir="$(CURDIR)" --LabApp.workspaces_dir="$(LAB_WORKSPACES)/zh" \
		--LabApp.app_settings_dir="$(LAB_ZH_SETTINGS)" \
		--LabApp.default_url=/lab/tree/chapters/zh/00-introduction.ipynb

# gradlab's message catalogs (gradlab/locale): extract the template from the code, merge it
# into every translation, compile the .mo that gradlab reads (all three are committed).
catalog: install
	$(PY) tools/catalog.py all

catalog-check: install
	$(PY) tools/catalog.py check

# Two workers (pytest-xdist): each test file, and each notebook under nbval, stays on one worker;
# the browser tier is one unit on one worker (tests/conftest.py). TEST_WORKERS=0 runs serially.
TEST_WORKERS ?= 2
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test: install book
	$(PY) -m pytest $(XDIST) --durations=25

# A quick check of the package and one chapter, under 3 minutes: the core's tests, the engine
# against Keras models, the layering and the chapter the engine's modes drive (05).
FAST_TESTS := tests/test_core.py tests/test_core_api.py tests/test_core_layers.py tests/test_core_verdict.py \
	tests/test_engine.py tests/test_true_norms.py tests/test_setup.py tests/test_scheduling.py \
	chapters/05-beyond-the-source.ipynb
test-fast: install
	$(PY) -m pytest $(XDIST) --durations=10 $(FAST_TESTS)

# The stored outputs must not depend on the CPU's summation order (issue 28): oneDNN's sgemm
# picks its kernel by instruction set, and gradlab caps it at AVX2 by default. SSE4.1 kernels
# sum in yet another order, as an older CPU would: the chapters whose explorers and training
# runs amplify a last-bit difference (01, 04, 05, 07, English edition; the twins run the same
# code) must still pass.
CPU_ORDER_CHAPTERS := chapters/01-vanishing-exploding.ipynb chapters/04-summary.ipynb \
	chapters/05-beyond-the-source.ipynb chapters/07-through-time.ipynb
test-cpu-order: install
	ONEDNN_MAX_CPU_ISA=SSE41 $(PY) -m pytest $(XDIST) $(CPU_ORDER_CHAPTERS)

# The third model matrix in full: its slow (tool, model) pairs too (about 3 more minutes).
test-matrix: install
	GRADLAB_FULL_MATRIX=1 $(PY) -m pytest $(XDIST) tests/test_models_matrix3.py

# --- issue 39: the supported versions and the wheel ---------------------------------------
# The other end of the range (pyproject.toml's lower bounds): builds the wheel, installs it with
# exactly the oldest TensorFlow and Keras into a venv kept under .venv/share/gradlab/ (keyed on
# the versions; a fresh machine downloads about 600 MB), runs the tools' unit tests there.
test-oldest: install
	$(PY) tools/test_oldest.py --python $(PYTHON) $(XDIST)

wheel: install
	$(PY) -m pip wheel --no-deps -w dist .
	@ls dist/gradlab-*.whl
# --- end issue 39 -------------------------------------------------------------------------

# The book site: Sphinx + MyST-NB over the stored notebooks (never executed), both editions.
book: install
	PYTHONPATH="$(CURDIR)" $(PY) tools/book/build.py
	PYTHONPATH="$(CURDIR)" $(PY) tools/book/pdf.py --place

# One PDF per edition (build/pdf/gradlab-<lang>.pdf) from the stored notebooks, never executed:
# one HTML document per edition, printed by Chromium (the browser tests' own), outline by pypdf.
# Copied beside each edition's pages (build/book/<lang>/) when the site is built; `make book`
# copies them too. tests/test_pdf.py checks them.
pdf: install
	PYTHONPATH="$(CURDIR)" $(PY) tools/book/pdf.py

# The explorers' grids are committed data (book/data/); tests/test_book.py says when they are stale.
book-data: install
	PYTHONPATH="$(CURDIR)" nice -n 10 $(PY) tools/book/grids.py

notebooks: install
	$(PY) tools/build_notebooks.py

nav: install
	$(PY) tools/add_navigation.py

lint: install
	$(VENV)/bin/ruff check gradlab tests tools chapters
	$(VENV)/bin/lint-imports

bench: install
	$(PY) -m benchmarks.explorers

bench-browser: install
	GRADLAB_BROWSER_BENCH=1 $(PY) -m pytest -s -m browser tests/browser -k bench

clean:
	rm -rf $(VENV) test-artifacts
