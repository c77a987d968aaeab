"""A tenant's intake: the access point its uploaders put files through, the queue its file
events wait in, the rules on its bus (object created -> queue, execution status -> closer), and
the dead-letter queue of both rules' targets.

Each builder makes its resources in the caller's scope (the tenant's pipeline), under the
construct ids the deployed stacks already have.
"""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from lambdas import contract
from pipeline_constructs import encryption, names, routing, uploaders
from pipeline_constructs.config import TenantConfig

# The seed's queue timings. The controller's timeout must stay below the visibility timeout, or
# a message still being handled is redelivered (double start): `control_plane.CONTROLLER_TIMEOUT`.
QUEUE_VISIBILITY_TIMEOUT = Duration.seconds(30)
QUEUE_RETENTION = Duration.days(14)
QUEUE_RECEIVE_WAIT = Duration.seconds(20)
#: Retry policy of every rule target (object-created -> queue, status -> closer): EventBridge's
#: own maximum, stated so that a reader sees it and a CDK default cannot change it. A target
#: that keeps failing (queue throttled, closer unavailable) is retried for a day; then the
#: event goes to the tenant's intake dead-letter queue (alarmed), never dropped.
INTAKE_RETRY_ATTEMPTS = 185
INTAKE_MAX_EVENT_AGE = Duration.hours(24)
#: As long as SQS keeps a message: the operator has two weeks to replay (`ops dlq replay`).
INTAKE_DLQ_RETENTION = Duration.days(14)


def build_queue(scope: Construct, tenant: TenantConfig, kms_key: kms.IKey | None) -> sqs.Queue:
    """The tenant's queue (`Queue`). Arrival order is a FIFO queue's order (one message group
    per tenant); key-sequence order is the controller's, so that queue is a standard one: a file
    whose turn has not come waits aside instead of blocking the file it waits for. No DLQ by
    design (nag.py says why)."""
    fifo = tenant.ordering.by == "arrival"
    return sqs.Queue(
        scope,
        "Queue",
        queue_name=(names.QUEUE if fifo else names.SEQUENCE_QUEUE).render(tenant.id),
        fifo=fifo or None,
        content_based_deduplication=fifo or None,
        visibility_timeout=QUEUE_VISIBILITY_TIMEOUT,
        retention_period=QUEUE_RETENTION,
        receive_message_wait_time=QUEUE_RECEIVE_WAIT,
        **encryption.queue_encryption(kms_key),
        enforce_ssl=True,
    )


def build_intake_dlq(scope: Construct, tenant_id: str, kms_key: kms.IKey | None) -> sqs.Queue:
    """Where EventBridge puts an event it could not deliver to a target of the tenant's rules
    (`IntakeDlq`, after `INTAKE_RETRY_ATTEMPTS` / `INTAKE_MAX_EVENT_AGE`). Standard, not FIFO:
    EventBridge refuses FIFO dead-letter queues; `ops dlq replay` restores the upload order."""
    return sqs.Queue(
        scope,
        "IntakeDlq",
        queue_name=names.INTAKE_DLQ.render(tenant_id),
        retention_period=INTAKE_DLQ_RETENTION,
        **encryption.queue_encryption(kms_key),
        enforce_ssl=True,
    )


def build_object_created_rule(
    scope: Construct,
    tenant: TenantConfig,
    *,
    landing_bucket: s3.IBucket,
    event_bus: events.IEventBus | None,
    queue: sqs.Queue,
    dlq: sqs.IQueue,
    kms_key: kms.IKey | None,
) -> events.Rule:
    """Files created under the tenant's prefix go to its queue (`ObjectCreatedRule`; one message
    group per tenant on a FIFO queue)."""
    rule = events.Rule(
        scope,
        "ObjectCreatedRule",
        event_bus=event_bus,
        rule_name=names.RULE.render(tenant.id),
        description=f"Files created under tenant {tenant.id}'s prefix in the landing bucket go to its queue",
        event_pattern=events.EventPattern(
            source=["aws.s3"],
            detail_type=["Object Created"],
            detail={
                "bucket": {"name": [landing_bucket.bucket_name]},
                "object": {"key": [{"prefix": tenant.prefix}]},
            },
        ),
        targets=[
            targets.SqsQueue(
                queue,
                message_group_id=tenant.id if queue.fifo else None,
                dead_letter_queue=dlq,
                retry_attempts=INTAKE_RETRY_ATTEMPTS,
                max_event_age=INTAKE_MAX_EVENT_AGE,
            )
        ],
    )
    if kms_key is not None:
        _only_own_rule_sends_to(queue, encryption.tenant_rule_arns(scope, tenant.id, event_bus)[0])
    return rule


def _only_own_rule_sends_to(queue: sqs.Queue, rule_arn: str) -> None:
    """CDK's `SqsQueue` target leaves out its `aws:SourceArn` condition when the queue has a
    customer-managed key (the rule's ARN would make the key depend on the rule,
    https://github.com/aws/aws-cdk/issues/11158); with the feature flag
    `@aws-cdk/aws-events:eventsTargetQueueSameAccount` (cdk.json) it keeps `aws:SourceAccount`,
    so any rule of the account could still send to the queue. The rule's ARN from its fixed
    name has no such cycle: add the condition back."""
    queue_policy = queue.node.try_find_child("Policy")
    if not isinstance(queue_policy, sqs.QueuePolicy):
        return
    statements = Stack.of(queue).resolve(queue_policy.document)["Statement"]
    (index,) = [
        i
        for i, statement in enumerate(statements)
        if statement.get("Principal") == {"Service": "events.amazonaws.com"}
        and "ArnEquals" not in statement.get("Condition", {})
    ]
    policy = queue_policy.node.default_child
    assert isinstance(policy, sqs.CfnQueuePolicy)
    policy.add_property_override(
        f"PolicyDocument.Statement.{index}.Condition.ArnEquals", {"aws:SourceArn": rule_arn}
    )


def build_status_rule(
    scope: Construct,
    tenant_id: str,
    *,
    event_bus: events.IEventBus | None,
    state_machine_arn: str,
    closer: lambda_.IFunction,
    dlq: sqs.IQueue,
) -> events.Rule:
    """Status changes of the tenant's file executions go to its closer (`ExecutionStatusRule`).

    The backstop of the workflow's last state (status-change events are best effort, and the
    workflow cannot record a timeout or an abort itself); RUNNING too, to stop an execution
    started outside the gate (a hand-made redrive). Files start through the alias: the event
    may name the state machine bare or qualified, both match."""
    return events.Rule(
        scope,
        "ExecutionStatusRule",
        event_bus=event_bus,
        rule_name=names.STATUS_RULE.render(tenant_id),
        description=f"Status changes of tenant {tenant_id}'s executions go to its closer",
        event_pattern=events.EventPattern(
            source=["aws.states"],
            detail_type=["Step Functions Execution Status Change"],
            detail={
                "stateMachineArn": routing.own_workflow_arns(state_machine_arn),
                "status": ["RUNNING", *sorted(contract.CLOSED_STATUSES)],
            },
        ),
        targets=[
            targets.LambdaFunction(
                closer,
                dead_letter_queue=dlq,
                retry_attempts=INTAKE_RETRY_ATTEMPTS,
                max_event_age=INTAKE_MAX_EVENT_AGE,
            )
        ],
    )


def build_upload_access_point(
    scope: Construct, tenant: TenantConfig, landing_bucket: s3.IBucket
) -> s3.CfnAccessPoint | None:
    """The access point the tenant's `uploaders` put files through (`UploadAccessPoint`, named
    `names.upload_access_point_name`), on the shared landing bucket by its fixed name; its
    policy lets them put under the tenant's prefix and nothing else (`uploaders.py`). None
    without uploaders."""
    if not tenant.uploaders:
        return None
    name = names.upload_access_point_name(tenant.id)
    # Its own ARN from the fixed name: an access point's policy cannot refer to the access point.
    arn = Stack.of(scope).format_arn(service="s3", resource="accesspoint", resource_name=name)
    own = uploaders.TenantUploaders(tenant.id, tenant.prefix, tuple(tenant.uploaders))
    return s3.CfnAccessPoint(
        scope,
        "UploadAccessPoint",
        bucket=landing_bucket.bucket_name,
        name=name,
        policy=uploaders.access_point_policy(own, arn),
        public_access_block_configuration=s3.CfnAccessPoint.PublicAccessBlockConfigurationProperty(
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
        ),
    )
