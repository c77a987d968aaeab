"""The app as a whole: stack layout, snapshots, cdk-nag, cfn-lint (the CDK CLI: test_cdk_cli.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from tests.conftest import FIXTURE_TENANTS, ROOT, cfn_lint_findings, normalise_asset_hashes

TENANT_STACKS = ["OrderedIngest-Tenant-acme", "OrderedIngest-Tenant-globex", "OrderedIngest-Tenant-initech"]


@pytest.fixture
def json_snapshot(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


def test_one_shared_stack_and_one_stack_per_tenant_named_after_the_tenant(synthesized):
    assert sorted(synthesized.templates) == ["OrderedIngest-Shared", *TENANT_STACKS]


def test_each_stack_stays_far_below_cloudformation_limits(synthesized):
    for name, template in synthesized.templates.items():
        # A tenant stack's size does not depend on the number of tenants (one stack each).
        assert len(template["Resources"]) < 100, name
        assert len(json.dumps(template)) < 200_000, name


def test_tenant_stacks_have_the_same_shape_and_mention_no_other_tenant(synthesized):
    def shape(name):
        return sorted(r["Type"] for r in synthesized.templates[name]["Resources"].values())

    assert (
        shape("OrderedIngest-Tenant-acme")
        == shape("OrderedIngest-Tenant-globex")
        == shape("OrderedIngest-Tenant-initech")
    )
    acme = json.dumps(synthesized.templates["OrderedIngest-Tenant-acme"])
    assert "globex" not in acme and "initech" not in acme


def kept_resources(templates: dict[str, dict]) -> dict[str, tuple[str, str, str]]:
    """Every resource whose `DeletionPolicy` is not `Delete`: (type, DeletionPolicy, UpdateReplacePolicy)
    by "<stack> <logical id>"."""
    return {
        f"{stack} {logical_id}": (r["Type"], r["DeletionPolicy"], r.get("UpdateReplacePolicy", "Delete"))
        for stack, template in templates.items()
        for logical_id, r in template["Resources"].items()
        if r.get("DeletionPolicy", "Delete") != "Delete"
    }


def test_kept_resources_are_deleted_when_the_deploy_that_created_them_rolls_back(synthesized):
    """A retained bucket, table, log group or key of a fixed name that outlived a failed first
    create would fail the retry ("already exists"): each is RetainExceptOnCreate, kept on
    replacement. State machine versions alone stay Retain (they have no name, and an execution
    may run on one a rolled-back deploy published: pipeline_constructs/versions.py)."""
    kept = kept_resources(synthesized.templates)
    versions = {k: v for k, v in kept.items() if v[0] == "AWS::StepFunctions::StateMachineVersion"}
    others = {k: v for k, v in kept.items() if k not in versions}
    assert {v[0] for v in others.values()} == {
        "AWS::S3::Bucket",
        "AWS::DynamoDB::Table",
        "AWS::KMS::Key",
        "AWS::Logs::LogGroup",
    }
    assert {k: v[1:] for k, v in others.items()} == dict.fromkeys(others, ("RetainExceptOnCreate", "Retain"))
    assert len(versions) == 3 * len(TENANT_STACKS)  # file, section and page workflow of each tenant
    assert set(versions.values()) == {("AWS::StepFunctions::StateMachineVersion", "Retain", "Retain")}


@pytest.mark.parametrize("stack_name", ["OrderedIngest-Shared", *TENANT_STACKS])
def test_stack_snapshot(synthesized, json_snapshot, stack_name):
    assert normalise_asset_hashes(synthesized.templates[stack_name]) == json_snapshot


def test_cdk_nag_aws_solutions_reports_no_unacknowledged_finding(synthesized):
    # The synth itself would have raised ValidationFailed on any finding; the report agrees
    # and lists what was acknowledged.
    (nag,) = [r for r in synthesized.validation_report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert nag["conclusion"] == "success"
    assert nag["violations"] == []
    assert {v["ruleName"].split("[")[0] for v in nag["suppressedViolations"]} == {
        "AwsSolutions-SQS3",
        "AwsSolutions-SF1",
        "AwsSolutions-SF2",
        "AwsSolutions-IAM5",
    }


@pytest.mark.slow  # one more synth, of a failing app: cdk-nag's plumbing (make test only)
def test_cdk_nag_runs_on_every_synth_and_fails_it_on_a_finding(tmp_path):
    from aws_cdk import App, Stack
    from aws_cdk import aws_sqs as sqs

    from pipeline_constructs.application import build_app

    built = build_app(FIXTURE_TENANTS, app=App(outdir=str(tmp_path)))
    sqs.Queue(Stack(built.app, "Extra"), "QueueWithoutTls")  # AwsSolutions-SQS3 and SQS4
    with pytest.raises(RuntimeError, match="ValidationFailed(.|\n)*AwsSolutions-SQS4"):
        built.app.synth()


def acknowledgements(outdir) -> list[tuple[str, str, str]]:
    found = []
    for metadata_file in outdir.glob("*.metadata.json"):
        for path, entries in json.loads(metadata_file.read_text()).items():
            for entry in entries:
                if entry["type"] == "aws:cdk:acknowledged-rules":
                    found += [(path, rule, reason) for rule, reason in entry["data"].items()]
    return found


def test_every_acknowledgement_names_a_nag_rule_and_carries_a_real_reason(synthesized):
    found = acknowledgements(synthesized.outdir)
    rules = {rule.split("[")[0] for _, rule, _ in found}
    assert rules == {
        "AwsSolutions::AwsSolutions-SQS3",
        "AwsSolutions::AwsSolutions-SF1",
        "AwsSolutions::AwsSolutions-SF2",  # X-Ray is opt-in per tenant (`tracing: true`)
        "AwsSolutions::AwsSolutions-IAM5",
    }
    for path, rule, reason in found:
        assert len(reason) > 60, (path, rule, reason)
    # IAM5 is acknowledged finding by finding, never for a whole resource.
    assert all("[" in rule for _, rule, _ in found if "IAM5" in rule)


@pytest.mark.slow  # cfn-lint or synthesis over whole apps: make test (make test-fast runs tests/test_user_tenants.py)
def test_cfn_lint_finds_no_error_and_no_warning_beyond_cdks_redundant_depends_on(synthesized):
    for name, template in synthesized.templates.items():
        assert cfn_lint_findings(template) == [], name


def test_an_invalid_tenants_file_fails_the_app_with_the_message(tmp_path):
    bad = tmp_path / "tenants.yaml"
    bad.write_text(
        "tenants:\n  - {id: acme, prefix: a/, format: xml, sink: {url: 'https://x.example.com', auth: {type: none}}}\n"
    )
    result = subprocess.run(
        [sys.executable, str(ROOT / "app.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={
            **os.environ,
            "CDK_CONTEXT_JSON": json.dumps({"tenants": str(bad)}),
            "CDK_OUTDIR": str(tmp_path / "out"),
        },
    )
    assert result.returncode == 1
    assert "tenant 'acme': field 'format' = 'xml'" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_app_leaves_cdks_builtin_template_validation_to_cfn_lint(tmp_path):
    """GIVEN a template CloudFormation would refuse (an unknown property) WHEN synthesized with
    a plain App THEN CDK's built-in validation reports it (as a warning, failing nothing); WHEN
    with `new_app` (app.py, the tests, the local runtime) THEN that plugin does not run: it cost
    0.1 s a template on every synth (70 % of the synth phase), and cfn-lint, above, is the check
    that fails on errors."""
    from aws_cdk import App, CfnResource, Stack

    from pipeline_constructs.application import new_app

    def plugins(app: App, outdir) -> list[str]:
        CfnResource(Stack(app, "Bad"), "Queue", type="AWS::SQS::Queue", properties={"NotAProperty": 1})
        app.synth()
        report = outdir / "validation-report.json"
        return (
            [p["pluginName"] for p in json.loads(report.read_text())["pluginReports"]]
            if report.exists()
            else []
        )

    assert plugins(App(outdir=str(tmp_path / "plain")), tmp_path / "plain") == ["CloudFormation Validate"]
    assert plugins(new_app(outdir=str(tmp_path / "ours")), tmp_path / "ours") == []
    assert "new_app()" in (ROOT / "app.py").read_text()
