"""End to end, the hop from S3 to the queue: an event EventBridge dead-lettered is replayed by
`ops dlq replay` in order; an upload outside every tenant prefix is logged, counted and shown.

moto cannot make EventBridge fail a delivery, so the dead-lettered event is made the way
EventBridge would make it: for one upload, the tenant's rule target points at the tenant's
intake DLQ (a standard queue, so no message group), then the target is restored as deployed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from demo.__main__ import StrayUploads
from lambdas import contract
from ops.cli import EXIT_OK
from ops.discovery import discover
from pipeline_constructs import names
from tests.e2e.pipeline_checks import (
    assert_files_in_order,
    assert_records_in_file_order,
    csv_file,
    ops,
    wait_for,
)


@pytest.fixture(scope="module")
def pipe(start_pipeline: Any) -> Any:
    return start_pipeline([{"id": "acme"}, {"id": "globex", "prefix": "globex/in/"}])


@contextmanager
def rule_delivers_to(pipe: Any, rule: str, queue_arn: str) -> Iterator[None]:
    """While inside, the rule's target is ``queue_arn`` (as EventBridge's dead-lettering would
    put the event there); afterwards the deployed target is back."""
    events = pipe.client("events")
    (deployed,) = events.list_targets_by_rule(Rule=rule)["Targets"]
    events.put_targets(Rule=rule, Targets=[{"Id": deployed["Id"], "Arn": queue_arn}])
    try:
        yield
    finally:
        events.put_targets(Rule=rule, Targets=[deployed])


def dlq_messages(pipe: Any, dlq_url: str) -> tuple[int, int]:
    """(visible, in flight): the intake-dlq alarm watches the visible ones."""
    attributes = pipe.client("sqs").get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["All"])[
        "Attributes"
    ]
    return int(attributes["ApproximateNumberOfMessages"]), int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def unmatched_upload_events(pipe: Any) -> list[dict[str, Any]]:
    """The events in the log group that the shared stack's UnmatchedUploads metric filter reads;
    its pattern matches every event, so each counts one."""
    shared = pipe.templates[names.shared_stack_name()]["Resources"].values()
    (metric_filter,) = [
        r["Properties"]
        for r in shared
        if r["Type"] == "AWS::Logs::MetricFilter"
        and r["Properties"]["MetricTransformations"][0]["MetricName"] == contract.UNMATCHED_UPLOADS_METRIC
    ]
    assert metric_filter["FilterPattern"] == ""
    group = pipe.deployment.stacks[names.shared_stack_name()].resources[metric_filter["LogGroupName"]["Ref"]][
        1
    ]
    return [
        json.loads(e["message"]) for e in pipe.client("logs").filter_log_events(logGroupName=group)["events"]
    ]


def test_a_dead_lettered_file_event_is_replayed_and_ingested_in_upload_order(pipe):
    """GIVEN acme's first file ingested, and the event of its second file sitting in acme's
    intake DLQ (EventBridge gave up delivering it)
    WHEN the operator runs ops dlq replay acme, and a third file is uploaded after that
    THEN all three files are ingested once each, in upload order, and the DLQ is empty."""
    tenant = discover(pipe.client)["acme"]
    dlq_arn = pipe.client("sqs").get_queue_attributes(
        QueueUrl=tenant.intake_dlq_url, AttributeNames=["QueueArn"]
    )["Attributes"]["QueueArn"]
    first, _ = pipe.put_file("acme", "f1.csv", csv_file("f1", 4))
    pipe.wait_until_idle(timeout=120)
    with rule_delivers_to(pipe, "acme-object-created", dlq_arn):
        second, _ = pipe.put_file("acme", "f2.csv", csv_file("f2", 5))
    assert dlq_messages(pipe, tenant.intake_dlq_url) == (1, 0)
    pipe.wait_until_idle(timeout=120)
    assert [e["input"]["key"] for e in pipe.executions("acme")] == [first], (
        "f2's event never reached the queue"
    )

    code, out = ops(pipe, "dlq", "list", "acme")
    assert code == EXIT_OK and "file acme/f2.csv" in out
    code, out = ops(pipe, "dlq", "replay", "acme")
    assert code == EXIT_OK, out
    third, _ = pipe.put_file("acme", "f3.csv", csv_file("f3", 3))
    pipe.wait_until_idle(timeout=120)

    assert_files_in_order(pipe.executions("acme"), [first, second, third])
    assert_records_in_file_order(pipe.sink("acme").accepted, [("f1", 4), ("f2", 5), ("f3", 3)])
    assert dlq_messages(pipe, tenant.intake_dlq_url) == (0, 0)


def test_an_upload_outside_every_tenant_prefix_is_listed_by_ops_status_and_counted(pipe):
    """GIVEN two tenants (acme/, globex/in/)
    WHEN a file lands under a prefix no tenant owns (globex/ itself, next to globex/in/), and one
    under globex/in/
    THEN ops status and the demo's --serve output list the stray key, the log group the
    UnmatchedUploads metric filter counts holds its event and no other, and globex's own file is
    ingested as usual."""
    pipe.client("s3").put_object(Bucket=pipe.landing_bucket, Key="globex/typo.csv", Body=csv_file("x", 2))
    owned, _ = pipe.put_file("globex", "g1.csv", csv_file("g1", 3))
    pipe.wait_until_idle(timeout=120)

    code, out = wait_for(
        lambda: (lambda r: r if "globex/typo.csv" in r[1] else None)(ops(pipe, "status")),
        timeout=30,
        what="ops status to list the stray upload",
    )
    assert code == EXIT_OK
    assert "Uploads outside every tenant prefix (last 24 h): 1" in out
    assert f"s3://{pipe.landing_bucket}/globex/typo.csv" in out

    assert [e["detail"]["object"]["key"] for e in unmatched_upload_events(pipe)] == ["globex/typo.csv"]

    assert [e["input"]["key"] for e in pipe.executions("globex")] == [owned]
    assert_records_in_file_order(pipe.sink("globex").accepted, [("g1", 3)])
    assert all("typo" not in json.dumps(e["input"]) for t in pipe.tenant_ids for e in pipe.executions(t))

    # the demo's --serve output shows it once
    stray = StrayUploads(pipe)
    assert stray.new() == [
        f"no tenant: s3://{pipe.landing_bucket}/globex/typo.csv matches no tenant prefix; "
        "not ingested (move it under a tenant's prefix)"
    ]
    assert stray.new() == []
