# fairbench developer entry points. Every target bootstraps its own virtualenv,
# so `make test` works on a fresh clone with nothing but python3 installed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv test lint perf clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check bench tests
	$(BIN)/ruff format --check bench tests
	$(BIN)/mypy

perf: $(STAMP)
	$(BIN)/python tests/perf/client_overhead.py

clean:
	rm -rf $(VENV) build dist bench/*.egg-info
