"""The operator's actions on the ledger (`operations.py`): resume, skip and skip-gap, what they
refuse, what they report, and how they describe a tenant's state (what `ops status` and every
refusal print). `tests/test_ops.py` drives the same code through the CLI."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from lambdas.contract import FileRef, execution_arn
from lambdas.ledger import FAILED, RUNNING, Ledger, start_execution
from lambdas.operations import NothingToDo, describe_state, resume, skip, skip_gap
from tests.handlers.support import TENANT

NOW = 1_700_000_000.0


def file(event_id: str, sequence: int | None = None) -> FileRef:
    key = f"acme/{event_id}.csv" if sequence is None else f"acme/batch-{sequence:04d}.csv"
    return FileRef(
        tenant=TENANT,
        event_id=event_id,
        bucket="landing",
        key=key,
        version_id="v1",
        size=1,
        etag=None,
        event_time="",
    )


def started_input(sfn: Any, machine: str, execution: str) -> dict[str, Any]:
    return json.loads(sfn.describe_execution(executionArn=execution_arn(machine, execution))["input"])


def failed(
    ledger: Ledger,
    *,
    halt: bool = True,
    next_record: int = 7,
    error: str | None = "SinkRejectedError",
    status: str = "FAILED",
) -> Any:
    """acme's file e1 ran, acknowledged `next_record` records and closed as `status`."""
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.record_progress("e1", next_record)
    return ledger.record_close(
        "e1",
        status,
        halt_on_failure=halt,
        now=NOW + 1,
        error=error,
        cause=None if error is None else "chunk 0 record 7: HTTP 400",
    )


def waiting_message(sqs: Any, queue_url: str, ledger: Ledger) -> None:
    """The next file's message, received and noted as waiting behind the halted one."""
    sqs.send_message(
        QueueUrl=queue_url, MessageBody="{}", MessageGroupId=TENANT, MessageDeduplicationId="next"
    )
    (message,) = sqs.receive_message(QueueUrl=queue_url, VisibilityTimeout=240)["Messages"]
    ledger.record_waiting(ledger.read(), message["MessageId"], message["ReceiptHandle"], NOW + 2, NOW + 2)


def visible(sqs: Any, queue_url: str) -> int:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


# --- the state, as every refusal and `ops status` words it ------------------------------------


def test_each_state_of_a_tenant_is_described_in_one_phrase(ledger):
    assert describe_state(ledger.read()) == "idle (no file processed yet)"
    running = ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    assert describe_state(running) == "running acme/e1.csv (execution e1)"
    assert describe_state(dataclasses.replace(running, file=None)) == "running ? (execution e1)"
    done = ledger.record_close("e1", "SUCCEEDED", halt_on_failure=True, now=NOW + 1)
    assert describe_state(done) == "idle (last file acme/e1.csv: SUCCEEDED)"


def test_a_halted_tenant_is_described_by_its_error_or_else_how_its_file_closed(ledger):
    halted = failed(ledger)
    assert describe_state(halted) == "halted: acme/e1.csv failed (SinkRejectedError)"
    assert describe_state(dataclasses.replace(halted, error=None)) == "halted: acme/e1.csv failed (FAILED)"


def test_a_tenant_whose_gap_was_given_up_is_idle_up_to_that_number(ledger):
    given_up = ledger.skip_gap(ledger.read(), 1, 4, "never sent", NOW)
    assert describe_state(given_up) == "idle (sequence numbers up to 3 given up)"


# --- resume -----------------------------------------------------------------------------------


def test_resume_starts_the_failed_file_again_at_its_first_unacknowledged_record(ledger, sfn, machine):
    failed(ledger, next_record=7)

    outcome = resume(ledger, sfn, machine, NOW + 5)

    assert (outcome.execution, outcome.start_record) == ("e1-r1", 7)
    assert outcome.message == "resumed s3://landing/acme/e1.csv at record 7 as execution e1-r1"
    assert started_input(sfn, machine, "e1-r1")["start_record"] == 7
    position = ledger.read()
    assert (position.status, position.execution, position.halted, position.attempt) == (
        RUNNING,
        "e1-r1",
        False,
        1,
    )


def test_a_resume_cut_short_before_its_start_is_finished_by_the_next_resume(ledger, sfn, machine):
    """GIVEN an operator's resume that recorded the new attempt in the ledger and stopped before
    Step Functions started it (a crash, Ctrl-C) WHEN the operator runs resume again THEN the
    recorded execution starts, at the recorded record, and nothing else changes in the ledger."""
    halted = failed(ledger, next_record=7)
    cut_short = ledger.resume(halted, "e1-r1", NOW + 5)

    outcome = resume(ledger, sfn, machine, NOW + 6)

    assert outcome.message == "started the interrupted e1-r1 at record 7"
    assert (outcome.execution, outcome.start_record) == ("e1-r1", 7)
    assert started_input(sfn, machine, "e1-r1")["start_record"] == 7
    assert ledger.read() == cut_short
    with pytest.raises(
        NothingToDo, match=r"^nothing to resume: tenant acme is running acme/e1.csv \(execution e1-r1\)$"
    ):
        resume(ledger, sfn, machine, NOW + 7)  # it runs now


def test_resume_never_starts_a_first_attempt_the_controller_has_not_started_yet(ledger, sfn, machine):
    """A file the gate claimed and is about to start (attempt 0, not in Step Functions yet) is
    the gate's to start, under its own name: resume refuses instead of racing it."""
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)

    with pytest.raises(
        NothingToDo, match=r"^nothing to resume: tenant acme is running acme/e1.csv \(execution e1\)$"
    ):
        resume(ledger, sfn, machine, NOW + 1)

    assert sfn.list_executions(stateMachineArn=machine)["executions"] == []


@pytest.mark.parametrize("action", ["resume", "skip"])
def test_a_failed_file_that_did_not_halt_the_tenant_is_neither_resumed_nor_skipped(
    action, ledger, sfn, sqs, queue_url, machine
):
    """`on_failure: continue`: the failed file closed without halting; the tenant went on."""
    failed(ledger, halt=False)
    before = ledger.read()

    with pytest.raises(
        NothingToDo, match=rf"^nothing to {action}: tenant acme is idle \(last file acme/e1.csv: FAILED\)$"
    ):
        if action == "resume":
            resume(ledger, sfn, machine, NOW + 5)
        else:
            skip(ledger, sqs, queue_url, "why", NOW + 5)

    assert ledger.read() == before


# --- skip ----------------------------------------------------------------------------------------


def test_skip_gives_up_the_file_and_makes_the_waiting_message_visible_now(ledger, sqs, queue_url):
    failed(ledger, next_record=7)
    waiting_message(sqs, queue_url, ledger)

    outcome = skip(ledger, sqs, queue_url, "  agreed with the tenant ", NOW + 5)

    assert outcome.message == (
        "skipped s3://landing/acme/e1.csv at record 7 (reason: agreed with the tenant); "
        "the next file starts now"
    )
    assert (outcome.execution, outcome.start_record) == ("e1", 7)
    assert visible(sqs, queue_url) == 1
    assert ledger.read().waiting_receipt is None
    (entry,) = ledger.history()  # the failed attempt's entry now says it was given up, and when
    assert (entry["status"], entry["closed_at"], entry["skip_reason"]) == (
        "SKIPPED",
        NOW + 5,
        "agreed with the tenant",
    )


def test_skip_without_a_waiting_message_says_the_next_file_starts_when_it_is_received(ledger, sqs, queue_url):
    failed(ledger)

    outcome = skip(ledger, sqs, queue_url, "why", NOW + 5)

    assert outcome.message.endswith("; the next file starts when its message is next received")
    assert ledger.read().status == "SKIPPED"


@pytest.mark.parametrize("failure", ["ThrottlingException", "ConnectionError"])
@pytest.mark.parametrize("action", ["skip", "skip_gap"])
def test_a_hand_off_that_fails_after_the_skip_is_reported_not_raised(action, failure, ledger, sqs, queue_url):
    """GIVEN SQS refuses to make the waiting message visible (throttled, or the connection drops)
    WHEN the operator skips THEN the skip stands, and the operator reads that the next file starts
    when its message is next received and why not now, instead of a traceback that looks like a
    skip that failed."""
    if action == "skip":
        failed(ledger)
        waiting_message(sqs, queue_url, ledger)
    else:
        sqs.send_message(
            QueueUrl=queue_url, MessageBody="{}", MessageGroupId=TENANT, MessageDeduplicationId="6"
        )
        (message,) = sqs.receive_message(QueueUrl=queue_url, VisibilityTimeout=240)["Messages"]
        ledger.note_waiting_sequence(6, message["MessageId"], message["ReceiptHandle"], NOW)

    def throttle(**_: Any) -> None:
        if failure == "ConnectionError":
            raise ConnectionError("the connection dropped")
        raise ClientError({"Error": {"Code": failure, "Message": "Rate exceeded"}}, "ChangeMessageVisibility")

    sqs.meta.events.register("provide-client-params.sqs.ChangeMessageVisibility", throttle)
    outcome = (
        skip(ledger, sqs, queue_url, reason="r", now=NOW + 5)
        if action == "skip"
        else skip_gap(ledger, sqs, queue_url, first_sequence=5, reason="r", now=NOW)
    )

    assert outcome.message.endswith(
        "starts when its message is next received (the skip is recorded; making the message visible now "
        f"failed: {failure})"
    )
    position = ledger.read()
    if action == "skip":
        assert (position.status, position.halted) == ("SKIPPED", False)
    else:
        assert position.sequence == 5
    assert visible(sqs, queue_url) == 0  # still in flight: received again when its 240 s end


def test_skip_and_skip_gap_need_a_reason(ledger, sqs, queue_url):
    failed(ledger)
    with pytest.raises(
        ValueError, match=r"^a reason is required: say why this file's remaining records may be given up$"
    ):
        skip(ledger, sqs, queue_url, " \t", NOW + 5)
    with pytest.raises(
        ValueError, match=r"^a reason is required: say why the missing files may be given up$"
    ):
        skip_gap(ledger, sqs, queue_url, first_sequence=1, reason="", now=NOW + 5, to=3)
    assert ledger.read().status == FAILED


# --- skip-gap (key_sequence ordering) -----------------------------------------------------------


def test_skip_gap_before_any_file_ran_gives_up_from_the_first_sequence_number(ledger, sqs, queue_url):
    """GIVEN files 1 and 2 never came and file 3 waits, nothing ran yet WHEN the operator skips
    the gap THEN numbers 1-2 are given up and 3's message is visible at once."""
    sqs.send_message(QueueUrl=queue_url, MessageBody="{}", MessageGroupId=TENANT, MessageDeduplicationId="3")
    (message,) = sqs.receive_message(QueueUrl=queue_url, VisibilityTimeout=240)["Messages"]
    ledger.note_waiting_sequence(3, message["MessageId"], message["ReceiptHandle"], NOW)

    outcome = skip_gap(ledger, sqs, queue_url, first_sequence=1, reason="never sent", now=NOW + 1)

    assert outcome.message == "gave up sequence number(s) 1-2 (reason: never sent); file 3 starts now"
    assert ledger.read().sequence == 2
    assert visible(sqs, queue_url) == 1


def test_skip_gap_of_one_number_names_it_alone(ledger, sqs, queue_url):
    sqs.send_message(QueueUrl=queue_url, MessageBody="{}", MessageGroupId=TENANT, MessageDeduplicationId="6")
    (message,) = sqs.receive_message(QueueUrl=queue_url, VisibilityTimeout=240)["Messages"]
    ledger.note_waiting_sequence(6, message["MessageId"], message["ReceiptHandle"], NOW)

    outcome = skip_gap(ledger, sqs, queue_url, first_sequence=5, reason="r", now=NOW)

    assert outcome.message == "gave up sequence number(s) 5 (reason: r); file 6 starts now"
    assert ledger.read().sequence == 5


def test_skip_gap_to_a_number_whose_file_has_not_come_yet(ledger, sqs, queue_url):
    outcome = skip_gap(ledger, sqs, queue_url, first_sequence=5, reason="r", now=NOW, to=7)
    assert (
        outcome.message
        == "gave up sequence number(s) 5-6 (reason: r); file 7 starts when its message is next received"
    )
    assert ledger.read().sequence == 6


def test_a_stale_waiting_note_below_the_gap_neither_hides_the_gap_nor_blocks_the_hand_off(
    ledger, sqs, queue_url
):
    """GIVEN a waiting note left behind for a number the tenant has passed (a hand-off cut short
    between making the message visible and forgetting the note) and file 5 waiting after a gap
    WHEN the operator skips the gap THEN the gap is 3-4 (not the stale number) and 5's message
    is made visible."""
    ledger.claim(ledger.read(), file("e2", 2), "e2", NOW, sequence=2)
    ledger.record_close("e2", "SUCCEEDED", halt_on_failure=True, now=NOW + 1)
    ledger.note_waiting_sequence(2, "stale", "stale-receipt", NOW)  # the note of the file that ran
    sqs.send_message(QueueUrl=queue_url, MessageBody="{}", MessageGroupId=TENANT, MessageDeduplicationId="5")
    (message,) = sqs.receive_message(QueueUrl=queue_url, VisibilityTimeout=240)["Messages"]
    ledger.note_waiting_sequence(5, message["MessageId"], message["ReceiptHandle"], NOW + 2)

    outcome = skip_gap(ledger, sqs, queue_url, first_sequence=1, reason="r", now=NOW + 3)

    assert outcome.message.startswith("gave up sequence number(s) 3-4 ") and outcome.message.endswith(
        "file 5 starts now"
    )
    assert visible(sqs, queue_url) == 1
    assert [sequence for sequence, _ in ledger.waiting_sequences()] == [2]


# --- the ledger's side of the operator's actions ---------------------------------------------------


def test_every_operator_write_moves_the_position_forward_and_resume_forgets_the_failure(ledger):
    """A resume or skip decided on an older read is refused (the position's `seq` only grows), and
    the resumed attempt carries nothing of the failed one's close."""
    claimed = ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    halted = ledger.record_close(
        "e1", "FAILED", halt_on_failure=True, now=NOW + 1, error="SinkRejectedError", cause="HTTP 400"
    )
    resumed = ledger.resume(halted, "e1-r1", NOW + 2)
    assert claimed.seq < halted.seq < resumed.seq
    assert (resumed.error, resumed.cause, resumed.closed_at, resumed.closed_as, resumed.failed_in) == (
        None,
        None,
        None,
        None,
        None,
    )
    assert ledger.read() == resumed
    halted_again = ledger.record_close(
        "e1-r1", "FAILED", halt_on_failure=True, now=NOW + 3, error="E", cause="c"
    )
    skipped = ledger.skip(halted_again, "r", NOW + 4)
    assert halted_again.seq < skipped.seq and ledger.read().seq == skipped.seq
    gap = ledger.skip_gap(skipped, 1, 3, "r", NOW + 5)
    assert skipped.seq < gap.seq


def test_a_given_up_gap_is_a_history_entry_of_its_own(ledger, ddb):
    ledger.skip_gap(ledger.read(), 2, 4, "never sent", NOW)

    (item,) = [i for i in ddb.scan(TableName=ledger.table)["Items"] if i["entry"]["S"].startswith("file#")]
    assert item["entry"]["S"] == f"file#{int(NOW * 1000):013d}#gap-2-3"
    (entry,) = ledger.history()
    assert (entry["execution"], entry["status"], entry["started_at"], entry["closed_at"]) == (
        "gap-2-3",
        "SKIPPED",
        NOW,
        NOW,
    )
    assert entry["skip_reason"] == "sequence numbers 2-3 never arrived: never sent"
    assert item["expires_at"] == {"N": str(int(NOW + 400 * 86400))}  # kept as long as every history entry


@pytest.mark.parametrize("action", ["skip", "skip_gap"])
def test_an_operators_decision_is_recorded_with_its_history_entry_or_not_at_all(
    action, ledger, ddb, sqs, queue_url
):
    """GIVEN the write of the history entry fails (the process dies, the connection drops) WHEN
    the operator skips THEN the ledger is as before (the tenant still halted, or the gap still
    open), not a decision without its entry in `ops status --history`; the skip run again records
    both."""
    if action == "skip":
        failed(ledger)
        entry = "file#"  # the failed attempt's own entry, FAILED until the skip says SKIPPED
    else:
        entry = f"file#{int(NOW * 1000):013d}#gap-"
    before = ledger.read()

    def writes_history(params: dict[str, Any]) -> bool:
        items = [params.get("Item")] + [w.get("Put", {}).get("Item") for w in params.get("TransactItems", [])]
        return any(item and item["entry"]["S"].startswith(entry) for item in items)

    def fail(params: dict[str, Any], **_: Any) -> None:
        if writes_history(params):
            raise ConnectionError("the connection dropped")

    ddb.meta.events.register("provide-client-params.dynamodb.*", fail)
    run = (
        (lambda: skip(ledger, sqs, queue_url, reason="r", now=NOW + 5))
        if action == "skip"
        else (lambda: skip_gap(ledger, sqs, queue_url, first_sequence=1, reason="r", now=NOW, to=3))
    )
    with pytest.raises(ConnectionError):
        run()
    assert ledger.read() == before
    assert [e["status"] for e in ledger.history()] == (["FAILED"] if action == "skip" else [])

    ddb.meta.events.unregister("provide-client-params.dynamodb.*", fail)
    run()
    (latest, *_) = ledger.history()
    assert latest["status"] == "SKIPPED" and latest["skip_reason"].endswith("r")
    assert ledger.read().seq == before.seq + 1


def test_a_gap_skip_must_give_up_at_least_one_number(ledger):
    with pytest.raises(ValueError, match="nothing to skip"):
        ledger.skip_gap(ledger.read(), 4, 4, "r", NOW)
    assert ledger.read().sequence is None and ledger.history() == []


def test_start_execution_says_whether_it_started_the_execution(ledger, sfn, machine):
    running = ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    assert start_execution(sfn, machine, running) is True
    # The same name and input again is Step Functions' own idempotent success; the same name with
    # another input (a later start record) is ExecutionAlreadyExists: it exists, nothing started.
    assert start_execution(sfn, machine, running) is True
    assert start_execution(sfn, machine, dataclasses.replace(running, next_record=5)) is False
    assert started_input(sfn, machine, "e1")["start_record"] == 0
    assert [e["name"] for e in sfn.list_executions(stateMachineArn=machine)["executions"]] == ["e1"]
    # The input is canonical JSON: the file as the ledger hands it back (DynamoDB keeps no order
    # within a map) is the same input, so a second start of a running execution is still its own.
    shuffled = dataclasses.replace(running, file=dict(reversed(list(running.file.items()))))
    assert start_execution(sfn, machine, shuffled) is True


def test_the_operators_actions_read_one_waiting_note_and_read_it_consistently(ledger, ddb, sqs, queue_url):
    """The gate notes a waiting message and hands off in another invocation: every read of the
    notes is a consistent read (not one that may miss the note just written), and a hand-off or a
    gap skip asks DynamoDB for the lowest note only, however many files wait (a burst of them)."""
    queries: list[dict[str, Any]] = []
    ddb.meta.events.register(
        "provide-client-params.dynamodb.Query", lambda params, **_: queries.append(params)
    )
    for sequence in (5, 6, 7):
        ledger.note_waiting_sequence(sequence, f"m{sequence}", f"receipt-{sequence}", NOW)

    assert ledger.waiting_sequences(limit=1) == [(5, "receipt-5")]
    skip_gap(ledger, sqs, queue_url, first_sequence=3, reason="r", now=NOW)  # finds 5 waiting; hands off 5
    assert [(query["Limit"], query["ConsistentRead"]) for query in queries] == [(1, True)] * 3
    assert [sequence for sequence, _ in ledger.waiting_sequences()] == [6, 7]
    assert "Limit" not in queries[-1]  # and all of them when no limit is asked
