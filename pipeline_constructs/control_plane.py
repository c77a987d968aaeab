"""A tenant's control plane: the controller (the gate that starts one file at a time), the closer
(records each close and hands off to the next file) and, with `completion.wait`, the entry point
through which the core system confirms a file. Each function gets its own role, and each role
only the tenant's own queue, executions and ledger items.
"""

from __future__ import annotations

from aws_cdk import CfnOutput, Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from lambdas import contract
from pipeline_constructs import names
from pipeline_constructs.config import TenantConfig
from pipeline_constructs.data_plane import grant_own_ledger
from pipeline_constructs.functions import FunctionSpec, PipelineFunction, pipeline_function
from pipeline_constructs.versions import ALIAS_NAME
from pipeline_constructs.workflows import execution_arn_pattern, state_machine_arn

#: Below the queue's visibility timeout (`intake.QUEUE_VISIBILITY_TIMEOUT`), or a message still
#: being handled is redelivered (double start).
CONTROLLER_TIMEOUT = Duration.seconds(20)
#: A message that must wait is invisible this long unless the close of the file ahead makes it
#: visible first (fast hand-off). Below the 5-minute metric period, so the head-wait metric
#: has a point in every period while a tenant waits.
WAITING_VISIBILITY = Duration.minutes(4)


def build_closer(
    scope: Construct,
    tenant: TenantConfig,
    *,
    queue: sqs.IQueue,
    ledger_table: dynamodb.ITable,
    alarm_topic: sns.ITopic,
    alarm_topic_key: kms.IKey,
    kms_key: kms.IKey | None,
) -> PipelineFunction:
    """The closer (`Closer`): records closes in the ledger, hands off (the queue's visibility),
    notifies, stops an execution started by hand."""
    made = pipeline_function(
        scope,
        "Closer",
        FunctionSpec(
            tenant_id=tenant.id,
            kind="closer",
            function_name=names.CLOSER_FUNCTION.render(tenant.id),
            handler="lambdas.closer.handler",
            timeout=Duration.seconds(30),
            description=f"Records the close of tenant {tenant.id}'s executions and hands off to the next file",
        ),
        environment=contract.environment(
            contract.CloserEnv(
                tenant_id=tenant.id,
                # The name is fixed, so the ARN is known without referring to the state machine
                # (which refers to this function): no dependency cycle.
                state_machine_arn=state_machine_arn(scope, names.STATE_MACHINE, tenant.id),
                ledger_table_name=ledger_table.table_name,
                queue_url=queue.queue_url,
                alarm_topic_arn=alarm_topic.topic_arn,
                on_failure=tenant.on_failure,
            )
        ),
        tracing=tenant.tracing,
        kms_key=kms_key,
    )
    role = made.role
    # Query + DeleteItem: key_sequence ordering hands off to the next sequence number's note.
    grant_own_ledger(
        role,
        ledger_table,
        tenant.id,
        "dynamodb:GetItem",
        "dynamodb:UpdateItem",
        "dynamodb:PutItem",
        "dynamodb:Query",
        "dynamodb:DeleteItem",
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="HandOffOnOwnQueue",
            actions=["sqs:ChangeMessageVisibility"],
            resources=[queue.queue_arn],
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="DescribeAndStopOwnExecutions",
            actions=["states:DescribeExecution", "states:StopExecution"],
            resources=[execution_arn_pattern(scope, names.STATE_MACHINE, tenant.id)],
        )
    )
    # Not `grant_publish`: with an encrypted topic it adds kms:GenerateDataKey* (a wildcard).
    role.add_to_policy(
        iam.PolicyStatement(sid="NotifyFailures", actions=["sns:Publish"], resources=[alarm_topic.topic_arn])
    )
    alarm_topic_key.grant(role, "kms:GenerateDataKey", "kms:Decrypt")
    return made


def build_controller(
    scope: Construct,
    tenant: TenantConfig,
    *,
    queue: sqs.IQueue,
    state_machine: sfn.IStateMachine,
    alias: sfn.CfnStateMachineAlias,
    ledger_table: dynamodb.ITable,
    landing_bucket: s3.IBucket,
    work_bucket: s3.IBucket,
    kms_key: kms.IKey | None,
) -> PipelineFunction:
    """The controller (`Controller`, reserved concurrency 1, one message at a time): starts the
    tenant's files through the `live` alias in order; touches only this tenant's ledger items."""
    made = pipeline_function(
        scope,
        "Controller",
        FunctionSpec(
            tenant_id=tenant.id,
            kind="controller",
            function_name=names.CONTROLLER_FUNCTION.render(tenant.id),
            handler="lambdas.controller.handler",
            timeout=CONTROLLER_TIMEOUT,
            reserved_concurrency=1,
            description=f"Starts tenant {tenant.id}'s workflow, one file at a time",
        ),
        environment=contract.environment(
            contract.ControllerEnv(
                tenant_id=tenant.id,
                # The `live` alias: a file runs on the version this deploy published (or the one an
                # operator rolled back to); execution ARNs drop the qualifier.
                state_machine_arn=alias.attr_arn,
                ledger_table_name=ledger_table.table_name,
                queue_url=queue.queue_url,
                metric_namespace=contract.metric_namespace(),
                on_failure=tenant.on_failure,
                waiting_visibility_seconds=int(WAITING_VISIBILITY.to_seconds()),
                work_bucket=work_bucket.bucket_name,
                landing_bucket=landing_bucket.bucket_name,
                landing_prefix=tenant.prefix,
                ordering=tenant.ordering.by,
                sequence_pattern=tenant.ordering.sequence_pattern,
                first_sequence=tenant.ordering.first_sequence,
            )
        ),
        tracing=tenant.tracing,
        kms_key=kms_key,
    )
    # Partial batch responses: a waiting message is a reported item failure, not a function
    # error, so Lambda does not back off its polling.
    made.function.add_event_source(
        event_sources.SqsEventSource(queue, batch_size=1, report_batch_item_failures=True)
    )
    role = made.role
    # Step Functions authorizes a start through an alias on the unqualified ARN; the qualifier
    # condition allows only the `live` alias (not the latest revision, nor a version by number).
    # https://docs.aws.amazon.com/step-functions/latest/dg/auth-version-alias.html
    role.add_to_policy(
        iam.PolicyStatement(
            sid="StartThroughLiveAlias",
            actions=["states:StartExecution"],
            resources=[state_machine.state_machine_arn],
            conditions={"StringEquals": {"states:StateMachineQualifier": ALIAS_NAME}},
        )
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="DescribeOwnExecutions",
            actions=["states:DescribeExecution"],
            resources=[execution_arn_pattern(scope, names.STATE_MACHINE, tenant.id)],
        )
    )
    # UpdateItem + PutItem: the claim is one transaction (position and event marker).
    # DeleteItem: key_sequence ordering forgets a waiting note once its file starts.
    grant_own_ledger(
        role,
        ledger_table,
        tenant.id,
        "dynamodb:GetItem",
        "dynamodb:UpdateItem",
        "dynamodb:PutItem",
        "dynamodb:DeleteItem",
    )
    role.add_to_policy(
        iam.PolicyStatement(
            sid="QuarantineUnusableMessages",
            actions=["s3:PutObject"],
            resources=[work_bucket.arn_for_objects(f"{contract.quarantine_prefix(tenant.id)}*")],
        )
    )
    return made


def build_completion(
    scope: Construct,
    tenant: TenantConfig,
    *,
    state_machine: sfn.StateMachine,
    ledger_table: dynamodb.ITable,
    kms_key: kms.IKey | None,
) -> PipelineFunction:
    """The function the core system invokes (`Completion`; lambda:InvokeFunction, SigV4:
    IAM-authenticated, never anonymous) to confirm or reject the tenant's waiting file. Only the
    principals of `completion.callers` may invoke it (its resource policy); its own role reads
    and answers only this tenant's position and tokens of this tenant's state machine. (The
    workflow's side, leaving the token: `workflows.build_workflow`.)"""
    made = pipeline_function(
        scope,
        "Completion",
        FunctionSpec(
            tenant_id=tenant.id,
            kind="completion",
            function_name=names.COMPLETION_FUNCTION.render(tenant.id),
            handler="lambdas.completion.handler",
            timeout=Duration.seconds(10),
            description=f"The core system confirms or rejects tenant {tenant.id}'s waiting file",
        ),
        environment=contract.environment(
            contract.CompletionEnv(tenant_id=tenant.id, ledger_table_name=ledger_table.table_name)
        ),
        tracing=tenant.tracing,
        kms_key=kms_key,
    )
    for index, caller in enumerate(tenant.completion.callers):
        # One permission per caller, ids by position: the list is the contract with the core system.
        made.function.add_permission(
            f"CoreSystemCaller{index}", principal=iam.ArnPrincipal(caller), action="lambda:InvokeFunction"
        )
    # Read the position (which file waits, its token); record the answer. Own partition only.
    made.role.add_to_policy(
        iam.PolicyStatement(
            sid="OwnPositionOnly",
            actions=["dynamodb:GetItem", "dynamodb:UpdateItem"],
            resources=[ledger_table.table_arn],
            conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [tenant.id]}},
        )
    )
    # SendTaskSuccess/Failure/Heartbeat scoped to this tenant's file state machine.
    state_machine.grant_task_response(made.role)
    CfnOutput(
        scope,
        "CompletionFunctionName",
        value=made.function.function_name,
        description=f"CompletionFunctionName of tenant {tenant.id} (the core system invokes it)",
    )
    return made
