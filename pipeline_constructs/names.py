"""The names the constructs, `ops` and the local runtime give AWS resources, built from the one
table of name families and their limits in the contract (`lambdas/contract/names.py`):
the families are re-exported here, and rendered where their placeholders are fixed.
"""

from __future__ import annotations

from lambdas import contract
from lambdas.contract import (
    APP_NAME,
    CLOSER_FUNCTION,
    COMPLETION_FUNCTION,
    CONTROLLER_FUNCTION,
    INTAKE_DLQ,
    MAX_TENANT_ID_LENGTH,
    PAGE_STATE_MACHINE,
    QUEUE,
    REGISTER_FUNCTION,
    RESERVED_ID_PART,
    RULE,
    SECTION_STATE_MACHINE,
    SEQUENCE_QUEUE,
    SPLIT_FUNCTION,
    STATE_MACHINE,
    STATUS_RULE,
    TENANT_STACK,
    DerivedName,
    tightest_broken,
    upload_access_point_name,
)

# The contract's names are re-exported (the constructs, `ops` and the local runtime import them from
# here); `__all__` makes that explicit, as mypy's strict mode requires.
__all__ = [
    "ALARM_TOPIC_OUTPUT",
    "APP_NAME",
    "CLOSER_FUNCTION",
    "COMPLETION_FUNCTION",
    "CONTROLLER_FUNCTION",
    "INTAKE_DLQ",
    "MAX_TENANT_ID_LENGTH",
    "PAGE_STATE_MACHINE",
    "QUEUE",
    "REGISTER_FUNCTION",
    "RESERVED_ID_PART",
    "RULE",
    "SECTION_STATE_MACHINE",
    "SEQUENCE_QUEUE",
    "SPLIT_FUNCTION",
    "STATE_MACHINE",
    "STATUS_RULE",
    "TENANT_STACK",
    "DerivedName",
    "dashboard_stack_name",
    "landing_bucket_name",
    "routing_dlq",
    "shard_bus_name",
    "shard_objects_rule_name",
    "shard_status_rule_name",
    "shared_stack_name",
    "tightest_broken",
    "unmatched_bus_name",
    "unmatched_forward_rule_name",
    "unmatched_uploads_dlq",
    "unmatched_uploads_log_group",
    "unmatched_uploads_rule_name",
    "upload_access_point_name",
    "work_bucket_name",
]

#: The shared stack's output that holds the alarm topic's ARN (written by `stacks.SharedStack`,
#: shown by `ops status`): a fixed name, no export.
ALARM_TOPIC_OUTPUT = "AlarmTopicArn"

# Every name below is rendered when called, with the qualifier in effect (`contract.qualified`).


def shared_stack_name() -> str:
    return contract.SHARED_STACK.render()


def unmatched_uploads_log_group() -> str:
    return contract.UNMATCHED_UPLOADS_LOG_GROUP.render()


def unmatched_uploads_dlq() -> str:
    return contract.UNMATCHED_UPLOADS_DLQ.render()


def routing_dlq() -> str:
    return contract.ROUTING_DLQ.render()


def dashboard_stack_name(number: int) -> str:
    """The stack of the `number`th dashboard (2 and later; the first is in the shared stack)."""
    return contract.DASHBOARD_STACK.render(number=number)


def landing_bucket_name(account: str, region: str) -> str:
    """Fixed per account and region so that tenant policies can name their prefix literally."""
    return contract.LANDING_BUCKET.render(account=account, region=region)


def work_bucket_name(account: str, region: str) -> str:
    return contract.WORK_BUCKET.render(account=account, region=region)


# -- sharded routing (`routing.shards`) --------------------------------------------------------


def shard_bus_name(index: int) -> str:
    """The event bus of shard ``index`` (shared stack); the tenants of the shard put their rules on it."""
    return contract.SHARD_BUS.render(index=index)


def shard_objects_rule_name(index: int) -> str:
    """The default bus's rule that forwards S3 uploads under shard ``index``'s tenants' prefixes."""
    return contract.SHARD_OBJECTS_RULE.render(index=index)


def shard_status_rule_name(index: int) -> str:
    """The default bus's rule that forwards status changes of shard ``index``'s tenants' workflows."""
    return contract.SHARD_STATUS_RULE.render(index=index)


def unmatched_uploads_rule_name(index: int) -> str:
    """The catch-all's rule on its bus ``index`` (0: the default bus's rule)."""
    return (contract.UNMATCHED_UPLOADS_RULE if index == 0 else contract.UNMATCHED_UPLOADS_BUS_RULE).render(
        index=index
    )


def unmatched_bus_name(index: int) -> str:
    """The catch-all's bus ``index`` past one pattern's worth of prefixes (`routing.unmatched_layout`)."""
    return contract.UNMATCHED_BUS.render(index=index)


def unmatched_forward_rule_name(index: int) -> str:
    return contract.UNMATCHED_FORWARD_RULE.render(index=index)
