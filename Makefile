# fairbench developer entry points. Every target bootstraps its own virtualenv,
# so `make test` works on a fresh clone with nothing but python3 installed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv test lint perf clean lab-up lab-down lab-test demo

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check bench tests library
	$(BIN)/ruff format --check bench tests library
	$(BIN)/mypy
	$(BIN)/yamllint .
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/ansible-lint

# The tests that need lab hosts (make lab-up): provisioning first, as it needs hosts nothing has touched.
lab-test: $(STAMP)
	$(BIN)/pytest -m lab tests/lab/test_provision_lab.py tests/lab/test_lab_hosts.py tests/lab/test_campaign_lab.py

perf: $(STAMP)
	$(BIN)/python tests/perf/client_overhead.py

clean:
	rm -rf $(VENV) build dist bench/*.egg-info

# Lab hosts: LAB_HOSTS Debian hosts booted with systemd-nspawn on this machine (root), in inventory/lab.yml.
LAB_HOSTS ?= 2

lab-up:
	bash tests/lab/lab.sh up $(LAB_HOSTS)

lab-down:
	bash tests/lab/lab.sh down

# The demo campaign (campaigns/demo.yml, on the simulator) on the lab hosts: deployed, swept, fetched, reported.
DEMO_RUN_ID ?= $(shell date -u +%Y%m%dT%H%M%SZ)
# Evaluated once: a re-run with DEMO_RUN_ID=<it> resumes that run.
DEMO_RUN_ID := $(DEMO_RUN_ID)

demo: $(STAMP) lab-up
	$(BIN)/fairbench run campaigns/demo.yml -i inventory/lab.yml --run-id $(DEMO_RUN_ID)
