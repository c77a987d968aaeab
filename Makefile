# One entry point for set-up, synth, tests and the local demo. Every target installs what it
# needs first (Python venv from requirements-dev.txt, Node 22 + the pinned CDK CLI from npm).

VENV ?= .venv
PYTHON ?= python3
export PATH := $(CURDIR)/node_modules/.bin:$(CURDIR)/$(VENV)/bin:$(PATH)
export CDK_DISABLE_CLI_TELEMETRY := true

.PHONY: setup demo synth deploy cells test test-fast clean diff iam-lint security-doc config-docs

setup: $(VENV)/.installed node_modules/.installed

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements-dev.txt
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

## Every target reads the tenants file TENANTS (default tenants.yaml): make demo TENANTS=my.yaml
TENANTS ?= tenants.yaml
export TENANTS

## demo: the main job: the tenants file running end to end on a local moto server, with
## sample files, live progress and a verification table. python -m demo exits 0 when every
## guarantee held, 1 when one broke, 2 for bad usage or a bad tenants file, 3 when the run
## timed out (--timeout) before every file closed (nothing verified); make reports any
## non-zero exit as its own 2. Options go in ARGS, e.g.
## make demo ARGS="--scenario malformed" (python -m demo --help).
demo: setup
	python -m demo --tenants $(TENANTS) $(ARGS)

## synth: synthesize every cell of the tenants file (python -m tools.cells list names them) with
## the pinned CDK CLI, in parallel processes, one assembly each: cells.out/<cell> (no
## credentials needed). CELLS="shard-3 shared" picks cells; more options in ARGS.
CELLS ?=
CELL_ARGS = $(foreach cell,$(CELLS),--cell $(cell))
synth: setup
	python -m tools.cells synth --tenants $(TENANTS) $(CELL_ARGS) $(ARGS)

## deploy: synthesize, then `cdk deploy` every cell (or CELLS): each target's shared cell first,
## then the others; CDK CLI deploy options after --, e.g. make deploy ARGS="-- --require-approval never".
deploy: setup
	python -m tools.cells deploy --tenants $(TENANTS) $(CELL_ARGS) $(ARGS)

## cells: the cells of the tenants file and what each holds.
cells: setup
	python -m tools.cells list --tenants $(TENANTS)

## test: the whole test suite (template assertions, snapshots, cdk-nag, cfn-lint, handlers,
## moto canaries, end to end) in WORKERS pytest processes (pytest-xdist; each test file stays
## in one process, so an end-to-end module starts one local pipeline); the generic checks of
## tests/test_user_tenants.py run on the tenants file. WORKERS=0 runs it in this process.
WORKERS ?= 2
test: setup
	pytest -n $(WORKERS) --dist loadfile $(ARGS)

## test-fast: the unit and template tests, for everyday tenant edits: config validation,
## templates, snapshots, cdk-nag, the tenants file's checks, handlers and ops on moto; no test
## marked slow (the end-to-end suite, the CDK CLI, git, many synths).
test-fast: setup
	pytest -n $(WORKERS) -m "not slow" $(ARGS)

## diff: offline diff of BASE (default origin/main) and the working tree, per tenant then per
## stack, no AWS credentials; when only the tenants file changed, only the cells it touches are
## synthesized and diffed (python -m tools.offline_diff: exit 0 same, 1 different, 2 error;
## make turns any non-zero exit into its own 2). TENANTS=path picks the tenants file.
BASE ?= origin/main
diff: setup
	python -m tools.offline_diff --base $(BASE) --tenants $(TENANTS)

## iam-lint: every IAM policy of the tenants file's templates through parliament; prints each
## finding (acknowledged ones with their reason, tools/iam_lint_acknowledgements.yaml); exit 0
## clean, 1 a finding nobody acknowledged, 2 the tenants file does not synthesize.
iam-lint: setup
	python -m tools.iam_lint --tenants $(TENANTS)

## security-doc: regenerate the least-privilege tables of docs/security.md from the templates
## (tests/test_security_doc.py fails when they drift).
security-doc: setup
	python -m tools.security_table --write

## config-docs: regenerate tenants.schema.json and docs/configuration.md from the config model
## (pipeline_constructs/config.py); tests/test_config_docs.py fails when they drift.
config-docs: setup
	python -m tools.config_docs --write

clean:
	rm -rf cdk.out cells.out .pytest_cache
