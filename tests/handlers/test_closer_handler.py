"""The closer on moto: a close is recorded once, a failure notifies and halts, the next file is handed off."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import pytest
from conftest import TENANT

import closer
from closer import Closer, close_event, error_summary
from contract import CloserEnv, FileRef, environment, execution_arn
from ledger import DUPLICATE, FAILED, SUCCEEDED, Ledger
from runtime import BoundLogger, get_logger

NOW = 1_700_000_000.0
DEFINITION = json.dumps({"StartAt": "Hold", "States": {"Hold": {"Type": "Wait", "Seconds": 60, "End": True}}})
LAMBDA_CAUSE = json.dumps({
    "errorMessage": "chunk 3 record 4 (file record 304): HTTP 400",
    "errorType": "SinkRejectedError",
    "requestId": "r-1",
    "stackTrace": ['  File "/var/task/register_chunk.py", line 1, in handler\n'],
})


@pytest.fixture
def topic(sns: Any, sqs: Any) -> dict[str, str]:
    """The alarm topic, with an SQS subscription to read what it published."""
    arn = sns.create_topic(Name="alarms")["TopicArn"]
    url = sqs.create_queue(QueueName="inbox")["QueueUrl"]
    sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint="arn:aws:sqs:us-east-1:123456789012:inbox")
    return {"arn": arn, "inbox": url}


def published(sqs: Any, topic: dict[str, str]) -> list[dict[str, Any]]:
    messages = sqs.receive_message(QueueUrl=topic["inbox"], MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(m["Body"]) for m in messages]


@pytest.fixture
def machine(sfn: Any) -> str:
    return sfn.create_state_machine(name=f"{TENANT}-file-ingest-workflow", definition=DEFINITION,
                                    roleArn="arn:aws:iam::123456789012:role/wf")["stateMachineArn"]


def config(machine: str, ledger_table: str, queue_url: str, topic: dict[str, str], on_failure: str = "halt") -> CloserEnv:
    return CloserEnv(tenant_id=TENANT, state_machine_arn=machine, ledger_table_name=ledger_table, queue_url=queue_url,
                     alarm_topic_arn=topic["arn"], on_failure=on_failure)


@pytest.fixture
def ledger(ddb: Any, ledger_table: str) -> Ledger:
    """File f.csv running as execution evt-a, 304 of its 1,000 records acknowledged (chunk size 100)."""
    ledger = Ledger(ddb, ledger_table, TENANT)
    file = FileRef(tenant=TENANT, event_id="evt-a", bucket="landing", key="acme/f.csv", version_id="v7", size=1,
                   etag=None, event_time="")
    ledger.claim(ledger.read(), file, "evt-a", NOW)
    ledger.record_progress("evt-a", 304, chunk_size=100, chunk_count=10, record_count=1000)
    return ledger


def close(cfg: CloserEnv, ledger: Ledger, sqs: Any, sns: Any, sfn: Any, event: dict[str, Any]) -> dict[str, Any]:
    runner = Closer(config=cfg, ledger=ledger, sqs=sqs, sns=sns, sfn=sfn, now=NOW + 60,
                    log=BoundLogger(get_logger("closer"), {"tenant": TENANT}))
    return runner.handle(close_event(event))


def waiting_message(sqs: Any, queue_url: str, ledger: Ledger) -> dict[str, Any]:
    """A next file's message, received and noted as waiting (what a busy controller leaves)."""
    sqs.send_message(QueueUrl=queue_url, MessageBody="{}", MessageGroupId=TENANT, MessageDeduplicationId=uuid.uuid4().hex)
    (message,) = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=1, VisibilityTimeout=240)["Messages"]
    ledger.record_waiting(ledger.read(), message["MessageId"], message["ReceiptHandle"], NOW)
    return message


def visible(sqs: Any, queue_url: str) -> int:
    return int(sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]["ApproximateNumberOfMessages"])


def test_a_success_is_recorded_and_the_waiting_file_is_handed_off_at_once(machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn):
    cfg = config(machine, ledger_table, queue_url, topic)
    waiting_message(sqs, queue_url, ledger)
    assert visible(sqs, queue_url) == 0

    result = close(cfg, ledger, sqs, sns, sfn, {"execution_name": "evt-a", "status": "SUCCEEDED"})

    assert result == {"execution_name": "evt-a", "recorded": True, "halted": False, "handed_off": True}
    assert ledger.read().status == SUCCEEDED and ledger.read().waiting_receipt is None
    assert visible(sqs, queue_url) == 1
    assert published(sqs, topic) == []


def test_a_failure_halts_the_tenant_keeps_the_next_file_waiting_and_tells_what_to_do(machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn):
    cfg = config(machine, ledger_table, queue_url, topic)
    waiting_message(sqs, queue_url, ledger)

    result = close(cfg, ledger, sqs, sns, sfn, {
        "execution_name": "evt-a", "status": "FAILED", "error": "SinkRejectedError", "cause": LAMBDA_CAUSE,
    })

    assert result["halted"] is True and result["handed_off"] is False
    assert (ledger.read().status, ledger.read().halted) == (FAILED, True)
    assert visible(sqs, queue_url) == 0
    (notice,) = published(sqs, topic)
    text = notice["Message"]
    assert notice["Subject"] == "[ordered-ingest] acme: file failed (SinkRejectedError)"
    assert "s3://landing/acme/f.csv (version v7)" in text
    assert "chunk 4 of 10, record 304 of 1,000" in text
    assert "Error:     SinkRejectedError: chunk 3 record 4 (file record 304): HTTP 400" in text
    assert "python -m ops resume acme" in text and "python -m ops skip acme --reason" in text
    assert "Runbook: docs/operations.md#workflow-failed" in text
    assert "stackTrace" not in text and "\\n" not in text and '\\"' not in text


def test_with_continue_a_failure_notifies_and_hands_off(machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn):
    cfg = config(machine, ledger_table, queue_url, topic, on_failure="continue")
    waiting_message(sqs, queue_url, ledger)

    result = close(cfg, ledger, sqs, sns, sfn, {"execution_name": "evt-a", "status": "FAILED", "error": "X", "cause": "boom"})

    assert result == {"execution_name": "evt-a", "recorded": True, "halted": False, "handed_off": True}
    (notice,) = published(sqs, topic)
    assert "goes on with its next file (on_failure: continue)" in notice["Message"]
    assert "Error:     X: boom" in notice["Message"]


def test_the_same_close_reported_twice_is_recorded_and_notified_once(machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn):
    """The workflow's last state and the status-change rule both report a failure."""
    cfg = config(machine, ledger_table, queue_url, topic)
    close(cfg, ledger, sqs, sns, sfn, {"execution_name": "evt-a", "status": "FAILED", "error": "E", "cause": "c"})
    rule_event = {"detail-type": "Step Functions Execution Status Change", "source": "aws.states",
                  "detail": {"name": "evt-a", "status": "FAILED", "executionArn": "arn", "error": "E", "cause": "c"}}

    again = close(cfg, ledger, sqs, sns, sfn, rule_event)

    assert again["recorded"] is False
    assert len(published(sqs, topic)) == 1
    assert len(ledger.history()) == 1


def test_a_timeout_or_abort_only_the_rule_can_report_is_recorded_and_notified(machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn):
    cfg = config(machine, ledger_table, queue_url, topic)
    rule_event = {"detail": {"executionArn": execution_arn(machine, "evt-a"), "status": "TIMED_OUT", "error": None, "cause": None}}

    result = close(cfg, ledger, sqs, sns, sfn, rule_event)

    assert result["recorded"] is True and result["halted"] is True
    assert ledger.read().closed_as == "TIMED_OUT"
    (notice,) = published(sqs, topic)
    assert notice["Subject"] == "[ordered-ingest] acme: file timed out (Error)"


def test_a_close_of_a_superseded_execution_changes_nothing(machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn):
    cfg = config(machine, ledger_table, queue_url, topic)
    result = close(cfg, ledger, sqs, sns, sfn, {"execution_name": "evt-old", "status": "FAILED"})
    assert result["recorded"] is False and ledger.read().running


def test_an_execution_started_outside_the_gate_is_stopped(machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn, logs):
    """GIVEN the tenant halted on a failed execution WHEN someone redrives it (status RUNNING again)
    THEN the closer stops it, logs an ERROR that says to use ops resume, and the ledger is unchanged."""
    cfg = config(machine, ledger_table, queue_url, topic)
    close(cfg, ledger, sqs, sns, sfn, {"execution_name": "evt-a", "status": "FAILED"})
    sfn.start_execution(stateMachineArn=machine, name="evt-a", input="{}")  # the "redrive"

    result = close(cfg, ledger, sqs, sns, sfn, {"detail": {"name": "evt-a", "status": "RUNNING"}})

    assert result["stopped"] is True
    assert sfn.describe_execution(executionArn=execution_arn(machine, "evt-a"))["status"] == "ABORTED"
    assert (ledger.read().status, ledger.read().halted) == (FAILED, True)
    (error,) = logs.errors()
    assert "ops resume" in error.getMessage()


def test_a_late_running_event_of_a_closed_execution_is_ignored(machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn, logs):
    cfg = config(machine, ledger_table, queue_url, topic)
    sfn.start_execution(stateMachineArn=machine, name="evt-a", input="{}")
    sfn.stop_execution(executionArn=execution_arn(machine, "evt-a"))
    close(cfg, ledger, sqs, sns, sfn, {"execution_name": "evt-a", "status": "SUCCEEDED"})

    result = close(cfg, ledger, sqs, sns, sfn, {"detail": {"name": "evt-a", "status": "RUNNING"}})

    assert "stopped" not in result
    assert logs.errors() == []


def test_the_running_event_of_the_current_execution_is_fine(machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn):
    cfg = config(machine, ledger_table, queue_url, topic)
    result = close(cfg, ledger, sqs, sns, sfn, {"detail": {"name": "evt-a", "status": "RUNNING"}})
    assert "stopped" not in result and ledger.read().running


@pytest.mark.parametrize(("error", "cause", "expected"), [
    ("SinkRejectedError", LAMBDA_CAUSE, ("SinkRejectedError", "chunk 3 record 4 (file record 304): HTTP 400")),
    ("States.Timeout", "Task timed out", ("States.Timeout", "Task timed out")),
    (None, None, ("Error", "")),
    # a failed page execution (startExecution.sync:2): the child's own error, as moto (lower
    # camel case) or as the service's integration (Pascal case) writes its DescribeExecution
    ("States.TaskFailed", json.dumps({"executionArn": "arn:x:p2", "status": "FAILED", "error": "SinkRejectedError",
                                      "cause": LAMBDA_CAUSE}),
     ("SinkRejectedError", "chunk 3 record 4 (file record 304): HTTP 400")),
    ("States.TaskFailed", json.dumps({"ExecutionArn": "arn:x:p2", "Status": "FAILED", "Error": "ChunkInvocationBudgetExhausted",
                                      "Cause": "the chunk used its 84 register invocations"}),
     ("ChunkInvocationBudgetExhausted", "the chunk used its 84 register invocations")),
    # an aborted page has no error of its own: the wrapper stays
    ("States.TaskFailed", json.dumps({"executionArn": "arn:x:p2", "status": "ABORTED"}),
     ("States.TaskFailed", json.dumps({"executionArn": "arn:x:p2", "status": "ABORTED"}))),
])
def test_error_summary_drops_stack_traces_and_json(error, cause, expected):
    assert error_summary(error, cause) == expected


def test_handler_reads_its_environment(machine, ledger_table, queue_url, topic, ledger, monkeypatch, logs):
    for name, value in environment(config(machine, ledger_table, queue_url, topic)).items():
        monkeypatch.setenv(name, value)
    result = closer.handler({"execution_name": "evt-a", "status": "SUCCEEDED"}, None)
    assert result["recorded"] is True
    assert [r for r in logs.records() if r.levelno >= logging.WARNING] == []


SHA = "ab" * 32


def test_a_success_remembers_the_files_content_for_later_duplicates(machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn):
    cfg = config(machine, ledger_table, queue_url, topic)
    close(cfg, ledger, sqs, sns, sfn, {"execution_name": "evt-a", "status": "SUCCEEDED", "content_sha256": SHA,
                                       "duplicate_of": None})
    assert ledger.processed_content(SHA) == {"key": "acme/f.csv", "version_id": "v7", "event_id": "evt-a"}


def test_a_failure_never_remembers_the_content(machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn):
    cfg = config(machine, ledger_table, queue_url, topic)
    close(cfg, ledger, sqs, sns, sfn, {"execution_name": "evt-a", "status": "FAILED", "error": "E", "cause": "c",
                                       "content_sha256": SHA})
    assert ledger.processed_content(SHA) is None


def test_a_duplicate_is_recorded_as_such_without_a_notification(machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn):
    cfg = config(machine, ledger_table, queue_url, topic)
    waiting_message(sqs, queue_url, ledger)
    earlier = {"key": "acme/e.csv", "version_id": "v1", "event_id": "evt-0"}

    result = close(cfg, ledger, sqs, sns, sfn, {"execution_name": "evt-a", "status": "SUCCEEDED",
                                                "content_sha256": SHA, "duplicate_of": earlier})

    assert result["recorded"] is True and result["handed_off"] is True
    assert (ledger.read().status, ledger.read().duplicate_of) == (DUPLICATE, earlier)
    (entry,) = ledger.history()
    assert (entry["status"], entry["duplicate_of"]) == (DUPLICATE, earlier)
    assert ledger.processed_content(SHA) is None  # the content stays the earlier file's
    assert published(sqs, topic) == []
