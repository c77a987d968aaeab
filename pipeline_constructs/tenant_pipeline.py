"""``TenantPipeline``: everything one tenant owns, from its EventBridge rule to its alarms."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import ArnFormat, Aws, CfnOutput, Duration, RemovalPolicy, Stack, Token
from aws_cdk import aws_cloudwatch as cloudwatch
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

from lambdas import contract
from pipeline_constructs import budgets, encryption, names, routing
from pipeline_constructs.alarms import pipeline_alarms
from pipeline_constructs.config import BearerAuth, SigV4Auth, TenantConfig
from pipeline_constructs.functions import FunctionSpec, PipelineFunction, pipeline_function
from pipeline_constructs.nag import acknowledge, acknowledge_all
from pipeline_constructs.versions import ALIAS_NAME, live_alias, publish_version
from pipeline_constructs.workflow import (
    CompletionWait,
    State,
    build_definition,
    build_page_definition,
    build_section_definition,
    render,
)

#: The partition's token (one jsii call for every definition of every tenant).
_PARTITION = Aws.PARTITION

# The seed's queue and controller timings. The controller's timeout must stay below the
# visibility timeout, or a message still being handled is redelivered (double start).
QUEUE_VISIBILITY_TIMEOUT = Duration.seconds(30)
QUEUE_RETENTION = Duration.days(14)
QUEUE_RECEIVE_WAIT = Duration.seconds(20)
CONTROLLER_TIMEOUT = Duration.seconds(20)
#: A message that must wait is invisible this long unless the close of the file ahead makes it
#: visible first (fast hand-off). Below the 5-minute metric period, so the head-wait metric
#: has a point in every period while a tenant waits.
WAITING_VISIBILITY = Duration.minutes(4)
#: The period of every metric the pipeline's alarms watch.
METRIC_PERIOD = Duration.minutes(5)
#: Retry policy of every rule target (object-created -> queue, status -> closer): EventBridge's
#: own maximum, stated so that a reader sees it and a CDK default cannot change it. A target
#: that keeps failing (queue throttled, closer unavailable) is retried for a day; then the
#: event goes to the tenant's intake dead-letter queue (alarmed), never dropped.
INTAKE_RETRY_ATTEMPTS = 185
INTAKE_MAX_EVENT_AGE = Duration.hours(24)
#: As long as SQS keeps a message: the operator has two weeks to replay (`ops dlq replay`).
INTAKE_DLQ_RETENTION = Duration.days(14)


def register_timeout(chunk_size: int, sink_timeout_seconds: int, sink_batch_size: int = 1) -> Duration:
    """See `budgets.register_timeout_seconds`."""
    return Duration.seconds(budgets.register_timeout_seconds(chunk_size, sink_timeout_seconds, sink_batch_size))


@dataclass(frozen=True)
class SharedRefs:
    """The shared resources a tenant's pipeline plugs into. A tenant stack imports them by
    fixed name or SSM parameter (`stacks.shared_refs`); a stack that holds `SharedResources`
    passes its own."""

    landing_bucket: s3.IBucket
    work_bucket: s3.IBucket
    ledger_table: dynamodb.ITable
    alarm_topic: sns.ITopic
    alarm_topic_key: kms.IKey
    #: The bus that holds the tenant's two rules: its shard's bus with `routing.shards`.
    #: None: the account's default event bus.
    event_bus: events.IEventBus | None = None
    #: The ARN of the shared resources' customer-managed key (top-level `encryption`): the
    #: tenant's roles use it through S3 and DynamoDB. None: AWS-managed keys there.
    shared_kms_key_arn: str | None = None


class TenantPipeline(Construct):
    """Rule -> FIFO queue -> controller (concurrency 1) -> ordered workflow, with alarms.

    ``tenant``: the tenant's validated options (`config.TenantConfig`, from ``tenants.yaml``:
    their meaning is documented on the model's fields, docs/configuration.md); ``shared``: the
    shared resources it plugs into.

    Attributes: ``tenant``, ``shared``, ``tenant_id``, ``landing_prefix``, ``rule``, ``queue``, ``controller``,
    ``split``, ``register`` (each a `PipelineFunction`: function, role, log group),
    ``functions`` (role -> Lambda function), ``log_groups`` (role -> log group, the
    workflow's included), ``state_machine``, ``alarms`` (name -> alarm). Metrics:
    ``metric_head_message_wait``, ``metric_queue_age``, ``metric_error_log_lines(role)``,
    ``metric_executions_failed|timed_out|aborted|throttled``; ``version``, ``section_version``,
    ``page_version`` (each deploy's version of the three state machines) and ``alias`` (`live`,
    which the controller starts files through; versions.py); ``intake_dlq`` (standard queue
    of the events EventBridge could not deliver), ``metric_intake_dlq_messages``,
    ``metric_intake_failed_invocations``; ``metric_quarantined_messages``.
    """

    def __init__(self, scope: Construct, construct_id: str, *, tenant: TenantConfig, shared: SharedRefs) -> None:
        super().__init__(scope, construct_id)
        self._stack = Stack.of(self)
        self.tenant, self.shared = tenant, shared
        tenant_id = self.tenant_id = tenant.id
        self.landing_prefix = tenant.prefix
        #: The completion entry point (`completion.wait`), or None; made once the workflow exists.
        self.completion: PipelineFunction | None = None
        self._page_budget()
        #: The tenant's customer-managed key (`encryption.kms_key`), or None.
        self.kms_key: kms.IKey | None = (
            None if tenant.encryption is None else encryption.customer_key(
                self, "Key", tenant.encryption.kms_key, alias=encryption.tenant_key_alias(tenant_id),
                description=f"Encrypts tenant {tenant_id}'s queues, log groups and function environments",
            )
        )

        # Arrival order is the FIFO queue's order (one message group per tenant); key-sequence
        # order is the controller's, so that queue is a standard one: a file whose turn has not
        # come waits aside instead of blocking the file it waits for.
        fifo = tenant.ordering.by == "arrival"
        self.queue = sqs.Queue(
            self,
            "Queue",
            queue_name=(names.QUEUE if fifo else names.SEQUENCE_QUEUE).render(tenant_id),
            fifo=fifo or None,
            content_based_deduplication=fifo or None,
            visibility_timeout=QUEUE_VISIBILITY_TIMEOUT,
            retention_period=QUEUE_RETENTION,
            receive_message_wait_time=QUEUE_RECEIVE_WAIT,
            **encryption.queue_encryption(self.kms_key),
            enforce_ssl=True,
        )
        acknowledge(
            self.queue,
            "AwsSolutions-SQS3",
            "No DLQ by design: moving a failing head message aside would let later files of the "
            "tenant overtake it (breaks ordering). The message stays at the head and the stall "
            "alarm pages instead.",
        )

        # Where EventBridge puts an event it could not deliver to a target of this tenant's rules
        # (after INTAKE_RETRY_ATTEMPTS / INTAKE_MAX_EVENT_AGE). Standard, not FIFO: EventBridge
        # refuses FIFO dead-letter queues; `ops dlq replay` restores the upload order.
        self.intake_dlq = sqs.Queue(
            self,
            "IntakeDlq",
            queue_name=names.INTAKE_DLQ.render(tenant_id),
            retention_period=INTAKE_DLQ_RETENTION,
            **encryption.queue_encryption(self.kms_key),
            enforce_ssl=True,
        )
        acknowledge(
            self.intake_dlq,
            "AwsSolutions-SQS3",
            "This queue is itself the dead-letter queue of the tenant's EventBridge rule targets; "
            "its depth is alarmed (intake-dlq) and ops dlq replay empties it.",
        )

        self.event_bus_name = shared.event_bus.event_bus_name if shared.event_bus is not None else None
        self.rule = events.Rule(
            self,
            "ObjectCreatedRule",
            event_bus=shared.event_bus,
            rule_name=names.RULE.render(tenant_id),
            description=f"Files created under s3://<landing>/{tenant.prefix} go to tenant {tenant_id}'s queue",
            event_pattern=events.EventPattern(
                source=["aws.s3"],
                detail_type=["Object Created"],
                detail={
                    "bucket": {"name": [shared.landing_bucket.bucket_name]},
                    "object": {"key": [{"prefix": tenant.prefix}]},
                },
            ),
            targets=[
                targets.SqsQueue(
                    self.queue,
                    message_group_id=tenant_id if fifo else None,
                    dead_letter_queue=self.intake_dlq,
                    retry_attempts=INTAKE_RETRY_ATTEMPTS,
                    max_event_age=INTAKE_MAX_EVENT_AGE,
                )
            ],
        )

        self._only_own_rule_sends_to_queue()

        # Split and register share one role: the tenant's data plane (its landing prefix, its work
        # folder, its ledger items). IAM roles are an account quota (1,000 by default, 5,000 at
        # most): four roles a tenant (this one, the controller's, the closer's, the workflow's)
        # let 1,000 tenants share an account. Neither function can reach another tenant's data.
        self.data_role = iam.Role(
            self,
            "DataRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Execution role of tenant {tenant_id}'s split and register functions",
        )
        self.split = pipeline_function(
            self,
            "Split",
            FunctionSpec(
                tenant_id=tenant_id,
                role="split",
                function_name=names.SPLIT_FUNCTION.render(tenant_id),
                handler="split.handler",
                timeout=Duration.minutes(15),
                memory_size=512,
                description=f"Splits tenant {tenant_id}'s files into chunks",
            ),
            environment=contract.environment(
                contract.SplitEnv(
                    tenant_id=tenant_id,
                    format=tenant.format,
                    chunk_size=tenant.chunk_size,
                    work_bucket=shared.work_bucket.bucket_name,
                    landing_prefix=tenant.prefix,
                    ledger_table_name=shared.ledger_table.table_name,
                    duplicate_files=tenant.duplicate_files,
                    max_chunks=budgets.max_file_chunks(self.chunks_per_page, self.pages_per_section),
                )
            ),
            role=self.data_role,
            tracing=tenant.tracing,
            kms_key=self.kms_key,
        )
        self.register = pipeline_function(
            self,
            "RegisterChunk",
            FunctionSpec(
                tenant_id=tenant_id,
                role="register",
                function_name=names.REGISTER_FUNCTION.render(tenant_id),
                handler="register_chunk.handler",
                timeout=register_timeout(tenant.chunk_size, tenant.sink.timeout_seconds, tenant.sink.batch_size),
                description=f"Sends tenant {tenant_id}'s records to the core system, in order",
            ),
            environment=contract.environment(
                contract.RegisterEnv(
                    tenant_id=tenant_id,
                    work_bucket=shared.work_bucket.bucket_name,
                    ledger_table_name=shared.ledger_table.table_name,
                    sink_url=tenant.sink.url,
                    sink_timeout_seconds=tenant.sink.timeout_seconds,
                    sink_outage_budget_seconds=tenant.sink.outage_budget_seconds,
                    landing_prefix=tenant.prefix,
                    sink_batch_size=tenant.sink.batch_size,
                    # `sink.auth` but its invoke_arn (what IAM lets the function invoke, not a
                    # setting of the client); a type's absent fields keep the contract's defaults.
                    sink_auth=tenant.sink.auth.type,
                    **{f"sink_auth_{name}": value for name, value in
                       tenant.sink.auth.model_dump(exclude={"type", "invoke_arn"}).items()},
                )
            ),
            role=self.data_role,
            tracing=tenant.tracing,
            kms_key=self.kms_key,
        )
        self._grant_tenant_objects()
        self._attach_register_to_vpc()
        self._grant_sink_auth()

        state_machine_name = names.STATE_MACHINE.render(tenant_id)
        state_machine_arn = self._state_machine_arn(names.STATE_MACHINE)
        self.closer = pipeline_function(
            self,
            "Closer",
            FunctionSpec(
                tenant_id=tenant_id,
                role="closer",
                function_name=names.CLOSER_FUNCTION.render(tenant_id),
                handler="closer.handler",
                timeout=Duration.seconds(30),
                description=f"Records the close of tenant {tenant_id}'s executions and hands off to the next file",
            ),
            environment=contract.environment(
                contract.CloserEnv(
                    tenant_id=tenant_id,
                    # The name is fixed, so the ARN is known without referring to the state
                    # machine (which refers to this function): no dependency cycle.
                    state_machine_arn=state_machine_arn,
                    ledger_table_name=shared.ledger_table.table_name,
                    queue_url=self.queue.queue_url,
                    alarm_topic_arn=shared.alarm_topic.topic_arn,
                    on_failure=tenant.on_failure,
                )
            ),
            tracing=tenant.tracing,
            kms_key=self.kms_key,
        )

        self.workflow_log_group = logs.LogGroup(
            self,
            "WorkflowLogs",
            log_group_name=contract.STATE_MACHINE_LOG_GROUP.render(state_machine=state_machine_name),
            retention=logs.RetentionDays.THREE_MONTHS,
            removal_policy=RemovalPolicy.RETAIN,
            encryption_key=self.kms_key,
        )
        # The file's, its sections' and its pages' state machines are one workflow: one role
        # (IAM roles are an account quota; see `data_role`).
        self.workflow_role = iam.Role(
            self,
            "WorkflowRole",
            assumed_by=iam.ServicePrincipal("states.amazonaws.com"),
            description=f"Execution role of tenant {tenant_id}'s file, section and page state machines",
        )
        # Without a limit an execution may run a year, and the timed-out alarm could only fire
        # then; the close of a TIMED_OUT execution halts the tenant like a failure. A child never
        # outlives its file: the three state machines have the same limit.
        self._time_limit_seconds = tenant.file_time_limit
        self._page_state_machine()
        self._section_state_machine()
        self._grant_workflow_tasks(self.split.function, self.closer.function)
        self._grant_workflow_tasks(child=names.SECTION_STATE_MACHINE)
        self.state_machine = sfn.StateMachine(
            self,
            "Workflow",
            state_machine_name=state_machine_name,
            role=self.workflow_role,
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_string(render(
                build_definition(
                    partition=_PARTITION,
                    split_function_arn=self.split.function.function_arn,
                    page_version_arn=self.page_version.attr_arn,
                    section_version_arn=self.section_version.attr_arn,
                    closer_function_arn=self.closer.function.function_arn,
                    chunks_per_page=self.chunks_per_page,
                    pages_per_section=self.pages_per_section,
                    completion=self._completion_wait(),
                ),
                self._time_limit_seconds,
            )),
            logs=sfn.LogOptions(
                destination=self.workflow_log_group, level=sfn.LogLevel.ERROR, include_execution_data=False
            ),
            tracing_enabled=tenant.tracing,
        )
        self._publish_file_workflow()

        # Backstop of the workflow's last state (status-change events are best effort, and the
        # workflow cannot record a timeout or an abort itself); RUNNING too, to stop an
        # execution started outside the gate (a hand-made redrive). Files start through the
        # alias: the event may name the state machine bare or qualified, both match.
        self.status_rule = events.Rule(
            self,
            "ExecutionStatusRule",
            event_bus=shared.event_bus,
            rule_name=names.STATUS_RULE.render(tenant_id),
            description=f"Status changes of tenant {tenant_id}'s executions go to its closer",
            event_pattern=events.EventPattern(
                source=["aws.states"],
                detail_type=["Step Functions Execution Status Change"],
                detail={
                    "stateMachineArn": routing.own_workflow_arns(self.state_machine.state_machine_arn),
                    "status": ["RUNNING", *sorted(contract.CLOSED_STATUSES)],
                },
            ),
            targets=[
                targets.LambdaFunction(
                    self.closer.function,
                    dead_letter_queue=self.intake_dlq,
                    retry_attempts=INTAKE_RETRY_ATTEMPTS,
                    max_event_age=INTAKE_MAX_EVENT_AGE,
                )
            ],
        )

        self.controller = pipeline_function(
            self,
            "Controller",
            FunctionSpec(
                tenant_id=tenant_id,
                role="controller",
                function_name=names.CONTROLLER_FUNCTION.render(tenant_id),
                handler="controller.handler",
                timeout=CONTROLLER_TIMEOUT,
                reserved_concurrency=1,
                description=f"Starts tenant {tenant_id}'s workflow, one file at a time",
            ),
            environment=contract.environment(
                contract.ControllerEnv(
                    tenant_id=tenant_id,
                    # The `live` alias: a file runs on the version this deploy published (or
                    # the one an operator rolled back to); execution ARNs drop the qualifier.
                    state_machine_arn=self.alias.attr_arn,
                    ledger_table_name=shared.ledger_table.table_name,
                    queue_url=self.queue.queue_url,
                    metric_namespace=contract.METRIC_NAMESPACE,
                    on_failure=tenant.on_failure,
                    waiting_visibility_seconds=int(WAITING_VISIBILITY.to_seconds()),
                    work_bucket=shared.work_bucket.bucket_name,
                    landing_bucket=shared.landing_bucket.bucket_name,
                    landing_prefix=tenant.prefix,
                    ordering=tenant.ordering.by,
                    sequence_pattern=tenant.ordering.sequence_pattern,
                    first_sequence=tenant.ordering.first_sequence,
                )
            ),
            tracing=tenant.tracing,
            kms_key=self.kms_key,
        )
        # Partial batch responses: a waiting message is a reported item failure, not a function
        # error, so Lambda does not back off its polling.
        self.controller.function.add_event_source(
            event_sources.SqsEventSource(self.queue, batch_size=1, report_batch_item_failures=True)
        )
        self._grant_controller()
        self._grant_closer()
        self._outputs()
        if tenant.completion.wait:
            self.completion = self._completion_entry_point()

        self.alarms = pipeline_alarms(
            self,
            shared.alarm_topic,
            tenant.alarms,
            # Files wait for a missing sequence number only when ordered by key sequence.
            sequence_gap_alarm_after_seconds=None if fifo else tenant.ordering.gap_alarm_after_seconds,
        )
        self._encryption()
        self._acknowledge_findings()

    # -- what the pipeline exposes ------------------------------------------------------------

    @property
    def pipeline_functions(self) -> dict[str, PipelineFunction]:
        """The pipeline's functions with their roles and log groups, by role (``completion`` too,
        with `completion.wait`: its ERROR lines page like the others')."""
        functions = {"controller": self.controller, "split": self.split, "register": self.register, "closer": self.closer}
        if self.completion is not None:
            functions["completion"] = self.completion
        return functions

    @property
    def functions(self) -> dict[str, lambda_.Function]:
        """The pipeline's functions by role: ``controller``, ``split``, ``register``."""
        return {role: made.function for role, made in self.pipeline_functions.items()}

    @property
    def log_groups(self) -> dict[str, logs.ILogGroup]:
        """Every log group of the pipeline by role (the functions', and ``workflow``)."""
        groups: dict[str, logs.ILogGroup] = {role: made.log_group for role, made in self.pipeline_functions.items()}
        groups["workflow"] = self.workflow_log_group
        return groups

    def metric_head_message_wait(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        """How long the message at the head of the queue has waited (controller, EMF; Maximum).

        Unlike the queue's age, it cannot go blind to a head message that is received again
        and again without being deleted (a blocked tenant)."""
        return cloudwatch.Metric(
            namespace=contract.METRIC_NAMESPACE,
            metric_name=contract.HEAD_WAIT_METRIC,
            dimensions_map={contract.TENANT_DIMENSION: self.tenant_id},
            statistic="Maximum",
            period=period,
        )

    def metric_quarantined_messages(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        """Messages the controller quarantined because they were not usable file events (EMF; Sum)."""
        return self._tenant_metric(contract.QUARANTINED_MESSAGES_METRIC, "Sum", period)

    def metric_late_arrivals(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        """File events that arrived older than the last file started (controller, EMF; Sum)."""
        return self._tenant_metric(contract.LATE_ARRIVAL_METRIC, "Sum", period)

    def metric_sequence_gap(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        """``key_sequence`` ordering: how long a later file has waited for a missing sequence
        number (controller, EMF; Maximum)."""
        return self._tenant_metric(contract.SEQUENCE_GAP_METRIC, "Maximum", period)

    def metric_queue_age(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        """Age of the oldest message in the queue (Maximum)."""
        return self.queue.metric_approximate_age_of_oldest_message(period=period, statistic="Maximum")

    def metric_error_log_lines(self, role: str, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        """ERROR log lines of the function with ``role`` (``controller``, ``split``, ``register``)."""
        return self.pipeline_functions[role].metric_error_log_lines(period=period)

    def metric_intake_dlq_messages(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        """Events EventBridge gave up delivering to this tenant's queue or closer (visible
        messages of the intake dead-letter queue, Maximum)."""
        return self.intake_dlq.metric_approximate_number_of_messages_visible(period=period, statistic="Maximum")

    def metric_intake_failed_invocations(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.MathExpression:
        """Deliveries of this tenant's rules that failed for good, and dead-lettering that failed
        (AWS/Events ``FailedInvocations`` + ``InvocationsFailedToBeSentToDlq`` of both rules, Sum).

        The second is the only way an event is lost outright (the DLQ itself refused it)."""
        metrics: dict[str, cloudwatch.IMetric] = {}
        for rule_id, rule_name in zip(("objectcreated", "status"), self.rule_names):
            for metric_id, metric_name in (("failed", "FailedInvocations"), ("undelivered", "InvocationsFailedToBeSentToDlq")):
                # A rule on a custom bus (a shard's) publishes with the EventBusName dimension too.
                bus = {"EventBusName": self.event_bus_name} if self.event_bus_name else {}
                metrics[f"{metric_id}{rule_id}"] = cloudwatch.Metric(
                    namespace="AWS/Events",
                    metric_name=metric_name,
                    dimensions_map={**bus, "RuleName": rule_name},
                    statistic="Sum",
                    period=period,
                )
        # FILL: a rule without failures publishes nothing; the sum must still be a number.
        return cloudwatch.MathExpression(
            expression=" + ".join(f"FILL({metric_id}, 0)" for metric_id in metrics),
            using_metrics=metrics,
            label=f"Failed EventBridge deliveries of tenant {self.tenant_id}",
            period=period,
        )

    @property
    def rule_names(self) -> tuple[str, str]:
        """The literal names of the tenant's rules, object-created then status (metric dimensions)."""
        return names.RULE.render(self.tenant_id), names.STATUS_RULE.render(self.tenant_id)

    def metric_executions_failed(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        return self.state_machine.metric_failed(period=period, statistic="Sum")

    def metric_executions_timed_out(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        return self.state_machine.metric_timed_out(period=period, statistic="Sum")

    def metric_executions_aborted(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        return self.state_machine.metric_aborted(period=period, statistic="Sum")

    def metric_executions_throttled(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        return self.state_machine.metric_throttled(period=period, statistic="Sum")

    def metric_records_sent(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        """Records the core system acknowledged (register function, EMF; Sum)."""
        return self._tenant_metric(contract.RECORDS_SENT_METRIC, "Sum", period)

    def metric_sink_requests(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        """POSTs the core system acknowledged: records, or batches in batch mode (register function, EMF; Sum)."""
        return self._tenant_metric(contract.SINK_REQUESTS_METRIC, "Sum", period)

    def metric_sink_errors(self, *, period: Duration = METRIC_PERIOD) -> cloudwatch.Metric:
        """Failed tries of the core system (register function, EMF; Sum)."""
        return self._tenant_metric(contract.SINK_ERRORS_METRIC, "Sum", period)

    def _tenant_metric(self, name: str, statistic: str, period: Duration) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace=contract.METRIC_NAMESPACE,
            metric_name=name,
            dimensions_map={contract.TENANT_DIMENSION: self.tenant_id},
            statistic=statistic,
            period=period,
        )

    # -- the completion callback (completion.wait) -----------------------------------------------

    def _completion_wait(self) -> CompletionWait | None:
        completion = self.tenant.completion
        if not completion.wait:
            return None
        return CompletionWait(
            timeout_seconds=completion.timeout_seconds,
            heartbeat_seconds=completion.heartbeat_seconds,
            ledger_table_name=self.shared.ledger_table.table_name,
        )

    def _completion_entry_point(self) -> PipelineFunction:
        """The function the core system invokes (lambda:InvokeFunction, SigV4: IAM-authenticated,
        never anonymous) to confirm or reject the tenant's waiting file. Only the principals of
        `completion.callers` may invoke it (its resource policy); its own role reads and
        answers only this tenant's position and tokens of this tenant's state machine."""
        made = pipeline_function(
            self,
            "Completion",
            FunctionSpec(
                tenant_id=self.tenant_id,
                role="completion",
                function_name=names.COMPLETION_FUNCTION.render(self.tenant_id),
                handler="completion.handler",
                timeout=Duration.seconds(10),
                description=f"The core system confirms or rejects tenant {self.tenant_id}'s waiting file",
            ),
            environment=contract.environment(
                contract.CompletionEnv(tenant_id=self.tenant_id, ledger_table_name=self.shared.ledger_table.table_name)
            ),
            tracing=self.tenant.tracing,
            kms_key=self.kms_key,
        )
        for index, caller in enumerate(self.tenant.completion.callers):
            # One permission per caller, ids by position: the list is the contract with the core system.
            made.function.add_permission(
                f"CoreSystemCaller{index}",
                principal=iam.ArnPrincipal(caller),
                action="lambda:InvokeFunction",
            )
        # Read the position (which file waits, its token); record the answer. Own partition only.
        made.role.add_to_policy(
            iam.PolicyStatement(
                sid="OwnPositionOnly",
                actions=["dynamodb:GetItem", "dynamodb:UpdateItem"],
                resources=[self.shared.ledger_table.table_arn],
                conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [self.tenant_id]}},
            )
        )
        # SendTaskSuccess/Failure/Heartbeat scoped to this tenant's file state machine.
        self.state_machine.grant_task_response(made.role)
        # The workflow's callback task writes the token to the tenant's own position only.
        self.workflow_role.add_to_policy(
            iam.PolicyStatement(
                sid="LeaveCompletionTokenOnOwnPosition",
                actions=["dynamodb:UpdateItem"],
                resources=[self.shared.ledger_table.table_arn],
                conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [self.tenant_id]}},
            )
        )
        CfnOutput(self, "CompletionFunctionName", value=made.function.function_name,
                  description=f"CompletionFunctionName of tenant {self.tenant_id} (the core system invokes it)")
        return made

    # -- customer-managed keys (encryption.kms_key, shared_kms_key_arn) ---------------------------

    def _encryption(self) -> None:
        """The key policy of the tenant's key (its log groups, its rules) and every role's use of
        the tenant's and the shared key: each only through the service that stores the data."""
        roles = {role: made.role for role, made in self.pipeline_functions.items()}
        if self.kms_key is not None:
            stack = self._stack
            log_groups = [made.log_group_name for made in self.pipeline_functions.values()] + [
                f"/aws/vendedlogs/states/{name.render(self.tenant_id)}"
                for name in (names.STATE_MACHINE, names.SECTION_STATE_MACHINE, names.PAGE_STATE_MACHINE)
            ]
            # The object-created rule sends to the queue, both rules dead-letter to the intake DLQ.
            bus = f"{self.event_bus_name}/" if self.event_bus_name else ""
            rules = [stack.format_arn(service="events", resource="rule", resource_name=f"{bus}{name}")
                     for name in self.rule_names]
            encryption.pin_key_policy(self.kms_key, [
                encryption.allow_log_groups(self.kms_key, log_groups, sid="CloudWatchLogsOwnLogGroups"),
                encryption.allow_rules(self.kms_key, rules, sid="EventBridgeDeliversOwnRules"),
            ])
            for role in dict.fromkeys(roles.values()):  # split and register share one role
                # Lambda decrypts a function's environment at start with its execution role. (The
                # controller's kms:Decrypt of the queue's messages is the SQS event source's grant.)
                encryption.grant_via(role, self.kms_key.key_arn, ["kms:Decrypt"], ["lambda"],
                                     sid="DecryptOwnEnvironment")
        key_arn = self.shared.shared_kms_key_arn
        if key_arn is None:
            return
        landing, work = self.shared.landing_bucket.bucket_arn, self.shared.work_bucket.bucket_arn
        encryption.grant_via(self.data_role, key_arn, ["kms:Decrypt"], ["s3"], sid="DecryptOwnLandingFiles",
                             bucket_arn=landing)
        encryption.grant_via(self.data_role, key_arn, ["kms:GenerateDataKey", "kms:Decrypt"], ["s3"],
                             sid="EncryptOwnChunks", bucket_arn=work)
        encryption.grant_via(self.controller.role, key_arn, ["kms:GenerateDataKey"], ["s3"],
                             sid="EncryptQuarantinedMessages", bucket_arn=work)
        ledger_users: list[iam.IRole] = [self.data_role, *(roles[r] for r in roles if r not in ("split", "register"))]
        if self.tenant.completion.wait:
            ledger_users.append(self.workflow_role)  # it leaves the completion token on the position
        for role in ledger_users:
            # The table key: DynamoDB decrypts it with the caller's permission.
            encryption.grant_via(role, key_arn, ["kms:Decrypt"], ["dynamodb"], sid="UseLedgerTableKey")

    # -- permissions ----------------------------------------------------------------------------

    def _grant_tenant_objects(self) -> None:
        """Split and register (one role) read only this tenant's landing prefix; indexes live
        under the tenant's own folder."""
        own_work = self.shared.work_bucket.arn_for_objects(f"{contract.work_prefix(self.tenant_id)}*")
        self.data_role.add_to_policy(
            iam.PolicyStatement(
                # Split reads whichever file the tenant drops; register reads its chunk with a
                # ranged GET of the pinned landing object version.
                sid="ReadOwnLandingPrefix",
                actions=["s3:GetObject", "s3:GetObjectVersion"],
                resources=[self.shared.landing_bucket.arn_for_objects(f"{self.landing_prefix}*")],
            )
        )
        self.data_role.add_to_policy(
            iam.PolicyStatement(
                sid="OwnChunks",
                # Split writes the chunk index and manifest (PutObject covers the multipart upload
                # of a large index; Abort gives up one of a failed split) and reads them when a
                # resumed file reuses them; register reads them (ranged GETs of the index).
                actions=["s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload"],
                resources=[own_work],
            )
        )
        self.data_role.add_to_policy(
            iam.PolicyStatement(
                # Without it a missing manifest answers 403 instead of 404.
                sid="ListOwnChunks",
                actions=["s3:ListBucket"],
                resources=[self.shared.work_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{contract.work_prefix(self.tenant_id)}*"]}},
            )
        )
        # Register's fence and progress; split looks up the content of files that succeeded
        # (duplicate_files: skip).
        self._grant_own_ledger(self.data_role, "dynamodb:GetItem", "dynamodb:UpdateItem")

    def _only_own_rule_sends_to_queue(self) -> None:
        """CDK's `SqsQueue` target leaves out its `aws:SourceArn` condition when the queue has a
        customer-managed key (aws-cdk issue 11158: the rule's ARN would make the key depend on the
        rule); `events.amazonaws.com` could then send to the queue from any rule of any account.
        The rule's ARN from its fixed name has no such cycle: put the condition back."""
        queue_policy = self.queue.node.try_find_child("Policy")
        if self.kms_key is None or not isinstance(queue_policy, sqs.QueuePolicy):
            return
        stack = self._stack
        bus = f"{self.event_bus_name}/" if self.event_bus_name else ""
        rule_arn = stack.format_arn(service="events", resource="rule",
                                    resource_name=f"{bus}{names.RULE.render(self.tenant_id)}")
        statements = stack.resolve(queue_policy.document)["Statement"]
        (index,) = [i for i, statement in enumerate(statements)
                    if statement.get("Principal") == {"Service": "events.amazonaws.com"} and "Condition" not in statement]
        policy = queue_policy.node.default_child
        assert isinstance(policy, sqs.CfnQueuePolicy)
        policy.add_property_override(f"PolicyDocument.Statement.{index}.Condition",
                                     {"ArnEquals": {"aws:SourceArn": rule_arn}})

    def _attach_register_to_vpc(self) -> None:
        """With `network`, the register function (only it: it alone calls the core system) runs
        in the tenant's subnets. The L1 `VpcConfig` by id: the L2 `vpc=` would need the subnets'
        Availability Zones (a lookup or more config) and attaches the AWS managed policy
        AWSLambdaVPCAccessExecutionRole (`*` on every ENI action); Lambda needs neither.

        Lambda creates and deletes the function's network interfaces with its execution role,
        the data role split shares. The EC2 actions of AWSLambdaVPCAccessExecutionRole (v3,
        https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AWSLambdaVPCAccessExecutionRole.html),
        scoped: Create only in the configured subnets and security groups, Delete and the address
        assignments only of interfaces in the VPC, DescribeNetworkInterfaces and DescribeSubnets
        on `*` (they support no resource-level permission); its logs actions are the function's
        own log group grant. The function depends on the role's policy, so CloudFormation grants
        these before Lambda checks them at creation."""
        network = self.tenant.network
        if network is None:
            return
        function = self.register.function.node.default_child
        assert isinstance(function, lambda_.CfnFunction)
        function.vpc_config = lambda_.CfnFunction.VpcConfigProperty(
            subnet_ids=list(network.subnet_ids), security_group_ids=list(network.security_group_ids)
        )
        stack = self._stack

        def ec2_arn(resource: str, name: str) -> str:
            return stack.format_arn(service="ec2", resource=resource, resource_name=name)

        subnets = [ec2_arn("subnet", subnet) for subnet in network.subnet_ids]
        self.data_role.add_to_policy(iam.PolicyStatement(
            sid="RegisterVpcDescribe",
            actions=["ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets"],
            resources=["*"],
        ))
        # EC2 authorizes CreateNetworkInterface on the new interface (no id yet, and no
        # ec2:Subnet key: the Service Authorization Reference lists only request tags for it),
        # the subnet and each security group: naming the subnets and groups is what scopes it.
        self.data_role.add_to_policy(iam.PolicyStatement(
            sid="RegisterVpcCreateInterfaces",
            actions=["ec2:CreateNetworkInterface"],
            resources=[ec2_arn("network-interface", "*"), *subnets,
                       *(ec2_arn("security-group", group) for group in network.security_group_ids)],
        ))
        # By VPC, not subnet: interfaces left in a subnet since removed from the config are
        # still cleaned up.
        self.data_role.add_to_policy(iam.PolicyStatement(
            sid="RegisterVpcManageInterfaces",
            actions=["ec2:DeleteNetworkInterface", "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"],
            resources=[ec2_arn("network-interface", "*")],
            conditions={"ArnEquals": {"ec2:Vpc": ec2_arn("vpc", network.vpc_id)}},
        ))
        partition, region, account = _as_nag_shows(stack)
        _acknowledge(
            self.data_role,
            ("AwsSolutions-IAM5", "Resource::*",
             "ec2:DescribeNetworkInterfaces and ec2:DescribeSubnets (Lambda attaching the register function to "
             "the tenant's subnets with this role) support no resource-level permission; X-Ray trace segments "
             "(tracing: true) neither."),
            ("AwsSolutions-IAM5", f"Resource::arn:{partition}:ec2:{region}:{account}:network-interface/*",
             "Lambda names the register function's network interfaces itself; creating one is limited to the "
             "tenant's subnets and security groups (named in the same statement), deleting one to its VPC "
             "(ec2:Vpc)."),
        )

    def _grant_sink_auth(self) -> None:
        """The register function's credentials for the core system: read its bearer token's
        secret, or invoke the IAM-authorized API or function URL it signs for. Split shares the
        role, so each statement holds only for credentials used by the register function
        (`lambda:SourceFunctionArn`, built from the fixed function name: no cycle)."""
        register_only = {"ArnEquals": {"lambda:SourceFunctionArn": self._stack.format_arn(
            service="lambda", resource="function", resource_name=names.REGISTER_FUNCTION.render(self.tenant_id),
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )}}
        auth = self.tenant.sink.auth
        statements: list[iam.PolicyStatement] = []
        if isinstance(auth, BearerAuth):
            statements.append(iam.PolicyStatement(
                sid="ReadOwnSinkToken", actions=["secretsmanager:GetSecretValue"],
                resources=[sink_secret_arn(self, auth.secret)], conditions=register_only,
            ))
        elif isinstance(auth, SigV4Auth) and auth.service == "execute-api":
            statements.append(iam.PolicyStatement(
                sid="InvokeOwnSinkApi", actions=["execute-api:Invoke"],
                resources=[auth.invoke_arn], conditions=register_only,
            ))
        elif isinstance(auth, SigV4Auth):
            # Function URLs created since October 2025 need both actions
            # (https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html); InvokeFunction only
            # through the URL, InvokeFunctionUrl only of an IAM-authorized URL.
            statements.append(iam.PolicyStatement(
                sid="InvokeOwnSinkFunctionUrl", actions=["lambda:InvokeFunctionUrl"],
                resources=[auth.invoke_arn],
                conditions={**register_only, "StringEquals": {"lambda:FunctionUrlAuthType": "AWS_IAM"}},
            ))
            statements.append(iam.PolicyStatement(
                sid="InvokeOwnSinkFunctionThroughUrl", actions=["lambda:InvokeFunction"],
                resources=[auth.invoke_arn],
                conditions={**register_only, "Bool": {"lambda:InvokedViaFunctionUrl": "true"}},
            ))
        for statement in statements:
            self.data_role.add_to_policy(statement)

    def _page_budget(self) -> None:
        """`chunks_per_page` and the register invocations per chunk: what bounds a page's history.
        `parse_config` refuses a tenant these do not fit; a `TenantConfig` made otherwise is
        checked here."""
        tenant = self.tenant
        size, timeout, outage, batch = (tenant.chunk_size, tenant.sink.timeout_seconds,
                                        tenant.sink.outage_budget_seconds, tenant.sink.batch_size)
        self.invocation_budget = budgets.register_invocation_budget(size, timeout, outage, batch)
        most = budgets.max_chunks_per_page(size, timeout, outage, batch)
        if most < 1:
            raise ValueError(
                f"tenant {tenant.id}: not one chunk fits a page's history budget with a "
                f"{outage} s outage budget; use a shorter sink.outage_budget_seconds"
            )
        wanted = most if tenant.chunks_per_page is None else tenant.chunks_per_page
        if not 1 <= wanted <= most:
            raise ValueError(f"tenant {tenant.id}: chunks_per_page {wanted} must be from 1 to {most}")
        self.chunks_per_page = wanted
        most_pages = budgets.max_pages_per_section()
        pages = most_pages if tenant.pages_per_section is None else tenant.pages_per_section
        if not 1 <= pages <= most_pages:
            raise ValueError(f"tenant {tenant.id}: pages_per_section {pages} must be from 1 to {most_pages}")
        self.pages_per_section = pages

    def _page_state_machine(self) -> None:
        """The child state machine: one page of a file's chunks per execution, started (and
        waited for) by the parent's `RunPage`. Its executions are not watched by the status
        rule: the parent's close is the file's close, and the register function's fence
        checks the parent's execution name, which the page carries."""
        self._grant_workflow_tasks(self.register.function)
        self.page_log_group, self.page_state_machine, self.page_version = self._child_state_machine(
            "Page", names.PAGE_STATE_MACHINE,
            build_page_definition(
                partition=_PARTITION,
                register_function_arn=self.register.function.function_arn,
                chunks_per_page=self.chunks_per_page,
                invocation_budget=self.invocation_budget,
            ),
        )

    def _section_state_machine(self) -> None:
        """The middle state machine: one section of a file's pages per execution, started (and
        waited for) by the parent's `RunSection` when a file has more pages than one section
        holds. Like pages, its executions are not watched by the status rule. Its definition
        names the page version: a page change publishes a section version too."""
        self._grant_workflow_tasks(child=names.PAGE_STATE_MACHINE, rule=True)
        self.section_log_group, self.section_state_machine, self.section_version = self._child_state_machine(
            "Section", names.SECTION_STATE_MACHINE,
            build_section_definition(
                partition=_PARTITION,
                page_version_arn=self.page_version.attr_arn,
                chunks_per_page=self.chunks_per_page,
                pages_per_section=self.pages_per_section,
            ),
        )

    def _child_state_machine(
        self, kind: str, name: names.DerivedName, definition: State
    ) -> tuple[logs.LogGroup, sfn.StateMachine, sfn.CfnStateMachineVersion]:
        """A child workflow (`kind` Page or Section): its log group, its state machine on the
        shared workflow role, and this deploy's version of it."""
        machine_name = name.render(self.tenant_id)
        log_group = logs.LogGroup(
            self,
            f"{kind}WorkflowLogs",
            log_group_name=contract.STATE_MACHINE_LOG_GROUP.render(state_machine=machine_name),
            retention=logs.RetentionDays.THREE_MONTHS,
            removal_policy=RemovalPolicy.RETAIN,
            encryption_key=self.kms_key,
        )
        machine = sfn.StateMachine(
            self,
            f"{kind}Workflow",
            state_machine_name=machine_name,
            role=self.workflow_role,
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_string(render(definition, self._time_limit_seconds)),
            logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ERROR, include_execution_data=False),
            tracing_enabled=self.tenant.tracing,
        )
        version = publish_version(
            self, f"{kind}WorkflowVersion", machine,
            f"Tenant {self.tenant_id}'s {kind.lower()} workflow as one deploy published it",
        )
        return log_group, machine, version

    def _publish_file_workflow(self) -> None:
        """The parent's version (its definition names the children's versions, so any change
        of the three publishes one) and the `live` alias the controller starts files through."""
        self.version = publish_version(
            self, "WorkflowVersion", self.state_machine,
            f"Tenant {self.tenant_id}'s file workflow (and, pinned, its section and page versions) as one deploy "
            "published it",
        )
        self.alias = live_alias(
            self, "WorkflowLiveAlias", self.version,
            f"Tenant {self.tenant_id}'s files start here; point it at an earlier version to roll back",
        )

    def _grant_own_ledger(self, role: iam.IRole, *actions: str) -> None:
        """Only this tenant's items of the ledger (its partition)."""
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="OwnLedgerItemsOnly",
                actions=list(actions),
                resources=[self.shared.ledger_table.table_arn],
                conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [self.tenant_id]}},
            )
        )

    def _grant_controller(self) -> None:
        """Start and describe only this tenant's workflow; touch only this tenant's ledger items."""
        role = self.controller.role
        # Step Functions authorizes a start through an alias on the unqualified ARN; the
        # qualifier condition allows only the `live` alias (not the latest revision, nor a
        # version by number). https://docs.aws.amazon.com/step-functions/latest/dg/auth-version-alias.html
        role.add_to_policy(
            iam.PolicyStatement(
                sid="StartThroughLiveAlias",
                actions=["states:StartExecution"],
                resources=[self.state_machine.state_machine_arn],
                conditions={"StringEquals": {"states:StateMachineQualifier": ALIAS_NAME}},
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="DescribeOwnExecutions",
                actions=["states:DescribeExecution"],
                resources=[self._execution_arn_pattern()],
            )
        )
        # UpdateItem + PutItem: the claim is one transaction (position and event marker).
        # DeleteItem: key_sequence ordering forgets a waiting note once its file starts.
        self._grant_own_ledger(role, "dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:PutItem",
                               "dynamodb:DeleteItem")
        role.add_to_policy(
            iam.PolicyStatement(
                sid="QuarantineUnusableMessages",
                actions=["s3:PutObject"],
                resources=[self.shared.work_bucket.arn_for_objects(f"{contract.quarantine_prefix(self.tenant_id)}*")],
            )
        )

    def _grant_closer(self) -> None:
        """Record closes, hand off (the queue's visibility), notify, stop an execution started by hand."""
        role = self.closer.role
        # Query + DeleteItem: key_sequence ordering hands off to the next sequence number's note.
        self._grant_own_ledger(role, "dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:PutItem",
                               "dynamodb:Query", "dynamodb:DeleteItem")
        role.add_to_policy(
            iam.PolicyStatement(
                sid="HandOffOnOwnQueue",
                actions=["sqs:ChangeMessageVisibility"],
                resources=[self.queue.queue_arn],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="DescribeAndStopOwnExecutions",
                actions=["states:DescribeExecution", "states:StopExecution"],
                resources=[self._execution_arn_pattern()],
            )
        )
        # Not `grant_publish`: with an encrypted topic it adds kms:GenerateDataKey* (a wildcard).
        role.add_to_policy(
            iam.PolicyStatement(sid="NotifyFailures", actions=["sns:Publish"], resources=[self.shared.alarm_topic.topic_arn])
        )
        self.shared.alarm_topic_key.grant(role, "kms:GenerateDataKey", "kms:Decrypt")

    def _outputs(self) -> None:
        """What `ops` reads to find a tenant's resources in a deployed stack."""
        for output_id, value in {
            "TenantId": self.tenant_id,
            "QueueUrl": self.queue.queue_url,
            "StateMachineArn": self.state_machine.state_machine_arn,
            # `ops resume` starts the resumed execution through it, as the controller does.
            "StateMachineAliasArn": self.alias.attr_arn,
            "LandingPrefix": self.landing_prefix,
            "OnFailure": self.tenant.on_failure,
            "Ordering": self.tenant.ordering.by,
            "FirstSequence": str(self.tenant.ordering.first_sequence),
            # `ops dlq`: the intake dead-letter queue, and the status rule's target for replays.
            "IntakeDlqUrl": self.intake_dlq.queue_url,
            "CloserFunctionName": self.closer.function.function_name,
        }.items():
            CfnOutput(self, output_id, value=value, description=f"{output_id} of tenant {self.tenant_id} (read by ops)")

    def _execution_arn_pattern(self, name: names.DerivedName = names.STATE_MACHINE, suffix: str = ":*") -> str:
        """The executions of this tenant's state machine `name`: its fixed name, then `suffix`.
        Not `state_machine.grant_execution`: it derives the name from the ARN token with
        Fn::Select/Fn::Split; the literal name is as narrow and reads plainly in `cdk diff`."""
        return self._stack.format_arn(
            service="states",
            resource="execution",
            resource_name=f"{name.render(self.tenant_id)}{suffix}",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )

    def _state_machine_arn(self, name: names.DerivedName) -> str:
        """The ARN of this tenant's state machine `name`, from its fixed name (no reference)."""
        return self._stack.format_arn(
            service="states",
            resource="stateMachine",
            resource_name=name.render(self.tenant_id),
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )

    def _grant_workflow_tasks(self, *functions: lambda_.IFunction, child: names.DerivedName | None = None,
                              rule: bool = False) -> None:
        """The workflow role's statements for the tasks of the definitions (workflow.py writes
        them as data; these are the statements CDK's task classes add): invoke `functions`
        (their versions and aliases too, ARN:*), and start the state machine `child` `.sync`:
        start it, describe and stop its executions, and (`rule`, once for the role) the managed
        rule through which Step Functions learns that a child execution closed.

        The child by its fixed name's ARN, not by reference: the three state machines share one
        role, whose policy names the children; a reference would make each child depend on the
        policy that depends on it (a cycle). The definitions start children by *version* ARN;
        IAM authorizes that on the unqualified ARN (versions.py). Added in the order CDK added
        them, so the merged policy stays the same."""
        for function in functions:
            function.grant_invoke(self.workflow_role)
        if child is None:
            return
        statements = [
            iam.PolicyStatement(actions=["states:StartExecution"], resources=[self._state_machine_arn(child)]),
            # `<child>*`, as CDK writes it: a child's execution name starts with the parent's.
            iam.PolicyStatement(actions=["states:DescribeExecution", "states:StopExecution"],
                                resources=[self._execution_arn_pattern(child, suffix="*")]),
        ]
        if rule:
            statements.append(iam.PolicyStatement(
                actions=["events:PutTargets", "events:PutRule", "events:DescribeRule"],
                resources=[self._stack.format_arn(service="events", resource="rule",
                                                  resource_name="StepFunctionsGetEventsForStepFunctionsExecutionRule")],
            ))
        for statement in statements:
            self.workflow_role.add_to_principal_policy(statement)

    def _child_executions_finding(self, child: names.DerivedName, kind: str) -> tuple[str, str, str]:
        partition, region, account = _as_nag_shows(self._stack)
        return (
            "AwsSolutions-IAM5",
            f"Resource::arn:{partition}:states:{region}:{account}:execution:{child.render(self.tenant_id)}*",
            "A .sync child start (the statement CDK's StepFunctionsStartExecution adds): describe and stop "
            f"the executions of this tenant's {kind} state machine; their names derive from the parent's, "
            "unknown in advance.",
        )

    def _acknowledge_findings(self) -> None:
        """Every wildcard left in this pipeline's policies is scoped to the tenant; each says why."""
        tenant_id, own_work = self.tenant_id, contract.work_prefix(self.tenant_id)
        # cdk-nag shows pseudo parameters as <AWS::...>, or their values in a stack with an
        # explicit environment (a deployment target's Stage).
        partition, region, account = _as_nag_shows(self._stack)
        landing = f"arn:{partition}:s3:::{names.landing_bucket_name('<AWS::AccountId>', '<AWS::Region>')}"
        work = f"arn:{partition}:s3:::{names.work_bucket_name('<AWS::AccountId>', '<AWS::Region>')}"
        executions = (
            f"arn:{partition}:states:{region}:{account}:execution:"
            f"{names.STATE_MACHINE.render(tenant_id)}:*"
        )
        chunks_reason = ("Chunk indexes and manifests are named per execution; the wildcard stays inside this "
                         "tenant's own work folder.")
        _acknowledge(
            self.data_role,
            ("AwsSolutions-IAM5", f"Resource::{landing}/{self.landing_prefix}*",
             "Split reads whichever file the tenant drops, register its chunk of it (a ranged GET), and "
             "only under this tenant's landing prefix."),
            ("AwsSolutions-IAM5", f"Resource::{work}/{own_work}*", chunks_reason),
        )
        executions_reason = (
            "Execution names are the EventBridge event ids, unknown in advance; only this "
            "tenant's state machine's executions are covered."
        )
        _acknowledge(
            self.controller.role,
            ("AwsSolutions-IAM5", f"Resource::{executions}", executions_reason),
            ("AwsSolutions-IAM5", f"Resource::{work}/{contract.quarantine_prefix(tenant_id)}*",
             "Quarantined messages are named by time and message id, unknown in advance; PutObject only, "
             "inside this tenant's own quarantine folder."),
        )
        _acknowledge(self.closer.role, ("AwsSolutions-IAM5", f"Resource::{executions}", executions_reason))
        invoke_reason = (
            "The workflow invokes the function (grant_invoke, as CDK's LambdaInvoke task does), which "
            "covers its versions and aliases (ARN:*); it is still this tenant's function only."
        )
        _acknowledge(
            self.workflow_role,
            ("AwsSolutions-IAM5", f"Resource::<{_logical_id(self.split.function)}.Arn>:*", invoke_reason),
            ("AwsSolutions-IAM5", f"Resource::<{_logical_id(self.closer.function)}.Arn>:*", invoke_reason),
            ("AwsSolutions-IAM5", f"Resource::<{_logical_id(self.register.function)}.Arn>:*",
             invoke_reason),
            ("AwsSolutions-IAM5", "Resource::*",
             "X-Ray trace segments and CloudWatch Logs vended-log delivery do not support "
             "resource-level permissions."),
            self._child_executions_finding(names.PAGE_STATE_MACHINE, "page"),
            self._child_executions_finding(names.SECTION_STATE_MACHINE, "section"),
        )
        if self.tenant.tracing:
            for role in (self.data_role, self.controller.role, self.closer.role):
                _acknowledge(role, ("AwsSolutions-IAM5", "Resource::*",
                                    "X-Ray trace segments (the tenant's `tracing: true`) do not support "
                                    "resource-level permissions."))
        if not self.tenant.tracing:
            for machine in (self.state_machine, self.section_state_machine, self.page_state_machine):
                _acknowledge(machine, ("AwsSolutions-SF2", None,
                                       "X-Ray tracing is the tenant's choice (`tracing: true`), off by default: "
                                       "traces cost per trace recorded, and the execution history, the ledger and "
                                       "`ops status` already show where each file is (docs/configuration.md, tracing)."))
        _acknowledge(
            self.section_state_machine,
            ("AwsSolutions-SF1", None,
             "ERROR level on purpose, as the parent: ALL would log every page's transitions that the "
             "execution history already keeps; execution data is excluded (no record content in logs)."),
        )
        _acknowledge(
            self.page_state_machine,
            ("AwsSolutions-SF1", None,
             "ERROR level on purpose, as the parent: ALL would log every chunk's transitions that the "
             "execution history already keeps; execution data is excluded (no record content in logs)."),
        )
        _acknowledge(
            self.state_machine,
            ("AwsSolutions-SF1", None,
             "ERROR level on purpose: failures are what on-call needs in the logs; ALL would log "
             "every transition of every chunk (cost) that the execution history already keeps. "
             "Execution data is excluded so no record content reaches the logs."),
        )


def sink_secret_arn(scope: Construct, secret: str) -> str:
    """The ARN IAM matches a bearer token's secret by: a full ARN as given; a name in this
    account and Region, with the 6 characters Secrets Manager appends to it (`-??????`)."""
    if secret.startswith("arn:"):
        return secret
    return Stack.of(scope).format_arn(service="secretsmanager", resource="secret", resource_name=f"{secret}-??????",
                                      arn_format=ArnFormat.COLON_RESOURCE_NAME)


def _as_nag_shows(stack: Stack) -> tuple[str, str, str]:
    """The stack's partition, Region and account as they appear in cdk-nag's findings."""
    def shown(value: str, pseudo: str) -> str:
        return pseudo if Token.is_unresolved(value) else value

    return (shown(stack.partition, "<AWS::Partition>"), shown(stack.region, "<AWS::Region>"),
            shown(stack.account, "<AWS::AccountId>"))


def _acknowledge(scope: Construct, *findings: tuple[str, str | None, str]) -> None:
    acknowledge_all(scope, findings)


def _logical_id(construct: Construct) -> str:
    stack = Stack.of(construct)
    return stack.resolve(stack.get_logical_id(construct.node.default_child))
