"""The ledger: each tenant's position and the record of each file (docs/architecture.md, "Ledger").

One DynamoDB table, partition key `tenant`, sort key `entry`: the tenant's `position` (the
current file, its execution and state, `next_record`, halted or paused, the waiting message),
a `file#...` history item per closed or skipped attempt (written in the close's transaction),
and `event#`, `version#` and `content#` items that make a second event for a file or a
version, or a byte-identical re-upload, a duplicate.

Every position write is conditional on what the writer read, so a stale writer can never move
a tenant backwards: transitions bump `seq`, progress only grows, and a close or progress write
names its execution. The gate decides from the position alone, so Step Functions forgetting
closed executions after 90 days cannot wedge a tenant. The boto3 client is passed in: the
handlers, the `ops` CLI and the tests share this code.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any

from lambdas.contract import DuplicateOf, ExecutionInput, FileRef
from lambdas.runtime import error_code

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


def _n(value: float | int) -> dict[str, str]:
    return {"N": repr(value) if isinstance(value, float) else str(value)}


def _s(value: str) -> dict[str, str]:
    return {"S": value}


class Ledger:
    """The ledger of one tenant in one table; `ddb` is a boto3 DynamoDB client."""

    def __init__(self, ddb: Any, table: str, tenant: str) -> None:
        self.ddb, self.table, self.tenant = ddb, table, tenant

    def _key(self, entry: str = POSITION) -> dict[str, Any]:
        return {"tenant": _s(self.tenant), "entry": _s(entry)}

    def read(self) -> Position:
        """The position, strongly consistent."""
        item = self.ddb.get_item(TableName=self.table, Key=self._key(), ConsistentRead=True).get("Item")
        return Position.from_item(self.tenant, item)

    def _update(self, expression: str, condition: str, values: dict[str, Any], *, names: dict[str, str] | None = None,
                entry: str = POSITION) -> Position:
        """A conditional update of `entry`; the position as it is after it."""
        item = self._write(expression, condition, values, names=names, entry=entry, return_values="ALL_NEW")
        return Position.from_item(self.tenant, item)

    def _write(self, expression: str, condition: str, values: dict[str, Any], *, names: dict[str, str] | None = None,
               entry: str = POSITION, return_values: str = "NONE") -> dict[str, Any] | None:
        """A conditional update of `entry`, returning what `return_values` asks for (None for
        "NONE"); `LedgerConflict` if the condition does not hold."""
        kwargs = self._update_request(expression, condition, values, names=names, entry=entry)
        try:
            return self.ddb.update_item(**kwargs, ReturnValues=return_values).get("Attributes")
        except Exception as error:  # botocore ClientError; not imported to keep this stdlib-only
            if error_code(error) == "ConditionalCheckFailedException":
                raise LedgerConflict(f"tenant {self.tenant}: the ledger changed since it was read") from None
            raise

    def _update_request(self, expression: str, condition: str, values: dict[str, Any], *,
                        names: dict[str, str] | None = None, entry: str = POSITION) -> dict[str, Any]:
        """The parameters of a conditional update of `entry` (an `UpdateItem`, or the `Update` of a
        transaction)."""
        request: dict[str, Any] = {
            "TableName": self.table,
            "Key": self._key(entry),
            "UpdateExpression": expression,
            "ConditionExpression": condition,
        }
        if values:
            request["ExpressionAttributeValues"] = values
        if names:
            request["ExpressionAttributeNames"] = names
        return request

    # -- the controller ---------------------------------------------------------------------

    def claim(self, observed: Position, file: FileRef, execution: str, now: float, *,
              sequence: int | None = None) -> Position:
        """Make `file` the current file, run by `execution`, if the position is still `observed`
        and the file was never claimed before: neither its event id nor its object version
        (both remembered for `EVENT_DAYS`).
        `sequence`: the file's sequence number (`key_sequence` ordering), kept in the position.

        `LedgerConflict` if the position changed; `AlreadyClaimed` if the file was claimed before.
        """
        values = {
            ":seq": _n(observed.seq + 1),
            ":execution": _s(execution),
            ":file": _s(json.dumps(file, sort_keys=True)),
            ":running": _s(RUNNING),
            ":zero": _n(0),
            ":false": {"BOOL": False},
            ":now": _n(now),
        }
        sets = ("SET seq = :seq, execution = :execution, file_ref = :file, #status = :running, halted = :false, "
                "attempt = :zero, next_record = :zero, started_at = :now")
        if sequence is not None:
            sets += ", #sequence = :sequence"
            values[":sequence"] = _n(sequence)
        if observed.seq:
            condition = "seq = :observed"
            values[":observed"] = _n(observed.seq)
        else:
            condition = "attribute_not_exists(seq)"
        position = {
            "TableName": self.table,
            "Key": self._key(),
            "UpdateExpression": (
                f"{sets} "
                "REMOVE chunk_size, batch_size, chunk_count, record_count, closed_at, closed_as, #error, cause, "
                "skip_reason, waiting_message_id, waiting_receipt, waiting_since, waiting_sent_at, duplicate_of, "
                "failed_in, replaces"
            ),
            "ConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ExpressionAttributeNames": {"#status": "status", "#error": "error",
                                         **({"#sequence": "sequence"} if sequence is not None else {})},
        }
        self._make_current([{"Update": position}], file, execution, now)
        return self.read()

    def _make_current(self, writes: list[dict[str, Any]], file: FileRef, execution: str, now: float) -> None:
        """Run `writes` (the position's update first) in one transaction with the markers of
        `file`: its event id and its object version, which must not exist (`AlreadyClaimed`)."""
        markers = [
            {
                **self._key(f"{EVENT_PREFIX}{file['event_id']}"),
                "execution": _s(execution),
                "claimed_at": _n(now),
                "expires_at": _n(int(now + EVENT_DAYS * 86400)),
            },
            {
                **self._key(version_entry(file["bucket"], file["key"], file["version_id"])),
                "bucket": _s(file["bucket"]),
                "key": _s(file["key"]),
                "version_id": _s(file["version_id"]),
                "event_id": _s(file["event_id"]),
                "execution": _s(execution),
                "claimed_at": _n(now),
                "expires_at": _n(int(now + EVENT_DAYS * 86400)),
            },
        ]
        puts = [{"Put": {"TableName": self.table, "Item": item, "ConditionExpression": "attribute_not_exists(tenant)"}}
                for item in markers]
        try:
            self.ddb.transact_write_items(TransactItems=[writes[0], *puts, *writes[1:]])
        except Exception as error:  # botocore ClientError
            if error_code(error) != "TransactionCanceledException":
                raise
            reasons = [r.get("Code") for r in getattr(error, "response", {}).get("CancellationReasons", [])]
            # Only when the position's condition held is it a duplicate: else decide again.
            if (len(reasons) == 3 + len(writes[1:]) and reasons[0] in (None, "None")
                    and "ConditionalCheckFailed" in reasons[1:3]):
                raise AlreadyClaimed(f"tenant {self.tenant}: file {file['event_id']} was claimed before") from None
            raise LedgerConflict(f"tenant {self.tenant}: the ledger changed since it was read") from None

    def record_waiting(
        self, observed: Position, message_id: str, receipt: str, now: float, sent_at: float | None = None
    ) -> Position:
        """Note the message waiting at the head of the queue, for the close to make it visible."""
        return self._update(
            "SET waiting_message_id = :id, waiting_receipt = :receipt, waiting_since = :now, waiting_sent_at = :sent",
            "seq = :observed",
            {":id": _s(message_id), ":receipt": _s(receipt), ":now": _n(now), ":sent": _n(sent_at or now),
             ":observed": _n(observed.seq)},
        )

    def claimed_before(self, file: FileRef) -> bool:
        """True if this file was ever made current: its event id, or its object version under
        another event id (a replay); the same markers the claim refuses a duplicate on."""
        entries = (f"{EVENT_PREFIX}{file['event_id']}", version_entry(file["bucket"], file["key"], file["version_id"]))
        return any(
            self.ddb.get_item(TableName=self.table, Key=self._key(entry), ConsistentRead=True).get("Item") is not None
            for entry in entries
        )

    def version_claim(self, bucket: str, key: str, version_id: str) -> str | None:
        """The execution that claimed this object version, if one did (its `version#` marker)."""
        item = self.ddb.get_item(TableName=self.table, Key=self._key(version_entry(bucket, key, version_id)),
                                 ConsistentRead=True).get("Item")
        return item["execution"]["S"] if item else None

    def note_waiting_sequence(self, sequence: int, message_id: str, receipt: str, now: float) -> None:
        """`key_sequence` ordering: note the message whose file has `sequence`, so that the close of
        the file before it makes it visible at once (the latest receipt wins)."""
        self.ddb.put_item(
            TableName=self.table,
            Item={
                **self._key(_waiting_entry(sequence)),
                "message_id": _s(message_id),
                "receipt": _s(receipt),
                "noted_at": _n(now),
                "expires_at": _n(int(now + WAITING_DAYS * 86400)),
            },
        )

    def waiting_sequences(self, *, after: int = -1, limit: int | None = None) -> list[tuple[int, str]]:
        """`key_sequence` ordering: the noted waiting messages above `after` as (sequence, receipt),
        lowest first: all of them, or the lowest `limit`."""
        items = self._query(
            {
                "KeyConditionExpression": "tenant = :tenant AND entry BETWEEN :low AND :high",
                "ExpressionAttributeValues": {
                    ":tenant": _s(self.tenant),
                    ":low": _s(_waiting_entry(after + 1)),
                    ":high": _s(f"{WAITING_PREFIX}~"),
                },
                "ConsistentRead": True,
            },
            limit=limit,
        )
        return [(int(item["entry"]["S"][len(WAITING_PREFIX):]), item["receipt"]["S"]) for item in items]

    def _query(self, query: dict[str, Any], *, limit: int | None = None) -> list[dict[str, Any]]:
        """The items of a query of this table, every page (DynamoDB returns at most 1 MB a page,
        and a `Limit` per page), or the first `limit` items (those that pass its filter)."""
        kwargs: dict[str, Any] = {"TableName": self.table, **query}
        items: list[dict[str, Any]] = []
        while True:
            if limit is not None and "FilterExpression" not in query:
                kwargs["Limit"] = limit - len(items)
            response = self.ddb.query(**kwargs)
            items += response.get("Items", [])
            if limit is not None and len(items) >= limit:
                return items[:limit]
            if "LastEvaluatedKey" not in response:
                return items
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def forget_waiting_sequence(self, sequence: int) -> None:
        self.ddb.delete_item(TableName=self.table, Key=self._key(_waiting_entry(sequence)))

    def clear_waiting(self, receipt: str) -> None:
        """Forget the waiting message once it was made visible (if it is still the one noted)."""
        try:
            self._update(
                "REMOVE waiting_message_id, waiting_receipt, waiting_since, waiting_sent_at",
                "waiting_receipt = :receipt",
                {":receipt": _s(receipt)},
            )
        except LedgerConflict:
            pass  # noted again by a later controller: that note stands

    # -- the workflow -------------------------------------------------------------------------

    def record_progress(
        self,
        execution: str,
        next_record: int,
        *,
        chunk_size: int | None = None,
        chunk_count: int | None = None,
        record_count: int | None = None,
    ) -> Position:
        """Every record before `next_record` is acknowledged; only ever moves forward. Returns
        the position after the write (register writes this up to once a second, and reads
        `paused_at` off it: a pause stops the file at its next save).

        `LedgerConflict` if `execution` is not the running execution of the current file, or
        the position is already further.
        """
        values = {":execution": _s(execution), ":running": _s(RUNNING), ":next": _n(next_record)}
        sets = ["next_record = :next"]
        if chunk_size is not None:
            sets.append("chunk_size = :size")
            values[":size"] = _n(chunk_size)
        if chunk_count is not None:
            sets.append("chunk_count = :chunks")
            values[":chunks"] = _n(chunk_count)
        if record_count is not None:
            sets.append("record_count = :records")
            values[":records"] = _n(record_count)
        return self._update(
            "SET " + ", ".join(sets),
            "execution = :execution AND #status = :running AND next_record <= :next",
            values,
            names={"#status": "status"},
        )

    def record_pause(self, execution: str) -> Position:
        """`ops pause` is set and `execution`, the running file's, stops at a chunk boundary:
        the position becomes PAUSED, its progress kept (`ops unpause` runs it on from
        `next_record`). Not a close: no history item, no hand-off. Idempotent for the same
        execution (a retried register invocation). `LedgerConflict` if `execution` is not the
        current file's, or the tenant is not paused."""
        try:
            return self._update(
                "SET #status = :paused ADD seq :one",
                "execution = :execution AND #status = :running AND attribute_exists(paused_at)",
                {":execution": _s(execution), ":running": _s(RUNNING), ":paused": _s(PAUSED), ":one": _n(1)},
                names={"#status": "status"},
            )
        except LedgerConflict:
            position = self.read()
            if position.execution == execution and position.status == PAUSED:
                return position
            raise

    def pin_settings(self, execution: str, chunk_size: int, batch_size: int) -> Position:
        """Pin the current file's chunk size and records per POST, once, before its first record
        is sent: every later attempt (a retry after a crash, a resume after `chunk_size` or
        `sink.batch_size` changed, a split again after the chunk index expired) cuts the same
        chunks and batches, so a record sent again always goes under the key it had. A chunk
        size the file already has (written by an earlier release's progress) is kept.

        Returns the position as pinned (by this call or an earlier one); `LedgerConflict` if
        `execution` is not the running execution of the current file."""
        try:
            return self._update(
                "SET batch_size = :batch, chunk_size = if_not_exists(chunk_size, :size)",
                "execution = :execution AND #status = :running AND attribute_not_exists(batch_size)",
                {":execution": _s(execution), ":running": _s(RUNNING), ":batch": _n(batch_size),
                 ":size": _n(chunk_size)},
                names={"#status": "status"},
            )
        except LedgerConflict:
            position = self.read()
            if position.execution != execution or not position.running or position.batch_size is None:
                raise
            return position  # pinned before, by an earlier attempt at this file

    def record_close(
        self,
        execution: str,
        sfn_status: str,
        *,
        halt_on_failure: bool,
        now: float,
        error: str | None = None,
        cause: str | None = None,
        content_sha256: str | None = None,
        duplicate_of: DuplicateOf | None = None,
        failed_in: str | None = None,
    ) -> Position:
        """`execution` closed with `sfn_status`: record it, halting the tenant on a failure if
        asked; returns the closed position.

        One transaction writes the position, the attempt's history item and, for a success with
        `content_sha256`, the content item (`content#<sha256>`, for later duplicates): a recorded
        close always has its history, whatever fails after it. A success with `duplicate_of`
        closes as DUPLICATE (nothing was sent; the content stays the earlier file's).
        `failed_in`: the function whose crash failed the file, if one did.
        `LedgerConflict` if `execution` is not the running execution of the current file
        (already recorded, or a stale or hand-made execution).
        """
        failed = sfn_status != SUCCEEDED
        duplicate = not failed and duplicate_of is not None
        for _ in range(CLOSE_TRIES):
            observed = self.read()
            if observed.execution != execution or not observed.running:
                raise LedgerConflict(f"tenant {self.tenant}: {execution} is not the running execution")
            closed = replace(
                observed, seq=observed.seq + 1, status=FAILED if failed else (DUPLICATE if duplicate else SUCCEEDED),
                closed_as=sfn_status, halted=failed and halt_on_failure, closed_at=now,
                error=error[:MAX_TEXT] if error else None, cause=cause[:MAX_TEXT] if cause else None,
                duplicate_of=duplicate_of if duplicate else None, failed_in=failed_in if failed else None,
            )
            sets = ["#status = :status", "closed_as = :closed_as", "halted = :halted", "closed_at = :now"]
            names = {"#status": "status"}
            values: dict[str, Any] = {
                ":execution": _s(execution), ":running": _s(RUNNING), ":next": _n(observed.next_record),
                ":status": _s(closed.status or ""), ":closed_as": _s(sfn_status), ":halted": {"BOOL": closed.halted},
                ":now": _n(now), ":one": _n(1),
            }
            for name, value in (("error", closed.error), ("cause", closed.cause), ("failed_in", closed.failed_in),
                                ("duplicate_of", json.dumps(duplicate_of, sort_keys=True) if duplicate else None)):
                if value:
                    sets.append(f"#{name} = :{name}")
                    names[f"#{name}"] = name
                    values[f":{name}"] = _s(value)
            writes: list[dict[str, Any]] = [
                {"Update": {
                    "TableName": self.table, "Key": self._key(),
                    "UpdateExpression": "SET " + ", ".join(sets) + " ADD seq :one",
                    # The progress is part of the history item: it must not move meanwhile.
                    "ConditionExpression": "execution = :execution AND #status = :running AND next_record = :next",
                    "ExpressionAttributeNames": names, "ExpressionAttributeValues": values,
                }},
                {"Put": {"TableName": self.table, "Item": self._history_item(closed)}},
            ]
            if closed.status == SUCCEEDED and content_sha256 and closed.file is not None:
                writes.append({"Put": {"TableName": self.table, "Item": self._content_item(content_sha256, closed)}})
            try:
                self.ddb.transact_write_items(TransactItems=writes)
            except Exception as refused:  # botocore ClientError
                reasons = [r.get("Code") for r in getattr(refused, "response", {}).get("CancellationReasons", [])]
                if error_code(refused) != "TransactionCanceledException" or reasons[:1] != ["ConditionalCheckFailed"]:
                    raise
                continue  # progress was written meanwhile, or another report recorded it: read again
            return closed
        raise RuntimeError(f"tenant {self.tenant}: the position of {execution} kept changing while its close "
                           "was recorded; try again")

    def _content_item(self, content_sha256: str, position: Position) -> dict[str, Any]:
        """Remember that the file with these bytes succeeded (the latest such file wins)."""
        assert position.file is not None and position.execution is not None
        return {
            **self._key(f"{CONTENT_PREFIX}{content_sha256}"),
            "key": _s(position.file["key"]),
            "version_id": _s(position.file["version_id"]),
            "event_id": _s(position.file["event_id"]),
            "execution": _s(position.execution),
            "closed_at": _n(position.closed_at or 0),
            "expires_at": _n(int((position.closed_at or 0) + HISTORY_DAYS * 86400)),
        }

    def processed_content(self, content_sha256: str) -> DuplicateOf | None:
        """The file with these bytes that succeeded last, if any (strongly consistent)."""
        item = self.ddb.get_item(TableName=self.table, Key=self._key(f"{CONTENT_PREFIX}{content_sha256}"),
                                 ConsistentRead=True).get("Item")
        if item is None:
            return None
        return DuplicateOf(key=item["key"]["S"], version_id=item["version_id"]["S"], event_id=item["event_id"]["S"])

    # -- the operator -------------------------------------------------------------------------

    def resume(self, observed: Position, execution: str, now: float) -> Position:
        """The halted, failed file runs again from `next_record`, as `execution`."""
        return self._update(
            "SET #status = :running, execution = :execution, halted = :false, started_at = :now, "
            "attempt = attempt + :one, seq = :seq REMOVE closed_at, closed_as, #error, cause, failed_in",
            "seq = :observed AND #status = :failed AND halted = :true",
            {
                ":running": _s(RUNNING),
                ":failed": _s(FAILED),
                ":execution": _s(execution),
                ":true": {"BOOL": True},
                ":false": {"BOOL": False},
                ":now": _n(now),
                ":one": _n(1),
                ":seq": _n(observed.seq + 1),
                ":observed": _n(observed.seq),
            },
            names={"#status": "status", "#error": "error"},
        )

    def skip(self, observed: Position, reason: str, now: float) -> Position:
        """The halted, failed file is given up, with the operator's reason; the next file may start.
        The position and the attempt's history item are written in one transaction."""
        reason = reason[:MAX_TEXT]
        skipped = replace(observed, status=SKIPPED, skip_reason=reason, halted=False, closed_at=now,
                          seq=observed.seq + 1)
        return self._update_with_history(
            "SET #status = :skipped, skip_reason = :reason, halted = :false, closed_at = :now, seq = :seq",
            "seq = :observed AND #status = :failed AND halted = :true",
            {
                ":skipped": _s(SKIPPED),
                ":failed": _s(FAILED),
                ":reason": _s(reason),
                ":true": {"BOOL": True},
                ":false": {"BOOL": False},
                ":now": _n(now),
                ":seq": _n(skipped.seq),
                ":observed": _n(observed.seq),
            },
            names={"#status": "status"},
            history_item=self._history_item(skipped),
        )

    def skip_gap(self, observed: Position, first_missing: int, next_sequence: int, reason: str, now: float) -> Position:
        """`key_sequence` ordering: give up the missing sequence numbers before `next_sequence`
        (their files never came), with the operator's reason; the file with `next_sequence` may
        start. Only while no file runs and the tenant is not halted."""
        if next_sequence <= first_missing:
            raise ValueError(f"no sequence number is missing before {next_sequence} (the first missing one is "
                             f"{first_missing}): nothing to skip")
        missing = f"{first_missing}-{next_sequence - 1}"
        return self._update_with_history(
            "SET #sequence = :sequence, seq = :seq",
            "(seq = :observed OR attribute_not_exists(seq)) AND (attribute_not_exists(#status) OR #status <> :running) "
            "AND (attribute_not_exists(halted) OR halted = :false)",
            {
                ":sequence": _n(next_sequence - 1),
                ":seq": _n(observed.seq + 1),
                ":observed": _n(observed.seq),
                ":running": _s(RUNNING),
                ":false": {"BOOL": False},
            },
            names={"#sequence": "sequence", "#status": "status"},
            history_item={
                **self._key(f"{HISTORY_PREFIX}{int(now * 1000):013d}#gap-{missing}"),
                "execution": _s(f"gap-{missing}"),
                "status": _s(SKIPPED),
                "skip_reason": _s(f"sequence numbers {missing} never arrived: {reason}"[:MAX_TEXT]),
                "started_at": _n(now),
                "closed_at": _n(now),
                "expires_at": _n(int(now + HISTORY_DAYS * 86400)),
            },
        )

    def replace(self, observed: Position, file: FileRef, execution: str, now: float, *, start_record: int = 0) -> Position:
        """`ops replace`: the halted, failed file's correction, the object version `file`,
        takes its place and runs as `execution` from `start_record`, before every file waiting
        in the queue. One transaction: the position (conditional on `seq`, FAILED, halted, not
        paused), the correction's event and version markers (so its own S3 event is a
        duplicate, `AlreadyClaimed` if it was claimed before) and `replaced_by` on the failed
        attempt's history item (which must exist). The sequence number (`key_sequence`) and
        a noted waiting message stay: the correction is the failed file."""
        assert observed.file is not None and observed.execution is not None
        failed_entry = self._history_key(observed)
        replaces = {
            "execution": observed.execution, "entry": failed_entry, "key": observed.file["key"],
            "version_id": observed.file["version_id"],
            # The file the chain of attempts is about: a replacement of a replacement is still it.
            "file_event": (observed.replaces or {}).get("file_event") or observed.file["event_id"],
        }
        replaced_by = {"execution": execution, "key": file["key"], "version_id": file["version_id"],
                       "start_record": start_record}
        position = self._update_request(
            "SET seq = :seq, execution = :execution, file_ref = :file, #status = :running, halted = :false, "
            "attempt = :zero, next_record = :start, started_at = :now, replaces = :replaces "
            "REMOVE chunk_size, batch_size, chunk_count, record_count, closed_at, closed_as, #error, cause, "
            "skip_reason, duplicate_of, failed_in",
            "seq = :observed AND #status = :failed AND halted = :true AND attribute_not_exists(paused_at)",
            {
                ":seq": _n(observed.seq + 1), ":observed": _n(observed.seq), ":execution": _s(execution),
                ":file": _s(json.dumps(file, sort_keys=True)), ":running": _s(RUNNING), ":failed": _s(FAILED),
                ":true": {"BOOL": True}, ":false": {"BOOL": False}, ":zero": _n(0), ":start": _n(start_record),
                ":now": _n(now), ":replaces": _s(json.dumps(replaces, sort_keys=True)),
            },
            names={"#status": "status", "#error": "error"},
        )
        link = self._update_request("SET replaced_by = :by", "attribute_exists(tenant)",
                                    {":by": _s(json.dumps(replaced_by, sort_keys=True))}, entry=failed_entry)
        self._make_current([{"Update": position}, {"Update": link}], file, execution, now)
        return self.read()

    def pause(self, observed: Position, reason: str, now: float) -> Position:
        """`ops pause`: no file of the tenant starts, the running one stops at its next chunk
        boundary (`record_pause`), until `unpause`. Refused (`LedgerConflict`) if the position
        changed or the tenant is paused already."""
        values: dict[str, Any] = {":now": _n(now), ":reason": _s(reason[:MAX_TEXT]), ":one": _n(1)}
        if observed.seq:
            condition = "seq = :observed"
            values[":observed"] = _n(observed.seq)
        else:
            condition = "attribute_not_exists(seq)"
        return self._update("SET paused_at = :now, pause_reason = :reason ADD seq :one",
                            f"{condition} AND attribute_not_exists(paused_at)", values)

    def unpause(self, observed: Position, now: float, *, execution: str | None = None) -> Position:
        """`ops unpause`. A file the pause stopped (PAUSED) runs on as `execution` (a new
        attempt) from `next_record`, and the paused attempt's history item is written with
        it; else the flag is cleared (the caller hands off to the waiting message)."""
        values: dict[str, Any] = {":now": _n(now), ":one": _n(1), ":observed": _n(observed.seq),
                                  ":paused": _s(PAUSED)}
        if observed.status != PAUSED:
            return self._update(
                "SET unpaused_at = :now ADD seq :one REMOVE paused_at, pause_reason",
                "seq = :observed AND attribute_exists(paused_at) AND (attribute_not_exists(#status) OR #status <> :paused)",
                values, names={"#status": "status"})
        if execution is None:
            raise ValueError("a paused file runs on under a new execution name")
        stopped = replace(observed, closed_at=now, unpaused_at=now)
        return self._update_with_history(
            "SET #status = :running, execution = :execution, started_at = :now, unpaused_at = :now, "
            "attempt = attempt + :one, seq = :seq REMOVE paused_at, pause_reason",
            "seq = :observed AND #status = :paused",
            {**values, ":running": _s(RUNNING), ":execution": _s(execution), ":seq": _n(observed.seq + 1)},
            names={"#status": "status"},
            history_item=self._history_item(stopped),
        )

    def _update_with_history(self, expression: str, condition: str, values: dict[str, Any], *,
                             names: dict[str, str], history_item: dict[str, Any]) -> Position:
        """A conditional update of the position and the put of its history item, in one
        transaction: an operator's decision is never recorded without its history entry.
        `LedgerConflict` if the condition does not hold; the position as read after it."""
        update = self._update_request(expression, condition, values, names=names)
        try:
            self.ddb.transact_write_items(TransactItems=[
                {"Update": update}, {"Put": {"TableName": self.table, "Item": history_item}}])
        except Exception as error:  # botocore ClientError
            if error_code(error) == "TransactionCanceledException":
                raise LedgerConflict(f"tenant {self.tenant}: the ledger changed since it was read") from None
            raise
        # Read back, as a waiting message may be noted meanwhile (that does not move `seq`).
        return self.read()

    # -- history ------------------------------------------------------------------------------

    def _history_key(self, position: Position) -> str:
        """The sort key of an attempt's history item: its start time and execution (idempotent)."""
        return f"{HISTORY_PREFIX}{int((position.started_at or 0) * 1000):013d}#{position.execution}"

    def _history_item(self, position: Position) -> dict[str, Any]:
        """One item per closed or skipped attempt."""
        assert position.file is not None and position.execution is not None
        item: dict[str, Any] = {
            **self._key(self._history_key(position)),
            "execution": _s(position.execution),
            "file_ref": _s(json.dumps(position.file, sort_keys=True)),
            "status": _s(position.status or ""),
            "halted": {"BOOL": position.halted},
            "attempt": _n(position.attempt),
            "next_record": _n(position.next_record),
            "started_at": _n(position.started_at or 0),
            "closed_at": _n(position.closed_at or 0),
            "expires_at": _n(int((position.closed_at or 0) + HISTORY_DAYS * 86400)),
        }
        for name in ("closed_as", "error", "cause", "skip_reason", "failed_in", "pause_reason"):
            value = getattr(position, name)
            if value:
                item[name] = _s(value)
        for name in ("duplicate_of", "replaces"):
            if getattr(position, name) is not None:
                item[name] = _s(json.dumps(getattr(position, name), sort_keys=True))
        for name in ("chunk_size", "chunk_count", "record_count", "paused_at", "unpaused_at"):
            value = getattr(position, name)
            if value is not None:
                item[name] = _n(value)
        return item

    def closed_attempt(self, execution: str) -> Position | None:
        """The history item of `execution` if the ledger knows it as a closed (or skipped) attempt:
        the current file's, or one of the `RECENT_ATTEMPTS` newest. None if it runs, or is unknown."""
        position = self.read()
        if position.execution == execution:
            if position.running:
                return None
            item = self.ddb.get_item(TableName=self.table, Key=self._key(self._history_key(position)),
                                     ConsistentRead=True).get("Item")
            return Position.from_item(self.tenant, item) if item else None
        query: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "tenant = :tenant AND entry BETWEEN :low AND :high",
            "FilterExpression": "execution = :execution",
            "ExpressionAttributeValues": {":tenant": _s(self.tenant), ":low": _s(HISTORY_PREFIX),
                                          ":high": _s(f"{HISTORY_PREFIX}9999999999999~"), ":execution": _s(execution)},
            "ScanIndexForward": False,
            "ConsistentRead": True,
            "Limit": 100,
        }
        scanned = 0
        while scanned < RECENT_ATTEMPTS:
            response = self.ddb.query(**query)
            if response.get("Items"):
                return Position.from_item(self.tenant, response["Items"][0])
            scanned += response.get("ScannedCount", 0)
            if "LastEvaluatedKey" not in response:
                break
            query["ExclusiveStartKey"] = response["LastEvaluatedKey"]
        return None

    def mark_notified(self, attempt: Position, now: float) -> None:
        """Note on the attempt's history item that its failure notification was published."""
        self._update("SET notified_at = :now", "attribute_exists(tenant)", {":now": _n(now)},
                     entry=self._history_key(attempt))

    def history(self, *, since: float = 0.0, limit: int | None = None,
                statuses: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        """Closed and skipped attempts, newest first, started at or after `since` (epoch s): all
        of them, or the newest `limit`; only those closed as one of `statuses` if given."""
        values = {
            ":tenant": _s(self.tenant),
            ":low": _s(f"{HISTORY_PREFIX}{int(since * 1000):013d}"),
            ":high": _s(f"{HISTORY_PREFIX}9999999999999~"),
        }
        query: dict[str, Any] = {
            "KeyConditionExpression": "tenant = :tenant AND entry BETWEEN :low AND :high",
            "ScanIndexForward": False,
        }
        if statuses:
            query["FilterExpression"] = "#status IN ({})".format(", ".join(f":s{n}" for n in range(len(statuses))))
            query["ExpressionAttributeNames"] = {"#status": "status"}
            values.update({f":s{n}": _s(status) for n, status in enumerate(statuses)})
        query["ExpressionAttributeValues"] = values
        return [_history_entry(Position.from_item(self.tenant, item)) for item in self._query(query, limit=limit)]


def _history_entry(position: Position) -> dict[str, Any]:
    return {
        "execution": position.execution,
        "file": position.file,
        "status": position.status,
        "closed_as": position.closed_as,
        "halted": position.halted,  # the close halted the tenant (a skip's item: False, the halt is over)
        "attempt": position.attempt,
        "next_record": position.next_record,
        "record_count": position.record_count,
        "started_at": position.started_at,
        "closed_at": position.closed_at,
        "error": position.error,
        "cause": position.cause,
        "skip_reason": position.skip_reason,
        "duplicate_of": position.duplicate_of,
        "failed_in": position.failed_in,
        "chunk_size": position.chunk_size,
        "replaces": position.replaces,
        "replaced_by": position.replaced_by,
        "paused_at": position.paused_at,
        "pause_reason": position.pause_reason,
        "unpaused_at": position.unpaused_at,
    }


def _waiting_entry(sequence: int) -> str:
    return f"{WAITING_PREFIX}{sequence:020d}"


def start_execution(sfn: Any, state_machine_arn: str, position: Position) -> bool:
    """Start the execution the position names, on its file from its first unacknowledged
    record. Idempotent: False when it exists already (`ExecutionAlreadyExists`)."""
    assert position.file is not None and position.execution is not None
    execution_input = ExecutionInput(**position.file, start_record=position.next_record)
    try:
        sfn.start_execution(
            stateMachineArn=state_machine_arn,
            name=position.execution,
            input=json.dumps(execution_input, sort_keys=True),
        )
    except Exception as error:  # botocore ClientError
        if error_code(error) != "ExecutionAlreadyExists":
            raise
        return False
    return True


def hand_off(ledger: Ledger, sqs: Any, queue_url: str, position: Position) -> bool:
    """Make the message noted as waiting visible now, if the tenant may go on (nothing runs,
    not halted), and forget the note. False if there is nothing to hand off, or the message is
    not in flight any more (received again meanwhile, with a new receipt handle, or deleted):
    then it is decided when next received, and the visibility timeout stays the fallback.
    Idempotent: run again after a failure, it makes visible what is still noted. A paused
    tenant hands off nothing: `ops unpause` does."""
    if position.halted or position.running or position.paused:
        return False
    handed_off = False
    if position.sequence is not None:
        # `key_sequence` ordering: the message of the next sequence number, if it waits.
        for sequence, receipt in ledger.waiting_sequences(after=position.sequence, limit=1):
            if sequence == position.sequence + 1:
                handed_off = _make_visible(sqs, queue_url, receipt)
                ledger.forget_waiting_sequence(sequence)
    if position.waiting_receipt and _make_visible(sqs, queue_url, position.waiting_receipt):
        ledger.clear_waiting(position.waiting_receipt)
        handed_off = True
    return handed_off


#: What SQS answers for a receipt handle whose message is not in flight any more (received again
#: meanwhile, or deleted); any other error (throttling, a fault) is raised, so the caller's retry
#: hands off again.
NOT_IN_FLIGHT_CODES = ("ReceiptHandleIsInvalid", "MessageNotInflight", "InvalidParameterValue")


def _make_visible(sqs: Any, queue_url: str, receipt: str) -> bool:
    try:
        sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=receipt, VisibilityTimeout=0)
    except Exception as error:  # botocore ClientError
        if not error_code(error).endswith(NOT_IN_FLIGHT_CODES):
            raise
        return False
    return True
