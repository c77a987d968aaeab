"""Customer-managed keys on the local runtime: with `encryption: {kms_key: create}` at the top
level and for a tenant, the templates (keys, aliases, the shared key's SSM parameter the tenant
stack reads, SSE-KMS buckets, KMS queues, log groups and function environments) deploy on moto's
CloudFormation, and a file still goes through in order. moto does not enforce key policies:
the template tests (tests/test_encryption.py) cover who may use which key."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml

from local_runtime import LocalPipeline
from pipeline_constructs import encryption
from tests.e2e.pipeline_checks import E2E_TIME_SCALE, UNUSED_SINK, assert_records_in_file_order, csv_file


@pytest.fixture(scope="module")
def pipe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPipeline]:
    path = tmp_path_factory.mktemp("tenants") / "tenants.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "encryption": {"kms_key": "create"},
                "defaults": {"format": "csv", "chunk_size": 3, "sink": {"url": UNUSED_SINK}},
                "tenants": [
                    {
                        "id": "sealed",
                        "prefix": "sealed/",
                        "encryption": {"kms_key": "create"},
                        "sink": {"auth": {"type": "none"}},
                    },
                    {"id": "plain", "prefix": "plain/", "sink": {"auth": {"type": "none"}}},
                ],
            },
            sort_keys=False,
        ),
        encoding="utf-8",
    )
    with LocalPipeline(path, time_scale=E2E_TIME_SCALE) as running:
        yield running


def _key_arn(pipe: LocalPipeline, alias: str) -> str:
    """The ARN of the key behind `alias` (not by DescribeKey: moto 5.2.5 fails it on a key made
    by CloudFormation, whose policy it keeps as a dict)."""
    found = next(a for a in pipe.client("kms").list_aliases()["Aliases"] if a["AliasName"] == alias)
    return found["AliasArn"].replace(alias, f"key/{found['TargetKeyId']}")


def test_a_file_goes_through_the_encrypted_pipeline(pipe: LocalPipeline) -> None:
    """GIVEN the shared key and the tenant's own key created by the templates
    WHEN a file of 7 records is uploaded under the tenant's prefix
    THEN it is stored SSE-KMS with the shared key, and the core system gets its 7 records in order."""
    _, version_id = pipe.put_file("sealed", "a.csv", csv_file("a", 7))
    pipe.wait_until_idle(timeout=120, tenants=["sealed"])

    shared_key = _key_arn(pipe, encryption.shared_key_alias())
    head = pipe.client("s3").head_object(Bucket=pipe.landing_bucket, Key="sealed/a.csv", VersionId=version_id)
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", shared_key)
    assert [e["status"] for e in pipe.executions("sealed")] == ["SUCCEEDED"]
    assert_records_in_file_order(pipe.sink("sealed").accepted, [("a", 7)])


def test_the_tenant_key_encrypts_the_tenants_queue_and_the_shared_key_is_read_from_ssm(
    pipe: LocalPipeline,
) -> None:
    """GIVEN the deployed stacks WHEN their resources are described
    THEN the tenant's queue uses the tenant's key, the other tenant's queue SQS-managed
    encryption, and the tenant's data role names the shared key's ARN that the SSM parameter
    (written by the shared stack) resolved to at deploy time."""
    tenant_key = _key_arn(pipe, encryption.tenant_key_alias("sealed"))
    shared_key = _key_arn(pipe, encryption.shared_key_alias())
    sqs = pipe.client("sqs")

    sealed = sqs.get_queue_attributes(QueueUrl=pipe.tenants["sealed"].queue_url, AttributeNames=["All"])[
        "Attributes"
    ]
    plain = sqs.get_queue_attributes(QueueUrl=pipe.tenants["plain"].queue_url, AttributeNames=["All"])[
        "Attributes"
    ]
    assert sealed.get("KmsMasterKeyId") == tenant_key
    assert "KmsMasterKeyId" not in plain
    parameter = pipe.client("ssm").get_parameter(Name=encryption.shared_key_parameter())["Parameter"]["Value"]
    assert parameter == shared_key
    iam = pipe.client("iam")
    policies = [
        iam.get_role_policy(RoleName=role["RoleName"], PolicyName=name)["PolicyDocument"]
        for role in iam.list_roles()["Roles"]
        if "DataRole" in role["RoleName"]
        for name in iam.list_role_policies(RoleName=role["RoleName"])["PolicyNames"]
    ]
    named = json.dumps(policies)
    assert shared_key in named and "SsmParameterValue" not in named
