"""The closer on moto: a close is recorded once, a failure notifies and halts, the next file is handed off."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

from lambdas import closer
from lambdas.closer import Closer, close_event, crashed_function, error_summary
from lambdas.contract import CloserEnv, FileRef, environment, execution_arn
from lambdas.ledger import DUPLICATE, FAILED, SUCCEEDED, Ledger
from lambdas.runtime import BoundLogger, get_logger
from tests.handlers.support import TENANT

NOW = 1_700_000_000.0
DEFINITION = json.dumps({"StartAt": "Hold", "States": {"Hold": {"Type": "Wait", "Seconds": 60, "End": True}}})
LAMBDA_CAUSE = json.dumps(
    {
        "errorMessage": "chunk 3 record 4 (file record 304): HTTP 400",
        "errorType": "SinkRejectedError",
        "requestId": "r-1",
        "stackTrace": ['  File "/var/task/register_chunk.py", line 1, in handler\n'],
    }
)


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
    return sfn.create_state_machine(
        name=f"{TENANT}-file-ingest-workflow",
        definition=DEFINITION,
        roleArn="arn:aws:iam::123456789012:role/wf",
    )["stateMachineArn"]


def config(
    machine: str, ledger_table: str, queue_url: str, topic: dict[str, str], on_failure: str = "halt"
) -> CloserEnv:
    return CloserEnv(
        tenant_id=TENANT,
        state_machine_arn=machine,
        ledger_table_name=ledger_table,
        queue_url=queue_url,
        alarm_topic_arn=topic["arn"],
        on_failure=on_failure,
    )


@pytest.fixture
def ledger(ddb: Any, ledger_table: str) -> Ledger:
    """File f.csv running as execution evt-a, 304 of its 1,000 records acknowledged (chunk size 100)."""
    ledger = Ledger(ddb, ledger_table, TENANT)
    file = FileRef(
        tenant=TENANT,
        event_id="evt-a",
        bucket="landing",
        key="acme/f.csv",
        version_id="v7",
        size=1,
        etag=None,
        event_time="",
    )
    ledger.claim(ledger.read(), file, "evt-a", NOW)
    ledger.record_progress("evt-a", 304, chunk_size=100, chunk_count=10, record_count=1000)
    return ledger


def closer_of(cfg: CloserEnv, ledger: Ledger, sqs: Any, sns: Any, sfn: Any) -> Closer:
    """The tenant's closer, a minute after the file started."""
    return Closer(
        config=cfg,
        ledger=ledger,
        sqs=sqs,
        sns=sns,
        sfn=sfn,
        now=NOW + 60,
        log=BoundLogger(get_logger("closer"), {"tenant": TENANT}),
    )


def close(
    cfg: CloserEnv, ledger: Ledger, sqs: Any, sns: Any, sfn: Any, event: dict[str, Any]
) -> dict[str, Any]:
    return closer_of(cfg, ledger, sqs, sns, sfn).handle(close_event(event))


def waiting_message(sqs: Any, queue_url: str, ledger: Ledger) -> dict[str, Any]:
    """A next file's message, received and noted as waiting (what a busy controller leaves)."""
    sqs.send_message(
        QueueUrl=queue_url, MessageBody="{}", MessageGroupId=TENANT, MessageDeduplicationId=uuid.uuid4().hex
    )
    (message,) = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=1, VisibilityTimeout=240)[
        "Messages"
    ]
    ledger.record_waiting(ledger.read(), message["MessageId"], message["ReceiptHandle"], NOW)
    return message


def visible(sqs: Any, queue_url: str) -> int:
    return int(
        sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"][
            "ApproximateNumberOfMessages"
        ]
    )


def test_a_success_is_recorded_and_the_waiting_file_is_handed_off_at_once(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn
):
    cfg = config(machine, ledger_table, queue_url, topic)
    waiting_message(sqs, queue_url, ledger)
    assert visible(sqs, queue_url) == 0

    # The rule's report of a success carries no error; a workflow payload may carry null ones.
    result = close(
        cfg,
        ledger,
        sqs,
        sns,
        sfn,
        {
            "execution_name": "evt-a",
            "status": "SUCCEEDED",
            "error": "States.TaskFailed",
            "cause": "not an error of a success",
        },
    )

    assert result == {"execution_name": "evt-a", "recorded": True, "halted": False, "handed_off": True}
    assert ledger.read().status == SUCCEEDED and ledger.read().waiting_receipt is None
    assert visible(sqs, queue_url) == 1
    assert published(sqs, topic) == []
    # A success is recorded without an error, a cause or a crashed function, in the position and history.
    position = ledger.read()
    assert (position.error, position.cause, position.failed_in) == (None, None, None)
    (entry,) = ledger.history()
    assert (entry["error"], entry["cause"], entry["failed_in"]) == (None, None, None)


def test_a_failure_halts_the_tenant_keeps_the_next_file_waiting_and_tells_what_to_do(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn
):
    cfg = config(machine, ledger_table, queue_url, topic)
    waiting_message(sqs, queue_url, ledger)

    result = close(
        cfg,
        ledger,
        sqs,
        sns,
        sfn,
        {
            "execution_name": "evt-a",
            "status": "FAILED",
            "error": "SinkRejectedError",
            "cause": LAMBDA_CAUSE,
        },
    )

    assert result["halted"] is True and result["handed_off"] is False
    assert (ledger.read().status, ledger.read().halted) == (FAILED, True)
    assert visible(sqs, queue_url) == 0
    (notice,) = published(sqs, topic)
    text = notice["Message"]
    assert notice["Subject"] == "[ordered-ingest] acme: file failed (SinkRejectedError)"
    assert "s3://landing/acme/f.csv (version v7)" in text
    assert "Stopped:   chunk 3 of 10, record 304 of 1,000 (records 0-303 reached the core system)" in text
    assert "Error:     SinkRejectedError: chunk 3 record 4 (file record 304): HTTP 400" in text
    assert "python -m ops resume acme" in text and "python -m ops skip acme --reason" in text
    assert "Runbook: docs/operations.md#workflow-failed" in text
    assert "stackTrace" not in text and "\\n" not in text and '\\"' not in text


def test_a_malformed_file_is_to_be_replaced_by_its_correction_not_resumed(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn
):
    """GIVEN a malformed file that halted its tenant THEN the notification says to upload the
    correction and replace the failed file with it (the order-keeping way, first, with the file's
    key), skip only as the way out for a file that must not be ingested, and never resume."""
    cfg = config(machine, ledger_table, queue_url, topic)
    cause = json.dumps(
        {"errorType": "MalformedFileError", "errorMessage": "line 4: expected 2 fields, found 1"}
    )

    close(
        cfg,
        ledger,
        sqs,
        sns,
        sfn,
        {"execution_name": "evt-a", "status": "FAILED", "error": "MalformedFileError", "cause": cause},
    )

    (notice,) = published(sqs, topic)
    text = notice["Message"]
    assert "Hint:      have the tenant upload a corrected file, then replace the failed one with it" in text
    replace = text.index("python -m ops replace acme --key acme/")
    assert replace < text.index("python -m ops skip acme --reason") and "ops resume" not in text


def test_a_crash_of_the_register_function_past_its_retries_says_what_crashed_and_where(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn
):
    """GIVEN a page execution failed because the register function ran out of memory on every
    try (the parent sees States.TaskFailed with the page's description as cause) THEN the
    notification says register crashed, with what and in which chunk, and to resume after the fix."""
    cfg = config(machine, ledger_table, queue_url, topic)
    crash = json.dumps(
        {"errorType": "Runtime.OutOfMemory", "errorMessage": "RequestId: r-9 Error: Runtime exited"}
    )
    page = json.dumps(
        {"executionArn": "arn:x:evt-a-p3", "status": "FAILED", "error": "Runtime.OutOfMemory", "cause": crash}
    )

    close(
        cfg,
        ledger,
        sqs,
        sns,
        sfn,
        {"execution_name": "evt-a", "status": "FAILED", "error": "States.TaskFailed", "cause": page},
    )

    (notice,) = published(sqs, topic)
    assert notice["Subject"] == "[ordered-ingest] acme: file failed (Runtime.OutOfMemory)"
    assert (
        "Hint:      register crashed repeatedly (Runtime.OutOfMemory) in chunk 3: check its memory and timeout, "
        "then resume"
    ) in notice["Message"]
    assert "python -m ops resume acme" in notice["Message"]


def test_a_register_crash_in_the_files_own_execution_says_register_crashed(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn
):
    """GIVEN a file of one page whose chunk crashed the register function on every try in the
    file's own execution (the error is the runtime's, the cause the workflow's "register
    crashed ...") THEN the ledger and the notification blame register, not split."""
    cfg = config(machine, ledger_table, queue_url, topic)
    cause = "register crashed 4 times in a row in chunk 3 of the file (last: Runtime.OutOfMemory)"
    assert crashed_function("Runtime.OutOfMemory", cause) == "register"
    assert crashed_function("Runtime.OutOfMemory", "split crashed 4 times in a row on this file") == "split"

    close(
        cfg,
        ledger,
        sqs,
        sns,
        sfn,
        {"execution_name": "evt-a", "status": "FAILED", "error": "Runtime.OutOfMemory", "cause": cause},
    )

    assert ledger.read().failed_in == "register"
    (notice,) = published(sqs, topic)
    assert "Hint:      register crashed repeatedly (Runtime.OutOfMemory)" in notice["Message"]


def test_with_continue_a_failure_notifies_and_hands_off(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn
):
    cfg = config(machine, ledger_table, queue_url, topic, on_failure="continue")
    waiting_message(sqs, queue_url, ledger)

    result = close(
        cfg,
        ledger,
        sqs,
        sns,
        sfn,
        {"execution_name": "evt-a", "status": "FAILED", "error": "X", "cause": "boom"},
    )

    assert result == {"execution_name": "evt-a", "recorded": True, "halted": False, "handed_off": True}
    (notice,) = published(sqs, topic)
    assert "goes on with its next file (on_failure: continue)" in notice["Message"]
    assert "Error:     X: boom" in notice["Message"]


def test_the_same_close_reported_twice_is_recorded_and_notified_once(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn
):
    """The workflow's last state and the status-change rule both report a failure."""
    cfg = config(machine, ledger_table, queue_url, topic)
    close(
        cfg,
        ledger,
        sqs,
        sns,
        sfn,
        {"execution_name": "evt-a", "status": "FAILED", "error": "E", "cause": "c"},
    )
    rule_event = {
        "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states",
        "detail": {"name": "evt-a", "status": "FAILED", "executionArn": "arn", "error": "E", "cause": "c"},
    }

    again = close(cfg, ledger, sqs, sns, sfn, rule_event)

    assert again["recorded"] is False
    assert len(published(sqs, topic)) == 1
    assert len(ledger.history()) == 1


def test_a_timeout_or_abort_only_the_rule_can_report_is_recorded_and_notified(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn
):
    cfg = config(machine, ledger_table, queue_url, topic)
    rule_event = {
        "detail": {
            "executionArn": execution_arn(machine, "evt-a"),
            "status": "TIMED_OUT",
            "error": None,
            "cause": None,
        }
    }

    result = close(cfg, ledger, sqs, sns, sfn, rule_event)

    assert result["recorded"] is True and result["halted"] is True
    assert ledger.read().closed_as == "TIMED_OUT"
    (notice,) = published(sqs, topic)
    assert notice["Subject"] == "[ordered-ingest] acme: file timed out (Error)"


def test_a_close_of_a_superseded_execution_changes_nothing(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn
):
    cfg = config(machine, ledger_table, queue_url, topic)
    result = close(cfg, ledger, sqs, sns, sfn, {"execution_name": "evt-old", "status": "FAILED"})
    assert result["recorded"] is False and ledger.read().running


class Redriven:
    """Step Functions as it describes an execution redriven by hand (moto cannot redrive)."""

    def __init__(self, sfn: Any) -> None:
        self.sfn = sfn

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sfn, name)

    def describe_execution(self, **kwargs: Any) -> dict[str, Any]:
        return {**self.sfn.describe_execution(**kwargs), "redriveCount": 1}


def test_an_execution_redriven_by_hand_is_stopped(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn, logs
):
    """GIVEN the tenant halted on a failed execution WHEN someone redrives it (status RUNNING again)
    THEN the closer stops it, logs an ERROR that says to use ops resume, and the ledger is unchanged."""
    cfg = config(machine, ledger_table, queue_url, topic)
    close(cfg, ledger, sqs, sns, sfn, {"execution_name": "evt-a", "status": "FAILED"})
    sfn.start_execution(
        stateMachineArn=machine, name="evt-a", input="{}"
    )  # running again, as after a redrive

    result = close(cfg, ledger, sqs, sns, Redriven(sfn), {"detail": {"name": "evt-a", "status": "RUNNING"}})

    assert result["stopped"] is True
    assert sfn.describe_execution(executionArn=execution_arn(machine, "evt-a"))["status"] == "ABORTED"
    assert (ledger.read().status, ledger.read().halted) == (FAILED, True)
    (error,) = logs.errors()
    assert "ops resume" in error.getMessage()


def test_an_execution_the_ledger_does_not_know_is_stopped(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn, logs
):
    """GIVEN evt-a running as the tenant's current file WHEN someone starts another execution by
    hand THEN the closer stops that one (and only that one)."""
    cfg = config(machine, ledger_table, queue_url, topic)
    sfn.start_execution(stateMachineArn=machine, name="evt-a", input="{}")
    sfn.start_execution(stateMachineArn=machine, name="by-hand", input="{}")

    result = close(cfg, ledger, sqs, sns, sfn, {"detail": {"name": "by-hand", "status": "RUNNING"}})

    assert result["stopped"] is True
    assert sfn.describe_execution(executionArn=execution_arn(machine, "by-hand"))["status"] == "ABORTED"
    assert sfn.describe_execution(executionArn=execution_arn(machine, "evt-a"))["status"] == "RUNNING"
    assert ledger.read().running and len(logs.errors()) == 1


def test_a_running_event_of_an_execution_step_functions_does_not_know_changes_nothing(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn, logs
):
    """GIVEN a RUNNING event naming an execution Step Functions does not have (forgotten, or never
    started) WHEN the closer gets it THEN it stops nothing, records nothing and logs no error."""
    cfg = config(machine, ledger_table, queue_url, topic)
    sfn.start_execution(stateMachineArn=machine, name="evt-a", input="{}")

    result = close(cfg, ledger, sqs, sns, sfn, {"detail": {"name": "gone", "status": "RUNNING"}})

    assert result == {"execution_name": "gone", "recorded": False, "halted": False, "handed_off": False}
    assert sfn.describe_execution(executionArn=execution_arn(machine, "evt-a"))["status"] == "RUNNING"
    assert ledger.read().running and logs.errors() == []


@pytest.mark.parametrize(("status", "recorded_as"), [("SUCCEEDED", SUCCEEDED), ("FAILED", FAILED)])
def test_a_late_running_event_inside_the_close_window_changes_nothing(
    status, recorded_as, machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn, logs
):
    """GIVEN evt-a's last state recorded its close while the execution still runs (between
    RecordSuccess or RecordFailure and its end) WHEN its RUNNING status change arrives only now
    THEN the execution is not stopped, the ledger keeps the recorded close and nothing pages."""
    cfg = config(machine, ledger_table, queue_url, topic)
    sfn.start_execution(stateMachineArn=machine, name="evt-a", input="{}")
    close(
        cfg, ledger, sqs, sns, sfn, {"execution_name": "evt-a", "status": status, "error": "E", "cause": "c"}
    )

    result = close(cfg, ledger, sqs, sns, sfn, {"detail": {"name": "evt-a", "status": "RUNNING"}})

    assert "stopped" not in result
    assert sfn.describe_execution(executionArn=execution_arn(machine, "evt-a"))["status"] == "RUNNING"
    assert ledger.read().status == recorded_as
    assert logs.errors() == []


def test_a_late_running_event_of_the_attempt_a_resume_superseded_changes_nothing(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn, logs
):
    """GIVEN evt-a failed (its execution still finishing) and the operator resumed the file as
    evt-a-r1 WHEN evt-a's RUNNING event arrives only now THEN neither execution is stopped."""
    cfg = config(machine, ledger_table, queue_url, topic)
    sfn.start_execution(stateMachineArn=machine, name="evt-a", input="{}")
    close(
        cfg,
        ledger,
        sqs,
        sns,
        sfn,
        {"execution_name": "evt-a", "status": "FAILED", "error": "E", "cause": "c"},
    )
    ledger.resume(ledger.read(), "evt-a-r1", NOW + 120)
    sfn.start_execution(stateMachineArn=machine, name="evt-a-r1", input="{}")

    result = close(cfg, ledger, sqs, sns, sfn, {"detail": {"name": "evt-a", "status": "RUNNING"}})

    assert "stopped" not in result
    assert {
        sfn.describe_execution(executionArn=execution_arn(machine, n))["status"]
        for n in ("evt-a", "evt-a-r1")
    } == {"RUNNING"}
    assert logs.errors() == []


def test_an_aborted_report_of_a_recorded_success_neither_flips_it_nor_notifies(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn, logs
):
    cfg = config(machine, ledger_table, queue_url, topic)
    close(cfg, ledger, sqs, sns, sfn, {"execution_name": "evt-a", "status": "SUCCEEDED"})

    result = close(
        cfg,
        ledger,
        sqs,
        sns,
        sfn,
        {"detail": {"name": "evt-a", "status": "ABORTED", "error": "X", "cause": "y"}},
    )

    assert result["recorded"] is False
    assert (ledger.read().status, ledger.read().halted) == (SUCCEEDED, False)
    assert [e["status"] for e in ledger.history()] == [SUCCEEDED]
    assert published(sqs, topic) == []
    assert logs.errors() == []


@pytest.mark.parametrize("status", ["RUNNING", "FAILED"])
def test_a_status_change_of_a_page_execution_is_ignored(
    status, machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn, logs
):
    """The rule matches the file's own state machine; should a page's event come anyway, it
    neither stops nor records anything."""
    runner = closer_of(config(machine, ledger_table, queue_url, topic), ledger, sqs, sns, sfn)
    page_machine = machine.replace("file-ingest-workflow", "file-ingest-page")

    result = runner.handle_event(
        {
            "detail": {
                "name": "evt-a-p0",
                "status": status,
                "stateMachineArn": page_machine,
                "error": "E",
                "cause": "c",
            }
        }
    )

    assert result["recorded"] is False and "stopped" not in result
    assert ledger.read().running and published(sqs, topic) == []
    assert logs.errors() == []


def test_a_late_running_event_of_a_closed_execution_is_ignored(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn, logs
):
    cfg = config(machine, ledger_table, queue_url, topic)
    sfn.start_execution(stateMachineArn=machine, name="evt-a", input="{}")
    sfn.stop_execution(executionArn=execution_arn(machine, "evt-a"))
    close(cfg, ledger, sqs, sns, sfn, {"execution_name": "evt-a", "status": "SUCCEEDED"})

    result = close(cfg, ledger, sqs, sns, sfn, {"detail": {"name": "evt-a", "status": "RUNNING"}})

    assert "stopped" not in result
    assert logs.errors() == []


def test_the_running_event_of_the_current_execution_is_fine(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn
):
    cfg = config(machine, ledger_table, queue_url, topic)
    result = close(cfg, ledger, sqs, sns, sfn, {"detail": {"name": "evt-a", "status": "RUNNING"}})
    assert "stopped" not in result and ledger.read().running


@pytest.mark.parametrize(
    ("error", "cause", "expected"),
    [
        (
            "SinkRejectedError",
            LAMBDA_CAUSE,
            ("SinkRejectedError", "chunk 3 record 4 (file record 304): HTTP 400"),
        ),
        ("States.Timeout", "Task timed out", ("States.Timeout", "Task timed out")),
        (None, None, ("Error", "")),
        # a failed page execution (startExecution.sync:2): the child's own error, as moto (lower
        # camel case) or as the service's integration (Pascal case) writes its DescribeExecution
        (
            "States.TaskFailed",
            json.dumps(
                {
                    "executionArn": "arn:x:p2",
                    "status": "FAILED",
                    "error": "SinkRejectedError",
                    "cause": LAMBDA_CAUSE,
                }
            ),
            ("SinkRejectedError", "chunk 3 record 4 (file record 304): HTTP 400"),
        ),
        (
            "States.TaskFailed",
            json.dumps(
                {
                    "ExecutionArn": "arn:x:p2",
                    "Status": "FAILED",
                    "Error": "ChunkInvocationBudgetExhausted",
                    "Cause": "the chunk used its 84 register invocations",
                }
            ),
            ("ChunkInvocationBudgetExhausted", "the chunk used its 84 register invocations"),
        ),
        # a page whose own cause is text, not the Lambda runtime's JSON
        (
            "States.TaskFailed",
            json.dumps(
                {
                    "executionArn": "arn:x:p2",
                    "status": "FAILED",
                    "error": "SinkRejectedError",
                    "cause": "HTTP 400",
                }
            ),
            ("SinkRejectedError", "HTTP 400"),
        ),
        # the runtime's JSON with one of its two fields; no error given at all
        ("Lambda.Unknown", json.dumps({"errorMessage": "boom"}), ("Lambda.Unknown", "boom")),
        (None, json.dumps({"errorMessage": "boom"}), ("Error", "boom")),
        (None, json.dumps({"errorType": "KeyError"}), ("KeyError", "")),
        (None, "plain text", ("Error", "plain text")),
        # JSON that is not an object is text
        ("E", "42", ("E", "42")),
        ("E", '["a"]', ("E", '["a"]')),
        # an aborted page has no error of its own: the wrapper stays
        (
            "States.TaskFailed",
            json.dumps({"executionArn": "arn:x:p2", "status": "ABORTED"}),
            ("States.TaskFailed", json.dumps({"executionArn": "arn:x:p2", "status": "ABORTED"})),
        ),
    ],
)
def test_error_summary_drops_stack_traces_and_json(error, cause, expected):
    assert error_summary(error, cause) == expected


def test_handler_reads_its_environment(machine, ledger_table, queue_url, topic, ledger, monkeypatch, logs):
    for name, value in environment(config(machine, ledger_table, queue_url, topic)).items():
        monkeypatch.setenv(name, value)
    result = closer.handler({"execution_name": "evt-a", "status": "SUCCEEDED"}, None)
    assert result["recorded"] is True
    assert [r for r in logs.records() if r.levelno >= logging.WARNING] == []


SHA = "ab" * 32


def test_a_success_remembers_the_files_content_for_later_duplicates(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn
):
    cfg = config(machine, ledger_table, queue_url, topic)
    close(
        cfg,
        ledger,
        sqs,
        sns,
        sfn,
        {"execution_name": "evt-a", "status": "SUCCEEDED", "content_sha256": SHA, "duplicate_of": None},
    )
    assert ledger.processed_content(SHA) == {"key": "acme/f.csv", "version_id": "v7", "event_id": "evt-a"}


def test_a_failure_never_remembers_the_content(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn
):
    cfg = config(machine, ledger_table, queue_url, topic)
    close(
        cfg,
        ledger,
        sqs,
        sns,
        sfn,
        {"execution_name": "evt-a", "status": "FAILED", "error": "E", "cause": "c", "content_sha256": SHA},
    )
    assert ledger.processed_content(SHA) is None


def test_a_duplicate_is_recorded_as_such_without_a_notification(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn
):
    cfg = config(machine, ledger_table, queue_url, topic)
    waiting_message(sqs, queue_url, ledger)
    earlier = {"key": "acme/e.csv", "version_id": "v1", "event_id": "evt-0"}

    result = close(
        cfg,
        ledger,
        sqs,
        sns,
        sfn,
        {"execution_name": "evt-a", "status": "SUCCEEDED", "content_sha256": SHA, "duplicate_of": earlier},
    )

    assert result["recorded"] is True and result["handed_off"] is True
    assert (ledger.read().status, ledger.read().duplicate_of) == (DUPLICATE, earlier)
    (entry,) = ledger.history()
    assert (entry["status"], entry["duplicate_of"]) == (DUPLICATE, earlier)
    assert ledger.processed_content(SHA) is None  # the content stays the earlier file's
    assert published(sqs, topic) == []


# -- a close is reported exactly once, whatever fails in between ------------------------------


class Faulty:
    """A boto3 client whose `method` is throttled for its first `times` calls; counts the calls
    that went through (`passed`)."""

    def __init__(self, client: Any, method: str, times: int = 1) -> None:
        self.client, self.method, self.times = client, method, times
        self.passed: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.client, name)
        if name != self.method:
            return real

        def call(**kwargs: Any) -> Any:
            if self.times:
                self.times -= 1
                raise ClientError(
                    {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, name
                )
            result = real(**kwargs)
            self.passed.append(kwargs)
            return result

        return call


def faulty_closer(cfg: CloserEnv, ddb: Any, sqs: Any, sns: Any, sfn: Any) -> Closer:
    return closer_of(cfg, Ledger(ddb, cfg.ledger_table_name, TENANT), sqs, sns, sfn)


RECORD_FAILURE = {
    "execution_name": "evt-a",
    "status": "FAILED",
    "error": "SinkRejectedError",
    "cause": LAMBDA_CAUSE,
}
#: What the status-change rule delivers for the same close: the execution's Fail state's error
#: and cause (the Catch's), and nothing of what the workflow's payload carries besides.
BACKSTOP = {
    "detail": {"name": "evt-a", "status": "FAILED", "error": "SinkRejectedError", "cause": LAMBDA_CAUSE}
}


@pytest.mark.parametrize(
    ("service", "method"),
    [
        ("ddb", "transact_write_items"),  # the close itself: nothing recorded yet
        ("sns", "publish"),  # after the close (position and history item) was recorded
        ("sqs", "change_message_visibility"),  # after the publish: the hand-off
    ],
)
def test_a_failure_at_any_step_is_finished_by_the_retry_and_reported_once(
    service, method, machine, ledger_table, queue_url, topic, ledger, ddb, sqs, sns, sfn, logs
):
    """GIVEN a failed file of an `on_failure: continue` tenant (a notification and a hand-off to
    make) WHEN one step of its close is throttled THEN that invocation fails, the workflow's
    retry finishes the close and the status-change backstop after it changes nothing: one
    history item, one notification, one hand-off."""
    cfg = config(machine, ledger_table, queue_url, topic, on_failure="continue")
    waiting_message(sqs, queue_url, ledger)
    clients = {"ddb": ddb, "sqs": Faulty(sqs, "change_message_visibility", times=0), "sns": sns}
    clients[service] = Faulty(clients[service] if service != "sqs" else sqs, method)
    handoffs = clients["sqs"]

    with pytest.raises(ClientError):
        faulty_closer(cfg, clients["ddb"], clients["sqs"], clients["sns"], sfn).handle(
            close_event(RECORD_FAILURE)
        )
    retry = faulty_closer(cfg, clients["ddb"], clients["sqs"], clients["sns"], sfn).handle(
        close_event(RECORD_FAILURE)
    )
    backstop = faulty_closer(cfg, clients["ddb"], clients["sqs"], clients["sns"], sfn).handle_event(BACKSTOP)

    assert retry["handed_off"] is True and backstop == {**backstop, "recorded": False, "handed_off": False}
    assert [(e["execution"], e["status"]) for e in ledger.history()] == [("evt-a", FAILED)]
    (notice,) = published(sqs, topic)
    assert "Error:     SinkRejectedError: chunk 3 record 4 (file record 304): HTTP 400" in notice["Message"]
    assert len(handoffs.passed) == 1 and visible(sqs, queue_url) == 1


def test_a_halted_tenant_is_notified_by_the_backstop_when_every_try_of_the_workflow_failed(
    machine, ledger_table, queue_url, topic, ledger, ddb, sqs, sns, sfn
):
    """GIVEN RecordFailure recorded the close and halted the tenant, but SNS throttled the publish
    on its first try and on each of the workflow's 3 retries WHEN the status-change backstop comes
    THEN it publishes the notification, once, with what RecordFailure recorded."""
    cfg = config(machine, ledger_table, queue_url, topic)
    sns_throttled = Faulty(sns, "publish", times=4)
    for _ in range(4):
        with pytest.raises(ClientError):
            faulty_closer(cfg, ddb, sqs, sns_throttled, sfn).handle(close_event(RECORD_FAILURE))

    faulty_closer(cfg, ddb, sqs, sns_throttled, sfn).handle_event(
        {
            "detail": {
                "name": "evt-a",
                "status": "FAILED",
                "error": "States.TaskFailed",
                "cause": "less precise",
            }
        }
    )
    faulty_closer(cfg, ddb, sqs, sns_throttled, sfn).handle_event(BACKSTOP)  # EventBridge delivers twice

    (notice,) = published(sqs, topic)
    assert "is halted" in notice["Message"] and "python -m ops resume acme" in notice["Message"]
    assert (
        "Error:     SinkRejectedError: chunk 3 record 4" in notice["Message"]
    )  # the ledger's, not the backstop's
    (entry,) = ledger.history()
    assert (entry["status"], entry["error"]) == (FAILED, "SinkRejectedError")


def test_a_late_retry_finishes_the_report_after_the_next_file_started(
    machine, ledger_table, queue_url, topic, ledger, ddb, sqs, sns, sfn
):
    """GIVEN a continue tenant whose failure notification was throttled, and the next file
    claimed (the visibility timeout handed off) before any retry came WHEN the retry comes THEN
    it still finds the failed attempt in the history and notifies about it, once."""
    cfg = config(machine, ledger_table, queue_url, topic, on_failure="continue")
    with pytest.raises(ClientError):
        faulty_closer(cfg, ddb, sqs, Faulty(sns, "publish"), sfn).handle(close_event(RECORD_FAILURE))
    nxt = FileRef(
        tenant=TENANT,
        event_id="evt-b",
        bucket="landing",
        key="acme/g.csv",
        version_id="v1",
        size=1,
        etag=None,
        event_time="",
    )
    ledger.claim(ledger.read(), nxt, "evt-b", NOW + 30)

    faulty_closer(cfg, ddb, sqs, sns, sfn).handle(close_event(RECORD_FAILURE))
    faulty_closer(cfg, ddb, sqs, sns, sfn).handle_event(BACKSTOP)

    (notice,) = published(sqs, topic)
    assert (
        "s3://landing/acme/f.csv (version v7)" in notice["Message"]
        and "Execution: evt-a" in notice["Message"]
    )
    assert ledger.read().execution == "evt-b" and ledger.read().running


def test_a_notification_whose_mark_was_not_written_goes_out_again_rather_than_never(
    machine, ledger_table, queue_url, topic, ledger, ddb, sqs, sns, sfn, logs
):
    """The chosen side of a publish that cannot be conditional: the mark is written after the
    publish, so losing it sends the notification a second time (here by the backstop); marking
    first would lose the notification for good when the publish then fails."""
    cfg = config(machine, ledger_table, queue_url, topic)
    faulty_closer(cfg, Faulty(ddb, "update_item"), sqs, sns, sfn).handle(close_event(RECORD_FAILURE))
    faulty_closer(cfg, ddb, sqs, sns, sfn).handle_event(BACKSTOP)
    faulty_closer(cfg, ddb, sqs, sns, sfn).handle_event(BACKSTOP)

    assert len(published(sqs, topic)) == 2
    assert "notification sent but not marked" in logs.at(logging.WARNING)[0]
    assert len(ledger.history()) == 1


@pytest.mark.parametrize(
    ("error", "cause", "expected"),
    [
        # the file's own execution: only Split runs in it
        ("Lambda.Unknown", "RequestId: r-1 Error: Task timed out", "split"),
        (
            "States.TaskFailed",
            json.dumps({"errorType": "Runtime.OutOfMemory", "errorMessage": "Runtime exited"}),
            "split",
        ),
        # a page or section execution: only the register function runs in it
        (
            "States.TaskFailed",
            json.dumps(
                {
                    "executionArn": "arn:x:p3",
                    "status": "FAILED",
                    "error": "Sandbox.Timedout",
                    "cause": "timed out",
                }
            ),
            "register",
        ),
        # not a crash
        ("SinkRejectedError", LAMBDA_CAUSE, None),
        (
            "States.TaskFailed",
            json.dumps(
                {
                    "executionArn": "arn:x:p3",
                    "status": "FAILED",
                    "error": "SinkRejectedError",
                    "cause": "HTTP 400",
                }
            ),
            None,
        ),
    ],
)
def test_crashed_function_names_the_function_whose_crash_failed_the_file(error, cause, expected):
    assert crashed_function(error, cause) == expected


def test_the_rules_event_is_recorded_with_its_error_and_the_notification_reads_in_full(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn
):
    """GIVEN the backstop rule's status-change event, as EventBridge sends it (its state
    machine's ARN, qualified by the alias the execution started through; its error and cause)
    WHEN the closer handles it THEN the close is recorded with that error, and the one
    notification says all an operator needs, in this order."""
    runner = closer_of(config(machine, ledger_table, queue_url, topic), ledger, sqs, sns, sfn)

    result = runner.handle_event(
        {
            "detail": {
                "executionArn": execution_arn(machine, "evt-a"),
                "stateMachineArn": f"{machine}:live",
                "name": "evt-a",
                "status": "TIMED_OUT",
                "error": "States.Timeout",
                "cause": "The execution ran longer than its time limit",
            }
        }
    )

    assert result == {"execution_name": "evt-a", "recorded": True, "halted": True, "handed_off": False}
    position = ledger.read()
    assert (position.closed_as, position.error, position.cause) == (
        "TIMED_OUT",
        "States.Timeout",
        "The execution ran longer than its time limit",
    )
    (notice,) = published(sqs, topic)
    assert notice["Subject"] == "[ordered-ingest] acme: file timed out (States.Timeout)"
    assert notice["Message"] == "\n".join(
        [
            "A file of tenant acme timed out.",
            "Tenant acme is halted (on_failure: halt): its later files wait in the queue, in order.",
            "",
            "File:      s3://landing/acme/f.csv (version v7)",
            "Stopped:   chunk 3 of 10, record 304 of 1,000 (records 0-303 reached the core system)",
            "Error:     States.Timeout: The execution ran longer than its time limit",
            "Execution: evt-a",
            "",
            "Hint:      find out what was slow (the register function's log group); if files this size take longer, "
            "raise file_time_limit_seconds first; then resume",
            "",
            "Continue this file where it stopped:",
            "  python -m ops resume acme",
            "or give it up and start the next file:",
            '  python -m ops skip acme --reason "..."',
            "",
            "Runbook: docs/operations.md#workflow-failed",
        ]
    )


def test_with_continue_the_notification_points_to_the_status(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn
):
    cfg = config(machine, ledger_table, queue_url, topic, on_failure="continue")

    close(
        cfg,
        ledger,
        sqs,
        sns,
        sfn,
        {"execution_name": "evt-a", "status": "ABORTED", "error": None, "cause": None},
    )

    (notice,) = published(sqs, topic)
    assert notice["Subject"] == "[ordered-ingest] acme: file was stopped (Error)"
    assert notice["Message"].split("\n")[:2] == [
        "A file of tenant acme was stopped.",
        "Tenant acme goes on with its next file (on_failure: continue).",
    ]
    assert (
        "\nError:     Error\nExecution: evt-a\n\nCheck the tenant with:\n  python -m ops status acme\n\n"
        in notice["Message"]
    )


def test_an_event_of_another_state_machine_is_ignored_without_a_call(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn, ddb
):
    """A page's status change that reached the tenant's closer anyway: nothing is read or written."""
    calls: list[str] = []
    for client in (ddb, sqs, sns, sfn):
        client.meta.events.register("before-call", lambda model, **_: calls.append(model.name))
    runner = closer_of(config(machine, ledger_table, queue_url, topic), ledger, sqs, sns, sfn)
    page_machine = machine.replace("file-ingest-workflow", "file-ingest-page")

    result = runner.handle_event(
        {
            "detail": {
                "executionArn": execution_arn(page_machine, "evt-a-p0"),
                "stateMachineArn": page_machine,
                "name": "evt-a-p0",
                "status": "FAILED",
            }
        }
    )

    assert result == {"execution_name": "evt-a-p0", "recorded": False, "halted": None, "handed_off": False}
    assert calls == []


def test_the_execution_is_named_by_its_arn_when_the_event_has_no_name():
    assert (
        close_event(
            {
                "detail": {
                    "executionArn": "arn:aws:states:us-east-1:1:execution:acme-wf:evt-9",
                    "status": "FAILED",
                }
            }
        )["execution_name"]
        == "evt-9"
    )


def test_a_long_error_type_is_cut_to_the_100_characters_sns_takes_as_a_subject(
    machine, ledger_table, queue_url, topic, ledger, sqs, sns, sfn
):
    """SNS refuses a subject over 100 characters: the notification would never go out."""
    error = "VeryLong" + "E" * 120
    close(
        config(machine, ledger_table, queue_url, topic),
        ledger,
        sqs,
        sns,
        sfn,
        {"execution_name": "evt-a", "status": "FAILED", "error": error, "cause": "c"},
    )

    (notice,) = published(sqs, topic)
    assert notice["Subject"] == f"[ordered-ingest] acme: file failed ({error})"[:100]
    assert f"Error:     {error}: c" in notice["Message"]
