"""The tenant's position item, the names of the ledger's entries and statuses, and the
errors of a conditional write."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from lambdas.contract import DuplicateOf, FileRef

POSITION = "position"
HISTORY_PREFIX = "file#"
HISTORY_DAYS = 400
EVENT_PREFIX = "event#"
#: `key_sequence` ordering: a message waiting for its sequence number's turn, so the close of
#: the file before it makes it visible at once (`waiting#<sequence, 20 digits>`).
WAITING_PREFIX = "waiting#"
#: A note outlives any message it names (SQS keeps a message at most 14 days).
WAITING_DAYS = 15
#: How long a claimed event id is remembered (a duplicate event later than this is a new file).
EVENT_DAYS = 400
VERSION_PREFIX = "version#"
CONTENT_PREFIX = "content#"

RUNNING = "RUNNING"
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
SKIPPED = "SKIPPED"
#: Closed without sending: a byte-identical copy of a file that succeeded (`duplicate_files: skip`).
DUPLICATE = "DUPLICATE"
#: Stopped at a chunk boundary by `ops pause` (not closed: `ops unpause` runs it on from `next_record`).
PAUSED = "PAUSED"
#: The event id prefix of a correction made current by `ops replace` (its own S3 event is a duplicate).
REPLACEMENT_PREFIX = "replacement-"
#: Longest error message and cause kept (DynamoDB items are small; a cause is a summary).
MAX_TEXT = 2000
#: How often a close is tried again when the running file's progress moved while it was written.
CLOSE_TRIES = 3
#: How many of the newest history items `closed_attempt` looks through for an execution that is
#: not the current file's (a late retry or event comes minutes, at most a day, after its close).
RECENT_ATTEMPTS = 500


class LedgerConflict(Exception):
    """A conditional write found the position changed since it was read; read it again."""


class AlreadyClaimed(Exception):
    """The file (its event id, or its object version) was made current before: a duplicate
    event; nothing to do."""


def version_entry(bucket: str, key: str, version_id: str) -> str:
    """`version#<sha256>` of one object version (a hash: keys may be 1,024 bytes long)."""
    return f"{VERSION_PREFIX}{version_digest(bucket, key, version_id)}"


def version_digest(bucket: str, key: str, version_id: str) -> str:
    """The SHA-256 (hex) of one object version's bucket, key and version id, joined with NUL,
    which none of them contains."""
    return hashlib.sha256("\0".join((bucket, key, version_id)).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Position:
    """A tenant's position, as read from its item (`None` fields: never set)."""

    tenant: str
    seq: int
    execution: str | None
    file: FileRef | None
    status: str | None
    halted: bool
    attempt: int
    next_record: int
    chunk_size: int | None
    chunk_count: int | None
    record_count: int | None
    started_at: float | None
    closed_at: float | None
    closed_as: str | None  # the Step Functions status that closed it (FAILED, TIMED_OUT, ABORTED, ...)
    error: str | None
    cause: str | None
    skip_reason: str | None
    waiting_message_id: str | None
    waiting_receipt: str | None
    waiting_since: float | None
    waiting_sent_at: float | None  # when the waiting message was sent: its wait is now minus this
    sequence: int | None = None  # `key_sequence` ordering: the current file's sequence number
    #: Records per POST the file is sent with, pinned (with `chunk_size`) before its first
    #: record, so a batch sent again after a crash or a resume has the same records and key
    #: even if `sink.batch_size` or `chunk_size` changed meanwhile (`pin_settings`).
    batch_size: int | None = None
    #: The function that crashed, past the workflow's retries ("register", "split"), if that failed the file.
    failed_in: str | None = None
    #: A history item: when the failure notification was published (None: not yet, or no failure).
    notified_at: float | None = None

    def next_sequence(self, first: int) -> int:
        """`key_sequence` ordering: the sequence number of the file that may start next."""
        return first if self.sequence is None else self.sequence + 1

    duplicate_of: DuplicateOf | None = None  # a DUPLICATE: the file it repeats
    #: `ops pause`: since when, and why (the tenant starts nothing and stops at a chunk boundary).
    paused_at: float | None = None
    pause_reason: str | None = None
    #: The last `ops unpause` (the head message's wait counts from it).
    unpaused_at: float | None = None
    #: A correction made current by `ops replace`: the failed attempt it replaces (`execution`,
    #: `entry`: its history item, `key`, `version_id`).
    replaces: dict[str, Any] | None = None
    #: A history item: the replacement that took this failed attempt's place (`execution`, `key`, `version_id`).
    replaced_by: dict[str, Any] | None = None

    @property
    def paused(self) -> bool:
        """`ops pause` holds the tenant (the flag), or its file stopped for it (PAUSED)."""
        return self.paused_at is not None or self.status == PAUSED

    @property
    def file_id(self) -> str | None:
        return self.file["event_id"] if self.file else None

    @property
    def running(self) -> bool:
        return self.status == RUNNING

    @classmethod
    def from_item(cls, tenant: str, item: dict[str, Any] | None) -> Position:
        item = item or {}

        def s(name: str) -> str | None:
            value = item.get(name, {})
            return value.get("S") if isinstance(value, dict) else None

        def n(name: str) -> float | None:
            raw = item.get(name, {}).get("N") if isinstance(item.get(name), dict) else None
            return float(raw) if raw is not None else None

        def i(name: str) -> int | None:
            value = n(name)
            return int(value) if value is not None else None

        file_json = s("file_ref")
        return cls(
            tenant=tenant,
            seq=i("seq") or 0,
            execution=s("execution"),
            file=json.loads(file_json) if file_json else None,
            status=s("status"),
            halted=bool(item.get("halted", {}).get("BOOL", False)),
            attempt=i("attempt") or 0,
            next_record=i("next_record") or 0,
            chunk_size=i("chunk_size"),
            chunk_count=i("chunk_count"),
            record_count=i("record_count"),
            started_at=n("started_at"),
            closed_at=n("closed_at"),
            closed_as=s("closed_as"),
            error=s("error"),
            cause=s("cause"),
            skip_reason=s("skip_reason"),
            waiting_message_id=s("waiting_message_id"),
            waiting_receipt=s("waiting_receipt"),
            waiting_since=n("waiting_since"),
            waiting_sent_at=n("waiting_sent_at"),
            sequence=i("sequence"),
            batch_size=i("batch_size"),
            duplicate_of=json.loads(s("duplicate_of") or "null"),
            failed_in=s("failed_in"),
            notified_at=n("notified_at"),
            paused_at=n("paused_at"),
            pause_reason=s("pause_reason"),
            unpaused_at=n("unpaused_at"),
            replaces=json.loads(s("replaces") or "null"),
            replaced_by=json.loads(s("replaced_by") or "null"),
        )


def n_value(value: float | int) -> dict[str, str]:
    return {"N": repr(value) if isinstance(value, float) else str(value)}


def s_value(value: str) -> dict[str, str]:
    return {"S": value}
