"""The deployment's dashboard (shared stack): a row per tenant, built from deterministic names."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk.assertions import Template

from pipeline_constructs.dashboard import (
    TENANTS_PER_DASHBOARD,
    WIDGETS_PER_TENANT,
    DashboardTenant,
    IngestDashboards,
    dashboard_names,
)


def joined(value: Any) -> str:
    """A string of the template, with intrinsics replaced by `<ref>`."""
    if isinstance(value, str):
        return value
    return "".join(p if isinstance(p, str) else "<ref>" for p in value["Fn::Join"][1])


def bodies(template: Template) -> dict[str, dict[str, Any]]:
    """Dashboard name -> body, with intrinsics replaced by `<ref>`."""
    found = {}
    for dashboard in template.find_resources("AWS::CloudWatch::Dashboard").values():
        found[joined(dashboard["Properties"]["DashboardName"])] = json.loads(
            joined(dashboard["Properties"]["DashboardBody"])
        )
    return found


def graphs_of(body: dict[str, Any], tenant: str) -> dict[str, list]:
    """A tenant's graphs: title (without the tenant) -> metrics."""
    return {
        w["properties"]["title"].removeprefix(f"{tenant}: "): w["properties"]["metrics"]
        for w in body["widgets"]
        if w["type"] == "metric" and w["properties"]["title"].startswith(f"{tenant}: ")
    }


def test_one_dashboard_with_a_row_per_tenant_in_the_shared_stack(shared_template):
    (body,) = bodies(shared_template).values()
    assert list(bodies(shared_template)) == ["OrderedIngest-<ref>"]
    titles = [w["properties"]["markdown"] for w in body["widgets"] if w["type"] == "text"]
    assert titles == ["### Tenant acme", "### Tenant globex", "### Tenant initech"]
    assert len(body["widgets"]) == 3 * WIDGETS_PER_TENANT
    for tenant in ("acme", "globex", "initech"):
        assert list(graphs_of(body, tenant)) == [
            "files done",
            "failed",
            "queued",
            "head wait (s)",
            "records per minute",
            "core system error rate (%)",
        ]


def test_each_graph_reads_the_tenants_own_metrics_by_their_deterministic_names(shared_template):
    (body,) = bodies(shared_template).values()
    graphs = graphs_of(body, "acme")
    # executions under the state machine's ARN or its `live` alias's, as the alarms count them
    machine = "arn:<ref>:states:<ref>:<ref>:stateMachine:acme-file-ingest-workflow"
    assert graphs["files done"] == [
        [
            {
                "label": "succeeded",
                "expression": "IF(FILL(executionsSucceeded, 0) >= FILL(executionsSucceededLive, 0), "
                "FILL(executionsSucceeded, 0), FILL(executionsSucceededLive, 0))",
            }
        ],
        [
            "AWS/States",
            "ExecutionsSucceeded",
            "StateMachineArn",
            machine,
            {"id": "executionsSucceeded", "visible": False, "stat": "Sum"},
        ],
        [
            "AWS/States",
            "ExecutionsSucceeded",
            "StateMachineArn",
            f"{machine}:live",
            {"id": "executionsSucceededLive", "visible": False, "stat": "Sum"},
        ],
    ]
    failed = graphs["failed"]
    assert [m[0]["label"] for m in failed if isinstance(m[0], dict)] == ["failed", "timed out", "aborted"]
    assert [(m[1], m[3]) for m in failed if not isinstance(m[0], dict)] == [
        (name, arn)
        for name in ("ExecutionsFailed", "ExecutionsTimedOut", "ExecutionsAborted")
        for arn in (machine, f"{machine}:live")
    ]
    assert [m[:4] for m in graphs["queued"]] == [
        ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "acme-event-queue.fifo"],
        ["AWS/SQS", "ApproximateNumberOfMessagesNotVisible", "QueueName", "acme-event-queue.fifo"],
    ]
    assert graphs["head wait (s)"][0][:4] == ["OrderedIngest", "HeadMessageWaitSeconds", "Tenant", "acme"]
    assert graphs["records per minute"][0][:4] == ["OrderedIngest", "RecordsSent", "Tenant", "acme"]
    assert graphs["records per minute"][0][4]["period"] == 60
    expression, errors, acknowledged = graphs["core system error rate (%)"]
    assert (
        expression[0]["expression"]
        == "IF(errors + acknowledged > 0, 100 * errors / (errors + acknowledged), 0)"
    )
    assert errors[:4] == ["OrderedIngest", "SinkErrors", "Tenant", "acme"] and errors[4]["id"] == "errors"
    assert (
        acknowledged[:4] == ["OrderedIngest", "SinkRequests", "Tenant", "acme"]
        and acknowledged[4]["id"] == "acknowledged"
    )


def test_head_wait_graph_shows_the_tenants_stall_threshold(shared_template):
    (body,) = bodies(shared_template).values()
    head_wait = [
        w
        for w in body["widgets"]
        if w["type"] == "metric" and w["properties"]["title"] == "initech: head wait (s)"
    ]
    assert head_wait[0]["properties"]["annotations"]["horizontal"][0]["value"] == 600


def test_the_shared_stack_refers_to_no_tenant_stack(shared_template):
    text = json.dumps(shared_template.to_json())
    assert "Fn::ImportValue" not in text and "OrderedIngest-Tenant-" not in text


def test_more_tenants_than_one_dashboard_holds_continue_on_numbered_dashboards(tmp_path):
    from aws_cdk import App, Stack

    assert dashboard_names(0, "eu-west-1") == ["OrderedIngest-eu-west-1"]
    assert dashboard_names(TENANTS_PER_DASHBOARD, "eu-west-1") == ["OrderedIngest-eu-west-1"]
    assert dashboard_names(TENANTS_PER_DASHBOARD + 1, "eu-west-1") == [
        "OrderedIngest-eu-west-1",
        "OrderedIngest-eu-west-1-2",
    ]

    stack = Stack(App(outdir=str(tmp_path)), "Many")
    tenants = [DashboardTenant(f"t{i}", 1800) for i in range(TENANTS_PER_DASHBOARD + 3)]
    IngestDashboards(stack, "Dashboards", tenants=tenants)

    found = bodies(Template.from_stack(stack))
    assert list(found) == ["OrderedIngest-<ref>", "OrderedIngest-<ref>-2"]
    assert len(found["OrderedIngest-<ref>"]["widgets"]) == TENANTS_PER_DASHBOARD * WIDGETS_PER_TENANT <= 500
    assert [
        w["properties"]["markdown"] for w in found["OrderedIngest-<ref>-2"]["widgets"] if w["type"] == "text"
    ] == [f"### Tenant t{i}" for i in range(TENANTS_PER_DASHBOARD, TENANTS_PER_DASHBOARD + 3)]


def test_dashboards_after_the_first_are_stacks_of_their_own_so_no_template_grows_with_the_tenants(tmp_path):
    """GIVEN more tenants than two dashboards hold WHEN the shared stack and the dashboard stacks
    are built THEN the shared stack keeps the first dashboard only, each later one is its own
    stack (deployed after the shared stack) with its page of tenants, and every template stays
    far below CloudFormation's 1 MB: before, all of them were in the shared template (1,000
    tenants: 4 MB, a failed deployment)."""
    import yaml
    from aws_cdk import App

    from pipeline_constructs.config import parse_config
    from pipeline_constructs.stacks import SharedStack, dashboard_stacks

    count = 2 * TENANTS_PER_DASHBOARD + 1
    config = parse_config(
        yaml.safe_dump(
            {
                "defaults": {
                    "sink": {
                        "url": "https://core.example.com/records",
                        "auth": {"type": "bearer", "secret": "core/token"},
                    }
                },
                "tenants": [{"id": f"t{i:04d}", "prefix": f"t{i:04d}/"} for i in range(count)],
            }
        )
    )
    app = App(outdir=str(tmp_path))
    shared = SharedStack(app, config)
    extra = dashboard_stacks(app, config, shared)

    assert [stack.stack_name for stack in extra] == ["OrderedIngest-Dashboard-2", "OrderedIngest-Dashboard-3"]
    assert all(shared in stack.dependencies for stack in extra)
    stacks = (shared, *extra)
    templates = [Template.from_stack(stack) for stack in stacks]  # each a synth: once
    shared_template = templates[0]
    assert list(bodies(shared_template)) == ["OrderedIngest-<ref>"]
    second, third = (bodies(template) for template in templates[1:])
    assert list(second) == ["OrderedIngest-<ref>-2"] and list(third) == ["OrderedIngest-<ref>-3"]
    first_titles = [
        w["properties"]["markdown"]
        for w in bodies(shared_template)["OrderedIngest-<ref>"]["widgets"]
        if w["type"] == "text"
    ]
    third_titles = [
        w["properties"]["markdown"] for w in third["OrderedIngest-<ref>-3"]["widgets"] if w["type"] == "text"
    ]
    assert first_titles[0] == "### Tenant t0000" and len(first_titles) == TENANTS_PER_DASHBOARD
    assert third_titles == [f"### Tenant t{count - 1:04d}"]
    for stack, template in zip(stacks, templates, strict=True):
        assert len(json.dumps(template.to_json())) < 400_000, stack.stack_name


def test_up_to_one_dashboard_of_tenants_there_is_no_dashboard_stack(tmp_path):
    """GIVEN as many tenants as one dashboard holds THEN no extra stack: existing deployments of
    up to `TENANTS_PER_DASHBOARD` tenants keep their stacks as they are."""
    import yaml
    from aws_cdk import App

    from pipeline_constructs.config import parse_config
    from pipeline_constructs.stacks import SharedStack, dashboard_stacks

    config = parse_config(
        yaml.safe_dump(
            {
                "defaults": {
                    "sink": {
                        "url": "https://core.example.com/records",
                        "auth": {"type": "bearer", "secret": "core/token"},
                    }
                },
                "tenants": [
                    {"id": f"t{i:04d}", "prefix": f"t{i:04d}/"} for i in range(TENANTS_PER_DASHBOARD)
                ],
            }
        )
    )
    app = App(outdir=str(tmp_path))
    assert dashboard_stacks(app, config, SharedStack(app, config)) == []
