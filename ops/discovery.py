"""Find each tenant's resources from the deployed stacks' outputs (CloudFormation), never from
names typed by hand: the same lookup works on AWS and on the local runtime (moto's CloudFormation)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pipeline_constructs import names

#: CDK appends an 8-hex-digit hash to an output's logical id (`PipelineTenantId05680F11`).
_HASH = re.compile(r"[0-9A-F]{8}$")
TENANT_OUTPUTS = ("TenantId", "QueueUrl", "StateMachineArn", "LandingPrefix", "OnFailure")


class DiscoveryError(LookupError):
    """Nothing deployed that `ops` can find (wrong account, region or endpoint?)."""


@dataclass(frozen=True)
class TenantResources:
    """Where one tenant's pipeline lives."""

    tenant_id: str
    stack: str
    queue_url: str
    state_machine_arn: str
    landing_prefix: str
    on_failure: str
    ledger_table: str
    #: Chunks and quarantined messages; "" if the shared stack predates its output.
    work_bucket: str = ""
    ordering: str = "arrival"
    first_sequence: int = 1
    #: `ops dlq` (optional: a stack deployed before the intake DLQ has neither).
    intake_dlq_url: str = ""
    closer_function_name: str = ""
    #: The shared landing bucket (the shared stack's `LandingBucketName`; "" if not output).
    landing_bucket: str = ""
    #: The `live` alias of the file workflow, which `ops resume` starts through ("" for a stack
    #: deployed before versions: then the state machine itself).
    state_machine_alias_arn: str = ""

    @property
    def start_arn(self) -> str:
        """What a resumed file starts through: the `live` alias, as the controller does."""
        return self.state_machine_alias_arn or self.state_machine_arn


def _outputs(stack: dict[str, Any]) -> dict[str, str]:
    """Outputs by their construct id (the logical id less CDK's hash), e.g. `PipelineTenantId`."""
    return {_HASH.sub("", o["OutputKey"]): o["OutputValue"] for o in stack.get("Outputs") or []}


def discover(cfn: Any) -> dict[str, TenantResources]:
    """Every tenant of every `OrderedIngest-Tenant-*` stack, with the shared ledger table."""
    stacks: list[dict[str, Any]] = []
    for page in cfn.get_paginator("describe_stacks").paginate():
        stacks.extend(page.get("Stacks", []))
    shared = next((s for s in stacks if s["StackName"] == names.shared_stack_name()), None)
    if shared is None:
        raise DiscoveryError(
            f"no stack {names.shared_stack_name()} found: check the account, the region (--region) or the "
            "endpoint (--endpoint-url)"
        )
    ledger_table = _outputs(shared).get("LedgerTableName")
    if not ledger_table:
        raise DiscoveryError(f"stack {names.shared_stack_name()} has no LedgerTableName output: deploy this version "
                             "first")
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
    except Exception:  # noqa: BLE001 - not deployed (moto and AWS raise different errors)
        return {}
    return _outputs(stack)
