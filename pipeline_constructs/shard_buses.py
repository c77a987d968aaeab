"""``ShardRouting``: the shard event buses and the default bus's rules that forward to them.

Built only with ``routing.shards`` (``routing.py`` decides which tenant goes where). The hop
from the default bus to a shard bus is one more EventBridge delivery, so it gets what the
tenants' own rule targets have: EventBridge's longest retry (185 attempts, 24 hours), a
dead-letter queue and alarms. A lost hop is a lost file: it must page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jsii
from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from lambdas import contract
from pipeline_constructs import encryption, names, routing
from pipeline_constructs.alarms import AlarmFactory, runbook_link
from pipeline_constructs.intake import (
    INTAKE_DLQ_RETENTION,
    INTAKE_MAX_EVENT_AGE,
    INTAKE_RETRY_ATTEMPTS,
)
from pipeline_constructs.nag import acknowledge, as_nag_shows

if TYPE_CHECKING:
    from aws_cdk.interfaces.aws_events import IRuleRef

METRIC_PERIOD = Duration.minutes(5)


def let_rules_dead_letter(queue: sqs.IQueue, sid: str, rule_names: str) -> None:
    """Let this app's EventBridge rules whose names match ``rule_names`` (on any bus: a rule of
    a custom bus is `rule/<bus>/<name>`) dead-letter into ``queue``, in one statement whatever
    the number of rules: a statement per rule passes SQS's 20 statements and 8 KB per queue
    policy with many shards or catch-all buses."""
    queue.add_to_resource_policy(
        iam.PolicyStatement(
            sid=sid,
            principals=[iam.ServicePrincipal("events.amazonaws.com")],
            actions=["sqs:SendMessage"],
            resources=[queue.queue_arn],
            conditions={
                "ArnLike": {
                    "aws:SourceArn": Stack.of(queue).format_arn(
                        service="events", resource="rule", resource_name=rule_names
                    )
                }
            },
        )
    )


class Forwarding(Construct):
    """What every default-bus -> custom-bus hop of the app shares: one role (``events:PutEvents``
    on the app's buses only; EventBridge needs a role for an event-bus target, even in the same
    account and Region), one dead-letter queue and its alarm.

    Attributes: ``role``, ``dead_letter_queue``, ``alarms``; ``forward(...)`` adds a rule."""

    def __init__(
        self, scope: Construct, construct_id: str, *, alarm_topic: sns.ITopic, kms_key: kms.IKey | None = None
    ) -> None:
        """``kms_key``: the shared customer-managed key (top-level `encryption`) of the
        dead-letter queue. Default: none (SQS-managed encryption)."""
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("events.amazonaws.com"),
            description="EventBridge forwards this app's events from the default bus to its shard buses",
        )
        # One resource for every bus of the app (shard and catch-all buses), by the prefix of
        # their names: a statement per bus would pass IAM's 10,240 characters of inline
        # policy per role at about 100 buses.
        stack = Stack.of(self)
        app_buses = stack.format_arn(
            service="events",
            resource="event-bus",
            resource_name=f"{contract.qualify(contract.SHARED_PREFIX)}-*",
        )
        policy = iam.Policy(
            self,
            "PutEventsOnAppBuses",
            roles=[self.role],
            statements=[iam.PolicyStatement(actions=["events:PutEvents"], resources=[app_buses])],
        )
        partition, region, account = as_nag_shows(stack)
        acknowledge(
            policy,
            "AwsSolutions-IAM5",
            "PutEvents on this app's own event buses only (shard and catch-all buses, all named "
            f"{contract.qualify(contract.SHARED_PREFIX)}-...): one resource whatever the number of buses.",
            f"Resource::arn:{partition}:events:{region}:{account}:event-bus/"
            f"{contract.qualify(contract.SHARED_PREFIX)}-*",
        )
        self.dead_letter_queue = sqs.Queue(
            self,
            "Dlq",
            queue_name=names.routing_dlq(),
            retention_period=INTAKE_DLQ_RETENTION,
            **encryption.queue_encryption(kms_key),
            enforce_ssl=True,
        )
        acknowledge(
            self.dead_letter_queue,
            "AwsSolutions-SQS3",
            "This queue is itself the dead-letter queue of the default bus's forwarding rules; its depth "
            "is alarmed (routing-dlq).",
        )
        let_rules_dead_letter(
            self.dead_letter_queue,
            "ForwardingRulesDeadLetters",
            f"{contract.qualify(contract.SHARED_PREFIX)}-*",
        )
        self._factory = AlarmFactory(
            self, name=contract.SHARED_ALARM, topic=alarm_topic, evaluation_periods=1
        )
        self._factory.alarm(
            "routing-dlq",
            self.dead_letter_queue.metric_approximate_number_of_messages_visible(
                period=METRIC_PERIOD, statistic="Maximum"
            ),
            1,
            "EventBridge gave up forwarding an event from the default bus to a shard bus (after 24 h of "
            f"retries): a file upload or a status change that no tenant received. It is in queue "
            f"{names.routing_dlq()}. First: read it there (source, key or execution), then python -m ops "
            f"reconcile TENANT --replay for an upload. {runbook_link('routing-dlq')}",
        )
        self.alarms = self._factory.alarms
        self.rules: list[events.Rule] = []

    def forward(
        self,
        scope: Construct,
        rule_id: str,
        *,
        rule_name: str,
        description: str,
        event_pattern: events.EventPattern,
        bus: events.IEventBus,
    ) -> events.Rule:
        """A default-bus rule that forwards what ``event_pattern`` matches to ``bus``."""
        rule = events.Rule(
            scope, rule_id, rule_name=rule_name, description=description, event_pattern=event_pattern
        )
        rule.add_target(_EventBusTarget(bus, self.role, self.dead_letter_queue))
        self.rules.append(rule)
        return rule

    def failed_alarm(self, key: str, rules: Sequence[str], what: str) -> cloudwatch.Alarm:
        """An alarm on the forwarding rules' deliveries that failed for good or could not even be
        dead-lettered (AWS/Events by RuleName: rules of the default bus)."""
        metrics: dict[str, cloudwatch.IMetric] = {}
        for n, rule_name in enumerate(rules):
            for metric_id, metric_name in (
                ("failed", "FailedInvocations"),
                ("lost", "InvocationsFailedToBeSentToDlq"),
            ):
                metrics[f"{metric_id}{n}"] = cloudwatch.Metric(
                    namespace="AWS/Events",
                    metric_name=metric_name,
                    dimensions_map={"RuleName": rule_name},
                    statistic="Sum",
                    period=METRIC_PERIOD,
                )
        expression = cloudwatch.MathExpression(
            expression=" + ".join(f"FILL({m}, 0)" for m in metrics),
            using_metrics=metrics,
            label=f"Failed forwards: {what}",
            period=METRIC_PERIOD,
        )
        return self._factory.alarm(
            key,
            expression,
            1,
            f"A forward of {what} from the default bus failed for good (then it is in {names.routing_dlq()}) "
            "or "
            "could not even be dead-lettered (then the event is lost: python -m ops reconcile TENANT finds "
            "the "
            f"file). First: read {names.routing_dlq()}. {runbook_link('routing-dlq')}",
        )


@dataclass(frozen=True)
class ShardRoutingProps:
    """``landing_bucket_name``: the bucket whose uploads are forwarded. ``shards``: the layout
    (`routing.layout`). ``forwarding``: the hop's role, dead-letter queue and alarms."""

    landing_bucket_name: str
    shards: Sequence[routing.ShardLayout]
    forwarding: Forwarding


class ShardRouting(Construct):
    """One event bus per shard; per non-empty shard two default-bus rules forwarding to it (its
    tenants' uploads, its tenants' workflow status changes) and an alarm on their failures.

    Attributes: ``buses`` (shard -> bus), ``rules`` (shard -> (objects rule, status rule))."""

    def __init__(self, scope: Construct, construct_id: str, props: ShardRoutingProps) -> None:
        super().__init__(scope, construct_id)
        self.buses: dict[int, events.EventBus] = {}
        self.rules: dict[int, tuple[events.Rule, events.Rule]] = {}
        for shard in props.shards:
            k = shard.index
            bus = events.EventBus(self, f"Bus{k}", event_bus_name=names.shard_bus_name(k))
            self.buses[k] = bus
            if not shard.tenant_ids:
                continue  # created anyway: pinning a tenant to it later needs no new bus first
            objects = props.forwarding.forward(
                self,
                f"Shard{k}Objects",
                rule_name=names.shard_objects_rule_name(k),
                description=(
                    f"Uploads under the prefixes of shard {k}'s tenants go to bus {bus.event_bus_name}"
                ),
                event_pattern=_pattern(
                    routing.object_created_pattern(props.landing_bucket_name, shard.prefixes)
                ),
                bus=bus,
            )
            status = props.forwarding.forward(
                self,
                f"Shard{k}Status",
                rule_name=names.shard_status_rule_name(k),
                description=(
                    f"Status changes of shard {k}'s tenants' workflows go to bus {bus.event_bus_name}"
                ),
                event_pattern=_pattern(routing.status_pattern(shard.tenant_ids)),
                bus=bus,
            )
            self.rules[k] = (objects, status)
            props.forwarding.failed_alarm(
                f"shard-{k}-routing-failed",
                [names.shard_objects_rule_name(k), names.shard_status_rule_name(k)],
                f"shard {k}'s events (tenants {', '.join(shard.tenant_ids[:5])}"
                f"{' ...' if len(shard.tenant_ids) > 5 else ''})",
            )


def _pattern(pattern: dict[str, Any]) -> events.EventPattern:
    return events.EventPattern(
        source=pattern["source"], detail_type=pattern["detail-type"], detail=pattern["detail"]
    )


@jsii.implements(events.IRuleTarget)
class _EventBusTarget:
    """An event bus as a rule's target with a role, a dead-letter queue and the tenants' retry
    policy (CDK's `targets.EventBus` has no retry settings, and adds a queue policy statement
    per rule; `Forwarding` writes one for all)."""

    def __init__(self, bus: events.IEventBus, role: iam.IRole, dead_letter_queue: sqs.IQueue) -> None:
        self._bus, self._role, self._dlq = bus, role, dead_letter_queue

    def bind(self, rule: IRuleRef, id: str | None = None) -> events.RuleTargetConfig:
        return events.RuleTargetConfig(
            arn=self._bus.event_bus_arn,
            role=self._role,
            dead_letter_config=events.CfnRule.DeadLetterConfigProperty(arn=self._dlq.queue_arn),
            retry_policy=events.CfnRule.RetryPolicyProperty(
                maximum_retry_attempts=INTAKE_RETRY_ATTEMPTS,
                maximum_event_age_in_seconds=int(INTAKE_MAX_EVENT_AGE.to_seconds()),
            ),
        )
