"""Alarms: one small factory, and the alarms of one tenant pipeline built with it.

Each alarm says what it means and what to do first. Deliberately absent: an alarm on the
controller's ``Errors`` metric. A busy gate fails the invocation on purpose (the message
waits in the queue), so that metric counts normal waits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from lambdas import contract

if TYPE_CHECKING:
    from pipeline_constructs.config import AlarmConfig
    from pipeline_constructs.tenant_pipeline import TenantPipeline


class AlarmFactory:
    """Makes alarms that page through one topic, named by ``name`` (`contract.TENANT_ALARM` of
    ``tenant_id``, or `contract.SHARED_ALARM`).

    Every alarm fires at or above its threshold, treats missing data as fine, and notifies
    the topic (the action is applied here, once).
    """

    def __init__(
        self,
        scope: Construct,
        *,
        name: contract.DerivedName,
        tenant_id: str = "",
        topic: sns.ITopic,
        evaluation_periods: int,
    ) -> None:
        self._scope = scope
        self._name, self._tenant_id = name, tenant_id
        self._action = actions.SnsAction(topic)
        self._evaluation_periods = evaluation_periods
        self.alarms: dict[str, cloudwatch.Alarm] = {}

    def alarm(
        self, key: str, metric: cloudwatch.IMetric, threshold: float, description: str
    ) -> cloudwatch.Alarm:
        """Alarm ``<tenant>-<key>`` or ``ordered-ingest-<key>`` (qualified; construct id from ``key``, stable)
        on ``metric``."""
        if len(key) > contract.MAX_ALARM_KEY:
            # The name table (contract.TENANT_ALARM, SHARED_ALARM) counts on it.
            raise ValueError(f"alarm key {key!r} is longer than {contract.MAX_ALARM_KEY} characters")
        created = cloudwatch.Alarm(
            self._scope,
            f"{key.title().replace('-', '')}Alarm",
            alarm_name=self._name.render(self._tenant_id, alarm=key),
            alarm_description=description,
            metric=metric,
            threshold=threshold,
            evaluation_periods=self._evaluation_periods,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        created.add_alarm_action(self._action)
        self.alarms[key] = created
        return created


#: The sink-errors alarm fires when at least this share of the core system's tries failed.
SINK_ERROR_RATE = 0.5


#: Where each alarm's runbook entry lives; an alarm's description ends with its link.
RUNBOOK = "docs/operations.md"


def runbook_link(key: str) -> str:
    """The runbook entry of an alarm kind (``stall``, ``workflow-failed``, ``error-logs``, ...)."""
    return f"Runbook: {RUNBOOK}#{key}"


def pipeline_alarms(
    pipeline: TenantPipeline,
    topic: sns.ITopic,
    thresholds: AlarmConfig,
    *,
    sequence_gap_alarm_after_seconds: int | None = None,
) -> dict[str, cloudwatch.Alarm]:
    """Every alarm of one tenant pipeline, on the metrics of its factory (``pipeline.metrics``,
    `metrics.TenantMetrics`); keyed by short name.
    ``thresholds``: the tenant's `alarms`; ``sequence_gap_alarm_after_seconds``: its
    `ordering.gap_alarm_after_seconds` with ``key_sequence`` ordering (None: no gap alarm).

    Each description says what the alarm means, what to run first (``python -m ops status``)
    and links to its runbook entry, which names the command that fixes it."""
    tenant, metrics = pipeline.tenant_id, pipeline.metrics
    factory = AlarmFactory(
        pipeline,
        name=contract.TENANT_ALARM,
        tenant_id=tenant,
        topic=topic,
        evaluation_periods=thresholds.evaluation_periods,
    )
    status = f"python -m ops status {tenant}"
    for kind, function in pipeline.pipeline_functions.items():
        factory.alarm(
            f"{kind}-error-logs",
            metrics.error_log_lines(kind),
            thresholds.error_logs_threshold,
            f"Tenant {tenant}: the {kind} function logged at ERROR level, a real fault (intended "
            f"waits log at INFO). First: {status}, then open log group {function.log_group_name} "
            f"and filter on level = ERROR; the entry names the file and execution. {runbook_link('error-logs')}",
        )

    queue_age = thresholds.queue_age_seconds
    factory.alarm(
        "queue-age",
        metrics.queue_age_unless_paused(),
        queue_age,
        f"Tenant {tenant}: a file event has waited more than {queue_age} s in the queue: a backlog, "
        "not a burst (a burst of files waiting behind each other is normal; a pause does not count). Files "
        "have arrived faster than they are ingested for hours, or the controller does not run (the stall "
        f"alarm cannot see that). First: {status}. {runbook_link('queue-age')}",
    )
    paused = thresholds.paused_alarm_after_seconds
    factory.alarm(
        "paused",
        metrics.paused_for(),
        paused,
        f"Tenant {tenant} has been paused (ops pause) for more than {paused} s: its files wait, none fails. "
        f"If the planned outage is over: python -m ops unpause {tenant}. First: {status} (since when and "
        f"why). {runbook_link('paused')}",
    )
    stall = thresholds.stall_after_seconds
    factory.alarm(
        "stall",
        metrics.head_message_wait(),
        stall,
        f"Tenant {tenant}: the next file has waited more than {stall} s while no file of the tenant ran "
        "(measured by the controller; time behind a running file does not count). The tenant is halted "
        f"after a failed or timed-out file. First: {status}. {runbook_link('stall')}",
    )
    factory.alarm(
        "sink-errors",
        metrics.sink_error_share(thresholds.sink_errors_threshold),
        SINK_ERROR_RATE,
        f"Tenant {tenant}: the core system keeps failing: at least {thresholds.sink_errors_threshold} "
        f"failed tries in 5 minutes, and at least {SINK_ERROR_RATE:.0%} of all tries. The file waits and "
        f"retries until the outage budget ends, then fails and halts the tenant. First: {status} and the "
        f"core system's health. {runbook_link('sink-errors')}",
    )
    workflow_alarms: dict[str, tuple[Callable[[], cloudwatch.IMetric], str]] = {
        "workflow-failed": (metrics.executions_failed, "failed"),
        "workflow-timed-out": (metrics.executions_timed_out, "timed out"),
        "workflow-aborted": (metrics.executions_aborted, "was aborted"),
        "workflow-throttled": (metrics.executions_throttled, "was throttled"),
    }
    for key, (metric, what) in workflow_alarms.items():
        factory.alarm(
            key,
            metric(),
            1,
            f"Tenant {tenant}: a file ingest execution {what}; with on_failure: halt the tenant's later "
            f"files wait. First: {status} (names the file, the record where it stopped and the error). "
            f"Never redrive or re-upload: fix the cause, then python -m ops resume {tenant} (or ops skip). "
            f"{runbook_link('workflow-failed' if key != 'workflow-throttled' else 'workflow-throttled')}",
        )
    if sequence_gap_alarm_after_seconds is not None:
        gap = sequence_gap_alarm_after_seconds
        factory.alarm(
            "sequence-gap",
            metrics.sequence_gap(),
            gap,
            f"Tenant {tenant}: a file has waited more than {gap} s for a missing sequence number (files are "
            "ordered by the sequence in their key names). Upload the missing file, or give the number up with "
            f"python -m ops skip-gap {tenant} --reason TEXT. First: {status}. {runbook_link('sequence-gap')}",
        )
    intake_alarms(pipeline, factory)
    _quarantine_alarm(factory, pipeline, status)
    return factory.alarms


def intake_alarms(pipeline: TenantPipeline, factory: AlarmFactory) -> None:
    """The hop from S3 to the queue: an event EventBridge could not deliver is a file that
    will never be ingested unless someone replays it."""
    tenant = pipeline.tenant_id
    dlq = f"python -m ops dlq list {tenant}"
    factory.alarm(
        "intake-dlq",
        pipeline.metrics.intake_dlq_messages(),
        1,
        f"Tenant {tenant}: EventBridge gave up delivering an event to the tenant's queue or closer "
        f"(after 24 h of retries); a file in it is not ingested until replayed. First: {dlq}, then "
        f"python -m ops dlq replay {tenant}. {runbook_link('intake-dlq')}",
    )
    factory.alarm(
        "intake-failed",
        pipeline.metrics.intake_failed_invocations(),
        1,
        f"Tenant {tenant}: a delivery of the tenant's EventBridge rules failed for good (or could not "
        f"even be dead-lettered: then the event is lost and python -m ops reconcile finds the file). "
        f"First: {dlq}. {runbook_link('intake-failed')}",
    )


def _quarantine_alarm(factory: AlarmFactory, pipeline: TenantPipeline, status: str) -> None:
    """A message that was not a usable file event was set aside (the tenant's files went on)."""
    tenant = pipeline.tenant_id
    factory.alarm(
        "quarantine",
        pipeline.metrics.quarantined_messages(),
        1,
        f"Tenant {tenant}: the controller quarantined a queue message that was not a usable file event "
        "(not an S3 Object Created event of the tenant's prefix, or no version id); the files behind it "
        f"went on. First: {status}, then python -m ops quarantine list {tenant} (what, why, when). If it was "
        f"a real file event, fix the cause, then python -m ops quarantine replay {tenant} KEY. "
        f"{runbook_link('quarantine')}",
    )
