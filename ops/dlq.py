"""`ops dlq list|replay TENANT`: the events EventBridge could not deliver for a tenant.

EventBridge retries a rule's target for a day (185 attempts), then puts the event in the
tenant's intake dead-letter queue (`<id>-intake-dlq`, a standard queue: EventBridge refuses a
FIFO one) with message attributes saying why (`ERROR_CODE`, `ERROR_MESSAGE`, `RULE_ARN`, ...).

Replay puts each kind back where its rule would have delivered it: S3 "Object Created" events
into the tenant's queue in upload order (the controller's event markers make one that was in
fact processed a harmless duplicate), Step Functions status changes to the tenant's closer
(idempotent); anything else is listed and left. A DLQ message is deleted only after its event
was delivered, so a replay that stops part-way leaves every undelivered event in the DLQ.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from lambdas.contract import queue_message
from ops.discovery import DiscoveryError
from pipeline_constructs.registry import TenantResources

#: How long the messages a command reads stay invisible to anyone else (they are made visible
#: again at once when the command leaves them in the queue).
READ_VISIBILITY_SECONDS = 300
FILE_EVENT, STATUS_EVENT, OTHER = "file", "status", "other"
#: What EventBridge writes on a dead-lettered event, shown by `list`.
REASON_ATTRIBUTES = ("ERROR_CODE", "ERROR_MESSAGE", "RULE_ARN", "TARGET_ARN", "RETRY_ATTEMPTS")


class DlqError(DiscoveryError):
    """The tenant's deployment has no intake dead-letter queue (deploy this version first)."""


@dataclass(frozen=True)
class DeadLetter:
    """One message of the intake dead-letter queue."""

    message_id: str
    receipt_handle: str
    body: str
    kind: str
    event: dict[str, Any] | None
    reason: dict[str, str] = field(default_factory=dict)

    @property
    def event_id(self) -> str:
        return str((self.event or {}).get("id", ""))

    @property
    def key(self) -> str:
        return str((((self.event or {}).get("detail") or {}).get("object") or {}).get("key", ""))

    def order(self) -> tuple[str, str, str]:
        """Upload order: the event time, then the key, then S3's sequencer (hex; compared
        after right-padding the shorter with zeros, as S3 documents; only meaningful for
        the same key)."""
        obj = ((self.event or {}).get("detail") or {}).get("object") or {}
        return (
            str((self.event or {}).get("time", "")),
            self.key,
            str(obj.get("sequencer", "")).upper().ljust(32, "0"),
        )

    def describe(self) -> str:
        what = {
            FILE_EVENT: f"file {self.key} (event {self.event_id}, {(self.event or {}).get('time', '?')})",
            STATUS_EVENT: "status change {status} of execution {name} (event {id})".format(
                status=((self.event or {}).get("detail") or {}).get("status", "?"),
                name=str(((self.event or {}).get("detail") or {}).get("executionArn", "?")).rsplit(":", 1)[
                    -1
                ],
                id=self.event_id,
            ),
            OTHER: f"not an event ops can replay (message {self.message_id}, {len(self.body)} bytes)",
        }[self.kind]
        why = ", ".join(f"{k}={v}" for k, v in self.reason.items() if k in ("ERROR_CODE", "ERROR_MESSAGE"))
        return f"{what}{': ' + why if why else ''}"


def classify(body: str) -> tuple[str, dict[str, Any] | None]:
    """What a dead-lettered message holds: a file event, a status change, or something else."""
    try:
        event = json.loads(body)
    except ValueError:
        return OTHER, None
    if not isinstance(event, dict) or not event.get("id"):
        return OTHER, None
    if event.get("source") == "aws.s3" and event.get("detail-type") == "Object Created":
        obj = (event.get("detail") or {}).get("object") if isinstance(event.get("detail"), dict) else None
        return (FILE_EVENT, event) if isinstance(obj, dict) and obj.get("key") else (OTHER, None)
    if (
        event.get("source") == "aws.states"
        and event.get("detail-type") == "Step Functions Execution Status Change"
    ):
        return STATUS_EVENT, event
    return OTHER, None


def read_all(sqs: Any, dlq_url: str) -> list[DeadLetter]:
    """Every message of the DLQ, each received once and kept invisible while the command runs."""
    found: dict[str, DeadLetter] = {}
    for message in _receive(sqs, dlq_url):
        if message["MessageId"] in found:
            continue
        kind, event = classify(message.get("Body", ""))
        reason = {
            name: value.get("StringValue", "")
            for name, value in (message.get("MessageAttributes") or {}).items()
            if name in REASON_ATTRIBUTES
        }
        found[message["MessageId"]] = DeadLetter(
            message["MessageId"], message["ReceiptHandle"], message.get("Body", ""), kind, event, reason
        )
    return list(found.values())


def _receive(sqs: Any, dlq_url: str) -> Iterator[dict[str, Any]]:
    while True:
        # A long poll (even 1 s) asks every SQS server, so an empty answer means empty.
        messages = sqs.receive_message(
            QueueUrl=dlq_url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=READ_VISIBILITY_SECONDS,
            WaitTimeSeconds=1,
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        if not messages:
            return
        yield from messages


def release(sqs: Any, dlq_url: str, letters: list[DeadLetter]) -> None:
    """Make messages this command read but did not deliver visible again at once."""
    for letter in letters:
        sqs.change_message_visibility(
            QueueUrl=dlq_url, ReceiptHandle=letter.receipt_handle, VisibilityTimeout=0
        )


@dataclass
class ReplayReport:
    """What a replay did, in the order it did it."""

    files: list[str] = field(default_factory=list)
    status_changes: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)

    def lines(self, tenant: str) -> list[str]:
        out = [f"{tenant}: replayed {len(self.files)} file event(s) into the queue, in upload order"]
        out += [f"  {key}" for key in self.files]
        out.append(f"{tenant}: handed {len(self.status_changes)} status change(s) to the closer")
        out += [f"  {name}" for name in self.status_changes]
        if self.left:
            out.append(
                f"{tenant}: left {len(self.left)} message(s) in the dead-letter queue (not replayable):"
            )
            out += [f"  {line}" for line in self.left]
        return out


def list_tenant(tenant: TenantResources, sqs: Any) -> list[DeadLetter]:
    """The DLQ's messages in replay order (file events in upload order first); all left in place."""
    letters = read_all(sqs, _dlq_url(tenant))
    release(sqs, _dlq_url(tenant), letters)
    return _in_replay_order(letters)


def replay_tenant(tenant: TenantResources, *, sqs: Any, lambda_: Any) -> ReplayReport:
    """Replay the tenant's DLQ (see the module docstring); stops at the first failure."""
    dlq_url = _dlq_url(tenant)
    letters = _in_replay_order(read_all(sqs, dlq_url))
    report, pending = ReplayReport(), list(letters)
    try:
        while pending:
            letter = pending[0]
            if letter.kind == FILE_EVENT:
                sqs.send_message(
                    **queue_message(tenant.queue_url, tenant.tenant_id, letter.body, letter.event_id)
                )
                report.files.append(letter.key)
            elif letter.kind == STATUS_EVENT:
                _invoke_closer(lambda_, tenant, letter)
                report.status_changes.append(letter.describe())
            else:
                report.left.append(letter.describe())
                pending.pop(0)
                continue
            # Delivered: only now may the dead letter go.
            sqs.delete_message(QueueUrl=dlq_url, ReceiptHandle=letter.receipt_handle)
            pending.pop(0)
    finally:
        undelivered = [letter for letter in pending if letter.kind != OTHER]
        release(sqs, dlq_url, undelivered + [letter for letter in letters if letter.kind == OTHER])
    return report


def _invoke_closer(lambda_: Any, tenant: TenantResources, letter: DeadLetter) -> None:
    response = lambda_.invoke(
        FunctionName=tenant.closer_function_name,
        InvocationType="RequestResponse",
        Payload=letter.body.encode(),
    )
    if response.get("FunctionError"):
        payload = response["Payload"].read().decode(errors="replace")[:500]
        raise RuntimeError(f"the closer failed on {letter.describe()}: {payload}")


def _in_replay_order(letters: list[DeadLetter]) -> list[DeadLetter]:
    """File events in upload order, then status changes (by event time), then the rest."""
    files = sorted((letter for letter in letters if letter.kind == FILE_EVENT), key=DeadLetter.order)
    statuses = sorted(
        (letter for letter in letters if letter.kind == STATUS_EVENT),
        key=lambda letter: str((letter.event or {}).get("time", "")),
    )
    return files + statuses + [letter for letter in letters if letter.kind == OTHER]


def _dlq_url(tenant: TenantResources) -> str:
    if not tenant.intake_dlq_url:
        raise DlqError(
            f"tenant {tenant.tenant_id}'s stack has no IntakeDlqUrl output: deploy this version first"
        )
    return tenant.intake_dlq_url
