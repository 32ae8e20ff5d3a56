# The one entry point. Every target creates .venv and installs what it needs on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ENV ?= dev
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1
# Compiled modules (and pytest's rewritten tests) go to build/pycache, not beside the sources:
# every process the tests start imports the project compiled once, and the tree stays clean.
export PYTHONPYCACHEPREFIX := $(CURDIR)/build/pycache
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help demo test browser scanner test-fast fuzz lint synth rehearse bench deploy diff bootstrap constraints schemas openapi docs reference clean

help: ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

# Every install checks each file against its pinned hash (--require-hashes): pip and uv themselves,
# every dependency, and the build of Rebound's own package (no build isolation, so setuptools is the
# pinned one). pip installs the two pinned installers; uv installs the rest, in seconds where pip takes a minute.
PIP_INSTALL := $(PY) -m pip install --quiet --disable-pip-version-check
UV_INSTALL := $(VENV)/bin/uv pip install --quiet --python $(PY)
$(STAMP): pyproject.toml setup.py requirements/pip.txt requirements/constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PIP_INSTALL) --require-hashes -r requirements/pip.txt
	@echo "Installing pinned dependencies into $(VENV) (first run only)..."
	@$(UV_INSTALL) --require-hashes -r requirements/constraints.txt
	@$(UV_INSTALL) --no-deps --no-build-isolation -e .
	@touch $@

# The IaC scanner (checkov) in a virtualenv of its own: it pins an older boto3 than Rebound's.
SCANNER := .venv-checkov
SCANNER_STAMP := $(SCANNER)/.installed
$(SCANNER_STAMP): requirements/scanner.txt requirements/pip.txt
	@test -x $(SCANNER)/bin/python || $(PYTHON) -m venv $(SCANNER)
	@echo "Installing the IaC scanner into $(SCANNER) (first run only)..."
	@$(SCANNER)/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements/pip.txt
	@$(SCANNER)/bin/uv pip install --quiet --python $(SCANNER)/bin/python -r requirements/scanner.txt
	@touch $@

scanner: $(SCANNER_STAMP) ## Install checkov, which the infra tests run on the synthesized templates

demo: $(STAMP) ## Run Rebound locally against the embedded AWS stand-in and show the retry loop working
	$(VENV)/bin/rebound local demo

# Three workers on two cores: many tests spend their time waiting on a subprocess, a server or the browser.
TEST_WORKERS ?= 3
test: ## Run every test: unit, property, integration, end-to-end and infrastructure gates
	@$(MAKE) --no-print-directory -j3 $(STAMP) $(SCANNER_STAMP) browser  # the three installs side by side
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# The console's browser tests drive Debian's Chromium; install it when missing and we are root
# (otherwise those tests skip, saying why).
browser:
	@if [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "Installing Chromium for the console's browser tests..."; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1 \
	    || echo "could not install chromium: the browser tests will skip"; \
	fi

test-fast: $(STAMP) ## Everything except the infrastructure gates
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not infra"

FUZZ_ROUNDS ?= 5
fuzz: $(STAMP) ## Property tests on fresh random examples, FUZZ_ROUNDS rounds (make test replays fixed ones)
	@for round in $$(seq 1 $(FUZZ_ROUNDS)); do \
	  echo "fuzz round $$round of $(FUZZ_ROUNDS)"; \
	  HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests/property_based || exit 1; \
	done

lint: $(STAMP) ## ruff and mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy functions cli localcloud infra

synth: $(STAMP) ## Synthesize every environment's stack into cdk.out/ (no Docker, no AWS access)
	$(PY) infra/app.py

rehearse: $(STAMP) ## Deploy the synthesized dev stack to the local cloud and run the smoke scenario under IAM, from the bundle
	$(VENV)/bin/rebound local rehearse --report build/rehearse/report.json

bench: $(STAMP) ## Benchmarks (ONLY=cost for one group); figures to bench/results.json, history to bench/history.jsonl
	$(PY) -m rebound_local.bench --out bench/results.json $(if $(ONLY),--only $(ONLY))

# The CDK CLI, pinned: a new CLI is a change reviewed like any other dependency.
CDK := npx --yes aws-cdk@2.1148.1
deploy: $(STAMP) ## Deploy one environment: make deploy ENV=dev (needs AWS credentials; see docs/deploy.md)
	$(PY) -m rebound_infra.upgrade_check $(ENV)  # stops a deploy DynamoDB would refuse (docs/deploy.md, Upgrading)
	$(CDK) deploy Rebound-$(ENV) --context env=$(ENV) --require-approval broadening $(CDK_ARGS)

diff: $(STAMP) ## Show what a deploy would change: make diff ENV=dev
	$(CDK) diff Rebound-$(ENV) --context env=$(ENV) $(CDK_ARGS)

bootstrap: $(STAMP) ## One-time per account and region: make bootstrap ENV=dev [CDK_ARGS="--cloudformation-execution-policies ..."]
	$(CDK) bootstrap --context env=$(ENV) $(CDK_ARGS)

schemas: $(STAMP) ## Regenerate events/schemas/*.json from the event models
	$(PY) scripts/generate_event_schemas.py

reference: $(STAMP) ## Regenerate docs/reference (the CLI from its command tree, the API from docs/openapi.json)
	$(PY) scripts/generate_reference.py

docs: $(STAMP) ## Build the docs site into build/site (mkdocs, strict: a broken link or a page outside the nav fails)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

openapi: $(STAMP) ## Regenerate docs/openapi.json from the operations API's routes
	$(PY) scripts/generate_openapi.py

PIP_TOOLS := pip-tools==7.6.2
LOCK := .venv-pin/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links --no-annotate --no-header
constraints: ## Re-resolve every dependency (requirements/*.in) into hashed locks: constraints.txt, runtime.txt (the Lambda layer), pip.txt
	rm -rf .venv-pin && $(PYTHON) -m venv .venv-pin && .venv-pin/bin/pip install -q --require-hashes -r requirements/pip.txt && .venv-pin/bin/pip install -q $(PIP_TOOLS)
	mkdir -p build && $(LOCK) -o build/constraints.lock requirements/dev.in
	$(LOCK) -c build/constraints.lock -o build/runtime.lock requirements/runtime.in
	{ head -2 requirements/constraints.txt; grep -v '^#' build/constraints.lock; } > requirements/constraints.txt
	{ head -2 requirements/runtime.txt; grep -v '^#' build/runtime.lock; } > requirements/runtime.txt
	rm -rf .venv-pin build/constraints.lock build/runtime.lock

clean: ## Remove build output (keeps .venv)
	rm -rf cdk.out build .pytest_cache .mypy_cache .ruff_cache bench/results.json
