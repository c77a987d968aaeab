"""The config space fuzzed: every tenants file the strategies of tests/tenants_files.py make is
either refused with a message that names where, the field and the fix, or synthesizes (cdk-nag
and the deploy-time limits as every synth runs them) into templates cfn-lint finds no error in.
No file ends in a traceback.

`make test` runs a bounded number of examples; `make fuzz` runs many more (FUZZ_EXAMPLES
small files, FUZZ_LARGE_EXAMPLES large ones; docs/development.md, "The config fuzz").
"""

from __future__ import annotations

import os
import re
import tempfile

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings

from pipeline_constructs.application import build_app, new_app
from pipeline_constructs.config import AppConfig, ConfigError, parse_config
from tests.conftest import cfn_lint_findings
from tests.tenants_files import large_files, small_files

SMALL = int(os.environ.get("FUZZ_EXAMPLES", "8"))
LARGE = int(os.environ.get("FUZZ_LARGE_EXAMPLES", "1"))
#: How many files are only validated (fast), beside those synthesized.
PARSED = int(os.environ.get("FUZZ_PARSED_EXAMPLES", "300"))
_SETTINGS = dict(
    deadline=None,
    derandomize=not os.environ.get("FUZZ_EXAMPLES"),
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: Where a problem is: a tenant, a block of the file, or a deployment target (capacity).
WHERE = re.compile(
    r"^(target '[^']*' )?(tenant '[^']*'|shard \d+|defaults|file|notifications|routing|account_limits"
    r"|targets|encryption|qualifier|target '[^']*'( \([^)]*\))?|account \d{12} \([^)]*\)"
    r"|the deployment \([^)]*\)): "
)


def refused_or_valid(document: dict) -> AppConfig | None:
    """The file's config, or None when it is refused, every problem in the documented form."""
    try:
        config = parse_config(yaml.safe_dump(document, sort_keys=False))
    except ConfigError as error:
        assert error.problems, error
        for line in error.problems:
            assert WHERE.match(line), line
            assert "; " in line, f"no fix: {line}"
        event("refused")
        return None
    event("valid")
    return config


def synthesized_templates(config: AppConfig, cell: str | None = None) -> dict[str, dict]:
    """Every template of the file's app (or of one cell), synthesized as `cdk synth` does."""
    with tempfile.TemporaryDirectory() as scratch:
        built = build_app("fuzzed.yaml", app=new_app(outdir=scratch), config=config, cell=cell)
        assembly = built.app.synth()  # cdk-nag and the deploy-time limits fail it
        return {
            f"{stack.stack_name}@{stack.environment.region}": stack.template
            for stack in assembly.stacks_recursively
        }


def assert_deploys(config: AppConfig, cells: list[str | None]) -> None:
    for cell in cells:
        for name, template in synthesized_templates(config, cell).items():
            errors = [f for f in cfn_lint_findings(template, regions=("us-east-1",)) if f.startswith("E")]
            assert errors == [], (cell, name)


@settings(max_examples=PARSED, **_SETTINGS)
@given(small_files())
def test_every_generated_file_is_refused_with_where_field_and_fix_or_valid(document):
    refused_or_valid(document)


@pytest.mark.slow
@settings(max_examples=SMALL, **_SETTINGS)
@given(small_files())
def test_every_generated_file_that_validates_synthesizes_within_every_limit(document):
    config = refused_or_valid(document)
    if config is not None:
        assert_deploys(config, [None])


@pytest.mark.slow
@settings(max_examples=LARGE, **_SETTINGS)
@given(large_files())
def test_every_large_generated_file_is_refused_or_its_growing_cells_synthesize(document):
    """The cells that grow with the file: every target's shared cell (buckets' policies, the
    catch-all, the shard routing, the first dashboard), and each target's largest cell of
    tenants (the default bus's rules without shards; a shard bus's rules with them)."""
    config = refused_or_valid(document)
    if config is None:
        return
    from pipeline_constructs import cell_plan

    every = cell_plan.cells_of(config)
    by_target: dict[str | None, list[cell_plan.Cell]] = {}
    for cell in every:
        by_target.setdefault(cell.target, []).append(cell)
    chosen = []
    for members in by_target.values():
        chosen += [c.name for c in members if c.shared and not c.tenant_ids]
        chosen.append(max(members, key=lambda c: len(c.tenant_ids)).name)
    assert_deploys(config, list(dict.fromkeys(chosen)))


def test_the_strategies_reach_synthesis_and_refusal_alike():
    """The generator is worth its time only if both outcomes are common: a file of the
    strategies is valid about as often as it is refused (a fixed sample)."""
    valid = refused = 0

    @settings(
        max_examples=200,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(small_files())
    def count(document):
        nonlocal valid, refused
        if refused_or_valid(document) is None:
            refused += 1
        else:
            valid += 1

    count()
    assert valid >= 40 and refused >= 40, (valid, refused)
