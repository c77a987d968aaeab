"""Deployment targets: one CDK Stage per target (account and Region), each with its own shared
stack and its tenants' stacks; without `targets:` the app is the one of today."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pipeline_constructs import capacity
from tests.conftest import cfn_lint_findings

TWO_TARGETS = textwrap.dedent(
    """
    account_limits: {iam_roles: 2000}
    targets:
      prod: {account: '111111111111', region: eu-west-1}
      dr: {account: '222222222222', region: us-east-1, account_limits: {state_machines: 500}}
    defaults:
      sink: {url: https://core.example.com/records, auth: {type: bearer, secret: core/token}}
      target: prod
    tenants:
      - {id: acme, prefix: acme/}
      - {id: globex, prefix: globex/, format: jsonl}
      - {id: initech, prefix: initech/, target: dr}
    """
)


@pytest.fixture(scope="module")
def two_targets(tmp_path_factory):
    """The two-target file, built and synthesized once (cdk-nag on, as `cdk synth`)."""
    from aws_cdk import App

    from pipeline_constructs.application import build_app

    root = tmp_path_factory.mktemp("targets")
    tenants_file = root / "tenants.yaml"
    tenants_file.write_text(TWO_TARGETS)
    built = build_app(tenants_file, app=App(outdir=str(root / "cdk.out")))
    return built, built.app.synth(), root / "cdk.out"


def stacks_of(assembly, built, target: str) -> dict[str, object]:
    nested = assembly.get_nested_assembly(built.stages[target].stage.artifact_id)
    return {stack.stack_name: stack for stack in nested.stacks}


def test_a_two_target_file_synthesizes_one_stage_per_target_with_its_own_shared_stack(two_targets):
    built, assembly, _ = two_targets
    # THEN nothing sits at the top of the app: every stack is in its target's Stage
    assert assembly.stacks == []
    assert sorted(built.stages) == ["dr", "prod"]
    prod, dr = stacks_of(assembly, built, "prod"), stacks_of(assembly, built, "dr")
    # each Stage: a shared stack and its own tenants only, under the names `ops` looks for
    assert sorted(prod) == [
        "OrderedIngest-Shared",
        "OrderedIngest-Tenant-acme",
        "OrderedIngest-Tenant-globex",
    ]
    assert sorted(dr) == ["OrderedIngest-Shared", "OrderedIngest-Tenant-initech"]
    # bound to the target's account and Region (explicit: synth looked nothing up)
    assert {(s.environment.account, s.environment.region) for s in prod.values()} == {
        ("111111111111", "eu-west-1")
    }
    assert {(s.environment.account, s.environment.region) for s in dr.values()} == {
        ("222222222222", "us-east-1")
    }
    # and `cdk deploy 'prod/*'` selects a Stage's stacks by their hierarchical ids
    assert {s.hierarchical_id for s in prod.values()} == {
        "prod/OrderedIngest-Shared",
        "prod/OrderedIngest-Tenant-acme",
        "prod/OrderedIngest-Tenant-globex",
    }


def test_a_targets_shared_stack_knows_its_own_tenants_only(two_targets):
    built, assembly, _ = two_targets
    dr_shared = json.dumps(stacks_of(assembly, built, "dr")["OrderedIngest-Shared"].template)
    prod_shared = json.dumps(stacks_of(assembly, built, "prod")["OrderedIngest-Shared"].template)
    # the catch-all rule and the dashboards name the target's tenant prefixes, not the others'
    assert "initech" in dr_shared and "acme" not in dr_shared and "globex" not in dr_shared
    assert "acme" in prod_shared and "initech" not in prod_shared
    # build_app still lists every tenant's stack, whatever its target
    assert sorted(built.tenants) == ["acme", "globex", "initech"]
    assert built.tenants["initech"].node.scope is built.stages["dr"].stage


@pytest.mark.slow  # cfn-lint or synthesis over whole apps: make test (make test-fast runs tests/test_user_tenants.py)
def test_a_target_stage_stays_cdk_nag_clean_and_cfn_lint_clean(two_targets):
    built, assembly, outdir = two_targets
    # synth would have raised ValidationFailed on any unacknowledged finding
    report = json.loads((outdir / "validation-report.json").read_text())
    (nag,) = [r for r in report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert nag["conclusion"] == "success" and nag["violations"] == []
    for target in built.stages:
        for name, stack in stacks_of(assembly, built, target).items():
            assert cfn_lint_findings(stack.template) == [], (target, name)


def test_capacity_is_computed_per_target(two_targets):
    built, _, _ = two_targets
    found = {
        (u.quota.field, u.where): (u.need.count, u.limit)
        for u in capacity.usage(capacity.targets(built.config))
    }
    assert found[("eventbridge_rules_per_bus", "target 'prod' (111111111111/eu-west-1)")] == (5, 300)
    assert found[("eventbridge_rules_per_bus", "target 'dr' (222222222222/us-east-1)")] == (3, 300)
    # dr's own limit overrides the top-level default; prod keeps the default
    assert found[("state_machines", "target 'dr' (222222222222/us-east-1)")] == (3, 500)
    assert found[("state_machines", "target 'prod' (111111111111/eu-west-1)")] == (6, 100000)
    # the top-level account_limits apply to every target
    assert found[("iam_roles", "target 'prod' (111111111111/eu-west-1)")] == (8, 2000)


def test_without_targets_the_stacks_stay_at_the_top_env_agnostic():
    from aws_cdk import App

    from pipeline_constructs.application import build_app

    built = build_app(Path(__file__).resolve().parent / "fixtures" / "tenants.yaml", app=App(), nag=False)
    assert built.stages == {}
    assert built.shared.node.scope is built.app
    assert built.shared.stack_name == "OrderedIngest-Shared"
    assert built.shared.environment == "aws://unknown-account/unknown-region"


def test_fails_when_the_demo_is_given_a_tenants_file_with_targets(tmp_path, capsys):
    # GIVEN a two-target file WHEN the local demo is asked to run it
    from demo.__main__ import main

    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(TWO_TARGETS)
    # THEN it refuses before starting anything, saying why and what to run instead
    assert main(["--tenants", str(tenants_file)]) == 2
    assert " ".join(capsys.readouterr().out.split()) == (
        f"{tenants_file} declares deployment targets: the local runtime runs the single-deployment layout only; "
        "run the demo on a tenants file without 'targets:' (and without 'target:' on the tenants)"
    )
