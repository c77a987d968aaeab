# One entry point for set-up, synth, tests and the local demo. Every target installs what it
# needs first (Python venv from requirements-lock.txt, Node 22 + the pinned CDK CLI from npm).

VENV ?= .venv
PYTHON ?= python3
export PATH := $(CURDIR)/node_modules/.bin:$(CURDIR)/$(VENV)/bin:$(PATH)
export CDK_DISABLE_CLI_TELEMETRY := true

.PHONY: help setup lock demo synth deploy cells test test-fast lint fuzz clean diff iam-lint security-doc config-docs cloud-test
.DEFAULT_GOAL := help

## help: this list; `make` alone prints it.
help:
	@echo "make <target> [TENANTS=path/to/tenants.yaml] [ARGS=...]; every target installs what it needs first"
	@awk '/^## [a-z][a-z-]*:/ { name = $$2; sub(/:$$/, "", name); sub(/^## [^:]*: */, ""); \
	  printf "  %-13s %s\n", name, $$0 }' $(MAKEFILE_LIST)

## setup: the Python venv (.venv, from requirements-lock.txt), Node 22 and the pinned CDK CLI (node_modules).
setup: $(VENV)/.installed node_modules/.installed

# requirements-lock.txt: every package of requirements.txt and requirements-dev.txt with its exact
# version and hashes; anything else is refused (--require-hashes). uv installs it, about 4x faster
# than pip; pip installs uv itself first, at the version and hashes the lock gives it.
LOCK := requirements-lock.txt
$(VENV)/.installed: $(LOCK)
	$(PYTHON) -m venv $(VENV)
	awk '/^uv==/ { pin = 1 } pin { print } pin && !/\\$$/ { exit }' $(LOCK) > $(VENV)/uv-lock.txt
	$(VENV)/bin/pip install --quiet --require-hashes -r $(VENV)/uv-lock.txt
	$(VENV)/bin/uv pip install --quiet --python $(VENV)/bin/python --require-hashes --compile-bytecode -r $(LOCK)
	touch $@

## lock: re-resolve requirements-lock.txt (exact versions, hashes) after editing requirements*.txt.
## The pinned uv resolves for any Python 3.11+ and platform; versions already locked are kept
## while they fit, UPGRADE=1 takes the newest that fit.
UPGRADE ?=
lock: $(VENV)/.installed
	uv pip compile requirements-dev.txt --universal --python-version 3.11 --generate-hashes \
		--custom-compile-command "make lock" --quiet --output-file $(LOCK) $(if $(UPGRADE),--upgrade)

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

## Every target reads the tenants file TENANTS (default tenants.yaml): make demo TENANTS=my.yaml
TENANTS ?= tenants.yaml
export TENANTS

## demo: the tenants file running end to end on a local moto server, checked (the main job).
## Sample files, live progress and a verification table. python -m demo exits 0 when every
## guarantee held, 1 when one broke, 2 for bad usage or a bad tenants file, 3 when the run
## timed out (--timeout) before every file closed (nothing verified), 130 when stopped (Ctrl-C)
## before the verification; make reports any
## non-zero exit as its own 2. Options go in ARGS, e.g.
## make demo ARGS="--scenario malformed" (python -m demo --help).
demo: setup
	python -m demo --tenants $(TENANTS) $(ARGS)

## synth: synthesize every cell of the tenants file into cells.out/<cell>, no credentials needed.
## With the pinned CDK CLI, in parallel processes, one assembly each (python -m tools.cells
## list names the cells). CELLS="shard-3 shared" picks cells; more options in ARGS.
CELLS ?=
CELL_ARGS = $(foreach cell,$(CELLS),--cell $(cell))
synth: setup
	python -m tools.cells synth --tenants $(TENANTS) $(CELL_ARGS) $(ARGS)

## deploy: synthesize, then `cdk deploy` every cell (or CELLS), each target's shared cell first.
## CDK CLI deploy options after --, e.g. make deploy ARGS="-- --require-approval never".
deploy: setup
	python -m tools.cells deploy --tenants $(TENANTS) $(CELL_ARGS) $(ARGS)

## cells: the cells of the tenants file and what each holds.
cells: setup
	python -m tools.cells list --tenants $(TENANTS)

## test: the whole test suite, in WORKERS (default 3) pytest processes.
## Template assertions, snapshots, cdk-nag, cfn-lint, handlers, moto canaries, end to end
## (pytest-xdist; each test file stays in one process, so an end-to-end module starts one local
## pipeline); the generic checks of tests/test_user_tenants.py run on the tenants file.
## WORKERS=0 runs it in this process.
WORKERS ?= 3
test: setup lint
	pytest -n $(WORKERS) --dist loadfile --no-loadscope-reorder $(ARGS)

## lint: ruff (lint rules and the format, as configured in pyproject.toml) and mypy (strict, on
## lambdas/ and pipeline_constructs/); make test runs it first. `ruff format .` and
## `ruff check --fix .` repair most findings.
lint: setup
	ruff check .
	ruff format --check .
	mypy

## test-fast: the unit and template tests, for everyday tenant edits (no test marked slow).
## One process a core: it only computes, and a third process on two cores made it slower.
## Config validation, templates, snapshots, cdk-nag, the tenants file's checks, handlers and
## ops on moto; not the end-to-end suite, the CDK CLI, git, many synths, apps of many synthetic
## tenants, cfn-lint over the fixture apps (tests/test_user_tenants.py still lints the templates
## of your tenants file).
test-fast: setup
	pytest -n auto --dist loadfile -m "not slow" $(ARGS)

## fuzz: the config fuzz at length (make test runs a few examples): generated tenants files, each
## refused naming where, field and fix, or synthesized within every deploy-time limit, cdk-nag and
## cfn-lint clean. FUZZ_EXAMPLES small files (every option, at and past its bounds), FUZZ_LARGE_EXAMPLES
## large ones (150 to 1,000 tenants, shards, targets); about 50 minutes at the defaults.
FUZZ_EXAMPLES ?= 500
FUZZ_LARGE_EXAMPLES ?= 30
fuzz: setup
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) FUZZ_LARGE_EXAMPLES=$(FUZZ_LARGE_EXAMPLES) FUZZ_PARSED_EXAMPLES=5000 \
		pytest tests/test_config_fuzz.py -p no:cacheprovider -q --hypothesis-show-statistics $(ARGS)

## diff: offline diff of BASE (default origin/main) and the working tree, no AWS credentials.
## Per tenant then per stack, then the full template diffs; SUMMARY=1 prints the summary alone. When
## only the tenants file changed, only the cells it touches are synthesized and diffed. The base's
## tenants file is BASE's copy of TENANTS; a TENANTS outside the repository (or new since BASE) has
## none, so name one: BASE_TENANTS=old.yaml compares the two files on the working tree's code,
## BASE_TENANTS=<the TENANTS file> shows what the code change since BASE does to that file. Exit 0
## once the diff is printed, differences or not; STRICT=1 (CI) fails on differences (python -m
## tools.offline_diff --strict exits 1, make its own 2). An error (BASE not found, no base tenants
## file, a revision that does not synthesize) fails either way.
BASE ?= origin/main
BASE_TENANTS ?=
STRICT ?=
SUMMARY ?=
diff: setup
	python -m tools.offline_diff --base $(BASE) --tenants $(TENANTS)$(if $(BASE_TENANTS), --base-tenants $(BASE_TENANTS))$(if $(STRICT), --strict)$(if $(SUMMARY), --summary)

## iam-lint: every IAM policy of the tenants file's templates through parliament.
## Prints each finding (acknowledged ones with their reason, tools/iam_lint_acknowledgements.yaml);
## exit 0 clean, 1 a finding nobody acknowledged, 2 the tenants file does not synthesize.
iam-lint: setup
	python -m tools.iam_lint --tenants $(TENANTS)

## security-doc: regenerate the least-privilege tables of docs/security.md from the templates.
## tests/test_security_doc.py fails when they drift.
security-doc: setup
	python -m tools.security_table --write

## config-docs: regenerate tenants.schema.json and docs/configuration.md from the config model.
## The model is pipeline_constructs/config.py; tests/test_config_docs.py fails when they drift.
config-docs: setup
	python -m tools.config_docs --write

## cloud-test: opt-in test on a real AWS account (needs credentials and a Region; exit 2 without).
## It deploys two throwaway tenants and a recording core-system stand-in, checks order, exactly-once
## and halt/resume, prints the hand-off gap and records/s, destroys everything, also after a
## failure or Ctrl-C (docs/development.md#cloud-test). Its scenario runs in make test on the local runtime.
cloud-test: setup
	python -m cloudtest $(ARGS)

## clean: remove cdk.out, cells.out and .pytest_cache.
clean:
	rm -rf cdk.out cells.out .pytest_cache
