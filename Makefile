# fairbench developer entry points. Every target bootstraps its own virtualenv,
# so `make test` works on a fresh clone with nothing but python3 installed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv test lint perf clean lab-up lab-down lab-test lab-sglang-test sglang-wheelhouse demo demo-sglang lm-eval

venv: $(STAMP)

# With sglang-router at the version fairbench.campaign.router_flags pins: the tests put it in front of the
# simulator's prefill and decode servers, as the bench role installs it on the hosts.
$(STAMP): pyproject.toml bench/fairbench/campaign/router_flags.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/pip install --quiet \
		"$$($(BIN)/python -c 'from fairbench.campaign.router_flags import ROUTER_REQUIREMENT as r; print(r)')"
	touch $(STAMP)

# lm-eval in a venv of its own (it brings pandas, scipy and datasets; fairbench runs it as a process), at
# the version fairbench.answers.lm_eval_run pins: the accuracy tests run it against the simulator.
LM_EVAL_VENV := build/lm-eval-venv
LM_EVAL_STAMP := $(LM_EVAL_VENV)/.installed
lm-eval: $(LM_EVAL_STAMP)

$(LM_EVAL_STAMP): $(STAMP) bench/fairbench/answers/lm_eval_run.py
	$(PYTHON) -m venv $(LM_EVAL_VENV)
	$(LM_EVAL_VENV)/bin/pip install --quiet --no-cache-dir \
		"$$($(BIN)/python -c 'from fairbench.answers.lm_eval_run import LM_EVAL_REQUIREMENT as r; print(r)')"
	touch $(LM_EVAL_STAMP)

# Independent tests over every core (real SGLang's in one worker, so that one server start serves them),
# then the timing-sensitive ones (marker timing) alone, where no other test's load skews them. BEFORE_TIMING
# runs between the two: CI waits there for its background builds, whose unpacking would skew them too.
BEFORE_TIMING ?= true
test: $(STAMP) $(LM_EVAL_STAMP)
	FAIRBENCH_LM_EVAL_PYTHON=$(abspath $(LM_EVAL_VENV))/bin/python \
		$(BIN)/pytest --durations=25 -n auto --dist loadgroup -m "not timing"
	$(BEFORE_TIMING)
	$(BIN)/pytest --durations=25 -m timing

lint: $(STAMP)
	$(BIN)/ruff check bench tests plugins roles
	$(BIN)/ruff format --check bench tests plugins roles
	$(BIN)/mypy
	$(BIN)/yamllint .
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/ansible-lint

# The tests that need lab hosts (make lab-up): provisioning first, as it needs hosts nothing has touched.
# FAIRBENCH_LAB_HOSTS=lab2,lab3 keeps them to those hosts (default every host of the lab). Each run leaves a
# JUnit report in build/, which CI checks against the lab tests that exist (tests/support/lab_counts.py).
lab-test: $(STAMP)
	$(BIN)/pytest --durations=25 -m lab --junitxml=build/lab-test.xml \
		tests/lab/test_provision_lab.py tests/lab/test_lab_hosts.py tests/lab/test_campaign_lab.py \
		tests/lab/test_fleet_lab.py tests/lab/test_disaggregation_lab.py tests/lab/test_collection_lab.py \
		tests/lab/test_py310_lab.py

# Real SGLang provisioned onto lab1 and run as campaign units; needs lab1 without SGLang: a fresh lab, or the
# lab lab-test ran on (its provisioning tests provision its second host only). CI runs it beside lab-test, on
# a lab of three hosts (lab-test on lab2 and lab3).
lab-sglang-test: $(STAMP)
	$(BIN)/pytest --durations=25 -m lab --junitxml=build/lab-sglang-test.xml tests/lab/test_sglang_lab.py

# The lab's SGLang wheelhouse (sglang_wheelhouse in inventory/lab.yml), built once on this machine. The
# provisioning builds it too where it is missing; building it first lets the tests' own SGLang venv
# (FAIRBENCH_SGLANG_WHEELHOUSE, tests/support/real_sglang.py) install from it instead of downloading again.
sglang-wheelhouse: $(STAMP)
	$(BIN)/ansible-playbook -i inventory/lab.yml playbooks/sglang_wheelhouse.yml

perf: $(STAMP)
	$(BIN)/python tests/perf/client_overhead.py

clean:
	rm -rf $(VENV) build dist bench/*.egg-info

# Lab hosts: LAB_HOSTS Debian hosts booted with systemd-nspawn on this machine (root), in inventory/lab.yml.
LAB_HOSTS ?= 2

# The tiny GPT-2 model real SGLang serves in the lab (inventory/lab.yml copies it to the hosts).
TINY_MODEL := build/tiny-gpt2

$(TINY_MODEL)/config.json: tests/support/tiny_model.py
	$(PYTHON) tests/support/tiny_model.py $(TINY_MODEL)

lab-up: $(TINY_MODEL)/config.json
	bash tests/lab/lab.sh up $(LAB_HOSTS)

lab-down:
	bash tests/lab/lab.sh down

# The demo campaign (campaigns/demo.yml, on the simulator) on the lab hosts: deployed, swept, fetched, reported.
DEMO_RUN_ID ?= $(shell date -u +%Y%m%dT%H%M%SZ)
# Evaluated once: a re-run with DEMO_RUN_ID=<it> resumes that run.
DEMO_RUN_ID := $(DEMO_RUN_ID)

demo: $(STAMP) lab-up
	$(BIN)/fairbench run campaigns/demo.yml -i inventory/lab.yml --run-id $(DEMO_RUN_ID)

# campaigns/lab-sglang.yml with real SGLang on the lab hosts' CPUs: SGLang is provisioned from a wheelhouse
# built once on this machine (about 4 GB, kept in /var/cache/fairbench-lab), then every config is started as
# its unit, swept and reported like the demo's.
demo-sglang: $(STAMP) lab-up
	$(BIN)/fairbench run campaigns/lab-sglang.yml -i inventory/lab.yml --run-id $(DEMO_RUN_ID) -e sglang_on_cpu=true
