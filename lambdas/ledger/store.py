"""Reads and conditional writes of one tenant's ledger, which every role's transitions use."""

from __future__ import annotations

import json
from typing import Any

from lambdas.contract import FileRef
from lambdas.ledger.position import (
    EVENT_DAYS,
    EVENT_PREFIX,
    HISTORY_DAYS,
    HISTORY_PREFIX,
    POSITION,
    WAITING_PREFIX,
    AlreadyClaimed,
    LedgerConflict,
    Position,
    n_value,
    s_value,
    version_entry,
)
from lambdas.runtime import error_code


class LedgerStore:
    """The ledger of one tenant in one table (`ddb`: a boto3 DynamoDB client): reads and the
    conditional writes every role's transitions are made of."""

    def __init__(self, ddb: Any, table: str, tenant: str) -> None:
        self.ddb, self.table, self.tenant = ddb, table, tenant

    def _key(self, entry: str = POSITION) -> dict[str, Any]:
        return {"tenant": s_value(self.tenant), "entry": s_value(entry)}

    def read(self) -> Position:
        """The position, strongly consistent."""
        item = self.ddb.get_item(TableName=self.table, Key=self._key(), ConsistentRead=True).get("Item")
        return Position.from_item(self.tenant, item)

    def _update(
        self,
        expression: str,
        condition: str,
        values: dict[str, Any],
        *,
        names: dict[str, str] | None = None,
        entry: str = POSITION,
    ) -> Position:
        """A conditional update of `entry`; the position as it is after it."""
        item = self._write(expression, condition, values, names=names, entry=entry, return_values="ALL_NEW")
        return Position.from_item(self.tenant, item)

    def _write(
        self,
        expression: str,
        condition: str,
        values: dict[str, Any],
        *,
        names: dict[str, str] | None = None,
        entry: str = POSITION,
        return_values: str = "NONE",
    ) -> dict[str, Any] | None:
        """A conditional update of `entry`, returning what `return_values` asks for (None for
        "NONE"); `LedgerConflict` if the condition does not hold."""
        kwargs = self._update_request(expression, condition, values, names=names, entry=entry)
        try:
            attributes: dict[str, Any] | None = self.ddb.update_item(
                **kwargs, ReturnValues=return_values
            ).get("Attributes")
            return attributes
        except Exception as error:  # botocore ClientError; not imported to keep this stdlib-only
            if error_code(error) == "ConditionalCheckFailedException":
                raise LedgerConflict(f"tenant {self.tenant}: the ledger changed since it was read") from None
            raise

    def _update_request(
        self,
        expression: str,
        condition: str,
        values: dict[str, Any],
        *,
        names: dict[str, str] | None = None,
        entry: str = POSITION,
    ) -> dict[str, Any]:
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

    def _make_current(self, writes: list[dict[str, Any]], file: FileRef, execution: str, now: float) -> None:
        """Run `writes` (the position's update first) in one transaction with the markers of
        `file`: its event id and its object version, which must not exist (`AlreadyClaimed`)."""
        markers = [
            {
                **self._key(f"{EVENT_PREFIX}{file['event_id']}"),
                "execution": s_value(execution),
                "claimed_at": n_value(now),
                "expires_at": n_value(int(now + EVENT_DAYS * 86400)),
            },
            {
                **self._key(version_entry(file["bucket"], file["key"], file["version_id"])),
                "bucket": s_value(file["bucket"]),
                "key": s_value(file["key"]),
                "version_id": s_value(file["version_id"]),
                "event_id": s_value(file["event_id"]),
                "execution": s_value(execution),
                "claimed_at": n_value(now),
                "expires_at": n_value(int(now + EVENT_DAYS * 86400)),
            },
        ]
        puts = [
            {
                "Put": {
                    "TableName": self.table,
                    "Item": item,
                    "ConditionExpression": "attribute_not_exists(tenant)",
                }
            }
            for item in markers
        ]
        try:
            self.ddb.transact_write_items(TransactItems=[writes[0], *puts, *writes[1:]])
        except Exception as error:  # botocore ClientError
            if error_code(error) != "TransactionCanceledException":
                raise
            reasons = [r.get("Code") for r in getattr(error, "response", {}).get("CancellationReasons", [])]
            # Only when the position's condition held is it a duplicate: else decide again.
            if (
                len(reasons) == 3 + len(writes[1:])
                and reasons[0] in (None, "None")
                and "ConditionalCheckFailed" in reasons[1:3]
            ):
                raise AlreadyClaimed(
                    f"tenant {self.tenant}: file {file['event_id']} was claimed before"
                ) from None
            raise LedgerConflict(f"tenant {self.tenant}: the ledger changed since it was read") from None

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

    def _update_with_history(
        self,
        expression: str,
        condition: str,
        values: dict[str, Any],
        *,
        names: dict[str, str],
        history_item: dict[str, Any],
    ) -> Position:
        """A conditional update of the position and the put of its history item, in one
        transaction: an operator's decision is never recorded without its history entry.
        `LedgerConflict` if the condition does not hold; the position as read after it."""
        update = self._update_request(expression, condition, values, names=names)
        try:
            self.ddb.transact_write_items(
                TransactItems=[{"Update": update}, {"Put": {"TableName": self.table, "Item": history_item}}]
            )
        except Exception as error:  # botocore ClientError
            if error_code(error) == "TransactionCanceledException":
                raise LedgerConflict(f"tenant {self.tenant}: the ledger changed since it was read") from None
            raise
        # Read back, as a waiting message may be noted meanwhile (that does not move `seq`).
        return self.read()

    def _history_key(self, position: Position) -> str:
        """The sort key of an attempt's history item: its start time and execution (idempotent)."""
        return f"{HISTORY_PREFIX}{int((position.started_at or 0) * 1000):013d}#{position.execution}"

    def _history_item(self, position: Position) -> dict[str, Any]:
        """One item per closed or skipped attempt."""
        assert position.file is not None and position.execution is not None
        item: dict[str, Any] = {
            **self._key(self._history_key(position)),
            "execution": s_value(position.execution),
            "file_ref": s_value(json.dumps(position.file, sort_keys=True)),
            "status": s_value(position.status or ""),
            "halted": {"BOOL": position.halted},
            "attempt": n_value(position.attempt),
            "next_record": n_value(position.next_record),
            "started_at": n_value(position.started_at or 0),
            "closed_at": n_value(position.closed_at or 0),
            "expires_at": n_value(int((position.closed_at or 0) + HISTORY_DAYS * 86400)),
        }
        for name in ("closed_as", "error", "cause", "skip_reason", "failed_in", "pause_reason"):
            value = getattr(position, name)
            if value:
                item[name] = s_value(value)
        for name in ("duplicate_of", "replaces"):
            if getattr(position, name) is not None:
                item[name] = s_value(json.dumps(getattr(position, name), sort_keys=True))
        for name in ("chunk_size", "chunk_count", "record_count", "paused_at", "unpaused_at"):
            value = getattr(position, name)
            if value is not None:
                item[name] = n_value(value)
        return item


def history_entry(position: Position) -> dict[str, Any]:
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


def waiting_entry(sequence: int) -> str:
    return f"{WAITING_PREFIX}{sequence:020d}"
