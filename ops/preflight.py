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
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from lambdas import sink_auth
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

    @property
    def unreserved_after_deploy(self) -> int | None:
        """Lambda's row: the concurrency left unreserved after the deploy (it fits when at least
        `capacity.MIN_UNRESERVED_CONCURRENCY`, AWS's rule); None for the other quotas."""
        if self.quota.field != "lambda_concurrent_executions":
            return None
        return self.limit - self.after_deploy + capacity.MIN_UNRESERVED_CONCURRENCY

    def as_dict(self) -> dict[str, Any]:
        unreserved = self.unreserved_after_deploy
        return {"quota": self.quota.title, "field": self.quota.field, "limit": self.limit, "source": self.source,
                "in_use": self.in_use, "this_app": self.this_app, "need": self.need.count, "need_how": self.need.how,
                "after_deploy": self.after_deploy, "fits": self.fits,
                **({"unreserved_after_deploy": unreserved} if unreserved is not None else {})}


#: The principal fields checked: (field, needs the uploader tag).
PRINCIPAL_FIELDS = (("uploaders", True), ("completion.callers", False))
#: Why a missing principal fails the deploy.
#: What a missing principal does, by field: an uploader is named in policy conditions (the
#: deploy goes through, its uploads are refused); a caller is a Lambda permission's principal.
MISSING_PRINCIPAL = {
    "uploaders": "the deploy goes through, the policies name it in a condition, but nothing can upload as it",
    "completion.callers": "Lambda refuses a permission naming a principal that does not exist: the deploy would fail",
}


@dataclass(frozen=True)
class PrincipalFinding:
    """A principal of a tenant, a role or user of the target's account, that does not exist, or
    an uploader that does not carry the uploader tag."""

    tenant_id: str
    #: "uploaders" or "completion.callers".
    field: str
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

    @property
    def fix(self) -> str:
        if self.exists:
            return self.tag_command
        then_tag = f", then {self.tag_command}" if self.field == "uploaders" else ""
        when = " before the deploy" if self.field == "completion.callers" else ""
        return f"create the {self.kind}{when}{then_tag}, or correct the ARN in the tenants file"

    def line(self) -> str:
        if self.exists:
            return (f"uploader not tagged: tenant '{self.tenant_id}': {self.arn} has no tag "
                    f"{uploaders.UPLOADER_TAG_KEY}, so the landing bucket policy does not keep it to its access "
                    f"point; fix: {self.fix}")
        return (f"principal not found: tenant '{self.tenant_id}', {self.field}: {self.arn} does not exist in this "
                f"account ({MISSING_PRINCIPAL[self.field]}); fix: {self.fix}")

    def as_dict(self) -> dict[str, Any]:
        return {"tenant": self.tenant_id, "field": self.field, "arn": self.arn, "exists": self.exists,
                "fix": self.fix, "line": self.line()}


@dataclass(frozen=True)
class SecretFinding:
    """A bearer secret the register function could not use: missing, unreadable, without a
    current value, or not a token. Names the secret, never its value."""

    tenant_ids: tuple[str, ...]
    secret: str
    #: "missing", "scheduled_for_deletion", "access_denied", "no_current_value" or "malformed".
    problem: str
    #: What is wrong, a sentence about the secret (never its value).
    what: str
    fix: str

    def line(self) -> str:
        return f"bearer secret not ready: {_tenants(self.tenant_ids)}: {self.what}; fix: {self.fix}"

    def as_dict(self) -> dict[str, Any]:
        return {"tenants": list(self.tenant_ids), "secret": self.secret, "problem": self.problem, "fix": self.fix,
                "line": self.line()}


@dataclass(frozen=True)
class HostFinding:
    """A public sink host that does not resolve (from where preflight runs)."""

    tenant_ids: tuple[str, ...]
    host: str
    #: The resolver's reason ("Name or service not known").
    reason: str

    @property
    def fix(self) -> str:
        return ("correct the host in the tenant's sink.url, or publish its DNS record before the first file "
                "(the register function posts every record to it)")

    def line(self) -> str:
        return f"sink host does not resolve: {_tenants(self.tenant_ids)}: {self.host} ({self.reason}); fix: {self.fix}"

    def as_dict(self) -> dict[str, Any]:
        return {"tenants": list(self.tenant_ids), "host": self.host, "reason": self.reason, "fix": self.fix,
                "line": self.line()}


def _tenants(tenant_ids: Sequence[str]) -> str:
    quoted = ", ".join(f"'{t}'" for t in tenant_ids)
    return f"tenant{'s' if len(tenant_ids) != 1 else ''} {quoted}"


#: The kinds of finding, in the order of their exit codes (the lowest code wins: ops/cli.py).
QUOTA, PRINCIPAL, SECRET, HOST = "quota", "principal", "secret", "host"


@dataclass(frozen=True)
class Result:
    """What `ops preflight` found: every quota, and every finding of the other checks."""

    readings: list[Reading]
    principals: list[PrincipalFinding] = field(default_factory=list)
    #: Principals of other accounts and account roots (distinct, in file order): not looked up.
    principals_not_checked: list[str] = field(default_factory=list)
    secrets: list[SecretFinding] = field(default_factory=list)
    hosts: list[HostFinding] = field(default_factory=list)
    #: Tenants with `network` whose sink host was not resolved (a VPC sink may be private DNS).
    hosts_not_checked: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return all(r.fits for r in self.readings)

    @property
    def untagged(self) -> list[PrincipalFinding]:
        """The uploaders not ready (`--json`'s `untagged_uploaders`, beside `principals`)."""
        return [p for p in self.principals if p.field == "uploaders"]

    @property
    def kinds(self) -> list[str]:
        """The kinds of finding there are, in exit-code order."""
        found = {QUOTA: not self.fits, PRINCIPAL: bool(self.principals), SECRET: bool(self.secrets),
                 HOST: bool(self.hosts)}
        return [kind for kind, present in found.items() if present]

    @property
    def ready(self) -> bool:
        """Every quota fits, every principal of the account exists (uploaders tagged), every bearer
        secret holds a token and every public sink host resolves: deploy."""
        return not self.kinds


def resolve_host(host: str) -> Any:
    """The real resolver: raises OSError (`socket.gaierror`) for a host that does not resolve."""
    return socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)


def preflight(target: capacity.Target, clients: Any, *, resolve: Callable[[str], Any] = resolve_host) -> Result:
    """Read every quota of ``target`` from the account ``clients`` reach, check its tenants'
    principals and bearer secrets there, and resolve their public sink hosts with ``resolve``."""
    account = clients("sts").get_caller_identity()["Account"]
    if target.account is not None and account != target.account:
        raise WrongAccount(f"the credentials are for account {account}, {target.label} is account "
                           f"{target.account}: use that account's credentials (AWS_PROFILE)")
    readings = _readings(target, clients, account)
    principals, not_checked = principal_findings(target.tenants, clients("iam"), account)
    bearer = [t for t in target.tenants if t.sink.auth.type == "bearer"]
    secrets = secret_findings(bearer, clients("secretsmanager")) if bearer else []
    hosts, vpc_tenants = host_findings(target.tenants, resolve)
    return Result(readings, principals, not_checked, secrets, hosts, vpc_tenants)


def principal_findings(tenants: Sequence[TenantConfig], iam: Any,
                       account: str) -> tuple[list[PrincipalFinding], list[str]]:
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
    """"role" or "user" for a role or user ARN of ``account``; None for another account's
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


#: Secrets Manager errors that mean these credentials may not read the secret (or its key).
SECRET_ACCESS_ERRORS = frozenset({"AccessDeniedException", "AccessDenied", "DecryptionFailure"})


def secret_findings(tenants: Sequence[TenantConfig], secrets: Any) -> list[SecretFinding]:
    """Each distinct bearer secret of ``tenants`` the register function could not use, read with
    ``secrets`` (a Secrets Manager client of the target's Region): one finding per secret,
    naming the tenants that use it."""
    by_secret: dict[str, list[str]] = {}
    for tenant in tenants:
        by_secret.setdefault(tenant.sink.auth.secret, []).append(tenant.id)
    region = secrets.meta.region_name
    found = []
    for secret, tenant_ids in by_secret.items():
        problem = _secret_problem(secrets, secret, region)
        if problem is not None:
            found.append(SecretFinding(tuple(tenant_ids), secret, *problem))
    return found


def _secret_problem(secrets: Any, secret: str, region: str) -> tuple[str, str, str] | None:
    """(problem, what, fix) for a secret the register function could not use, else None. The
    value read is parsed and dropped here: nothing returned or raised holds any of it."""
    named = f"secret '{secret}'"
    in_region = f" --region {region}" if region else ""
    put = f"aws secretsmanager put-secret-value --secret-id {secret} --secret-string '<token>'{in_region}"
    may_read = (f"run preflight with credentials allowed secretsmanager:DescribeSecret and "
                f"secretsmanager:GetSecretValue on {secret} (and kms:Decrypt on its key)")
    try:
        described = secrets.describe_secret(SecretId=secret)
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code == "ResourceNotFoundException":
            return "missing", f"{named} does not exist in {region}", _create_command(secret, in_region)
        if code in SECRET_ACCESS_ERRORS:
            return "access_denied", f"{named} cannot be described with these credentials ({code})", may_read
        raise
    if described.get("DeletedDate") is not None:
        return ("scheduled_for_deletion", f"{named} is scheduled for deletion",
                f"aws secretsmanager restore-secret --secret-id {secret}{in_region}")
    try:
        value = secrets.get_secret_value(SecretId=secret)
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code == "ResourceNotFoundException":
            return "no_current_value", f"{named} has no current value (no version labelled AWSCURRENT)", put
        if code in SECRET_ACCESS_ERRORS:
            return "access_denied", f"{named} cannot be read with these credentials ({code})", may_read
        raise
    try:
        sink_auth.token_of(secret, value)
    except sink_auth.SinkAuthError as error:
        # token_of's messages name the secret, never its value.
        return "malformed", str(error), put
    finally:
        del value
    return None


def _create_command(secret: str, in_region: str) -> str:
    """Create the secret; one given by ARN is created by name, and its new ARN goes in the file
    (an ARN ends in the 6 characters Secrets Manager drew for that one secret)."""
    if not secret.startswith("arn:"):
        return f"aws secretsmanager create-secret --name {secret} --secret-string '<token>'{in_region}"
    name = secret.split(":secret:", 1)[1].rsplit("-", 1)[0]
    return (f"aws secretsmanager create-secret --name {name} --secret-string '<token>'{in_region}, then put the ARN "
            "it prints in the tenant's sink.auth.secret (or check the Region and account of the ARN)")


def host_findings(tenants: Sequence[TenantConfig],
                  resolve: Callable[[str], Any]) -> tuple[list[HostFinding], list[str]]:
    """Each public sink host of ``tenants`` that ``resolve`` cannot resolve (each distinct host
    once; IP literals and loopback not resolved), and the tenants with `network`, not resolved."""
    by_host: dict[str, list[str]] = {}
    vpc_tenants: list[str] = []
    for tenant in tenants:
        if tenant.network is not None:
            vpc_tenants.append(tenant.id)
            continue
        host = urlsplit(tenant.sink.url).hostname
        if host and not _literal_or_loopback(host):
            by_host.setdefault(host, []).append(tenant.id)
    found = []
    for host, tenant_ids in by_host.items():
        try:
            resolve(host)
        except (OSError, UnicodeError) as error:
            reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
            found.append(HostFinding(tuple(tenant_ids), host, reason))
    return found, vpc_tenants


def _literal_or_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


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
    """The table `ops preflight` prints, then a verdict line per quota that does not fit, and a
    line per finding of the other checks (and one for what could not be checked from here)."""
    readings, tenants = result.readings, target.tenants
    header = ("quota", "limit", "source", "in use", "this app", "need", "after deploy", "fits")
    rows = [(r.quota.title, str(r.limit), r.source, str(r.in_use), str(r.this_app), str(r.need.count),
             str(r.after_deploy), "yes" if r.fits else "NO") for r in readings]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = [f"preflight of {target.label}: {len(tenants)} tenant{'s' if len(tenants) != 1 else ''} in the tenants file"]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in (header, *rows)]
    for r in readings:
        if not r.fits:
            unreserved = r.unreserved_after_deploy
            left = (f": {unreserved} would stay unreserved, Lambda keeps at least "
                    f"{capacity.MIN_UNRESERVED_CONCURRENCY}" if unreserved is not None else "")
            lines.append(f"does not fit: {r.quota.title}: {r.after_deploy} after the deploy ({r.in_use} in use, "
                         f"{r.this_app} of them this app's, + need {r.need.count}: {r.need.how}), limit {r.limit}"
                         f"{left}; fix: {r.quota.fix}")
    if result.fits:
        lines.append("fits: every quota holds what the tenants file needs")
    lines += [p.line() for p in result.principals]
    if result.principals_not_checked:
        lines.append("not looked up: principals of other accounts and account roots (this account's IAM cannot see "
                     "them; make sure they exist before the deploy): " + ", ".join(result.principals_not_checked))
    lines += [s.line() for s in result.secrets]
    lines += [h.line() for h in result.hosts]
    if result.hosts_not_checked:
        lines.append(f"not resolved: the sink hosts of {_tenants(result.hosts_not_checked)} with network (a VPC "
                     "sink may have a private DNS name)")
    return "\n".join(lines)
