"""The synthesized alarms, evaluated by `local_runtime/alarms.py` on what the local run observed:
a normal burst pages nobody; a halted tenant, a failing file and a core-system outage do.

Periods and duration thresholds are scaled by the time scale (0.03: the stall alarm's 150 s
become 4.5 s, a 5-minute period 9 s). The stall threshold is set above the local hand-off's
unscaled moments (the controller's 2 s wait for a closing execution) and below the scaled
waiting visibility (240 s -> 8 s), after which a halted tenant's head message is seen again.
"""

from __future__ import annotations

import io
import json
import time

import pytest

from lambdas import contract
from local_runtime import LocalPipeline
from local_runtime.alarms import FilterPattern
from ops.cli import EXIT_OK
from ops.cli import main as ops_main
from tests.e2e.pipeline_checks import csv_file, wait_for

STALL_AFTER = {"stall_after_seconds": 150}


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline(
        [
            {"id": "burst", "alarms": STALL_AFTER},
            {"id": "halted", "alarms": STALL_AFTER},
            {"id": "busy", "alarms": STALL_AFTER},
            {"id": "outage", "alarms": {**STALL_AFTER, "sink_errors_threshold": 5}},
            # A file may run 60 s (1.8 s here); the outage budget must be shorter.
            {"id": "slow", "alarms": STALL_AFTER, "file_time_limit_seconds": 60,
             "sink": {"outage_budget_seconds": 30}},
        ],
        chunk_size=5,
    )


def of(tenant: str, alarms: set[str]) -> set[str]:
    return {name for name in alarms if name.startswith(f"{tenant}-")}


def test_a_burst_of_twenty_files_raises_no_alarm(pipe: LocalPipeline) -> None:
    """GIVEN 20 files dropped at once for one tenant WHEN they are ingested one after the other
    THEN no alarm of the tenant fires at any moment: the last file waited in the queue far longer
    than the stall threshold, but never while nothing of the tenant ran."""
    started = time.time()
    for index in range(20):
        pipe.put_file("burst", f"f{index:02d}.csv", csv_file(f"f{index:02d}", 2))

    pipe.wait_until_idle(timeout=180, tenants=["burst"])

    executions = pipe.executions("burst")
    assert [e["status"] for e in executions] == ["SUCCEEDED"] * 20
    # The old metric (time in the queue) would have paged: the last file waited longer than 4.5 s.
    last = executions[-1]["startDate"].timestamp()
    assert last - started > pipe.alarms.scaled_threshold(_spec(pipe, "burst-stall"))
    fired = of("burst", pipe.alarms_fired(since=started))
    assert fired <= {"burst-controller-error-logs"}, fired
    if fired:
        assert_only_starved_timeouts(pipe, "burst-controller")


def test_a_halted_tenant_with_files_queued_raises_the_stall_and_workflow_failed_alarms(pipe: LocalPipeline) -> None:
    """GIVEN a malformed file that fails and halts the tenant, and a good file queued behind it
    WHEN nobody resumes THEN the stall alarm fires (the head message waits with nothing running)
    and so does workflow-failed; the error-log alarm of the split function too."""
    pipe.put_file("halted", "bad.csv", b"file,seq\nbad,0\nbad\n")
    pipe.put_file("halted", "next.csv", csv_file("next", 2))

    in_alarm = wait_for(lambda: _in_alarm_with(pipe, "halted-stall"), timeout=60, interval=0.5,
                        what="the halted tenant's stall alarm")

    assert {"halted-stall", "halted-workflow-failed"} <= of("halted", in_alarm)
    assert "halted-split-error-logs" in pipe.alarms_fired()
    assert [e["status"] for e in pipe.executions("halted")] == ["FAILED"]


def test_a_busy_tenant_raises_no_stall_alarm(pipe: LocalPipeline) -> None:
    """GIVEN a slow core system: one file takes longer than the stall threshold, a second waits
    behind it WHEN both are ingested THEN no alarm of the tenant fires: waiting behind a running
    file is not a stall."""
    pipe.sink("busy").latency(0.2)  # below the scaled sink timeout (10 s -> 0.3 s): slow, not failing
    started = time.time()
    pipe.put_file("busy", "long.csv", csv_file("long", 30))
    pipe.put_file("busy", "after.csv", csv_file("after", 2))

    pipe.wait_until_idle(timeout=120, tenants=["busy"])

    executions = pipe.executions("busy")
    assert [e["status"] for e in executions] == ["SUCCEEDED", "SUCCEEDED"]
    long_run = (executions[0]["stopDate"] - executions[0]["startDate"]).total_seconds()
    assert long_run > pipe.alarms.scaled_threshold(_spec(pipe, "busy-stall"))
    assert of("busy", pipe.alarms_fired(since=started)) == set()


def test_a_core_system_outage_raises_sink_errors_and_no_error_log_alarm(pipe: LocalPipeline) -> None:
    """GIVEN the core system answers 503 to everything WHEN a file is ingested THEN sink-errors
    fires (the register function's EMF metrics), while the register function logs only WARNINGs;
    once the core system is back the file completes."""
    pipe.sink("outage").fail_with(503, times=None)
    started = time.time()
    pipe.put_file("outage", "f.csv", csv_file("f", 3))

    in_alarm = wait_for(lambda: _in_alarm_with(pipe, "outage-sink-errors"), timeout=60, interval=0.5,
                        what="the outage tenant's sink-errors alarm")
    pipe.sink("outage").clear_faults()
    pipe.wait_until_idle(timeout=120, tenants=["outage"])

    assert "outage-register-error-logs" not in in_alarm
    assert [e["status"] for e in pipe.executions("outage")] == ["SUCCEEDED"]
    assert "outage-register-error-logs" not in pipe.alarms_fired(since=started)


def test_a_file_past_its_time_limit_times_out_halts_the_tenant_and_pages(pipe: LocalPipeline) -> None:
    """GIVEN a file that takes longer than the tenant's file_time_limit_seconds, a second file behind
    it WHEN it runs THEN Step Functions times the execution out (the workflow's TimeoutSeconds), the
    tenant is halted like after a failure (the second file does not start), workflow-timed-out fires
    and then the stall alarm."""
    pipe.sink("slow").latency(0.2)
    pipe.put_file("slow", "long.csv", csv_file("long", 40))
    pipe.put_file("slow", "next.csv", csv_file("next", 2))

    wait_for(lambda: _in_alarm_with(pipe, "slow-stall"), timeout=60, interval=0.5,
             what="the timed-out tenant's stall alarm")

    assert [e["status"] for e in pipe.executions("slow")] == ["TIMED_OUT"]
    state = _ops_status(pipe, "slow")
    assert state["state"] == "halted", state
    assert "slow-workflow-timed-out" in pipe.alarms_fired()


def _ops_status(pipe: LocalPipeline, tenant: str) -> dict:
    out = io.StringIO()
    code = ops_main(["--endpoint-url", pipe.endpoint_url, "status", tenant, "--json"], out=out)
    assert code == EXIT_OK, out.getvalue()
    return json.loads(out.getvalue())[0]


def test_alarms_without_a_local_source_are_reported_as_such(pipe: LocalPipeline) -> None:
    """Every alarm of the templates is evaluated; those on metrics the local run cannot observe
    (AWS/Events, AWS/Lambda) are named, never silently passed."""
    names = {spec.name for spec in pipe.alarms.specs}
    assert {"burst-stall", "burst-queue-age", "burst-sink-errors", "burst-workflow-timed-out",
            "burst-controller-error-logs"} <= names
    assert pipe.alarms.unobserved() <= names
    assert "burst-stall" not in pipe.alarms.unobserved()


def assert_only_starved_timeouts(pipe: LocalPipeline, function: str) -> None:
    """At time scale 0.03 the controller's 20 s timeout is 1 s; on a loaded machine an invocation
    can exceed it, and its timeout record counts as an error line, as it would on AWS. Accept
    that, and nothing else: no ERROR line of the handler, no crash."""
    pattern = FilterPattern(contract.error_log_filter_pattern())
    errors = [json.loads(line) for line in pipe.logs(function).splitlines() if pattern.matches(line)]
    assert errors and all(e.get("type") == "platform.report" and e["record"]["status"] == "timeout"
                          for e in errors), errors


def _spec(pipe: LocalPipeline, name: str):
    (spec,) = [s for s in pipe.alarms.specs if s.name == name]
    return spec


def _in_alarm_with(pipe: LocalPipeline, name: str) -> set[str] | None:
    in_alarm = pipe.alarms_in_alarm()
    return in_alarm if name in in_alarm else None
