"""``UnmatchedUploads``: files dropped in the landing bucket outside every tenant prefix.

No tenant's rule matches them, so without this they would be ignored without a trace. One
rule in the shared stack (which knows every prefix) logs each such "Object Created" event to
a log group; a metric filter counts them, an alarm pages, and `ops status` lists them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import jsii
from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from lambdas import contract
from pipeline_constructs import encryption, names, routing
from pipeline_constructs.alarms import AlarmFactory, runbook_link
from pipeline_constructs.nag import acknowledge
from pipeline_constructs.shard_buses import let_rules_dead_letter

if TYPE_CHECKING:
    from aws_cdk.interfaces.aws_events import IRuleRef

    from pipeline_constructs.shard_buses import Forwarding

#: EventBridge's maximum, as for the tenants' rules: an upload nobody expects is still worth a day.
RETRY_ATTEMPTS = 185
MAX_EVENT_AGE = Duration.hours(24)
METRIC_PERIOD = Duration.minutes(5)


@dataclass(frozen=True)
class UnmatchedUploadsProps:
    """``landing_bucket``: the bucket tenants upload to. ``tenant_prefixes``: every tenant's key
    prefix (at least one). ``alarm_topic``: where the alarms notify.
    ``log_retention``: how long the unmatched events are kept. Default: three months."""

    landing_bucket: s3.IBucket
    tenant_prefixes: Sequence[str]
    alarm_topic: sns.ITopic
    log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS
    #: Needed when the prefixes do not fit one pattern (`routing.unmatched_layout`): the hop to
    #: the catch-all's buses. Default: none (one rule, as with few tenants).
    forwarding: Forwarding | None = None
    #: The account's event pattern size quota, in characters.
    event_pattern_chars: int = routing.MAX_EVENT_PATTERN_CHARS
    #: The shared customer-managed key (top-level `encryption`) for the log group and the
    #: dead-letter queue. Default: none (AWS-managed encryption).
    kms_key: kms.IKey | None = None


class UnmatchedUploads(Construct):
    """Rule (outside every prefix) -> log group -> metric filter -> alarm, with a DLQ.

    Attributes: ``rule``, ``log_group``, ``log_group_name`` (literal), ``dead_letter_queue``,
    ``alarms`` (name -> alarm). Metrics: ``metric_unmatched_uploads``, ``metric_dlq_messages``.
    """

    def __init__(self, scope: Construct, construct_id: str, props: UnmatchedUploadsProps) -> None:
        super().__init__(scope, construct_id)
        if not props.tenant_prefixes:
            raise ValueError(
                "UnmatchedUploads needs at least one tenant prefix; without tenants every upload is unmatched"
            )
        self.log_group_name = names.unmatched_uploads_log_group()
        # AWS-managed encryption of CloudWatch Logs: the events hold keys and sizes, no content.
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            log_group_name=self.log_group_name,
            retention=props.log_retention,
            removal_policy=RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
            encryption_key=props.kms_key,
        )
        if props.kms_key is not None:
            encryption.allow_log_groups(
                props.kms_key, [self.log_group_name], sid="CloudWatchLogsUnmatchedUploads"
            )
        self.dead_letter_queue = sqs.Queue(
            self,
            "Dlq",
            queue_name=names.unmatched_uploads_dlq(),
            retention_period=Duration.days(14),
            **encryption.queue_encryption(props.kms_key),
            enforce_ssl=True,
        )
        acknowledge(
            self.dead_letter_queue,
            "AwsSolutions-SQS3",
            "This queue is itself the dead-letter queue of the unmatched-uploads rule's target; its "
            "depth is alarmed (unmatched-uploads-dlq).",
        )
        # Every rule of the catch-all: the default bus's `<prefix>-unmatched-uploads` and each of
        # its buses' `<prefix>-unmatched-<n>/...`.
        let_rules_dead_letter(
            self.dead_letter_queue,
            "UnmatchedUploadsRulesDeadLetters",
            f"{contract.qualify(contract.SHARED_PREFIX)}-unmatched-*",
        )
        self.layout = routing.unmatched_layout(props.tenant_prefixes, limit=props.event_pattern_chars)
        self.rule = events.Rule(
            self,
            "Rule",
            rule_name=names.unmatched_uploads_rule_name(0),
            description="Files created in the landing bucket outside every tenant prefix go to a log group",
            event_pattern=unmatched_pattern(props.landing_bucket.bucket_name, self.layout.excluded),
        )
        self.rule.add_target(_LogGroupTarget(self.log_group, self.dead_letter_queue))
        self._groups(props)
        # A native resource policy (CDK's CloudWatchLogGroup target writes it with a custom
        # resource, i.e. a Lambda function in this stack).
        self.log_group.add_to_resource_policy(
            iam.PolicyStatement(
                sid="EventBridgeWritesUnmatchedUploads",
                principals=[iam.ServicePrincipal("events.amazonaws.com")],
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[self.log_group.log_group_arn],
            )
        )
        logs.MetricFilter(
            self,
            "Count",
            log_group=self.log_group,
            filter_pattern=logs.FilterPattern.all_events(),
            metric_namespace=contract.metric_namespace(),
            metric_name=contract.UNMATCHED_UPLOADS_METRIC,
            metric_value="1",
            filter_name=contract.UNMATCHED_UPLOADS_FILTER.render(),
        )
        factory = AlarmFactory(
            self, name=contract.SHARED_ALARM, topic=props.alarm_topic, evaluation_periods=1
        )
        factory.alarm(
            "unmatched-uploads",
            self.metric_unmatched_uploads(),
            1,
            "A file was uploaded to the landing bucket outside every tenant prefix: no tenant ingests it. "
            "First: python -m ops status (lists the recent ones); move the file under its tenant's prefix, "
            f"or add the tenant. {runbook_link('unmatched-uploads')}",
        )
        factory.alarm(
            "unmatched-uploads-dlq",
            self.metric_dlq_messages(),
            1,
            "EventBridge could not log an upload outside every tenant prefix (the log group refused it for "
            f"a day); the event is in queue {names.unmatched_uploads_dlq()}. First: read it there. "
            f"{runbook_link('unmatched-uploads')}",
        )
        self.alarms = factory.alarms

    def _groups(self, props: UnmatchedUploadsProps) -> None:
        """Past one pattern's worth of prefixes: per group of key-prefix subtrees (roots), a bus
        the default bus forwards the roots' uploads to, whose one rule logs those under none of
        the group's tenant prefixes (the default bus's rule above then excludes the roots)."""
        self.buses: list[events.EventBus] = []
        if not self.layout.groups:
            return
        if props.forwarding is None:
            raise ValueError(
                "UnmatchedUploads needs forwarding when the tenant prefixes do not fit one pattern"
            )
        bucket = props.landing_bucket.bucket_name
        for group in self.layout.groups:
            n = group.index + 1
            bus = events.EventBus(self, f"Bus{n}", event_bus_name=names.unmatched_bus_name(n))
            self.buses.append(bus)
            props.forwarding.forward(
                self,
                f"Forward{n}",
                rule_name=names.unmatched_forward_rule_name(n),
                description=f"Uploads under {len(group.roots)} key-prefix subtrees go to bus {bus.event_bus_name}",
                event_pattern=events.EventPattern(
                    source=["aws.s3"],
                    detail_type=["Object Created"],
                    detail={
                        "bucket": {"name": [bucket]},
                        "object": {"key": [{"prefix": r} for r in group.roots]},
                    },
                ),
                bus=bus,
            )
            # By its literal name (and a dependency), as the tenants' rules name their shard bus.
            rule = events.Rule(
                self,
                f"Rule{n}",
                event_bus=events.EventBus.from_event_bus_name(
                    self, f"BusByName{n}", names.unmatched_bus_name(n)
                ),
                rule_name=names.unmatched_uploads_rule_name(n),
                description="Uploads of these subtrees outside every tenant prefix go to the log group",
                event_pattern=unmatched_pattern(bucket, group.prefixes),
            )
            rule.node.add_dependency(bus)
            rule.add_target(_LogGroupTarget(self.log_group, self.dead_letter_queue))
            props.forwarding.failed_alarm(
                f"unmatched-{n}-routing-failed",
                [names.unmatched_forward_rule_name(n)],
                f"uploads to the catch-all's bus {bus.event_bus_name}",
            )

    def metric_unmatched_uploads(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        """Uploads outside every tenant prefix (the metric filter's count, Sum)."""
        return cloudwatch.Metric(
            namespace=contract.metric_namespace(),
            metric_name=contract.UNMATCHED_UPLOADS_METRIC,
            statistic="Sum",
            period=period,
        )

    def metric_dlq_messages(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        return self.dead_letter_queue.metric_approximate_number_of_messages_visible(
            period=period, statistic="Maximum"
        )


def unmatched_pattern(bucket_name: str, tenant_prefixes: Sequence[str]) -> events.EventPattern:
    """Object Created in ``bucket_name`` under none of ``tenant_prefixes``.

    ``{"anything-but": {"prefix": [...]}}``: EventBridge's anything-but prefix matcher with a list
    (one string when there is one prefix), as CDK's ``Match.anything_but_prefix`` writes it.
    EventBridge validates a pattern when the rule is created, so a form it refused would fail the
    deployment, not match silently."""
    return events.EventPattern(
        source=["aws.s3"],
        detail_type=["Object Created"],
        detail={
            "bucket": {"name": [bucket_name]},
            "object": {"key": events.Match.anything_but_prefix(*sorted(set(tenant_prefixes)))},
        },
    )


@jsii.implements(events.IRuleTarget)
class _LogGroupTarget:
    """A log group as the rule's target, with a dead-letter queue and the retry policy above.

    Not `targets.CloudWatchLogGroup`: it writes the log group's resource policy through a custom
    resource (a Lambda function); the policy is a native resource here."""

    def __init__(self, log_group: logs.ILogGroup, dead_letter_queue: sqs.IQueue) -> None:
        self._log_group = log_group
        self._dlq = dead_letter_queue

    def bind(self, rule: IRuleRef, id: str | None = None) -> events.RuleTargetConfig:
        return events.RuleTargetConfig(
            # The log group's ARN without the ':*' of `log_group_arn`, as EventBridge expects it.
            arn=Stack.of(self._log_group).format_arn(
                service="logs",
                resource="log-group",
                resource_name=self._log_group.log_group_name,
                arn_format=ArnFormat.COLON_RESOURCE_NAME,
            ),
            dead_letter_config=events.CfnRule.DeadLetterConfigProperty(arn=self._dlq.queue_arn),
            retry_policy=events.CfnRule.RetryPolicyProperty(
                maximum_retry_attempts=RETRY_ATTEMPTS,
                maximum_event_age_in_seconds=int(MAX_EVENT_AGE.to_seconds()),
            ),
        )
