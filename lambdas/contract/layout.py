"""Where things live: the work bucket's keys, and a message for a tenant's queue.

Each kind of object in the work bucket has its own top-level prefix and each tenant its own
prefix under it, so the bucket's lifecycle rules and IAM can scope to them; the handlers, `ops`
and the constructs build the keys with these functions.
"""

from __future__ import annotations

import datetime as _dt


def queue_message(queue_url: str, tenant_id: str, body: str, deduplication_id: str) -> dict[str, str]:
    """`SendMessage` arguments of a message for a tenant's queue: on a FIFO queue (ordering
    `arrival`) it joins the tenant's one message group under `deduplication_id`; a standard queue
    (ordering `key_sequence`) refuses both fields."""
    message = {"QueueUrl": queue_url, "MessageBody": body}
    if queue_url.endswith(".fifo"):
        message.update(MessageGroupId=tenant_id, MessageDeduplicationId=deduplication_id)
    return message


#: Each kind of object in the work bucket has its own top-level prefix, so that the bucket's
#: lifecycle keeps each kind as long as it must (chunks 14 days, quarantined messages 400).
CHUNKS_ROOT = "chunks/"
QUARANTINE_ROOT = "quarantine/"


def work_prefix(tenant_id: str) -> str:
    """A tenant's chunks and manifests live under this prefix (IAM scopes to it)."""
    return f"{CHUNKS_ROOT}{tenant_id}/"


def quarantine_prefix(tenant_id: str) -> str:
    """Where the controller keeps a tenant's unusable messages (IAM scopes to it)."""
    return f"{QUARANTINE_ROOT}{tenant_id}/"


def quarantine_key(tenant_id: str, when: float, message_id: str) -> str:
    """`quarantine/<tenant>/<UTC timestamp>-<message id>.json`: listed oldest first."""
    stamp = _dt.datetime.fromtimestamp(when, _dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    return f"{quarantine_prefix(tenant_id)}{stamp}-{message_id}.json"


def replayed_prefix(tenant_id: str) -> str:
    """Where `ops quarantine replay` moves a replayed message, so it is never replayed twice."""
    return f"{quarantine_prefix(tenant_id)}replayed/"


def chunk_prefix(tenant_id: str, file_name: str) -> str:
    """The folder of one file's chunk index and manifest (named by its first execution's name,
    `execution_name(event id)`)."""
    return f"{work_prefix(tenant_id)}{file_name}/"


def manifest_key(prefix: str) -> str:
    """Work-bucket key of one execution's manifest."""
    return f"{prefix}manifest.json"


def chunk_index_key(prefix: str) -> str:
    """Work-bucket key of one file's chunk index: where each chunk starts in the pinned object
    version (fixed-width entries, see `chunk_format`), so Register reads its chunk with a
    ranged GET of that version instead of a chunk file."""
    return f"{prefix}chunk-offsets.bin"
