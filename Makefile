# posenc_nb: every target sets itself up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NB_WORKERS ?= 2
export POSENC_CACHE ?= $(CURDIR)/.cache

.PHONY: help install demo test test-nbs test-py test-slow export sync-check lint typecheck docs site chromium lab bench clean-nbs student student-site slides

help:
	@echo "make demo   - set up and compare every position encoding on the synthetic task (a few minutes on CPU)"
	@echo "make test   - set up and run the notebook tests and tests/"
	@echo "make docs   - build the documentation site (Quarto via nbdev_docs if installed, else Sphinx into _site/html/)"
	@echo "make site   - build the Sphinx site into _site/html/ and check every page in headless Chromium"
	@echo "make lint   - ruff on the notebooks and the exported code; module, function and line budgets"
	@echo "make typecheck - pyright (basic) on the public modules and tools/user_script.py, then run that script"
	@echo "make lab    - JupyterLab on nbs/ with the package importable"
	@echo "make slides - reveal.js slides (offline) and printable PDFs per lecture in _slides/ (after make site)"
	@echo "make student - the student edition: the notebooks without exercise solutions (nbgrader's release step) in _student/release/"
	@echo "make student-site - the student edition and its site (no instructor page) in _student/site/html/ (cheap after make site)"
	@echo "make bench  - throughput benchmark against torch.nn.Transformer"
	@echo "make gpu-check - on a CUDA machine: gpu notebook cells, contract tests, fp16/bf16 training with exact resume, benchmarks; records in results/gpu/"

# torch first, pinned: the library itself accepts a range, and this pin takes the CPU build on machines without CUDA.
$(STAMP): settings.ini setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -c constraints.txt -e ".[all]"   # every extra: dev, test, experiments, floater, ...
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/posenc compare --config synthetic-tiny --out runs/demo

test: install test-nbs test-py

# one process per notebook (tools/test_notebooks.py says why: nbdev_test's workers carry one notebook's registrations
# into the next); each runs as the site build executes it, and the executed copies are saved in _site/cache/, where
# `make site` finds them: in CI (make test, then make site) every notebook is executed once
test-nbs: install
	$(BIN)/python tools/test_notebooks.py --workers $(NB_WORKERS)

test-py: install
	$(BIN)/python -m pytest tests -q -x -n $(NB_WORKERS) --dist worksteal --durations=10 || [ $$? -eq 5 ]

test-slow: install
	cd nbs && POSENC_SLOW=1 ../$(BIN)/nbdev_test --n_workers 1 --timing --flags slow
	POSENC_SLOW=1 $(BIN)/python -m pytest tests/test_hf.py -q -k support_matrix   # every causal-LM type, minutes
	POSENC_SLOW=1 $(BIN)/python -m pytest tests/test_typecheck.py -q   # pyright on the user script: wheel, editable

export: install
	$(BIN)/nbdev_export

# Notebooks and modules in sync, notebooks clean.
sync-check: install
	$(BIN)/nbdev_export
	git diff --exit-code -- posenc_nb || (echo "posenc_nb/ is out of sync with nbs/: run nbdev_export and commit" && exit 1)
	$(BIN)/nbdev_clean
	git diff --exit-code -- nbs || (echo "notebooks are not clean: run nbdev_clean and commit" && exit 1)
	$(BIN)/python tools/make_readme.py --check
	$(MAKE) lint

# Style (issue 39; pyproject.toml's [tool.ruff] says what and why): ruff lints the notebooks' code cells and the
# exported modules; tools/style_report.py checks the exported code's budget: no module over 600 lines, no function over
# 60, at most 1% of code lines over 120 characters. tools/format_notebooks.py fixes what it can.
lint: install
	$(BIN)/ruff check nbs posenc_nb
	$(BIN)/python tools/style_report.py --check

# Types: pyright in basic mode, 0 errors, on the public modules (core, rope, rotary, rotary_kernel, interop, baselines,
# model, hf) and on tools/user_script.py, which holds the README's "Use it" and notebook 15's examples as a user writes
# them (pyrightconfig.json); then the script runs, so the examples it checks also work. pyright is a pinned dev
# requirement (the PyPI package carries pyright itself and runs it on the machine's Node.js).
typecheck: install
	PYRIGHT_PYTHON_IGNORE_WARNINGS=1 $(BIN)/pyright --pythonpath $(BIN)/python
	$(BIN)/python tools/user_script.py

# The site: Quarto through nbdev_docs where it is installed; otherwise Sphinx + MyST-NB (tools/build_site.py; the
# doc packages are pinned dev requirements) into _site/html/. `make site` always builds the Sphinx site and checks it
# in headless Chromium (tools/check_site.py; Debian's chromium is installed when missing and we are root).
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null \
		|| { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
		     else echo "no Chromium: install it (Debian: sudo apt-get install chromium) to run the browser check" && exit 1; fi; }

docs: install
	@if command -v quarto >/dev/null; then $(BIN)/nbdev_docs; else echo "quarto not found: building the Sphinx site in _site/html/ instead"; \
		$(BIN)/python tools/build_site.py; fi

site: install chromium
	$(BIN)/python tools/build_site.py --check

# JupyterLab pinned in constraints.txt; tools/jupyter_lab_config.py keeps a notebook unmodified on opening (and
# nbdev-clean on saving); --allow-root only when run as root (containers, CI machines).
lab: install
	$(BIN)/pip install -q -c constraints.txt jupyterlab
	$(BIN)/jupyter lab --config=tools/jupyter_lab_config.py $(if $(filter 0,$(shell id -u)),--allow-root) nbs

# Slides per lecture (tools/slides.py): nbconvert's reveal.js slides with reveal.js from its npm package and MathJax
# from the site's PyPI package, nothing from the network; then each lecture page of the built site printed to PDF by
# the headless Chromium the site check uses. Build the site first (make site) for the PDFs.
slides: install chromium
	$(BIN)/python tools/slides.py --pdf

# The student edition (tools/student.py): the exercise solutions become nbgrader solution cells and nbgrader's release
# step removes them; nbgrader is installed on demand (a teaching tool, not a dependency of the package or its tests).
student: install
	$(BIN)/pip install -q -c constraints.txt nbgrader
	$(BIN)/python tools/student.py

student-site: install
	$(BIN)/pip install -q -c constraints.txt nbgrader
	$(BIN)/python tools/student.py --site

bench: install
	$(BIN)/python benchmarks/throughput.py

clean-nbs: install
	$(BIN)/nbdev_clean

# On a CUDA machine: every GPU check, written as records under results/gpu/ (commit them). CI runs the CPU smoke path.
gpu-check: install
	$(BIN)/python tools/gpu_check.py

gpu-check-smoke: install
	$(BIN)/python tools/gpu_check.py --smoke --out $$(mktemp -d)
