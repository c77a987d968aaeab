"""docs/security.md: its least-privilege tables are what tools/security_table.py generates from
the synthesized templates; `make security-doc` rewrites them."""

from __future__ import annotations

import copy
import re

import pytest

from tools import security_table


@pytest.fixture(scope="module")
def templates() -> dict[str, dict]:
    return security_table.synthesize()


@pytest.fixture(scope="module")
def block(templates) -> str:
    return security_table.render(templates)


def test_the_docs_tables_are_what_the_script_generates_from_the_templates(block):
    """GIVEN the templates of today's code WHEN the tables are generated THEN docs/security.md
    holds exactly them (run `make security-doc` after a change of permissions)."""
    assert security_table.embedded(security_table.DOC.read_text(encoding="utf-8")) == block


def test_a_widened_grant_changes_the_table(templates, block):
    """GIVEN the split and register role's landing read widened from `<prefix>*` to the whole
    bucket WHEN the tables are generated THEN they differ from the doc, in that row."""
    widened = copy.deepcopy(templates)
    resources = widened[security_table.TENANT_STACK]["Resources"]
    (policy_id,) = [k for k in resources if k.startswith("PipelineDataRoleDefaultPolicy")]
    for statement in resources[policy_id]["Properties"]["PolicyDocument"]["Statement"]:
        if statement.get("Sid") == "ReadOwnLandingPrefix":
            statement["Resource"] = {
                "Fn::Join": [
                    "",
                    [
                        "arn:",
                        {"Ref": "AWS::Partition"},
                        ":s3:::ordered-ingest-landing-",
                        {"Ref": "AWS::AccountId"},
                        "-",
                        {"Ref": "AWS::Region"},
                        "/*",
                    ],
                ]
            }
    changed = security_table.render(widened)
    assert (
        "| ReadOwnLandingPrefix | Allow | `s3:GetObject`<br>`s3:GetObjectVersion` | `landing bucket/<prefix>*` |  |"
        in block
    )
    assert (
        "| ReadOwnLandingPrefix | Allow | `s3:GetObject`<br>`s3:GetObjectVersion` | `landing bucket/*` |  |"
        in changed
    )


def test_every_role_of_a_tenant_and_the_routing_role_has_its_table(block):
    """GIVEN the doc's app THEN the tables cover the controller, split and register, closer,
    completion, workflow and forwarding roles, with who assumes them, and nothing names the
    doc tenant, its prefix, the account or the Region literally."""
    roles = re.findall(
        r"^Role `(\w+)` \((one per tenant|shared)\), assumed by `Service: ([a-z.]+)`", block, re.MULTILINE
    )
    assert roles == [
        ("PipelineDataRole", "one per tenant", "lambda.amazonaws.com"),
        ("PipelineCloserRole", "one per tenant", "lambda.amazonaws.com"),
        ("PipelineWorkflowRole", "one per tenant", "states.amazonaws.com"),
        ("PipelineControllerRole", "one per tenant", "lambda.amazonaws.com"),
        ("PipelineCompletionRole", "one per tenant", "lambda.amazonaws.com"),
        ("ForwardingRole", "shared", "events.amazonaws.com"),
    ]
    for literal in (security_table.DOC_TENANT, "initech/incoming/", "123456789012", "us-east-1"):
        assert literal not in block


def test_the_completion_caller_and_the_uploader_are_the_only_principals_outside_the_account(block):
    """GIVEN the resource policies table THEN the only principals of another account are the
    configured completion caller, which may only invoke `<tenant>-completion`, and the tenant's
    uploader, which may only put under the tenant's prefix through the tenant's access point (and
    encrypt what it puts, through S3)."""
    outside = [line for line in block.splitlines() if "arn:aws:iam::" in line and "<account>" not in line]
    # the uploader by `aws:PrincipalArn`, never as a Principal (the policies stay valid without it)
    uploader = "`ArnEquals aws:PrincipalArn: arn:aws:iam::222222222222:role/tenant-uploader`"
    ap = "`s3:accesspoint/<tenant>-uploads"
    assert outside == [
        f"| `<tenant>-uploads` | UploadersPut | Allow | `AWS: *` | `s3:PutObject`<br>`s3:AbortMultipartUpload` "
        f"| {ap}/object/<prefix>*` | {uploader} |",
        f"| `<tenant>-uploads` | UploadersDenyOtherActions | Deny | `AWS: *` | every action but "
        f"`s3:PutObject`<br>`s3:AbortMultipartUpload` | {ap}`<br>{ap}/object/*` | {uploader} |",
        f"| `<tenant>-uploads` | UploadersDenyOtherKeys | Deny | `AWS: *` | `s3:PutObject`<br>`s3:AbortMultipartUpload` "
        f"| everything but {ap}/object/<prefix>*` | {uploader} |",
        "| `<tenant>-completion` | (invoke permission) | Allow | `arn:aws:iam::111111111111:role/core-system` "
        "| `lambda:InvokeFunction` | `lambda:function:<tenant>-completion` |  |",
        "| `SharedDataKey` | UploadersEncryptNewLandingObjects | Allow | `AWS: *` | `kms:Decrypt`<br>`kms:GenerateDataKey` "
        f"| `kms:key/SharedDataKey` | {uploader}<br>`StringEquals kms:ViaService: s3.<region>.amazonaws.com`<br>"
        "`StringEquals kms:EncryptionContext:aws:s3:arn: landing bucket` |",
    ]
    # the landing bucket names no uploader: one statement delegates the puts to this account's access
    # points, one denies a principal with the uploader tag everything not through an access point
    assert (
        "| `landing bucket` | UploadsThroughAccessPointsOfThisAccount | Allow | `AWS: *` | "
        "`s3:AbortMultipartUpload`<br>`s3:PutObject` | `landing bucket/*` | "
        "`StringEquals s3:DataAccessPointAccount: <account>` |"
    ) in block.splitlines()
    assert (
        "| `landing bucket` | UploadersOnlyThroughAccessPoints | Deny | `AWS: *` | `s3:*` | "
        "`landing bucket`<br>`landing bucket/*` | `Null aws:PrincipalTag/ordered-ingest:uploader: false`<br>"
        "`Null s3:DataAccessPointArn: true` |"
    ) in block.splitlines()


def test_every_aws_call_of_ops_is_listed_with_what_it_is_used_on():
    """GIVEN the ops modules WHEN their AWS calls are collected THEN each is an IAM action with
    an entry in OPS_RESOURCES (the table would refuse one without), and the ones an operator
    surely needs are found: resume starts the execution, dlq replay invokes the closer,
    reconcile lists the landing versions."""
    actions = security_table.ops_actions()
    assert set(actions) <= set(security_table.OPS_RESOURCES)
    assert {
        "states:StartExecution",
        "lambda:InvokeFunction",
        "s3:ListBucketVersions",
        "dynamodb:TransactWriteItems",
    } & set(actions) == {"states:StartExecution", "lambda:InvokeFunction", "s3:ListBucketVersions"}
    assert actions["lambda:InvokeFunction"] == ["ops/dlq.py"]
    # preflight reads the uploaders' tags
    assert actions["iam:ListRoleTags"] == actions["iam:ListUserTags"] == ["ops/preflight.py"]


def test_fails_when_ops_calls_an_action_the_doc_does_not_describe(monkeypatch):
    monkeypatch.setitem(security_table.IAM_ACTIONS_OF, "lambda:Invoke", ("lambda:InvokeAnything",))
    with pytest.raises(KeyError) as raised:
        security_table.ops_table()
    assert raised.value.args[0] == (
        "lambda:InvokeAnything (called from ops/dlq.py) has no entry in tools/security_table.py OPS_RESOURCES: "
        "say what it is used on"
    )
