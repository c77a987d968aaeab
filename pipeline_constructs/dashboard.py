"""The deployment's CloudWatch dashboard: a row per tenant.

It lives in the shared stack and reads every metric from the tenant's metric factory
(`metrics.TenantMetrics`, the one the tenant's alarms use), given the deterministic names of
`names.py` (queue name, state machine ARN), so it refers to no tenant stack: no cross-stack
reference, no dependency cycle, and a tenant stack can be deployed or destroyed alone.

A dashboard holds at most 500 widgets, so one shows `TENANTS_PER_DASHBOARD` tenants and more
continue on `OrderedIngest-2`, ... in the order of `tenants.yaml`. CloudFormation refuses a
template over 1 MB, so the shared stack holds only the first dashboard and each further one
is a stack of its own (`DashboardStack`): no template grows with the number of tenants.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from lambdas import contract
from pipeline_constructs import names
from pipeline_constructs.metrics import TenantMetrics
from pipeline_constructs.workflows import state_machine_arn

#: CloudWatch's limit of widgets per dashboard.
MAX_WIDGETS = 500
#: A title and six graphs.
WIDGETS_PER_TENANT = 7
TENANTS_PER_DASHBOARD = MAX_WIDGETS // WIDGETS_PER_TENANT
GRAPH_WIDTH, GRAPH_HEIGHT = 4, 6


@dataclass(frozen=True)
class DashboardTenant:
    """What a tenant's row needs: its id and its stall threshold (an annotation)."""

    tenant_id: str
    stall_after_seconds: int


def dashboard_names(tenant_count: int, region: str) -> list[str]:
    """`OrderedIngest-<region>`, then `OrderedIngest-<region>-2`, ... for each
    `TENANTS_PER_DASHBOARD` tenants (a dashboard's name is unique per account in every Region)."""
    count = max(1, -(-tenant_count // TENANTS_PER_DASHBOARD))
    return [
        contract.FIRST_DASHBOARD.render(region=region)
        if index == 0
        else contract.DASHBOARD.render(region=region, number=index + 1)
        for index in range(count)
    ]


class IngestDashboards(Construct):
    """The dashboards of a deployment (one up to `TENANTS_PER_DASHBOARD` tenants).

    ``pages``: which of them to build here (indexes into `dashboard_names`; default: all)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        tenants: Sequence[DashboardTenant],
        pages: Sequence[int] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.dashboards: list[cloudwatch.Dashboard] = []
        for index, name in enumerate(dashboard_names(len(tenants), Stack.of(self).region)):
            if pages is not None and index not in pages:
                continue
            page = tenants[index * TENANTS_PER_DASHBOARD : (index + 1) * TENANTS_PER_DASHBOARD]
            dashboard = cloudwatch.Dashboard(
                self,
                "Dashboard" if index == 0 else f"Dashboard{index + 1}",
                dashboard_name=name,
                default_interval=Duration.hours(6),
            )
            for tenant in page:
                dashboard.add_widgets(*tenant_row(self, tenant))
            self.dashboards.append(dashboard)


def tenant_row(scope: Construct, tenant: DashboardTenant) -> list[cloudwatch.IWidget]:
    """One tenant's row: a title, then a `cloudwatch.Row` of six graphs."""
    tenant_id = tenant.tenant_id
    metrics = TenantMetrics(
        tenant_id=tenant_id,
        queue_name=names.QUEUE.render(tenant_id),
        intake_dlq_name=names.INTAKE_DLQ.render(tenant_id),
        state_machine_arn=state_machine_arn(scope, names.STATE_MACHINE, tenant_id),
    )

    # ``options``: more of `GraphWidget`'s props, each of its own type.
    def graph(title: str, shown: list[cloudwatch.IMetric], **options: Any) -> cloudwatch.GraphWidget:
        return cloudwatch.GraphWidget(
            title=f"{tenant_id}: {title}", left=shown, width=GRAPH_WIDTH, height=GRAPH_HEIGHT, **options
        )

    return [
        cloudwatch.TextWidget(markdown=f"### Tenant {tenant_id}", width=GRAPH_WIDTH * 6, height=1),
        # A `Row` is an `IWidget` (jsii implements it), but its stub lacks `warnings`/`warnings_v2`.
        cast(
            cloudwatch.IWidget,
            cloudwatch.Row(
                graph("files done", [metrics.executions_succeeded(label="succeeded")]),
                graph(
                    "failed",
                    [
                        metrics.executions_failed(label="failed"),
                        metrics.executions_timed_out(label="timed out"),
                        metrics.executions_aborted(label="aborted"),
                    ],
                ),
                graph(
                    "queued",
                    [metrics.queue_visible(label="visible"), metrics.queue_in_flight(label="in flight")],
                ),
                graph(
                    "head wait (s)",
                    [metrics.head_message_wait(label="head wait")],
                    left_annotations=[
                        cloudwatch.HorizontalAnnotation(value=tenant.stall_after_seconds, label="stall alarm")
                    ],
                ),
                graph(
                    "records per minute", [metrics.records_sent(period=Duration.minutes(1), label="records")]
                ),
                graph("core system error rate (%)", [metrics.sink_error_percent()]),
            ),
        ),
    ]
