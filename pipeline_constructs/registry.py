"""Where each pipeline lives, as the pipeline itself publishes it: every `TenantPipeline` writes
one SSM parameter (`contract.PIPELINE_PARAMETER`, under the qualifier's path) holding its
`TenantResources` as JSON, in whatever stack it is deployed. `ops` lists them by path; it
needs no stack names, so a pipeline embedded in a team's own stack is operated like the app's.
Pure (no CDK): `ops` imports it."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from lambdas import contract


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
    #: The shared landing bucket ("" if its stack did not publish it).
    landing_bucket: str = ""
    #: The `live` alias of the file workflow, which `ops resume` starts through ("" for a stack
    #: deployed before versions: then the state machine itself).
    state_machine_alias_arn: str = ""
    #: Where the pipeline's alarms and failed-file notifications go ("" if not published).
    alarm_topic_arn: str = ""

    @property
    def start_arn(self) -> str:
        """What a resumed file starts through: the `live` alias, as the controller does."""
        return self.state_machine_alias_arn or self.state_machine_arn


def parameter_name(tenant_id: str) -> str:
    """The registry parameter of `tenant_id`, under the qualifier in effect."""
    return contract.PIPELINE_PARAMETER.render(tenant_id)


def parameter_path() -> str:
    """The path every pipeline of the qualifier in effect registers under (ends with `/`)."""
    return contract.PIPELINE_PARAMETER.render("")


def record(resources: TenantResources) -> dict[str, Any]:
    """The parameter's value, before JSON (the construct renders it with its tokens)."""
    return dataclasses.asdict(resources)


def registered(ssm: Any) -> dict[str, TenantResources]:
    """Every pipeline registered under `parameter_path()`, by tenant id. A value this version
    cannot read (written by a newer one) keeps the fields it knows."""
    known = {f.name for f in dataclasses.fields(TenantResources)}
    found: dict[str, TenantResources] = {}
    for page in ssm.get_paginator("get_parameters_by_path").paginate(Path=parameter_path()):
        for parameter in page.get("Parameters", []):
            value = json.loads(parameter["Value"])
            resources = TenantResources(**{k: v for k, v in value.items() if k in known})
            found[resources.tenant_id] = resources
    return found
