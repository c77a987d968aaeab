"""A crash is transient until it repeats (docs/design.md 4.7), on the local runtime: the
function's process is killed for real (SIGKILL) at a chosen point, as Lambda kills a runtime
that runs out of memory or time. No handler code runs after the kill: no `finally`, no
progress write, no answer.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from local_runtime import LocalPipeline
from ops.cli import EXIT_OK
from pipeline_constructs import budgets
from tests.e2e.pipeline_checks import (
    assert_no_duplicates,
    assert_no_overlap,
    assert_one_key_per_record,
    assert_records_in_file_order,
    csv_file,
    halted,
    log_lines,
    ops,
    status,
    timeouts,
    wait_for,
)

ATTEMPTS = budgets.CRASH_RETRIES + 1


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline([{"id": "acme"}, {"id": "globex"}], chunk_size=5)


@pytest.fixture(autouse=True)
def disarmed(pipe: LocalPipeline) -> Iterator[None]:
    """A test that fails leaves no kill armed for the next one."""
    yield
    pipe.faults.clear()


def test_register_killed_mid_chunk_twice_is_retried_and_the_file_succeeds(pipe: LocalPipeline) -> None:
    """GIVEN register's process killed twice right after the core system acknowledged the
    second record of a chunk (its progress not written yet) WHEN the file runs THEN the workflow
    retries the crashed task, the retry continues at the first unacknowledged record the ledger
    knows, every record is registered once under one key, in order, and the file succeeds."""
    sink = pipe.sink("acme")
    pipe.faults.kill("acme", "register", after="sink", count=2, times=2)
    pipe.put_file("acme", "a.csv", csv_file("a", 12))
    pipe.put_file("acme", "b.csv", csv_file("b", 3))
    pipe.wait_until_idle(timeout=120, tenants=["acme"])

    assert pipe.faults.kills == [("acme", "register", "Runtime.ExitError")] * 2
    executions = pipe.executions("acme")
    assert [e["status"] for e in executions] == ["SUCCEEDED", "SUCCEEDED"]
    assert_no_overlap(executions)
    assert_no_duplicates(sink.accepted)
    assert_records_in_file_order(sink.accepted, [("a", 12), ("b", 3)])
    assert_one_key_per_record(sink.requests)
    # The kills really came after acknowledged records: those were sent again, and the core
    # system recognised them by their key.
    assert [r for r in sink.requests if r.status < 300 and not r.registered]


def test_split_killed_mid_file_twice_restarts_cleanly_and_the_file_succeeds(pipe: LocalPipeline) -> None:
    """GIVEN split's process killed twice after it wrote the chunk index and before the manifest
    WHEN the file runs THEN the retried split starts over (the half-written index is not taken
    for a finished one) and the file succeeds: every record once, in order."""
    sink = pipe.sink("acme")
    sink.reset()
    kills_before = len(pipe.faults.kills)
    pipe.faults.kill("acme", "split", after="s3.PutObject", count=1, times=2)
    pipe.put_file("acme", "c.csv", csv_file("c", 11))
    pipe.wait_until_idle(timeout=120, tenants=["acme"])

    assert pipe.faults.kills[kills_before:] == [("acme", "split", "Runtime.ExitError")] * 2
    assert pipe.executions("acme")[-1]["status"] == "SUCCEEDED"
    assert_no_duplicates(sink.accepted)
    assert_records_in_file_order(sink.accepted, [("c", 11)])
    assert_one_key_per_record(sink.requests)


def test_a_register_crash_on_every_attempt_halts_with_that_cause_and_resume_completes(
    pipe: LocalPipeline,
) -> None:
    """GIVEN register killed as out of memory on every attempt WHEN the retries are
    spent THEN the file fails and the tenant halts, and the notification and `ops status` say that
    register crashed, how often, where and how; WHEN the cause is fixed and the operator resumes
    THEN the file continues where it stopped: every record once, under one key, in order."""
    sink = pipe.sink("globex")
    pipe.faults.kill("globex", "register", after="sink", count=2, times=100, error_type="Runtime.OutOfMemory")
    pipe.put_file("globex", "d.csv", csv_file("d", 14))
    wait_for(lambda: halted(pipe, "globex"), timeout=120, what="the tenant to halt")

    # The fourth crash in a row comes in chunk 0 unless the machine is so slow that an attempt
    # returned its progress at the deadline between two crashes (the count starts again): the
    # cause must name the chunk of the last record sent (5 records a chunk), either way.
    chunk = int(sink.requests[-1].body["seq"]) // 5  # chunks and records numbered from 0, as everywhere
    cause = (
        f"register crashed {ATTEMPTS} times in a row in chunk {chunk} of the file (last: Runtime.OutOfMemory)"
    )
    failure = status(pipe, "globex")["last_failure"]
    assert failure["error"] == "Runtime.OutOfMemory" and cause in failure["cause"]
    notice = next(n for n in pipe.notifications if (n.subject or "").startswith("[ordered-ingest] globex:"))
    assert cause in notice.message and "Runtime.OutOfMemory" in notice.subject
    # the file fits one page, so register ran in the file's own execution: still blamed on register
    assert "register crashed repeatedly" in notice.message

    pipe.faults.clear()
    code, out = ops(pipe, "resume", "globex")
    assert code == EXIT_OK, out
    pipe.wait_until_idle(timeout=120, tenants=["globex"])
    assert [e["status"] for e in pipe.executions("globex")] == ["FAILED", "SUCCEEDED"]
    assert_no_duplicates(sink.accepted)
    assert_records_in_file_order(sink.accepted, [("d", 14)])
    assert_one_key_per_record(sink.requests)


def test_a_split_crash_on_every_attempt_halts_saying_split_crashed(pipe: LocalPipeline) -> None:
    """GIVEN split killed on every attempt WHEN the retries are spent THEN the file fails before
    any record is sent, the tenant halts, and the cause says that split crashed and how often."""
    before = len(pipe.executions("globex"))
    pipe.faults.kill("globex", "split", after="s3.PutObject", count=1, times=100)
    pipe.put_file("globex", "e.csv", csv_file("e", 4))
    wait_for(
        lambda: len(pipe.executions("globex")) > before and halted(pipe, "globex"),
        timeout=120,
        what="the tenant to halt",
    )
    pipe.faults.clear()

    failure = status(pipe, "globex")["last_failure"]
    assert failure["error"] == "Runtime.ExitError"
    assert f"split crashed {ATTEMPTS} times in a row on this file" in failure["cause"]
    assert not [r for r in pipe.sink("globex").requests if r.body["file"] == "e"]
    code, out = ops(pipe, "skip", "globex", "--reason", "test: split crashed")
    assert code == EXIT_OK, out


def test_a_closer_killed_after_recording_a_failure_still_reports_it_once(pipe: LocalPipeline) -> None:
    """GIVEN the closer's process killed right after it recorded a failed file's close (before
    the notification and the hand-off) WHEN the workflow retries it (and the status-change rule's
    report arrives too) THEN the close is reported once: one history item, one notification, the
    tenant halted on that file; `ops skip` then lets the next file go."""
    from lambdas.ledger import FAILED, Ledger

    closer_log = len(log_lines(pipe, "acme", "closer"))
    pipe.faults.kill("acme", "closer", after="dynamodb.TransactWriteItems", times=1)
    bad_key, _ = pipe.put_file("acme", "bad.csv", b"file,seq\nbad,0\nbad\n")
    pipe.put_file("acme", "after.csv", csv_file("after", 2))
    wait_for(lambda: halted(pipe, "acme"), timeout=120, what="the tenant to halt")

    # A closer died with the close recorded: killed by the armed fault or, on a loaded machine,
    # timed out (the scaled timeout) while its write went through, so that the closer after it
    # found the close recorded and wrote nothing (no write left to kill). Either way the close
    # must be reported once.
    killed = ("acme", "closer", "Runtime.ExitError") in pipe.faults.kills
    assert killed or timeouts(log_lines(pipe, "acme", "closer")[closer_log:]), "no closer of acme died"
    ledger = Ledger(
        pipe.client("dynamodb"),
        pipe.deployment.stacks["OrderedIngest-Shared"].outputs["LedgerTableName"],
        "acme",
    )
    failures = [h for h in ledger.history() if h["status"] == FAILED]
    assert [h["file"]["key"] for h in failures] == [bad_key]
    notices = [n for n in pipe.notifications if (n.subject or "").startswith("[ordered-ingest] acme:")]
    assert len(notices) == 1 and "MalformedFileError" in notices[0].subject

    code, out = ops(pipe, "skip", "acme", "--reason", "test: malformed")
    assert code == EXIT_OK, out
    pipe.wait_until_idle(timeout=120, tenants=["acme"])
    assert pipe.executions("acme")[-1]["status"] == "SUCCEEDED"
