"""`python -m ops quarantine list|replay` on moto: what the controller set aside, and putting it back."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from ops.cli import EXIT_NOT_FOUND, EXIT_NOTHING_TO_DO, EXIT_OK, EXIT_USAGE
from tests.test_ops import REGION, Deployment

WORK = "work"
BODY = json.dumps({"source": "aws.s3", "detail-type": "Object Created", "secret": "TOPSECRET"})


class WithQuarantine(Deployment):
    """The ops test deployment, with the work bucket named by the shared stack and messages
    quarantined the way the controller stores them."""

    def __init__(self) -> None:
        super().__init__()
        cfn, self.s3 = self.clients("cloudformation"), self.clients("s3")
        self.s3.create_bucket(Bucket=WORK)
        cfn.delete_stack(StackName="OrderedIngest-Shared")
        cfn.create_stack(
            StackName="OrderedIngest-Shared",
            TemplateBody=json.dumps(
                {
                    "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
                    "Outputs": {"LedgerTableName": {"Value": "ledger"}, "WorkBucketName": {"Value": WORK}},
                }
            ),
        )

    def quarantine(self, name: str, message_id: str, reason: str, body: str = BODY) -> str:
        key = f"quarantine/acme/{name}-{message_id}.json"
        self.s3.put_object(
            Bucket=WORK,
            Key=key,
            Body=json.dumps(
                {
                    "tenant": "acme",
                    "message_id": message_id,
                    "reason": reason,
                    "quarantined_at": f"at-{name}",
                    "attributes": {"SentTimestamp": "1"},
                    "message_attributes": {},
                    "body": body,
                }
            ),
        )
        return key

    def keys(self) -> list[str]:
        return [o["Key"] for o in self.s3.list_objects_v2(Bucket=WORK).get("Contents", [])]

    def queued(self) -> list[dict[str, Any]]:
        return self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"]
        ).get("Messages", [])


@pytest.fixture
def deployment(moto_account: None) -> Any:
    return WithQuarantine()


def test_list_shows_what_why_and_when_oldest_first_without_the_body(deployment):
    """GIVEN two quarantined messages and one replayed before WHEN listed THEN the two waiting ones,
    oldest first, with their reasons; the body stays hidden unless asked for."""
    deployment.quarantine("20240102T000000.000000Z", "m-2", "not JSON")
    deployment.quarantine("20240101T000000.000000Z", "m-1", "outside the tenant's prefix acme/")
    deployment.s3.put_object(
        Bucket=WORK, Key="quarantine/acme/replayed/20231231T000000.000000Z-m-0.json", Body=b"{}"
    )

    code, out = deployment.ops("quarantine", "list", "acme")

    assert code == EXIT_OK
    assert out.index("20240101T000000.000000Z-m-1.json") < out.index("20240102T000000.000000Z-m-2.json")
    assert "why: outside the tenant's prefix acme/" in out and "why: not JSON" in out
    assert "m-0" not in out and "TOPSECRET" not in out
    code, out = deployment.ops("quarantine", "list", "acme", "--show-body")
    assert code == EXIT_OK and out.count("TOPSECRET") == 2


def test_replay_puts_the_body_back_in_the_tenants_group_and_marks_it_replayed(deployment):
    """GIVEN a quarantined file event WHEN replayed by name THEN the body is in the tenant's FIFO
    group again, and the stored object moved to replayed/ (a second replay finds nothing)."""
    key = deployment.quarantine("20240101T000000.000000Z", "m-1", "no version id")

    code, out = deployment.ops("quarantine", "replay", "acme", "20240101T000000.000000Z-m-1.json")

    assert code == EXIT_OK and "replayed" in out
    (message,) = deployment.queued()
    assert message["Body"] == BODY and message["Attributes"]["MessageGroupId"] == "acme"
    assert deployment.keys() == ["quarantine/acme/replayed/20240101T000000.000000Z-m-1.json"]
    assert deployment.ops("quarantine", "replay", "acme", key)[0] == EXIT_NOT_FOUND
    assert deployment.ops("quarantine", "list", "acme")[1].strip() == "acme: no quarantined messages"


def test_replay_all_sends_every_message_oldest_first(deployment):
    deployment.quarantine("20240102T000000.000000Z", "m-2", "r", body="second")
    deployment.quarantine("20240101T000000.000000Z", "m-1", "r", body="first")

    assert deployment.ops("quarantine", "replay", "acme", "--all")[0] == EXIT_OK

    assert [m["Body"] for m in deployment.queued()] == ["first", "second"]
    assert all(k.startswith("quarantine/acme/replayed/") for k in deployment.keys())  # noqa: SIM118  # Deployment.keys() lists the work bucket
    assert deployment.ops("quarantine", "replay", "acme", "--all")[0] == EXIT_NOTHING_TO_DO


def test_replay_to_a_standard_queue_sends_no_group(deployment):
    from ops import quarantine

    url = deployment.sqs.create_queue(QueueName="acme-standard")["QueueUrl"]
    message = quarantine.read(
        deployment.s3, WORK, deployment.quarantine("20240101T000000.000000Z", "m-1", "r")
    )
    quarantine.replay(
        deployment.s3, deployment.sqs, bucket=WORK, tenant_id="acme", queue_url=url, message=message
    )
    (sent,) = deployment.sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"]
    assert sent["Body"] == BODY and "MessageGroupId" not in sent["Attributes"]


@pytest.mark.parametrize("key", ["replayed/20240101T000000.000000Z-m-1.json", "quarantine/beta/x.json", ""])
def test_fails_when_the_key_is_not_a_waiting_quarantined_message_of_the_tenant(deployment, key):
    deployment.quarantine("20240101T000000.000000Z", "m-1", "r")
    assert deployment.ops("quarantine", "replay", "acme", key)[0] in (EXIT_USAGE, EXIT_NOT_FOUND)
    assert deployment.queued() == []


def test_fails_when_replay_names_no_message_or_both_a_name_and_all(deployment):
    assert deployment.ops("quarantine", "replay", "acme")[0] == EXIT_USAGE
    assert deployment.ops("quarantine", "replay", "acme", "x.json", "--all")[0] == EXIT_USAGE


def test_fails_when_the_shared_stack_does_not_name_the_work_bucket(deployment):
    cfn = boto3.client("cloudformation", region_name=REGION)
    cfn.delete_stack(StackName="OrderedIngest-Shared")
    cfn.create_stack(
        StackName="OrderedIngest-Shared",
        TemplateBody=json.dumps(
            {
                "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
                "Outputs": {"LedgerTableName": {"Value": "ledger"}},
            }
        ),
    )
    assert deployment.ops("quarantine", "list", "acme")[0] == EXIT_NOT_FOUND
