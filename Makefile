# Two entry points, each self-contained on a fresh clone:
#   make quickstart   set up .venv and run the main job on the embedded default
#   make test         set up .venv and run the test suite
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: install quickstart test test-all bench

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

quickstart: install
	$(VENV)/bin/agentprm quickstart

test: install
	$(VENV)/bin/pytest -q $(PYTEST_ARGS)

test-all: install
	$(VENV)/bin/pytest -q -m "slow or not slow" $(PYTEST_ARGS)

bench: install
	$(PY) bench/env_steps.py
