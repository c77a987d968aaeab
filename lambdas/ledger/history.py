"""The record of closed and skipped attempts: looked up by execution, listed newest first."""

from __future__ import annotations

from typing import Any

from lambdas.ledger.position import HISTORY_PREFIX, RECENT_ATTEMPTS, Position, n_value, s_value
from lambdas.ledger.store import LedgerStore, history_entry


class HistoryLedger(LedgerStore):
    """The record of closed and skipped attempts."""

    def closed_attempt(self, execution: str) -> Position | None:
        """The history item of `execution` if the ledger knows it as a closed (or skipped) attempt:
        the current file's, or one of the `RECENT_ATTEMPTS` newest. None if it runs, or is unknown."""
        position = self.read()
        if position.execution == execution:
            if position.running:
                return None
            item = self.ddb.get_item(
                TableName=self.table, Key=self._key(self._history_key(position)), ConsistentRead=True
            ).get("Item")
            return Position.from_item(self.tenant, item) if item else None
        query: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "tenant = :tenant AND entry BETWEEN :low AND :high",
            "FilterExpression": "execution = :execution",
            "ExpressionAttributeValues": {
                ":tenant": s_value(self.tenant),
                ":low": s_value(HISTORY_PREFIX),
                ":high": s_value(f"{HISTORY_PREFIX}9999999999999~"),
                ":execution": s_value(execution),
            },
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
        self._update(
            "SET notified_at = :now",
            "attribute_exists(tenant)",
            {":now": n_value(now)},
            entry=self._history_key(attempt),
        )

    def history(
        self, *, since: float = 0.0, limit: int | None = None, statuses: tuple[str, ...] = ()
    ) -> list[dict[str, Any]]:
        """Closed and skipped attempts, newest first, started at or after `since` (epoch s): all
        of them, or the newest `limit`; only those closed as one of `statuses` if given."""
        values = {
            ":tenant": s_value(self.tenant),
            ":low": s_value(f"{HISTORY_PREFIX}{int(since * 1000):013d}"),
            ":high": s_value(f"{HISTORY_PREFIX}9999999999999~"),
        }
        query: dict[str, Any] = {
            "KeyConditionExpression": "tenant = :tenant AND entry BETWEEN :low AND :high",
            "ScanIndexForward": False,
        }
        if statuses:
            query["FilterExpression"] = "#status IN ({})".format(
                ", ".join(f":s{n}" for n in range(len(statuses)))
            )
            query["ExpressionAttributeNames"] = {"#status": "status"}
            values.update({f":s{n}": s_value(status) for n, status in enumerate(statuses)})
        query["ExpressionAttributeValues"] = values
        return [
            history_entry(Position.from_item(self.tenant, item)) for item in self._query(query, limit=limit)
        ]
