"""The stacks: one shared stack and one stack per tenant.

A stack per tenant keeps every template far below CloudFormation's 500-resource and 1 MB
limits whatever the number of tenants, lets one tenant deploy or roll back alone, and makes
`cdk diff` name the tenant a change touches (the stack is `OrderedIngest-Tenant-<id>`).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, CfnOutput, Duration, Stack, Tags
from aws_cdk import aws_events as events
from aws_cdk import aws_s3 as s3
from constructs import Construct

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
    # Tenant stacks import the table, topic and key from the shared stack; a strong reference
    # keeps the shared stack from dropping an export a tenant still uses.
    "@aws-cdk/core:defaultCrossStackReferences": "strong",
}


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
        self._export_what_tenants_import()
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


    def _export_what_tenants_import(self) -> None:
        """Export what every tenant stack imports, whether or not a tenant stack is built with
        this one: the template then does not depend on which tenants are in the app (the
        synth workers of `parallel_synth` each build a slice of them, and a target's Stage may
        have none in a slice). The exports have the names CDK gives the references themselves."""
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
        self.shard_of: dict[str, int] = {}
        if not shards:
            return
        assert self.forwarding is not None
        layout = routing.layout(config.tenants, shards)
        self.shard_of = {tenant_id: shard.index for shard in layout for tenant_id in shard.tenant_ids}
        self.shard_routing = ShardRouting(
            self,
            "ShardRouting",
            ShardRoutingProps(
                landing_bucket_name=self.resources.landing_bucket.bucket_name,
                shards=layout,
                forwarding=self.forwarding,
            ),
        )

    def shard_bus_name(self, tenant_id: str) -> str | None:
        """The name of the bus that holds the tenant's rules (None: the default bus)."""
        shard = self.shard_of.get(tenant_id)
        return None if shard is None else names.shard_bus_name(shard)


class TenantStack(_IngestStack):
    """One tenant's pipeline."""

    def __init__(self, scope: Construct, tenant: TenantConfig, shared_stack: SharedStack) -> None:
        super().__init__(
            scope,
            names.TENANT_STACK.render(tenant.id),
            description=f"Ordered per-tenant file ingestion: tenant {tenant.id}",
        )
        Tags.of(self).add("ordered-ingest:tenant", tenant.id)
        # The buckets are imported by their fixed names rather than by cross-stack reference,
        # so that this stack's policies name the tenant's prefix literally.
        self.add_stack_dependency(shared_stack)
        shared = shared_stack.resources
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
                event_bus=self._event_bus(shared_stack.shard_bus_name(tenant.id)),
                kms_key=tenant.encryption.kms_key if tenant.encryption is not None else None,
                shared_kms_key_arn=encryption.shared_key_arn(self, shared.kms_key_setting),
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
