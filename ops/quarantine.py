"""`ops quarantine list|replay`: the messages a tenant's controller set aside, and putting them back.

The controller quarantines a queue message that is not a usable file event of the tenant
(`contract.UnusableMessageError`): it writes the body, the message's attributes and the
reason to `quarantine/<tenant>/<UTC time>-<message id>.json` in the work bucket and lets the
message go, so the files behind it go on. `list` shows what, why and when (the body only on
request: it may hold anything); `replay` sends a stored body back into the tenant's queue, then
moves the object to `quarantine/<tenant>/replayed/`, so it is never replayed twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from lambdas.contract import quarantine_prefix, queue_message, replayed_prefix
from lambdas.operations import NothingToDo


@dataclass(frozen=True)
class Quarantined:
    """One quarantined message, as stored by the controller."""

    key: str
    message_id: str
    reason: str
    quarantined_at: str
    body: str | None


def list_quarantined(s3: Any, bucket: str, tenant_id: str) -> list[Quarantined]:
    """The tenant's quarantined messages not replayed yet, oldest first (keys start with the time)."""
    prefix = quarantine_prefix(tenant_id)
    keys: list[str] = []
    # The delimiter leaves out `replayed/` (and any other folder below the tenant's).
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
        keys.extend(o["Key"] for o in page.get("Contents", []) if o["Key"].endswith(".json"))
    return [read(s3, bucket, key) for key in sorted(keys)]


def read(s3: Any, bucket: str, key: str) -> Quarantined:
    """One stored message; `KeyError` if there is none at `key`."""
    try:
        stored = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except s3.exceptions.NoSuchKey:
        raise KeyError(f"no quarantined message {key} (see python -m ops quarantine list)") from None
    return Quarantined(
        key=key,
        message_id=str(stored.get("message_id", "")),
        reason=str(stored.get("reason", "")),
        quarantined_at=str(stored.get("quarantined_at", "")),
        body=stored.get("body"),
    )


def resolve_key(tenant_id: str, key: str) -> str:
    """A full key, or the name `list` shows, of a message still in the tenant's quarantine."""
    prefix = quarantine_prefix(tenant_id)
    full = key if key.startswith(prefix) else prefix + key
    name = full[len(prefix) :]
    if not name or "/" in name:
        raise ValueError(
            f"{key!r} is not a quarantined message of tenant {tenant_id} (replayed ones are under "
            f"{replayed_prefix(tenant_id)}); use a name from python -m ops quarantine list {tenant_id}"
        )
    return full


def replay(s3: Any, sqs: Any, *, bucket: str, tenant_id: str, queue_url: str, message: Quarantined) -> str:
    """Send the stored body to the tenant's queue, then move the object to `replayed/`.

    On a FIFO queue the message joins the tenant's group (`MessageGroupId` = tenant), and its
    deduplication id is the quarantined message's id, so a replay repeated within SQS's
    five-minute window (the move failed) is dropped; a file event sent twice later is let go
    by the gate as a duplicate. Returns the new message id.
    """
    if not isinstance(message.body, str) or not message.body:
        raise ValueError(f"{message.key} holds no message body to replay")
    sent = sqs.send_message(
        **queue_message(queue_url, tenant_id, message.body, f"replay-{message.message_id}"[:128])
    )
    target = replayed_prefix(tenant_id) + message.key[len(quarantine_prefix(tenant_id)) :]
    s3.copy_object(Bucket=bucket, Key=target, CopySource={"Bucket": bucket, "Key": message.key})
    s3.delete_object(Bucket=bucket, Key=message.key)
    return str(sent["MessageId"])


def replay_all(
    s3: Any, sqs: Any, *, bucket: str, tenant_id: str, queue_url: str
) -> list[tuple[Quarantined, str]]:
    """Replay every quarantined message of the tenant, oldest first."""
    messages = list_quarantined(s3, bucket, tenant_id)
    if not messages:
        raise NothingToDo(f"tenant {tenant_id} has no quarantined message to replay")
    return [
        (m, replay(s3, sqs, bucket=bucket, tenant_id=tenant_id, queue_url=queue_url, message=m))
        for m in messages
    ]


def render(tenant_id: str, messages: list[Quarantined], *, show_body: bool = False) -> str:
    """A listing for people: name (what `replay` takes), when, message id, why; bodies on request."""
    if not messages:
        return f"{tenant_id}: no quarantined messages"
    lines = [f"{tenant_id}: {len(messages)} quarantined message{'s' if len(messages) > 1 else ''}"]
    for m in messages:
        lines.append(
            f"  {m.key[len(quarantine_prefix(tenant_id)) :]}  {m.quarantined_at}  message {m.message_id}"
        )
        lines.append(f"    why: {m.reason}")
        if show_body:
            lines.append(f"    body: {m.body}")
    lines.append(
        f"Replay one with python -m ops quarantine replay {tenant_id} NAME (or --all) once its cause is fixed."
    )
    return "\n".join(lines)
