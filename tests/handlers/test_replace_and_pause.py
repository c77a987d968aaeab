"""`ops replace`, `ops pause` and `ops unpause` end to end on moto: the ledger's transitions
(`Ledger.replace`, `pause`, `unpause`, `record_pause`), the operator's actions and what they
refuse (`operations.py`), the gate of a paused tenant (`controller.py`), register stopping for a
pause (`register_chunk.py`) and how `ops status` counts files and attempts (`ops/status.py`).

Each refusal is checked to change nothing: the whole ledger table is compared before and after,
and no execution is started."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

from lambdas import controller
from lambdas.contract import (
    ControllerEnv,
    FileRef,
    RegisterEnv,
    chunk_prefix,
    execution_name,
    manifest_key,
)
from lambdas.controller import Gate, Message, process_message
from lambdas.ledger import (
    FAILED,
    PAUSED,
    RUNNING,
    SKIPPED,
    SUCCEEDED,
    AlreadyClaimed,
    Ledger,
    LedgerConflict,
    Position,
    version_entry,
)
from lambdas.operations import (
    NothingToDo,
    Refused,
    pause,
    replace,
    replacement_event_id,
    resume,
    skip,
    unpause,
)
from lambdas.register_chunk import Register
from lambdas.runtime import BoundLogger, get_logger
from ops.discovery import TenantResources
from ops.status import tenant_status
from tests.handlers.support import LEDGER_TABLE, TENANT, VisibilityRecorder, emf_records

NOW = 1_700_000_000.0
LANDING = "landing"
WORK = "work"
KEY = "acme/f.jsonl"


def file(event_id: str, *, key: str | None = None, version_id: str = "v1") -> FileRef:
    return FileRef(
        tenant=TENANT,
        event_id=event_id,
        bucket=LANDING,
        key=key or f"acme/{event_id}.csv",
        version_id=version_id,
        size=1,
        etag=None,
        event_time="",
    )


def correction(version_id: str = "v2", key: str = "acme/e1.csv") -> FileRef:
    """The correction of acme/e1.csv as `ops replace` makes it current (its event id is the replacement's)."""
    return file(replacement_event_id(LANDING, key, version_id), key=key, version_id=version_id)


def table(ddb: Any) -> list[dict[str, Any]]:
    """Every item of the ledger table, in key order: what "changed nothing" compares."""
    items = ddb.scan(TableName=LEDGER_TABLE, ConsistentRead=True)["Items"]
    return sorted(items, key=lambda i: (i["tenant"]["S"], i["entry"]["S"]))


def entries(ddb: Any) -> set[str]:
    return {item["entry"]["S"] for item in table(ddb)}


def history_item(ddb: Any, entry: str) -> dict[str, Any] | None:
    return ddb.get_item(
        TableName=LEDGER_TABLE, Key={"tenant": {"S": TENANT}, "entry": {"S": entry}}, ConsistentRead=True
    ).get("Item")


def history_entry(position: Position) -> str:
    return f"file#{int((position.started_at or 0) * 1000):013d}#{position.execution}"


def started(sfn: Any, machine: str) -> dict[str, dict[str, Any]]:
    """Execution name -> its input, for every execution of the machine."""
    found = sfn.list_executions(stateMachineArn=machine)["executions"]
    return {
        e["name"]: json.loads(sfn.describe_execution(executionArn=e["executionArn"])["input"]) for e in found
    }


def halted(
    ledger: Ledger,
    *,
    next_record: int = 7,
    event_id: str = "e1",
    key: str | None = None,
    version_id: str = "v1",
    sequence: int | None = None,
) -> Position:
    """The file `event_id` ran, acknowledged `next_record` records, failed and halted the tenant."""
    ledger.claim(
        ledger.read(), file(event_id, key=key, version_id=version_id), event_id, NOW, sequence=sequence
    )
    ledger.pin_settings(event_id, 50, 10)
    ledger.record_progress(event_id, next_record, chunk_size=50, chunk_count=4, record_count=180)
    return ledger.record_close(
        event_id,
        FAILED,
        halt_on_failure=True,
        now=NOW + 1,
        error="SinkRejectedError",
        cause="HTTP 400",
        failed_in="register",
    )


def in_flight(sqs: Any, queue_url: str, dedup: str = "next") -> dict[str, Any]:
    """A message of the next file, received (in flight for 240 s)."""
    sqs.send_message(
        QueueUrl=queue_url, MessageBody="{}", MessageGroupId=TENANT, MessageDeduplicationId=dedup
    )
    (message,) = sqs.receive_message(QueueUrl=queue_url, VisibilityTimeout=240)["Messages"]
    return message


def note_waiting(ledger: Ledger, sqs: Any, queue_url: str) -> dict[str, Any]:
    message = in_flight(sqs, queue_url)
    ledger.record_waiting(ledger.read(), message["MessageId"], message["ReceiptHandle"], NOW + 2, NOW + 2)
    return message


def visible(sqs: Any, queue_url: str) -> int:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


# --- Ledger.replace ---------------------------------------------------------------------------------


def test_replace_makes_the_correction_the_current_first_attempt_keeping_its_sequence_and_waiting_note(
    ledger, ddb
):
    """GIVEN file e1 (sequence 4), pinned, resumed once and failed again at record 120, and a
    message noted waiting behind it WHEN its correction replaces it from record 120 THEN the
    correction is the current RUNNING attempt 0 at record 120 with nothing of the failed
    attempt's close or pinned sizes, the same sequence number and the same waiting note, and it
    names the failed attempt it replaces."""
    first = halted(ledger, next_record=120, sequence=4)
    resumed = ledger.resume(first, "e1-r1", NOW + 2)
    failed = ledger.record_close(
        "e1-r1",
        FAILED,
        halt_on_failure=True,
        now=NOW + 3,
        error="SinkRejectedError",
        cause="HTTP 400",
        failed_in="register",
    )
    waiting = ledger.record_waiting(failed, "m2", "r2", NOW + 4, sent_at=NOW)
    fixed = correction()

    replaced = ledger.replace(waiting, fixed, "fix-exec", NOW + 5, start_record=120)

    assert replaced == Position(
        tenant=TENANT,
        seq=waiting.seq + 1,
        execution="fix-exec",
        file=fixed,
        status=RUNNING,
        halted=False,
        attempt=0,
        next_record=120,
        chunk_size=None,
        chunk_count=None,
        record_count=None,
        started_at=NOW + 5,
        closed_at=None,
        closed_as=None,
        error=None,
        cause=None,
        skip_reason=None,
        waiting_message_id="m2",
        waiting_receipt="r2",
        waiting_since=NOW + 4,
        waiting_sent_at=NOW,
        sequence=4,
        batch_size=None,
        failed_in=None,
        replaces={
            "execution": "e1-r1",
            "entry": history_entry(resumed),
            "key": "acme/e1.csv",
            "version_id": "v1",
            "file_event": "e1",
        },
    )
    assert ledger.read() == replaced


def test_replace_writes_the_corrections_markers_so_its_own_s3_event_and_a_replay_are_duplicates(ledger, ddb):
    """GIVEN a correction made current by replace WHEN its own S3 event (another event id, the
    same version), or a replay of its version, comes to the gate after it closed THEN each is
    already claimed: the version runs once; the version marker names who ran it."""
    ledger.replace(halted(ledger), correction(), "fix-exec", NOW + 5)
    closed = ledger.record_close("fix-exec", SUCCEEDED, halt_on_failure=True, now=NOW + 6)

    with pytest.raises(AlreadyClaimed):
        ledger.claim(
            closed, file("s3-event-of-the-upload", key="acme/e1.csv", version_id="v2"), "s3-ev", NOW + 7
        )
    with pytest.raises(AlreadyClaimed):
        ledger.claim(closed, file("reconcile-1", key="acme/e1.csv", version_id="v2"), "reconcile-1", NOW + 7)
    with pytest.raises(AlreadyClaimed):  # its event id, whatever it names
        ledger.claim(closed, file(correction()["event_id"], version_id="v3"), "x", NOW + 7)
    assert ledger.read() == closed
    assert ledger.version_claim(LANDING, "acme/e1.csv", "v2") == "fix-exec"
    assert f"event#{correction()['event_id']}" in entries(ddb)


def test_replace_links_the_failed_attempt_to_its_replacement(ledger):
    """GIVEN e1 failed WHEN replaced from record 7 THEN e1's history entry, still FAILED, names the
    replacement (execution, key, version, where it started); the replacement's names e1's file."""
    ledger.replace(halted(ledger), correction(key="acme/e1-fixed.csv"), "fix-exec", NOW + 5, start_record=7)
    ledger.record_close("fix-exec", SUCCEEDED, halt_on_failure=True, now=NOW + 6)

    latest, failed = ledger.history()
    assert (failed["execution"], failed["status"]) == ("e1", FAILED)
    assert failed["replaced_by"] == {
        "execution": "fix-exec",
        "key": "acme/e1-fixed.csv",
        "version_id": "v2",
        "start_record": 7,
    }
    assert (latest["execution"], latest["status"], latest["replaced_by"]) == ("fix-exec", SUCCEEDED, None)
    assert latest["replaces"]["file_event"] == "e1" and latest["replaces"]["execution"] == "e1"


def test_a_replacement_of_a_replacement_is_still_about_the_original_file(ledger):
    """GIVEN e1 replaced by a correction that failed too WHEN that is replaced by a second
    correction THEN the second names the first as the attempt it replaces and e1 as its file."""
    first = ledger.replace(halted(ledger), correction("v2"), "fix-1", NOW + 5)
    failed = ledger.record_close("fix-1", FAILED, halt_on_failure=True, now=NOW + 6, error="E", cause="c")

    second = ledger.replace(failed, correction("v3"), "fix-2", NOW + 7)

    assert second.replaces == {
        "execution": "fix-1",
        "entry": history_entry(first),
        "key": "acme/e1.csv",
        "version_id": "v2",
        "file_event": "e1",
    }
    replaced_by = {e["execution"]: e["replaced_by"] for e in ledger.history()}
    assert replaced_by == {
        "fix-1": {"execution": "fix-2", "key": "acme/e1.csv", "version_id": "v3", "start_record": 0},
        "e1": {"execution": "fix-1", "key": "acme/e1.csv", "version_id": "v2", "start_record": 0},
    }


@pytest.mark.parametrize("state", ["stale-read", "running", "succeeded", "failed-not-halted", "paused"])
def test_replace_is_refused_unless_the_tenant_is_halted_on_the_file_it_read(state, ledger, ddb):
    """GIVEN a position replace does not apply to (read before it changed, a file running or
    done, a failure that did not halt, a paused tenant) WHEN replace is asked THEN it is a
    conflict and nothing is written: no position change, no marker, no link."""
    if state == "running":
        observed = ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    elif state == "succeeded":
        ledger.claim(ledger.read(), file("e1"), "e1", NOW)
        observed = ledger.record_close("e1", SUCCEEDED, halt_on_failure=True, now=NOW + 1)
    elif state == "failed-not-halted":
        ledger.claim(ledger.read(), file("e1"), "e1", NOW)
        observed = ledger.record_close("e1", FAILED, halt_on_failure=False, now=NOW + 1)
    elif state == "paused":
        observed = ledger.pause(halted(ledger), "maintenance", NOW + 2)
    else:
        observed = halted(ledger)
        ledger.pause(observed, "maintenance", NOW + 2)
        ledger.unpause(ledger.read(), NOW + 3)  # the position moved on since `observed` was read
    before = table(ddb)

    with pytest.raises(LedgerConflict):
        ledger.replace(observed, correction(), "fix-exec", NOW + 5)

    assert table(ddb) == before


def test_replace_with_a_version_claimed_before_is_already_claimed_and_writes_nothing(ledger, ddb):
    """GIVEN the version acme/e1.csv v2 ran before as file e0 WHEN replace makes it current
    THEN it is already claimed (not a conflict), and the ledger is as it was."""
    ledger.claim(ledger.read(), file("e0", key="acme/e1.csv", version_id="v2"), "e0", NOW - 10)
    ledger.record_close("e0", SUCCEEDED, halt_on_failure=True, now=NOW - 9)
    observed = halted(ledger)
    before = table(ddb)

    with pytest.raises(AlreadyClaimed):
        ledger.replace(observed, correction("v2"), "fix-exec", NOW + 5)

    assert table(ddb) == before


def test_replace_without_the_failed_attempts_history_entry_is_a_conflict_not_a_duplicate(ledger, ddb):
    """GIVEN the failed attempt's history entry is gone WHEN replace links it THEN the write is a
    conflict (nothing written), never taken for an already claimed version."""
    observed = halted(ledger)
    ddb.delete_item(
        TableName=LEDGER_TABLE, Key={"tenant": {"S": TENANT}, "entry": {"S": history_entry(observed)}}
    )
    before = table(ddb)

    with pytest.raises(LedgerConflict):
        ledger.replace(observed, correction(), "fix-exec", NOW + 5)

    assert table(ddb) == before


# --- Ledger.pause, unpause, record_pause -------------------------------------------------------------


def test_record_pause_stops_only_the_running_execution_of_a_paused_tenant(ledger, ddb):
    """GIVEN e1 running at record 4 WHEN register asks to stop for a pause that is not set THEN
    it is a conflict; once paused, another execution is refused, e1's stop makes the position
    PAUSED at record 4 (no history entry: not a close), and a retried stop of e1 is the same."""
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.record_progress("e1", 4)
    with pytest.raises(LedgerConflict):
        ledger.record_pause("e1")
    assert ledger.read().status == RUNNING

    paused = ledger.pause(ledger.read(), "maintenance", NOW + 1)
    with pytest.raises(LedgerConflict):
        ledger.record_pause("e0")
    assert ledger.read() == paused

    stopped = ledger.record_pause("e1")
    assert (stopped.status, stopped.execution, stopped.next_record, stopped.seq) == (
        PAUSED,
        "e1",
        4,
        paused.seq + 1,
    )
    assert (stopped.paused_at, stopped.pause_reason, stopped.paused) == (NOW + 1, "maintenance", True)
    assert not [e for e in entries(ddb) if e.startswith("file#")]

    assert ledger.record_pause("e1") == stopped  # a retried register invocation
    assert ledger.read() == stopped
    with pytest.raises(LedgerConflict):
        ledger.record_pause("e0")


def test_record_pause_of_a_closed_file_is_a_conflict(ledger):
    halted(ledger)
    paused = ledger.pause(ledger.read(), "maintenance", NOW + 2)
    with pytest.raises(LedgerConflict):
        ledger.record_pause("e1")
    assert ledger.read() == paused


def test_pause_moves_the_position_on_and_a_second_pause_or_a_stale_one_is_a_conflict(ledger):
    """A pause bumps `seq` (so a gate's claim decided on an older read fails); pausing twice, or
    on a stale read, is refused."""
    idle = ledger.read()
    paused = ledger.pause(idle, "x" * 3000, NOW)
    assert (paused.seq, paused.paused_at, len(paused.pause_reason or "")) == (1, NOW, 2000)
    with pytest.raises(LedgerConflict):
        ledger.pause(paused, "again", NOW + 1)
    with pytest.raises(LedgerConflict):
        ledger.pause(idle, "stale", NOW + 1)
    assert ledger.read() == paused


def test_an_unpause_decided_before_register_stopped_the_file_is_a_conflict(ledger):
    """GIVEN the operator read e1 running with the pause set, and register stopped e1 since WHEN the
    flag-only unpause is written (even at the position's current seq) THEN it is a conflict (run
    again, it runs the stopped file on): the flag is never lifted from a stopped file alone."""
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    read = ledger.pause(ledger.read(), "maintenance", NOW + 1)
    stopped = ledger.record_pause("e1")

    with pytest.raises(LedgerConflict):
        ledger.unpause(dataclasses.replace(read, seq=stopped.seq), NOW + 2)

    assert ledger.read() == stopped


def test_unpause_of_a_stopped_file_needs_the_name_of_its_next_attempt(ledger):
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.pause(ledger.read(), "m", NOW + 1)
    stopped = ledger.record_pause("e1")
    with pytest.raises(ValueError, match="new execution name"):
        ledger.unpause(stopped, NOW + 2)
    assert ledger.read() == stopped


# --- operations.replace -------------------------------------------------------------------------------

ORIGINAL = [{"id": i, "name": f"n{i}"} for i in range(6)]


def jsonl(records: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def upload(s3: Any, records: list[dict[str, Any]], key: str = KEY) -> str:
    return s3.put_object(Bucket=LANDING, Key=key, Body=jsonl(records))["VersionId"]


@pytest.fixture
def original(buckets: Any, ledger: Ledger) -> FileRef:
    """acme/f.jsonl (6 records) ran as e1, the core system acknowledged records 0-2, it failed and
    halted the tenant; its manifest is in the work bucket."""
    version = upload(buckets, ORIGINAL)
    ref = file("e1", key=KEY, version_id=version)
    ledger.claim(ledger.read(), ref, "e1", NOW)
    ledger.record_progress("e1", 3, chunk_size=2, chunk_count=3, record_count=6)
    ledger.record_close(
        "e1", FAILED, halt_on_failure=True, now=NOW + 1, error="SinkRejectedError", cause="HTTP 400"
    )
    buckets.put_object(
        Bucket=WORK,
        Key=manifest_key(chunk_prefix(TENANT, execution_name("e1"))),
        Body=json.dumps({"format": "jsonl", "chunk_size": 2}).encode(),
    )
    return ref


def run_replace(
    ledger: Ledger,
    sfn: Any,
    s3: Any,
    machine: str,
    *,
    key: str = KEY,
    version_id: str | None,
    from_record: int = 0,
    now: float = NOW + 10,
) -> Any:
    return replace(
        ledger,
        sfn,
        s3,
        machine,
        landing_prefix="acme/",
        key=key,
        version_id=version_id,
        now=now,
        from_record=from_record,
        work_bucket=WORK,
    )


def test_replace_from_a_record_starts_the_correction_there_when_the_records_before_it_are_equal(
    ledger, sfn, buckets, machine, original
):
    """GIVEN e1 failed at record 3 and a correction whose records 0-2 are e1's (record 3 fixed)
    WHEN replaced --from-record 3 THEN the correction's execution starts at record 3, on the
    correction's version, under the replacement's event id."""
    fixed = [*ORIGINAL[:3], {"id": 3, "name": "fixed"}, *ORIGINAL[4:]]
    version = upload(buckets, fixed)
    event_id = replacement_event_id(LANDING, KEY, version)

    outcome = run_replace(ledger, sfn, buckets, machine, version_id=version, from_record=3)

    assert (outcome.execution, outcome.start_record) == (execution_name(event_id), 3)
    assert outcome.message == (
        f"replaced s3://landing/{KEY} (version {original['version_id']}, failed at record 3) with "
        f"s3://landing/{KEY} version {version}, sent from record 3 as execution {execution_name(event_id)}; "
        "the files waiting behind it follow in order"
    )
    execution_input = started(sfn, machine)[execution_name(event_id)]
    assert (
        execution_input["start_record"],
        execution_input["version_id"],
        execution_input["event_id"],
        execution_input["key"],
        execution_input["size"],
    ) == (3, version, event_id, KEY, len(jsonl(fixed)))
    position = ledger.read()
    assert (position.status, position.next_record, position.halted, position.file["version_id"]) == (
        RUNNING,
        3,
        False,
        version,
    )


def test_replace_sends_the_correction_whole_by_default(ledger, sfn, buckets, machine, original):
    """GIVEN a correction whose first record differs WHEN replaced without --from-record THEN it
    starts at record 0 (new idempotency keys: the version is new), no comparison needed."""
    version = upload(buckets, [{"id": "other"}])
    buckets.delete_object(Bucket=WORK, Key=manifest_key(chunk_prefix(TENANT, execution_name("e1"))))

    outcome = run_replace(ledger, sfn, buckets, machine, version_id=version)

    assert outcome.start_record == 0 and "sent whole (new idempotency keys)" in outcome.message
    assert started(sfn, machine)[outcome.execution]["start_record"] == 0
    assert ledger.read().next_record == 0


def test_replace_without_a_version_takes_the_keys_latest(ledger, sfn, buckets, machine, original):
    upload(buckets, [{"id": "first try"}], key="acme/f-fixed.jsonl")
    latest = upload(buckets, [{"id": "second try"}], key="acme/f-fixed.jsonl")

    outcome = run_replace(ledger, sfn, buckets, machine, key="acme/f-fixed.jsonl", version_id=None)

    assert started(sfn, machine)[outcome.execution]["version_id"] == latest
    assert ledger.read().file == {**ledger.read().file, "key": "acme/f-fixed.jsonl", "version_id": latest}


def refused_case(case: str, ledger: Ledger, s3: Any) -> dict[str, Any]:
    """Set up `case` (e1 failed at record 3, halted) and return replace's arguments for it."""
    fixed = [*ORIGINAL[:3], {"id": 3, "name": "fixed"}, *ORIGINAL[4:]]
    if case == "paused":
        ledger.pause(ledger.read(), "maintenance", NOW + 2)
        return {"version_id": upload(s3, fixed)}
    if case == "outside-prefix":
        version = s3.put_object(Bucket=LANDING, Key="globex/f.jsonl", Body=jsonl(fixed))["VersionId"]
        return {"key": "globex/f.jsonl", "version_id": version}
    if case == "no-such-version":
        upload(s3, fixed)
        return {"version_id": "no-such-version"}
    if case == "no-such-key":
        return {"key": "acme/never-uploaded.jsonl", "version_id": None}
    if case == "the-failed-version":
        return {"version_id": ledger.read().file["version_id"]}
    if case == "from-beyond-progress":
        return {"version_id": upload(s3, fixed), "from_record": 4}
    if case == "from-with-a-differing-record":
        return {
            "version_id": upload(s3, [ORIGINAL[0], {"id": 1, "name": "changed"}, *ORIGINAL[2:]]),
            "from_record": 3,
        }
    if case == "from-with-fewer-records":
        return {"version_id": upload(s3, ORIGINAL[:2]), "from_record": 3}
    if case == "from-without-the-manifest":
        s3.delete_object(Bucket=WORK, Key=manifest_key(chunk_prefix(TENANT, execution_name("e1"))))
        return {"version_id": upload(s3, fixed), "from_record": 3}
    raise AssertionError(case)


REFUSALS = {
    "paused": r"^nothing to replace while paused: tenant acme is paused \(maintenance\); run ops unpause acme first$",
    "outside-prefix": r"^globex/f.jsonl is outside tenant acme's prefix acme/",
    "no-such-version": r"^s3://landing/acme/f.jsonl version no-such-version does not exist",
    "no-such-key": r"^s3://landing/acme/never-uploaded.jsonl does not exist",
    "the-failed-version": r"is the failed version itself: to run it again, run ops resume acme$",
    "from-beyond-progress": r"^--from-record 4: the core system acknowledged only records 0 to 2 of the failed "
    r"version \(use --from-record 3 or less\)$",
    "from-with-a-differing-record": r"^--from-record 3: record 1 of the correction differs from the one the core "
    r"system acknowledged; replace with --from-record 1 or less",
    "from-with-fewer-records": r"^--from-record 3: the correction has only 2 records$",
    "from-without-the-manifest": r"^--from-record 3: the failed file's manifest is gone from the work bucket",
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_replace_refuses_what_it_does_not_apply_to_and_changes_nothing(
    case, ledger, ddb, sfn, buckets, machine, original
):
    """GIVEN e1 failed at record 3 WHEN replace is asked for what it cannot do (a paused tenant, a
    key outside the prefix, a version that does not exist or is e1's own, --from-record past the
    acknowledged records, records before it that differ or are missing, the manifest gone) THEN
    it is refused with the reason, the ledger is as before and nothing started."""
    arguments = refused_case(case, ledger, buckets)
    before = table(ddb)

    with pytest.raises(Refused, match=REFUSALS[case]):
        run_replace(ledger, sfn, buckets, machine, **arguments)

    assert table(ddb) == before
    assert started(sfn, machine) == {}


@pytest.mark.parametrize("state", ["running", "failed-not-halted", "idle"])
def test_replace_refuses_a_tenant_not_halted_on_a_failed_file(state, ledger, ddb, sfn, buckets, machine):
    """Refused is a NothingToDo (the CLI's exit status for it), and says the tenant's state."""
    version = upload(buckets, ORIGINAL)
    if state != "idle":
        ledger.claim(ledger.read(), file("e1", key=KEY, version_id=version), "e1", NOW)
    if state == "failed-not-halted":
        ledger.record_close("e1", FAILED, halt_on_failure=False, now=NOW + 1)
    fixed = upload(buckets, [{"id": "fixed"}])
    before = table(ddb)

    with pytest.raises(NothingToDo, match=r"^nothing to replace: tenant acme is (running|idle)") as refused:
        run_replace(ledger, sfn, buckets, machine, version_id=fixed)

    assert isinstance(refused.value, Refused)
    assert table(ddb) == before and started(sfn, machine) == {}


def test_replace_with_a_version_ingested_before_names_who_ran_it_and_changes_nothing(
    ledger, ddb, sfn, buckets, machine
):
    """GIVEN the correction's version already ran as an ordinary file (e0) WHEN replace names it
    THEN it is refused (a version runs once), naming e0, and nothing changed."""
    fixed = upload(buckets, [{"id": "fixed"}], key="acme/g.jsonl")
    ledger.claim(ledger.read(), file("e0", key="acme/g.jsonl", version_id=fixed), "e0", NOW - 10)
    ledger.record_close("e0", SUCCEEDED, halt_on_failure=True, now=NOW - 9)
    ledger.claim(ledger.read(), file("e1", key=KEY, version_id=upload(buckets, ORIGINAL)), "e1", NOW)
    ledger.record_close("e1", FAILED, halt_on_failure=True, now=NOW + 1)
    before = table(ddb)

    with pytest.raises(
        Refused, match=rf"^s3://landing/acme/g.jsonl version {fixed} was ingested before \(as e0\)"
    ):
        run_replace(ledger, sfn, buckets, machine, key="acme/g.jsonl", version_id=fixed)

    assert table(ddb) == before and started(sfn, machine) == {}


def test_replace_with_a_version_whose_marker_expired_before_its_event_marker_is_refused_all_the_same(
    ledger, ddb, sfn, buckets, machine, original
):
    """GIVEN the correction's version was made current before, and of its two markers TTL has
    deleted the version marker but not yet the event marker (DynamoDB deletes expired items one by
    one) WHEN replace names that version THEN it is refused as ingested before, by an execution it
    cannot name, and nothing changed."""
    version = upload(buckets, [{"id": "fixed"}], key="acme/g.jsonl")
    event_id = replacement_event_id(LANDING, "acme/g.jsonl", version)
    ddb.put_item(
        TableName=LEDGER_TABLE,
        Item={
            "tenant": {"S": TENANT},
            "entry": {"S": f"event#{event_id}"},
            "execution": {"S": "fix-0"},
            "claimed_at": {"N": str(NOW - 10)},
        },
    )
    before = table(ddb)

    with pytest.raises(Refused) as refused:
        run_replace(ledger, sfn, buckets, machine, key="acme/g.jsonl", version_id=version)

    assert str(refused.value) == (
        f"s3://landing/acme/g.jsonl version {version} was ingested before (as an earlier execution): a version runs "
        "once; upload the correction again (a new version) and replace with that"
    )
    assert table(ddb) == before and started(sfn, machine) == {}


def test_replace_from_a_negative_record_is_a_usage_error(ledger, ddb, sfn, buckets, machine, original):
    before = table(ddb)
    with pytest.raises(ValueError, match="counts from 0"):
        run_replace(ledger, sfn, buckets, machine, version_id=upload(buckets, ORIGINAL), from_record=-1)
    assert table(ddb) == before


def test_replace_from_a_record_compares_csv_records_as_the_core_system_got_them(
    ledger, sfn, buckets, machine
):
    """GIVEN a CSV file (its manifest says so) that failed at record 3 WHEN a correction that quotes
    its first rows differently but has the same values replaces it --from-record 3 THEN it starts
    at record 3; a correction whose header renames a column differs at record 0."""
    original_csv = b"id,name\n0,a\n1,b\n2,c\n3,BAD\n"
    version = buckets.put_object(Bucket=LANDING, Key="acme/f.csv", Body=original_csv)["VersionId"]
    ledger.claim(ledger.read(), file("e1", key="acme/f.csv", version_id=version), "e1", NOW)
    ledger.record_progress("e1", 3)
    ledger.record_close("e1", FAILED, halt_on_failure=True, now=NOW + 1)
    buckets.put_object(
        Bucket=WORK,
        Key=manifest_key(chunk_prefix(TENANT, execution_name("e1"))),
        Body=json.dumps({"format": "csv"}).encode(),
    )
    renamed = buckets.put_object(Bucket=LANDING, Key="acme/f.csv", Body=b"id,label\n0,a\n1,b\n2,c\n3,d\n")[
        "VersionId"
    ]

    with pytest.raises(Refused, match=r"^--from-record 3: record 0 of the correction differs"):
        run_replace(ledger, sfn, buckets, machine, key="acme/f.csv", version_id=renamed, from_record=3)

    requoted = buckets.put_object(
        Bucket=LANDING, Key="acme/f.csv", Body=b'"id","name"\r\n0,"a"\r\n1,b\r\n"2",c\r\n3,d\r\n'
    )["VersionId"]
    outcome = run_replace(ledger, sfn, buckets, machine, key="acme/f.csv", version_id=requoted, from_record=3)
    assert started(sfn, machine)[outcome.execution]["start_record"] == 3


def test_replace_from_a_record_when_the_failed_version_is_gone_is_refused_and_changes_nothing(
    ledger, ddb, sfn, buckets, machine, original
):
    """GIVEN e1 failed at record 3 and its landing version was deleted since WHEN a re-upload
    replaces it --from-record 3 THEN it is refused (its records cannot be compared), as when the
    manifest is gone, and nothing changed."""
    version = upload(buckets, ORIGINAL)
    buckets.delete_object(Bucket=LANDING, Key=KEY, VersionId=original["version_id"])
    before = table(ddb)

    with pytest.raises(Refused, match=r"^--from-record 3: "):
        run_replace(ledger, sfn, buckets, machine, version_id=version, from_record=3)

    assert table(ddb) == before and started(sfn, machine) == {}


class FailingStart:
    """The Step Functions client, whose first StartExecution is lost (the operator's command dies)."""

    def __init__(self, sfn: Any) -> None:
        self._sfn, self.failures = sfn, 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sfn, name)

    def start_execution(self, **kwargs: Any) -> Any:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("the connection dropped")
        return self._sfn.start_execution(**kwargs)


def test_a_replace_cut_short_after_the_ledger_write_is_started_by_running_replace_again(
    ledger, sfn, buckets, machine, original
):
    """GIVEN a replace whose ledger write went through and whose StartExecution was lost WHEN the
    operator runs replace again THEN the recorded correction starts, at its recorded record, and
    the ledger stays as the first replace wrote it."""
    version = upload(buckets, [*ORIGINAL[:3], {"id": 3, "name": "fixed"}, *ORIGINAL[4:]])
    with pytest.raises(ConnectionError):
        run_replace(ledger, FailingStart(sfn), buckets, machine, version_id=version, from_record=3)
    written = ledger.read()
    assert started(sfn, machine) == {} and written.running and written.replaces is not None

    outcome = run_replace(ledger, sfn, buckets, machine, version_id=version, from_record=3, now=NOW + 20)

    assert outcome.message == f"started the interrupted {written.execution} at record 3"
    assert (outcome.execution, outcome.start_record) == (written.execution, 3)
    assert started(sfn, machine)[written.execution]["start_record"] == 3
    assert ledger.read() == written


def test_replace_starts_the_correction_as_s3_has_it(ledger, sfn, buckets, machine, original):
    """GIVEN e1 failed and a correction uploaded under another key WHEN replaced THEN the file the
    ledger makes current, and the execution's input, are the correction as S3 has it: the tenant,
    the replacement's event id, its bucket, key and version, its size, its ETag (without quotes)
    and its upload time (UTC, ISO 8601)."""
    body = jsonl([{"id": "fixed"}])
    version = buckets.put_object(Bucket=LANDING, Key="acme/f-fixed.jsonl", Body=body)["VersionId"]
    uploaded = buckets.head_object(Bucket=LANDING, Key="acme/f-fixed.jsonl", VersionId=version)[
        "LastModified"
    ]

    outcome = run_replace(ledger, sfn, buckets, machine, key="acme/f-fixed.jsonl", version_id=version)

    expected = FileRef(
        tenant=TENANT,
        event_id=replacement_event_id(LANDING, "acme/f-fixed.jsonl", version),
        bucket=LANDING,
        key="acme/f-fixed.jsonl",
        version_id=version,
        size=len(body),
        etag=hashlib.md5(body).hexdigest(),
        event_time=uploaded.strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    assert ledger.read().file == expected
    assert started(sfn, machine) == {outcome.execution: {**expected, "start_record": 0}}


def test_replace_without_from_record_or_work_bucket_sends_the_correction_whole(
    ledger, sfn, buckets, machine, original
):
    """GIVEN e1 failed at record 3 and a correction whose first record differs WHEN replace is
    called with neither a record to start from nor a work bucket THEN it starts the correction at
    record 0, comparing nothing (there is no manifest to read)."""
    version = upload(buckets, [{"id": "other"}, *ORIGINAL[1:]])

    outcome = replace(
        ledger, sfn, buckets, machine, landing_prefix="acme/", key=KEY, version_id=version, now=NOW + 10
    )

    assert outcome.start_record == 0 and "sent whole (new idempotency keys)" in outcome.message
    assert started(sfn, machine)[outcome.execution]["start_record"] == 0
    assert (ledger.read().status, ledger.read().next_record) == (RUNNING, 0)


@pytest.mark.parametrize("manifest", ["no work bucket", "deleted", "not readable"])
def test_replace_from_a_record_without_the_manifest_says_why_and_changes_nothing(
    manifest, ledger, ddb, sfn, buckets, machine, original
):
    """GIVEN e1 failed at record 3 and the manifest of its format cannot be read (no work bucket
    given, the manifest deleted, or S3 denies the read) WHEN replaced --from-record 3 THEN it is
    refused with the error that stopped the read and what to do instead, and nothing changed."""
    version = upload(buckets, [*ORIGINAL[:3], {"id": 3, "name": "fixed"}, *ORIGINAL[4:]])
    s3: Any = buckets
    arguments: dict[str, Any] = {"work_bucket": WORK}
    if manifest == "no work bucket":
        arguments = {}
    elif manifest == "deleted":
        buckets.delete_object(Bucket=WORK, Key=manifest_key(chunk_prefix(TENANT, execution_name("e1"))))
    else:
        s3 = FailingGetObject(buckets, "AccessDenied", Bucket=WORK)
    why = {"no work bucket": "ParamValidationError", "deleted": "NoSuchKey", "not readable": "AccessDenied"}[
        manifest
    ]
    before = table(ddb)

    with pytest.raises(Refused) as refused:
        replace(
            ledger,
            sfn,
            s3,
            machine,
            landing_prefix="acme/",
            key=KEY,
            version_id=version,
            now=NOW + 10,
            from_record=3,
            **arguments,
        )

    assert str(refused.value) == (
        f"--from-record 3: the failed file's manifest is gone from the work bucket ({why}), so its records cannot "
        "be compared; replace without --from-record (the correction is sent whole)"
    )
    assert table(ddb) == before and started(sfn, machine) == {}


class FailingGetObject:
    """The S3 client, whose GetObject of what `match` names (its bucket, its version) fails with
    the error `code` (a plain `ClientError`, as for the codes botocore has no class for)."""

    def __init__(self, s3: Any, code: str, **match: str) -> None:
        self._s3, self._code, self._match = s3, code, match

    def __getattr__(self, name: str) -> Any:
        return getattr(self._s3, name)

    def get_object(self, **kwargs: Any) -> Any:
        if all(kwargs.get(name) == value for name, value in self._match.items()):
            raise ClientError({"Error": {"Code": self._code, "Message": "no"}}, "GetObject")
        return self._s3.get_object(**kwargs)


@pytest.mark.parametrize(
    "code", ["NoSuchKey", "NoSuchVersion", "404", "400", "InvalidArgument", "AccessDenied"]
)
def test_replace_from_a_record_when_the_failed_version_cannot_be_read_is_refused_naming_why(
    code, ledger, ddb, sfn, buckets, machine, original
):
    """GIVEN e1 failed at record 3 and S3 answers the read of its version with `code` (the version
    or key gone, a version id S3 does not take, no permission) WHEN replaced --from-record 3 THEN
    it is refused naming the code and what to do instead, and nothing changed."""
    version = upload(buckets, [*ORIGINAL[:3], {"id": 3, "name": "fixed"}, *ORIGINAL[4:]])
    before = table(ddb)

    with pytest.raises(Refused) as refused:
        run_replace(
            ledger,
            sfn,
            FailingGetObject(buckets, code, VersionId=original["version_id"]),
            machine,
            version_id=version,
            from_record=3,
        )

    assert str(refused.value) == (
        f"--from-record 3: the failed version can no longer be read ({code}), so its records cannot be compared; "
        "replace without --from-record (the correction is sent whole)"
    )
    assert table(ddb) == before and started(sfn, machine) == {}


def test_replace_from_a_record_when_reading_the_failed_version_fails_otherwise_raises_and_changes_nothing(
    ledger, ddb, sfn, buckets, machine, original
):
    """GIVEN S3 answers the read of e1's version with an error that says nothing of the version
    (throttling) WHEN replaced --from-record 3 THEN the error is raised as it is (run again), not
    taken for a version that is gone, and nothing changed."""
    version = upload(buckets, [*ORIGINAL[:3], {"id": 3, "name": "fixed"}, *ORIGINAL[4:]])
    before = table(ddb)

    with pytest.raises(ClientError, match="SlowDown"):
        run_replace(
            ledger,
            sfn,
            FailingGetObject(buckets, "SlowDown", VersionId=original["version_id"]),
            machine,
            version_id=version,
            from_record=3,
        )

    assert table(ddb) == before and started(sfn, machine) == {}


def test_replace_from_a_record_of_a_file_that_got_no_record_through_is_refused(
    ledger, ddb, sfn, buckets, machine
):
    """GIVEN e1 failed before the core system acknowledged any record WHEN replaced --from-record 1
    THEN it is refused: there is nothing to start after, the correction is sent whole."""
    halted(ledger, next_record=0)
    version = upload(buckets, ORIGINAL)
    before = table(ddb)

    with pytest.raises(Refused) as refused:
        run_replace(ledger, sfn, buckets, machine, version_id=version, from_record=1)

    assert str(refused.value) == (
        "--from-record 1: the core system acknowledged no record of the failed version; "
        "the correction is sent whole"
    )
    assert table(ddb) == before and started(sfn, machine) == {}


SEQUENCE_PATTERN = r"(?P<seq>\d+)\.csv$"


@pytest.mark.parametrize("key", ["acme/0005.csv", "acme/fixed.csv"])
def test_replace_with_key_sequence_refuses_a_key_without_the_failed_files_sequence_number(
    key, ledger, ddb, sfn, buckets, machine
):
    """GIVEN key_sequence ordering and e1 (acme/0004.csv, sequence 4) failed WHEN a correction
    under a key with another number, or none, replaces it THEN it is refused (the number it took
    would be taken twice, 4 never again) and nothing changed."""
    halted(ledger, key="acme/0004.csv", sequence=4)
    version = buckets.put_object(Bucket=LANDING, Key=key, Body=b"id\n1\n")["VersionId"]
    before = table(ddb)

    with pytest.raises(Refused) as refused:
        replace(
            ledger,
            sfn,
            buckets,
            machine,
            landing_prefix="acme/",
            key=key,
            version_id=version,
            now=NOW + 10,
            sequence_pattern=SEQUENCE_PATTERN,
        )

    assert str(refused.value) == (
        f"{key} does not carry the failed file's sequence number 4 (ordering key_sequence, pattern "
        f"{SEQUENCE_PATTERN!r}): upload the correction under the failed file's key, or one with the same number"
    )
    assert table(ddb) == before and started(sfn, machine) == {}


@pytest.mark.parametrize("key", ["acme/0004.csv", "acme/fixed-0004.csv"])
def test_replace_with_key_sequence_takes_a_correction_with_the_failed_files_sequence_number(
    key, ledger, sfn, buckets, machine
):
    """GIVEN key_sequence ordering and e1 (acme/0004.csv, sequence 4) failed WHEN a correction
    under its key, or another key with the number 4, replaces it THEN it runs in e1's place, as
    sequence number 4."""
    halted(ledger, key="acme/0004.csv", sequence=4)
    version = buckets.put_object(Bucket=LANDING, Key=key, Body=b"id\n1\n")["VersionId"]

    outcome = replace(
        ledger,
        sfn,
        buckets,
        machine,
        landing_prefix="acme/",
        key=key,
        version_id=version,
        now=NOW + 10,
        sequence_pattern=SEQUENCE_PATTERN,
    )

    position = ledger.read()
    assert (position.status, position.sequence, position.file["key"], position.execution) == (
        RUNNING,
        4,
        key,
        outcome.execution,
    )
    assert started(sfn, machine)[outcome.execution]["version_id"] == version


# --- operations.pause and unpause --------------------------------------------------------------------


def test_pause_of_an_idle_tenant_that_never_ran_a_file_holds_it(ledger):
    outcome = pause(ledger, "  planned maintenance ", NOW)

    assert outcome.message == "paused (reason: planned maintenance): no file starts until ops unpause acme"
    position = ledger.read()
    assert (position.paused, position.paused_at, position.pause_reason, position.status) == (
        True,
        NOW,
        "planned maintenance",
        None,
    )


def test_pause_needs_a_reason_and_refuses_a_tenant_paused_already(ledger, ddb):
    with pytest.raises(ValueError, match="a reason is required"):
        pause(ledger, " \t", NOW)
    assert table(ddb) == []

    pause(ledger, "first", NOW)
    before = table(ddb)
    with pytest.raises(NothingToDo, match=r"^tenant acme is paused \(first\) already$"):
        pause(ledger, "second", NOW + 1)
    assert table(ddb) == before


def test_pause_of_a_running_file_says_where_it_stops(ledger):
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.record_progress("e1", 1234)

    outcome = pause(ledger, "deploy", NOW + 1)

    assert outcome.message.endswith("; acme/e1.csv stops at its next chunk boundary (record 1,234 or later)")
    assert (outcome.execution, outcome.start_record) == ("e1", 1234)
    assert ledger.read().status == RUNNING  # it runs until register stops it


def test_pause_after_the_last_file_closed_says_nothing_stops(ledger):
    """GIVEN the tenant's last file succeeded WHEN it is paused THEN no file is said to stop."""
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.record_close("e1", SUCCEEDED, halt_on_failure=True, now=NOW + 1)

    outcome = pause(ledger, "deploy", NOW + 2)

    assert outcome.message == "paused (reason: deploy): no file starts until ops unpause acme"


def test_unpause_of_a_tenant_whose_file_is_done_hands_off_to_the_waiting_message(
    ledger, sqs, queue_url, sfn, machine
):
    """GIVEN e1 done, the tenant paused, and the next file's message noted waiting WHEN unpaused
    THEN the pause is over and that message is made visible now (visibility 0)."""
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.record_close("e1", SUCCEEDED, halt_on_failure=True, now=NOW + 1)
    pause(ledger, "maintenance", NOW + 2)
    message = note_waiting(ledger, sqs, queue_url)
    recorder = VisibilityRecorder(sqs)

    outcome = unpause(ledger, sfn, recorder, machine, queue_url, NOW + 10)

    assert outcome.message == "unpaused; idle (last file acme/e1.csv: SUCCEEDED); the next file starts now"
    assert recorder.timeouts == [0] and visible(sqs, queue_url) == 1
    position = ledger.read()
    assert (position.paused, position.paused_at, position.pause_reason, position.unpaused_at) == (
        False,
        None,
        None,
        NOW + 10,
    )
    assert position.waiting_receipt is None
    assert message["MessageId"]  # the one noted
    assert started(sfn, machine) == {}


def test_unpause_of_a_running_file_that_did_not_stop_yet_lifts_the_flag_only(
    ledger, sqs, queue_url, sfn, machine
):
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    pause(ledger, "maintenance", NOW + 1)

    outcome = unpause(ledger, sfn, sqs, machine, queue_url, NOW + 2)

    assert outcome.message == "unpaused; running acme/e1.csv (execution e1)"
    assert outcome.execution == "e1"  # the one that runs on
    position = ledger.read()
    assert (position.status, position.execution, position.attempt, position.paused) == (
        RUNNING,
        "e1",
        0,
        False,
    )
    assert started(sfn, machine) == {}  # the gate's to start, never an operator's


def test_unpause_of_a_stopped_file_runs_it_on_as_its_next_attempt_and_records_the_stop(
    ledger, ddb, sqs, queue_url, sfn, machine
):
    """GIVEN e1 stopped by a pause at record 4 (pinned settings) WHEN unpaused THEN e1-r1 starts
    at record 4 with e1's pinned sizes, and e1's attempt is in the history as PAUSED, with when
    it was paused and unpaused and why."""
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.pin_settings("e1", 50, 10)
    ledger.record_progress("e1", 4, chunk_size=50, chunk_count=4, record_count=180)
    pause(ledger, "maintenance", NOW + 1)
    stopped = ledger.record_pause("e1")

    outcome = unpause(ledger, sfn, sqs, machine, queue_url, NOW + 5)

    assert (outcome.execution, outcome.start_record) == ("e1-r1", 4)
    assert outcome.message == "unpaused: s3://landing/acme/e1.csv runs on at record 4 as execution e1-r1"
    assert started(sfn, machine) == {"e1-r1": {**file("e1"), "start_record": 4}}
    position = ledger.read()
    assert (position.status, position.execution, position.attempt, position.next_record, position.seq) == (
        RUNNING,
        "e1-r1",
        1,
        4,
        stopped.seq + 1,
    )
    assert (position.paused_at, position.pause_reason, position.unpaused_at, position.started_at) == (
        None,
        None,
        NOW + 5,
        NOW + 5,
    )
    assert (position.chunk_size, position.batch_size) == (50, 10)
    (entry,) = ledger.history()
    assert (
        entry["execution"],
        entry["status"],
        entry["next_record"],
        entry["paused_at"],
        entry["unpaused_at"],
        entry["pause_reason"],
        entry["closed_at"],
        entry["halted"],
    ) == ("e1", PAUSED, 4, NOW + 1, NOW + 5, "maintenance", NOW + 5, False)
    assert history_item(ddb, history_entry(stopped)) is not None

    with pytest.raises(NothingToDo, match=r"^nothing to unpause: tenant acme is running acme/e1.csv"):
        unpause(ledger, sfn, sqs, machine, queue_url, NOW + 6)


def test_an_unpause_cut_short_before_its_start_is_finished_by_unpausing_again(
    ledger, sqs, queue_url, sfn, machine
):
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.record_progress("e1", 4)
    pause(ledger, "maintenance", NOW + 1)
    ledger.record_pause("e1")
    with pytest.raises(ConnectionError):
        unpause(ledger, FailingStart(sfn), sqs, machine, queue_url, NOW + 5)
    written = ledger.read()

    outcome = unpause(ledger, sfn, sqs, machine, queue_url, NOW + 6)

    assert outcome.message == "started the interrupted e1-r1 at record 4"
    assert started(sfn, machine)["e1-r1"]["start_record"] == 4
    assert ledger.read() == written


def test_an_unpause_after_a_resume_cut_short_starts_the_resumed_file_and_ends_the_pause(
    ledger, sqs, queue_url, sfn, machine
):
    """GIVEN a resume that recorded e1-r1 and was cut short before its start, then a pause WHEN the
    tenant is unpaused THEN e1-r1 starts at its recorded record and the pause is over too."""
    ledger.resume(halted(ledger, next_record=7), "e1-r1", NOW + 2)
    pause(ledger, "maintenance", NOW + 3)

    outcome = unpause(ledger, sfn, sqs, machine, queue_url, NOW + 4)

    assert outcome.message == "unpaused; started the interrupted e1-r1 at record 7"

    assert started(sfn, machine) == {"e1-r1": {**file("e1"), "start_record": 7}}
    position = ledger.read()
    assert (position.status, position.execution, position.paused, position.unpaused_at) == (
        RUNNING,
        "e1-r1",
        False,
        NOW + 4,
    )


def test_unpause_of_a_tenant_that_is_not_paused_has_nothing_to_do(ledger, ddb, sqs, queue_url, sfn, machine):
    halted(ledger)
    before = table(ddb)
    with pytest.raises(NothingToDo, match=r"^nothing to unpause: tenant acme is halted: acme/e1.csv failed"):
        unpause(ledger, sfn, sqs, machine, queue_url, NOW + 5)
    assert table(ddb) == before


def test_resume_is_refused_while_paused_and_changes_nothing(ledger, ddb, sfn, machine):
    halted(ledger)
    pause(ledger, "maintenance", NOW + 2)
    before = table(ddb)

    with pytest.raises(
        NothingToDo,
        match=r"^nothing to resume while paused: tenant acme is paused \(maintenance\); "
        r"run ops unpause acme first$",
    ):
        resume(ledger, sfn, machine, NOW + 5)

    assert table(ddb) == before and started(sfn, machine) == {}


def test_skip_while_paused_gives_the_file_up_but_the_next_file_waits_for_the_unpause(
    ledger, sqs, queue_url, sfn, machine
):
    """GIVEN a halted, paused tenant with the next file's message noted WHEN the failed file is
    skipped THEN it is given up but nothing is handed off (the note stays); the unpause hands off."""
    halted(ledger)
    note_waiting(ledger, sqs, queue_url)
    pause(ledger, "maintenance", NOW + 3)
    recorder = VisibilityRecorder(sqs)

    skipped = skip(ledger, recorder, queue_url, "agreed", NOW + 4)
    assert skipped.message.endswith("; the next file starts after ops unpause acme")

    position = ledger.read()
    assert (position.status, position.halted, position.paused) == (SKIPPED, False, True)
    assert recorder.timeouts == [] and visible(sqs, queue_url) == 0
    assert position.waiting_receipt is not None

    unpause(ledger, sfn, recorder, machine, queue_url, NOW + 5)

    assert recorder.timeouts == [0] and visible(sqs, queue_url) == 1
    assert ledger.read().waiting_receipt is None


# --- the gate of a paused tenant -----------------------------------------------------------------------


@pytest.fixture
def gate_config(sfn: Any, ledger_table: str, queue_url: str, machine: str) -> ControllerEnv:
    return ControllerEnv(
        tenant_id=TENANT,
        state_machine_arn=machine,
        ledger_table_name=ledger_table,
        queue_url=queue_url,
        metric_namespace="FileIngest",
        on_failure="halt",
        waiting_visibility_seconds=240,
        work_bucket=WORK,
        landing_bucket=LANDING,
        landing_prefix="acme/",
    )


def s3_record(sqs: Any, queue_url: str, event_id: str, *, sent_at: float = NOW - 1000) -> dict[str, Any]:
    """The SQS record of an S3 event of acme/<event_id>.csv, really sent and received."""
    body = json.dumps(
        {
            "version": "0",
            "id": event_id,
            "detail-type": "Object Created",
            "source": "aws.s3",
            "time": "2024-01-01T00:00:00Z",
            "detail": {
                "bucket": {"name": LANDING},
                "object": {
                    "key": f"acme/{event_id}.csv",
                    "size": 12,
                    "etag": "abc",
                    "version-id": f"v-{event_id}",
                },
            },
        }
    )
    sqs.send_message(
        QueueUrl=queue_url,
        MessageBody=body,
        MessageGroupId=uuid.uuid4().hex,
        MessageDeduplicationId=uuid.uuid4().hex,
    )
    (message,) = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=1)["Messages"]
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": {"SentTimestamp": str(int(sent_at * 1000)), "MessageGroupId": TENANT},
    }


def gate(
    record: dict[str, Any], config: ControllerEnv, sfn: Any, ddb: Any, sqs: Any, now: float
) -> dict[str, Any]:
    return process_message(
        record,
        config=config,
        sfn=sfn,
        ddb=ddb,
        sqs=sqs,
        now=lambda: now,
        log=BoundLogger(get_logger("controller"), {"tenant": TENANT}),
        sleep=lambda _: None,
    )


def controller_metrics(capsys: pytest.CaptureFixture[str]) -> list[dict[str, float]]:
    return [
        {k: v for k, v in record.items() if k in ("HeadMessageWaitSeconds", "PausedSeconds")}
        for record in emf_records(capsys.readouterr().out, "controller")
    ]


@pytest.mark.parametrize("state", ["idle", "running", "halted", "stopped"])
def test_a_message_of_a_paused_tenant_waits_and_nothing_is_claimed_or_started(
    state, gate_config, ledger, ddb, sfn, sqs, queue_url, capsys
):
    """GIVEN the tenant paused 30 s ago (idle, with a file running, halted, or its file stopped
    for the pause) WHEN the next file's message comes THEN it waits, back in 60 s, noted for the
    unpause; nothing is claimed or started; the controller publishes no stall (head wait 0) but
    how long the tenant has been paused."""
    if state != "idle":
        ledger.claim(ledger.read(), file("e1"), "e1", NOW - 100)
    if state == "halted":
        ledger.record_close("e1", FAILED, halt_on_failure=True, now=NOW - 90)
    ledger.pause(ledger.read(), "maintenance", NOW - 30)
    if state == "stopped":
        ledger.record_pause("e1")
    before = ledger.read()
    record = s3_record(sqs, queue_url, "e2")
    recorder = VisibilityRecorder(sqs)
    capsys.readouterr()

    result = gate(record, gate_config, sfn, ddb, recorder, NOW)

    assert result == {
        "batchItemFailures": [{"itemIdentifier": record["messageId"]}],
        "outcome": "waiting",
        "execution_name": before.execution,
    }
    assert recorder.timeouts == [controller.PAUSED_VISIBILITY_SECONDS]
    assert started(sfn, gate_config.state_machine_arn) == {}
    assert "event#e2" not in entries(ddb)
    after = ledger.read()
    assert after == dataclasses.replace(
        before,
        waiting_message_id=record["messageId"],
        waiting_receipt=record["receiptHandle"],
        waiting_since=NOW,
        waiting_sent_at=NOW - 1000,
    )
    assert controller_metrics(capsys) == [{"HeadMessageWaitSeconds": 0.0, "PausedSeconds": 30.0}]


class PausedBeforeTheClaim(Ledger):
    """The ledger, with an operator's pause landing between the gate's read and its claim."""

    def claim(self, observed: Position, *args: Any, **kwargs: Any) -> Position:
        if self.read().paused_at is None:
            self.pause(self.read(), "maintenance", NOW - 5)
        return super().claim(observed, *args, **kwargs)


def test_a_pause_that_lands_between_the_gates_read_and_its_claim_holds_the_file(
    gate_config, ddb, sfn, sqs, queue_url
):
    """The pause moves the position on: the claim decided on the older read fails, the gate
    decides again and the message waits for the unpause."""
    ledger = PausedBeforeTheClaim(ddb, LEDGER_TABLE, TENANT)
    record = s3_record(sqs, queue_url, "e2")
    message = Message(record["messageId"], record["receiptHandle"], NOW - 1000)
    the_gate = Gate(
        message,
        config=gate_config,
        ledger=ledger,
        sfn=sfn,
        sqs=sqs,
        now=lambda: NOW,
        sleep=lambda _: None,
        log=BoundLogger(get_logger("controller"), {}),
    )

    result = the_gate.handle(file("e2", version_id="v-e2"))

    assert result["outcome"] == "waiting"
    assert started(sfn, gate_config.state_machine_arn) == {}
    position = ledger.read()
    assert (position.file, position.paused, position.waiting_message_id) == (None, True, record["messageId"])
    assert not [e for e in entries(ddb) if e.startswith(("event#", "version#"))]


def test_after_an_unpause_the_head_message_waits_from_the_unpause_not_from_the_last_close(
    gate_config, ledger, ddb, sfn, sqs, queue_url, machine, capsys
):
    """GIVEN e1 closed 400 s ago, the tenant paused, then unpaused 100 s ago, and e2's message sent
    1,000 s ago WHEN e2's message comes THEN e2 starts and its head wait is 100 s: the pause was
    not a stall."""
    ledger.claim(ledger.read(), file("e1"), "e1", NOW - 500)
    ledger.record_close("e1", SUCCEEDED, halt_on_failure=True, now=NOW - 400)
    pause(ledger, "maintenance", NOW - 300)
    unpause(ledger, sfn, sqs, machine, queue_url, NOW - 100)
    record = s3_record(sqs, queue_url, "e2", sent_at=NOW - 1000)
    capsys.readouterr()

    result = gate(record, gate_config, sfn, ddb, sqs, NOW)

    assert (result["outcome"], result["execution_name"]) == ("started", "e2")
    assert controller_metrics(capsys) == [{"HeadMessageWaitSeconds": 100.0}]


# --- register stopping for a pause ----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeSink:
    """The core system stand-in: acknowledges every record, calling `on_post(request number)` first."""

    def __init__(self, on_post: Any = None) -> None:
        self.bodies: list[Any] = []
        self.on_post = on_post
        self.opened = self.reconnects = 0

    def post(
        self, body: bytes, headers: dict[str, str], timeout: float, *, meanwhile: Any = None
    ) -> tuple[int, bytes]:
        self.bodies.append(json.loads(body))
        if self.on_post is not None:
            self.on_post(len(self.bodies) - 1)
        if meanwhile is not None:
            meanwhile()
        return 200, b"{}"


def chunk_task(
    index: int, *, chunk_size: int = 6, execution: str = "e1", start_record: int = 0
) -> dict[str, Any]:
    return {
        "tenant": TENANT,
        "bucket": LANDING,
        "key": "acme/e1.csv",
        "version_id": "v1",
        "execution_name": execution,
        "chunk_prefix": f"chunks/{TENANT}/e1/",
        "chunk_size": chunk_size,
        "chunk_count": 3,
        "record_count": 3 * chunk_size,
        "chunk_index": index,
        "start_record": start_record,
        "fault_since": None,
    }


def chunk_lines(index: int, chunk_size: int = 6) -> list[tuple[int, bytes]]:
    first = index * chunk_size
    return [(n, json.dumps({"id": n}).encode() + b"\n") for n in range(first, first + chunk_size)]


def register_run(
    ledger: Ledger, task: dict[str, Any], sink: FakeSink, clock: Clock | None = None
) -> dict[str, Any]:
    clock = clock or Clock()
    register_config = RegisterEnv(
        tenant_id=TENANT,
        work_bucket=WORK,
        ledger_table_name=LEDGER_TABLE,
        sink_url="http://127.0.0.1:9/records",
        sink_timeout_seconds=2,
        sink_outage_budget_seconds=3600,
        landing_prefix="acme/",
    )
    register = Register(
        task,
        config=register_config,
        ledger=ledger,
        clock=clock.time,  # type: ignore[arg-type]  # a test clock
        remaining_seconds=lambda: 600.0,
        sleep=clock.sleep,
        log=BoundLogger(get_logger("register_chunk"), {}),
    )
    return register.run(iter(chunk_lines(task["chunk_index"], task["chunk_size"])), sink)  # type: ignore[arg-type]  # a scripted sink


@pytest.fixture
def running(ledger: Ledger) -> Ledger:
    """e1 running, records 0-5 acknowledged (chunk 0 of 6-record chunks done)."""
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.record_progress("e1", 6)
    return ledger


def test_register_of_a_paused_tenant_sends_nothing_and_stops_the_file_where_it_is(running):
    """GIVEN the tenant paused before chunk 1's invocation WHEN it runs THEN nothing is sent, the
    position is PAUSED at record 6 and the workflow is told the file paused (not done, not failed);
    a retried invocation says the same and sends nothing either."""
    paused = running.pause(running.read(), "maintenance", NOW + 1)
    sink = FakeSink()

    progress = register_run(running, chunk_task(1, start_record=6), sink)

    assert (progress["paused"], progress["done"], progress["start_record"], progress["records_sent"]) == (
        True,
        False,
        6,
        0,
    )
    assert sink.bodies == []
    stopped = running.read()
    assert (stopped.status, stopped.execution, stopped.next_record, stopped.seq) == (
        PAUSED,
        "e1",
        6,
        paused.seq + 1,
    )

    again = register_run(running, chunk_task(1, start_record=6), sink)

    assert (again["paused"], again["done"], again["start_record"], again["records_sent"]) == (
        True,
        False,
        6,
        0,
    )
    assert sink.bodies == [] and running.read() == stopped


def test_a_pause_during_a_chunk_stops_it_after_the_record_its_progress_save_saw(running):
    """GIVEN the tenant is paused while record 7 is being sent, a second after the last progress
    save WHEN that record is acknowledged and its progress saved THEN the chunk stops: nothing after
    record 7 is sent, the position is PAUSED at record 8; the next attempt sends 8-11 only."""
    clock = Clock()

    def pause_during(request: int) -> None:
        if request == 1:  # record 7
            running.pause(running.read(), "maintenance", clock.now)
            clock.now += 1.5  # the next progress save is due

    sink = FakeSink(pause_during)

    progress = register_run(running, chunk_task(1, start_record=6), sink, clock)

    assert [body["id"] for body in sink.bodies] == [6, 7]
    assert (progress["paused"], progress["done"], progress["start_record"], progress["records_sent"]) == (
        True,
        False,
        8,
        2,
    )
    stopped = running.read()
    assert (stopped.status, stopped.next_record) == (PAUSED, 8)

    running.unpause(stopped, NOW + 10, execution="e1-r1")
    resumed = FakeSink()
    progress = register_run(running, chunk_task(1, start_record=8, execution="e1-r1"), resumed)
    assert [body["id"] for body in resumed.bodies] == [8, 9, 10, 11]
    assert (progress["done"], progress["paused"]) == (True, False)
    assert (running.read().status, running.read().next_record) == (RUNNING, 12)


class UnpausedMeanwhile(Ledger):
    """The ledger, with an operator's unpause landing between register's read and its stop."""

    def record_pause(self, execution: str) -> Position:
        position = self.read()
        if position.paused_at is not None and position.status == RUNNING:
            self.unpause(position, NOW + 2)
        return super().record_pause(execution)


def test_a_pause_lifted_before_register_stops_for_it_lets_the_chunk_go_on(ddb, ledger_table):
    """GIVEN register read the pause, and the operator unpaused before register's stop was written
    WHEN its stop is refused THEN it goes on: every record of the chunk is sent, the file runs."""
    ledger = UnpausedMeanwhile(ddb, ledger_table, TENANT)
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.pause(ledger.read(), "maintenance", NOW + 1)
    sink = FakeSink()

    progress = register_run(ledger, chunk_task(0), sink)

    assert [body["id"] for body in sink.bodies] == [0, 1, 2, 3, 4, 5]
    assert (progress["done"], progress["paused"], progress["records_sent"]) == (True, False, 6)
    position = ledger.read()
    assert (position.status, position.next_record, position.paused) == (RUNNING, 6, False)


# --- ops status: files, attempts, pauses ------------------------------------------------------------------


@pytest.fixture
def resources(ledger_table: str, queue_url: str) -> TenantResources:
    return TenantResources(
        tenant_id=TENANT,
        stack="OrderedIngest-Tenant-acme",
        queue_url=queue_url,
        state_machine_arn="arn:aws:states:us-east-1:123456789012:stateMachine:acme",
        landing_prefix="acme/",
        on_failure="halt",
        ledger_table=ledger_table,
    )


def status_of(resources: TenantResources, ddb: Any, sqs: Any) -> dict[str, Any]:
    return tenant_status(resources, ddb=ddb, sqs=sqs, now=NOW + 100)


def test_status_counts_a_failed_file_replaced_by_its_correction_as_one_file_that_succeeded(
    ledger, ddb, sqs, resources
):
    """GIVEN e1 failed, its correction failed too, and a second correction succeeded WHEN status is
    asked THEN one file succeeded, none failed; its three attempts, two failed, are listed oldest
    first, each failed one naming its replacement."""
    ledger.replace(halted(ledger), correction("v2"), "fix-1", NOW + 2)
    ledger.record_close("fix-1", FAILED, halt_on_failure=True, now=NOW + 3)
    ledger.replace(ledger.read(), correction("v3"), "fix-2", NOW + 4)
    ledger.record_close("fix-2", SUCCEEDED, halt_on_failure=True, now=NOW + 5)

    status = status_of(resources, ddb, sqs)

    assert status["state"] == "idle" and status["paused"] is None
    assert status["last_24h"] == {"succeeded": 1, "failed": 0, "skipped": 0}
    assert status["attempts_24h"] == {"total": 3, "failed": 2, "paused": 0}
    (retried,) = status["retried_24h"]
    assert retried["outcome"] == SUCCEEDED and retried["replaced"] is True
    assert [
        (a["execution"], a["status"], (a["replaced_by"] or {}).get("execution")) for a in retried["attempts"]
    ] == [("e1", FAILED, "fix-1"), ("fix-1", FAILED, "fix-2"), ("fix-2", SUCCEEDED, None)]


def test_status_counts_a_failed_file_replaced_once_as_succeeded_and_its_failure_as_an_attempt(
    ledger, ddb, sqs, resources
):
    ledger.replace(halted(ledger), correction(), "fix-1", NOW + 2)
    ledger.record_close("fix-1", SUCCEEDED, halt_on_failure=True, now=NOW + 3)

    status = status_of(resources, ddb, sqs)

    assert status["last_24h"] == {"succeeded": 1, "failed": 0, "skipped": 0}
    assert status["attempts_24h"] == {"total": 2, "failed": 1, "paused": 0}
    assert [len(f["attempts"]) for f in status["retried_24h"]] == [2]


@pytest.mark.parametrize("how", ["resumed", "replaced"])
def test_status_counts_a_failed_file_that_runs_again_neither_failed_nor_succeeded(
    how, ledger, ddb, sqs, resources
):
    failed = halted(ledger)
    if how == "resumed":
        ledger.resume(failed, "e1-r1", NOW + 2)
    else:
        ledger.replace(failed, correction(), "fix-1", NOW + 2)

    status = status_of(resources, ddb, sqs)

    assert status["state"] == "running"
    assert status["last_24h"] == {"succeeded": 0, "failed": 0, "skipped": 0}
    assert status["attempts_24h"] == {"total": 1, "failed": 1, "paused": 0}
    assert [f["outcome"] for f in status["retried_24h"]] == []  # one attempt closed so far
    if how == "replaced":
        assert status["current_file"]["replaces"]["file_event"] == "e1"


def test_status_counts_a_failed_file_resumed_and_stopped_for_a_pause_neither_failed_nor_succeeded(
    ledger, ddb, sqs, resources
):
    """GIVEN e1 failed, was resumed, and its new attempt stopped for a pause WHEN status is asked
    THEN the file is in progress (its failed attempt is an attempt, not a failed file)."""
    ledger.resume(halted(ledger), "e1-r1", NOW + 2)
    ledger.pause(ledger.read(), "maintenance", NOW + 3)
    ledger.record_pause("e1-r1")

    status = status_of(resources, ddb, sqs)

    assert status["state"] == "paused"
    assert status["last_24h"] == {"succeeded": 0, "failed": 0, "skipped": 0}
    assert status["attempts_24h"] == {"total": 1, "failed": 1, "paused": 0}


def test_status_shows_a_pause_and_counts_the_stopped_attempt_as_paused(ledger, ddb, sqs, resources):
    """GIVEN e1 running WHEN paused, stopped at record 4, unpaused and then done THEN status shows
    the pause (since, why, whether the file stopped) while it lasts; after it one file succeeded in
    two attempts, one of them paused, none failed."""
    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    ledger.record_progress("e1", 4)
    ledger.pause(ledger.read(), "maintenance", NOW + 1)
    assert status_of(resources, ddb, sqs)["paused"] == {
        "since": NOW + 1,
        "reason": "maintenance",
        "file_stopped": False,
    }
    stopped = ledger.record_pause("e1")

    status = status_of(resources, ddb, sqs)
    assert status["state"] == "paused"
    assert status["paused"] == {"since": NOW + 1, "reason": "maintenance", "file_stopped": True}
    assert status["last_24h"] == {"succeeded": 0, "failed": 0, "skipped": 0}

    ledger.unpause(stopped, NOW + 2, execution="e1-r1")
    running = status_of(resources, ddb, sqs)
    assert running["attempts_24h"] == {"total": 1, "failed": 0, "paused": 1}
    assert running["last_24h"] == {"succeeded": 0, "failed": 0, "skipped": 0}
    assert (running["state"], running["paused"]) == ("running", None)

    ledger.record_close("e1-r1", SUCCEEDED, halt_on_failure=True, now=NOW + 3)
    done = status_of(resources, ddb, sqs)
    assert done["last_24h"] == {"succeeded": 1, "failed": 0, "skipped": 0}
    assert done["attempts_24h"] == {"total": 2, "failed": 0, "paused": 1}
    (retried,) = done["retried_24h"]
    assert (retried["outcome"], [a["status"] for a in retried["attempts"]]) == (
        SUCCEEDED,
        [PAUSED, SUCCEEDED],
    )


def test_the_version_marker_of_a_replacement_is_the_corrections_version(ledger, ddb):
    """The marker replace writes is keyed by the correction's bucket, key and version."""
    ledger.replace(halted(ledger), correction("v9", key="acme/e1-fixed.csv"), "fix-1", NOW + 2)
    assert version_entry(LANDING, "acme/e1-fixed.csv", "v9") in entries(ddb)
    assert version_entry(LANDING, "acme/e1.csv", "v9") not in entries(ddb)


def test_an_interrupted_resume_is_not_started_while_paused_but_by_the_unpause(
    ledger, sqs, queue_url, sfn, machine
):
    """GIVEN a resume cut short before its start, then a pause WHEN the operator runs resume
    again THEN it is refused and nothing starts (no file starts while paused); the unpause
    starts it."""
    halted(ledger, next_record=4)
    with pytest.raises(ConnectionError):
        resume(ledger, FailingStart(sfn), machine, NOW + 1)
    pause(ledger, "maintenance", NOW + 2)

    with pytest.raises(NothingToDo, match="while paused"):
        resume(ledger, sfn, machine, NOW + 3)
    assert started(sfn, machine) == {}

    unpause(ledger, sfn, sqs, machine, queue_url, NOW + 4)
    assert started(sfn, machine)["e1-r1"]["start_record"] == 4


def test_no_hand_off_while_a_file_runs_whether_paused_or_not(ledger, sqs, queue_url):
    """GIVEN a running file and the next file's message noted as waiting THEN a hand-off makes
    nothing visible, paused or not: the close of the running file (or the unpause) does."""
    from lambdas.ledger import hand_off

    ledger.claim(ledger.read(), file("e1"), "e1", NOW)
    note_waiting(ledger, sqs, queue_url)
    assert hand_off(ledger, sqs, queue_url, ledger.read()) is False
    pause(ledger, "maintenance", NOW + 3)
    assert hand_off(ledger, sqs, queue_url, ledger.read()) is False
    assert visible(sqs, queue_url) == 0 and ledger.read().waiting_receipt is not None
