"""Every metric of one tenant, defined once: the tenant's alarms (`alarms.py`) and the
deployment's dashboards (`dashboard.py`) both read them from `TenantMetrics`.

The factory knows a tenant by the names that identify its resources in CloudWatch: the tenant
stack passes its own resources' (references: an alarm depends on what it watches), the
dashboard in the shared stack the same names built from `names.py` (no reference to a tenant
stack). Namespaces, metric names, dimensions and statistics are written here and nowhere else
(cdk-monitoring-constructs keeps metric factories apart from alarms and dashboards the same way).
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch

from lambdas import contract
from pipeline_constructs import names

#: The period of every metric the alarms watch and the dashboards graph (unless told otherwise).
METRIC_PERIOD = Duration.minutes(5)


@dataclass(frozen=True)
class TenantMetrics:
    """The metrics of tenant ``tenant_id``: its queue ``queue_name``, its intake dead-letter
    queue ``intake_dlq_name``, its file state machine ``state_machine_arn``, its rules (on
    ``event_bus_name``, None: the default bus). ``label``: the name a graph shows (alarms need none)."""

    tenant_id: str
    queue_name: str
    intake_dlq_name: str
    state_machine_arn: str
    event_bus_name: str | None = None

    # -- the handlers' own metrics (EMF, or the functions' metric filters) -----------------------

    def head_message_wait(
        self, *, period: Duration = METRIC_PERIOD, label: str | None = None
    ) -> cloudwatch.Metric:
        """How long the message at the head of the queue has waited (controller; Maximum). Unlike
        the queue's age, it cannot go blind to a head message that is received again and again
        without being deleted (a blocked tenant)."""
        return self._own(contract.HEAD_WAIT_METRIC, "Maximum", period, label)

    def quarantined_messages(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        """Messages the controller quarantined because they were not usable file events (Sum)."""
        return self._own(contract.QUARANTINED_MESSAGES_METRIC, "Sum", period)

    def late_arrivals(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        """File events that arrived older than the last file started (controller; Sum)."""
        return self._own(contract.LATE_ARRIVAL_METRIC, "Sum", period)

    def sequence_gap(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        """``key_sequence`` ordering: how long a later file has waited for a missing sequence
        number (controller; Maximum)."""
        return self._own(contract.SEQUENCE_GAP_METRIC, "Maximum", period)

    def records_sent(
        self, *, period: Duration = METRIC_PERIOD, label: str | None = None
    ) -> cloudwatch.Metric:
        """Records the core system acknowledged (register; Sum)."""
        return self._own(contract.RECORDS_SENT_METRIC, "Sum", period, label)

    def sink_requests(
        self, *, period: Duration = METRIC_PERIOD, label: str | None = None
    ) -> cloudwatch.Metric:
        """POSTs the core system acknowledged: records, or batches in batch mode (register; Sum)."""
        return self._own(contract.SINK_REQUESTS_METRIC, "Sum", period, label)

    def sink_errors(self, *, period: Duration = METRIC_PERIOD, label: str | None = None) -> cloudwatch.Metric:
        """Failed tries of the core system (register; Sum)."""
        return self._own(contract.SINK_ERRORS_METRIC, "Sum", period, label)

    def sink_error_share(self, min_errors: int) -> cloudwatch.MathExpression:
        """The share of failed tries of the core system in a period, 0 while fewer than
        ``min_errors`` tries failed (a blip retried in place makes at most 5). No point while the
        register function did not run (an alarm's missing data)."""
        return cloudwatch.MathExpression(
            expression=f"IF(errors >= {min_errors}, errors / (errors + acknowledged), 0)",
            using_metrics={"errors": self.sink_errors(), "acknowledged": self.sink_requests()},
            label="Failed share of the core system's tries",
            period=METRIC_PERIOD,
        )

    def sink_error_percent(self) -> cloudwatch.MathExpression:
        """Failed tries of the core system, in percent of all tries (0 without tries): a graph's."""
        return cloudwatch.MathExpression(
            expression="IF(errors + acknowledged > 0, 100 * errors / (errors + acknowledged), 0)",
            using_metrics={
                "errors": self.sink_errors(label="failed tries"),
                "acknowledged": self.sink_requests(label="acknowledged tries"),
            },
            label="failed tries (%)",
            period=METRIC_PERIOD,
        )

    def error_log_lines(self, kind: str, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        """Lines the function of ``kind`` (``controller``, ``split``, ...) logged at ERROR level
        (real faults; intended waits log INFO), the runtime's own error records, and timeouts and
        crashes (its log group's metric filter, `functions.pipeline_function`; Sum)."""
        return cloudwatch.Metric(
            namespace=contract.metric_namespace(),
            metric_name=contract.error_log_metric_name(self.tenant_id, kind),
            statistic="Sum",
            period=period,
        )

    def _own(
        self, name: str, statistic: str, period: Duration, label: str | None = None
    ) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace=contract.metric_namespace(),
            metric_name=name,
            dimensions_map={contract.TENANT_DIMENSION: self.tenant_id},
            statistic=statistic,
            period=period,
            label=label,
        )

    # -- the queues (AWS/SQS) --------------------------------------------------------------------

    def queue_age(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        """Age of the oldest message in the queue (Maximum)."""
        return self._queue(self.queue_name, "ApproximateAgeOfOldestMessage", period)

    def paused_for(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        """How long the tenant has been paused (`ops pause`; controller, Maximum): a point each
        minute a message waits for the pause to end."""
        return self._own(contract.PAUSED_METRIC, "Maximum", period)

    def queue_age_unless_paused(self) -> cloudwatch.MathExpression:
        """The queue's age, 0 in a period in which the tenant was paused: files held back by
        `ops pause` are not a backlog (the `paused` alarm watches a pause that lasts)."""
        return cloudwatch.MathExpression(
            expression="IF(FILL(paused, 0) > 0, 0, age)",
            using_metrics={"age": self.queue_age(), "paused": self.paused_for()},
            label="Age of the oldest message (0 while paused)",
            period=METRIC_PERIOD,
        )

    def queue_visible(self, *, label: str | None = None) -> cloudwatch.Metric:
        """Messages waiting in the queue (Maximum)."""
        return self._queue(self.queue_name, "ApproximateNumberOfMessagesVisible", METRIC_PERIOD, label)

    def queue_in_flight(self, *, label: str | None = None) -> cloudwatch.Metric:
        """Messages received and not yet deleted: the running file, and files waiting aside (Maximum)."""
        return self._queue(self.queue_name, "ApproximateNumberOfMessagesNotVisible", METRIC_PERIOD, label)

    def intake_dlq_messages(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        """Events EventBridge gave up delivering to this tenant's queue or closer (visible
        messages of the intake dead-letter queue, Maximum)."""
        return self._queue(self.intake_dlq_name, "ApproximateNumberOfMessagesVisible", period)

    @staticmethod
    def _queue(queue_name: str, name: str, period: Duration, label: str | None = None) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace="AWS/SQS",
            metric_name=name,
            dimensions_map={"QueueName": queue_name},
            statistic="Maximum",
            period=period,
            label=label,
        )

    # -- the rules (AWS/Events) ------------------------------------------------------------------

    @property
    def rule_names(self) -> tuple[str, str]:
        """The literal names of the tenant's rules, object-created then status."""
        return names.RULE.render(self.tenant_id), names.STATUS_RULE.render(self.tenant_id)

    def intake_failed_invocations(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.MathExpression:
        """Deliveries of this tenant's rules that failed for good, and dead-lettering that failed
        (``FailedInvocations`` + ``InvocationsFailedToBeSentToDlq`` of both rules, Sum). The
        second is the only way an event is lost outright (the DLQ itself refused it)."""
        # A rule on a custom bus (a shard's) publishes with the EventBusName dimension too.
        bus = {"EventBusName": self.event_bus_name} if self.event_bus_name else {}
        metrics: dict[str, cloudwatch.IMetric] = {
            f"{metric_id}{rule_id}": cloudwatch.Metric(
                namespace="AWS/Events",
                metric_name=metric_name,
                dimensions_map={**bus, "RuleName": rule_name},
                statistic="Sum",
                period=period,
            )
            for rule_id, rule_name in zip(("objectcreated", "status"), self.rule_names)
            for metric_id, metric_name in (
                ("failed", "FailedInvocations"),
                ("undelivered", "InvocationsFailedToBeSentToDlq"),
            )
        }
        # FILL: a rule without failures publishes nothing; the sum must still be a number.
        return cloudwatch.MathExpression(
            expression=" + ".join(f"FILL({metric_id}, 0)" for metric_id in metrics),
            using_metrics=metrics,
            label=f"Failed EventBridge deliveries of tenant {self.tenant_id}",
            period=period,
        )

    # -- the file workflow's executions (AWS/States) ---------------------------------------------

    @property
    def alias_arn(self) -> str:
        """The ARN of the file state machine's `live` alias, which every file starts through."""
        return f"{self.state_machine_arn}:{contract.WORKFLOW_ALIAS.render()}"

    def executions_succeeded(self, *, label: str | None = None) -> cloudwatch.MathExpression:
        return self._executions("ExecutionsSucceeded", METRIC_PERIOD, label)

    def executions_failed(
        self, *, period: Duration = METRIC_PERIOD, label: str | None = None
    ) -> cloudwatch.MathExpression:
        return self._executions("ExecutionsFailed", period, label)

    def executions_timed_out(
        self, *, period: Duration = METRIC_PERIOD, label: str | None = None
    ) -> cloudwatch.MathExpression:
        return self._executions("ExecutionsTimedOut", period, label)

    def executions_aborted(
        self, *, period: Duration = METRIC_PERIOD, label: str | None = None
    ) -> cloudwatch.MathExpression:
        return self._executions("ExecutionsAborted", period, label)

    def executions_throttled(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.MathExpression:
        return self._executions("ExecutionThrottled", period)

    def _executions(self, name: str, period: Duration, label: str | None = None) -> cloudwatch.MathExpression:
        """``name`` (Sum) of the file state machine's executions under either ARN its
        `StateMachineArn` dimension may carry: files start through the `live` alias, and AWS does
        not document whether such an execution counts under the state machine's ARN or the
        alias's. The larger of the two per period: right whichever one AWS uses, and not twice
        if it publishes both (FILL: the one it does not use has no data)."""
        own_id = name[0].lower() + name[1:]  # unique per metric name: a graph shows several
        metrics = {
            own_id: self._execution_metric(name, self.state_machine_arn, period),
            f"{own_id}Live": self._execution_metric(name, self.alias_arn, period),
        }
        unqualified, alias = (f"FILL({metric_id}, 0)" for metric_id in metrics)
        return cloudwatch.MathExpression(
            expression=f"IF({unqualified} >= {alias}, {unqualified}, {alias})",
            using_metrics=metrics,
            label=label or f"{name} of tenant {self.tenant_id}",
            period=period,
        )

    @staticmethod
    def _execution_metric(name: str, state_machine_arn: str, period: Duration) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace="AWS/States",
            metric_name=name,
            dimensions_map={"StateMachineArn": state_machine_arn},
            statistic="Sum",
            period=period,
        )
