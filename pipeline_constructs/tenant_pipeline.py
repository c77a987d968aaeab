"""``TenantPipeline``: everything one tenant owns, from its EventBridge rule to its alarms.

The construct composes one builder per concern, each making its resources in this construct's
scope (so construct ids, and thus logical ids, are the pipeline's own):

    intake.py         queue, intake dead-letter queue, object-created rule, status rule
    data_plane.py     split and register, their shared role, network, sink credentials
    control_plane.py  controller (the gate), closer, completion entry point
    workflows.py      the file, section and page state machines, their role, versions, alias
    metrics.py        every metric, read by alarms.py (here) and dashboard.py (shared stack)
    encryption.py     the tenant's key policy and every role's use of the keys
    nag.py            every cdk-nag finding of the pipeline, with its reason
"""

from __future__ import annotations

from aws_cdk import Aws, CfnOutput, Stack
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from pipeline_constructs import budgets, encryption, intake, registry
from pipeline_constructs.alarms import pipeline_alarms
from pipeline_constructs.config import TenantConfig
from pipeline_constructs.control_plane import build_closer, build_completion, build_controller
from pipeline_constructs.data_plane import build_data_plane
from pipeline_constructs.functions import PipelineFunction
from pipeline_constructs.metrics import TenantMetrics
from pipeline_constructs.nag import acknowledge_tenant_pipeline
from pipeline_constructs.shared import SharedRefs
from pipeline_constructs.workflows import build_workflow


class TenantPipeline(Construct):
    """Rule -> queue -> controller (concurrency 1) -> ordered workflow -> closer, with alarms.

    ``tenant``: the tenant's validated options (`config.TenantConfig`, from ``tenants.yaml``;
    docs/configuration.md); ``shared``: the shared resources it plugs into. Each function
    (``controller``, ``split``, ``register``, ``closer``, ``completion``) is a
    `PipelineFunction`: function, role, log group.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, tenant: TenantConfig, shared: SharedRefs
    ) -> None:
        super().__init__(scope, construct_id)
        self.tenant, self.shared = tenant, shared
        self.tenant_id, self.landing_prefix = tenant.id, tenant.prefix
        self.page_budget = budgets.page_budget(tenant)
        #: The tenant's customer-managed key, or None.
        self.kms_key: kms.IKey | None = (
            None
            if tenant.encryption is None
            else encryption.customer_key(
                self,
                "Key",
                tenant.encryption.kms_key,
                alias=encryption.tenant_key_alias(tenant.id),
                description=f"Encrypts tenant {tenant.id}'s queues, log groups and function environments",
            )
        )

        # Intake: S3 events of the tenant's prefix -> its queue; what cannot be delivered -> its DLQ.
        #: The access point uploaders put files through (None without `uploaders`).
        self.upload_access_point = intake.build_upload_access_point(self, tenant, shared.landing_bucket)
        self.queue = intake.build_queue(self, tenant, self.kms_key)
        #: The events EventBridge could not deliver to the queue or the closer.
        self.intake_dlq = intake.build_intake_dlq(self, tenant.id, self.kms_key)
        self.rule = intake.build_object_created_rule(
            self,
            tenant,
            landing_bucket=shared.landing_bucket,
            event_bus=shared.event_bus,
            queue=self.queue,
            dlq=self.intake_dlq,
            kms_key=self.kms_key,
        )

        # The workflow's tasks: split and register (the data plane), and the closer that
        # records each close (the workflow's last task, and the status rule's target).
        data_plane = build_data_plane(
            self,
            tenant,
            budget=self.page_budget,
            landing_bucket=shared.landing_bucket,
            work_bucket=shared.work_bucket,
            ledger_table=shared.ledger_table,
            kms_key=self.kms_key,
        )
        #: ``data_role``: the role split and register share.
        self.data_role, self.split, self.register = data_plane.role, data_plane.split, data_plane.register
        self.closer = build_closer(
            self,
            tenant,
            queue=self.queue,
            ledger_table=shared.ledger_table,
            alarm_topic=shared.alarm_topic,
            alarm_topic_key=shared.alarm_topic_key,
            kms_key=self.kms_key,
        )

        # The workflow: file -> sections -> pages -> chunks, one at a time at every level.
        #: The file, section and page state machines (`workflows.Workflow`).
        self.workflow = build_workflow(
            self,
            tenant=tenant,
            budget=self.page_budget,
            split=self.split.function,
            register=self.register.function,
            closer=self.closer.function,
            ledger_table=shared.ledger_table,
            kms_key=self.kms_key,
        )
        #: The file's state machine.
        self.state_machine = self.workflow.file.state_machine
        #: This deploy's file state machine version, and `live`, the alias files start through (versions.py).
        self.version, self.alias = self.workflow.file.version, self.workflow.alias
        #: This deploy's versions of the section and page state machines.
        self.section_version, self.page_version = self.workflow.section.version, self.workflow.page.version

        #: The workflow's closes -> the closer (the backstop of its last state).
        self.status_rule = intake.build_status_rule(
            self,
            tenant.id,
            event_bus=shared.event_bus,
            state_machine_arn=self.state_machine.state_machine_arn,
            closer=self.closer.function,
            dlq=self.intake_dlq,
        )

        # The gate: the queue -> the workflow's `live` alias, one file at a time.
        self.controller = build_controller(
            self,
            tenant,
            queue=self.queue,
            state_machine=self.state_machine,
            alias=self.alias,
            ledger_table=shared.ledger_table,
            landing_bucket=shared.landing_bucket,
            work_bucket=shared.work_bucket,
            kms_key=self.kms_key,
        )
        #: The completion entry point (with `completion.wait`, else None).
        self.completion: PipelineFunction | None = None
        if tenant.completion.wait:
            self.completion = build_completion(
                self,
                tenant,
                state_machine=self.state_machine,
                ledger_table=shared.ledger_table,
                kms_key=self.kms_key,
            )

        #: Every metric of the tenant, read by its alarms and the shared dashboard.
        self.metrics = TenantMetrics(
            tenant_id=tenant.id,
            queue_name=self.queue.queue_name,
            intake_dlq_name=self.intake_dlq.queue_name,
            state_machine_arn=self.state_machine.state_machine_arn,
            event_bus_name=None if shared.event_bus is None else shared.event_bus.event_bus_name,
        )
        #: The tenant's alarms, by name.
        self.alarms = pipeline_alarms(
            self,
            shared.alarm_topic,
            tenant.alarms,
            # Files wait for a missing sequence number only when ordered by key sequence.
            sequence_gap_alarm_after_seconds=(
                None if tenant.ordering.by == "arrival" else tenant.ordering.gap_alarm_after_seconds
            ),
        )
        self._register()
        self._outputs()
        encryption.use_tenant_keys(self)
        acknowledge_tenant_pipeline(self)

    @property
    def pipeline_functions(self) -> dict[str, PipelineFunction]:
        """The pipeline's functions with their roles and log groups, by kind (``completion`` too,
        with `completion.wait`: its ERROR lines page like the others')."""
        functions = {
            "controller": self.controller,
            "split": self.split,
            "register": self.register,
            "closer": self.closer,
        }
        if self.completion is not None:
            functions["completion"] = self.completion
        return functions

    @property
    def functions(self) -> dict[str, lambda_.Function]:
        """The pipeline's functions by kind: ``controller``, ``split``, ``register``, ``closer``, ..."""
        return {kind: made.function for kind, made in self.pipeline_functions.items()}

    @property
    def log_groups(self) -> dict[str, logs.ILogGroup]:
        """Every log group of the pipeline by kind (the functions', and ``workflow``)."""
        groups: dict[str, logs.ILogGroup] = {
            kind: made.log_group for kind, made in self.pipeline_functions.items()
        }
        groups["workflow"] = self.workflow.file.log_group
        return groups

    def _register(self) -> None:
        """The pipeline's entry in the registry `ops` finds it by, in whatever stack it is
        (`registry.py`)."""
        resources = registry.TenantResources(
            tenant_id=self.tenant_id,
            stack=Aws.STACK_NAME,
            queue_url=self.queue.queue_url,
            state_machine_arn=self.state_machine.state_machine_arn,
            landing_prefix=self.landing_prefix,
            on_failure=self.tenant.on_failure,
            ledger_table=self.shared.ledger_table.table_name,
            work_bucket=self.shared.work_bucket.bucket_name,
            ordering=self.tenant.ordering.by,
            first_sequence=self.tenant.ordering.first_sequence,
            intake_dlq_url=self.intake_dlq.queue_url,
            closer_function_name=self.closer.function.function_name,
            landing_bucket=self.shared.landing_bucket.bucket_name,
            state_machine_alias_arn=self.alias.attr_arn,
            alarm_topic_arn=self.shared.alarm_topic.topic_arn,
        )
        ssm.StringParameter(
            self,
            "Registry",
            parameter_name=registry.parameter_name(self.tenant_id),
            string_value=Stack.of(self).to_json_string(registry.record(resources)),
            description=f"Where tenant {self.tenant_id}'s pipeline lives (read by ops)",
        )

    def _outputs(self) -> None:
        """The tenant's resources, shown by `cdk deploy` (and read by `ops` from stacks deployed
        before the registry)."""
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
            CfnOutput(
                self,
                output_id,
                value=value,
                description=f"{output_id} of tenant {self.tenant_id} (read by ops)",
            )
        if self.upload_access_point is not None:
            # Where the uploaders put files: `aws s3 cp f s3://<alias>/<prefix>f` (docs/security.md, "Uploaders").
            CfnOutput(
                self,
                "UploadAccessPointAlias",
                value=self.upload_access_point.attr_alias,
                description=f"The bucket-style alias tenant {self.tenant_id}'s uploaders put files through",
            )
            CfnOutput(
                self,
                "UploadAccessPointArn",
                value=self.upload_access_point.attr_arn,
                description=f"The access point tenant {self.tenant_id}'s uploaders put files through",
            )
