# Two commands do all the set-up on a fresh machine with Python 3.11:
#   make tour   -> .venv, install, run `localkit tour`
#   make test   -> .venv, install with test extras, run pytest
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# The CPU build of torch lies on disk on our machines; a bare `torch` would pull a CUDA build.
TORCH_CPU := torch==2.13.0

.PHONY: tour test bench venv clean

$(VENV)/.created:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip setuptools wheel
	# Prefer the CPU wheel the machine offers; fall back to any release satisfying torch>=2.2.
	$(PIP) install "$(TORCH_CPU)" || $(PIP) install "torch>=2.2"
	touch $@

$(VENV)/.tour: $(VENV)/.created pyproject.toml
	$(PIP) install -e ".[tour]"
	touch $@

$(VENV)/.test: $(VENV)/.created pyproject.toml
	$(PIP) install -e ".[test,tour]"
	touch $@

$(VENV)/.bench: $(VENV)/.test
	$(PIP) install -e ".[bench]"
	touch $@

venv: $(VENV)/.test

tour: $(VENV)/.tour
	$(VENV)/bin/localkit tour

test: $(VENV)/.test
	$(PY) -m pytest -q

bench: $(VENV)/.bench
	$(VENV)/bin/localkit bench

clean:
	rm -rf $(VENV) build *.egg-info tour_output
