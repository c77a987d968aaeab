"""Reconcile on the local runtime: S3 is the source of truth, so a file whose queue message was
lost is found by `ops reconcile` and ingested by `--replay`, in order; a replay of a version
whose own event is still queued is processed once (the ledger's version marker)."""

from __future__ import annotations

import json

import pytest

from local_runtime import LocalPipeline
from ops.cli import EXIT_NOT_COMPLETED, EXIT_OK
from tests.e2e.pipeline_checks import (
    assert_files_in_order,
    assert_no_duplicates,
    assert_records_in_file_order,
    csv_file,
    hold_at,
    ops,
    wait_for,
)


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline([{"id": "lost"}, {"id": "twice"}], chunk_size=3)


def reconcile(pipe: LocalPipeline, tenant: str, *args: str) -> tuple[int, dict]:
    code, out = ops(pipe, "reconcile", tenant, "--json", *args)
    return code, json.loads(out)


def busy_with_a_and_b_waiting(pipe: LocalPipeline, tenant: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """`a` runs (held at its last record until the test clears the sink's faults); `b`'s message
    waits in the queue."""
    hold_at(pipe, tenant, "a", 29)
    a = pipe.put_file(tenant, "a.csv", csv_file("a", 30))
    wait_for(
        lambda: any(e["status"] == "RUNNING" for e in pipe.executions(tenant)), timeout=60, what="a to run"
    )
    b = pipe.put_file(tenant, "b.csv", csv_file("b", 5))
    wait_for(
        lambda: any(d.outcome == "kept" and f'"{b[0]}"' in d.body for d in pipe.deliveries(tenant)),
        timeout=60,
        what="b's message to wait at the gate",
    )
    return a, b


def test_a_lost_message_is_found_by_reconcile_and_replayed_in_order(pipe: LocalPipeline) -> None:
    """GIVEN a tenant busy with file a, and file b whose queued message is deleted (lost)
    WHEN the pipeline is idle THEN `ops reconcile` lists exactly b's version as never seen;
    `--replay` ingests it after a (every record once, in order); a second reconcile lists nothing."""
    (a_key, _), (b_key, b_version) = busy_with_a_and_b_waiting(pipe, "lost")
    sqs = pipe.client("sqs")
    sqs.purge_queue(QueueUrl=pipe.tenants["lost"].queue_url)  # b's message is gone
    pipe.sink("lost").clear_faults()
    pipe.wait_until_idle(timeout=90, tenants=["lost"])
    assert [e["key"] for e in pipe.executions("lost")] == [a_key]  # b was lost

    code, report = reconcile(pipe, "lost")
    assert code == EXIT_NOT_COMPLETED
    assert [(v["key"], v["version_id"], v["state"]) for v in report["versions"]] == [
        (b_key, b_version, "never seen")
    ]

    code, report = reconcile(pipe, "lost", "--replay")
    assert code == EXIT_OK and len(report["replayed"]) == 1
    pipe.wait_until_idle(timeout=90, tenants=["lost"])

    assert_records_in_file_order(pipe.sink("lost").accepted, [("a", 30), ("b", 5)])
    assert_files_in_order(pipe.executions("lost"), [a_key, b_key])
    code, report = reconcile(pipe, "lost")
    assert (code, report["versions"]) == (EXIT_OK, [])


def test_a_replay_of_a_version_whose_own_event_is_still_queued_is_processed_once(pipe: LocalPipeline) -> None:
    """GIVEN a tenant busy with file a, and file b's own message waiting in the queue
    WHEN the operator replays (b is never seen yet, so it is replayed) and the tenant goes on
    THEN b is processed once, by its own event; the replay's message is let go as a duplicate."""
    (a_key, _), (b_key, _) = busy_with_a_and_b_waiting(pipe, "twice")
    code, report = reconcile(pipe, "twice", "--replay")
    assert code == EXIT_OK
    assert [(v["key"], v["state"]) for v in report["versions"]] == [
        (a_key, "seen, running"),
        (b_key, "never seen"),
    ]
    (replay_id,) = report["replayed"]
    pipe.sink("twice").clear_faults()
    pipe.wait_until_idle(timeout=90, tenants=["twice"])

    accepted = pipe.sink("twice").accepted
    assert_no_duplicates(accepted)
    assert_records_in_file_order(accepted, [("a", 30), ("b", 5)])
    executions = pipe.executions("twice")
    assert_files_in_order(executions, [a_key, b_key])
    assert replay_id not in {e["name"] for e in executions}
    replayed = [d for d in pipe.deliveries("twice") if replay_id in d.body]
    assert replayed and replayed[-1].outcome == "deleted"  # let go as a duplicate
    code, report = reconcile(pipe, "twice")
    assert (code, report["versions"]) == (EXIT_OK, [])
