"""`python -m ops dlq list|replay` on moto: upload order, deletion only after delivery, exit codes."""

from __future__ import annotations

import io
import json
import time
import uuid
from typing import Any

import boto3
import pytest

from ops.cli import EXIT_ERROR, EXIT_LEFT_IN_DLQ, EXIT_NOT_FOUND, EXIT_OK, main
from tests.conftest import create_ledger_table

REGION = "us-east-1"


def file_event(
    key: str, time: str, sequencer: str = "0055AED6DCD90281E5", event_id: str | None = None
) -> str:
    """An S3 "Object Created" event as EventBridge delivers it (and dead-letters it)."""
    return json.dumps(
        {
            "version": "0",
            "id": event_id or str(uuid.uuid4()),
            "detail-type": "Object Created",
            "source": "aws.s3",
            "account": "123456789012",
            "time": time,
            "region": REGION,
            "resources": ["arn:aws:s3:::landing"],
            "detail": {
                "version": "0",
                "bucket": {"name": "landing"},
                "object": {
                    "key": key,
                    "size": 10,
                    "etag": "e",
                    "version-id": "v-" + key,
                    "sequencer": sequencer,
                },
                "reason": "PutObject",
            },
        }
    )


def status_event(execution: str, status: str = "SUCCEEDED") -> str:
    return json.dumps(
        {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "Step Functions Execution Status Change",
            "source": "aws.states",
            "time": "2026-11-30T10:00:00Z",
            "detail": {
                "executionArn": f"arn:aws:states:{REGION}:123456789012:execution:acme-file-ingest-workflow:{execution}",
                "name": execution,
                "status": status,
            },
        }
    )


class DeadLetters:
    """A deployed tenant whose intake dead-letter queue holds events; the closer is a stand-in."""

    def __init__(self, *, fifo: bool = True, closer_fails: bool = False) -> None:
        self.clients = lambda service: boto3.client(service, region_name=REGION)
        sqs, cfn = self.clients("sqs"), self.clients("cloudformation")
        if fifo:
            self.queue_url = sqs.create_queue(
                QueueName="acme-event-queue.fifo",
                Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
            )["QueueUrl"]
        else:
            self.queue_url = sqs.create_queue(QueueName="acme-event-queue")["QueueUrl"]
        self.dlq_url = sqs.create_queue(QueueName="acme-intake-dlq")["QueueUrl"]
        self.closer_calls: list[dict[str, Any]] = []
        self.closer_fails = closer_fails
        cfn.create_stack(
            StackName="OrderedIngest-Shared",
            TemplateBody=json.dumps(
                {
                    "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
                    "Outputs": {"LedgerTableName": {"Value": "ledger"}},
                }
            ),
        )
        outputs = {
            "TenantId": "acme",
            "QueueUrl": self.queue_url,
            "StateMachineArn": "arn:aws:states:x",
            "LandingPrefix": "acme/",
            "OnFailure": "halt",
            "IntakeDlqUrl": self.dlq_url,
            "CloserFunctionName": "acme-close-file",
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
        self.sqs = sqs

    def client(self, service: str) -> Any:
        return _Closer(self) if service == "lambda" else self.clients(service)

    def dead_letter(self, body: str, **attributes: str) -> None:
        self.sqs.send_message(
            QueueUrl=self.dlq_url,
            MessageBody=body,
            MessageAttributes={
                name: {"DataType": "String", "StringValue": value} for name, value in attributes.items()
            },
        )

    def ops(self, *argv: str) -> tuple[int, str]:
        out = io.StringIO()
        return main(list(argv), clients=self.client, out=out), out.getvalue()

    def queued(self) -> list[dict[str, Any]]:
        messages = self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"]
        )["Messages"]
        return [
            {"key": json.loads(m["Body"])["detail"]["object"]["key"], **m["Attributes"]} for m in messages
        ]

    def dlq_depth(self) -> int:
        attributes = self.sqs.get_queue_attributes(QueueUrl=self.dlq_url, AttributeNames=["All"])[
            "Attributes"
        ]
        return int(attributes["ApproximateNumberOfMessages"]) + int(
            attributes["ApproximateNumberOfMessagesNotVisible"]
        )


class _Closer:
    """The closer as `lambda.invoke` sees it: records each payload, or fails like a function error."""

    def __init__(self, deployment: DeadLetters) -> None:
        self.deployment = deployment

    def invoke(self, FunctionName: str, InvocationType: str, Payload: bytes) -> dict[str, Any]:
        assert (FunctionName, InvocationType) == ("acme-close-file", "RequestResponse")
        if self.deployment.closer_fails:
            return {"FunctionError": "Unhandled", "Payload": io.BytesIO(b'{"errorType": "LedgerConflict"}')}
        self.deployment.closer_calls.append(json.loads(Payload))
        return {"StatusCode": 200, "Payload": io.BytesIO(b"{}")}


@pytest.fixture
def aws(moto_account: None) -> None:
    return None


def test_replay_puts_file_events_back_in_upload_order_with_the_tenant_group_and_the_event_id(aws):
    """GIVEN three file events dead-lettered out of upload order (two of them the same key, same second)
    WHEN ops dlq replay
    THEN they reach the tenant's FIFO queue by event time, then S3's sequencer, each in the tenant's
    group and deduplicated by its event id, and the DLQ is empty."""
    deployment = DeadLetters()
    deployment.dead_letter(
        file_event("acme/c.csv", "2026-11-30T10:00:05Z", event_id="evt-c"), ERROR_CODE="Throttling"
    )
    deployment.dead_letter(
        file_event("acme/a.csv", "2026-11-30T10:00:01Z", sequencer="0055AED6DCD90281F0", event_id="evt-a2")
    )
    deployment.dead_letter(
        file_event("acme/a.csv", "2026-11-30T10:00:01Z", sequencer="0055AED6DCD90281E5", event_id="evt-a1")
    )

    code, out = deployment.ops("dlq", "replay", "acme")

    assert code == EXIT_OK, out
    queued = deployment.queued()
    assert [(m["key"], m["MessageDeduplicationId"]) for m in queued] == [
        ("acme/a.csv", "evt-a1"),
        ("acme/a.csv", "evt-a2"),
        ("acme/c.csv", "evt-c"),
    ]
    assert {m["MessageGroupId"] for m in queued} == {"acme"}
    assert deployment.dlq_depth() == 0
    assert "replayed 3 file event(s)" in out


def test_replay_into_a_standard_queue_sends_no_group_or_deduplication_id(aws):
    deployment = DeadLetters(fifo=False)
    deployment.dead_letter(file_event("acme/a.csv", "2026-11-30T10:00:01Z"))
    assert deployment.ops("dlq", "replay", "acme")[0] == EXIT_OK
    (queued,) = deployment.queued()
    assert queued["key"] == "acme/a.csv" and "MessageGroupId" not in queued


def test_list_shows_the_replay_order_and_why_each_was_dead_lettered_and_changes_nothing(aws):
    deployment = DeadLetters()
    deployment.dead_letter(
        file_event("acme/b.csv", "2026-11-30T10:00:02Z"),
        ERROR_CODE="SQS.Throttled",
        ERROR_MESSAGE="Rate exceeded",
    )
    deployment.dead_letter(file_event("acme/a.csv", "2026-11-30T10:00:01Z"))

    code, out = deployment.ops("dlq", "list", "acme")

    assert code == EXIT_OK
    assert "2 message(s)" in out
    assert out.index("acme/a.csv") < out.index("acme/b.csv")
    assert "ERROR_CODE=SQS.Throttled, ERROR_MESSAGE=Rate exceeded" in out
    assert deployment.dlq_depth() == 2
    # listed messages are visible again at once: a replay right after sees them all
    assert deployment.ops("dlq", "replay", "acme")[0] == EXIT_OK
    assert [m["key"] for m in deployment.queued()] == ["acme/a.csv", "acme/b.csv"]


def test_status_changes_are_handed_to_the_closer_and_deleted(aws):
    deployment = DeadLetters()
    deployment.dead_letter(status_event("evt-x", "FAILED"))
    code, out = deployment.ops("dlq", "replay", "acme")
    assert code == EXIT_OK
    (call,) = deployment.closer_calls
    assert call["detail"] == {
        "executionArn": call["detail"]["executionArn"],
        "name": "evt-x",
        "status": "FAILED",
    }
    assert "status change FAILED of execution evt-x" in out
    assert deployment.dlq_depth() == 0


def test_a_failing_delivery_keeps_that_event_and_every_later_one_in_the_dlq(aws, monkeypatch):
    """GIVEN two file events and a queue that refuses the second send
    WHEN ops dlq replay
    THEN the first is delivered and deleted; the second (and the status change after it) stay in
    the DLQ, visible at once, and the command fails."""
    deployment = DeadLetters()
    deployment.dead_letter(file_event("acme/a.csv", "2026-11-30T10:00:01Z"))
    deployment.dead_letter(file_event("acme/b.csv", "2026-11-30T10:00:02Z"))
    deployment.dead_letter(status_event("evt-x"))
    real_client = deployment.client
    sends: list[str] = []

    class RefusingSecondSend:
        def __init__(self, sqs: Any) -> None:
            self.sqs = sqs

        def __getattr__(self, name: str) -> Any:
            return getattr(self.sqs, name)

        def send_message(self, **kwargs: Any) -> Any:
            sends.append(json.loads(kwargs["MessageBody"])["detail"]["object"]["key"])
            if len(sends) == 2:
                raise RuntimeError("throttled")
            return self.sqs.send_message(**kwargs)

    monkeypatch.setattr(
        deployment,
        "client",
        lambda service: (
            RefusingSecondSend(real_client(service)) if service == "sqs" else real_client(service)
        ),
    )

    code, _ = deployment.ops("dlq", "replay", "acme")

    assert code == EXIT_ERROR
    assert [m["key"] for m in deployment.queued()] == ["acme/a.csv"]
    assert deployment.closer_calls == []
    left = deployment.sqs.receive_message(QueueUrl=deployment.dlq_url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(json.loads(m["Body"]).get("source") for m in left) == ["aws.s3", "aws.states"]


def test_a_failing_closer_keeps_the_status_change_in_the_dlq(aws):
    deployment = DeadLetters(closer_fails=True)
    deployment.dead_letter(status_event("evt-x"))
    assert deployment.ops("dlq", "replay", "acme")[0] == EXIT_ERROR
    assert deployment.dlq_depth() == 1


def test_messages_that_are_not_events_are_listed_left_in_place_and_said_so_by_the_exit_code(aws):
    deployment = DeadLetters()
    deployment.dead_letter("not json")
    deployment.dead_letter(
        json.dumps({"id": "e1", "source": "aws.s3", "detail-type": "Object Deleted", "detail": {}})
    )
    deployment.dead_letter(file_event("acme/a.csv", "2026-11-30T10:00:01Z"))

    assert deployment.ops("dlq", "list", "acme")[0] == EXIT_LEFT_IN_DLQ
    code, out = deployment.ops("dlq", "replay", "acme")

    assert code == EXIT_LEFT_IN_DLQ
    assert [m["key"] for m in deployment.queued()] == ["acme/a.csv"]
    assert "left 2 message(s)" in out
    assert deployment.dlq_depth() == 2


def test_a_stack_without_the_intake_dlq_output_is_not_found(aws):
    deployment = DeadLetters()
    cfn = deployment.clients("cloudformation")
    cfn.delete_stack(StackName="OrderedIngest-Tenant-acme")
    cfn.create_stack(
        StackName="OrderedIngest-Tenant-acme",
        TemplateBody=json.dumps(
            {
                "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
                "Outputs": {
                    f"Pipeline{name}0A1B2C3D": {"Value": value}
                    for name, value in {
                        "TenantId": "acme",
                        "QueueUrl": deployment.queue_url,
                        "StateMachineArn": "arn:aws:states:x",
                        "LandingPrefix": "acme/",
                        "OnFailure": "halt",
                    }.items()
                },
            }
        ),
    )
    assert deployment.ops("dlq", "list", "acme")[0] == EXIT_NOT_FOUND


# --- ops status: uploads outside every tenant prefix -------------------------------------------


def test_status_lists_recent_uploads_outside_every_tenant_prefix_newest_first(aws):
    """GIVEN the shared stack's unmatched-uploads log group with two events of the last hour and one of two days ago
    WHEN ops status (every tenant)
    THEN the two recent keys are listed, newest first, with what to do; a tenant's status shows none."""
    deployment = DeadLetters()
    cfn, logs = deployment.clients("cloudformation"), deployment.clients("logs")
    cfn.update_stack(
        StackName="OrderedIngest-Shared",
        TemplateBody=json.dumps(
            {
                "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
                "Outputs": {
                    "LedgerTableName": {"Value": "ledger"},
                    "UnmatchedUploadsLogGroupName": {"Value": "/ordered-ingest/unmatched-uploads"},
                },
            }
        ),
    )
    ddb = deployment.clients("dynamodb")
    create_ledger_table(ddb)
    logs.create_log_group(logGroupName="/ordered-ingest/unmatched-uploads")
    logs.create_log_stream(logGroupName="/ordered-ingest/unmatched-uploads", logStreamName="s")
    now = time.time()  # CloudWatch Logs refuses events older than 14 days

    def logged(key: str, seconds_ago: float) -> dict[str, Any]:
        event = json.loads(file_event(key, f"t-{int(seconds_ago)}"))
        return {"timestamp": int((now - seconds_ago) * 1000), "message": json.dumps(event)}

    logs.put_log_events(
        logGroupName="/ordered-ingest/unmatched-uploads",
        logStreamName="s",
        logEvents=[logged("old/a.csv", 2 * 86400), logged("typo/b.csv", 600), logged("typo/c.csv", 60)],
    )

    out = io.StringIO()
    assert main(["status"], clients=deployment.clients, out=out, now=now) == EXIT_OK
    text = out.getvalue()
    assert "Uploads outside every tenant prefix (last 24 h): 2" in text
    assert text.index("s3://landing/typo/c.csv") < text.index("s3://landing/typo/b.csv")
    assert "old/a.csv" not in text

    out = io.StringIO()
    assert main(["status", "acme"], clients=deployment.clients, out=out, now=now) == EXIT_OK
    assert "outside every tenant prefix" not in out.getvalue()
