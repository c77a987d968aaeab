"""A chunk longer than the register function's time limit: the handler returns its progress
before the deadline and the workflow continues the chunk in a new invocation, at the next record.

Its own pipeline at time scale 0.01: the register function's 15 minutes become 9 s, and a
core system answering in 80 ms makes a 140-record chunk last 11 s.
"""

from __future__ import annotations

import json

import pytest

from local_runtime import LocalPipeline
from tests.e2e.pipeline_checks import assert_records_in_file_order, csv_file


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    # chunk_size 140 x sink timeout 60 s is far beyond Lambda's 15 minutes: the timeout is capped.
    return start_pipeline([{"id": "long", "sink": {"timeout_seconds": 60}}], chunk_size=140, time_scale=0.01)


def test_a_chunk_that_outlasts_the_function_continues_in_a_new_invocation(pipe: LocalPipeline) -> None:
    """GIVEN a 140-record chunk and a core system that takes 80 ms per record (11 s in all)
    WHEN the file is processed by a register function with a 9 s time limit
    THEN the function returns before its deadline (never timed out), a second invocation
    continues at the next record, and every record reaches the core system once, in order."""
    sink = pipe.sink("long").latency(0.08)
    pipe.put_file("long", "a.csv", csv_file("a", 140))

    pipe.wait_until_idle(timeout=90, tenants=["long"])

    (execution,) = pipe.executions("long")
    assert execution["status"] == "SUCCEEDED"
    assert_records_in_file_order(sink.accepted, [("a", 140)])
    assert len(sink.requests) == 140, "a record was sent twice"
    lines = [json.loads(line) for line in pipe.logs(pipe.tenants["long"].functions["register"]).splitlines() if line.startswith("{")]
    progress = [line for line in lines if line.get("message") == "chunk progress"]
    assert len(progress) >= 2 and progress[0]["done"] is False and progress[-1]["done"] is True
    assert progress[-1]["start_record"] == 140 and 0 < progress[0]["start_record"] < 140
    assert not any("Task timed out" in line.get("errorMessage", "") for line in lines)
