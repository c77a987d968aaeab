"""Per-tenant uploaders on the local runtime (docs/security.md, "Uploaders"), and a tenant on a private
network (docs/core-system.md, "Private core systems").

moto cannot evaluate a bucket policy per caller (its S3 judges a bucket policy without the
principal, and its CloudFormation does not create `AWS::S3::BucketPolicy`), so
`LocalPipeline.upload_as` applies the synthesized landing bucket policy with
`local_runtime.bucket_policy` before it puts: the gate is the deployed templates' own policy.
"""

from __future__ import annotations

import pytest

from local_runtime import LocalPipeline, UploadDenied
from local_runtime.pipeline import LOCAL_ACCOUNT
from tests.e2e.pipeline_checks import assert_records_in_file_order, csv_file

ACME_UPLOADER = f"arn:aws:iam::{LOCAL_ACCOUNT}:role/acme-uploader"
GLOBEX_UPLOADER = f"arn:aws:iam::{LOCAL_ACCOUNT}:user/globex-sftp"
NETWORK = {"vpc_id": "vpc-0123456789abcdef0", "subnet_ids": ["subnet-0123456789abcdef0"],
           "security_group_ids": ["sg-0123456789abcdef0"]}


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline([
        {"id": "acme", "uploaders": [ACME_UPLOADER]},
        {"id": "globex", "uploaders": [GLOBEX_UPLOADER]},
        {"id": "private", "network": NETWORK},
    ], chunk_size=3)


def test_an_uploader_puts_into_its_tenants_prefix_and_the_file_is_processed(pipe: LocalPipeline) -> None:
    """GIVEN acme's uploader role WHEN it puts a file under acme/ THEN the put succeeds and the
    core system receives the file's records, in order."""
    pipe.upload_as(ACME_UPLOADER, "acme/a.csv", csv_file("a", 4))
    pipe.wait_until_idle(timeout=120, tenants=["acme"])

    assert_records_in_file_order(pipe.sink("acme").accepted, [("a", 4)])
    assert [e["status"] for e in pipe.executions("acme")] == ["SUCCEEDED"]


def test_an_uploader_cannot_put_into_another_tenants_prefix_and_nothing_reaches_it(pipe: LocalPipeline) -> None:
    """GIVEN acme's uploader, whose own identity policy would allow anything WHEN it puts under
    globex/ (or outside every prefix) THEN S3 refuses it, naming the Deny, and no object,
    execution or record appears for globex."""
    for key in ("globex/b.csv", "b.csv"):
        with pytest.raises(UploadDenied) as denied:
            pipe.upload_as(ACME_UPLOADER, key, csv_file("b", 2))
        assert str(denied.value) == (f"AccessDenied: {ACME_UPLOADER} may not put s3://{pipe.landing_bucket}/{key}: "
                                     "explicitly denied UploadersacmeDenyOtherKeys")
    listed = pipe.client("s3").list_objects_v2(Bucket=pipe.landing_bucket, Prefix="globex/")
    assert listed.get("KeyCount") == 0
    # globex's own uploader is let in: the refusal above was acme's uploader's, not the prefix's
    pipe.upload_as(GLOBEX_UPLOADER, "globex/c.csv", csv_file("c", 2))
    pipe.wait_until_idle(timeout=120, tenants=["globex"])
    assert_records_in_file_order(pipe.sink("globex").accepted, [("c", 2)])
    assert [e["input"]["key"] for e in pipe.executions("globex")] == ["globex/c.csv"]


def test_a_tenant_on_a_private_network_deploys_and_runs_locally(pipe: LocalPipeline) -> None:
    """GIVEN a tenant with `network` (moto keeps the VpcConfig and attaches nothing) WHEN a file
    arrives THEN its register function, deployed with the tenant's subnets, delivers it."""
    register = pipe.tenants["private"].functions["register"]
    config = pipe.client("lambda").get_function_configuration(FunctionName=register)
    assert config["VpcConfig"]["SubnetIds"] == NETWORK["subnet_ids"]
    pipe.put_file("private", "d.csv", csv_file("d", 3))
    pipe.wait_until_idle(timeout=120, tenants=["private"])
    assert_records_in_file_order(pipe.sink("private").accepted, [("d", 3)])
