"""The controller's gate on moto: one file at a time per tenant, decided from the ledger.

docs/architecture.md ("Gate") has the rules; each test below is one of them.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from typing import Any

import pytest
from moto.stepfunctions.models import StepFunctionBackend

from lambdas import controller
from lambdas.contract import (
    MAX_FILE_EXECUTION_NAME,
    ControllerEnv,
    FileRef,
    environment,
    execution_arn,
    execution_name,
)
from lambdas.controller import process_message
from lambdas.ledger import FAILED, RUNNING, Ledger
from lambdas.runtime import BoundLogger, get_logger
from tests.handlers.support import TENANT, Context, VisibilityRecorder, emf_records

NOW = 1_700_000_100.5
WORK_BUCKET = "work"
DEFINITION = json.dumps({"StartAt": "Hold", "States": {"Hold": {"Type": "Wait", "Seconds": 60, "End": True}}})


def s3_event(event_id: str, *, key: str = "acme/f.csv", version_id: str | None = None) -> dict[str, Any]:
    # Each event a new upload (its own version) unless told: the ledger refuses a second
    # event for a version it made current (its version marker).
    version_id = version_id or f"v-{event_id}"
    return {
        "version": "0",
        "id": event_id,
        "detail-type": "Object Created",
        "source": "aws.s3",
        "time": "2024-01-01T00:00:00Z",
        "detail": {
            "bucket": {"name": "landing"},
            "object": {"key": key, "size": 12, "etag": "abc", "version-id": version_id},
        },
    }


class Queue:
    """The tenant's FIFO queue on moto: messages are really sent and received, so receipt
    handles and visibility behave as the controller relies on."""

    def __init__(self, sqs: Any, url: str) -> None:
        self.sqs, self.url = sqs, url

    def record(
        self, event_id: str, *, sent_ms: int = 1_700_000_000_000, body: str | None = None, **kw: Any
    ) -> dict[str, Any]:
        """Send the event, receive it, and return the record Lambda would pass. Each message
        has a group of its own, so a test can hold several in flight at once."""
        self.sqs.send_message(
            QueueUrl=self.url,
            MessageBody=body if body is not None else json.dumps(s3_event(event_id, **kw)),
            MessageGroupId=uuid.uuid4().hex,
            MessageDeduplicationId=uuid.uuid4().hex,
        )
        (message,) = self.sqs.receive_message(QueueUrl=self.url, MaxNumberOfMessages=1)["Messages"]
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": {"SentTimestamp": str(sent_ms), "MessageGroupId": TENANT},
        }

    def delete(self, record: dict[str, Any]) -> None:
        self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=record["receiptHandle"])

    def visible(self) -> int:
        attributes = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=["All"])["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"])


@pytest.fixture
def queue(sqs: Any, queue_url: str) -> Queue:
    return Queue(sqs, queue_url)


@pytest.fixture
def config(sfn: Any, ledger_table: str, queue_url: str) -> ControllerEnv:
    arn = sfn.create_state_machine(
        name=f"{TENANT}-file-ingest-workflow",
        definition=DEFINITION,
        roleArn="arn:aws:iam::123456789012:role/workflow",
    )["stateMachineArn"]
    return ControllerEnv(
        tenant_id=TENANT,
        state_machine_arn=arn,
        ledger_table_name=ledger_table,
        queue_url=queue_url,
        metric_namespace="FileIngest",
        on_failure="halt",
        waiting_visibility_seconds=240,
        work_bucket=WORK_BUCKET,
        landing_bucket="landing",
        landing_prefix="acme/",
    )


@pytest.fixture
def ledger(ddb: Any, config: ControllerEnv) -> Ledger:
    return Ledger(ddb, config.ledger_table_name, TENANT)


def run(
    record: dict[str, Any],
    config: ControllerEnv,
    sfn: Any,
    ddb: Any,
    sqs: Any,
    now: float = NOW,
    sleeps: list[float] | None = None,
) -> dict[str, Any]:
    log = BoundLogger(get_logger("controller"), {"tenant": config.tenant_id})
    slept = sleeps if sleeps is not None else []
    return process_message(
        record, config=config, sfn=sfn, ddb=ddb, sqs=sqs, now=lambda: now, log=log, sleep=slept.append
    )


def executions(sfn: Any, config: ControllerEnv) -> dict[str, str]:
    """Execution name -> status."""
    found = sfn.list_executions(stateMachineArn=config.state_machine_arn)["executions"]
    return {e["name"]: e["status"] for e in found}


def set_status(sfn: Any, config: ControllerEnv, name: str, status: str) -> None:
    """Close an execution in moto's backend (moto runs no definition here)."""
    from moto.stepfunctions.models import stepfunctions_backends

    backend = stepfunctions_backends["123456789012"]["us-east-1"]
    backend.describe_execution(execution_arn(config.state_machine_arn, name)).status = status


def forget(sfn: Any, config: ControllerEnv, name: str) -> None:
    """Step Functions forgets a closed execution (90 days after it closed, or its stack was re-created)."""
    from moto.stepfunctions.models import stepfunctions_backends

    backend = stepfunctions_backends["123456789012"]["us-east-1"]
    machine = backend.describe_state_machine(config.state_machine_arn)
    machine.executions = [e for e in machine.executions if e.name != name]


def file_ref(event_id: str) -> FileRef:
    return FileRef(
        tenant=TENANT,
        event_id=event_id,
        bucket="landing",
        key="acme/x.csv",
        version_id=f"v-{event_id}",
        size=1,
        etag=None,
        event_time="",
    )


# --- starting ------------------------------------------------------------------------------------


def test_free_gate_claims_the_ledger_and_starts_the_execution_named_by_event_id(
    config, sfn, ddb, sqs, queue, ledger
):
    """GIVEN an empty ledger WHEN a message arrives
    THEN the ledger makes its file current and its execution runs with the file and start record 0."""
    result = run(queue.record("evt-a", version_id="ver-1"), config, sfn, ddb, sqs)

    assert result == {"batchItemFailures": [], "outcome": "started", "execution_name": "evt-a"}
    described = sfn.describe_execution(executionArn=execution_arn(config.state_machine_arn, "evt-a"))
    assert described["status"] == "RUNNING"
    assert json.loads(described["input"]) == {
        "tenant": TENANT,
        "event_id": "evt-a",
        "bucket": "landing",
        "key": "acme/f.csv",
        "version_id": "ver-1",
        "size": 12,
        "etag": "abc",
        "event_time": "2024-01-01T00:00:00Z",
        "start_record": 0,
    }
    position = ledger.read()
    assert (position.execution, position.file_id, position.status, position.seq) == (
        "evt-a",
        "evt-a",
        RUNNING,
        1,
    )


def test_second_message_waits_while_the_first_runs_even_when_list_executions_sees_nothing(
    config, sfn, ddb, sqs, queue, ledger, monkeypatch
):
    """GIVEN A's execution RUNNING and ListExecutions (eventually consistent) returning nothing
    WHEN B arrives THEN B is a reported item failure, invisible for the fallback time, noted in the
    ledger for the hand-off, and nothing starts."""
    first = queue.record("evt-a")
    run(first, config, sfn, ddb, sqs)
    queue.delete(first)

    with monkeypatch.context() as patch:
        patch.setattr(StepFunctionBackend, "list_executions", lambda self, *a, **k: ([], None))
        second = queue.record("evt-b", key="acme/g.csv")
        result = run(second, config, sfn, ddb, sqs)

    assert result == {
        "batchItemFailures": [{"itemIdentifier": second["messageId"]}],
        "outcome": "waiting",
        "execution_name": "evt-a",
    }
    assert executions(sfn, config) == {"evt-a": "RUNNING"}
    position = ledger.read()
    assert (position.waiting_message_id, position.waiting_receipt) == (
        second["messageId"],
        second["receiptHandle"],
    )
    assert queue.visible() == 0  # its visibility was set to 240 s, not left at the queue's 30 s
    sqs.change_message_visibility(
        QueueUrl=config.queue_url, ReceiptHandle=second["receiptHandle"], VisibilityTimeout=0
    )
    assert queue.visible() == 1  # what the close's hand-off does


def test_the_next_file_starts_once_the_close_is_recorded_and_step_functions_closed_it(
    config, sfn, ddb, sqs, queue, ledger
):
    run(queue.record("evt-a"), config, sfn, ddb, sqs)
    ledger.record_close("evt-a", "SUCCEEDED", halt_on_failure=True, now=NOW + 1)
    set_status(sfn, config, "evt-a", "SUCCEEDED")

    result = run(queue.record("evt-b", key="acme/g.csv"), config, sfn, ddb, sqs, now=NOW + 2)

    assert result["outcome"] == "started"
    assert executions(sfn, config) == {"evt-a": "SUCCEEDED", "evt-b": "RUNNING"}


def test_a_recorded_close_waits_for_step_functions_to_close_the_execution(
    config, sfn, ddb, sqs, queue, ledger
):
    """GIVEN the workflow's last state recorded the close while the execution is still RUNNING
    WHEN the next message arrives THEN it polls briefly, then waits a short time (never overlaps)."""
    run(queue.record("evt-a"), config, sfn, ddb, sqs)
    ledger.record_close("evt-a", "SUCCEEDED", halt_on_failure=True, now=NOW + 1)
    sleeps: list[float] = []
    recorder = VisibilityRecorder(sqs)

    record = queue.record("evt-b", key="acme/g.csv")
    result = run(record, config, sfn, ddb, recorder, now=NOW + 2, sleeps=sleeps)

    assert result["outcome"] == "waiting"
    assert sleeps == [controller.CLOSING_POLL_SECONDS] * (controller.CLOSING_POLLS - 1)
    assert executions(sfn, config) == {"evt-a": "RUNNING"}
    assert recorder.timeouts == [controller.CLOSING_VISIBILITY_SECONDS]  # back in 2 s, not 240
    assert ledger.read().waiting_message_id == record["messageId"]


@pytest.mark.parametrize(
    ("closed_ago", "outcome"),
    [(controller.RECENT_CLOSE_SECONDS, "waiting"), (controller.RECENT_CLOSE_SECONDS + 1, "started")],
    ids=["an-hour-ago", "longer-ago"],
)
def test_a_close_older_than_an_hour_is_not_checked_against_step_functions(
    config, sfn, ddb, sqs, queue, ledger, closed_ago, outcome
):
    """GIVEN A's close recorded, its execution still RUNNING (stuck in its last state)
    WHEN B arrives up to an hour after the close THEN B waits for Step Functions to close A;
    later than that B starts: a recorded close is not waited for forever."""
    run(queue.record("evt-a"), config, sfn, ddb, sqs)
    ledger.record_close("evt-a", "SUCCEEDED", halt_on_failure=True, now=NOW - closed_ago)

    assert run(queue.record("evt-b", key="acme/g.csv"), config, sfn, ddb, sqs)["outcome"] == outcome


def test_an_execution_pending_redrive_after_its_close_counts_as_closing(config, sfn, ddb, sqs, queue, ledger):
    run(queue.record("evt-a"), config, sfn, ddb, sqs)
    ledger.record_close("evt-a", "FAILED", halt_on_failure=False, now=NOW + 1)
    set_status(sfn, config, "evt-a", "PENDING_REDRIVE")

    assert (
        run(queue.record("evt-b", key="acme/g.csv"), config, sfn, ddb, sqs, now=NOW + 2)["outcome"]
        == "waiting"
    )
    assert "evt-b" not in executions(sfn, config)


@pytest.mark.parametrize(
    ("remaining", "sleeps_expected"),
    [
        (2 * controller.CLOSING_POLL_SECONDS + 0.5, 0),  # a poll and a sleep would pass the margin
        (2 * controller.CLOSING_POLL_SECONDS + 0.55, controller.CLOSING_POLLS - 1),
        (0.5, 0),
    ],
    ids=["at-the-margin", "just-above", "below"],
)
def test_the_closing_polls_never_sleep_into_the_invocations_deadline(
    config, sfn, ddb, sqs, queue, ledger, remaining, sleeps_expected
):
    """GIVEN the file ahead closing WHEN the controller has only `remaining` seconds left
    THEN it sleeps between polls only while a poll, a sleep and 0.5 s for its writes still fit."""
    run(queue.record("evt-a"), config, sfn, ddb, sqs)
    ledger.record_close("evt-a", "SUCCEEDED", halt_on_failure=True, now=NOW + 1)
    sleeps: list[float] = []

    result = process_message(
        queue.record("evt-b", key="acme/g.csv"),
        config=config,
        sfn=sfn,
        ddb=ddb,
        sqs=sqs,
        now=lambda: NOW + 2,
        log=BoundLogger(get_logger("controller"), {}),
        sleep=sleeps.append,
        remaining_seconds=lambda: remaining,
    )

    assert result["outcome"] == "waiting"
    assert sleeps == [controller.CLOSING_POLL_SECONDS] * sleeps_expected


# --- redeliveries and crashes ---------------------------------------------------------------------


def test_redelivery_after_a_crash_after_start_starts_nothing_new(config, sfn, ddb, sqs, queue, logs):
    record = queue.record("evt-a")
    run(record, config, sfn, ddb, sqs)

    result = run(record, config, sfn, ddb, sqs, now=NOW + 30)

    assert result == {"batchItemFailures": [], "outcome": "running", "execution_name": "evt-a"}
    assert executions(sfn, config) == {"evt-a": "RUNNING"}  # StartExecution is idempotent
    assert logs.errors() == []


def test_an_event_id_step_functions_would_refuse_as_a_name_starts_one_execution_under_a_hashed_name(
    config, sfn, ddb, sqs, queue, ledger
):
    """GIVEN an event id too long for an execution name, with characters Step Functions refuses
    WHEN its message is delivered twice THEN one execution runs, under the id's hashed name
    (which leaves room for the page suffix), and the ledger claims the file by its event id."""
    event_id = "replayed/by hand#" + "x" * 100
    record = queue.record(event_id)

    first = run(record, config, sfn, ddb, sqs)
    again = run(record, config, sfn, ddb, sqs, now=NOW + 30)

    name = execution_name(event_id)
    assert first == {"batchItemFailures": [], "outcome": "started", "execution_name": name}
    assert again["outcome"] == "running" and executions(sfn, config) == {name: "RUNNING"}
    assert len(name) <= MAX_FILE_EXECUTION_NAME and name.startswith("replayedbyhand")
    position = ledger.read()
    assert (position.execution, position.file_id) == (name, event_id)


def test_redelivery_after_a_crash_between_claim_and_start_starts_once(config, sfn, ddb, sqs, queue, ledger):
    class FailingStart:
        def __getattr__(self, name: str) -> Any:
            return getattr(sfn, name)

        def start_execution(self, **kwargs: Any) -> None:
            raise RuntimeError("crash before StartExecution")

    record = queue.record("evt-a")
    with pytest.raises(RuntimeError):
        run(record, config, FailingStart(), ddb, sqs)
    assert ledger.read().execution == "evt-a" and executions(sfn, config) == {}

    assert run(record, config, sfn, ddb, sqs, now=NOW + 30)["outcome"] == "running"
    assert executions(sfn, config) == {"evt-a": "RUNNING"}


def test_a_duplicate_event_of_a_file_done_long_ago_is_let_go(config, sfn, ddb, sqs, queue, ledger):
    """GIVEN file A done and file B done after it WHEN A's event arrives again (a late duplicate)
    THEN nothing starts and the message goes (the ledger remembers A's event)."""
    for name in ("evt-a", "evt-b"):
        run(queue.record(name), config, sfn, ddb, sqs)
        ledger.record_close(name, "SUCCEEDED", halt_on_failure=True, now=NOW - 7200)
        set_status(sfn, config, name, "SUCCEEDED")
    forget(sfn, config, "evt-a")

    result = run(queue.record("evt-a", sent_ms=2), config, sfn, ddb, sqs)

    assert result["outcome"] == "done" and result["batchItemFailures"] == []
    assert executions(sfn, config) == {"evt-b": "SUCCEEDED"}
    assert ledger.read().execution == "evt-b"


def test_a_replayed_event_of_a_processed_version_is_let_go(config, sfn, ddb, sqs, queue, ledger):
    """GIVEN file A done WHEN an event with a new id announces A's version again (ops reconcile
    --replay, a DLQ replay, a second delivery across a bus-to-bus hop) THEN nothing starts and
    the message goes (the version marker)."""
    run(queue.record("evt-a"), config, sfn, ddb, sqs)
    ledger.record_close("evt-a", "SUCCEEDED", halt_on_failure=True, now=NOW)
    set_status(sfn, config, "evt-a", "SUCCEEDED")

    result = run(queue.record("reconcile-1", version_id="v-evt-a"), config, sfn, ddb, sqs)

    assert result["outcome"] == "done" and result["batchItemFailures"] == []
    assert executions(sfn, config) == {"evt-a": "SUCCEEDED"}
    assert ledger.read().execution == "evt-a"


def test_the_same_object_version_under_two_event_ids_in_the_queue_at_once_runs_once(
    config, sfn, ddb, sqs, queue, ledger
):
    """GIVEN one upload delivered twice with two event ids (EventBridge delivers at least once,
    and an event forwarded from bus to bus may get a new id), both in the queue WHEN the first
    starts and the second arrives while it runs, then again after its close THEN the second
    waits, then is let go: one execution, one claim; the version marker stops it, not the
    event id (FIFO content-based deduplication does not either: the bodies differ)."""
    first = queue.record("evt-a", version_id="ver-1")
    second = queue.record("evt-a-forwarded", version_id="ver-1")
    assert json.loads(first["body"])["detail"] == json.loads(second["body"])["detail"]

    assert run(first, config, sfn, ddb, sqs)["outcome"] == "started"
    assert run(second, config, sfn, ddb, sqs)["outcome"] == "waiting"
    closed = ledger.record_close("evt-a", "SUCCEEDED", halt_on_failure=True, now=NOW + 1)
    set_status(sfn, config, "evt-a", "SUCCEEDED")
    result = run(second, config, sfn, ddb, sqs, now=NOW + 2)

    assert result["outcome"] == "done" and result["batchItemFailures"] == []
    assert executions(sfn, config) == {"evt-a": "SUCCEEDED"}
    position = ledger.read()
    assert (position.seq, position.execution, position.status) == (closed.seq, "evt-a", "SUCCEEDED")


def test_a_redelivered_message_of_the_current_finished_file_is_let_go(config, sfn, ddb, sqs, queue, ledger):
    record = queue.record("evt-a")
    run(record, config, sfn, ddb, sqs)
    ledger.record_close("evt-a", "SUCCEEDED", halt_on_failure=True, now=NOW)
    assert run(record, config, sfn, ddb, sqs) == {
        "batchItemFailures": [],
        "outcome": "done",
        "execution_name": "evt-a",
    }


class RacingLedger:
    """DynamoDB client whose ledger is claimed by another writer right after the controller read it."""

    def __init__(self, ddb: Any, config: ControllerEnv) -> None:
        self._ddb, self._config, self._raced = ddb, config, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ddb, name)

    def get_item(self, **kwargs: Any) -> dict[str, Any]:
        observed = self._ddb.get_item(**kwargs)
        if not self._raced:
            self._raced = True
            ledger = Ledger(self._ddb, self._config.ledger_table_name, TENANT)
            ledger.claim(ledger.read(), file_ref("evt-sneaky"), "evt-sneaky", NOW)
        return observed


def test_a_ledger_changed_between_read_and_claim_is_decided_again(config, sfn, ddb, sqs, queue, ledger):
    """GIVEN another writer claims the ledger between the controller's read and its claim
    WHEN the claim's condition fails THEN it decides again on the new position: it waits."""
    result = run(queue.record("evt-b"), config, sfn, RacingLedger(ddb, config), sqs)

    assert result["outcome"] == "waiting"
    assert "evt-b" not in executions(sfn, config)
    assert ledger.read().execution == "evt-sneaky"


class EverChangingLedger:
    """DynamoDB client whose ledger position changes (its `seq` moves on) after every read."""

    def __init__(self, ddb: Any, config: ControllerEnv) -> None:
        self._ddb, self._table = ddb, config.ledger_table_name

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ddb, name)

    def get_item(self, **kwargs: Any) -> dict[str, Any]:
        observed = self._ddb.get_item(**kwargs)
        self._ddb.update_item(
            TableName=self._table,
            Key=kwargs["Key"],
            UpdateExpression="SET seq = seq + :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )
        return observed


def test_a_ledger_that_keeps_changing_leaves_the_message_waiting_briefly(
    config, sfn, ddb, sqs, queue, ledger
):
    """GIVEN A running and a ledger that changes after every read WHEN B arrives THEN after
    MAX_DECISIONS tries B waits, back in CLOSING_VISIBILITY_SECONDS, and nothing starts."""
    run(queue.record("evt-a"), config, sfn, ddb, sqs)
    recorder = VisibilityRecorder(sqs)
    record = queue.record("evt-b", key="acme/g.csv")

    result = run(record, config, sfn, EverChangingLedger(ddb, config), recorder)

    assert result == {
        "batchItemFailures": [{"itemIdentifier": record["messageId"]}],
        "outcome": "waiting",
        "execution_name": None,
    }
    assert len(recorder.timeouts) == controller.MAX_DECISIONS + 1
    assert recorder.timeouts[-1] == controller.CLOSING_VISIBILITY_SECONDS
    assert executions(sfn, config) == {"evt-a": "RUNNING"}


# --- failures, halt, and the exits that keep a tenant from wedging ----------------------------------


def test_a_halted_tenant_keeps_its_next_file_waiting(config, sfn, ddb, sqs, queue, ledger, logs):
    """GIVEN A failed and halted the tenant WHEN B arrives THEN B waits the full waiting time,
    noted in the ledger with its send time (`ops resume` makes it visible at once)."""
    run(queue.record("evt-a"), config, sfn, ddb, sqs)
    ledger.record_close("evt-a", "FAILED", halt_on_failure=True, now=NOW - 7200)
    recorder = VisibilityRecorder(sqs)
    record = queue.record("evt-b", key="acme/g.csv", sent_ms=1_700_000_000_250)

    result = run(record, config, sfn, ddb, recorder)

    assert result["outcome"] == "waiting"
    assert recorder.timeouts == [config.waiting_visibility_seconds]
    position = ledger.read()
    assert (position.waiting_message_id, position.waiting_since, position.waiting_sent_at) == (
        record["messageId"],
        NOW,
        1_700_000_000.25,
    )
    assert "evt-b" not in executions(sfn, config)
    assert any("halted" in getattr(r, "reason", "") and "ops resume" in r.reason for r in logs.records())
    assert logs.errors() == []


@pytest.mark.parametrize(("on_failure", "outcome"), [("halt", "waiting"), ("continue", "started")])
def test_a_close_that_was_never_recorded_is_recorded_by_the_controller(
    config, sfn, ddb, sqs, queue, ledger, on_failure, outcome
):
    """GIVEN the ledger says A runs, but Step Functions closed it (an abort whose event was lost)
    WHEN B arrives THEN the controller records A's close (halting per on_failure) and decides on that."""
    config = ControllerEnv(**{**config.__dict__, "on_failure": on_failure})
    run(queue.record("evt-a"), config, sfn, ddb, sqs)
    sfn.stop_execution(executionArn=execution_arn(config.state_machine_arn, "evt-a"))

    result = run(queue.record("evt-b", key="acme/g.csv"), config, sfn, ddb, sqs, now=NOW + 7200)

    assert result["outcome"] == outcome
    position = ledger.read()
    history = ledger.history()
    assert history[0]["execution"] == "evt-a" and history[0]["status"] == FAILED
    assert history[0]["closed_as"] == "ABORTED"
    assert (history[0]["error"], history[0]["cause"]) == (
        "ClosedUnrecorded",
        "Step Functions reports ABORTED; found by the controller",
    )
    assert position.halted is (on_failure == "halt")


def test_an_execution_step_functions_forgot_does_not_wedge_the_tenant(config, sfn, ddb, sqs, queue, ledger):
    """GIVEN the last file closed 100 days ago and Step Functions has forgotten its execution
    WHEN the tenant's next file arrives THEN it starts: the gate decides from the ledger."""
    run(queue.record("evt-a"), config, sfn, ddb, sqs, now=NOW - 100 * 86400)
    ledger.record_close("evt-a", "SUCCEEDED", halt_on_failure=True, now=NOW - 100 * 86400)
    set_status(sfn, config, "evt-a", "SUCCEEDED")
    forget(sfn, config, "evt-a")

    assert run(queue.record("evt-b", key="acme/g.csv"), config, sfn, ddb, sqs)["outcome"] == "started"


def test_a_recently_closed_execution_already_forgotten_does_not_block(config, sfn, ddb, sqs, queue, ledger):
    """The stack was re-created right after a close: the execution is gone, the ledger has the close."""
    run(queue.record("evt-a"), config, sfn, ddb, sqs)
    ledger.record_close("evt-a", "SUCCEEDED", halt_on_failure=True, now=NOW)
    forget(sfn, config, "evt-a")

    assert (
        run(queue.record("evt-b", key="acme/g.csv"), config, sfn, ddb, sqs, now=NOW + 1)["outcome"]
        == "started"
    )


@pytest.mark.parametrize(
    ("age", "restarted", "visible_in"),
    [
        (10, False, controller.CLOSING_VISIBILITY_SECONDS),
        (controller.GATE_GRACE_SECONDS, True, 240),
        (3600, True, 240),
    ],
    ids=["just-started", "grace-over", "lost"],
)
def test_a_running_file_unknown_to_step_functions_is_started_again_from_the_ledger_after_a_grace(
    config, sfn, ddb, sqs, queue, ledger, age, restarted, visible_in
):
    """GIVEN the ledger says A runs from record 7 on, but Step Functions does not know its execution
    (the tenant's stack was re-created mid-file) WHEN B arrives
    THEN within the grace period B waits a short time (A's start may not be visible yet); after
    it, A's execution is started again at record 7 and B waits for it. B is noted for the hand-off."""
    claimed = ledger.claim(ledger.read(), file_ref("evt-a"), "evt-a", NOW - age)
    ledger.record_progress("evt-a", 7)
    recorder = VisibilityRecorder(sqs)
    record = queue.record("evt-b", key="acme/g.csv")

    result = run(record, config, sfn, ddb, recorder)

    assert result["outcome"] == "waiting" and claimed.seq == 1
    assert recorder.timeouts == [visible_in]
    assert ledger.read().waiting_message_id == record["messageId"]
    if restarted:
        described = sfn.describe_execution(executionArn=execution_arn(config.state_machine_arn, "evt-a"))
        assert json.loads(described["input"])["start_record"] == 7
    else:
        assert executions(sfn, config) == {}


def test_a_timed_out_execution_whose_close_was_lost_halts_the_tenant(config, sfn, ddb, sqs, queue, ledger):
    """GIVEN A's execution TIMED_OUT (the workflow's TimeoutSeconds) and neither the workflow nor the
    status rule recorded it WHEN B arrives THEN the controller records A as TIMED_OUT, the tenant is
    halted like after a failure, and B waits (it does not start)."""
    run(queue.record("evt-a"), config, sfn, ddb, sqs)
    set_status(sfn, config, "evt-a", "TIMED_OUT")

    result = run(queue.record("evt-b", key="acme/g.csv"), config, sfn, ddb, sqs)

    assert result["outcome"] == "waiting"
    position = ledger.read()
    assert (position.closed_as, position.status, position.halted) == ("TIMED_OUT", FAILED, True)
    assert executions(sfn, config) == {"evt-a": "TIMED_OUT"}


# --- metrics and logs ----------------------------------------------------------------------------


def test_emits_head_message_wait_metric_as_emf(config, sfn, ddb, sqs, queue, capsys):
    """GIVEN a message sent 100.25 s before now WHEN processed THEN one EMF line reports 100.25 s."""
    run(queue.record("evt-a", sent_ms=1_700_000_000_250), config, sfn, ddb, sqs, now=NOW)

    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines == [
        {
            "_aws": {
                "Timestamp": 1_700_000_100_500,
                "CloudWatchMetrics": [
                    {
                        "Namespace": "FileIngest",
                        "Dimensions": [["Tenant"]],
                        "Metrics": [{"Name": "HeadMessageWaitSeconds", "Unit": "Seconds"}],
                    }
                ],
            },
            "Tenant": TENANT,
            "HeadMessageWaitSeconds": 100.25,
        }
    ]


def test_a_message_handled_as_it_is_sent_has_waited_nothing(config, sfn, ddb, sqs, queue, capsys):
    run(queue.record("evt-a", sent_ms=int(NOW * 1000)), config, sfn, ddb, sqs, now=NOW)

    assert head_waits(capsys) == [0.0]


def head_waits(capsys: pytest.CaptureFixture[str]) -> list[float]:
    """The HeadMessageWaitSeconds values the controller printed since the last call."""
    records = emf_records(capsys.readouterr().out, "controller")
    return [record["HeadMessageWaitSeconds"] for record in records if "HeadMessageWaitSeconds" in record]


def test_head_wait_is_zero_while_a_file_of_the_tenant_runs(config, sfn, ddb, sqs, queue, capsys):
    """GIVEN A running WHEN B, sent 100 s ago, waits behind it THEN its head wait is 0: a burst
    queued behind a running file is normal, not a stall (the old metric said 100 s)."""
    run(queue.record("evt-a"), config, sfn, ddb, sqs)
    capsys.readouterr()

    result = run(queue.record("evt-b", key="acme/g.csv", sent_ms=1_700_000_000_500), config, sfn, ddb, sqs)

    assert result["outcome"] == "waiting"
    assert head_waits(capsys) == [0.0]


def test_head_wait_of_a_halted_tenant_counts_from_the_failure(config, sfn, ddb, sqs, queue, ledger, capsys):
    """GIVEN A failed (halt) at NOW+1, B sent before A started WHEN B is handled at NOW+61
    THEN B waits and its head wait is 60 s: the time since the failure, not since it was sent."""
    run(queue.record("evt-a"), config, sfn, ddb, sqs)
    ledger.record_close("evt-a", "FAILED", halt_on_failure=True, now=NOW + 1)
    set_status(sfn, config, "evt-a", "FAILED")
    capsys.readouterr()

    result = run(
        queue.record("evt-b", key="acme/g.csv", sent_ms=1_700_000_000_000),
        config,
        sfn,
        ddb,
        sqs,
        now=NOW + 61,
    )

    assert result["outcome"] == "waiting"
    assert head_waits(capsys) == [60.0]


def test_head_wait_is_zero_while_the_file_ahead_is_closing(config, sfn, ddb, sqs, queue, ledger, capsys):
    """GIVEN A's close recorded at NOW+1 but its execution still RUNNING (its last state) WHEN B is
    handled at NOW+30 THEN B waits briefly and its head wait is 0: the file ahead is still closing."""
    run(queue.record("evt-a"), config, sfn, ddb, sqs)
    ledger.record_close("evt-a", "SUCCEEDED", halt_on_failure=True, now=NOW + 1)
    capsys.readouterr()

    result = run(
        queue.record("evt-b", key="acme/g.csv", sent_ms=1_700_000_000_000),
        config,
        sfn,
        ddb,
        sqs,
        now=NOW + 30,
    )

    assert result["outcome"] == "waiting"
    assert head_waits(capsys) == [0.0]


def test_head_wait_after_a_close_counts_from_the_close(config, sfn, ddb, sqs, queue, ledger, capsys):
    """GIVEN A succeeded at NOW+1 and B was sent 100 s before WHEN B is handled at NOW+3 THEN B
    starts and its head wait is 2 s (since the hand-off), not its 100 s in the queue."""
    run(queue.record("evt-a"), config, sfn, ddb, sqs)
    ledger.record_close("evt-a", "SUCCEEDED", halt_on_failure=True, now=NOW + 1)
    set_status(sfn, config, "evt-a", "SUCCEEDED")
    capsys.readouterr()

    result = run(
        queue.record("evt-b", key="acme/g.csv", sent_ms=1_700_000_000_000), config, sfn, ddb, sqs, now=NOW + 3
    )

    assert result["outcome"] == "started"
    assert head_waits(capsys) == [2.0]


@pytest.fixture
def handler_env(config: ControllerEnv, monkeypatch: pytest.MonkeyPatch) -> ControllerEnv:
    for name, value in environment(config).items():
        monkeypatch.setenv(name, value)
    return config


def test_handler_reports_a_waiting_message_as_an_item_failure_logged_at_info(handler_env, sfn, queue, logs):
    """GIVEN A running WHEN the handler gets B THEN the invocation succeeds with B as a batch item
    failure (Lambda does not back off its polling for those), logged at INFO only."""
    controller.handler({"Records": [queue.record("evt-a")]}, Context())

    b = queue.record("evt-b")
    result = controller.handler({"Records": [b]}, Context())

    assert result["batchItemFailures"] == [{"itemIdentifier": b["messageId"]}]
    assert logs.errors() == []
    (busy,) = [r for r in logs.records() if "gate busy" in r.getMessage()]
    assert busy.levelno == logging.INFO
    assert (busy.tenant, busy.event_id, busy.key, busy.version_id) == (
        TENANT,
        "evt-b",
        "acme/f.csv",
        "v-evt-b",
    )
    assert executions(sfn, handler_env) == {"evt-a": "RUNNING"}


def test_fails_when_event_carries_more_than_one_record(handler_env, sfn, queue, logs):
    """GIVEN a batch of two records (batch size misconfigured) WHEN handled THEN ValueError, nothing starts."""
    with pytest.raises(ValueError, match="exactly one SQS record"):
        controller.handler({"Records": [queue.record("evt-a"), queue.record("evt-b")]}, Context())
    assert executions(sfn, handler_env) == {}
    assert len(logs.errors()) == 1


# --- odd keys ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event_key", "real_key"),
    [
        ("acme/red+flower.csv", "acme/red flower.csv"),
        ("acme/c%2B%2B+notes.csv", "acme/c++ notes.csv"),
        ("acme/100%25+done.csv", "acme/100% done.csv"),
        ("acme/year%3D2024/month%3D01/part-0.csv", "acme/year=2024/month=01/part-0.csv"),
        ("acme/K%C3%B6ln+%E2%82%AC+%E6%97%A5%E6%9C%AC.csv", "acme/Köln € 日本.csv"),
        ("acme/a/b/c/deep.csv", "acme/a/b/c/deep.csv"),
    ],
    ids=["space", "plus", "percent", "equals", "non-ascii", "nested-folders"],
)
def test_the_execution_input_carries_the_decoded_key(config, sfn, ddb, sqs, queue, event_key, real_key):
    """GIVEN an event whose key S3 URL-encoded WHEN the controller starts its file THEN the
    execution input names the real object key (Split would get NoSuchKey with the encoded one)."""
    run(queue.record("evt-a", key=event_key), config, sfn, ddb, sqs)

    arn = execution_arn(config.state_machine_arn, "evt-a")
    assert json.loads(sfn.describe_execution(executionArn=arn)["input"])["key"] == real_key


# --- poison messages -----------------------------------------------------------------------------


@pytest.fixture
def work_bucket(s3: Any) -> str:
    s3.create_bucket(Bucket=WORK_BUCKET)
    return WORK_BUCKET


def quarantined(s3: Any) -> list[dict[str, Any]]:
    """The stored objects under the tenant's quarantine prefix, with their keys."""
    listed = s3.list_objects_v2(Bucket=WORK_BUCKET, Prefix=f"quarantine/{TENANT}/").get("Contents", [])
    return [
        {"key": o["Key"], **json.loads(s3.get_object(Bucket=WORK_BUCKET, Key=o["Key"])["Body"].read())}
        for o in listed
    ]


def poison(event: dict[str, Any], **detail: Any) -> str:
    """An S3 event with parts of its detail replaced."""
    return json.dumps({**event, "detail": {**event["detail"], **detail}})


GOOD = s3_event("evt-x", key="acme/TOPSECRET.csv")
POISON = {
    "not-json": ("TOPSECRET,not json", "is not JSON"),
    "not-an-object": (json.dumps(["TOPSECRET"]), "not a JSON object"),
    "object-deleted": (json.dumps({**GOOD, "detail-type": "Object Deleted"}), "detail-type 'Object Created'"),
    "not-an-event": (json.dumps({"order": "TOPSECRET"}), "source must be 'aws.s3'"),
    "no-version-id": (
        poison(GOOD, object={"key": "acme/TOPSECRET.csv", "size": 1}),
        "missing or empty detail.object.version-id",
    ),
    "null-version-id": (
        poison(GOOD, object={"key": "acme/TOPSECRET.csv", "size": 1, "version-id": "null"}),
        "version-id is 'null' (versioning of the landing bucket is suspended)",
    ),
    "another-bucket": (
        poison(GOOD, bucket={"name": "TOPSECRET-bucket"}),
        "another bucket than the landing bucket landing",
    ),
    "outside-prefix": (
        poison(GOOD, object={"key": "beta/TOPSECRET.csv", "size": 1, "version-id": "v1"}),
        "outside the tenant's prefix acme/",
    ),
    "not-utf8-key": (
        poison(GOOD, object={"key": "acme/TOPSECRET%FF.csv", "size": 1, "version-id": "v1"}),
        "not a URL-encoded UTF-8 key",
    ),
    "detail-not-an-object": (
        json.dumps({**GOOD, "detail": "TOPSECRET"}),
        "missing detail.bucket or detail.object",
    ),
    "no-bucket": (
        json.dumps({**GOOD, "detail": {"object": GOOD["detail"]["object"]}}),
        "missing detail.bucket or detail.object",
    ),
    "numeric-id": (json.dumps({**GOOD, "id": 12345}), "missing or empty id"),
    **{
        f"size-{name}": (
            poison(GOOD, object={"key": "acme/TOPSECRET.csv", "size": size, "version-id": "v1"}),
            "detail.object.size is not a non-negative integer",
        )
        for name, size in {"negative": -1, "text": "12", "boolean": True}.items()
    },
}


@pytest.mark.parametrize(("body", "reason"), POISON.values(), ids=POISON.keys())
def test_an_unusable_message_is_quarantined_and_let_go(
    handler_env, sfn, s3, work_bucket, queue, ledger, logs, capsys, body, reason
):
    """GIVEN a message at the head of the queue that is not a usable file event of the tenant
    WHEN the controller handles it
    THEN it is stored in the work bucket's quarantine with its attributes and the reason, one
    ERROR line names the reason and the message id (never the body), QuarantinedMessages = 1
    is published, nothing starts, and the invocation succeeds so the message is deleted."""
    record = {
        **queue.record("evt-x", body=body),
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q.fifo",
        "messageAttributes": {"origin": {"stringValue": "hand", "dataType": "String"}},
    }

    result = controller.handler({"Records": [record]}, Context())

    assert result == {"batchItemFailures": [], "outcome": "quarantined", "execution_name": None}
    (stored,) = quarantined(s3)
    assert re.fullmatch(
        rf"quarantine/{TENANT}/\d{{8}}T\d{{6}}\.\d{{6}}Z-{record['messageId']}\.json", stored["key"]
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z", stored["quarantined_at"])  # UTC
    assert s3.head_object(Bucket=WORK_BUCKET, Key=stored["key"])["ContentType"] == "application/json"
    assert (stored["body"], stored["message_id"], stored["tenant"]) == (body, record["messageId"], TENANT)
    assert reason in stored["reason"]
    assert stored["attributes"] == record["attributes"]
    assert stored["message_attributes"] == record["messageAttributes"]
    assert stored["queue_arn"] == record["eventSourceARN"]
    (error,) = logs.errors()
    assert reason in error.reason and error.message_id == record["messageId"]
    assert (error.quarantine_key, error.error_type) == (stored["key"], "UnusableMessageError")
    assert "TOPSECRET" not in logs.text()
    metrics = emf_records(capsys.readouterr().out, "controller")
    assert [m.get("QuarantinedMessages") for m in metrics] == [1]  # no head wait: nothing was decided
    assert metrics[0]["_aws"]["CloudWatchMetrics"][0]["Metrics"] == [
        {"Name": "QuarantinedMessages", "Unit": "Count"}
    ]
    assert metrics[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"] == handler_env.metric_namespace
    assert executions(sfn, handler_env) == {}
    assert ledger.read().seq == 0


def test_the_file_behind_a_quarantined_message_starts(config, sfn, ddb, sqs, s3, work_bucket, queue):
    """GIVEN a poison message ahead of a file WHEN both are handled in order THEN the poison
    message is let go and the file starts (the tenant is not blocked)."""
    first = run(queue.record("evt-x", body="TOPSECRET"), config, sfn, ddb, sqs)
    second = run(queue.record("evt-b"), config, sfn, ddb, sqs)

    assert (first["outcome"], second["outcome"]) == ("quarantined", "started")
    assert executions(sfn, config) == {"evt-b": "RUNNING"}


def test_fails_when_the_quarantine_cannot_be_written(handler_env, sfn, s3, queue, ledger, logs, capsys):
    """GIVEN no work bucket (the quarantine write fails) WHEN a poison message is handled THEN the
    invocation fails, so the message stays in the queue (never deleted without being stored),
    nothing is counted as quarantined and the body is still not logged."""
    record = queue.record("evt-x", body="TOPSECRET")

    with pytest.raises(Exception, match="NoSuchBucket"):
        controller.handler({"Records": [record]}, Context())

    assert "QuarantinedMessages" not in capsys.readouterr().out
    assert "TOPSECRET" not in logs.text()
    assert [r.getMessage() for r in logs.errors()] == ["controller failed"]
    assert executions(sfn, handler_env) == {}


def test_a_message_the_gate_finds_unusable_is_quarantined_too(
    config, sfn, ddb, sqs, s3, work_bucket, queue, monkeypatch
):
    """GIVEN a gate that refuses a parsed file event as unusable (as an ordering mode may, for a key
    without a sequence number) WHEN the message is handled THEN it is quarantined with that reason."""
    from lambdas.contract import UnusableMessageError

    def refuse(self: Any, file: FileRef) -> Any:
        raise UnusableMessageError("the key has no sequence number")

    monkeypatch.setattr(controller.Gate, "handle", refuse)

    result = run(queue.record("evt-a"), config, sfn, ddb, sqs)

    assert result["outcome"] == "quarantined"
    (stored,) = quarantined(s3)
    assert stored["reason"] == "the key has no sequence number"


def test_an_empty_file_is_a_usable_event_and_motos_spellings_are_read() -> None:
    """An upload of 0 bytes is a file (its workflow finds no records); moto writes the ETag as
    `eTag` and the event time as epoch seconds, S3 as `etag` and an ISO 8601 string."""
    event = s3_event("evt-a")
    event["detail"]["object"] = {"key": "acme/f.csv", "size": 0, "eTag": "e1", "version-id": "v1"}
    event["time"] = 1_700_000_000

    ref = controller.file_ref_from_sqs_body(
        json.dumps(event), TENANT, landing_bucket="landing", landing_prefix="acme/"
    )

    assert (ref["size"], ref["etag"], ref["event_time"]) == (0, "e1", "2023-11-14T22:13:20Z")
    del event["time"]
    assert (
        controller.file_ref_from_sqs_body(
            json.dumps(event), TENANT, landing_bucket="landing", landing_prefix="acme/"
        )["event_time"]
        == ""
    )
