"""Find each tenant's resources from what its pipeline published, never from names typed by
hand: the registry (`pipeline_constructs/registry.py`, an SSM parameter per pipeline, in any
stack), and the outputs of the app's own stacks deployed before it (`OrderedIngest-Tenant-*`
beside `OrderedIngest-Shared`). The same lookup works on AWS and on the local runtime."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pipeline_constructs import names, registry
from pipeline_constructs.registry import TenantResources, registered

#: CDK appends an 8-hex-digit hash to an output's logical id (`PipelineTenantId05680F11`).
_HASH = re.compile(r"[0-9A-F]{8}$")
TENANT_OUTPUTS = ("TenantId", "QueueUrl", "StateMachineArn", "LandingPrefix", "OnFailure")


class DiscoveryError(LookupError):
    """Nothing deployed that `ops` can find (wrong account, region or endpoint?)."""


def _outputs(stack: dict[str, Any]) -> dict[str, str]:
    """Outputs by their construct id (the logical id less CDK's hash), e.g. `PipelineTenantId`."""
    return {_HASH.sub("", o["OutputKey"]): o["OutputValue"] for o in stack.get("Outputs") or []}


def discover(clients: Callable[[str], Any]) -> dict[str, TenantResources]:
    """Every registered pipeline (``clients(service)`` gives a boto3 client), and every tenant of
    the app's tenant stacks that is not registered (a stack deployed before the registry)."""
    found = registered(clients("ssm"))
    try:
        before = _app_stacks(clients("cloudformation"))
    except DiscoveryError:
        if found:
            return found
        raise
    if before is None and not found:
        raise DiscoveryError(
            f"no pipeline registered under {registry.parameter_path()} and no stack {names.shared_stack_name()} "
            "found: check the account, the region (--region), the endpoint (--endpoint-url) or the qualifier "
            "(--qualifier)"
        )
    return {**(before or {}), **found}


def _app_stacks(cfn: Any) -> dict[str, TenantResources] | None:
    """Every tenant of every `OrderedIngest-Tenant-*` stack, with the shared ledger table, from
    their outputs; None without the app's shared stack."""
    stacks: list[dict[str, Any]] = []
    for page in cfn.get_paginator("describe_stacks").paginate():
        stacks.extend(page.get("Stacks", []))
    shared = next((s for s in stacks if s["StackName"] == names.shared_stack_name()), None)
    if shared is None:
        return None
    ledger_table = _outputs(shared).get("LedgerTableName")
    if not ledger_table:
        raise DiscoveryError(
            f"stack {names.shared_stack_name()} has no LedgerTableName output: deploy this version first"
        )
    work_bucket = _outputs(shared).get("WorkBucketName", "")
    prefix = names.TENANT_STACK.render("")
    found: dict[str, TenantResources] = {}
    for stack in stacks:
        if not stack["StackName"].startswith(prefix):
            continue
        outputs = _outputs(stack)
        # One pipeline per construct path: group the outputs by what precedes the output's name.
        paths = {key[: -len("TenantId")] for key in outputs if key.endswith("TenantId")}
        for path in paths:
            values = {name: outputs.get(path + name) for name in TENANT_OUTPUTS}
            if not all(values.values()):
                continue
            found[values["TenantId"]] = TenantResources(
                tenant_id=values["TenantId"],
                stack=stack["StackName"],
                queue_url=values["QueueUrl"],
                state_machine_arn=values["StateMachineArn"],
                landing_prefix=values["LandingPrefix"],
                on_failure=values["OnFailure"],
                ledger_table=ledger_table,
                work_bucket=work_bucket,
                ordering=outputs.get(path + "Ordering") or "arrival",
                first_sequence=int(outputs.get(path + "FirstSequence") or 1),
                intake_dlq_url=outputs.get(path + "IntakeDlqUrl", ""),
                closer_function_name=outputs.get(path + "CloserFunctionName", ""),
                landing_bucket=_outputs(shared).get("LandingBucketName", ""),
                state_machine_alias_arn=outputs.get(path + "StateMachineAliasArn", ""),
            )
    return found


def shared_outputs(cfn: Any) -> dict[str, str]:
    """The shared stack's outputs by construct id (e.g. `UnmatchedUploadsLogGroupName`); empty
    when there is no shared stack."""
    try:
        (stack,) = cfn.describe_stacks(StackName=names.shared_stack_name())["Stacks"]
    except Exception:
        return {}
    return _outputs(stack)
