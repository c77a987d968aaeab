"""`python -m ops reconcile` on moto: the versions under a tenant's prefix against its ledger."""

from __future__ import annotations

import io
import json
from typing import Any

import boto3
import pytest

from lambdas.contract import FileRef
from lambdas.controller import file_ref_from_sqs_body
from lambdas.ledger import Ledger
from ops.cli import EXIT_NOT_COMPLETED, EXIT_OK, EXIT_USAGE, main
from tests.conftest import create_ledger_table

REGION = "us-east-1"
NOW = 1_700_000_000.0
BUCKET = "landing"


class Deployment:
    """The shared stack (ledger, landing bucket), one tenant stack, its queue and ledger."""

    def __init__(self, queue_name: str = "acme-event-queue.fifo") -> None:
        self.clients = lambda service: boto3.client(service, region_name=REGION)
        ddb, sqs, s3, cfn = (self.clients(s) for s in ("dynamodb", "sqs", "s3", "cloudformation"))
        create_ledger_table(ddb)
        s3.create_bucket(Bucket=BUCKET)
        s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        fifo = queue_name.endswith(".fifo")
        self.queue_url = sqs.create_queue(
            QueueName=queue_name,
            Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"} if fifo else {},
        )["QueueUrl"]
        cfn.create_stack(
            StackName="OrderedIngest-Shared",
            TemplateBody=json.dumps(
                {
                    "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
                    "Outputs": {
                        "LedgerTableName": {"Value": "ledger"},
                        "LandingBucketName": {"Value": BUCKET},
                    },
                }
            ),
        )
        outputs = {
            "TenantId": "acme",
            "QueueUrl": self.queue_url,
            "StateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:acme-file-ingest-workflow",
            "LandingPrefix": "acme/",
            "OnFailure": "halt",
        }
        cfn.create_stack(
            StackName="OrderedIngest-Tenant-acme",
            TemplateBody=json.dumps(
                {
                    "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
                    "Outputs": {
                        f"Pipeline{name}0A1B2C3D": {"Value": value} for name, value in outputs.items()
                    },
                }
            ),
        )
        self.ledger = Ledger(ddb, "ledger", "acme")
        self.s3, self.sqs = s3, sqs

    def upload(self, key: str, body: bytes = b"a\n1\n") -> str:
        return self.s3.put_object(Bucket=BUCKET, Key=key, Body=body)["VersionId"]

    def claim(self, key: str, version_id: str, event_id: str) -> None:
        file = FileRef(
            tenant="acme",
            event_id=event_id,
            bucket=BUCKET,
            key=key,
            version_id=version_id,
            size=4,
            etag=None,
            event_time="",
        )
        self.ledger.claim(self.ledger.read(), file, event_id, NOW)

    def processed(self, key: str, version_id: str, event_id: str, status: str = "SUCCEEDED") -> None:
        self.claim(key, version_id, event_id)
        self.ledger.record_close(event_id, status, halt_on_failure=True, now=NOW + 1)

    def ops(self, *argv: str) -> tuple[int, str]:
        out = io.StringIO()
        code = main(list(argv), clients=self.clients, out=out, now=NOW)
        return code, out.getvalue()

    def reconcile_json(self, *argv: str) -> tuple[int, list[tuple[str, str]], Any]:
        code, out = self.ops("reconcile", "acme", "--json", *argv)
        document = json.loads(out)
        return code, [(v["key"], v["state"]) for v in document["versions"]], document

    def queued(self) -> list[dict[str, Any]]:
        messages = self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"]
        ).get("Messages", [])
        return messages


@pytest.fixture
def aws(moto_account: None) -> None:
    return None


@pytest.fixture
def deployment(aws: None) -> Deployment:
    return Deployment()


def test_nothing_to_report_when_every_version_completed(deployment):
    deployment.processed("acme/a.csv", deployment.upload("acme/a.csv"), "e1")
    code, out = deployment.ops("reconcile", "acme")
    assert code == EXIT_OK
    assert "every object version under its prefix was completed" in out


def test_lists_the_versions_never_seen_oldest_first_and_exits_6(deployment):
    """GIVEN a processed file, two never-seen versions (one a re-upload of the same key), a
    deleted object (its delete marker) and another tenant's file
    THEN exactly the never-seen versions are listed, oldest first, and the exit code says so."""
    v1 = deployment.upload("acme/z.csv")
    deployment.processed("acme/z.csv", v1, "e1")
    deployment.upload("acme/b.csv")
    deployment.upload("acme/z.csv", b"a\n2\n")  # a new version of z.csv, never seen
    deployment.s3.delete_object(Bucket=BUCKET, Key="acme/b.csv")  # a delete marker: not a file
    deployment.upload("other/c.csv")
    code, listed, document = deployment.reconcile_json()
    assert code == EXIT_NOT_COMPLETED
    # Upload order: LastModified (S3 keeps seconds), ties by key.
    assert listed == [("acme/b.csv", "never seen"), ("acme/z.csv", "never seen")]
    assert v1 not in {v["version_id"] for v in document["versions"]}
    assert document["replayed"] is None
    assert deployment.queued() == []  # listing sends nothing


def test_replay_sends_events_the_controller_parses_in_upload_order_then_nothing_is_missing(deployment):
    v1 = deployment.upload("acme/dir/first file+1.csv")
    v2 = deployment.upload("acme/second.csv")
    code, out = deployment.ops("reconcile", "acme", "--replay")
    assert code == EXIT_OK
    assert "replayed 2 never-seen version(s)" in out
    messages = deployment.queued()
    assert [m["Attributes"]["MessageGroupId"] for m in messages] == ["acme", "acme"]
    files = [
        file_ref_from_sqs_body(m["Body"], "acme", landing_bucket=BUCKET, landing_prefix="acme/")
        for m in messages
    ]
    # Keys travel URL-encoded, as S3 writes them; the controller's decoder gets them back.
    assert [f["key"] for f in files] == ["acme/dir/first file+1.csv", "acme/second.csv"]
    assert [(f["bucket"], f["version_id"], f["size"]) for f in files] == [(BUCKET, v1, 4), (BUCKET, v2, 4)]
    assert all(f["event_id"].startswith("reconcile-") and len(f["event_id"]) <= 80 for f in files)
    # The event id is the version's: a replay of it is the same event (an execution name).
    code, _, document = deployment.reconcile_json("--replay")
    assert document["replayed"] == [f["event_id"] for f in files]
    assert all(set(e) <= set("abcdefghijklmnopqrstuvwxyz0123456789-_") for e in document["replayed"])


def test_seen_but_never_completed_says_running_or_failed(deployment):
    """GIVEN a file that failed (on_failure continue: the tenant went on), a failed file that
    was resumed and succeeded, a skipped file, and a running one
    THEN the failed and the running ones are listed, each saying which; nothing is replayed."""
    failed = deployment.upload("acme/failed.csv")
    deployment.claim("acme/failed.csv", failed, "e1")
    deployment.ledger.record_close("e1", "FAILED", halt_on_failure=False, now=NOW + 1)
    resumed = deployment.upload("acme/resumed.csv")
    deployment.claim("acme/resumed.csv", resumed, "e2")
    deployment.ledger.record_close("e2", "FAILED", halt_on_failure=True, now=NOW + 2)
    deployment.ledger.resume(deployment.ledger.read(), "e2-r1", NOW + 3)
    deployment.ledger.record_close("e2-r1", "SUCCEEDED", halt_on_failure=True, now=NOW + 4)
    skipped = deployment.upload("acme/skipped.csv")
    deployment.claim("acme/skipped.csv", skipped, "e3")
    deployment.ledger.record_close("e3", "FAILED", halt_on_failure=True, now=NOW + 5)
    deployment.ledger.skip(deployment.ledger.read(), "bad data", NOW + 6)
    running = deployment.upload("acme/running.csv")
    deployment.claim("acme/running.csv", running, "e4")
    code, listed, document = deployment.reconcile_json("--replay")
    assert listed == [
        ("acme/failed.csv", "seen, failed (not resumed or skipped)"),
        ("acme/running.csv", "seen, running"),
    ]
    assert [v["event_id"] for v in document["versions"]] == ["e1", "e4"]
    assert document["replayed"] == [] and deployment.queued() == []
    assert code == EXIT_NOT_COMPLETED  # the failed file needs an operator


def test_a_file_recorded_as_a_duplicate_is_completed(deployment):
    version = deployment.upload("acme/copy.csv")
    deployment.claim("acme/copy.csv", version, "e1")
    deployment.ledger.record_close(
        "e1",
        "SUCCEEDED",
        halt_on_failure=True,
        now=NOW + 1,
        duplicate_of={"key": "acme/orig.csv", "version_id": "v0", "event_id": "e0"},
    )
    deployment.claim("acme/next.csv", deployment.upload("acme/next.csv"), "e2")
    deployment.ledger.record_close("e2", "SUCCEEDED", halt_on_failure=True, now=NOW + 2)
    code, listed, _ = deployment.reconcile_json()
    assert (code, listed) == (EXIT_OK, [])


def test_a_halted_tenants_failed_file_is_listed_with_the_command_that_fixes_it(deployment):
    version = deployment.upload("acme/f.csv")
    deployment.claim("acme/f.csv", version, "e1")
    deployment.ledger.record_close("e1", "FAILED", halt_on_failure=True, now=NOW + 1)
    code, out = deployment.ops("reconcile", "acme")
    assert code == EXIT_NOT_COMPLETED
    assert "acme/f.csv" in out and "seen, failed" in out and "python -m ops resume acme" in out


def test_only_a_running_file_is_not_a_missing_one(deployment):
    deployment.claim("acme/r.csv", deployment.upload("acme/r.csv"), "e1")
    code, listed, _ = deployment.reconcile_json()
    assert (code, listed) == (EXIT_OK, [("acme/r.csv", "seen, running")])


def test_since_leaves_out_older_versions(deployment):
    deployment.upload("acme/old.csv")
    code, listed, _ = deployment.reconcile_json("--since", "2999-01-01")
    assert (code, listed) == (EXIT_OK, [])
    code, listed, _ = deployment.reconcile_json("--since", "2000-01-01T00:00:00Z")
    assert listed == [("acme/old.csv", "never seen")]


def test_fails_when_since_is_not_a_date(deployment):
    code, _ = deployment.ops("reconcile", "acme", "--since", "yesterday")
    assert code == EXIT_USAGE


def test_more_versions_than_one_ledger_batch_are_all_looked_up(deployment):
    keys = [f"acme/f{i:03d}.csv" for i in range(130)]
    versions = {key: deployment.upload(key) for key in keys}
    for key in keys[::2]:
        deployment.processed(key, versions[key], f"e{key[6:9]}")
    _code, listed, _ = deployment.reconcile_json()
    assert sorted(key for key, _ in listed) == keys[1::2]


def test_a_standard_queue_gets_no_message_group(aws):
    deployment = Deployment(queue_name="acme-event-queue")
    deployment.upload("acme/a.csv")
    code, _ = deployment.ops("reconcile", "acme", "--replay")
    assert code == EXIT_OK
    (message,) = deployment.queued()
    assert "MessageGroupId" not in message["Attributes"]
    assert (
        file_ref_from_sqs_body(message["Body"], "acme", landing_bucket=BUCKET, landing_prefix="acme/")["key"]
        == "acme/a.csv"
    )
