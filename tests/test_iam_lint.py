"""parliament over every IAM policy of the synthesized templates.

Two apps: the tests' tenants file, and the security doc's (the same file with a completion
entry point and shard routing, so that every kind of role is linted). A finding that
tools/iam_lint_acknowledgements.yaml does not acknowledge fails, listed one per line.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tools import iam_lint, security_table
from tools.iam_policies import PolicyDocument, Resolver, UnresolvableError, policy_documents


@pytest.fixture(scope="module")
def doc_templates() -> dict[str, dict]:
    return security_table.synthesize()


@pytest.fixture(scope="module")
def acknowledgements() -> list[iam_lint.Acknowledgement]:
    return iam_lint.load_acknowledgements()


def _resources(doc: PolicyDocument) -> list:
    return [
        r
        for s in doc.statements()
        for r in (s.get("Resource") if isinstance(s.get("Resource"), list) else [s.get("Resource")])
    ]


def test_every_policy_of_the_fixture_app_passes_parliament_or_is_acknowledged(synthesized, acknowledgements):
    """GIVEN the tests' tenants file WHEN every policy of every stack is linted THEN each finding
    is acknowledged with its reason."""
    new = iam_lint.unacknowledged(iam_lint.lint(synthesized.templates), acknowledgements)
    assert new == [], "parliament findings nobody acknowledged:\n" + "\n".join(map(str, new))


def test_every_policy_of_the_completion_and_routing_roles_passes_parliament(doc_templates, acknowledgements):
    """GIVEN a tenant with a completion entry point and sharded routing WHEN linted THEN the
    completion role, the forwarding role and their resource policies pass too."""
    documents = policy_documents(doc_templates)
    assert {d.label.split("/")[-1] for d in documents} >= {
        "PipelineCompletionRoleDefaultPolicy",
        "ForwardingPutEventsOnAppBuses",
    }
    new = iam_lint.unacknowledged(iam_lint.lint(doc_templates), acknowledgements)
    assert new == [], "parliament findings nobody acknowledged:\n" + "\n".join(map(str, new))


def test_every_acknowledgement_still_covers_a_finding(synthesized, doc_templates, acknowledgements):
    """GIVEN both apps' findings THEN no acknowledgement is stale: each covers at least one."""
    findings = iam_lint.lint(synthesized.templates) + iam_lint.lint(doc_templates)
    stale = [ack for ack in acknowledgements if not any(ack.covers(f) for f in findings)]
    assert stale == []


def test_every_policy_kind_is_collected_and_every_resource_is_an_arn(synthesized):
    """GIVEN the fixture app THEN identity, trust and resource policies are all collected (one
    identity document per AWS::IAM::Policy, a trust document per role, each bucket, queue and
    topic policy and key policy), and no intrinsic is left in any Resource: each is `*` or an ARN."""
    documents = policy_documents(synthesized.templates)

    def count(resource_type):
        return sum(
            1
            for t in synthesized.templates.values()
            for r in t["Resources"].values()
            if r["Type"] == resource_type
        )

    def by_type(resource_type, kind):
        return [d for d in documents if d.resource_type == resource_type and d.kind == kind]

    assert len(by_type("AWS::IAM::Policy", "identity")) == count("AWS::IAM::Policy") > 0
    assert len(by_type("AWS::IAM::Role", "trust")) == count("AWS::IAM::Role") > 0
    for resource_type in (
        "AWS::S3::BucketPolicy",
        "AWS::SQS::QueuePolicy",
        "AWS::SNS::TopicPolicy",
        "AWS::KMS::Key",
        "AWS::Logs::ResourcePolicy",
    ):
        assert len(by_type(resource_type, "resource")) == count(resource_type) > 0, resource_type
    for doc in documents:
        for resource in _resources(doc):
            assert resource == "*" or (isinstance(resource, str) and resource.startswith("arn:aws:")), (
                doc.label,
                resource,
            )


def test_intrinsics_become_the_arn_of_the_resource_they_name(synthesized):
    """GIVEN the closer's policy WHEN rendered THEN a GetAtt of the queue is its SQS ARN, an
    imported ledger table ARN is a DynamoDB table ARN, a Join of pseudo parameters is the
    execution ARN pattern; in a key policy `*` is the key itself."""
    documents = {d.label: d for d in policy_documents(synthesized.templates)}
    closer = {
        s.get("Sid"): s
        for s in documents["OrderedIngest-Tenant-acme/PipelineCloserRoleDefaultPolicy"].statements()
    }
    assert (
        closer["HandOffOnOwnQueue"]["Resource"] == "arn:aws:sqs:us-east-1:123456789012:acme-event-queue.fifo"
    )
    assert (
        closer["OwnLedgerItemsOnly"]["Resource"]
        == "arn:aws:dynamodb:us-east-1:123456789012:table/SharedLedgerTable"
    )
    assert closer["DescribeAndStopOwnExecutions"]["Resource"] == (
        "arn:aws:states:us-east-1:123456789012:execution:acme-file-ingest-workflow:*"
    )
    key = documents["OrderedIngest-Shared/SharedAlarmTopicKey"]
    assert {s["Resource"] for s in key.statements()} == {
        "arn:aws:kms:us-east-1:123456789012:key/SharedAlarmTopicKey"
    }


def test_a_statement_whose_resource_does_not_fit_its_action_is_a_new_finding(synthesized, acknowledgements):
    """GIVEN the split and register role granted s3:GetObject on the landing BUCKET's ARN (not
    its objects) WHEN linted THEN parliament reports a RESOURCE_MISMATCH that no
    acknowledgement covers, naming the policy and the statement."""
    templates = copy.deepcopy(synthesized.templates)
    resources = templates["OrderedIngest-Tenant-acme"]["Resources"]
    (policy_id,) = [k for k in resources if k.startswith("PipelineDataRoleDefaultPolicy")]
    resources[policy_id]["Properties"]["PolicyDocument"]["Statement"].append(
        {
            "Sid": "WrongResource",
            "Effect": "Allow",
            "Action": "s3:GetObject",
            "Resource": {
                "Fn::Join": [
                    "",
                    [
                        "arn:",
                        {"Ref": "AWS::Partition"},
                        ":s3:::ordered-ingest-landing-",
                        {"Ref": "AWS::AccountId"},
                    ],
                ]
            },
        }
    )
    new = iam_lint.unacknowledged(iam_lint.lint(templates), acknowledgements)
    assert [str(f) for f in new] == [
        (
            "RESOURCE_MISMATCH in identity policy OrderedIngest-Tenant-acme/PipelineDataRoleDefaultPolicy [WrongResource]: "
            "s3:GetObject: required_format=arn:*:s3:::*/*"
        )
    ]


def test_an_acknowledgement_covers_only_the_statements_it_names(acknowledgements):
    """GIVEN the trust-policy acknowledgement THEN it covers a service principal's
    sts:AssumeRole, not the same finding for a trust to another account's role."""
    service = iam_lint.Finding(
        "S/Role",
        "AWS::IAM::Role",
        "trust",
        "sts:AssumeRole",
        "Service:lambda.amazonaws.com",
        "CREDENTIALS_EXPOSURE",
        '{"actions": ["sts:assumerole"]}',
    )
    account = iam_lint.Finding(
        "S/Role",
        "AWS::IAM::Role",
        "trust",
        "sts:AssumeRole",
        "AWS:arn:aws:iam::111111111111:role/other",
        "CREDENTIALS_EXPOSURE",
        '{"actions": ["sts:assumerole"]}',
    )
    assert iam_lint.unacknowledged([service, account], acknowledgements) == [account]


def test_fails_when_an_acknowledgement_has_no_reason(tmp_path: Path):
    path = tmp_path / "acks.yaml"
    path.write_text("- issue: RESOURCE_STAR\n  policy: '*'\n", encoding="utf-8")
    with pytest.raises(ValueError) as raised:
        iam_lint.load_acknowledgements(path)
    assert (
        str(raised.value)
        == "acks.yaml entry 1: reason missing; every acknowledgement names its issue and its reason"
    )


def test_fails_when_a_policy_names_a_resource_type_the_resolver_does_not_know():
    templates = {
        "S": {
            "Resources": {
                "Thing": {"Type": "AWS::Made::Up", "Properties": {}},
                "Policy": {
                    "Type": "AWS::IAM::Policy",
                    "Properties": {
                        "PolicyDocument": {
                            "Statement": [
                                {
                                    "Effect": "Allow",
                                    "Action": "s3:GetObject",
                                    "Resource": {"Fn::GetAtt": ["Thing", "Arn"]},
                                }
                            ]
                        }
                    },
                },
            }
        }
    }
    with pytest.raises(UnresolvableError) as raised:
        policy_documents(templates, Resolver(templates))
    assert (
        str(raised.value)
        == "S: the ARN of AWS::Made::Up (Thing) is not known to tools/iam_policies.py ARN_FORMATS"
    )


def test_the_command_prints_every_finding_and_exits_0_when_all_are_acknowledged(capsys):
    """GIVEN the tests' tenants file WHEN `python -m tools.iam_lint` runs THEN it lists the
    acknowledged findings with their reasons and exits 0."""
    from tests.conftest import FIXTURE_TENANTS

    assert iam_lint.main(["--tenants", str(FIXTURE_TENANTS)]) == iam_lint.EXIT_CLEAN
    out = capsys.readouterr().out
    assert (
        "acknowledged: CREDENTIALS_EXPOSURE in trust policy OrderedIngest-Tenant-acme/PipelineControllerRole"
        in out
    )
    assert "    reason: A trust policy:" in out
    assert out.rstrip().endswith("acknowledged, 0 new")


def test_sub_if_and_select_are_rendered_like_cloudformation_would():
    """GIVEN a policy written with Fn::Sub (pseudo parameters, a GetAtt, a variable map), Fn::If
    on a Region condition and Fn::Select/Fn::Split WHEN rendered THEN each is the string
    CloudFormation would produce in us-east-1."""
    templates = {
        "S": {
            "Conditions": {"InUsEast1": {"Fn::Equals": [{"Ref": "AWS::Region"}, "us-east-1"]}},
            "Resources": {"Queue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "q.fifo"}}},
        }
    }
    resolver = Resolver(templates)
    assert resolver.resolve(
        "S", {"Fn::Sub": "arn:${AWS::Partition}:s3:::b-${AWS::AccountId}/${Queue.Arn}"}
    ) == ("arn:aws:s3:::b-123456789012/arn:aws:sqs:us-east-1:123456789012:q.fifo")
    assert resolver.resolve("S", {"Fn::Sub": ["${Name}-${!Literal}", {"Name": {"Ref": "Queue"}}]}) == (
        "https://sqs.us-east-1.amazonaws.com/123456789012/q.fifo-${Literal}"
    )
    assert resolver.resolve("S", {"Fn::If": ["InUsEast1", "here", "elsewhere"]}) == "here"
    assert (
        resolver.resolve("S", {"Fn::Select": [1, {"Fn::Split": [":", {"Fn::GetAtt": ["Queue", "Arn"]}]}]})
        == "aws"
    )


def test_fails_when_the_tenants_file_does_not_synthesize(tmp_path: Path, capsys):
    """GIVEN a tenants file with a bad prefix WHEN `python -m tools.iam_lint` runs THEN it exits 2
    and passes on the config's own message (which names the tenant, the field and the fix)."""
    bad = tmp_path / "tenants.yaml"
    bad.write_text(
        "defaults: {sink: {url: 'https://core.example.com', auth: {type: bearer, secret: core/token}}}\ntenants:\n  - {id: acme, prefix: /acme}\n",
        encoding="utf-8",
    )
    assert iam_lint.main(["--tenants", str(bad)]) == iam_lint.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith(f"cannot synthesize {bad}: ") and "acme" in err and "prefix" in err


def test_stacks_of_deployment_targets_are_linted_with_their_own_account(tmp_path: Path, acknowledgements):
    """GIVEN two deployment targets (Stages with explicit accounts) WHEN the assembly is linted
    THEN every stack of both Stages is, with its own account and Region (an imported topic ARN
    is the one of its Stage's shared stack), and the key policies' own-account root statement
    is acknowledged in each account."""
    from tests.conftest import synthesize

    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(
        "defaults: {sink: {url: 'https://core.example.com/records', auth: {type: bearer, secret: core/token}}}\n"
        "targets:\n  prod-eu: {account: '111111111111', region: eu-west-1}\n"
        "  prod-us: {account: '222222222222', region: us-east-1}\n"
        "tenants:\n  - {id: acme, prefix: acme/, target: prod-eu}\n  - {id: globex, prefix: globex/, target: prod-us}\n",
        encoding="utf-8",
    )
    built = synthesize(tenants, tmp_path / "cdk.out")
    templates, environments = iam_lint.assembly_templates(built.outdir)

    eu, us = ("111111111111", "eu-west-1"), ("222222222222", "us-east-1")
    assert environments == {
        "prod-eu/OrderedIngest-Shared": eu,
        "prod-eu/OrderedIngest-Tenant-acme": eu,
        "prod-us/OrderedIngest-Shared": us,
        "prod-us/OrderedIngest-Tenant-globex": us,
    }
    documents = {
        d.label: d for d in policy_documents(templates, Resolver(templates, environments=environments))
    }
    closer = {
        s.get("Sid"): s
        for s in documents["prod-us/OrderedIngest-Tenant-globex/PipelineCloserRoleDefaultPolicy"].statements()
    }
    assert closer["NotifyFailures"]["Resource"] == "arn:aws:sns:us-east-1:222222222222:SharedAlarmTopic"
    assert iam_lint.unacknowledged(iam_lint.lint(templates, environments), acknowledgements) == []
