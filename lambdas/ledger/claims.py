"""The controller's transitions: a file made current (claimed), and the messages that wait for
their turn."""

from __future__ import annotations

import contextlib
import json

from lambdas.contract import FileRef
from lambdas.ledger.position import (
    EVENT_PREFIX,
    RUNNING,
    WAITING_DAYS,
    WAITING_PREFIX,
    LedgerConflict,
    Position,
    n_value,
    s_value,
    version_entry,
)
from lambdas.ledger.store import LedgerStore, waiting_entry


class ControllerLedger(LedgerStore):
    """The controller's transitions: a file made current (claimed), the messages that wait."""

    def claim(
        self, observed: Position, file: FileRef, execution: str, now: float, *, sequence: int | None = None
    ) -> Position:
        """Make `file` the current file, run by `execution`, if the position is still `observed`
        and the file was never claimed before: neither its event id nor its object version
        (both remembered for `EVENT_DAYS`).
        `sequence`: the file's sequence number (`key_sequence` ordering), kept in the position.

        `LedgerConflict` if the position changed; `AlreadyClaimed` if the file was claimed before.
        """
        values = {
            ":seq": n_value(observed.seq + 1),
            ":execution": s_value(execution),
            ":file": s_value(json.dumps(file, sort_keys=True)),
            ":running": s_value(RUNNING),
            ":zero": n_value(0),
            ":false": {"BOOL": False},
            ":now": n_value(now),
        }
        sets = (
            "SET seq = :seq, execution = :execution, file_ref = :file, #status = :running, halted = :false, "
            "attempt = :zero, next_record = :zero, started_at = :now"
        )
        if sequence is not None:
            sets += ", #sequence = :sequence"
            values[":sequence"] = n_value(sequence)
        if observed.seq:
            condition = "seq = :observed"
            values[":observed"] = n_value(observed.seq)
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
            "ExpressionAttributeNames": {
                "#status": "status",
                "#error": "error",
                **({"#sequence": "sequence"} if sequence is not None else {}),
            },
        }
        self._make_current([{"Update": position}], file, execution, now)
        return self.read()

    def record_waiting(
        self, observed: Position, message_id: str, receipt: str, now: float, sent_at: float | None = None
    ) -> Position:
        """Note the message waiting at the head of the queue, for the close to make it visible."""
        return self._update(
            "SET waiting_message_id = :id, waiting_receipt = :receipt, waiting_since = :now, waiting_sent_at = :sent",
            "seq = :observed",
            {
                ":id": s_value(message_id),
                ":receipt": s_value(receipt),
                ":now": n_value(now),
                ":sent": n_value(sent_at or now),
                ":observed": n_value(observed.seq),
            },
        )

    def claimed_before(self, file: FileRef) -> bool:
        """True if this file was ever made current: its event id, or its object version under
        another event id (a replay); the same markers the claim refuses a duplicate on."""
        entries = (
            f"{EVENT_PREFIX}{file['event_id']}",
            version_entry(file["bucket"], file["key"], file["version_id"]),
        )
        return any(
            self.ddb.get_item(TableName=self.table, Key=self._key(entry), ConsistentRead=True).get("Item")
            is not None
            for entry in entries
        )

    def version_claim(self, bucket: str, key: str, version_id: str) -> str | None:
        """The execution that claimed this object version, if one did (its `version#` marker)."""
        item = self.ddb.get_item(
            TableName=self.table, Key=self._key(version_entry(bucket, key, version_id)), ConsistentRead=True
        ).get("Item")
        return item["execution"]["S"] if item else None

    def note_waiting_sequence(self, sequence: int, message_id: str, receipt: str, now: float) -> None:
        """`key_sequence` ordering: note the message whose file has `sequence`, so that the close of
        the file before it makes it visible at once (the latest receipt wins)."""
        self.ddb.put_item(
            TableName=self.table,
            Item={
                **self._key(waiting_entry(sequence)),
                "message_id": s_value(message_id),
                "receipt": s_value(receipt),
                "noted_at": n_value(now),
                "expires_at": n_value(int(now + WAITING_DAYS * 86400)),
            },
        )

    def waiting_sequences(self, *, after: int = -1, limit: int | None = None) -> list[tuple[int, str]]:
        """`key_sequence` ordering: the noted waiting messages above `after` as (sequence, receipt),
        lowest first: all of them, or the lowest `limit`."""
        items = self._query(
            {
                "KeyConditionExpression": "tenant = :tenant AND entry BETWEEN :low AND :high",
                "ExpressionAttributeValues": {
                    ":tenant": s_value(self.tenant),
                    ":low": s_value(waiting_entry(after + 1)),
                    ":high": s_value(f"{WAITING_PREFIX}~"),
                },
                "ConsistentRead": True,
            },
            limit=limit,
        )
        return [(int(item["entry"]["S"][len(WAITING_PREFIX) :]), item["receipt"]["S"]) for item in items]

    def forget_waiting_sequence(self, sequence: int) -> None:
        self.ddb.delete_item(TableName=self.table, Key=self._key(waiting_entry(sequence)))

    def clear_waiting(self, receipt: str) -> None:
        """Forget the waiting message once it was made visible (if it is still the one noted)."""
        with contextlib.suppress(LedgerConflict):  # noted again by a later controller: that note stands
            self._update(
                "REMOVE waiting_message_id, waiting_receipt, waiting_since, waiting_sent_at",
                "waiting_receipt = :receipt",
                {":receipt": s_value(receipt)},
            )
