"""What the alarms watch, as a local run publishes it: a normal burst's head waits count no
time in the queue; a halted tenant, an outage and a file past its time limit show.

No alarm is evaluated here: that each alarm watches a metric its stack publishes, in the unit
and with the threshold of the tenants file, is checked on the templates
(tests/test_alarm_sources.py). These tests read the values the handlers published (their EMF
records) and the executions, and compare with the synthesized alarm's threshold; a duration is
scaled by the time scale (0.03: the stall threshold's 150 s become 4.5 s). The stall threshold
is set above the local hand-off's unscaled moments (the controller's 2 s wait for a closing
execution) and below the scaled waiting visibility (240 s -> 7.2 s), after which a halted
tenant's head message is seen again.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from lambdas import contract
from local_runtime import LocalPipeline
from tests.e2e.pipeline_checks import csv_file, emf_records, emf_values, halted, log_lines, wait_for

STALL_AFTER = {"stall_after_seconds": 150}


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    pipe = start_pipeline(
        [
            {"id": "burst", "alarms": STALL_AFTER},
            {"id": "halted", "alarms": STALL_AFTER},
            {"id": "outage", "alarms": {**STALL_AFTER, "sink_errors_threshold": 5}},
            # A file may run 60 s (1.8 s here); the outage budget must be shorter.
            {
                "id": "slow",
                "alarms": STALL_AFTER,
                "file_time_limit_seconds": 60,
                "sink": {"outage_budget_seconds": 30},
            },
        ],
        chunk_size=5,
    )
    # The two scenarios that wait for a state (a halt) start at once, each on its own tenant,
    # and converge while the other tests run; their tests check where they ended.
    pipe.put_file("halted", "bad.csv", b"file,seq\nbad,0\nbad\n")
    pipe.put_file("halted", "next.csv", csv_file("next", 2))
    # 100 records at 0.05 s: 5 s at least, past the 1.8 s limit; each answer well inside the 0.3 s
    # sink timeout, so a busy machine makes the timeout surer, never a sink outage instead.
    pipe.sink("slow").latency(0.05)
    pipe.put_file("slow", "long.csv", csv_file("long", 100))
    pipe.put_file("slow", "next.csv", csv_file("next", 2))
    return pipe


def alarm(pipe: LocalPipeline, tenant: str, key: str) -> dict[str, Any]:
    """The properties of the tenant's synthesized alarm ``<tenant>-<key>``."""
    resources = pipe.templates[pipe.tenants[tenant].stack]["Resources"].values()
    (found,) = [
        r["Properties"]
        for r in resources
        if r["Type"] == "AWS::CloudWatch::Alarm" and r["Properties"]["AlarmName"] == f"{tenant}-{key}"
    ]
    return found


def stall_threshold(pipe: LocalPipeline, tenant: str) -> float:
    """The stall alarm's threshold (seconds of head-message wait) at the run's time scale."""
    return alarm(pipe, tenant, "stall")["Threshold"] * pipe.time_scale


def head_waits(pipe: LocalPipeline, tenant: str) -> list[tuple[float, float]]:
    """The head waits the tenant's controller published, oldest first, each as (when it was
    published, in epoch seconds; the wait)."""
    return [
        (record["_aws"]["Timestamp"] / 1000, record[contract.HEAD_WAIT_METRIC])
        for record in emf_records(pipe, tenant, "controller", contract.HEAD_WAIT_METRIC)
    ]


def test_a_burst_of_twenty_files_counts_no_queue_time_in_the_head_wait(pipe: LocalPipeline) -> None:
    """GIVEN 20 files dropped at once for one tenant WHEN they are ingested one after the other
    THEN no head-message wait the controller published spans a file's run: each counts only the
    hand-off from one file's close to the next decision, though the last file waited in the
    queue longer than the stall threshold (the old metric, time in the queue, would have paged).

    On AWS a hand-off takes seconds against the 150 s threshold. Here the threshold is scaled to
    4.5 s while the machine's pace is not: on a busy machine one hand-off can take that long, so
    the test checks what the metric counts, not how fast this machine hands off. (One file
    first, so that no wait counts the local workers' cold start.)"""
    pipe.put_file("burst", "warm.csv", csv_file("warm", 2))
    pipe.wait_until_idle(timeout=180, tenants=["burst"])
    before = len(head_waits(pipe, "burst"))
    started = time.time()
    for index in range(20):
        pipe.put_file("burst", f"f{index:02d}.csv", csv_file(f"f{index:02d}", 2))

    pipe.wait_until_idle(timeout=180, tenants=["burst"])

    executions = pipe.executions("burst")
    assert [e["status"] for e in executions] == ["SUCCEEDED"] * 21
    runs = [(e["startDate"].timestamp(), e["stopDate"].timestamp()) for e in executions]
    assert runs[-1][0] - started > stall_threshold(pipe, "burst")
    waits = head_waits(pipe, "burst")[before:]
    assert len(waits) >= 20
    assert any(wait > 0 for _, wait in waits)
    # A wait published at `at` covers [at - wait, at]; no file ran wholly inside it.
    spanned = [(at, wait, run) for at, wait in waits for run in runs if at - wait <= run[0] and run[1] <= at]
    assert spanned == [], spanned


def test_a_halted_tenant_with_a_file_queued_publishes_a_head_wait_above_the_stall_threshold(
    pipe: LocalPipeline,
) -> None:
    """GIVEN a malformed file that fails and halts the tenant, and a good file queued behind it
    (uploaded when the module started) WHEN nobody resumes THEN the controller, seeing the queued
    file again, publishes a head wait above the stall threshold, and the only execution is the
    failed one."""
    threshold = stall_threshold(pipe, "halted")

    wait_for(
        lambda: any(wait > threshold for _, wait in head_waits(pipe, "halted")),
        timeout=60,
        interval=0.5,
        what="a head wait above the stall threshold",
    )

    assert [e["status"] for e in pipe.executions("halted")] == ["FAILED"]


def test_a_core_system_outage_publishes_sink_errors_and_logs_no_error(pipe: LocalPipeline) -> None:
    """GIVEN the core system answers 503 to everything WHEN a file is ingested THEN the register
    function publishes at least the sink-errors alarm's count of failed tries, and logs only
    WARNINGs; once the core system is back the file completes."""
    expression = alarm(pipe, "outage", "sink-errors")["Metrics"][0]["Expression"]
    (minimum,) = re.findall(r"IF\(errors >= (\d+),", expression)
    pipe.sink("outage").fail_with(503, times=None)
    pipe.put_file("outage", "f.csv", csv_file("f", 3))

    wait_for(
        lambda: sum(emf_values(pipe, "outage", "register", contract.SINK_ERRORS_METRIC)) >= int(minimum),
        timeout=60,
        interval=0.5,
        what=f"{minimum} sink errors",
    )
    pipe.sink("outage").clear_faults()
    pipe.wait_until_idle(timeout=120, tenants=["outage"])

    assert [e["status"] for e in pipe.executions("outage")] == ["SUCCEEDED"]
    lines = log_lines(pipe, "outage", "register")
    assert [line for line in lines if "ERROR" in (line.get("level"), line.get("log_level"))] == []
    assert any(line.get("level") == "WARNING" for line in lines)


def test_a_file_past_its_time_limit_times_out_and_halts_the_tenant(pipe: LocalPipeline) -> None:
    """GIVEN a file that takes longer than the tenant's file_time_limit_seconds, a second file behind
    it (uploaded when the module started) WHEN it runs THEN Step Functions times the execution out
    (the workflow's TimeoutSeconds) and the tenant is halted like after a failure: the second file
    does not start."""
    wait_for(lambda: halted(pipe, "slow"), timeout=60, interval=0.5, what="the slow tenant to halt")

    assert [e["status"] for e in pipe.executions("slow")] == ["TIMED_OUT"]
