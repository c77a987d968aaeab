"""`ops preflight`: before a deploy, read the account's real quotas and usage and compare them
with what the tenants file needs (the synth-time check only knows the limits declared in
tenants.yaml).

Per quota: the limit (Service Quotas, or the service's own account API), what is in use now,
how much of that this app already has deployed (a re-deploy replaces it, so it is not counted
twice), and whether what is in use by everything else plus what the tenants file needs fits.

Then the tenants' uploaders that are roles or users of the account itself: each must exist and
carry the tag `uploaders.UPLOADER_TAG_KEY`, or the landing bucket policy cannot keep it to its
access point (docs/security.md, "Uploaders"). Another account's principals and account roots are
not looked up: the bucket grants them nothing directly, and their IAM is not this account's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from pipeline_constructs import capacity, names, routing, uploaders
from pipeline_constructs.config import TenantConfig

#: Service Quotas codes of the quotas not readable from the service's own account API.
SERVICE_QUOTAS = {
    "eventbridge_rules_per_bus": ("events", "L-244521F2"),
    "cloudformation_stacks": ("cloudformation", "L-0485CB21"),
}
#: Stack states that count against the stack quota (everything but deleted).
ACTIVE_STACK_STATUSES = (
    "CREATE_IN_PROGRESS", "CREATE_FAILED", "CREATE_COMPLETE", "ROLLBACK_IN_PROGRESS", "ROLLBACK_FAILED",
    "ROLLBACK_COMPLETE", "DELETE_IN_PROGRESS", "DELETE_FAILED", "UPDATE_IN_PROGRESS",
    "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS", "UPDATE_COMPLETE", "UPDATE_FAILED", "UPDATE_ROLLBACK_IN_PROGRESS",
    "UPDATE_ROLLBACK_FAILED", "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS", "UPDATE_ROLLBACK_COMPLETE",
    "REVIEW_IN_PROGRESS", "IMPORT_IN_PROGRESS", "IMPORT_COMPLETE", "IMPORT_ROLLBACK_IN_PROGRESS",
    "IMPORT_ROLLBACK_FAILED", "IMPORT_ROLLBACK_COMPLETE",
)


class WrongAccount(ValueError):
    """The credentials are not those of the target's account."""


@dataclass(frozen=True)
class Reading:
    """One quota in the account: its limit and use, and what the tenants file needs."""

    quota: capacity.Quota
    limit: int
    #: Where the limit was read ("Service Quotas L-244521F2", "IAM account summary", ...).
    source: str
    #: In use now, by everything in the account (Region).
    in_use: int
    #: Of which this app's resources for the tenants in the file (replaced by the deploy).
    this_app: int
    need: capacity.Need

    @property
    def after_deploy(self) -> int:
        return self.in_use - self.this_app + self.need.count

    @property
    def fits(self) -> bool:
        return self.after_deploy <= self.limit

    def as_dict(self) -> dict[str, Any]:
        return {"quota": self.quota.title, "field": self.quota.field, "limit": self.limit, "source": self.source,
                "in_use": self.in_use, "this_app": self.this_app, "need": self.need.count, "need_how": self.need.how,
                "after_deploy": self.after_deploy, "fits": self.fits}


@dataclass(frozen=True)
class UntaggedUploader:
    """A tenant's uploader, a role or user of the target's account, that does not exist or
    does not carry the uploader tag."""

    tenant_id: str
    arn: str
    #: "role" or "user".
    kind: str
    exists: bool

    @property
    def name(self) -> str:
        """The role or user name (an ARN's path is not part of it)."""
        return self.arn.rsplit("/", 1)[-1]

    @property
    def tag_command(self) -> str:
        return (f"aws iam tag-{self.kind} --{self.kind}-name {self.name} "
                f"--tags Key={uploaders.UPLOADER_TAG_KEY},Value=true")

    def line(self) -> str:
        if self.exists:
            return (f"uploader not tagged: tenant '{self.tenant_id}': {self.arn} has no tag "
                    f"{uploaders.UPLOADER_TAG_KEY}, so the landing bucket policy does not keep it to its access "
                    f"point; fix: {self.tag_command}")
        return (f"uploader not found: tenant '{self.tenant_id}': {self.arn} does not exist in this account (the "
                f"deploy of the tenant's access point would fail); fix: create the {self.kind}, then "
                f"{self.tag_command}, or correct the ARN in the tenants file")

    def as_dict(self) -> dict[str, Any]:
        return {"tenant": self.tenant_id, "arn": self.arn, "exists": self.exists, "fix": self.tag_command}


@dataclass(frozen=True)
class Result:
    """What `ops preflight` found: every quota, and the uploaders not ready."""

    readings: list[Reading]
    untagged: list[UntaggedUploader]

    @property
    def fits(self) -> bool:
        return all(r.fits for r in self.readings)

    @property
    def ready(self) -> bool:
        """Every quota fits and every uploader of the account is tagged: deploy."""
        return self.fits and not self.untagged


def preflight(target: capacity.Target, clients: Any) -> Result:
    """Read every quota of ``target`` and its uploaders' tags from the account ``clients`` reach."""
    account = clients("sts").get_caller_identity()["Account"]
    if target.account is not None and account != target.account:
        raise WrongAccount(f"the credentials are for account {account}, {target.label} is account "
                           f"{target.account}: use that account's credentials (AWS_PROFILE)")
    return Result(_readings(target, clients, account), untagged_uploaders(target.tenants, clients("iam"), account))


def untagged_uploaders(tenants: Sequence[TenantConfig], iam: Any, account: str) -> list[UntaggedUploader]:
    """Each uploader of ``tenants`` that is a role or user of ``account`` and does not exist or
    lacks the uploader tag (any value; IAM matches tag keys in policies without regard to case)."""
    found = []
    for tenant in tenants:
        for arn in tenant.uploaders:
            kind = _own_identity(arn, account)
            if kind is None:
                continue
            untagged = UntaggedUploader(tenant.id, arn, kind, exists=True)
            try:
                keys = _tag_keys(iam, kind, untagged.name)
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") != "NoSuchEntity":
                    raise
                found.append(UntaggedUploader(tenant.id, arn, kind, exists=False))
                continue
            if uploaders.UPLOADER_TAG_KEY.lower() not in {k.lower() for k in keys}:
                found.append(untagged)
    return found


def _own_identity(arn: str, account: str) -> str | None:
    """"role" or "user" for a role or user ARN of ``account``; None for another account's
    principal or an account root."""
    parts = arn.split(":", 5)
    if parts[4] != account or uploaders.is_account_root(arn):
        return None
    return parts[5].split("/", 1)[0]


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
    limit = target.routing.event_pattern_chars if target.routing is not None else routing.MAX_EVENT_PATTERN_CHARS
    # Whatever layout is deployed now (tenant rules before sharding, forwards after), all are this app's.
    own_rules = routing.default_bus_rule_names(tenants, shards, pattern_limit=limit) | routing.default_bus_rule_names(
        tenants, 0, pattern_limit=limit)
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
        Reading(quotas["eventbridge_rules_per_bus"], rules_limit, rules_source, len(rules), len(rules & own_rules),
                need("eventbridge_rules_per_bus")),
        Reading(quotas["lambda_concurrent_executions"], concurrency, "Lambda account settings",
                # in use: what functions reserve (the need adds the unreserved minimum)
                concurrency - int(settings["UnreservedConcurrentExecutions"]),
                capacity.RESERVED_CONCURRENCY_PER_TENANT * len(deployed), need("lambda_concurrent_executions")),
        Reading(quotas["iam_roles"], int(summary["RolesQuota"]), "IAM account summary", int(summary["Roles"]),
                capacity.ROLES_PER_TENANT * len(deployed)
                + (capacity.SHARED_ROLES + routing.routing_roles(tenants, shards, pattern_limit=limit)) * shared_deployed,
                need("iam_roles")),
        Reading(quotas["cloudformation_stacks"], stacks_limit, stacks_source, len(stacks), len(stacks & own_stacks),
                need("cloudformation_stacks")),
        Reading(quotas["state_machines"], target.limit("state_machines"),
                "tenants.yaml (declared: not read from the account)", len(machines), len(machines & own_machines),
                need("state_machines")),
        # No Service Quotas code is documented for it: the declared limit (AWS's default 10,000).
        Reading(quotas["s3_access_points"], target.limit("s3_access_points"),
                "tenants.yaml (declared: not read from the account)", len(access_points),
                len(access_points & own_access_points), need("s3_access_points")),
    ]


def _service_quota(client: Any, service: str, code: str, *, declared: int) -> tuple[int, str]:
    """The applied quota, else AWS's default for the account, else the declared limit."""
    for call, kind in ((client.get_service_quota, "applied"), (client.get_aws_default_service_quota, "default")):
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


def render(target: capacity.Target, result: Result) -> str:
    """The table `ops preflight` prints, then a verdict line per quota that does not fit and one
    per uploader not tagged."""
    readings, tenants = result.readings, target.tenants
    header = ("quota", "limit", "source", "in use", "this app", "need", "after deploy", "fits")
    rows = [(r.quota.title, str(r.limit), r.source, str(r.in_use), str(r.this_app), str(r.need.count),
             str(r.after_deploy), "yes" if r.fits else "NO") for r in readings]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = [f"preflight of {target.label}: {len(tenants)} tenant{'s' if len(tenants) != 1 else ''} in the tenants file"]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in (header, *rows)]
    for r in readings:
        if not r.fits:
            lines.append(f"does not fit: {r.quota.title}: {r.after_deploy} after the deploy ({r.in_use} in use, "
                         f"{r.this_app} of them this app's, + need {r.need.count}: {r.need.how}), limit {r.limit}; "
                         f"fix: {r.quota.fix}")
    if result.fits:
        lines.append("fits: every quota holds what the tenants file needs")
    lines += [u.line() for u in result.untagged]
    return "\n".join(lines)
