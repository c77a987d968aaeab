"""The alarms of one tenant pipeline. Each says what it means and what to do first.

Deliberately absent: an alarm on the controller's ``Errors`` metric. A busy gate fails the
invocation on purpose (the message waits in the queue), so that metric counts normal waits.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from pipeline_constructs.config import AlarmConfig
from pipeline_constructs.functions import PipelineFunction
from pipeline_constructs.names import METRIC_NAMESPACE

HEAD_WAIT_METRIC = "HeadMessageWaitSeconds"
ERROR_LOG_METRIC = "ErrorLogLines"
PERIOD = Duration.minutes(5)


@dataclass(frozen=True)
class AlarmTargets:
    """What the alarms of one pipeline watch."""

    tenant_id: str
    queue: sqs.IQueue
    state_machine: sfn.StateMachine
    functions: dict[str, PipelineFunction]  # by role in the pipeline: "controller", "split", ...
    topic: sns.ITopic


def build_alarms(scope: Construct, targets: AlarmTargets, thresholds: AlarmConfig) -> dict[str, cloudwatch.Alarm]:
    """Create every alarm of one pipeline, each notifying the topic; keyed by a short name."""
    tenant = targets.tenant_id
    alarms: dict[str, cloudwatch.Alarm] = {}

    def alarm(key: str, metric: cloudwatch.IMetric, threshold: float, description: str) -> None:
        created = cloudwatch.Alarm(
            scope,
            f"{key.title().replace('-', '')}Alarm",
            alarm_name=f"{tenant}-{key}",
            alarm_description=description,
            metric=metric,
            threshold=threshold,
            evaluation_periods=thresholds.evaluation_periods,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        created.add_alarm_action(actions.SnsAction(targets.topic))
        alarms[key] = created

    for role, function in targets.functions.items():
        logs.MetricFilter(
            scope,
            f"{role.title().replace('-', '')}ErrorLogFilter",
            log_group=function.log_group,
            filter_pattern=logs.FilterPattern.string_value("$.level", "=", "ERROR"),
            metric_namespace=METRIC_NAMESPACE,
            metric_name=error_log_metric_name(tenant, role),
            metric_value="1",
            filter_name=f"{tenant}-{role}-error-logs",
        )
        alarm(
            f"{role}-error-logs",
            _error_metric(tenant, role),
            thresholds.error_logs_threshold,
            f"Tenant {tenant}: the {role} function logged at ERROR level, a real fault (intended "
            f"waits log at INFO). First: open log group {function.log_group_name} and filter on "
            "level = ERROR; the entry names the file key, version and execution.",
        )

    alarm(
        "queue-age",
        targets.queue.metric_approximate_age_of_oldest_message(period=PERIOD, statistic="Maximum"),
        thresholds.queue_age_seconds,
        f"Tenant {tenant}: a file event has waited more than {thresholds.queue_age_seconds} s in "
        "the queue. Files are arriving faster than they are ingested, or the tenant is blocked. "
        f"First: check the {tenant}-stall alarm and the running execution of the workflow.",
    )
    alarm(
        "stall",
        cloudwatch.Metric(
            namespace=METRIC_NAMESPACE,
            metric_name=HEAD_WAIT_METRIC,
            dimensions_map={"Tenant": tenant},
            statistic="Maximum",
            period=PERIOD,
        ),
        thresholds.stall_after_seconds,
        f"Tenant {tenant}: the next file has waited more than {thresholds.stall_after_seconds} s "
        "for the previous one (measured by the controller, so it cannot go blind like the queue "
        "age). First: look at the workflow's running execution; if it is stuck, stop it (the "
        "next file then starts).",
    )
    workflow_alarms = {
        "workflow-failed": (targets.state_machine.metric_failed, "failed"),
        "workflow-timed-out": (targets.state_machine.metric_timed_out, "timed out"),
        "workflow-aborted": (targets.state_machine.metric_aborted, "was aborted"),
        "workflow-throttled": (targets.state_machine.metric_throttled, "was throttled"),
    }
    for key, (metric, what) in workflow_alarms.items():
        alarm(
            key,
            metric(period=PERIOD, statistic="Sum"),
            1,
            f"Tenant {tenant}: a file ingest execution {what}. Its records after the failing "
            "chunk were not sent. First: open the failed execution in the Step Functions console "
            "(the error names the line or record), fix the cause, then redrive or re-upload the file.",
        )
    return alarms


def _error_metric(tenant: str, role: str) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=METRIC_NAMESPACE,
        metric_name=error_log_metric_name(tenant, role),
        statistic="Sum",
        period=PERIOD,
    )


def error_log_metric_name(tenant: str, role: str) -> str:
    """Metric filters cannot set constant dimensions, so the tenant and function go in the name."""
    return f"{ERROR_LOG_METRIC}-{tenant}-{role}"
