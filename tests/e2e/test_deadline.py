"""A chunk longer than the register function's time limit: the handler returns its progress
before the deadline and the workflow continues the chunk in a new invocation, at the next record.

Its own pipeline at time scale 0.02: the register function's 15 minutes become 18 s, and a
core system answering in 150 ms makes a 140-record chunk last 21 s. The handler keeps a tenth
of its time in hand at the deadline (1.8 s here): at 0.01 (0.9 s) a loaded machine once stalled
the last progress write past the deadline, the function was killed, and the record it had sent
was sent again (same key, registered once, but not what this test is about).
"""

from __future__ import annotations

import pytest

from lambdas.contract import SINK_ERRORS_METRIC
from local_runtime import LocalPipeline
from tests.e2e.pipeline_checks import (
    assert_records_in_file_order,
    csv_file,
    emf_values,
    first_sends,
    log_lines,
    timeouts,
)


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    # chunk_size 140 x sink timeout 60 s is far beyond Lambda's 15 minutes: the timeout is capped.
    return start_pipeline([{"id": "long", "sink": {"timeout_seconds": 60}}], chunk_size=140, time_scale=0.02)


def test_a_chunk_that_outlasts_the_function_continues_in_a_new_invocation(pipe: LocalPipeline) -> None:
    """GIVEN a 140-record chunk and a core system that takes 150 ms per record (21 s in all)
    WHEN the file is processed by a register function with an 18 s time limit
    THEN the function returns before its deadline (never timed out), a second invocation
    continues at the next record, and every record reaches the core system once, in order."""
    sink = pipe.sink("long").latency(0.15)
    pipe.put_file("long", "a.csv", csv_file("a", 140))

    pipe.wait_until_idle(timeout=90, tenants=["long"])

    (execution,) = pipe.executions("long")
    assert execution["status"] == "SUCCEEDED"
    assert_records_in_file_order(sink.accepted, [("a", 140)])
    lines = log_lines(pipe, "long", "register")
    progress = [line for line in lines if line.get("message") == "chunk progress"]
    assert len(progress) >= 2 and progress[0]["done"] is False and progress[-1]["done"] is True
    assert progress[-1]["start_record"] == 140 and 0 < progress[0]["start_record"] < 140
    # A kill at the deadline re-sends the record in flight (same key): say that, not "sent twice".
    assert not timeouts(lines), (
        "the register function was killed at its deadline: the handler's margin did not cover this machine's stall"
    )
    assert len(first_sends(sink.requests)) == 140
    # A request sent again under its key after the sink timeout (1.2 s here, which a starved
    # machine can miss) is a failed try the function counted; any other repeat is a record the
    # continuation sent again although it had been acknowledged.
    repeats = len(sink.requests) - 140
    failed_tries = sum(emf_values(pipe, "long", "register", SINK_ERRORS_METRIC))
    assert repeats <= failed_tries, (
        f"{repeats} record(s) sent again, {failed_tries:g} failed tries to explain them"
    )
