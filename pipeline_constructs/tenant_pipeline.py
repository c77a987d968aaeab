"""``TenantPipeline``: everything one tenant owns, from its EventBridge rule to its alarms."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from pipeline_constructs import names
from pipeline_constructs.alarms import AlarmTargets, build_alarms
from pipeline_constructs.config import TenantConfig
from pipeline_constructs.nag import acknowledge
from pipeline_constructs.functions import FunctionSpec, PipelineFunction, pipeline_function
from pipeline_constructs.workflow import build_definition

# The seed's queue and controller timings. The controller's timeout must stay below the
# visibility timeout, or a message still being handled is redelivered (double start).
QUEUE_VISIBILITY_TIMEOUT = Duration.seconds(30)
QUEUE_RETENTION = Duration.days(14)
QUEUE_RECEIVE_WAIT = Duration.seconds(20)
CONTROLLER_TIMEOUT = Duration.seconds(20)


@dataclass(frozen=True)
class TenantPipelineProps:
    """A tenant's validated configuration and the shared resources it plugs into."""

    tenant: TenantConfig
    landing_bucket: s3.IBucket
    work_bucket: s3.IBucket
    gate_table: dynamodb.ITable
    alarm_topic: sns.ITopic
    alarm_topic_key: kms.IKey


class TenantPipeline(Construct):
    """Rule -> FIFO queue -> controller (concurrency 1) -> ordered workflow, with alarms.

    Attributes: ``rule``, ``queue``, ``controller``, ``split``, ``register``,
    ``state_machine``, ``alarms`` (name -> alarm).
    """

    def __init__(self, scope: Construct, construct_id: str, props: TenantPipelineProps) -> None:
        super().__init__(scope, construct_id)
        tenant = props.tenant
        self.tenant_id = tenant.id
        self.landing_prefix = tenant.prefix

        self.queue = sqs.Queue(
            self,
            "Queue",
            queue_name=names.QUEUE.render(tenant.id),
            fifo=True,
            content_based_deduplication=True,
            visibility_timeout=QUEUE_VISIBILITY_TIMEOUT,
            retention_period=QUEUE_RETENTION,
            receive_message_wait_time=QUEUE_RECEIVE_WAIT,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
        acknowledge(
            self.queue,
            "AwsSolutions-SQS3",
            "No DLQ by design: moving a failing head message aside would let later files of the "
            "tenant overtake it (breaks ordering). The message stays at the head and the stall "
            "alarm pages instead.",
        )

        self.rule = events.Rule(
            self,
            "ObjectCreatedRule",
            rule_name=names.RULE.render(tenant.id),
            description=f"Files created under s3://<landing>/{tenant.prefix} go to tenant {tenant.id}'s queue",
            event_pattern=events.EventPattern(
                source=["aws.s3"],
                detail_type=["Object Created"],
                detail={
                    "bucket": {"name": [props.landing_bucket.bucket_name]},
                    "object": {"key": [{"prefix": tenant.prefix}]},
                },
            ),
            targets=[targets.SqsQueue(self.queue, message_group_id=tenant.id)],
        )

        self.split = pipeline_function(
            self,
            "Split",
            FunctionSpec(
                function_name=names.SPLIT_FUNCTION.render(tenant.id),
                handler="split.handler",
                timeout=Duration.minutes(15),
                memory_size=512,
                description=f"Splits tenant {tenant.id}'s files into chunks",
            ),
            environment={
                "TENANT_ID": tenant.id,
                "FORMAT": tenant.format,
                "CHUNK_SIZE": str(tenant.chunk_size),
                "WORK_BUCKET": props.work_bucket.bucket_name,
                "LANDING_PREFIX": tenant.prefix,
            },
        )
        self.register = pipeline_function(
            self,
            "RegisterChunk",
            FunctionSpec(
                function_name=names.REGISTER_FUNCTION.render(tenant.id),
                handler="register_chunk.handler",
                timeout=Duration.minutes(5),
                description=f"Sends tenant {tenant.id}'s records to the core system, in order",
            ),
            environment={
                "TENANT_ID": tenant.id,
                "WORK_BUCKET": props.work_bucket.bucket_name,
                "SINK_URL": tenant.sink.url,
                "SINK_TIMEOUT_SECONDS": str(tenant.sink.timeout_seconds),
            },
        )
        self._grant_tenant_objects(props)

        workflow_logs = logs.LogGroup(
            self,
            "WorkflowLogs",
            log_group_name=f"/aws/vendedlogs/states/{names.STATE_MACHINE.render(tenant.id)}",
            retention=logs.RetentionDays.THREE_MONTHS,
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.state_machine = sfn.StateMachine(
            self,
            "Workflow",
            state_machine_name=names.STATE_MACHINE.render(tenant.id),
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_chainable(
                build_definition(
                    Construct(self, "Steps"),  # state names are construct ids: keep them apart
                    tenant_id=tenant.id,
                    split_function=self.split.function,
                    register_function=self.register.function,
                    alarm_topic=props.alarm_topic,
                )
            ),
            logs=sfn.LogOptions(destination=workflow_logs, level=sfn.LogLevel.ERROR, include_execution_data=False),
            tracing_enabled=True,
        )
        # The failure notification goes to the encrypted alarm topic.
        props.alarm_topic_key.grant(self.state_machine.role, "kms:GenerateDataKey", "kms:Decrypt")

        self.controller = pipeline_function(
            self,
            "Controller",
            FunctionSpec(
                function_name=names.CONTROLLER_FUNCTION.render(tenant.id),
                handler="controller.handler",
                timeout=CONTROLLER_TIMEOUT,
                reserved_concurrency=1,
                description=f"Starts tenant {tenant.id}'s workflow, one file at a time",
            ),
            environment={
                "TENANT_ID": tenant.id,
                "STATE_MACHINE_ARN": self.state_machine.state_machine_arn,
                "GATE_TABLE_NAME": props.gate_table.table_name,
                "METRIC_NAMESPACE": names.METRIC_NAMESPACE,
            },
        )
        self.controller.function.add_event_source(event_sources.SqsEventSource(self.queue, batch_size=1))
        self._grant_controller(props)

        self.alarms = build_alarms(
            self,
            AlarmTargets(
                tenant_id=tenant.id,
                queue=self.queue,
                state_machine=self.state_machine,
                functions=self._made_functions,
                topic=props.alarm_topic,
            ),
            tenant.alarms,
        )
        self._acknowledge_findings(props)

    @property
    def functions(self) -> dict[str, lambda_.Function]:
        """The pipeline's functions by role: ``controller``, ``split``, ``register``."""
        return {role: made.function for role, made in self._made_functions.items()}

    @property
    def _made_functions(self) -> dict[str, PipelineFunction]:
        return {"controller": self.controller, "split": self.split, "register": self.register}

    def _grant_tenant_objects(self, props: TenantPipelineProps) -> None:
        """Split reads only this tenant's prefix; chunks live under the tenant's own folder."""
        tenant = props.tenant
        self.split.role.add_to_policy(
            iam.PolicyStatement(
                sid="ReadOwnLandingPrefix",
                actions=["s3:GetObject", "s3:GetObjectVersion"],
                resources=[props.landing_bucket.arn_for_objects(f"{tenant.prefix}*")],
            )
        )
        self.split.role.add_to_policy(
            iam.PolicyStatement(
                sid="WriteOwnChunks",
                actions=["s3:PutObject"],
                resources=[props.work_bucket.arn_for_objects(f"{tenant.id}/*")],
            )
        )
        self.register.role.add_to_policy(
            iam.PolicyStatement(
                sid="ReadOwnChunks",
                actions=["s3:GetObject"],
                resources=[props.work_bucket.arn_for_objects(f"{tenant.id}/*")],
            )
        )

    def _grant_controller(self, props: TenantPipelineProps) -> None:
        """Start and describe only this tenant's workflow; touch only this tenant's gate item."""
        role = self.controller.role
        self.state_machine.grant_start_execution(role)
        role.add_to_policy(
            iam.PolicyStatement(
                sid="DescribeOwnExecutions",
                actions=["states:DescribeExecution"],
                resources=[self._execution_arn_pattern()],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="OwnGateItemOnly",
                actions=["dynamodb:GetItem", "dynamodb:UpdateItem"],
                resources=[props.gate_table.table_arn],
                conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [props.tenant.id]}},
            )
        )

    def _execution_arn_pattern(self) -> str:
        return Stack.of(self).format_arn(
            service="states",
            resource="execution",
            resource_name=f"{names.STATE_MACHINE.render(self.tenant_id)}:*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )

    def _acknowledge_findings(self, props: TenantPipelineProps) -> None:
        """Every wildcard left in this pipeline's policies is scoped to the tenant; each says why."""
        tenant = props.tenant
        landing = f"arn:<AWS::Partition>:s3:::{names.landing_bucket_name('<AWS::AccountId>', '<AWS::Region>')}"
        work = f"arn:<AWS::Partition>:s3:::{names.work_bucket_name('<AWS::AccountId>', '<AWS::Region>')}"
        executions = (
            "arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:"
            f"{names.STATE_MACHINE.render(tenant.id)}:*"
        )
        chunks_reason = "Chunk files are named per execution; the wildcard stays inside this tenant's own work folder."
        _acknowledge(
            self.split.role,
            ("AwsSolutions-IAM5", f"Resource::{landing}/{tenant.prefix}*",
             "Split reads whichever file the tenant drops, and only under this tenant's landing prefix."),
            ("AwsSolutions-IAM5", f"Resource::{work}/{tenant.id}/*", chunks_reason),
        )
        _acknowledge(self.register.role, ("AwsSolutions-IAM5", f"Resource::{work}/{tenant.id}/*", chunks_reason))
        _acknowledge(
            self.controller.role,
            ("AwsSolutions-IAM5", f"Resource::{executions}",
             "Execution names are the EventBridge event ids, unknown in advance; only this "
             "tenant's state machine's executions can be described."),
        )
        invoke_reason = (
            "CDK's LambdaInvoke grant covers the function's versions and aliases (ARN:*); "
            "it is still this tenant's function only."
        )
        _acknowledge(
            self.state_machine.role,
            ("AwsSolutions-IAM5", f"Resource::<{_logical_id(self.split.function)}.Arn>:*", invoke_reason),
            ("AwsSolutions-IAM5", f"Resource::<{_logical_id(self.register.function)}.Arn>:*", invoke_reason),
            ("AwsSolutions-IAM5", "Resource::*",
             "X-Ray trace segments and CloudWatch Logs vended-log delivery do not support "
             "resource-level permissions."),
        )
        _acknowledge(
            self.state_machine,
            ("AwsSolutions-SF1", None,
             "ERROR level on purpose: failures are what on-call needs in the logs; ALL would log "
             "every transition of every chunk (cost) that the execution history already keeps. "
             "Execution data is excluded so no record content reaches the logs."),
        )


def _acknowledge(scope: Construct, *findings: tuple[str, str | None, str]) -> None:
    for rule, finding, reason in findings:
        acknowledge(scope, rule, reason, finding)


def _logical_id(function: lambda_.Function) -> str:
    stack = Stack.of(function)
    return stack.resolve(stack.get_logical_id(function.node.default_child))
