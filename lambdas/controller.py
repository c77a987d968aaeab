"""Controller: the per-tenant gate in front of the file-ingest workflow (docs/architecture.md, "Gate").

One SQS FIFO message (an S3 "Object Created" event) per invocation. The gate decides from the
tenant's ledger position (`lambdas/ledger/`), never from how long Step Functions keeps histories:
the current file's execution runs (wait), closed unrecorded (record, decide again) or lost
(start it again at its first unacknowledged record); a paused or halted tenant waits for
`ops`; otherwise the position is claimed for this file (conditional write) and its execution
started, named after the file's event id (`contract.execution_name`).

A message that is not a usable file event is quarantined and let go, so it cannot block the
files behind it. Waiting is a batch item failure, not an error (Lambda does not back off its
polling for those), at `waiting_visibility_seconds`; the ledger notes the message, and the
close of the file ahead makes it visible at once.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lambdas.contract import (
    CLOSED_STATUSES,
    HEAD_WAIT_METRIC,
    LATE_ARRIVAL_METRIC,
    PAUSED_METRIC,
    QUARANTINED_MESSAGES_METRIC,
    SEQUENCE_GAP_METRIC,
    ControllerEnv,
    ControllerResult,
    FileRef,
    UnusableMessageError,
    execution_name,
    quarantine_key,
    s3_key_from_event,
    sequence_of,
)
from lambdas.ledger import AlreadyClaimed, Ledger, LedgerConflict, Position, start_execution
from lambdas.runtime import BoundLogger, aws_client, emit_metrics, execution_status, lambda_handler

#: Right after StartExecution, DescribeExecution may not see the execution yet; past this age
#: an execution the ledger says is running but Step Functions does not know is started again.
GATE_GRACE_SECONDS = 300
#: A close is recorded by the workflow's last state, a moment before Step Functions closes the
#: execution: the next file waits for that moment (polling this often, this many times).
CLOSING_POLL_SECONDS = 0.2
CLOSING_POLLS = 10
#: A message that waits for a closing execution comes back this soon.
CLOSING_VISIBILITY_SECONDS = 2
#: Past this age a recorded close is not checked against Step Functions any more.
RECENT_CLOSE_SECONDS = 3600
#: Decisions retried when the ledger changes under the controller.
MAX_DECISIONS = 5
#: A message of a paused tenant comes back this soon: each pass publishes `PausedSeconds`, so
#: every 5-minute period of a pause has a point (the queue-age alarm reads 0 while it has one).
PAUSED_VISIBILITY_SECONDS = 60


def file_ref_from_sqs_body(
    body: str | None, tenant_id: str, *, landing_bucket: str, landing_prefix: str
) -> FileRef:
    """The execution input announced by an SQS body holding an S3 "Object Created" event of
    this tenant: an object version in `landing_bucket` under `landing_prefix`.

    Deterministic, so a restart with it is idempotent. The event's URL-encoded key is decoded
    here, once (`s3_key_from_event`); the FileRef carries the real key. `UnusableMessageError`
    (its reason never quotes the body) if the body is not such an event.
    """
    try:
        event = json.loads(body or "")
    except (TypeError, ValueError):
        raise UnusableMessageError(
            "SQS message body is not JSON; expected an S3 'Object Created' EventBridge event"
        ) from None

    def fail(what: str) -> UnusableMessageError:
        return UnusableMessageError(
            f"SQS message body is not an S3 'Object Created' EventBridge event: {what}"
        )

    if not isinstance(event, dict):
        raise fail("not a JSON object")
    if event.get("source") != "aws.s3" or event.get("detail-type") != "Object Created":
        raise fail("source must be 'aws.s3' and detail-type 'Object Created'")
    detail = event.get("detail")
    obj = detail.get("object") if isinstance(detail, dict) else None
    bucket = detail.get("bucket") if isinstance(detail, dict) else None
    if not isinstance(obj, dict) or not isinstance(bucket, dict):
        raise fail("missing detail.bucket or detail.object")
    fields: dict[str, Any] = {
        "id": event.get("id"),
        "detail.bucket.name": bucket.get("name"),
        "detail.object.key": obj.get("key"),
        # Required: each event processes exactly the version it announced (docs/design.md §4.5);
        # an event without one comes from a bucket whose versioning was suspended.
        "detail.object.version-id": obj.get("version-id"),
    }
    missing = [name for name, value in fields.items() if not isinstance(value, str) or not value]
    if missing:
        raise fail(f"missing or empty {', '.join(missing)}")
    if fields["detail.object.version-id"] == "null":
        # The "null" version of a bucket whose versioning is suspended: the next upload of the
        # same key replaces it, so it cannot be pinned.
        raise fail("detail.object.version-id is 'null' (versioning of the landing bucket is suspended)")
    size = obj.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise fail("detail.object.size is not a non-negative integer")
    if fields["detail.bucket.name"] != landing_bucket:
        raise UnusableMessageError(
            f"the event is for another bucket than the landing bucket {landing_bucket}"
        )
    try:
        key = s3_key_from_event(fields["detail.object.key"])
    except UnicodeDecodeError:
        raise fail("detail.object.key is not a URL-encoded UTF-8 key") from None
    if not key.startswith(landing_prefix):
        raise UnusableMessageError(f"the event's key is outside the tenant's prefix {landing_prefix}")
    return FileRef(
        tenant=tenant_id,
        event_id=fields["id"],
        bucket=fields["detail.bucket.name"],
        key=key,
        version_id=fields["detail.object.version-id"],
        size=size,
        # S3 writes "etag"; moto writes "eTag".
        etag=obj.get("etag", obj.get("eTag")),
        event_time=_event_time(event.get("time")),
    )


def _event_time(value: Any) -> str:
    # EventBridge writes an ISO 8601 string; moto writes epoch seconds.
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return dt.datetime.fromtimestamp(value, dt.UTC).isoformat().replace("+00:00", "Z")
    return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class Message:
    """The SQS message at hand: what waiting needs of it."""

    message_id: str
    receipt: str
    sent_at: float  # epoch seconds


class Gate:
    """One message's pass through the gate; see the module docstring for the rules."""

    def __init__(
        self,
        message: Message,
        *,
        config: ControllerEnv,
        ledger: Ledger,
        sfn: Any,
        sqs: Any,
        now: Callable[[], float],
        sleep: Callable[[float], None],
        log: BoundLogger,
        remaining_seconds: Callable[[], float] = lambda: float("inf"),
    ) -> None:
        self.message = message
        self.config, self.ledger, self.sfn, self.sqs = config, ledger, sfn, sqs
        self.remaining = remaining_seconds
        self.now, self.sleep, self.log = now, sleep, log
        #: Set when the decision found the file ahead closing (its execution finishing its last state).
        self.closing_seen = False

    def handle(self, file: FileRef) -> ControllerResult:
        """Start `file`, let its message go, or keep the message waiting."""
        for _ in range(MAX_DECISIONS):
            try:
                position = self.ledger.read()
                self.closing_seen = False
                decided = self._decide(position, file)
                self._publish_head_wait(position)
                return decided
            except LedgerConflict:
                self.log.info("ledger changed while deciding; deciding again")
        return self._wait(None, "the ledger kept changing", CLOSING_VISIBILITY_SECONDS)

    def _decide(self, position: Position, file: FileRef) -> ControllerResult:
        if position.file_id == file["event_id"]:
            if position.running:
                self._start(position)
                return _result("running", position.execution)
            self.log.info(
                "file already processed (redelivered message); letting the message go",
                extra={"status": position.status},
            )
            return _result("done", position.execution)
        if position.paused:
            return self._wait(
                position,
                f"tenant paused ({position.pause_reason}); run ops unpause",
                PAUSED_VISIBILITY_SECONDS,
            )
        sequence = self._sequence(file)
        if position.running:
            return self._decide_running(position, sequence)
        if position.halted:
            return self._wait(
                position,
                f"tenant halted after file {position.file_id} failed; run ops resume, ops replace or "
                "ops skip",
                sequence=sequence,
            )
        if position.execution and self._closing(position):
            return self._wait(
                position,
                f"execution {position.execution} is closing",
                CLOSING_VISIBILITY_SECONDS,
                sequence=sequence,
            )
        if sequence is None:
            self._check_arrival_order(position, file)
        else:
            expected = position.next_sequence(self.config.first_sequence)
            if sequence < expected:
                if self.ledger.claimed_before(file):
                    self.log.info("file was processed before (duplicate event); letting the message go")
                    return _result("done", None)
                raise UnusableMessageError(
                    f"sequence number {sequence} is behind the tenant's next one, {expected}: a file with it was "
                    "processed or given up already (upload it under a new sequence number)"
                )
            if sequence > expected:
                self._publish({SEQUENCE_GAP_METRIC: self._idle_wait(position)})
                return self._wait(
                    position,
                    f"sequence number {expected} has not arrived; file {sequence} waits "
                    f"(upload it, or run ops skip-gap)",
                    sequence=sequence,
                )
        execution = execution_name(file["event_id"])
        try:
            claimed = self.ledger.claim(position, file, execution, self.now(), sequence=sequence)
        except AlreadyClaimed:
            self.log.info("file was processed before (duplicate event); letting the message go")
            return _result("done", None)
        if sequence is not None:
            self.ledger.forget_waiting_sequence(sequence)
        self._start(claimed)
        return _result("started", execution)

    def _sequence(self, file: FileRef) -> int | None:
        """`key_sequence` ordering: the file's sequence number (None in `arrival` ordering)."""
        if self.config.ordering != "key_sequence":
            return None
        sequence = sequence_of(file["key"], self.config.sequence_pattern)
        if sequence is None:
            raise UnusableMessageError(
                f"the key has no sequence number matching the tenant's sequence_pattern {self.config.sequence_pattern!r}"
            )
        return sequence

    def _check_arrival_order(self, position: Position, file: FileRef) -> None:
        """S3 does not order its notifications across keys: an event older than the last file
        started arrived late. It is processed now, after the newer file (logged and counted)."""
        last = position.file
        if (
            last is None
            or _event_datetime(file["event_time"]) is None
            or _event_datetime(last["event_time"]) is None
        ):
            return
        if _event_datetime(file["event_time"]) < _event_datetime(last["event_time"]):  # type: ignore[operator]  # neither is None: returned above
            self.log.warning(
                "file event arrived after a newer file started (S3 does not order notifications across keys)",
                extra={
                    "event_time": file["event_time"],
                    "last_started_key": last["key"],
                    "last_started_event_time": last["event_time"],
                },
            )
            self._publish({LATE_ARRIVAL_METRIC: 1})

    def _publish(self, metrics: dict[str, float]) -> None:
        """One EMF record of the tenant's `metrics` (values rounded to the millisecond)."""
        emit_metrics(
            namespace=self.config.metric_namespace,
            tenant_id=self.config.tenant_id,
            now=self.now(),
            metrics={metric: round(value, 3) for metric, value in metrics.items()},
        )

    def _decide_running(self, position: Position, sequence: int | None = None) -> ControllerResult:
        assert position.execution is not None
        status = self._describe(position.execution)
        if status in CLOSED_STATUSES:
            # The close was not recorded (the workflow's last state and the status-change
            # rule both missed it): record it here, then decide again.
            self.log.warning(
                "execution closed without its close being recorded; recording it",
                extra={"execution": position.execution, "status": status},
            )
            self.ledger.record_close(
                position.execution,
                status,
                halt_on_failure=self._halts(),
                now=self.now(),
                error="ClosedUnrecorded",
                cause=f"Step Functions reports {status}; found by the controller",
            )
            raise LedgerConflict("recorded a close; decide again")
        if status is None:
            age = self.now() - (position.started_at or 0)
            if age < GATE_GRACE_SECONDS:
                return self._wait(
                    position,
                    f"execution {position.execution} not visible yet (started {age:.0f} s ago)",
                    CLOSING_VISIBILITY_SECONDS,
                    sequence=sequence,
                )
            self.log.warning(
                "the ledger's running execution is unknown to Step Functions; starting it again from the ledger",
                extra={"execution": position.execution, "next_record": position.next_record},
            )
            self._start(position)
        return self._wait(position, f"execution {position.execution} is running", sequence=sequence)

    # -- the stall signal ----------------------------------------------------------------------

    def _publish_head_wait(self, position: Position) -> None:
        """Publish how long this message has waited while no file of the tenant ran (EMF);
        called once a decision on `position` is made.

        0 while a file runs or is closing: a burst of files queued behind a running one is normal, not a
        stall. Otherwise the wait counts from the later of the message's send time and the
        last close (`closed_at`), so a halted tenant's head message accrues wait from the
        failure on, and a message handed off by a close starts near 0. The stall alarm watches
        its Maximum (`TenantMetrics.head_message_wait`, pipeline_constructs/metrics.py).

        A paused tenant is not stalled: 0, and `PausedSeconds` (since `ops pause`) instead."""
        if position.paused:
            self._publish(
                {
                    HEAD_WAIT_METRIC: 0.0,
                    PAUSED_METRIC: max(0.0, self.now() - (position.paused_at or self.now())),
                }
            )
            return
        self._publish(
            {HEAD_WAIT_METRIC: 0.0 if position.running or self.closing_seen else self._idle_wait(position)}
        )

    def _idle_wait(self, position: Position) -> float:
        """How long this message has waited since the tenant could have gone on: since the later
        of its send, the last close and the last `ops unpause`."""
        return max(
            0.0,
            self.now() - max(self.message.sent_at, position.closed_at or 0.0, position.unpaused_at or 0.0),
        )

    # -- Step Functions -------------------------------------------------------------------------

    def _describe(self, execution: str) -> str | None:
        return execution_status(self.sfn, self.config.state_machine_arn, execution)

    def _closing(self, position: Position) -> bool:
        """True if the recorded close is recent and Step Functions still runs the execution
        after a short wait (its last state recorded the close)."""
        if position.closed_at is None or self.now() - position.closed_at > RECENT_CLOSE_SECONDS:
            return False
        assert position.execution is not None
        for attempt in range(CLOSING_POLLS):
            if self._describe(position.execution) not in ("RUNNING", "PENDING_REDRIVE"):
                return False
            self.closing_seen = True
            # Keep time for the decision's writes: never poll into the invocation's deadline.
            if attempt + 1 < CLOSING_POLLS and self.remaining() > 2 * CLOSING_POLL_SECONDS + 0.5:
                self.sleep(CLOSING_POLL_SECONDS)
            else:
                break
        return True

    def _start(self, position: Position) -> None:
        """Start the position's execution (idempotent: `ExecutionAlreadyExists` is success)."""
        if start_execution(self.sfn, self.config.state_machine_arn, position):
            self.log.info(
                "execution started",
                extra={"execution": position.execution, "start_record": position.next_record},
            )
        else:
            self.log.info(
                "execution already exists (redelivered message); nothing to start",
                extra={"execution": position.execution},
            )

    # -- waiting --------------------------------------------------------------------------------

    def _wait(
        self,
        position: Position | None,
        reason: str,
        visibility: int | None = None,
        *,
        sequence: int | None = None,
    ) -> ControllerResult:
        """Keep the message in the queue; note it in the ledger so the close of the file ahead
        makes it visible at once. The visibility is set first: a close that comes after the
        note then always finds the message (and a close before it changes `seq`).

        `key_sequence` ordering notes the message under its sequence number instead (several
        wait at once, the close wakes the next number's), then checks that the position did
        not change meanwhile: if it did, the close may have missed the note, so decide again."""
        seconds = visibility or self.config.waiting_visibility_seconds
        message = self.message
        self.sqs.change_message_visibility(
            QueueUrl=self.config.queue_url, ReceiptHandle=message.receipt, VisibilityTimeout=seconds
        )
        if position is not None and sequence is not None:
            self.ledger.note_waiting_sequence(sequence, message.message_id, message.receipt, self.now())
            if self.ledger.read().seq != position.seq:
                raise LedgerConflict("the position changed while noting the waiting message")
        elif position is not None:
            self.ledger.record_waiting(
                position, message.message_id, message.receipt, self.now(), message.sent_at
            )
        self.log.info(
            "gate busy; the message waits in the queue", extra={"reason": reason, "visible_in": seconds}
        )
        return ControllerResult(
            batchItemFailures=[{"itemIdentifier": message.message_id}],
            outcome="waiting",
            execution_name=position.execution if position else None,
        )

    def _halts(self) -> bool:
        return self.config.on_failure == "halt"


def _event_datetime(value: str) -> dt.datetime | None:
    try:
        parsed = dt.datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _result(outcome: str, execution: str | None) -> ControllerResult:
    return ControllerResult(batchItemFailures=[], outcome=outcome, execution_name=execution)


def process_message(
    record: dict[str, Any],
    *,
    config: ControllerEnv,
    sfn: Any,
    ddb: Any,
    sqs: Any,
    now: Callable[[], float],
    log: BoundLogger,
    sleep: Callable[[float], None] = time.sleep,
    remaining_seconds: Callable[[], float] = lambda: float("inf"),
    s3: Any = None,
) -> ControllerResult:
    """Run the gate for one SQS record: start its file, let it go, keep it waiting, or
    quarantine it (not a usable file event).

    `sfn`, `ddb`, `sqs`, `s3` are boto3 clients (`s3`, only used to quarantine, defaults to the
    runtime's); `now` returns epoch seconds; `log` gets the event's fields bound once known.
    """
    sent_at = int(record["attributes"]["SentTimestamp"]) / 1000
    try:
        file = file_ref_from_sqs_body(
            record.get("body"),
            config.tenant_id,
            landing_bucket=config.landing_bucket,
            landing_prefix=config.landing_prefix,
        )
        log.bind(event_id=file["event_id"], key=file["key"], version_id=file["version_id"])
        message = Message(record["messageId"], record["receiptHandle"], sent_at)
        gate = Gate(
            message,
            config=config,
            ledger=Ledger(ddb, config.ledger_table_name, config.tenant_id),
            sfn=sfn,
            sqs=sqs,
            now=now,
            sleep=sleep,
            log=log,
            remaining_seconds=remaining_seconds,
        )
        return gate.handle(file)
    except UnusableMessageError as error:
        # Raised by the parse, or by a gate that finds the message unusable before it acts on it.
        return quarantine(
            record, error, config=config, s3=s3 if s3 is not None else aws_client("s3"), now=now(), log=log
        )


def quarantine(
    record: dict[str, Any],
    error: UnusableMessageError,
    *,
    config: ControllerEnv,
    s3: Any,
    now: float,
    log: BoundLogger,
) -> ControllerResult:
    """Keep an unusable message in the work bucket, then let it go, so the files behind it go on.

    The stored object holds everything `ops quarantine replay` needs (the body, the message's
    attributes) and why it was refused. A failed write propagates: the message stays in the
    queue, never deleted without being stored. The log line names the reason and the message
    id, never the body (it may hold anything).
    """
    message_id = str(record.get("messageId"))
    key = quarantine_key(config.tenant_id, now, message_id)
    stored = {
        "tenant": config.tenant_id,
        "message_id": message_id,
        "reason": error.reason,
        "quarantined_at": dt.datetime.fromtimestamp(now, dt.UTC).isoformat().replace("+00:00", "Z"),
        "queue_arn": record.get("eventSourceARN"),
        "attributes": record.get("attributes") or {},
        "message_attributes": record.get("messageAttributes") or {},
        "body": record.get("body"),
    }
    s3.put_object(
        Bucket=config.work_bucket,
        Key=key,
        Body=json.dumps(stored, indent=2).encode(),
        ContentType="application/json",
    )
    log.error(
        "unusable message quarantined; the files behind it go on",
        extra={
            "reason": error.reason,
            "message_id": message_id,
            "quarantine_key": key,
            "error_type": type(error).__name__,
        },
    )
    emit_metrics(
        namespace=config.metric_namespace,
        tenant_id=config.tenant_id,
        now=now,
        metrics={QUARANTINED_MESSAGES_METRIC: 1},
    )
    return ControllerResult(batchItemFailures=[], outcome="quarantined", execution_name=None)


@lambda_handler(
    "controller",
    ControllerEnv,
    log_fields=lambda event: {"records": len(event.get("Records") or [])},
    clients=("stepfunctions", "dynamodb", "sqs", "s3"),
)
def handler(event: dict[str, Any], config: ControllerEnv, log: BoundLogger, context: Any) -> ControllerResult:
    """SQS event source entry point (batch size 1, partial batch responses on)."""
    records = event.get("Records") or []
    if len(records) != 1:
        raise ValueError(f"expected exactly one SQS record (batch size 1), got {len(records)}")
    log.bind(message_id=records[0].get("messageId"))
    return process_message(
        records[0],
        config=config,
        sfn=aws_client("stepfunctions"),
        ddb=aws_client("dynamodb"),
        sqs=aws_client("sqs"),
        s3=aws_client("s3"),
        now=time.time,
        log=log,
        remaining_seconds=lambda: context.get_remaining_time_in_millis() / 1000,
    )
