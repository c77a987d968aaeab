# One entry point for set-up, synth, tests and the local demo. Every target installs what it
# needs first (Python venv from requirements-dev.txt, Node 22 + the pinned CDK CLI from npm).

VENV ?= .venv
PYTHON ?= python3
export PATH := $(CURDIR)/node_modules/.bin:$(CURDIR)/$(VENV)/bin:$(PATH)
export CDK_DISABLE_CLI_TELEMETRY := true

.PHONY: setup demo synth test clean diff

setup: $(VENV)/.installed node_modules/.installed

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements-dev.txt
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

## demo: the main job: the default tenants.yaml running end to end on a local moto server,
## with sample files, live progress and a verification table (exit 1 if a guarantee broke).
## Pass options with ARGS, e.g. make demo ARGS="--scenario malformed" (python -m demo --help).
demo: setup
	python -m demo $(ARGS)

## synth: synthesize every stack of the default tenants.yaml with the pinned CDK CLI (no credentials needed)
synth: setup
	cdk synth --quiet

## test: the whole test suite (template assertions, snapshots, cdk-nag, cfn-lint, handlers)
test: setup
	pytest

## diff: offline diff of BASE (default origin/main) and the working tree, per tenant then per
## stack, no AWS credentials (python -m tools.offline_diff: exit 0 same, 1 different, 2 error;
## make turns any non-zero exit into its own 2). TENANTS=path picks the tenants file.
BASE ?= origin/main
diff: setup
	python -m tools.offline_diff --base $(BASE) $(if $(TENANTS),--tenants $(TENANTS))

clean:
	rm -rf cdk.out .pytest_cache
