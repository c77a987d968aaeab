"""The workflow's writes: a chunk's progress, a pause at a chunk boundary, a file's close."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from lambdas.contract import DuplicateOf
from lambdas.ledger.position import (
    CLOSE_TRIES,
    CONTENT_PREFIX,
    DUPLICATE,
    FAILED,
    HISTORY_DAYS,
    MAX_TEXT,
    PAUSED,
    RUNNING,
    SUCCEEDED,
    LedgerConflict,
    Position,
    n_value,
    s_value,
)
from lambdas.ledger.store import LedgerStore
from lambdas.runtime import error_code


class WorkflowLedger(LedgerStore):
    """The workflow's writes: a chunk's progress, a pause at a chunk boundary, a file's close."""

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
        values = {
            ":execution": s_value(execution),
            ":running": s_value(RUNNING),
            ":next": n_value(next_record),
        }
        sets = ["next_record = :next"]
        if chunk_size is not None:
            sets.append("chunk_size = :size")
            values[":size"] = n_value(chunk_size)
        if chunk_count is not None:
            sets.append("chunk_count = :chunks")
            values[":chunks"] = n_value(chunk_count)
        if record_count is not None:
            sets.append("record_count = :records")
            values[":records"] = n_value(record_count)
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
                {
                    ":execution": s_value(execution),
                    ":running": s_value(RUNNING),
                    ":paused": s_value(PAUSED),
                    ":one": n_value(1),
                },
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
                {
                    ":execution": s_value(execution),
                    ":running": s_value(RUNNING),
                    ":batch": n_value(batch_size),
                    ":size": n_value(chunk_size),
                },
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
                observed,
                seq=observed.seq + 1,
                status=FAILED if failed else (DUPLICATE if duplicate else SUCCEEDED),
                closed_as=sfn_status,
                halted=failed and halt_on_failure,
                closed_at=now,
                error=error[:MAX_TEXT] if error else None,
                cause=cause[:MAX_TEXT] if cause else None,
                duplicate_of=duplicate_of if duplicate else None,
                failed_in=failed_in if failed else None,
            )
            sets = ["#status = :status", "closed_as = :closed_as", "halted = :halted", "closed_at = :now"]
            names = {"#status": "status"}
            values: dict[str, Any] = {
                ":execution": s_value(execution),
                ":running": s_value(RUNNING),
                ":next": n_value(observed.next_record),
                ":status": s_value(closed.status or ""),
                ":closed_as": s_value(sfn_status),
                ":halted": {"BOOL": closed.halted},
                ":now": n_value(now),
                ":one": n_value(1),
            }
            for name, value in (
                ("error", closed.error),
                ("cause", closed.cause),
                ("failed_in", closed.failed_in),
                ("duplicate_of", json.dumps(duplicate_of, sort_keys=True) if duplicate else None),
            ):
                if value:
                    sets.append(f"#{name} = :{name}")
                    names[f"#{name}"] = name
                    values[f":{name}"] = s_value(value)
            writes: list[dict[str, Any]] = [
                {
                    "Update": {
                        "TableName": self.table,
                        "Key": self._key(),
                        "UpdateExpression": "SET " + ", ".join(sets) + " ADD seq :one",
                        # The progress is part of the history item: it must not move meanwhile.
                        "ConditionExpression": "execution = :execution AND #status = :running AND next_record = :next",
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": values,
                    }
                },
                {"Put": {"TableName": self.table, "Item": self._history_item(closed)}},
            ]
            if closed.status == SUCCEEDED and content_sha256 and closed.file is not None:
                writes.append(
                    {"Put": {"TableName": self.table, "Item": self._content_item(content_sha256, closed)}}
                )
            try:
                self.ddb.transact_write_items(TransactItems=writes)
            except Exception as refused:  # botocore ClientError
                reasons = [
                    r.get("Code") for r in getattr(refused, "response", {}).get("CancellationReasons", [])
                ]
                if error_code(refused) != "TransactionCanceledException" or reasons[:1] != [
                    "ConditionalCheckFailed"
                ]:
                    raise
                continue  # progress was written meanwhile, or another report recorded it: read again
            return closed
        raise RuntimeError(
            f"tenant {self.tenant}: the position of {execution} kept changing while its close "
            "was recorded; try again"
        )

    def _content_item(self, content_sha256: str, position: Position) -> dict[str, Any]:
        """Remember that the file with these bytes succeeded (the latest such file wins)."""
        assert position.file is not None and position.execution is not None
        return {
            **self._key(f"{CONTENT_PREFIX}{content_sha256}"),
            "key": s_value(position.file["key"]),
            "version_id": s_value(position.file["version_id"]),
            "event_id": s_value(position.file["event_id"]),
            "execution": s_value(position.execution),
            "closed_at": n_value(position.closed_at or 0),
            "expires_at": n_value(int((position.closed_at or 0) + HISTORY_DAYS * 86400)),
        }

    def processed_content(self, content_sha256: str) -> DuplicateOf | None:
        """The file with these bytes that succeeded last, if any (strongly consistent)."""
        item = self.ddb.get_item(
            TableName=self.table, Key=self._key(f"{CONTENT_PREFIX}{content_sha256}"), ConsistentRead=True
        ).get("Item")
        if item is None:
            return None
        return DuplicateOf(
            key=item["key"]["S"], version_id=item["version_id"]["S"], event_id=item["event_id"]["S"]
        )
