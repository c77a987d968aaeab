"""The stacks: one shared stack and one stack per tenant.

A stack per tenant keeps every template far below CloudFormation's 500-resource and 1 MB
limits whatever the number of tenants, lets one tenant deploy or roll back alone, and makes
`cdk diff` name the tenant a change touches (the stack is `OrderedIngest-Tenant-<id>`).

A tenant stack refers to the shared stack by fixed names (buckets, shard buses) and by the SSM
parameters the shared stack writes (`SharedParameters`), never by export: it synthesizes and
deploys in a cell of its own (`cells.py`), and the shared resources can change under it.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, CfnOutput, Duration, Stack, Tags
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from lambdas import contract
from pipeline_constructs import capacity, encryption, names, routing
from pipeline_constructs.config import AppConfig, SinkAuth, TenantConfig
from pipeline_constructs.dashboard import DashboardTenant, IngestDashboards, dashboard_names
from pipeline_constructs.shard_routing import Forwarding, ShardRouting, ShardRoutingProps
from pipeline_constructs.shared import SharedResources, SharedResourcesProps
from pipeline_constructs.tenant_pipeline import TenantPipeline, TenantPipelineProps
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
        super().__init__(scope, stack_id, description=description, stack_name=stack_id)
        for flag, value in FEATURE_FLAGS.items():
            self.node.set_context(flag, value)


class SharedStack(_IngestStack):
    """Buckets, ledger table and alarm topic used by every tenant; the catch-all for uploads
    outside every tenant prefix."""

    def __init__(self, scope: Construct, config: AppConfig) -> None:
        super().__init__(
            scope,
            names.SHARED_STACK_NAME,
            description="Ordered per-tenant file ingestion: shared buckets, ledger table, alarm topic",
        )
        self.resources = SharedResources(
            self, "Shared", SharedResourcesProps(
                alarm_emails=tuple(config.notifications.emails),
                uploaders=tuple(capacity.uploaders_of(t) for t in config.tenants if t.uploaders),
                kms_key=config.encryption.kms_key if config.encryption is not None else None,
            )
        )
        # What `ops` reads to find the shared resources.
        CfnOutput(self, "LedgerTableName", value=self.resources.ledger_table.table_name,
                  description="The ledger of every tenant (read by ops)")
        CfnOutput(self, "LandingBucketName", value=self.resources.landing_bucket.bucket_name,
                  description="Where tenants drop their files (read by ops)")
        CfnOutput(self, "WorkBucketName", value=self.resources.work_bucket.bucket_name,
                  description="Chunks and quarantined messages (read by ops quarantine)")
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
        CfnOutput(self, "UnmatchedUploadsLogGroupName", value=self.unmatched_uploads.log_group_name,
                  description="Where uploads outside every tenant prefix are logged (read by ops)")
        # Built from the tenants' deterministic names: no reference to a tenant stack. Only the
        # first dashboard: the others are stacks of their own (`dashboard_stacks`).
        self.dashboards = IngestDashboards(self, "Dashboards", tenants=dashboard_tenants(config), pages=[0])


    def _publish_for_tenants(self) -> None:
        """The SSM parameters tenant stacks read the shared resources from (`SharedParameters`)."""
        shared = self.resources
        for name, value in zip(contract.SHARED_PARAMETERS, (shared.ledger_table.table_name,
                                                            shared.alarm_topic.topic_arn, shared.alarm_key.key_arn)):
            construct_id = "".join(part.capitalize() for part in name.split("-")) + "Parameter"
            ssm.StringParameter(self, construct_id, parameter_name=shared_parameter(name), string_value=value,
                                description="Read by the tenant stacks at deploy time (ordered-ingest cells)")

    def _export_what_tenants_imported(self) -> None:
        """The exports tenant stacks of the previous release import (the ledger table, the alarm
        topic and its key): kept for one release, so that the shared stack deploys before the
        tenant stacks stop importing them (docs/scaling.md, "Upgrading to cells"). Remove them in the
        release after, once every tenant stack is deployed with SSM parameters. The exports
        have the names CDK gave the references themselves."""
        shared = self.resources
        for value in (shared.ledger_table.table_arn, shared.ledger_table.table_name,
                      shared.alarm_topic.topic_arn, shared.alarm_key.key_arn):
            self.export_value(value)

    def _routing(self, config: AppConfig) -> None:
        """Sharded routing (``routing.shards``) and the forwarding hop it and a large catch-all
        of unmatched uploads need; nothing of it without shards and with few tenants."""
        shards = config.routing.shards
        prefixes = [tenant.prefix for tenant in config.tenants]
        needs_hop = bool(shards) or bool(routing.unmatched_layout(prefixes, limit=config.routing.event_pattern_chars).groups)
        self.forwarding = (
            Forwarding(self, "Forwarding", alarm_topic=self.resources.alarm_topic, kms_key=self.resources.data_key)
            if needs_hop else None
        )
        self.shard_routing: ShardRouting | None = None
        if not shards:
            return
        assert self.forwarding is not None
        layout = routing.layout(config.tenants, shards)
        self.shard_routing = ShardRouting(
            self,
            "ShardRouting",
            ShardRoutingProps(
                landing_bucket_name=self.resources.landing_bucket.bucket_name,
                shards=layout,
                forwarding=self.forwarding,
            ),
        )


class SharedParameters:
    """The shared resources as a tenant stack knows them: from the SSM parameters the shared
    stack writes (`SharedStack._publish_for_tenants`), resolved at each deploy."""

    def __init__(self, scope: Construct) -> None:
        def value(name: str) -> str:
            return ssm.StringParameter.value_for_string_parameter(scope, shared_parameter(name))

        self.ledger_table = dynamodb.Table.from_table_name(scope, "LedgerTable", value("ledger-table-name"))
        self.alarm_topic = sns.Topic.from_topic_arn(scope, "AlarmTopic", value("alarm-topic-arn"))
        self.alarm_key = kms.Key.from_key_arn(scope, "AlarmTopicKey", value("alarm-topic-key-arn"))


class TenantStack(_IngestStack):
    """One tenant's pipeline. `shard`: the routing shard whose bus holds its rules (None: the
    default bus); `shared_kms_key`: the top-level `encryption.kms_key` setting."""

    def __init__(self, scope: Construct, tenant: TenantConfig, *, shard: int | None,
                 shared_kms_key: str | None) -> None:
        super().__init__(
            scope,
            names.TENANT_STACK.render(tenant.id),
            description=f"Ordered per-tenant file ingestion: tenant {tenant.id}",
        )
        Tags.of(self).add("ordered-ingest:tenant", tenant.id)
        # Every shared resource by a fixed name or an SSM parameter, none by reference: the
        # buckets' fixed names also let this stack's policies name the tenant's prefix literally.
        shared = SharedParameters(self)
        self.pipeline = TenantPipeline(
            self,
            "Pipeline",
            TenantPipelineProps(
                tenant_id=tenant.id,
                landing_prefix=tenant.prefix,
                sink_url=tenant.sink.url,
                format=tenant.format,
                chunk_size=tenant.chunk_size,
                sink_timeout_seconds=tenant.sink.timeout_seconds,
                sink_outage_budget=Duration.seconds(tenant.sink.outage_budget_seconds),
                sink_batch_size=tenant.sink.batch_size,
                **sink_auth_props(tenant.sink.auth),
                on_failure=tenant.on_failure,
                duplicate_files=tenant.duplicate_files,
                queue_age_alarm_after=Duration.seconds(tenant.alarms.queue_age_seconds),
                stall_alarm_after=Duration.seconds(tenant.alarms.stall_after_seconds),
                error_logs_threshold=tenant.alarms.error_logs_threshold,
                alarm_evaluation_periods=tenant.alarms.evaluation_periods,
                ordering=tenant.ordering.by,
                sequence_pattern=tenant.ordering.sequence_pattern,
                first_sequence=tenant.ordering.first_sequence,
                sequence_gap_alarm_after=Duration.seconds(tenant.ordering.gap_alarm_after_seconds),
                sink_errors_threshold=tenant.alarms.sink_errors_threshold,
                file_time_limit=Duration.seconds(tenant.file_time_limit),
                chunks_per_page=tenant.chunks_per_page,
                pages_per_section=tenant.pages_per_section,
                tracing=tenant.tracing,
                completion_wait=tenant.completion.wait,
                completion_timeout=Duration.seconds(tenant.completion.timeout_seconds),
                completion_heartbeat=(Duration.seconds(tenant.completion.heartbeat_seconds)
                                      if tenant.completion.heartbeat_seconds is not None else None),
                completion_callers=tuple(tenant.completion.callers),
                vpc_id=tenant.network.vpc_id if tenant.network else None,
                vpc_subnet_ids=tuple(tenant.network.subnet_ids) if tenant.network else (),
                vpc_security_group_ids=tuple(tenant.network.security_group_ids) if tenant.network else (),
                landing_bucket=s3.Bucket.from_bucket_name(
                    self, "LandingBucket", names.landing_bucket_name(Aws.ACCOUNT_ID, Aws.REGION)
                ),
                work_bucket=s3.Bucket.from_bucket_name(
                    self, "WorkBucket", names.work_bucket_name(Aws.ACCOUNT_ID, Aws.REGION)
                ),
                ledger_table=shared.ledger_table,
                alarm_topic=shared.alarm_topic,
                alarm_topic_key=shared.alarm_key,
                event_bus=self._event_bus(None if shard is None else names.shard_bus_name(shard)),
                kms_key=tenant.encryption.kms_key if tenant.encryption is not None else None,
                shared_kms_key_arn=encryption.shared_key_arn(self, shared_kms_key),
            ),
        )

    def _event_bus(self, name: str | None) -> events.IEventBus | None:
        """The tenant's shard bus, by its fixed name (no cross-stack reference), or the default bus."""
        return None if name is None else events.EventBus.from_event_bus_name(self, "ShardBus", name)


def dashboard_tenants(config: AppConfig) -> list[DashboardTenant]:
    return [DashboardTenant(tenant.id, tenant.alarms.stall_after_seconds) for tenant in config.tenants]


class DashboardStack(_IngestStack):
    """The `number`th dashboard (2, 3, ...): a stack each keeps every template far below
    CloudFormation's 1 MB whatever the number of tenants (a full dashboard is about 240 KB)."""

    def __init__(self, scope: Construct, number: int, config: AppConfig, shared_stack: SharedStack) -> None:
        super().__init__(
            scope,
            names.dashboard_stack_name(number),
            description=f"Ordered per-tenant file ingestion: dashboard {number}",
        )
        # After the shared stack: a deployment that kept this dashboard there drops it first,
        # so that this stack can create it under the same name.
        self.add_stack_dependency(shared_stack)
        self.dashboards = IngestDashboards(self, "Dashboards", tenants=dashboard_tenants(config), pages=[number - 1])


def dashboard_stacks(scope: Construct, config: AppConfig, shared_stack: SharedStack) -> list[DashboardStack]:
    """One `DashboardStack` for each dashboard after the first (none up to
    `TENANTS_PER_DASHBOARD` tenants)."""
    count = len(dashboard_names(len(config.tenants)))
    return [DashboardStack(scope, number, config, shared_stack) for number in range(2, count + 1)]


def sink_auth_props(auth: SinkAuth) -> dict[str, Any]:
    """`sink.auth` as the pipeline's flat `sink_auth*` props (a type's absent fields stay default)."""
    fields = {"secret": "sink_auth_secret", "cache_seconds": "sink_auth_cache_seconds",
              "service": "sink_auth_service", "region": "sink_auth_region", "invoke_arn": "sink_auth_invoke_arn"}
    return {"sink_auth": auth.type, **{fields[name]: value for name, value in auth.model_dump().items() if name in fields}}
