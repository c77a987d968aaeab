"""`ops reconcile`: compare the object versions under a tenant's prefix with its ledger
(docs/design.md §4.3, §4.8), and replay the versions it never saw.

S3 (the versioned landing bucket) is the source of truth: a file can be lost on the way to
the gate. A version without a `version#<hash>` marker (`ledger.version_entry`) is NEVER SEEN;
one whose file runs, failed without a resume or skip, or has no recorded close is SEEN BUT
NEVER COMPLETED (for `ops resume` / `ops skip`, not a replay). `--replay` sends the never-seen
versions to the tenant's queue in upload order, each with a deterministic event id
(`contract.REPLAY_EVENT_ID`): replaying twice, or a version whose event was only queued, makes
a duplicate the gate lets go.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

from lambdas.contract import NAME_DIGEST_CHARS, REPLAY_EVENT_ID, queue_message
from lambdas.ledger import FAILED, HISTORY_PREFIX, RUNNING, Ledger, version_entry
from pipeline_constructs.registry import TenantResources

#: BatchGetItem reads at most this many keys per call.
BATCH_KEYS = 100

NEVER_SEEN = "never seen"
SEEN_RUNNING = "seen, running"
SEEN_FAILED = "seen, failed (not resumed or skipped)"
SEEN_UNRECORDED = "seen, no close recorded"


@dataclass(frozen=True)
class ObjectVersion:
    """One object version under a tenant's prefix, as ListObjectVersions names it."""

    bucket: str
    key: str
    version_id: str
    last_modified: dt.datetime
    size: int
    etag: str | None


@dataclass(frozen=True)
class Finding:
    """A version the ledger never completed, and what the ledger knows of it."""

    version: ObjectVersion
    state: str
    event_id: str | None = None  # the event that claimed it (None: never seen)
    execution: str | None = None  # its latest attempt

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.version.key,
            "version_id": self.version.version_id,
            "last_modified": self.version.last_modified.isoformat(),
            "size": self.version.size,
            "state": self.state,
            "event_id": self.event_id,
            "execution": self.execution,
        }


def parse_since(value: str) -> dt.datetime:
    """`2026-11-30` or an ISO 8601 time (UTC when no offset is given); `ValueError` otherwise."""
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--since {value!r} is not a date (2026-11-30) or an ISO 8601 time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def list_versions(s3: Any, bucket: str, prefix: str, since: dt.datetime | None = None) -> list[ObjectVersion]:
    """Every object version under `prefix` (delete markers skipped), modified at or after
    `since`, in upload order: LastModified, ties by key (then version id, for a stable order)."""
    versions = []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Versions", []):  # delete markers come as `DeleteMarkers`
            if since is not None and item["LastModified"] < since:
                continue
            versions.append(
                ObjectVersion(
                    bucket=bucket,
                    key=item["Key"],
                    version_id=item["VersionId"],
                    last_modified=item["LastModified"],
                    size=int(item.get("Size", 0)),
                    etag=(item.get("ETag") or "").strip('"') or None,
                )
            )
    return sorted(versions, key=lambda v: (v.last_modified, v.key, v.version_id))


def version_markers(
    ddb: Any, table: str, tenant: str, versions: list[ObjectVersion]
) -> dict[str, dict[str, Any]]:
    """The ledger's `version#` markers of `versions`, by entry (batched, unprocessed keys retried)."""
    entries = sorted({version_entry(v.bucket, v.key, v.version_id) for v in versions})
    found: dict[str, dict[str, Any]] = {}
    for start in range(0, len(entries), BATCH_KEYS):
        keys = [{"tenant": {"S": tenant}, "entry": {"S": e}} for e in entries[start : start + BATCH_KEYS]]
        request: dict[str, Any] = {table: {"Keys": keys, "ConsistentRead": True}}
        while request:
            response = ddb.batch_get_item(RequestItems=request)
            for item in response.get("Responses", {}).get(table, []):
                found[item["entry"]["S"]] = item
            request = response.get("UnprocessedKeys") or {}
    return found


def latest_attempts(ddb: Any, table: str, tenant: str) -> dict[str, dict[str, Any]]:
    """Each file's (event id's) latest recorded attempt in the history: its `status` and `execution`."""
    latest: dict[str, dict[str, Any]] = {}
    kwargs: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": "tenant = :tenant AND begins_with(entry, :prefix)",
        "ExpressionAttributeValues": {":tenant": {"S": tenant}, ":prefix": {"S": HISTORY_PREFIX}},
    }
    while True:
        response = ddb.query(**kwargs)
        for item in response.get("Items", []):  # oldest first: a later attempt replaces an earlier one
            event_id = json.loads(item["file_ref"]["S"])["event_id"]
            latest[event_id] = {"status": item["status"]["S"], "execution": item["execution"]["S"]}
        if "LastEvaluatedKey" not in response:
            return latest
        kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def reconcile(
    resources: TenantResources, bucket: str, *, s3: Any, ddb: Any, since: dt.datetime | None = None
) -> list[Finding]:
    """The tenant's versions the ledger never saw or never completed, oldest first."""
    versions = list_versions(s3, bucket, resources.landing_prefix, since)
    markers = version_markers(ddb, resources.ledger_table, resources.tenant_id, versions)
    position = Ledger(ddb, resources.ledger_table, resources.tenant_id).read()
    attempts = latest_attempts(ddb, resources.ledger_table, resources.tenant_id)
    findings = []
    for version in versions:
        marker = markers.get(version_entry(version.bucket, version.key, version.version_id))
        if marker is None:
            findings.append(Finding(version, NEVER_SEEN))
            continue
        event_id = marker["event_id"]["S"]
        if position.file_id == event_id and position.status in (RUNNING, FAILED):
            state = SEEN_RUNNING if position.status == RUNNING else SEEN_FAILED
            findings.append(Finding(version, state, event_id, position.execution))
        elif position.file_id != event_id and event_id not in attempts:
            findings.append(Finding(version, SEEN_UNRECORDED, event_id, marker["execution"]["S"]))
        elif position.file_id != event_id and attempts[event_id]["status"] == FAILED:
            findings.append(Finding(version, SEEN_FAILED, event_id, attempts[event_id]["execution"]))
    return findings


def replay_event_id(version: ObjectVersion) -> str:
    """`reconcile-<digest>` (42 characters of [a-z0-9-], 128 bits of the version's SHA-256), the
    same for every replay of the version; short enough to be the name of its file's executions
    itself, resumed ones too (`contract.execution_name`)."""
    entry = version_entry(version.bucket, version.key, version.version_id)
    return REPLAY_EVENT_ID.render(digest=entry.split("#", 1)[1][:NAME_DIGEST_CHARS])


def synthetic_event(version: ObjectVersion) -> dict[str, Any]:
    """The S3 "Object Created" EventBridge event S3 would have sent for `version` (its key
    URL-encoded as S3 encodes it: `contract.s3_key_from_event` decodes it back)."""
    return {
        "version": "0",
        "id": replay_event_id(version),
        "detail-type": "Object Created",
        "source": "aws.s3",
        "time": version.last_modified.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
        "resources": [f"arn:aws:s3:::{version.bucket}"],
        "detail": {
            "version": "0",
            "bucket": {"name": version.bucket},
            "object": {
                "key": urllib.parse.quote_plus(version.key, safe="/"),
                "size": version.size,
                "etag": version.etag,
                "version-id": version.version_id,
            },
            "reason": "PutObject",
            "requester": "ops-reconcile",
        },
    }


def replay(sqs: Any, queue_url: str, tenant: str, versions: list[ObjectVersion]) -> list[str]:
    """Send `versions`' events to the tenant's queue, in the order given; the event ids sent."""
    sent = []
    for version in versions:
        event = synthetic_event(version)
        deduplication_id = hashlib.sha256(event["id"].encode()).hexdigest()
        sqs.send_message(**queue_message(queue_url, tenant, json.dumps(event), deduplication_id))
        sent.append(event["id"])
    return sent


def render(tenant: str, findings: list[Finding], replayed: list[str] | None) -> str:
    """What a person reads: one line per version, oldest first, then what was done."""
    if not findings:
        return f"{tenant}: every object version under its prefix was completed"
    lines = [f"{tenant}: {len(findings)} object version(s) not completed, oldest first:"]
    for f in findings:
        seen = f" (event {f.event_id}, execution {f.execution})" if f.event_id else ""
        lines.append(
            f"  {f.version.last_modified.isoformat()}  {f.version.key}  version {f.version.version_id}: "
            f"{f.state}{seen}"
        )
    never = sum(1 for f in findings if f.state == NEVER_SEEN)
    if replayed is not None:
        lines.append(f"replayed {len(replayed)} never-seen version(s) into the queue, in upload order")
    elif never:
        lines.append(
            f"{never} never seen (lost, or their events are still queued): replay them with "
            f"python -m ops reconcile {tenant} --replay (a version already processed is let go)"
        )
    if any(f.state == SEEN_FAILED for f in findings):
        lines.append(f"failed files: python -m ops resume {tenant} (or ops skip); replaying them cannot help")
    return "\n".join(lines)
