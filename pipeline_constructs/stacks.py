"""The stacks: one shared stack and one stack per tenant.

A stack per tenant keeps every template far below CloudFormation's 500-resource and 1 MB
limits whatever the number of tenants, lets one tenant deploy or roll back alone, and makes
`cdk diff` name the tenant a change touches (the stack is `OrderedIngest-Tenant-<id>`).

A tenant stack refers to the shared stack by fixed names (buckets, shard buses) and by the SSM
parameters the shared stack writes (`shared_refs`), never by export: it synthesizes and
deploys in a cell of its own (`cell_plan.py`), and the shared resources can change under it.
"""

from __future__ import annotations

from aws_cdk import Annotations, Aws, CfnOutput, Stack, Tags, Token
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from lambdas import contract
from pipeline_constructs import capacity, encryption, names, routing
from pipeline_constructs.config import ALARMS_REACH_NOBODY, ALARMS_REACH_NOBODY_ID, AppConfig, TenantConfig
from pipeline_constructs.dashboard import DashboardTenant, IngestDashboards, dashboard_names
from pipeline_constructs.shard_buses import Forwarding, ShardRouting, ShardRoutingProps
from pipeline_constructs.shared import SharedRefs, SharedResources, SharedResourcesProps
from pipeline_constructs.tenant_pipeline import TenantPipeline
from pipeline_constructs.unmatched import UnmatchedUploads, UnmatchedUploadsProps

#: Feature flags the stacks rely on. Set on each stack (context is looked up the tree), so the
#: CLI, the tests and the local runtime synthesize the same templates without cdk.json.
FEATURE_FLAGS = {
    "@aws-cdk/core:enablePartitionLiterals": True,
    "@aws-cdk/aws-iam:minimizePolicies": True,
}


def shared_parameter(name: str) -> str:
    """The SSM parameter `name` (one of `contract.SHARED_PARAMETERS`) of the shared stack."""
    assert name in contract.SHARED_PARAMETERS, name
    return contract.SHARED_PARAMETER.render(parameter=name)


class _IngestStack(Stack):
    def __init__(self, scope: Construct, stack_id: str, *, description: str) -> None:
        # The same stack names inside a target's Stage (not `<stage>-<id>`): each target is its
        # own account/Region, where `ops` finds the stacks by these names.
        # Templates without indentation: smaller, and CloudFormation takes 1 MB at most; the
        # CLI's diff and the tests read them as JSON, not as text.
        super().__init__(
            scope, stack_id, description=description, stack_name=stack_id, suppress_template_indentation=True
        )
        for flag, value in FEATURE_FLAGS.items():
            self.node.set_context(flag, value)


class SharedStack(_IngestStack):
    """Buckets, ledger table and alarm topic used by every tenant; the catch-all for uploads
    outside every tenant prefix."""

    def __init__(self, scope: Construct, config: AppConfig) -> None:
        super().__init__(
            scope,
            names.shared_stack_name(),
            description="Ordered per-tenant file ingestion: shared buckets, ledger table, alarm topic",
        )
        self.resources = SharedResources(
            self,
            "Shared",
            SharedResourcesProps(
                alarm_emails=tuple(config.notifications.emails),
                alarm_subscriptions=tuple(
                    (s.protocol, s.endpoint) for s in config.notifications.subscriptions
                ),
                alarm_topic_arn=config.notifications.topic_arn,
                alarm_topic_key_arn=config.notifications.topic_kms_key,
                uploaders=tuple(capacity.uploaders_of(t) for t in config.tenants if t.uploaders),
                kms_key=config.encryption.kms_key if config.encryption is not None else None,
            ),
        )
        # What `ops` reads to find the shared resources.
        CfnOutput(
            self,
            "LedgerTableName",
            value=self.resources.ledger_table.table_name,
            description="The ledger of every tenant (read by ops)",
        )
        CfnOutput(
            self,
            "LandingBucketName",
            value=self.resources.landing_bucket.bucket_name,
            description="Where tenants drop their files (read by ops)",
        )
        CfnOutput(
            self,
            "WorkBucketName",
            value=self.resources.work_bucket.bucket_name,
            description="Chunks and quarantined messages (read by ops quarantine)",
        )
        CfnOutput(
            self,
            names.ALARM_TOPIC_OUTPUT,
            value=self.resources.alarm_topic.topic_arn,
            description="Where every alarm and failed-file notification is published: subscribe here (shown by ops status)",
        )
        if config.notifications.reach_nobody:
            # One line per shared stack in `cdk synth|diff|deploy` (tools/cells.py prints it once itself).
            Annotations.of(self).add_warning_v2(ALARMS_REACH_NOBODY_ID, ALARMS_REACH_NOBODY)
        self._publish_for_tenants()
        self._export_what_tenants_imported()
        self._routing(config)
        # Uploads outside every tenant prefix: logged, counted, alarmed, listed by `ops status`.
        self.unmatched_uploads = UnmatchedUploads(
            self,
            "UnmatchedUploads",
            UnmatchedUploadsProps(
                landing_bucket=self.resources.landing_bucket,
                tenant_prefixes=[tenant.prefix for tenant in config.tenants],
                alarm_topic=self.resources.alarm_topic,
                forwarding=self.forwarding,
                event_pattern_chars=config.routing.event_pattern_chars,
                kms_key=self.resources.data_key,
            ),
        )
        CfnOutput(
            self,
            "UnmatchedUploadsLogGroupName",
            value=self.unmatched_uploads.log_group_name,
            description="Where uploads outside every tenant prefix are logged (read by ops)",
        )
        # Built from the tenants' deterministic names: no reference to a tenant stack. Only the
        # first dashboard: the others are stacks of their own (`dashboard_stacks`).
        self.dashboards = IngestDashboards(self, "Dashboards", tenants=dashboard_tenants(config), pages=[0])

    def _publish_for_tenants(self) -> None:
        """The SSM parameters tenant stacks read the shared resources from (`shared_refs`)."""
        shared = self.resources
        for name, value in zip(
            contract.SHARED_PARAMETERS,
            (shared.ledger_table.table_name, shared.alarm_topic.topic_arn, shared.alarm_topic_key.key_arn),
        ):
            construct_id = "".join(part.capitalize() for part in name.split("-")) + "Parameter"
            ssm.StringParameter(
                self,
                construct_id,
                parameter_name=shared_parameter(name),
                string_value=value,
                description="Read by the tenant stacks at deploy time (ordered-ingest cells)",
            )

    def _export_what_tenants_imported(self) -> None:
        """The exports tenant stacks of the previous release import (the ledger table, the alarm
        topic and its key): kept for one release, so that the shared stack deploys before the
        tenant stacks stop importing them (docs/scaling.md, "Upgrading to cells"). Remove them in the
        release after, once every tenant stack is deployed with SSM parameters. The exports
        have the names CDK gave the references themselves."""
        shared = self.resources
        for value in (
            shared.ledger_table.table_arn,
            shared.ledger_table.table_name,
            shared.alarm_topic.topic_arn,
            shared.alarm_topic_key.key_arn,
        ):
            if Token.is_unresolved(value):  # an existing topic (`notifications.topic_arn`) is not exported
                self.export_value(value)

    def _routing(self, config: AppConfig) -> None:
        """Sharded routing (``routing.shards``) and the forwarding hop it and a large catch-all
        of unmatched uploads need; nothing of it without shards and with few tenants."""
        shards = config.routing.shards
        prefixes = [tenant.prefix for tenant in config.tenants]
        needs_hop = bool(shards) or bool(
            routing.unmatched_layout(prefixes, limit=config.routing.event_pattern_chars).groups
        )
        self.forwarding = (
            Forwarding(
                self, "Forwarding", alarm_topic=self.resources.alarm_topic, kms_key=self.resources.data_key
            )
            if needs_hop
            else None
        )
        self.shard_buses: ShardRouting | None = None
        if not shards:
            return
        assert self.forwarding is not None
        layout = routing.layout(config.tenants, shards)
        self.shard_buses = ShardRouting(
            self,
            "ShardRouting",
            ShardRoutingProps(
                landing_bucket_name=self.resources.landing_bucket.bucket_name,
                shards=layout,
                forwarding=self.forwarding,
            ),
        )


def shared_refs(stack: Stack, *, shard: int | None, shared_kms_key: str | None) -> SharedRefs:
    """The shared resources as a tenant stack knows them: from the SSM parameters the shared
    stack writes (`SharedStack._publish_for_tenants`), resolved at each deploy, and by fixed
    names (the buckets, the shard's bus), none by reference; the fixed bucket names also let the
    tenant's policies name its prefix literally. `shard`: the routing shard whose bus holds the
    tenant's rules (None: the default bus); `shared_kms_key`: the top-level `encryption.kms_key`."""

    def value(name: str) -> str:
        return ssm.StringParameter.value_for_string_parameter(stack, shared_parameter(name))

    ledger_table = dynamodb.Table.from_table_name(stack, "LedgerTable", value("ledger-table-name"))
    alarm_topic = sns.Topic.from_topic_arn(stack, "AlarmTopic", value("alarm-topic-arn"))
    alarm_topic_key = kms.Key.from_key_arn(stack, "AlarmTopicKey", value("alarm-topic-key-arn"))
    return SharedRefs(
        landing_bucket=s3.Bucket.from_bucket_name(
            stack, "LandingBucket", names.landing_bucket_name(Aws.ACCOUNT_ID, Aws.REGION)
        ),
        work_bucket=s3.Bucket.from_bucket_name(
            stack, "WorkBucket", names.work_bucket_name(Aws.ACCOUNT_ID, Aws.REGION)
        ),
        ledger_table=ledger_table,
        alarm_topic=alarm_topic,
        alarm_topic_key=alarm_topic_key,
        event_bus=None
        if shard is None
        else events.EventBus.from_event_bus_name(stack, "ShardBus", names.shard_bus_name(shard)),
        shared_kms_key_arn=encryption.shared_key_arn(stack, shared_kms_key),
    )


class TenantStack(_IngestStack):
    """One tenant's pipeline. `shard`: the routing shard whose bus holds its rules (None: the
    default bus); `shared_kms_key`: the top-level `encryption.kms_key` setting."""

    def __init__(
        self, scope: Construct, tenant: TenantConfig, *, shard: int | None, shared_kms_key: str | None
    ) -> None:
        super().__init__(
            scope,
            names.TENANT_STACK.render(tenant.id),
            description=f"Ordered per-tenant file ingestion: tenant {tenant.id}",
        )
        Tags.of(self).add("ordered-ingest:tenant", tenant.id)
        shared = shared_refs(self, shard=shard, shared_kms_key=shared_kms_key)
        self.pipeline = TenantPipeline(self, "Pipeline", tenant=tenant, shared=shared)


def dashboard_tenants(config: AppConfig) -> list[DashboardTenant]:
    return [DashboardTenant(tenant.id, tenant.alarms.stall_after_seconds) for tenant in config.tenants]


class DashboardStack(_IngestStack):
    """The `number`th dashboard (2, 3, ...): a stack each keeps every template far below
    CloudFormation's 1 MB whatever the number of tenants."""

    def __init__(self, scope: Construct, number: int, config: AppConfig, shared_stack: SharedStack) -> None:
        super().__init__(
            scope,
            names.dashboard_stack_name(number),
            description=f"Ordered per-tenant file ingestion: dashboard {number}",
        )
        # After the shared stack: a deployment that kept this dashboard there drops it first,
        # so that this stack can create it under the same name.
        self.add_stack_dependency(shared_stack)
        self.dashboards = IngestDashboards(
            self, "Dashboards", tenants=dashboard_tenants(config), pages=[number - 1]
        )


def dashboard_stacks(scope: Construct, config: AppConfig, shared_stack: SharedStack) -> list[DashboardStack]:
    """One `DashboardStack` for each dashboard after the first (none up to
    `TENANTS_PER_DASHBOARD` tenants)."""
    count = len(dashboard_names(len(config.tenants), region=""))
    return [DashboardStack(scope, number, config, shared_stack) for number in range(2, count + 1)]
