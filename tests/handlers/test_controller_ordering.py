"""Arrival order and key-sequence order in the controller's gate (docs/design.md §4.8).

`arrival`: files go in the order their events reach the FIFO queue; an event older than the
last file started is processed, logged at WARNING and counted. `key_sequence`: files go
strictly by the sequence number in their keys; a later file waits (noted under its number, so
the close of the file before it wakes it) while an earlier number is missing.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import pytest

from lambdas import operations
from lambdas.contract import (
    LATE_ARRIVAL_METRIC,
    SEQUENCE_GAP_METRIC,
    ControllerEnv,
    FileRef,
    sequence_of,
)
from lambdas.ledger import Ledger, hand_off
from tests.handlers.support import TENANT, emf_records
from tests.handlers.test_controller_handler import (
    NOW,
    config,
    executions,
    ledger,
    quarantined,
    queue,
    run,
    s3_event,
    set_status,
    work_bucket,
)

PATTERN = r"(?P<seq>\d+)\.csv$"


@pytest.fixture
def sequenced(config: ControllerEnv) -> ControllerEnv:
    return dataclasses.replace(config, ordering="key_sequence", sequence_pattern=PATTERN, first_sequence=1)


def file_key(sequence: int) -> str:
    return f"acme/batch-{sequence:04d}.csv"


def emitted(capsys: pytest.CaptureFixture[str], metric: str) -> list[float]:
    """Values of `metric` in the EMF records the controller printed."""
    return [
        record[metric] for record in emf_records(capsys.readouterr().out, "controller") if metric in record
    ]


def close(ledger: Ledger, execution: str, sqs: Any, queue_url: str, now: float) -> None:
    """What the closer does when an execution succeeds: record it, then hand off."""
    closed = ledger.record_close(execution, "SUCCEEDED", halt_on_failure=True, now=now)
    hand_off(ledger, sqs, queue_url, closed)


# --- the sequence number in a key -----------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "pattern", "expected"),
    [
        ("acme/batch-0007.csv", PATTERN, 7),
        ("acme/2024/batch-0010.csv", PATTERN, 10),  # a number in a folder name is not the sequence
        ("acme/batch-0007.csv.tmp", PATTERN, None),
        ("acme/batch-x.csv", PATTERN, None),
        ("acme/00042_orders.jsonl", r"^acme/(\d+)_", 42),  # the only group when none is named seq
        ("acme/orders-17", r"\d+$", 17),  # the whole match without groups
        ("acme/batch-\u0663.csv", PATTERN, None),  # a non-ASCII digit is no sequence number
    ],
)
def test_sequence_of_finds_the_number_the_pattern_names(key: str, pattern: str, expected: int | None) -> None:
    assert sequence_of(key, pattern) == expected


# --- key_sequence --------------------------------------------------------------------------------


def test_a_later_file_waits_for_the_missing_number_and_the_gap_is_measured(
    sequenced, sfn, ddb, sqs, queue, ledger, capsys
):
    """GIVEN a tenant ordered by key sequence that has processed nothing (first number 1)
    WHEN file 2 arrives first THEN it waits (nothing starts), noted under its number, and the
    gap metric says how long it has waited since it was sent."""
    record = queue.record("evt-2", key=file_key(2), sent_ms=int((NOW - 30) * 1000))

    result = run(record, sequenced, sfn, ddb, sqs)

    assert result["outcome"] == "waiting"
    assert result["batchItemFailures"] == [{"itemIdentifier": record["messageId"]}]
    assert executions(sfn, sequenced) == {}
    assert ledger.waiting_sequences() == [(2, record["receiptHandle"])]
    assert emitted(capsys, SEQUENCE_GAP_METRIC) == [pytest.approx(30.0)]


def test_a_file_behind_a_halted_tenant_waits_noted_under_its_number(sequenced, sfn, ddb, sqs, queue, ledger):
    """GIVEN file 1 failed and halted the tenant WHEN file 2 arrives THEN it waits, noted under
    its number (where `ops resume` and the next close look for it), not as the position's one waiting message."""
    run(queue.record("evt-1", key=file_key(1)), sequenced, sfn, ddb, sqs)
    ledger.record_close("evt-1", "FAILED", halt_on_failure=True, now=NOW + 1)
    set_status(sfn, sequenced, "evt-1", "FAILED")
    two = queue.record("evt-2", key=file_key(2))

    assert run(two, sequenced, sfn, ddb, sqs, now=NOW + 2)["outcome"] == "waiting"

    assert ledger.waiting_sequences() == [(2, two["receiptHandle"])]
    assert ledger.read().waiting_message_id is None


def test_a_file_behind_a_start_step_functions_does_not_show_yet_waits_noted_under_its_number(
    sequenced, sfn, ddb, sqs, queue, ledger
):
    """GIVEN file 1 claimed 10 s ago, its execution not visible yet WHEN file 2 arrives THEN it
    waits, noted under its number."""
    one = FileRef(
        tenant=TENANT,
        event_id="evt-1",
        bucket="landing",
        key=file_key(1),
        version_id="v-evt-1",
        size=1,
        etag=None,
        event_time="",
    )
    ledger.claim(ledger.read(), one, "evt-1", NOW - 10, sequence=1)
    two = queue.record("evt-2", key=file_key(2))

    assert run(two, sequenced, sfn, ddb, sqs)["outcome"] == "waiting"

    assert ledger.waiting_sequences() == [(2, two["receiptHandle"])]
    assert executions(sfn, sequenced) == {}


def test_files_start_by_sequence_and_each_close_wakes_the_next_number(
    sequenced, sfn, ddb, sqs, queue, ledger
):
    """GIVEN files 3 and 2 waiting (they arrived before 1)
    WHEN 1 arrives THEN it starts; its close makes 2's message visible at once (not 3's);
    2 starts, and its close wakes 3."""
    three = queue.record("evt-3", key=file_key(3))
    run(three, sequenced, sfn, ddb, sqs)
    two = queue.record("evt-2", key=file_key(2))
    run(two, sequenced, sfn, ddb, sqs)
    assert queue.visible() == 0

    assert run(queue.record("evt-1", key=file_key(1)), sequenced, sfn, ddb, sqs)["outcome"] == "started"
    assert ledger.read().sequence == 1
    assert run(three, sequenced, sfn, ddb, sqs)["outcome"] == "waiting"  # 1 runs: 3 still waits

    close(ledger, "evt-1", sqs, sequenced.queue_url, NOW + 1)
    assert queue.visible() == 1, "the close of 1 did not wake 2"
    (woken,) = sqs.receive_message(QueueUrl=sequenced.queue_url)["Messages"]
    assert json.loads(woken["Body"])["id"] == "evt-2"

    # Step Functions closed evt-1 too (moto runs no definition here).
    set_status(sfn, sequenced, "evt-1", "SUCCEEDED")
    two = {**two, "receiptHandle": woken["ReceiptHandle"]}
    assert run(two, sequenced, sfn, ddb, sqs, now=NOW + 2)["outcome"] == "started"
    assert ledger.read().sequence == 2
    assert [s for s, _ in ledger.waiting_sequences()] == [3], "2's note was not forgotten once it started"


def test_a_file_behind_the_sequence_is_unusable_unless_it_is_a_duplicate_event(
    sequenced, sfn, ddb, sqs, queue, ledger, s3, work_bucket
):
    """GIVEN file 1 processed WHEN another file numbered 1 arrives THEN it is quarantined as unusable
    (it would be processed out of order); the same event delivered again is let go."""
    run(queue.record("evt-1", key=file_key(1)), sequenced, sfn, ddb, sqs)
    close(ledger, "evt-1", sqs, sequenced.queue_url, NOW + 1)
    set_status(sfn, sequenced, "evt-1", "SUCCEEDED")

    result = run(
        queue.record("evt-other", key="acme/batch-0001.csv", version_id="v2"),
        sequenced,
        sfn,
        ddb,
        sqs,
        now=NOW + 2,
    )
    assert result["outcome"] == "quarantined"
    (stored,) = quarantined(s3)
    assert stored["reason"].startswith("sequence number 1 is behind the tenant's next one, 2")
    assert (
        run(queue.record("evt-1", key=file_key(1)), sequenced, sfn, ddb, sqs, now=NOW + 2)["outcome"]
        == "done"
    )
    # A replay of the same object version under a new event id (ops reconcile / dlq) is a duplicate too.
    version = json.loads(described_input(sfn, sequenced, "evt-1"))["version_id"]
    replayed = queue.record("reconcile-x", key=file_key(1), version_id=version)
    assert run(replayed, sequenced, sfn, ddb, sqs, now=NOW + 2)["outcome"] == "done"
    assert ledger.read().sequence == 1


def test_a_key_without_a_sequence_number_is_unusable(sequenced, sfn, ddb, sqs, queue, s3, work_bucket):
    assert (
        run(queue.record("evt-x", key="acme/readme.txt"), sequenced, sfn, ddb, sqs)["outcome"]
        == "quarantined"
    )
    (stored,) = quarantined(s3)
    assert "no sequence number matching" in stored["reason"]
    assert executions(sfn, sequenced) == {}


def test_the_first_sequence_number_is_configurable(sequenced, sfn, ddb, sqs, queue, ledger):
    from_zero = dataclasses.replace(sequenced, first_sequence=0)
    assert run(queue.record("evt-1", key=file_key(1)), from_zero, sfn, ddb, sqs)["outcome"] == "waiting"
    assert run(queue.record("evt-0", key=file_key(0)), from_zero, sfn, ddb, sqs)["outcome"] == "started"


def test_skip_gap_gives_up_the_missing_numbers_and_wakes_the_lowest_waiting_file(
    sequenced, sfn, ddb, sqs, queue, ledger
):
    """GIVEN file 1 done and file 4 waiting (2 and 3 never came)
    WHEN the operator skips the gap THEN the position moves to 3, 4's message is visible at once,
    the history says which numbers were given up and why, and 4 then starts."""
    run(queue.record("evt-1", key=file_key(1)), sequenced, sfn, ddb, sqs)
    close(ledger, "evt-1", sqs, sequenced.queue_url, NOW + 1)
    four = queue.record("evt-4", key=file_key(4))
    assert run(four, sequenced, sfn, ddb, sqs, now=NOW + 2)["outcome"] == "waiting"

    outcome = operations.skip_gap(
        ledger, sqs, sequenced.queue_url, first_sequence=1, reason="never sent", now=NOW + 3
    )

    assert "gave up sequence number(s) 2-3" in outcome.message and "file 4 starts now" in outcome.message
    assert ledger.read().sequence == 3
    assert queue.visible() == 1
    gap = ledger.history()[0]
    assert (
        gap["status"] == "SKIPPED" and gap["skip_reason"] == "sequence numbers 2-3 never arrived: never sent"
    )
    set_status(sfn, sequenced, "evt-1", "SUCCEEDED")
    assert run(four, sequenced, sfn, ddb, sqs, now=NOW + 4)["outcome"] == "started"


def test_skip_gap_refuses_while_a_file_runs_or_when_nothing_waits(sequenced, sfn, ddb, sqs, queue, ledger):
    run(queue.record("evt-1", key=file_key(1)), sequenced, sfn, ddb, sqs)
    with pytest.raises(operations.NothingToDo, match="running"):
        operations.skip_gap(ledger, sqs, sequenced.queue_url, first_sequence=1, reason="r", now=NOW)
    close(ledger, "evt-1", sqs, sequenced.queue_url, NOW + 1)
    with pytest.raises(operations.NothingToDo, match="waits for sequence number 2 and no later file waits"):
        operations.skip_gap(ledger, sqs, sequenced.queue_url, first_sequence=1, reason="r", now=NOW + 2)
    with pytest.raises(ValueError, match="not past the gap"):
        operations.skip_gap(ledger, sqs, sequenced.queue_url, first_sequence=1, reason="r", now=NOW + 2, to=2)
    with pytest.raises(ValueError, match="reason is required"):
        operations.skip_gap(ledger, sqs, sequenced.queue_url, first_sequence=1, reason=" ", now=NOW + 2, to=5)
    assert ledger.read().sequence == 1


# --- arrival -------------------------------------------------------------------------------------


def described_input(sfn: Any, config: ControllerEnv, name: str) -> str:
    from lambdas.contract import execution_arn

    return sfn.describe_execution(executionArn=execution_arn(config.state_machine_arn, name))["input"]


def late_event(event_id: str, key: str, time: str) -> str:
    event = s3_event(event_id, key=key)
    event["time"] = time
    return json.dumps(event)


def test_an_event_older_than_the_last_file_started_is_processed_logged_and_counted(
    config, sfn, ddb, sqs, queue, ledger, logs, capsys
):
    """GIVEN file B (event time 10:00:05) started WHEN the event of A (10:00:01) arrives after it
    THEN A is processed next all the same, with a WARNING naming both event times and a
    LateArrivals count of 1; an event in order counts nothing."""
    run(
        queue.record("evt-b", body=late_event("evt-b", "acme/b.csv", "2024-01-01T10:00:05Z")),
        config,
        sfn,
        ddb,
        sqs,
    )
    ledger.record_close("evt-b", "SUCCEEDED", halt_on_failure=True, now=NOW + 1)
    set_status(sfn, config, "evt-b", "SUCCEEDED")
    capsys.readouterr()

    result = run(
        queue.record("evt-a", body=late_event("evt-a", "acme/a.csv", "2024-01-01T10:00:01Z")),
        config,
        sfn,
        ddb,
        sqs,
        now=NOW + 2,
    )

    assert result["outcome"] == "started"
    assert emitted(capsys, LATE_ARRIVAL_METRIC) == [1]
    (warning,) = [r for r in logs.records() if r.levelno == logging.WARNING]
    assert "arrived after a newer file started" in warning.getMessage()
    assert (warning.event_time, warning.last_started_event_time) == (
        "2024-01-01T10:00:01Z",
        "2024-01-01T10:00:05Z",
    )

    ledger.record_close("evt-a", "SUCCEEDED", halt_on_failure=True, now=NOW + 3)
    set_status(sfn, config, "evt-a", "SUCCEEDED")
    run(
        queue.record("evt-c", body=late_event("evt-c", "acme/c.csv", "2024-01-01T10:00:09Z")),
        config,
        sfn,
        ddb,
        sqs,
        now=NOW + 4,
    )
    assert emitted(capsys, LATE_ARRIVAL_METRIC) == []


@pytest.mark.parametrize(
    ("event_time", "late"),
    [
        ("2024-01-01T19:00:01+09:00", True),  # 10:00:01 UTC, before B's 10:00:05 UTC
        ("2024-01-01T10:00:01", True),  # no offset: UTC
        ("2024-01-01T10:00:05Z", False),  # the same instant as B's: not late
        ("yesterday", False),  # not a time: nothing to compare
    ],
    ids=["offset", "no-offset", "same-instant", "unreadable"],
)
def test_event_times_are_compared_as_instants(config, sfn, ddb, sqs, queue, ledger, capsys, event_time, late):
    """GIVEN file B (event time 10:00:05 UTC) started and closed WHEN A's event arrives with
    `event_time` THEN A starts, counted as a late arrival only if its instant is earlier than B's."""
    run(
        queue.record("evt-b", body=late_event("evt-b", "acme/b.csv", "2024-01-01T10:00:05Z")),
        config,
        sfn,
        ddb,
        sqs,
    )
    ledger.record_close("evt-b", "SUCCEEDED", halt_on_failure=True, now=NOW + 1)
    set_status(sfn, config, "evt-b", "SUCCEEDED")
    capsys.readouterr()

    result = run(
        queue.record("evt-a", body=late_event("evt-a", "acme/a.csv", event_time)),
        config,
        sfn,
        ddb,
        sqs,
        now=NOW + 2,
    )

    assert result["outcome"] == "started"
    assert emitted(capsys, LATE_ARRIVAL_METRIC) == ([1] if late else [])


def test_positions_of_other_tenants_are_not_read(sequenced, sfn, ddb, sqs, queue, ledger):
    """The waiting notes live in the tenant's own partition (IAM scopes each function to it)."""
    run(queue.record("evt-3", key=file_key(3)), sequenced, sfn, ddb, sqs)
    other = Ledger(ddb, sequenced.ledger_table_name, "other")
    assert other.waiting_sequences() == [] and [s for s, _ in ledger.waiting_sequences()] == [3]
    assert TENANT == "acme"


def test_a_close_between_noting_a_waiting_file_and_checking_the_position_is_never_missed(
    sequenced, sfn, ddb, sqs, queue, ledger, monkeypatch
):
    """GIVEN file 1 running and file 2 arriving WHEN file 1's close (and its hand-off, which finds
    no note yet) happens just before 2's note is written THEN the controller sees the position
    changed, decides again and starts 2 at once instead of leaving it invisible for 4 minutes."""
    run(queue.record("evt-1", key=file_key(1)), sequenced, sfn, ddb, sqs)
    noted = Ledger.note_waiting_sequence

    def close_first(self, *args, **kwargs):
        monkeypatch.setattr(Ledger, "note_waiting_sequence", noted)
        set_status(sfn, sequenced, "evt-1", "SUCCEEDED")
        close(Ledger(ddb, sequenced.ledger_table_name, TENANT), "evt-1", sqs, sequenced.queue_url, NOW + 1)
        return noted(self, *args, **kwargs)

    monkeypatch.setattr(Ledger, "note_waiting_sequence", close_first)
    result = run(queue.record("evt-2", key=file_key(2)), sequenced, sfn, ddb, sqs, now=NOW + 2)

    assert result["outcome"] == "started"
    assert ledger.read().sequence == 2


def test_the_ledger_refuses_to_skip_a_gap_while_a_file_runs_or_the_tenant_is_halted(
    sequenced, sfn, ddb, sqs, queue, ledger
):
    """The ledger's own condition, not only the operator command's check: a gap skip that raced a
    claim or a failure fails (LedgerConflict) instead of moving the sequence under a running file."""
    from lambdas.ledger import LedgerConflict

    before = ledger.read()
    run(queue.record("evt-1", key=file_key(1)), sequenced, sfn, ddb, sqs)
    with pytest.raises(LedgerConflict):
        ledger.skip_gap(ledger.read(), 2, 4, "r", NOW)  # running
    with pytest.raises(LedgerConflict):
        ledger.skip_gap(before, 1, 4, "r", NOW)  # stale read: the claim came in between
    failed = ledger.record_close("evt-1", "FAILED", halt_on_failure=True, now=NOW + 1)
    with pytest.raises(LedgerConflict):
        ledger.skip_gap(failed, 2, 4, "r", NOW + 2)  # halted: resume or skip the file first
    assert ledger.read().sequence == 1
