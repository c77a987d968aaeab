"""What an operator does to a tenant: resume or skip its failed file (`python -m ops`).

Both act only through the ledger's conditional writes, so they can never race the gate into
running two files: resume makes the failed file current again under a new execution name
(`contract.execution_name`: `<event id>-r<attempt>`, or a hashed name where that would not
fit), continuing at the first record the core system did not acknowledge; skip gives the file
up with a reason and hands off to the next file. Both refuse, with the reason, when there is
nothing to resume or skip.

Standard library and boto3 clients passed in; the same code runs against AWS and the local
runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contract import execution_name
from ledger import FAILED, Ledger, LedgerConflict, Position, hand_off, start_execution
from runtime import error_code, execution_status


class NothingToDo(Exception):
    """The tenant is not in a state the action applies to; the message says which state it is in."""


@dataclass(frozen=True)
class Outcome:
    """What an action did, for the operator."""

    message: str
    execution: str | None = None
    start_record: int | None = None


def describe_state(position: Position) -> str:
    """One phrase for a tenant's state: idle, running <file>, halted on <file>, ..."""
    if position.status is None and position.sequence is None:
        return "idle (no file processed yet)"
    if position.status is None:
        return f"idle (sequence numbers up to {position.sequence} given up)"
    key = (position.file or {}).get("key", "?")
    if position.running:
        return f"running {key} (execution {position.execution})"
    if position.halted:
        return f"halted: {key} failed ({position.error or position.closed_as})"
    return f"idle (last file {key}: {position.status})"


def resume(ledger: Ledger, sfn: Any, state_machine_arn: str, now: float) -> Outcome:
    """Run the tenant's halted, failed file again from its first unacknowledged record.

    Also finishes a resume that was cut short (the ledger says the resumed execution runs,
    Step Functions does not know it). `NothingToDo` otherwise; `LedgerConflict` if the
    ledger changed meanwhile (run it again). `state_machine_arn`: what the execution starts
    through, the tenant's `live` alias (the version it points at now; docs/operations.md, "Versions,
    aliases and rollback"); an unqualified ARN starts the latest revision.
    """
    position = ledger.read()
    if position.running and position.attempt > 0 and position.execution and execution_status(sfn, state_machine_arn, position.execution) is None:
        start_execution(sfn, state_machine_arn, position)
        return Outcome(f"started the interrupted resume {position.execution} at record {position.next_record:,}",
                       position.execution, position.next_record)
    if not (position.status == FAILED and position.halted):
        raise NothingToDo(f"nothing to resume: tenant {ledger.tenant} is {describe_state(position)}")
    assert position.file is not None
    execution = execution_name(position.file["event_id"], position.attempt + 1)
    resumed = ledger.resume(position, execution, now)
    start_execution(sfn, state_machine_arn, resumed)
    return Outcome(
        f"resumed s3://{position.file['bucket']}/{position.file['key']} at record {resumed.next_record:,} "
        f"as execution {execution}",
        execution,
        resumed.next_record,
    )


def skip(ledger: Ledger, sqs: Any, queue_url: str, reason: str, now: float) -> Outcome:
    """Give up the tenant's halted, failed file, with the operator's reason, and start the next one.

    `NothingToDo` if there is no halted file; `ValueError` without a reason.
    """
    if not reason.strip():
        raise ValueError("a reason is required: say why this file's remaining records may be given up")
    position = ledger.read()
    if not (position.status == FAILED and position.halted):
        raise NothingToDo(f"nothing to skip: tenant {ledger.tenant} is {describe_state(position)}")
    assert position.file is not None
    skipped = ledger.skip(position, reason.strip(), now)
    return Outcome(
        f"skipped s3://{position.file['bucket']}/{position.file['key']} at record {position.next_record:,} "
        f"(reason: {reason.strip()}); the next file {_start_next(ledger, sqs, queue_url, skipped)}",
        position.execution,
        position.next_record,
    )


def skip_gap(ledger: Ledger, sqs: Any, queue_url: str, *, first_sequence: int, reason: str, now: float,
             to: int | None = None) -> Outcome:
    """`key_sequence` ordering: give up the missing sequence numbers before `to` (default: the
    lowest number that waits), with the operator's reason, and start that file.

    `NothingToDo` if no number is missing (or a file runs, or the tenant is halted: resume or
    skip the failed file first); `ValueError` without a reason or with a `to` not past the gap.
    """
    if not reason.strip():
        raise ValueError("a reason is required: say why the missing files may be given up")
    position = ledger.read()
    if position.running or position.halted:
        raise NothingToDo(f"no gap to skip: tenant {ledger.tenant} is {describe_state(position)}")
    expected = position.next_sequence(first_sequence)
    if to is None:
        waiting = ledger.waiting_sequences(after=expected - 1, limit=1)
        if not waiting:
            raise NothingToDo(f"no gap to skip: tenant {ledger.tenant} waits for sequence number {expected} "
                              "and no later file waits")
        to = waiting[0][0]
    if to <= expected:
        raise ValueError(f"--to {to} is not past the gap: the next sequence number is {expected}")
    skipped = ledger.skip_gap(position, expected, to, reason.strip(), now)
    missing = f"{expected}" if to == expected + 1 else f"{expected}-{to - 1}"
    return Outcome(
        f"gave up sequence number(s) {missing} (reason: {reason.strip()}); "
        f"file {to} {_start_next(ledger, sqs, queue_url, skipped)}",
    )


def _start_next(ledger: Ledger, sqs: Any, queue_url: str, position: Position) -> str:
    """Hand off to the next file once a skip is recorded, and say when it starts. A hand-off
    that fails (SQS throttles, the connection drops) does not undo the skip, and the operator is
    told so rather than shown a traceback: the waiting message is received again when its
    visibility timeout ends (the controller's waiting time, 240 s when the tenant halted)."""
    try:
        handed_off = hand_off(ledger, sqs, queue_url, position)
    except Exception as error:  # noqa: BLE001 - botocore ClientError, a connection error: reported
        return ("starts when its message is next received (the skip is recorded; making the message visible "
                f"now failed: {error_code(error) or type(error).__name__})")
    return "starts now" if handed_off else "starts when its message is next received"


__all__ = ["LedgerConflict", "NothingToDo", "Outcome", "describe_state", "resume", "skip", "skip_gap"]
