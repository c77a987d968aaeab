"""The batch contract (`sink.batch_size` > 1) on the local runtime: files in order, every record
once, a batch per POST; a batch rejected whole halts the tenant, and the resumed file sends that
same batch again and registers nothing twice."""

from __future__ import annotations

import pytest

from lambdas import contract
from local_runtime import LocalPipeline
from ops.cli import EXIT_OK
from tests.e2e.pipeline_checks import (
    assert_no_overlap,
    assert_records_in_file_order,
    assert_requests_in_order,
    csv_file,
    first_sends,
    ops,
    status,
    wait_for,
)

BATCH = 4


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline(
        [{"id": "batched", "sink": {"batch_size": BATCH}}, {"id": "rejects", "sink": {"batch_size": BATCH}}],
        chunk_size=10,
    )


def posts(requests: list) -> list[list[str]]:
    """The records (`seq`) of each POST, in arrival order."""
    grouped: dict[int, list[str]] = {}
    for request in requests:
        grouped.setdefault(request.post, []).append(request.body["seq"])
    return list(grouped.values())


def test_batches_keep_order_and_register_every_record_once(pipe: LocalPipeline) -> None:
    """GIVEN batch_size 4 and chunk_size 10 WHEN a 25-record and a 7-record file arrive back to back
    THEN every record is registered once, files and records in order, in batches cut on each chunk's
    grid (4, 4, 2 per full chunk): 8 POSTs for the first file, 2 for the second."""
    sink = pipe.sink("batched")
    pipe.put_file("batched", "a.csv", csv_file("a", 25))
    pipe.put_file("batched", "b.csv", csv_file("b", 7))
    pipe.wait_until_idle(timeout=60, tenants=["batched"])

    assert [e["status"] for e in pipe.executions("batched")] == ["SUCCEEDED", "SUCCEEDED"]
    assert_no_overlap(pipe.executions("batched"))
    assert_records_in_file_order(sink.accepted, [("a", 25), ("b", 7)])
    assert_requests_in_order(sink.requests)
    assert [len(p) for p in posts(first_sends(sink.requests))] == [4, 4, 2, 4, 4, 2, 4, 1, 4, 3]
    assert all(r.batch_size is not None for r in sink.requests)  # every POST is a JSON array


def test_a_batch_rejected_whole_halts_the_tenant_and_the_resume_registers_nothing_twice(
    pipe: LocalPipeline,
) -> None:
    """GIVEN the core system rejects record 13 of a 20-record file: the batch 10-13 is rejected whole
    (none of it registered) WHEN the file runs THEN it fails with records 0-9 registered and the ledger
    at record 10; WHEN the core system is fixed and the operator resumes THEN the same batch 10-13
    is sent again under the same key, and every record is registered exactly once, in order."""
    sink = pipe.sink("rejects").reject(on_record={"file": "r", "seq": "13"}, status=422)
    key, _ = pipe.put_file("rejects", "r.csv", csv_file("r", 20))

    wait_for(
        lambda: (
            status(pipe, "rejects")["state"] == "halted"
            and not any(e["status"] == "RUNNING" for e in pipe.executions("rejects"))
        ),
        timeout=60,
        what="the tenant to halt",
    )
    state = status(pipe, "rejects")
    assert state["current_file"]["key"] == key and state["current_file"]["next_record"] == 10
    assert state["last_failure"]["error"] == contract.SinkRejectedError.__name__
    assert [r["seq"] for r in sink.accepted] == [str(i) for i in range(10)]
    rejected = [r for r in sink.requests if r.status == 422]
    assert {r.body["seq"] for r in rejected} == {"10", "11", "12", "13"} and not any(
        r.registered for r in rejected
    )

    sink.clear_faults()
    resumed_at = len(sink.requests)
    code, out = ops(pipe, "resume", "rejects")
    assert code == EXIT_OK and "at record 10" in out, out
    pipe.wait_until_idle(timeout=60, tenants=["rejects"])

    assert [e["status"] for e in pipe.executions("rejects")] == ["FAILED", "SUCCEEDED"]
    assert_records_in_file_order(sink.accepted, [("r", 20)])
    assert_requests_in_order(sink.requests)
    after = sink.requests[resumed_at:]
    assert posts(after) == [["10", "11", "12", "13"], ["14", "15", "16", "17"], ["18", "19"]]
    assert after[0].idempotency_key == rejected[0].idempotency_key  # the same batch, the same key
