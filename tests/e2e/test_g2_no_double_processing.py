"""G2 (no double processing): duplicate events, the same object version under another event
id, a controller crash after StartExecution and core-system 5xx/429 never register a record
twice, and every record is registered."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from local_runtime import LocalPipeline
from tests.e2e.pipeline_checks import (
    assert_files_in_order,
    assert_no_duplicates,
    assert_no_overlap,
    assert_one_key_per_record,
    assert_records_in_file_order,
    csv_file,
)

FILES = [("d0", 7), ("d1", 7), ("d2", 5), ("d3", 4), ("d4", 6)]
#: The id d2's event comes again under (see `run`).
OTHER_ID = "11111111-2222-3333-4444-555555555555"


@dataclass(frozen=True)
class Run:
    pipe: LocalPipeline
    uploads: list[tuple[str, str]]  # (key, version_id) in upload order


@pytest.fixture(scope="module")
def run(start_pipeline) -> Run:
    """One run with every fault of G2 at once; the tests below check its outcome."""
    pipe = start_pipeline([{"id": "acme"}], chunk_size=3)
    sink = pipe.sink("acme")
    sink.fail_with(503, times=2, on_record={"file": "d1", "seq": "4"})  # chunk 1 of d1, twice
    sink.fail_with(500, times=1, on_record={"file": "d3", "seq": "2"})
    sink.fail_with(429, times=1, on_record={"file": "d2", "seq": "0"})
    pipe.faults.kill("acme", "controller", after="sfn.StartExecution")  # d0's first delivery
    # EventBridge delivers at least once: d0's event reaches the queue a second time.
    pipe.faults.duplicate_next_event("acme")

    uploads = [pipe.put_file("acme", f"{name}.csv", csv_file(name, count)) for name, count in FILES]
    pipe.wait_until_idle(timeout=120)
    # ... and once more, long after it was processed.
    d0_event = next(d.body for d in pipe.deliveries("acme") if '"acme/d0.csv"' in d.body)
    pipe.send_to_queue("acme", d0_event)
    # d2's object version under another event id: what a second delivery across a bus-to-bus
    # hop (routing.shards) may be, as EventBridge may give a forwarded event a new id.
    d2_event = json.loads(next(d.body for d in pipe.deliveries("acme") if '"acme/d2.csv"' in d.body))
    pipe.send_to_queue("acme", json.dumps({**d2_event, "id": OTHER_ID}))
    pipe.wait_until_idle(timeout=60)
    return Run(pipe, uploads)


def test_every_record_is_registered_once_in_order(run: Run) -> None:
    """GIVEN 5 files, a duplicated event, a controller crash after start, 503/500/429 answers
    WHEN the tenant has processed everything
    THEN the core system registered every record exactly once, in file order."""
    accepted = run.pipe.sink("acme").accepted
    assert_no_duplicates(accepted)
    assert_records_in_file_order(accepted, FILES)


def test_one_execution_per_file_despite_crash_and_duplicates(run: Run) -> None:
    """GIVEN the same run
    THEN each file was started exactly once (the redelivered messages found their execution
    already started), all succeeded, one after the other in upload order."""
    executions = run.pipe.executions("acme")
    assert [e["status"] for e in executions] == ["SUCCEEDED"] * len(FILES)
    assert sorted(e["key"] for e in executions) == sorted(key for key, _ in run.uploads)
    assert_no_overlap(executions)
    assert_files_in_order(executions, [key for key, _ in run.uploads])


def test_the_same_object_version_under_another_event_id_runs_once(run: Run) -> None:
    """GIVEN d2 processed WHEN an event for d2's object version comes with another id (a second
    delivery across a bus-to-bus hop may carry a new id, a replay does) THEN it is consumed and
    nothing starts: the ledger's version marker stops it, not the event id; d2 ran once."""
    copies = [d for d in run.pipe.deliveries("acme") if OTHER_ID in d.body]
    # consumed once; before that, only a controller that timed out on a loaded machine (the
    # scaled timeout is 0.6 s) may have left it for redelivery
    assert [d.outcome for d in copies][-1:] == ["deleted"], copies
    assert all(d.outcome == "failed" and d.error_type == "Sandbox.Timedout" for d in copies[:-1]), copies
    executions = run.pipe.executions("acme")
    assert OTHER_ID not in {e["name"] for e in executions}
    assert [e["key"] for e in executions].count("acme/d2.csv") == 1


def test_the_faults_really_happened(run: Run) -> None:
    """GIVEN the same run
    THEN the controller crashed once after starting d0's execution and that message came back
    (receive count 2) and was then consumed; the duplicate event copies were consumed without a
    new execution; the sink answered the injected errors, the records it could not take were sent
    again with their keys, and no acknowledged record was ever sent again."""
    pipe = run.pipe
    assert pipe.faults.kills == [("acme", "controller", "Runtime.ExitError")]
    d0 = [d for d in pipe.deliveries("acme") if '"acme/d0.csv"' in d.body]
    # one delivery was killed; any other that failed timed out (the scaled 0.6 s, a loaded machine)
    (killed,) = [d for d in d0 if d.error_type == "Runtime.ExitError"]
    assert killed.outcome == "failed"
    assert all(d.error_type == "Sandbox.Timedout" for d in d0 if d.outcome == "failed" and d is not killed), (
        d0
    )
    # The kill came after a StartExecution of d0 succeeded, so d0's one execution existed by then.
    # It was started by the killed delivery or, on a loaded machine, by an earlier one that timed
    # out once its StartExecution was through (the killed one's StartExecution then found the
    # running execution, which Step Functions answers as a success).
    (d0_execution,) = [e for e in pipe.executions("acme") if e["key"] == "acme/d0.csv"]
    start = d0_execution["startDate"].timestamp()
    starter = max((d for d in d0 if d.started <= start), key=lambda d: d.started)
    assert start <= killed.finished
    assert starter is killed or (
        starter.error_type == "Sandbox.Timedout" and starter.receive_count < killed.receive_count
    ), (starter, killed)
    assert any(d.receive_count >= 2 and d.outcome == "deleted" for d in d0), (
        "the crashed message never came back"
    )
    assert sum(d.outcome == "deleted" for d in d0) == 3, "original + two duplicate copies are all consumed"
    assert [(tenant, original) for tenant, original, _ in pipe.faults.duplicates_sent] == [
        ("acme", killed.message_id)
    ]

    requests = pipe.sink("acme").requests
    assert sorted(r.status for r in requests if r.status >= 400) == [429, 500, 503, 503]
    # A record the core system could not take is sent again, with the same key, and nothing
    # before it is: a retry continues at the first unacknowledged record.
    failed_keys = [r.idempotency_key for r in requests if r.status >= 400]
    for key in failed_keys:
        assert 200 <= [r.status for r in requests if r.idempotency_key == key][-1] < 300
    # An acknowledged record is sent again only after a register invocation died (on a loaded
    # machine the scaled timeouts can expire: the retry continues at the ledger's last recorded
    # progress), and then under the key it had: the core system registers it once.
    resent = [r for r in requests if r.status < 300 and not r.registered]
    register_log = pipe.logs(pipe.tenants["acme"].functions["register"])
    died = '"type": "platform.report"' in register_log
    assert not resent or died, "an acknowledged record was sent again, and no register invocation died"
    assert_one_key_per_record(requests)
    assert all(r.idempotency_key for r in requests)
