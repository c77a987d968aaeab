"""What an operator does to a tenant (`python -m ops`): resume, replace or skip its failed
file, pause and unpause it.

All act only through the ledger's conditional writes, so they can never race the gate into
running two files; each refuses, with the reason and changing nothing, when it does not apply.
A resumed file continues at the first record the core system did not acknowledge, under a
new execution name (`contract.execution_name`); a replacement runs in the failed file's place,
before the files waiting behind it. The boto3 clients are passed in: the same code runs
against AWS and the local runtime.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lambdas.chunk_format import file_records
from lambdas.contract import (
    FileRef,
    MalformedFileError,
    chunk_prefix,
    execution_name,
    manifest_key,
    sequence_of,
)
from lambdas.ledger import (
    FAILED,
    PAUSED,
    REPLACEMENT_PREFIX,
    AlreadyClaimed,
    Ledger,
    LedgerConflict,
    Position,
    hand_off,
    start_execution,
    version_digest,
)
from lambdas.runtime import error_code, execution_status

if TYPE_CHECKING:
    from collections.abc import Mapping


class NothingToDo(Exception):
    """The tenant is not in a state the action applies to; the message says which state it is in."""


class Refused(NothingToDo):
    """The action does not apply to what was named (a key outside the prefix, a version that does
    not exist, records that differ); the message says why. Nothing was changed."""


@dataclass(frozen=True)
class Outcome:
    """What an action did, for the operator."""

    message: str
    execution: str | None = None
    start_record: int | None = None


def describe_state(position: Position) -> str:
    """One phrase for a tenant's state: idle, running <file>, halted on <file>, ..."""
    file: Mapping[str, Any] = position.file or {}
    if position.paused:
        stopped = (
            f", file {file.get('key', '?')} stopped at record {position.next_record:,}"
            if position.status == PAUSED
            else ""
        )
        return f"paused ({position.pause_reason or 'no reason given'}{stopped})"
    if position.status is None and position.sequence is None:
        return "idle (no file processed yet)"
    if position.status is None:
        return f"idle (sequence numbers up to {position.sequence} given up)"
    key = file.get("key", "?")
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
    _refuse_while_paused(ledger, position, "resume", NothingToDo)
    interrupted = _finish_interrupted(position, sfn, state_machine_arn)
    if interrupted is not None:
        return interrupted
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


def _refuse_while_paused(ledger: Ledger, position: Position, action: str, refusal: type[NothingToDo]) -> None:
    """A paused tenant starts nothing: not even an interrupted resume or replace (the unpause
    starts that)."""
    if position.paused:
        raise refusal(
            f"nothing to {action} while paused: tenant {ledger.tenant} is {describe_state(position)}; "
            f"run ops unpause {ledger.tenant} first"
        )


def _finish_interrupted(position: Position, sfn: Any, state_machine_arn: str) -> Outcome | None:
    """Start the execution an operator's transition (resume, replace, unpause) recorded as
    running when Step Functions does not know it (the command was cut short after the
    ledger write); None if there is none such."""
    made_by_operator = position.attempt > 0 or position.replaces is not None
    if not (position.running and made_by_operator and position.execution):
        return None
    if execution_status(sfn, state_machine_arn, position.execution) is not None:
        return None
    start_execution(sfn, state_machine_arn, position)
    return Outcome(
        f"started the interrupted {position.execution} at record {position.next_record:,}",
        position.execution,
        position.next_record,
    )


def replacement_event_id(bucket: str, key: str, version_id: str) -> str:
    """The event id a correction is made current under by `ops replace`: the same for the same
    object version (its execution name, its chunk folder), never an S3 event's id."""
    return f"{REPLACEMENT_PREFIX}{version_digest(bucket, key, version_id)[:32]}"


def replace(
    ledger: Ledger,
    sfn: Any,
    s3: Any,
    state_machine_arn: str,
    *,
    landing_prefix: str,
    key: str,
    version_id: str | None,
    now: float,
    from_record: int = 0,
    work_bucket: str = "",
    sequence_pattern: str | None = None,
) -> Outcome:
    """Make the object version `key`/`version_id` (default: the key's latest) the halted
    tenant's current file in the failed file's place, and start it: it runs before every file
    waiting in the queue, from record 0, or from `from_record` when its first `from_record`
    records equal the failed version's (compared record by record, as the core system gets
    them; the failed version must have got that far).

    `Refused` (nothing changed) if the tenant is not halted on a failed file, is paused, the key
    is outside `landing_prefix`, the version does not exist, is the failed version itself (that
    is `resume`) or was ingested before, or the records differ. Also finishes a replace that
    was cut short, like `resume`. `s3`: the landing bucket's client; `work_bucket`: where the
    failed file's manifest is (its format, for `from_record`); `sequence_pattern`: with
    `key_sequence` ordering, the correction's key must carry the failed file's sequence number
    (it takes its place: another number would be taken, or missed, later)."""
    position = ledger.read()
    tenant = ledger.tenant
    _refuse_while_paused(ledger, position, "replace", Refused)
    interrupted = _finish_interrupted(position, sfn, state_machine_arn)
    if interrupted is not None:
        return interrupted
    if not (position.status == FAILED and position.halted):
        raise Refused(
            f"nothing to replace: tenant {tenant} is {describe_state(position)} (replace takes the place "
            "of a failed file the tenant is halted on)"
        )
    assert position.file is not None
    failed = position.file
    if not key.startswith(landing_prefix):
        raise Refused(
            f"{key} is outside tenant {tenant}'s prefix {landing_prefix}: the correction must be uploaded "
            "under it"
        )
    if sequence_pattern and sequence_of(key, sequence_pattern) != position.sequence:
        raise Refused(
            f"{key} does not carry the failed file's sequence number {position.sequence} (ordering "
            f"key_sequence, pattern {sequence_pattern!r}): upload the correction under the failed file's key, "
            "or one with the same number"
        )
    if from_record < 0:
        raise ValueError(f"--from-record {from_record}: a record number counts from 0")
    head = _head(s3, failed["bucket"], key, version_id)
    version_id = head["VersionId"]
    if (key, version_id) == (failed["key"], failed["version_id"]):
        raise Refused(
            f"s3://{failed['bucket']}/{key} version {version_id} is the failed version itself: to run it "
            f"again, run ops resume {tenant}"
        )
    if from_record > position.next_record:
        raise Refused(
            f"--from-record {from_record}: the core system acknowledged only records 0 to "
            f"{position.next_record - 1} of the failed version (use --from-record {position.next_record} "
            "or less)"
            if position.next_record
            else f"--from-record {from_record}: the core system acknowledged no record of the failed version; "
            "the correction is sent whole"
        )
    if from_record:
        _check_same_records(s3, work_bucket, tenant, position, key, version_id, from_record)
    file = FileRef(
        tenant=tenant,
        event_id=replacement_event_id(failed["bucket"], key, version_id),
        bucket=failed["bucket"],
        key=key,
        version_id=version_id,
        size=int(head.get("ContentLength", 0)),
        etag=str(head.get("ETag", "")).strip('"'),
        event_time=_iso(head.get("LastModified")),
    )
    execution = execution_name(file["event_id"])
    try:
        replaced = ledger.replace(position, file, execution, now, start_record=from_record)
    except AlreadyClaimed:
        ran_as = ledger.version_claim(failed["bucket"], key, version_id) or "an earlier execution"
        raise Refused(
            f"s3://{failed['bucket']}/{key} version {version_id} was ingested before (as {ran_as}): a "
            "version runs once; upload the correction again (a new version) and replace with that"
        ) from None
    start_execution(sfn, state_machine_arn, replaced)
    where = f"from record {from_record:,}" if from_record else "whole (new idempotency keys)"
    return Outcome(
        f"replaced s3://{failed['bucket']}/{failed['key']} (version {failed['version_id']}, failed at record "
        f"{position.next_record:,}) with s3://{failed['bucket']}/{key} version {version_id}, sent {where} as "
        f"execution {execution}; the files waiting behind it follow in order",
        execution,
        from_record,
    )


def _head(s3: Any, bucket: str, key: str, version_id: str | None) -> dict[str, Any]:
    """The object version (the key's latest without `version_id`); `Refused` if it does not exist."""
    what = f"s3://{bucket}/{key}" + (f" version {version_id}" if version_id else "")
    try:
        head: dict[str, Any] = s3.head_object(
            Bucket=bucket, Key=key, **({"VersionId": version_id} if version_id else {})
        )
    except Exception as error:  # botocore ClientError
        code = error_code(error)
        if code in ("404", "NoSuchKey", "NoSuchVersion", "400", "InvalidArgument", "405", "MethodNotAllowed"):
            raise Refused(
                f"{what} does not exist (or is a delete marker): upload the correction first, then "
                "replace with the version id S3 gave it"
            ) from None
        raise
    if not head.get("VersionId") or head["VersionId"] == "null":
        raise Refused(
            f"{what} has no version id (the landing bucket's versioning is suspended?): it cannot be pinned"
        )
    return head


def _check_same_records(
    s3: Any, work_bucket: str, tenant: str, position: Position, key: str, version_id: str, count: int
) -> None:
    """`Refused` unless the first `count` records of the correction are those of the failed
    version, byte for byte as the core system got them (the failed file's format from its
    manifest)."""
    assert position.file is not None
    failed = position.file
    try:
        manifest = json.loads(
            s3.get_object(
                Bucket=work_bucket, Key=manifest_key(chunk_prefix(tenant, execution_name(failed["event_id"])))
            )["Body"].read()
        )
    except Exception as error:  # botocore ClientError (the manifest expired), or no work bucket
        raise Refused(
            f"--from-record {count}: the failed file's manifest is gone from the work bucket "
            f"({error_code(error) or type(error).__name__}), so its records cannot be compared; replace "
            "without --from-record (the correction is sent whole)"
        ) from None
    fmt = manifest["format"]
    bodies = []
    try:
        for k, v in ((failed["key"], failed["version_id"]), (key, version_id)):
            bodies.append(s3.get_object(Bucket=failed["bucket"], Key=k, VersionId=v)["Body"])
    except Exception as error:  # botocore ClientError: the failed version is gone (deleted, or expired)
        for body in bodies:
            body.close()
        code = error_code(error)
        if code not in ("NoSuchKey", "NoSuchVersion", "404", "400", "InvalidArgument", "AccessDenied"):
            raise
        raise Refused(
            f"--from-record {count}: the failed version can no longer be read ({code}), so its records "
            "cannot be compared; replace without --from-record (the correction is sent whole)"
        ) from None
    try:
        ours, theirs = (file_records(body, fmt) for body in bodies)
        for index in range(count):
            sent = next(ours)
            try:
                corrected = next(theirs, None)
            except MalformedFileError as error:
                raise Refused(
                    f"--from-record {count}: record {index} of the correction is malformed ({error}); "
                    "the first records must be those the core system acknowledged"
                ) from None
            if corrected is None:
                raise Refused(f"--from-record {count}: the correction has only {index} records")
            if corrected != sent:
                raise Refused(
                    f"--from-record {count}: record {index} of the correction differs from the one the core "
                    f"system acknowledged; replace with --from-record {index} or less, or send it whole "
                    "(without --from-record)"
                )
    finally:
        for body in bodies:
            body.close()


def _iso(value: Any) -> str:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    return str(value or "")


def pause(ledger: Ledger, reason: str, now: float) -> Outcome:
    """Hold the tenant: no file starts, the running one stops at its next chunk boundary, until
    `unpause`. `NothingToDo` if it is paused already; `ValueError` without a reason."""
    if not reason.strip():
        raise ValueError("a reason is required: say why the tenant is held (shown by ops status)")
    position = ledger.read()
    if position.paused:
        raise NothingToDo(f"tenant {ledger.tenant} is {describe_state(position)} already")
    ledger.pause(position, reason.strip(), now)
    running = (
        f"; {position.file['key']} stops at its next chunk boundary (record {position.next_record:,} or later)"
        if position.running and position.file
        else ""
    )
    return Outcome(
        f"paused (reason: {reason.strip()}): no file starts until ops unpause {ledger.tenant}{running}",
        position.execution,
        position.next_record,
    )


def unpause(
    ledger: Ledger, sfn: Any, sqs: Any, state_machine_arn: str, queue_url: str, now: float
) -> Outcome:
    """End the pause: a file it stopped runs on at its first unacknowledged record (a new
    attempt), else the next file starts. `NothingToDo` if the tenant is not paused (also
    finishes an unpause that was cut short)."""
    position = ledger.read()
    if not position.paused:
        interrupted = _finish_interrupted(position, sfn, state_machine_arn)
        if interrupted is not None:
            return interrupted
        raise NothingToDo(f"nothing to unpause: tenant {ledger.tenant} is {describe_state(position)}")
    if position.status != PAUSED:
        unpaused = ledger.unpause(position, now)
        # A resume or replace cut short before the pause starts now, with the pause lifted.
        interrupted = _finish_interrupted(unpaused, sfn, state_machine_arn)
        if interrupted is not None:
            return Outcome(
                f"unpaused; {interrupted.message}", interrupted.execution, interrupted.start_record
            )
        return Outcome(
            f"unpaused; {describe_state(unpaused)}"
            + (
                "" if unpaused.running else f"; the next file {_start_next(ledger, sqs, queue_url, unpaused)}"
            ),
            unpaused.execution,
        )
    assert position.file is not None
    execution = execution_name(position.file["event_id"], position.attempt + 1)
    resumed = ledger.unpause(position, now, execution=execution)
    start_execution(sfn, state_machine_arn, resumed)
    return Outcome(
        f"unpaused: s3://{position.file['bucket']}/{position.file['key']} runs on at record "
        f"{resumed.next_record:,} as execution {execution}",
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


def skip_gap(
    ledger: Ledger,
    sqs: Any,
    queue_url: str,
    *,
    first_sequence: int,
    reason: str,
    now: float,
    to: int | None = None,
) -> Outcome:
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
            raise NothingToDo(
                f"no gap to skip: tenant {ledger.tenant} waits for sequence number {expected} "
                "and no later file waits"
            )
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
    if position.paused:
        return f"starts after ops unpause {ledger.tenant}"
    if position.halted:
        return "waits: the tenant is halted (resume, replace or skip its failed file)"
    try:
        handed_off = hand_off(ledger, sqs, queue_url, position)
    except Exception as error:
        return (
            "starts when its message is next received (the skip is recorded; making the message visible "
            f"now failed: {error_code(error) or type(error).__name__})"
        )
    return "starts now" if handed_off else "starts when its message is next received"


__all__ = [
    "LedgerConflict",
    "NothingToDo",
    "Outcome",
    "Refused",
    "describe_state",
    "pause",
    "replace",
    "resume",
    "skip",
    "skip_gap",
    "unpause",
]
