"""Every resource name derived from a tenant id, with the limit AWS puts on it.

One place, so that config validation can tell a user *which* derived name an id breaks, and
so that the CDK code and the local runtime agree on the names.
"""

from __future__ import annotations

from dataclasses import dataclass

APP_NAME = "OrderedIngest"


@dataclass(frozen=True)
class DerivedName:
    """A name built from a tenant id by a template, and the longest name AWS accepts."""

    kind: str
    template: str
    limit: int

    def render(self, tenant_id: str) -> str:
        return self.template.format(id=tenant_id)

    @property
    def max_id_length(self) -> int:
        return self.limit - (len(self.template) - len("{id}"))


QUEUE = DerivedName("FIFO queue name", "{id}-event-queue.fifo", 80)
#: The queue of a tenant ordered by key sequence (a standard queue: the controller orders).
SEQUENCE_QUEUE = DerivedName("queue name", "{id}-event-queue", 80)
STATE_MACHINE = DerivedName("state machine name", "{id}-file-ingest-workflow", 80)
CONTROLLER_FUNCTION = DerivedName("Lambda function name", "{id}-controller", 64)
SPLIT_FUNCTION = DerivedName("Lambda function name", "{id}-split", 64)
REGISTER_FUNCTION = DerivedName("Lambda function name", "{id}-register-chunk", 64)
CLOSER_FUNCTION = DerivedName("Lambda function name", "{id}-close-file", 64)
TENANT_STACK = DerivedName("stack name", APP_NAME + "-Tenant-{id}", 128)
RULE = DerivedName("EventBridge rule name", "{id}-object-created", 64)
STATUS_RULE = DerivedName("EventBridge rule name", "{id}-sfn-status", 64)
#: Standard, not FIFO: EventBridge refuses a FIFO queue as a target's dead-letter queue.
INTAKE_DLQ = DerivedName("SQS queue name", "{id}-intake-dlq", 80)
#: The child state machine that registers one page of a file's chunks (issue 9).
PAGE_STATE_MACHINE = DerivedName("state machine name", "{id}-file-ingest-page", 80)
SECTION_STATE_MACHINE = DerivedName("state machine name", "{id}-file-ingest-section", 80)
#: The entry point the core system calls to confirm or reject a file (`completion.wait`).
COMPLETION_FUNCTION = DerivedName("Lambda function name", "{id}-completion", 64)
#: What every tenant's state machine names share after the tenant id: a tenant id may not
#: contain it (IAM wildcards on one tenant's child executions would cover another's).
RESERVED_ID_PART = "-file-ingest-"

ALL: tuple[DerivedName, ...] = (
    QUEUE,
    SEQUENCE_QUEUE,
    STATE_MACHINE,
    CONTROLLER_FUNCTION,
    SPLIT_FUNCTION,
    REGISTER_FUNCTION,
    CLOSER_FUNCTION,
    TENANT_STACK,
    RULE,
    STATUS_RULE,
    INTAKE_DLQ,
    PAGE_STATE_MACHINE,
    SECTION_STATE_MACHINE,
    COMPLETION_FUNCTION,
)

#: The longest tenant id every derived name accepts.
MAX_TENANT_ID_LENGTH = min(name.max_id_length for name in ALL)

SHARED_STACK_NAME = APP_NAME + "-Shared"
#: The second and later dashboards, a stack each (the first is in the shared stack).
DASHBOARD_STACK_NAME = APP_NAME + "-Dashboard-{number}"

#: The shared stack's catch-all for uploads outside every tenant prefix (not per tenant).
UNMATCHED_UPLOADS_RULE = "ordered-ingest-unmatched-uploads"
UNMATCHED_UPLOADS_LOG_GROUP = "/ordered-ingest/unmatched-uploads"
UNMATCHED_UPLOADS_DLQ = "ordered-ingest-unmatched-uploads-dlq"


def tightest_broken(tenant_id: str) -> DerivedName | None:
    """The derived name with the smallest limit that ``tenant_id`` overflows, if any."""
    broken = [name for name in ALL if len(name.render(tenant_id)) > name.limit]
    return min(broken, key=lambda name: name.max_id_length) if broken else None


def landing_bucket_name(account: str, region: str) -> str:
    """Fixed per account and region so that tenant policies can name their prefix literally."""
    return f"ordered-ingest-landing-{account}-{region}"


def work_bucket_name(account: str, region: str) -> str:
    return f"ordered-ingest-work-{account}-{region}"


# -- sharded routing (issue 10, `routing.shards`) ----------------------------------------------

#: The event bus of shard k (shared stack); the tenants of the shard put their rules on it.
SHARD_BUS = "ordered-ingest-shard-{index}"
#: The default bus's forwarding rules of shard k: S3 uploads under its tenants' prefixes, and
#: status changes of its tenants' workflows.
SHARD_OBJECTS_RULE = "ordered-ingest-shard-{index}-objects"
SHARD_STATUS_RULE = "ordered-ingest-shard-{index}-status"
#: Where EventBridge puts an event it could not forward to a shard bus for a day.
ROUTING_DLQ = "ordered-ingest-routing-dlq"
#: The rule on the catch-all's bus n (the default bus's keeps `UNMATCHED_UPLOADS_RULE`).
UNMATCHED_UPLOADS_BUS_RULE = "ordered-ingest-unmatched-uploads-{index}"


def shard_bus_name(index: int) -> str:
    return SHARD_BUS.format(index=index)


def shard_objects_rule_name(index: int) -> str:
    return SHARD_OBJECTS_RULE.format(index=index)


def shard_status_rule_name(index: int) -> str:
    return SHARD_STATUS_RULE.format(index=index)


def unmatched_uploads_rule_name(index: int) -> str:
    """The catch-all's rule on its bus ``index`` (0: the default bus's rule)."""
    return UNMATCHED_UPLOADS_RULE if index == 0 else UNMATCHED_UPLOADS_BUS_RULE.format(index=index)


#: The catch-all's buses past one pattern's worth of prefixes (`routing.unmatched_layout`).
UNMATCHED_BUS = "ordered-ingest-unmatched-{index}"
UNMATCHED_FORWARD_RULE = "ordered-ingest-unmatched-{index}-forward"


def unmatched_bus_name(index: int) -> str:
    return UNMATCHED_BUS.format(index=index)


def unmatched_forward_rule_name(index: int) -> str:
    return UNMATCHED_FORWARD_RULE.format(index=index)
