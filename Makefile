# The commands do all the set-up on a fresh machine with Python 3.11:
#   make tour       -> .venv, install, run `localkit tour`
#   make test-fast  -> .venv, install with test extras, the quick suite: pytest -m "not slow",
#                      on every core (pytest-xdist, -n auto)
#                      (one case of each reference sweep, every bad-input check)
#   make test       -> .venv, install with test extras, the full suite (CI runs this)
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# --no-compile: Python writes the bytecode of the modules a run imports, when it imports them; pip
# compiling every module of torch, scipy and the rest up front took half of the set-up (64 s -> 32 s)
# The CPU build of torch lies on disk on our machines; a bare `torch` would pull a CUDA build.
TORCH_CPU := torch==2.13.0

.PHONY: tour test test-fast bench docs venv clean

$(VENV)/.created:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --no-compile --upgrade pip setuptools wheel
	# torch: the CPU build where the machine offers it as a local wheel (no index: a bare `torch`
	# from pip's default index is a multi-GB CUDA build), its dependencies then from pip's default
	# index; else any torch>=2.2 from that index. The project names no index's host.
	( $(PIP) install --no-compile --no-index --no-deps "$(TORCH_CPU)" && $(PIP) install --no-compile "$(TORCH_CPU)" ) \
	  || $(PIP) install --no-compile "torch>=2.2"
	touch $@

$(VENV)/.tour: $(VENV)/.created pyproject.toml
	$(PIP) install --no-compile -e ".[tour]"
	touch $@

$(VENV)/.test: $(VENV)/.created pyproject.toml
	$(PIP) install --no-compile -e ".[test,tour]"
	touch $@

# the docs extra alone: it holds everything the gallery's examples import (a test checks it)
$(VENV)/.docs: $(VENV)/.created pyproject.toml
	$(PIP) install --no-compile -e ".[docs]"
	touch $@

$(VENV)/.bench: $(VENV)/.test
	$(PIP) install --no-compile -e ".[bench]"
	touch $@

venv: $(VENV)/.test

tour: $(VENV)/.tour
	$(VENV)/bin/localkit tour

test: $(VENV)/.test
	$(PY) -m pytest -q -n auto

# the slow reference sweeps are marked in tests/conftest.py (SLOW); `pytest -m slow` runs only them
test-fast: $(VENV)/.test
	$(PY) -m pytest -q -n auto -m "not slow"

bench: $(VENV)/.bench
	$(VENV)/bin/localkit bench

# the site, offline (no intersphinx), every warning an error; the gallery's examples run here
docs: $(VENV)/.docs
	$(VENV)/bin/sphinx-build -W --keep-going -b html docs docs/_build/html

clean:
	rm -rf $(VENV) build *.egg-info tour_output docs/_build docs/auto_examples docs/generated
