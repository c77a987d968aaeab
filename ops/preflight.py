"""`ops preflight`: before a deploy, read the account's real quotas and usage and compare them
with what the tenants file needs (the synth-time check only knows the limits declared in
tenants.yaml), and check what the first file would otherwise find.

Per quota: the limit, what is in use, and whether everything else's use plus what the tenants
file needs fits (this app's own deployed resources are not counted twice: a re-deploy
replaces them). Then, for the target's tenants: each same-account role or user they name
exists (S3, KMS and Lambda refuse a policy naming one that does not) and each uploader carries
`uploaders.UPLOADER_TAG_KEY` (docs/security.md, "Uploaders"); each bearer secret holds a
token as the register function parses it (`sink_auth.token_of`), its value never kept or
printed; each public sink host resolves (a tenant with a `network` may use private DNS).

The account reads are here (STS, IAM, Lambda, Service Quotas, CloudFormation, EventBridge,
Step Functions, S3 Control); the secret and host checks are in ops/preflight_checks.py, the
findings and the report in ops/preflight_report.py (both re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import ClientError

from ops.preflight_checks import SECRET_ACCESS_ERRORS, host_findings, resolve_host, secret_findings
from ops.preflight_report import (
    HOST,
    MISSING_PRINCIPAL,
    PRINCIPAL,
    PRINCIPAL_FIELDS,
    QUOTA,
    SECRET,
    HostFinding,
    PrincipalFinding,
    Reading,
    Result,
    SecretFinding,
    render,
)
from pipeline_constructs import capacity, names, routing, uploaders
from pipeline_constructs.config import TenantConfig

__all__ = [
    "ACTIVE_STACK_STATUSES",
    "HOST",
    "MISSING_PRINCIPAL",
    "PRINCIPAL",
    "PRINCIPAL_FIELDS",
    "QUOTA",
    "SECRET",
    "SECRET_ACCESS_ERRORS",
    "SERVICE_QUOTAS",
    "HostFinding",
    "PrincipalFinding",
    "Reading",
    "Result",
    "SecretFinding",
    "WrongAccount",
    "host_findings",
    "preflight",
    "principal_findings",
    "render",
    "resolve_host",
    "secret_findings",
]

#: Service Quotas codes of the quotas not readable from the service's own account API.
SERVICE_QUOTAS = {
    "eventbridge_rules_per_bus": ("events", "L-244521F2"),
    "cloudformation_stacks": ("cloudformation", "L-0485CB21"),
}
#: Stack states that count against the stack quota (everything but deleted).
ACTIVE_STACK_STATUSES = (
    "CREATE_IN_PROGRESS",
    "CREATE_FAILED",
    "CREATE_COMPLETE",
    "ROLLBACK_IN_PROGRESS",
    "ROLLBACK_FAILED",
    "ROLLBACK_COMPLETE",
    "DELETE_IN_PROGRESS",
    "DELETE_FAILED",
    "UPDATE_IN_PROGRESS",
    "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS",
    "UPDATE_COMPLETE",
    "UPDATE_FAILED",
    "UPDATE_ROLLBACK_IN_PROGRESS",
    "UPDATE_ROLLBACK_FAILED",
    "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS",
    "UPDATE_ROLLBACK_COMPLETE",
    "REVIEW_IN_PROGRESS",
    "IMPORT_IN_PROGRESS",
    "IMPORT_COMPLETE",
    "IMPORT_ROLLBACK_IN_PROGRESS",
    "IMPORT_ROLLBACK_FAILED",
    "IMPORT_ROLLBACK_COMPLETE",
)


class WrongAccount(ValueError):
    """The credentials are not those of the target's account."""


def preflight(
    target: capacity.Target, clients: Any, *, resolve: Callable[[str], Any] = resolve_host
) -> Result:
    """Read every quota of ``target`` from the account ``clients`` reach, check its tenants'
    principals and bearer secrets there, and resolve their public sink hosts with ``resolve``."""
    account = clients("sts").get_caller_identity()["Account"]
    if target.account is not None and account != target.account:
        raise WrongAccount(
            f"the credentials are for account {account}, {target.label} is account "
            f"{target.account}: use that account's credentials (AWS_PROFILE)"
        )
    readings = _readings(target, clients, account)
    principals, not_checked = principal_findings(target.tenants, clients("iam"), account)
    bearer = [t for t in target.tenants if t.sink.auth.type == "bearer"]
    secrets = secret_findings(bearer, clients("secretsmanager")) if bearer else []
    hosts, vpc_tenants = host_findings(target.tenants, resolve)
    return Result(readings, principals, not_checked, secrets, hosts, vpc_tenants)


def principal_findings(
    tenants: Sequence[TenantConfig], iam: Any, account: str
) -> tuple[list[PrincipalFinding], list[str]]:
    """Each uploader and completion caller (of a tenant with `completion.wait`: without it no
    policy names them) of ``tenants`` that is a role or user of ``account`` and does not exist,
    and each such uploader without the uploader tag (any value; IAM matches tag keys in policies
    without regard to case). Each role or user is read once. Also the principals not looked up:
    another account's, and account roots."""
    found: list[PrincipalFinding] = []
    not_checked: list[str] = []
    tags: dict[tuple[str, str], set[str] | None] = {}
    for tenant in tenants:
        for field_name, needs_tag in PRINCIPAL_FIELDS:
            if field_name == "uploaders":
                arns = tenant.uploaders
            else:
                arns = tenant.completion.callers if tenant.completion.wait else []
            for arn in arns:
                kind = _own_identity(arn, account)
                if kind is None:
                    if arn not in not_checked:
                        not_checked.append(arn)
                    continue
                principal = PrincipalFinding(tenant.id, field_name, arn, kind, exists=True)
                key = (kind, principal.name)
                if key not in tags:
                    tags[key] = _tag_keys_if_exists(iam, kind, principal.name)
                keys = tags[key]
                if keys is None:
                    found.append(PrincipalFinding(tenant.id, field_name, arn, kind, exists=False))
                elif needs_tag and uploaders.UPLOADER_TAG_KEY.lower() not in {k.lower() for k in keys}:
                    found.append(principal)
    return found, not_checked


def _own_identity(arn: str, account: str) -> str | None:
    """ "role" or "user" for a role or user ARN of ``account``; None for another account's
    principal or an account root."""
    parts = arn.split(":", 5)
    if parts[4] != account or uploaders.is_account_root(arn):
        return None
    return parts[5].split("/", 1)[0]


def _tag_keys_if_exists(iam: Any, kind: str, name: str) -> set[str] | None:
    """The role's or user's tag keys; None if it does not exist."""
    try:
        return _tag_keys(iam, kind, name)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "NoSuchEntity":
            raise
        return None


def _tag_keys(iam: Any, kind: str, name: str) -> set[str]:
    found: set[str] = set()
    if kind == "role":
        pages = iam.get_paginator("list_role_tags").paginate(RoleName=name)
    else:
        pages = iam.get_paginator("list_user_tags").paginate(UserName=name)
    for page in pages:
        found |= {t["Key"] for t in page.get("Tags", [])}
    return found


def _readings(target: capacity.Target, clients: Any, account: str) -> list[Reading]:
    tenants = target.tenants
    stacks = _active_stacks(clients("cloudformation"))
    own_stacks = {names.shared_stack_name()} | {names.TENANT_STACK.render(t.id) for t in tenants}
    deployed = [t for t in tenants if names.TENANT_STACK.render(t.id) in stacks]
    shared_deployed = names.shared_stack_name() in stacks
    quotas = {q.field: q for q in capacity.QUOTAS}

    def need(field: str) -> capacity.Need:
        return quotas[field].need(tenants, target.routing)

    rules = _default_bus_rules(clients("events"))
    shards = target.routing.shards if target.routing is not None else 0
    limit = (
        target.routing.event_pattern_chars if target.routing is not None else routing.MAX_EVENT_PATTERN_CHARS
    )
    # Whatever layout is deployed now (tenant rules before sharding, forwards after), all are this app's.
    own_rules = routing.default_bus_rule_names(
        tenants, shards, pattern_limit=limit
    ) | routing.default_bus_rule_names(tenants, 0, pattern_limit=limit)
    machines = _state_machines(clients("stepfunctions"))
    own_machines = {m.render(t.id) for t in tenants for m in capacity.TENANT_STATE_MACHINES}
    access_points = _access_points(clients("s3control"), account)
    own_access_points = {names.upload_access_point_name(t.id) for t in tenants if t.uploaders}
    settings = clients("lambda").get_account_settings()["AccountLimit"]
    summary = clients("iam").get_account_summary()["SummaryMap"]
    quotas_client = clients("service-quotas")

    def declared_or_read(field: str) -> tuple[int, str]:
        service, code = SERVICE_QUOTAS[field]
        return _service_quota(quotas_client, service, code, declared=target.limit(field))

    rules_limit, rules_source = declared_or_read("eventbridge_rules_per_bus")
    stacks_limit, stacks_source = declared_or_read("cloudformation_stacks")
    concurrency = int(settings["ConcurrentExecutions"])
    return [
        Reading(
            quotas["eventbridge_rules_per_bus"],
            rules_limit,
            rules_source,
            len(rules),
            len(rules & own_rules),
            need("eventbridge_rules_per_bus"),
        ),
        Reading(
            quotas["lambda_concurrent_executions"],
            concurrency,
            "Lambda account settings",
            # in use: what functions reserve (the need adds the unreserved minimum)
            concurrency - int(settings["UnreservedConcurrentExecutions"]),
            capacity.RESERVED_CONCURRENCY_PER_TENANT * len(deployed),
            need("lambda_concurrent_executions"),
        ),
        Reading(
            quotas["iam_roles"],
            int(summary["RolesQuota"]),
            "IAM account summary",
            int(summary["Roles"]),
            capacity.ROLES_PER_TENANT * len(deployed)
            + (capacity.SHARED_ROLES + routing.routing_roles(tenants, shards, pattern_limit=limit))
            * shared_deployed,
            need("iam_roles"),
        ),
        Reading(
            quotas["cloudformation_stacks"],
            stacks_limit,
            stacks_source,
            len(stacks),
            len(stacks & own_stacks),
            need("cloudformation_stacks"),
        ),
        Reading(
            quotas["state_machines"],
            target.limit("state_machines"),
            "tenants.yaml (declared: not read from the account)",
            len(machines),
            len(machines & own_machines),
            need("state_machines"),
        ),
        # No Service Quotas code is documented for it: the declared limit (AWS's default 10,000).
        Reading(
            quotas["s3_access_points"],
            target.limit("s3_access_points"),
            "tenants.yaml (declared: not read from the account)",
            len(access_points),
            len(access_points & own_access_points),
            need("s3_access_points"),
        ),
    ]


def _service_quota(client: Any, service: str, code: str, *, declared: int) -> tuple[int, str]:
    """The applied quota, else AWS's default for the account, else the declared limit."""
    for call, kind in (
        (client.get_service_quota, "applied"),
        (client.get_aws_default_service_quota, "default"),
    ):
        try:
            value = call(ServiceCode=service, QuotaCode=code)["Quota"]["Value"]
            return int(value), f"Service Quotas {code} ({kind})"
        except ClientError as error:
            reason = error.response.get("Error", {}).get("Code", "error")
            if reason != "NoSuchResourceException":
                return declared, f"tenants.yaml (Service Quotas unreadable: {reason})"
    return declared, "tenants.yaml (not in Service Quotas)"


def _active_stacks(cfn: Any) -> set[str]:
    found: set[str] = set()
    for page in cfn.get_paginator("list_stacks").paginate(StackStatusFilter=list(ACTIVE_STACK_STATUSES)):
        found |= {s["StackName"] for s in page.get("StackSummaries", [])}
    return found


def _default_bus_rules(events: Any) -> set[str]:
    found: set[str] = set()
    for page in events.get_paginator("list_rules").paginate(EventBusName="default"):
        found |= {r["Name"] for r in page.get("Rules", [])}
    return found


def _access_points(s3control: Any, account: str) -> set[str]:
    """The names of the account's S3 access points in the Region (every bucket's)."""
    found: set[str] = set()
    token: str | None = None
    while True:
        page = s3control.list_access_points(AccountId=account, **({"NextToken": token} if token else {}))
        found |= {a["Name"] for a in page.get("AccessPointList", [])}
        token = page.get("NextToken")
        if not token:
            return found


def _state_machines(sfn: Any) -> set[str]:
    found: set[str] = set()
    for page in sfn.get_paginator("list_state_machines").paginate():
        found |= {m["name"] for m in page.get("stateMachines", [])}
    return found
