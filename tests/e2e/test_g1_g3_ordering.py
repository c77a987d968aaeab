"""G1 (order) and G3 (no loss) on the local runtime, with the synthesized definitions."""

from __future__ import annotations

import pytest

from lambdas import contract
from local_runtime import LocalPipeline
from tests.e2e.pipeline_checks import (
    assert_files_in_order,
    assert_no_overlap,
    assert_records_in_file_order,
    assert_requests_in_order,
    csv_file,
    hold_at,
    records_of,
    wait_for,
)

BURST_FILES = 20
RECORDS_PER_FILE = 7  # three chunks of 3, 3 and 1 records


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline(
        [{"id": "burst"}, {"id": "halting", "on_failure": "continue"}, {"id": "arrivals"}], chunk_size=3
    )


def test_burst_is_processed_one_file_at_a_time_in_upload_order(pipe: LocalPipeline) -> None:
    """GIVEN one tenant and 20 files of 7 records (3 chunks each)
    WHEN they are uploaded in a burst, faster than they can be processed
    THEN executions never overlap, files finish in upload order, and the core system
    receives every record once, files in upload order and records in file order."""
    names = [f"f{i:02d}" for i in range(BURST_FILES)]
    uploads = [pipe.put_file("burst", f"{name}.csv", csv_file(name, RECORDS_PER_FILE)) for name in names]

    pipe.wait_until_idle(timeout=150, tenants=["burst"])

    executions = pipe.executions("burst")
    assert [e["status"] for e in executions] == ["SUCCEEDED"] * BURST_FILES
    assert {(e["key"], e["version_id"]) for e in executions} == set(uploads)
    assert_no_overlap(executions)
    assert_files_in_order(executions, [key for key, _ in uploads])
    assert_records_in_file_order(pipe.sink("burst").accepted, [(n, RECORDS_PER_FILE) for n in names])
    assert_requests_in_order(pipe.sink("burst").requests)
    # The burst really queued up: later files waited for the gate (reported batch item failures).
    assert any(d.outcome == "kept" for d in pipe.deliveries("burst"))


def test_failing_chunk_stops_every_later_chunk(pipe: LocalPipeline) -> None:
    """GIVEN a file of 4 chunks whose second chunk holds a record the core system rejects (400)
    WHEN it is processed, followed by another file
    THEN the execution fails on that chunk, no record after the rejected one is ever sent,
    and the next file is still processed afterwards."""
    sink = pipe.sink("halting").reject(on_record={"file": "bad", "seq": "4"}, status=400)
    first, _ = pipe.put_file("halting", "bad.csv", csv_file("bad", 12))
    second, _ = pipe.put_file("halting", "next.csv", csv_file("next", 2))

    pipe.wait_until_idle(timeout=60, tenants=["halting"])

    failed, succeeded = pipe.executions("halting")
    # The file fits one page, so its chunks ran in its own execution, which fails with the
    # chunk's error (through a page execution: tests/e2e/test_pages.py).
    assert (failed["key"], failed["status"], failed["error"]) == (first, "FAILED", "SinkRejectedError")
    assert contract.SinkRejectedError.__name__ in failed["cause"]
    assert "record 4" in failed["cause"] and "HTTP 400" in failed["cause"]
    sent = [r.body for r in sink.requests if r.body["file"] == "bad"]
    assert sent == records_of("bad", 5), "records after the rejected one were sent"
    assert sink.accepted == records_of("bad", 4) + records_of("next", 2)
    assert (succeeded["key"], succeeded["status"]) == (second, "SUCCEEDED")
    assert_no_overlap([failed, succeeded])


def test_files_arriving_during_a_file_wait_and_all_complete(pipe: LocalPipeline) -> None:
    """GIVEN a tenant whose first file is in progress (held at its last record)
    WHEN three more files arrive while the first one is in progress
    THEN none is dropped: all four complete, one after the other, in arrival order."""
    sink = hold_at(pipe, "arrivals", "a0", 11)  # until the later files are queued
    first = pipe.put_file("arrivals", "a0.csv", csv_file("a0", 12))
    wait_for(
        lambda: [e for e in pipe.executions("arrivals") if e["status"] == "RUNNING"],
        timeout=30,
        what="the first file's execution to run",
    )
    later = [pipe.put_file("arrivals", f"a{i}.csv", csv_file(f"a{i}", 4)) for i in (1, 2, 3)]
    assert [e["status"] for e in pipe.executions("arrivals")] == ["RUNNING"], "the later files must wait"
    sink.clear_faults()

    pipe.wait_until_idle(timeout=90, tenants=["arrivals"])

    executions = pipe.executions("arrivals")
    assert [e["status"] for e in executions] == ["SUCCEEDED"] * 4
    assert_no_overlap(executions)
    assert_files_in_order(executions, [key for key, _ in [first, *later]])
    assert_records_in_file_order(sink.accepted, [("a0", 12), ("a1", 4), ("a2", 4), ("a3", 4)])
