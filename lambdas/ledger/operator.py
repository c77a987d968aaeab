"""The operator's transitions (`ops resume`, `skip`, `skip-gap`, `replace`, `pause`,
`unpause`), each conditional on the position the operator saw."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from lambdas.contract import FileRef
from lambdas.ledger.position import (
    FAILED,
    HISTORY_DAYS,
    HISTORY_PREFIX,
    MAX_TEXT,
    PAUSED,
    RUNNING,
    SKIPPED,
    Position,
    n_value,
    s_value,
)
from lambdas.ledger.store import LedgerStore


class OperatorLedger(LedgerStore):
    """The operator's transitions (`ops resume`, `skip`, `replace`, `pause`, `unpause`): each
    conditional on the position the operator saw."""

    def resume(self, observed: Position, execution: str, now: float) -> Position:
        """The halted, failed file runs again from `next_record`, as `execution`."""
        return self._update(
            "SET #status = :running, execution = :execution, halted = :false, started_at = :now, "
            "attempt = attempt + :one, seq = :seq REMOVE closed_at, closed_as, #error, cause, failed_in",
            "seq = :observed AND #status = :failed AND halted = :true",
            {
                ":running": s_value(RUNNING),
                ":failed": s_value(FAILED),
                ":execution": s_value(execution),
                ":true": {"BOOL": True},
                ":false": {"BOOL": False},
                ":now": n_value(now),
                ":one": n_value(1),
                ":seq": n_value(observed.seq + 1),
                ":observed": n_value(observed.seq),
            },
            names={"#status": "status", "#error": "error"},
        )

    def skip(self, observed: Position, reason: str, now: float) -> Position:
        """The halted, failed file is given up, with the operator's reason; the next file may start.
        The position and the attempt's history item are written in one transaction."""
        reason = reason[:MAX_TEXT]
        skipped = replace(
            observed, status=SKIPPED, skip_reason=reason, halted=False, closed_at=now, seq=observed.seq + 1
        )
        return self._update_with_history(
            "SET #status = :skipped, skip_reason = :reason, halted = :false, closed_at = :now, seq = :seq",
            "seq = :observed AND #status = :failed AND halted = :true",
            {
                ":skipped": s_value(SKIPPED),
                ":failed": s_value(FAILED),
                ":reason": s_value(reason),
                ":true": {"BOOL": True},
                ":false": {"BOOL": False},
                ":now": n_value(now),
                ":seq": n_value(skipped.seq),
                ":observed": n_value(observed.seq),
            },
            names={"#status": "status"},
            history_item=self._history_item(skipped),
        )

    def skip_gap(
        self, observed: Position, first_missing: int, next_sequence: int, reason: str, now: float
    ) -> Position:
        """`key_sequence` ordering: give up the missing sequence numbers before `next_sequence`
        (their files never came), with the operator's reason; the file with `next_sequence` may
        start. Only while no file runs and the tenant is not halted."""
        if next_sequence <= first_missing:
            raise ValueError(
                f"no sequence number is missing before {next_sequence} (the first missing one is "
                f"{first_missing}): nothing to skip"
            )
        missing = f"{first_missing}-{next_sequence - 1}"
        return self._update_with_history(
            "SET #sequence = :sequence, seq = :seq",
            "(seq = :observed OR attribute_not_exists(seq)) AND (attribute_not_exists(#status) OR #status <> :running) "
            "AND (attribute_not_exists(halted) OR halted = :false)",
            {
                ":sequence": n_value(next_sequence - 1),
                ":seq": n_value(observed.seq + 1),
                ":observed": n_value(observed.seq),
                ":running": s_value(RUNNING),
                ":false": {"BOOL": False},
            },
            names={"#sequence": "sequence", "#status": "status"},
            history_item={
                **self._key(f"{HISTORY_PREFIX}{int(now * 1000):013d}#gap-{missing}"),
                "execution": s_value(f"gap-{missing}"),
                "status": s_value(SKIPPED),
                "skip_reason": s_value(f"sequence numbers {missing} never arrived: {reason}"[:MAX_TEXT]),
                "started_at": n_value(now),
                "closed_at": n_value(now),
                "expires_at": n_value(int(now + HISTORY_DAYS * 86400)),
            },
        )

    def replace(
        self, observed: Position, file: FileRef, execution: str, now: float, *, start_record: int = 0
    ) -> Position:
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
            "execution": observed.execution,
            "entry": failed_entry,
            "key": observed.file["key"],
            "version_id": observed.file["version_id"],
            # The file the chain of attempts is about: a replacement of a replacement is still it.
            "file_event": (observed.replaces or {}).get("file_event") or observed.file["event_id"],
        }
        replaced_by = {
            "execution": execution,
            "key": file["key"],
            "version_id": file["version_id"],
            "start_record": start_record,
        }
        position = self._update_request(
            "SET seq = :seq, execution = :execution, file_ref = :file, #status = :running, halted = :false, "
            "attempt = :zero, next_record = :start, started_at = :now, replaces = :replaces "
            "REMOVE chunk_size, batch_size, chunk_count, record_count, closed_at, closed_as, #error, cause, "
            "skip_reason, duplicate_of, failed_in",
            "seq = :observed AND #status = :failed AND halted = :true AND attribute_not_exists(paused_at)",
            {
                ":seq": n_value(observed.seq + 1),
                ":observed": n_value(observed.seq),
                ":execution": s_value(execution),
                ":file": s_value(json.dumps(file, sort_keys=True)),
                ":running": s_value(RUNNING),
                ":failed": s_value(FAILED),
                ":true": {"BOOL": True},
                ":false": {"BOOL": False},
                ":zero": n_value(0),
                ":start": n_value(start_record),
                ":now": n_value(now),
                ":replaces": s_value(json.dumps(replaces, sort_keys=True)),
            },
            names={"#status": "status", "#error": "error"},
        )
        link = self._update_request(
            "SET replaced_by = :by",
            "attribute_exists(tenant)",
            {":by": s_value(json.dumps(replaced_by, sort_keys=True))},
            entry=failed_entry,
        )
        self._make_current([{"Update": position}, {"Update": link}], file, execution, now)
        return self.read()

    def pause(self, observed: Position, reason: str, now: float) -> Position:
        """`ops pause`: no file of the tenant starts, the running one stops at its next chunk
        boundary (`record_pause`), until `unpause`. Refused (`LedgerConflict`) if the position
        changed or the tenant is paused already."""
        values: dict[str, Any] = {
            ":now": n_value(now),
            ":reason": s_value(reason[:MAX_TEXT]),
            ":one": n_value(1),
        }
        if observed.seq:
            condition = "seq = :observed"
            values[":observed"] = n_value(observed.seq)
        else:
            condition = "attribute_not_exists(seq)"
        return self._update(
            "SET paused_at = :now, pause_reason = :reason ADD seq :one",
            f"{condition} AND attribute_not_exists(paused_at)",
            values,
        )

    def unpause(self, observed: Position, now: float, *, execution: str | None = None) -> Position:
        """`ops unpause`. A file the pause stopped (PAUSED) runs on as `execution` (a new
        attempt) from `next_record`, and the paused attempt's history item is written with
        it; else the flag is cleared (the caller hands off to the waiting message)."""
        values: dict[str, Any] = {
            ":now": n_value(now),
            ":one": n_value(1),
            ":observed": n_value(observed.seq),
            ":paused": s_value(PAUSED),
        }
        if observed.status != PAUSED:
            return self._update(
                "SET unpaused_at = :now ADD seq :one REMOVE paused_at, pause_reason",
                "seq = :observed AND attribute_exists(paused_at) AND (attribute_not_exists(#status) OR #status <> :paused)",
                values,
                names={"#status": "status"},
            )
        if execution is None:
            raise ValueError("a paused file runs on under a new execution name")
        stopped = replace(observed, closed_at=now, unpaused_at=now)
        return self._update_with_history(
            "SET #status = :running, execution = :execution, started_at = :now, unpaused_at = :now, "
            "attempt = attempt + :one, seq = :seq REMOVE paused_at, pause_reason",
            "seq = :observed AND #status = :paused",
            {
                **values,
                ":running": s_value(RUNNING),
                ":execution": s_value(execution),
                ":seq": n_value(observed.seq + 1),
            },
            names={"#status": "status"},
            history_item=self._history_item(stopped),
        )
