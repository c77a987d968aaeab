"""The ledger's conditional writes: a stale writer never moves a tenant backwards."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from lambdas.contract import FileRef
from lambdas.ledger import (
    DUPLICATE,
    FAILED,
    RUNNING,
    SKIPPED,
    SUCCEEDED,
    AlreadyClaimed,
    Ledger,
    LedgerConflict,
    Position,
    version_entry,
)
from tests.handlers.support import TENANT

NOW = 1_700_000_000.0


def file(event_id: str, *, key: str | None = None, version_id: str = "v1") -> FileRef:
    return FileRef(
        tenant=TENANT,
        event_id=event_id,
        bucket="landing",
        key=key or f"acme/{event_id}.csv",
        version_id=version_id,
        size=1,
        etag=None,
        event_time="",
    )


def test_an_empty_ledger_reads_as_an_empty_position(ledger):
    position = ledger.read()
    assert (position.seq, position.execution, position.status, position.halted) == (0, None, None, False)


def test_claim_makes_the_file_current_and_remembers_its_event(ledger):
    after = ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    assert (after.seq, after.execution, after.file_id, after.status, after.next_record) == (
        1,
        "e1",
        "e1",
        RUNNING,
        0,
    )
    with pytest.raises(AlreadyClaimed):
        ledger.claim(after, file("e1"), "e1", NOW)


def test_a_second_event_for_a_claimed_object_version_is_already_claimed(ledger, ddb):
    """A replay (reconcile, DLQ) carries a new event id for the same version: let go, never run."""
    first = ledger.claim(ledger.read(), file("e1", key="acme/a.csv"), "e1", NOW)
    closed = ledger.record_close("e1", "SUCCEEDED", halt_on_failure=True, now=NOW + 1)
    with pytest.raises(AlreadyClaimed):
        ledger.claim(closed, file("reconcile-1", key="acme/a.csv"), "reconcile-1", NOW + 2)
    after = ledger.read()
    assert (after.seq, after.execution, after.status) == (first.seq + 1, "e1", SUCCEEDED)
    entries = {i["entry"]["S"] for i in ddb.scan(TableName=ledger.table)["Items"]}
    assert "event#reconcile-1" not in entries  # the cancelled transaction wrote nothing


def test_a_claimed_event_id_is_already_claimed_whatever_version_it_names(ledger):
    """Only the event marker refuses it (the version is new): still a duplicate event."""
    ledger.claim(ledger.read(), file("e1", version_id="v1"), "e1", NOW)
    closed = ledger.record_close("e1", "SUCCEEDED", halt_on_failure=True, now=NOW + 1)
    with pytest.raises(AlreadyClaimed):
        ledger.claim(closed, file("e1", version_id="v2"), "e1", NOW + 2)
    assert ledger.read().seq == closed.seq


def test_another_version_of_the_same_key_is_a_new_file(ledger):
    ledger.claim(ledger.read(), file("e1", key="acme/a.csv", version_id="v1"), "e1", NOW)
    closed = ledger.record_close("e1", "SUCCEEDED", halt_on_failure=True, now=NOW + 1)
    after = ledger.claim(closed, file("e2", key="acme/a.csv", version_id="v2"), "e2", NOW + 2)
    assert (after.execution, after.status, after.file["version_id"]) == ("e2", RUNNING, "v2")


def test_a_duplicate_version_from_a_stale_read_is_a_conflict_then_already_claimed(ledger):
    """Only a claim whose position still holds is a duplicate; a stale one decides again."""
    stale = ledger.read()
    ledger.claim(stale, file("e1", key="acme/a.csv"), "e1", NOW)
    with pytest.raises(LedgerConflict):
        ledger.claim(stale, file("e2", key="acme/a.csv"), "e2", NOW)
    with pytest.raises(AlreadyClaimed):
        ledger.claim(ledger.read(), file("e2", key="acme/a.csv"), "e2", NOW)


def stored(ddb: Any, ledger: Ledger, entry: str) -> dict[str, str]:
    """The ledger's item `entry` as stored, each attribute's string or number as text."""
    item = ddb.get_item(TableName=ledger.table, Key={"tenant": {"S": TENANT}, "entry": {"S": entry}})["Item"]
    return {k: v.get("S", v.get("N")) for k, v in item.items()}


def test_the_markers_name_the_event_the_version_and_who_claimed_them(ledger, ddb):
    ledger.claim(ledger.read(), file("e1", key="acme/dir/a b.csv", version_id="v9"), "e1-exec", NOW)
    entry = version_entry("landing", "acme/dir/a b.csv", "v9")
    expires_at = str(int(NOW + 400 * 86400))
    assert stored(ddb, ledger, entry) == {
        "tenant": TENANT,
        "entry": entry,
        "bucket": "landing",
        "key": "acme/dir/a b.csv",
        "version_id": "v9",
        "event_id": "e1",
        "execution": "e1-exec",
        "claimed_at": str(NOW),
        "expires_at": expires_at,
    }
    assert stored(ddb, ledger, "event#e1") == {
        "tenant": TENANT,
        "entry": "event#e1",
        "execution": "e1-exec",
        "claimed_at": str(NOW),
        "expires_at": expires_at,
    }


def test_a_claim_starts_the_next_file_afresh(ledger, ddb):
    """GIVEN a file that was pinned, made progress, failed with an error in register, was skipped
    with a reason, and a message noted waiting behind it WHEN the next file is claimed THEN its
    position carries nothing of the file before it: only the new file, its execution and start."""
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.pin_settings("e1", 50, 10)
    ledger.record_progress("e1", 120, chunk_size=50, chunk_count=4, record_count=180)
    failed = ledger.record_close(
        "e1",
        "FAILED",
        halt_on_failure=True,
        now=NOW + 1,
        error="SinkRejectedError",
        cause="the core system refused record 120",
        failed_in="register",
    )
    assert (failed.error, failed.cause, failed.failed_in, failed.chunk_count) == (
        "SinkRejectedError",
        "the core system refused record 120",
        "register",
        4,
    )
    skipped = ledger.skip(failed, "agreed with the tenant", NOW + 2)
    waiting = ledger.record_waiting(skipped, "m2", "r2", NOW + 3, sent_at=NOW)

    claimed = ledger.claim(waiting, file("e2"), "e2", NOW + 4)

    assert claimed == Position(
        tenant=TENANT,
        seq=waiting.seq + 1,
        execution="e2",
        file=file("e2"),
        status=RUNNING,
        halted=False,
        attempt=0,
        next_record=0,
        chunk_size=None,
        chunk_count=None,
        record_count=None,
        started_at=NOW + 4,
        closed_at=None,
        closed_as=None,
        error=None,
        cause=None,
        skip_reason=None,
        waiting_message_id=None,
        waiting_receipt=None,
        waiting_since=None,
        waiting_sent_at=None,
    )
    # Nothing but the position's own attributes is stored on it.
    assert set(stored(ddb, ledger, "position")) == {
        "tenant",
        "entry",
        "seq",
        "execution",
        "file_ref",
        "status",
        "halted",
        "attempt",
        "next_record",
        "started_at",
    }


def test_a_cancelled_claim_that_names_no_reasons_is_a_conflict(ledger, ddb, monkeypatch):
    """A cancellation without its reasons cannot be told a duplicate: the gate decides again
    (`LedgerConflict`), it never lets the message go as already claimed."""

    def cancelled(**_: Any) -> None:
        raise ClientError(
            {"Error": {"Code": "TransactionCanceledException", "Message": "cancelled"}}, "TransactWriteItems"
        )

    monkeypatch.setattr(ddb, "transact_write_items", cancelled)
    with pytest.raises(LedgerConflict):
        ledger.claim(ledger.read(), file("e1"), "e1", NOW)


def test_a_version_entry_is_a_hash_of_bucket_key_and_version():
    entry = version_entry("landing", "acme/a.csv", "v1")
    assert entry.startswith("version#") and len(entry) == len("version#") + 64
    # Stored by every release: a replay of a version claimed before an upgrade must still find
    # its marker, so the entry of a version never changes (the SHA-256 of the NUL-joined parts).
    assert entry == "version#dad375c43c650b105594f1af40f4ded41a06ca16e3d542b5b53411573a94afb7"
    assert entry == version_entry("landing", "acme/a.csv", "v1")
    # Every part counts, and the parts cannot run into each other.
    assert (
        len(
            {
                entry,
                version_entry("landing2", "acme/a.csv", "v1"),
                version_entry("landing", "acme/b.csv", "v1"),
                version_entry("landing", "acme/a.csv", "v2"),
                version_entry("landing", "acme/a.csvv", "1"),
            }
        )
        == 5
    )


def test_a_claim_from_a_stale_read_is_refused(ledger):
    stale = ledger.read()
    ledger.claim(stale, file("e1"), "e1", NOW)
    with pytest.raises(LedgerConflict):
        ledger.claim(stale, file("e2"), "e2", NOW)
    assert ledger.read().execution == "e1"


def test_progress_only_moves_forward_and_only_for_the_running_execution(ledger):
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.record_progress("e1", 5, chunk_size=3, chunk_count=4, record_count=10)
    with pytest.raises(LedgerConflict):
        ledger.record_progress("e1", 4)
    with pytest.raises(LedgerConflict):
        ledger.record_progress("someone-else", 9)
    position = ledger.read()
    assert (position.next_record, position.chunk_size, position.chunk_count, position.record_count) == (
        5,
        3,
        4,
        10,
    )


@pytest.mark.parametrize(
    ("status", "halt", "expected", "halted"),
    [
        ("SUCCEEDED", True, SUCCEEDED, False),
        ("FAILED", True, FAILED, True),
        ("TIMED_OUT", True, FAILED, True),
        ("ABORTED", True, FAILED, True),
        ("FAILED", False, FAILED, False),
    ],
)
def test_a_close_is_recorded_once_and_halts_a_failure_when_asked(ledger, status, halt, expected, halted):
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    after = ledger.record_close("e1", status, halt_on_failure=halt, now=NOW + 1, error="E", cause="C")
    assert (after.status, after.closed_as, after.halted, after.seq) == (expected, status, halted, 2)
    with pytest.raises(LedgerConflict):  # the second report of the same close
        ledger.record_close("e1", status, halt_on_failure=halt, now=NOW + 2)
    (entry,) = ledger.history()
    assert (entry["execution"], entry["status"], entry["closed_as"], entry["halted"]) == (
        "e1",
        expected,
        status,
        halted,
    )


def test_resume_and_skip_need_a_halted_failed_file(ledger):
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    with pytest.raises(LedgerConflict):
        ledger.resume(ledger.read(), "e1-r1", NOW)
    ledger.record_progress("e1", 7)
    failed = ledger.record_close("e1", "FAILED", halt_on_failure=True, now=NOW)
    resumed = ledger.resume(failed, "e1-r1", NOW + 5)
    assert (resumed.status, resumed.execution, resumed.attempt, resumed.next_record, resumed.halted) == (
        RUNNING,
        "e1-r1",
        1,
        7,
        False,
    )
    with pytest.raises(LedgerConflict):  # a stale resume
        ledger.resume(failed, "e1-r2", NOW + 6)
    failed_again = ledger.record_close("e1-r1", "FAILED", halt_on_failure=True, now=NOW + 7)
    skipped = ledger.skip(failed_again, "bad data, agreed with the tenant", NOW + 8)
    assert (skipped.status, skipped.skip_reason, skipped.halted) == (
        SKIPPED,
        "bad data, agreed with the tenant",
        False,
    )
    # One entry per attempt, newest first; the skipped attempt keeps what made it fail. The
    # resumed attempt halted the tenant until the resume; the skip ended the other's halt.
    history = ledger.history()
    assert [(e["execution"], e["status"], e["halted"]) for e in history] == [
        ("e1-r1", SKIPPED, False),
        ("e1", FAILED, True),
    ]
    assert history[0]["closed_as"] == "FAILED"


def test_waiting_is_noted_on_the_position_it_was_decided_on(ledger):
    first = ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.record_waiting(first, "m2", "r2", NOW)
    assert ledger.read().waiting_receipt == "r2"
    closed = ledger.record_close("e1", "SUCCEEDED", halt_on_failure=True, now=NOW)
    with pytest.raises(LedgerConflict):
        ledger.record_waiting(first, "m3", "r3", NOW)  # decided on a position that has moved on
    ledger.clear_waiting("other")
    assert ledger.read().waiting_receipt == "r2"
    ledger.clear_waiting("r2")
    assert ledger.read().waiting_receipt is None and closed.seq == 2


def test_the_stored_items_keep_their_documented_shape(ledger, ddb):
    """What ops, the history and an operator reading the table rely on: the entry names and the
    state values as stored (docs/architecture.md, "Ledger")."""
    after = ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    assert after.attempt == 0
    items = {i["entry"]["S"]: i for i in ddb.scan(TableName=ledger.table)["Items"]}
    assert set(items) == {"position", "event#e1", version_entry("landing", "acme/e1.csv", "v1")}
    assert items["position"]["status"] == {"S": "RUNNING"}
    ledger.record_close("e1", "FAILED", halt_on_failure=True, now=NOW + 1, cause="x" * 5000)
    items = {i["entry"]["S"]: i for i in ddb.scan(TableName=ledger.table)["Items"]}
    history = next(k for k in items if k.startswith("file#"))
    assert history == f"file#{int(NOW * 1000):013d}#e1"
    assert items["position"]["status"] == {"S": "FAILED"} and items[history]["status"] == {"S": "FAILED"}
    assert len(items["position"]["cause"]["S"]) == 2000  # a cause is a summary: kept short
    ledger.skip(ledger.read(), "why", NOW + 2)
    assert ddb.get_item(TableName=ledger.table, Key={"tenant": {"S": TENANT}, "entry": {"S": "position"}})[
        "Item"
    ]["status"] == {"S": "SKIPPED"}


def test_a_position_says_whether_its_file_runs_and_which_it_is(ledger):
    assert ledger.read().running is False and ledger.read().file_id is None
    claimed = ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    assert claimed.running is True and claimed.file_id == "e1"
    assert ledger.record_close("e1", "SUCCEEDED", halt_on_failure=True, now=NOW).running is False


def test_history_and_event_markers_expire_after_400_days(ledger, ddb):
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.record_close("e1", "SUCCEEDED", halt_on_failure=True, now=NOW + 10)
    items = {i["entry"]["S"]: i for i in ddb.scan(TableName=ledger.table)["Items"]}
    history = next(k for k in items if k.startswith("file#"))
    assert items[history]["expires_at"] == {"N": str(int(NOW + 10 + 400 * 86400))}
    assert items["event#e1"]["expires_at"] == {"N": str(int(NOW + 400 * 86400))}
    assert "expires_at" not in items["position"]  # the position never expires


def test_a_waiting_sequence_note_expires_after_15_days(ledger, ddb):
    """A `key_sequence` note outlives the queue's 14-day retention of its message, no longer."""
    ledger.note_waiting_sequence(7, "m7", "r7", NOW)
    (entry,) = [
        entry
        for entry in (i["entry"]["S"] for i in ddb.scan(TableName=ledger.table)["Items"])
        if entry.startswith("waiting#")
    ]
    assert stored(ddb, ledger, entry) == {
        "tenant": TENANT,
        "entry": entry,
        "message_id": "m7",
        "receipt": "r7",
        "noted_at": str(NOW),
        "expires_at": str(int(NOW + 15 * 86400)),
    }
    assert ledger.waiting_sequences() == [(7, "r7")]


SHA = "0f" * 32


def test_a_success_with_a_content_hash_remembers_that_file_for_the_content(ledger, ddb):
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.record_close("e1", "SUCCEEDED", halt_on_failure=True, now=NOW + 10, content_sha256=SHA)
    assert ledger.processed_content(SHA) == {"key": "acme/e1.csv", "version_id": "v1", "event_id": "e1"}
    item = ddb.get_item(
        TableName=ledger.table, Key={"tenant": {"S": TENANT}, "entry": {"S": f"content#{SHA}"}}
    )["Item"]
    assert (item["execution"], item["closed_at"], item["expires_at"]) == (
        {"S": "e1"},
        {"N": str(NOW + 10)},
        {"N": str(int(NOW + 10 + 400 * 86400))},
    )
    assert ledger.processed_content("1" * 64) is None


@pytest.mark.parametrize("status", ["FAILED", "TIMED_OUT", "ABORTED"])
def test_a_failed_file_never_becomes_the_content_of_record(ledger, status):
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.record_close("e1", status, halt_on_failure=False, now=NOW + 1, content_sha256=SHA)
    assert ledger.processed_content(SHA) is None


def test_a_duplicate_closes_as_duplicate_of_the_earlier_file_and_the_next_claim_forgets_it(ledger):
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.record_close("e1", "SUCCEEDED", halt_on_failure=True, now=NOW + 1, content_sha256=SHA)
    ledger.claim(ledger.read(), file("e2"), "e2", NOW + 2)
    earlier = {"key": "acme/e1.csv", "version_id": "v1", "event_id": "e1"}
    after = ledger.record_close(
        "e2", "SUCCEEDED", halt_on_failure=True, now=NOW + 3, content_sha256=SHA, duplicate_of=earlier
    )
    assert (after.status, after.duplicate_of, after.halted, after.running) == (
        DUPLICATE,
        earlier,
        False,
        False,
    )
    assert ledger.processed_content(SHA)["event_id"] == "e1"  # the file of record stays the one sent
    assert [(e["execution"], e["status"], e["duplicate_of"]) for e in ledger.history()] == [
        ("e2", DUPLICATE, earlier),
        ("e1", SUCCEEDED, None),
    ]
    nxt = ledger.claim(after, file("e3"), "e3", NOW + 4)
    assert (nxt.status, nxt.duplicate_of) == (RUNNING, None)


def test_a_failure_is_never_recorded_as_a_duplicate(ledger):
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    after = ledger.record_close(
        "e1",
        "FAILED",
        halt_on_failure=True,
        now=NOW + 1,
        duplicate_of={"key": "k", "version_id": "v", "event_id": "e0"},
    )
    assert (after.status, after.duplicate_of, after.halted) == (FAILED, None, True)


def test_a_files_settings_are_pinned_once_and_forgotten_with_the_next_file(ledger):
    """GIVEN a running file WHEN its first register invocation pins chunk 3 / batch 2 and a later
    one (settings changed) pins 5 / 4 THEN the first stays; a stale execution cannot pin; the next
    file claimed starts unpinned."""
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)

    pinned = ledger.pin_settings("e1", 3, 2)
    assert pinned == ledger.read()  # the position as the update left it, the tenant's
    assert (pinned.chunk_size, pinned.batch_size) == (3, 2)
    assert (ledger.pin_settings("e1", 5, 4).chunk_size, ledger.read().batch_size) == (3, 2)
    with pytest.raises(LedgerConflict):
        ledger.pin_settings("someone-else", 5, 4)

    ledger.record_close("e1", "SUCCEEDED", halt_on_failure=True, now=NOW + 1)
    with pytest.raises(LedgerConflict):  # a closed file is not pinned again, not even by its own execution
        ledger.pin_settings("e1", 3, 2)
    ledger.claim(ledger.read(), file("e2"), "e2", NOW + 2)
    assert (ledger.read().chunk_size, ledger.read().batch_size) == (None, None)


def test_the_waiting_sequences_are_all_read_however_many_pages_they_fill(ledger, ddb):
    """GIVEN 1,100 files waiting for their sequence numbers, each noted with a long receipt
    handle (more than one 1 MB page of the ledger) WHEN the waiting ones are read THEN all come
    back, lowest first (`ops status` lists them); `limit=1` reads just the lowest (the hand-off)."""
    receipt = "r" * 1000  # SQS receipt handles run to 1,024 characters
    items = [
        {
            "tenant": {"S": TENANT},
            "entry": {"S": f"waiting#{n:020d}"},
            "message_id": {"S": f"m{n}"},
            "receipt": {"S": f"{receipt}{n}"},
            "noted_at": {"N": str(NOW)},
        }
        for n in range(1, 1101)
    ]
    for start in range(0, len(items), 25):
        ddb.batch_write_item(
            RequestItems={ledger.table: [{"PutRequest": {"Item": i}} for i in items[start : start + 25]]}
        )

    waiting = ledger.waiting_sequences(after=0)

    assert [sequence for sequence, _ in waiting] == list(range(1, 1101))
    assert ledger.waiting_sequences(after=500, limit=1) == [(501, f"{receipt}501")]


def test_a_close_and_its_history_item_are_written_together_or_not_at_all(ledger, ddb):
    """GIVEN the close's transaction fails (throttled) THEN neither the position nor the history
    changed, so the retry records both; a recorded close never lacks its history item."""
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)

    class Throttled:
        def __getattr__(self, name: str) -> Any:
            return getattr(ddb, name)

        def transact_write_items(self, **kwargs: Any) -> Any:
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "TransactWriteItems"
            )

    with pytest.raises(ClientError):
        Ledger(Throttled(), ledger.table, TENANT).record_close(
            "e1", "FAILED", halt_on_failure=True, now=NOW + 1
        )
    assert ledger.read().running and ledger.history() == []

    ledger.record_close("e1", "FAILED", halt_on_failure=True, now=NOW + 2, error="E", failed_in="register")
    (entry,) = ledger.history()
    assert (entry["status"], entry["error"], entry["failed_in"], entry["closed_at"]) == (
        FAILED,
        "E",
        "register",
        NOW + 2,
    )


def test_a_close_racing_a_progress_write_is_recorded_with_the_later_progress(ledger, ddb):
    """GIVEN the register function writes progress between the close's read and its write (a
    timed-out execution's last invocation) THEN the close is tried again and its history item
    has the progress the position has."""
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.record_progress("e1", 3, chunk_size=5, chunk_count=2, record_count=10)

    class Racing:
        raced = False

        def __getattr__(self, name: str) -> Any:
            return getattr(ddb, name)

        def transact_write_items(self, **kwargs: Any) -> Any:
            if not Racing.raced:
                Racing.raced = True
                ledger.record_progress("e1", 7)
            return ddb.transact_write_items(**kwargs)

    closed = Ledger(Racing(), ledger.table, TENANT).record_close(
        "e1", "TIMED_OUT", halt_on_failure=True, now=NOW + 1
    )

    assert Racing.raced and closed.next_record == 7 and ledger.read().next_record == 7
    assert [e["next_record"] for e in ledger.history()] == [7]


def test_closed_attempt_finds_a_closed_attempt_also_after_the_position_moved_on(ledger):
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    assert ledger.closed_attempt("e1") is None  # it runs
    ledger.record_close("e1", "FAILED", halt_on_failure=False, now=NOW + 1, error="E")
    assert ledger.closed_attempt("e1").status == FAILED  # the current file's
    for n in range(2, 5):
        ledger.claim(ledger.read(), file(f"e{n}"), f"e{n}", NOW + 10 * n)
        ledger.record_close(f"e{n}", "SUCCEEDED", halt_on_failure=False, now=NOW + 10 * n + 1)

    found = ledger.closed_attempt("e1")

    assert (found.execution, found.status, found.error, found.file["key"]) == (
        "e1",
        FAILED,
        "E",
        "acme/e1.csv",
    )
    assert ledger.closed_attempt("by-hand") is None


def test_a_notification_mark_is_kept_on_the_attempts_history_item(ledger):
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    closed = ledger.record_close("e1", "FAILED", halt_on_failure=True, now=NOW + 1)
    assert ledger.closed_attempt("e1").notified_at is None

    ledger.mark_notified(closed, NOW + 2)

    assert ledger.closed_attempt("e1").notified_at == NOW + 2
    assert ledger.read().status == FAILED and len(ledger.history()) == 1


def test_closed_attempt_looks_back_over_the_newest_attempts_only(ledger, ddb):
    """GIVEN 600 closed attempts in the history (more than one page of the query) WHEN an attempt
    among the newest `RECENT_ATTEMPTS` is looked up THEN it is found; one older than that is not
    (a report that late is a stranger's: the look-back is bounded, whatever the history's size)."""
    from lambdas.ledger import RECENT_ATTEMPTS

    def item(n: int) -> dict:
        return {
            "tenant": {"S": TENANT},
            "entry": {"S": f"file#{n:013d}#old-{n}"},
            "execution": {"S": f"old-{n}"},
            "status": {"S": SUCCEEDED},
            "started_at": {"N": str(n)},
        }

    items = [item(n) for n in range(1, 601)]
    for start in range(0, len(items), 25):
        ddb.batch_write_item(
            RequestItems={ledger.table: [{"PutRequest": {"Item": i}} for i in items[start : start + 25]]}
        )

    assert ledger.closed_attempt("old-600").execution == "old-600"
    assert ledger.closed_attempt(f"old-{600 - RECENT_ATTEMPTS + 10}") is not None
    assert ledger.closed_attempt(f"old-{600 - RECENT_ATTEMPTS - 50}") is None


def test_the_history_asks_dynamodb_for_no_more_than_it_shows(ledger, ddb):
    """`ops status --history N` reads the newest N entries, not the tenant's whole history; with a
    status filter DynamoDB would apply its `Limit` before the filter, so none is sent and the
    pages are read until N entries passed it."""
    queries: list[dict[str, Any]] = []
    ddb.meta.events.register(
        "provide-client-params.dynamodb.Query", lambda params, **_: queries.append(params)
    )
    for n in range(1, 6):
        ddb.put_item(
            TableName=ledger.table,
            Item={
                "tenant": {"S": TENANT},
                "entry": {"S": f"file#{n:013d}#e{n}"},
                "execution": {"S": f"e{n}"},
                "status": {"S": FAILED if n == 1 else SUCCEEDED},
                "started_at": {"N": str(n)},
            },
        )

    assert [e["execution"] for e in ledger.history(limit=2)] == ["e5", "e4"]
    assert [e["execution"] for e in ledger.history(limit=1, statuses=(FAILED,))] == ["e1"]
    assert [query.get("Limit") for query in queries] == [2, None]


def test_every_read_the_gate_decides_on_is_strongly_consistent(ledger, ddb):
    """The position, the claim markers and the content of record are read with
    `ConsistentRead` (moto is always consistent; DynamoDB is not unless asked)."""
    reads: list[dict[str, Any]] = []
    ddb.meta.events.register(
        "provide-client-params.dynamodb.GetItem", lambda params, **_: reads.append(params)
    )
    ledger.read()
    ledger.claimed_before(file("e1"))
    ledger.processed_content(SHA)
    assert [r["Key"]["entry"]["S"].split("#")[0] for r in reads] == [
        "position",
        "event",
        "version",
        "content",
    ]
    assert all(r.get("ConsistentRead") is True for r in reads), reads


def test_the_history_keeps_each_attempt_as_it_closed_and_filters_by_start_and_status(ledger):
    """GIVEN a file that failed in register (pinned, 120 of its 180 records acknowledged), was
    resumed, timed out and was skipped WHEN the history is read THEN each attempt is one entry,
    newest first, with everything `ops status` shows of it; `since` keeps the attempts started at
    or after it, `statuses` those closed as one of them."""
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.pin_settings("e1", 50, 10)
    ledger.record_progress("e1", 120, chunk_size=50, chunk_count=4, record_count=180)
    failed = ledger.record_close(
        "e1",
        "FAILED",
        halt_on_failure=True,
        now=NOW + 1,
        error="SinkRejectedError",
        cause="refused record 120",
        failed_in="register",
    )
    ledger.resume(failed, "e1-r1", NOW + 5)
    timed_out = ledger.record_close(
        "e1-r1",
        "TIMED_OUT",
        halt_on_failure=True,
        now=NOW + 7,
        error="States.Timeout",
        cause="the file ran too long",
    )
    ledger.skip(timed_out, "agreed with the tenant", NOW + 8)

    common = {
        "file": file("e1"),
        "next_record": 120,
        "record_count": 180,
        "chunk_size": 50,
        "duplicate_of": None,
        "replaces": None,
        "replaced_by": None,
        "paused_at": None,
        "pause_reason": None,
        "unpaused_at": None,
    }
    resumed = {
        **common,
        "execution": "e1-r1",
        "status": SKIPPED,
        "closed_as": "TIMED_OUT",
        "halted": False,
        "attempt": 1,
        "started_at": NOW + 5,
        "closed_at": NOW + 8,
        "error": "States.Timeout",
        "cause": "the file ran too long",
        "skip_reason": "agreed with the tenant",
        "failed_in": None,
    }
    first = {
        **common,
        "execution": "e1",
        "status": FAILED,
        "closed_as": "FAILED",
        "halted": True,
        "attempt": 0,
        "started_at": NOW,
        "closed_at": NOW + 1,
        "error": "SinkRejectedError",
        "cause": "refused record 120",
        "skip_reason": None,
        "failed_in": "register",
    }
    assert ledger.history() == [resumed, first]
    assert ledger.history(since=NOW + 5) == [resumed]  # started exactly then: kept
    assert ledger.history(since=NOW + 5.001) == []
    assert ledger.history(statuses=(FAILED,)) == [first]
    assert ledger.history(statuses=(FAILED, SKIPPED)) == [resumed, first]
