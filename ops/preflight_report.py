"""What `ops preflight` found and how it is shown: a reading per quota, a finding per principal,
bearer secret or sink host not ready, the `Result` that holds them, and `render`, the report
it prints. Nothing here calls AWS: ops/preflight.py reads the account and builds these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline_constructs import capacity, uploaders


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
        return {
            "quota": self.quota.title,
            "field": self.quota.field,
            "limit": self.limit,
            "source": self.source,
            "in_use": self.in_use,
            "this_app": self.this_app,
            "need": self.need.count,
            "need_how": self.need.how,
            "after_deploy": self.after_deploy,
            "fits": self.fits,
            **({"unreserved_after_deploy": unreserved} if unreserved is not None else {}),
        }


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
        return (
            f"aws iam tag-{self.kind} --{self.kind}-name {self.name} "
            f"--tags Key={uploaders.UPLOADER_TAG_KEY},Value=true"
        )

    @property
    def fix(self) -> str:
        if self.exists:
            return self.tag_command
        then_tag = f", then {self.tag_command}" if self.field == "uploaders" else ""
        when = " before the deploy" if self.field == "completion.callers" else ""
        return f"create the {self.kind}{when}{then_tag}, or correct the ARN in the tenants file"

    def line(self) -> str:
        if self.exists:
            return (
                f"uploader not tagged: tenant '{self.tenant_id}': {self.arn} has no tag "
                f"{uploaders.UPLOADER_TAG_KEY}, so the landing bucket policy does not keep it to its access "
                f"point; fix: {self.fix}"
            )
        return (
            f"principal not found: tenant '{self.tenant_id}', {self.field}: {self.arn} does not exist in this "
            f"account ({MISSING_PRINCIPAL[self.field]}); fix: {self.fix}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant_id,
            "field": self.field,
            "arn": self.arn,
            "exists": self.exists,
            "fix": self.fix,
            "line": self.line(),
        }


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
        return {
            "tenants": list(self.tenant_ids),
            "secret": self.secret,
            "problem": self.problem,
            "fix": self.fix,
            "line": self.line(),
        }


@dataclass(frozen=True)
class HostFinding:
    """A public sink host that does not resolve (from where preflight runs)."""

    tenant_ids: tuple[str, ...]
    host: str
    #: The resolver's reason ("Name or service not known").
    reason: str

    @property
    def fix(self) -> str:
        return (
            "correct the host in the tenant's sink.url, or publish its DNS record before the first file "
            "(the register function posts every record to it)"
        )

    def line(self) -> str:
        return f"sink host does not resolve: {_tenants(self.tenant_ids)}: {self.host} ({self.reason}); fix: {self.fix}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenants": list(self.tenant_ids),
            "host": self.host,
            "reason": self.reason,
            "fix": self.fix,
            "line": self.line(),
        }


def _tenants(tenant_ids: Sequence[str]) -> str:
    quoted = ", ".join(f"'{t}'" for t in tenant_ids)
    return f"tenant{'s' if len(tenant_ids) != 1 else ''} {quoted}"


#: The kinds of finding, in the order of their exit codes (the lowest code wins: ops/exits.py).
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
        found = {
            QUOTA: not self.fits,
            PRINCIPAL: bool(self.principals),
            SECRET: bool(self.secrets),
            HOST: bool(self.hosts),
        }
        return [kind for kind, present in found.items() if present]

    @property
    def ready(self) -> bool:
        """Every quota fits, every principal of the account exists (uploaders tagged), every bearer
        secret holds a token and every public sink host resolves: deploy."""
        return not self.kinds


def render(target: capacity.Target, result: Result) -> str:
    """The table `ops preflight` prints, then a verdict line per quota that does not fit, and a
    line per finding of the other checks (and one for what could not be checked from here)."""
    readings, tenants = result.readings, target.tenants
    header = ("quota", "limit", "source", "in use", "this app", "need", "after deploy", "fits")
    rows = [
        (
            r.quota.title,
            str(r.limit),
            r.source,
            str(r.in_use),
            str(r.this_app),
            str(r.need.count),
            str(r.after_deploy),
            "yes" if r.fits else "NO",
        )
        for r in readings
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = [
        f"preflight of {target.label}: {len(tenants)} tenant{'s' if len(tenants) != 1 else ''} in the tenants file"
    ]
    lines += [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in (header, *rows)
    ]
    for r in readings:
        if not r.fits:
            unreserved = r.unreserved_after_deploy
            left = (
                f": {unreserved} would stay unreserved, Lambda keeps at least "
                f"{capacity.MIN_UNRESERVED_CONCURRENCY}"
                if unreserved is not None
                else ""
            )
            lines.append(
                f"does not fit: {r.quota.title}: {r.after_deploy} after the deploy ({r.in_use} in use, "
                f"{r.this_app} of them this app's, + need {r.need.count}: {r.need.how}), limit {r.limit}"
                f"{left}; fix: {r.quota.fix}"
            )
    if result.fits:
        lines.append("fits: every quota holds what the tenants file needs")
    lines += [p.line() for p in result.principals]
    if result.principals_not_checked:
        lines.append(
            "not looked up: principals of other accounts and account roots (this account's IAM cannot see "
            "them; make sure they exist before the deploy): " + ", ".join(result.principals_not_checked)
        )
    lines += [s.line() for s in result.secrets]
    lines += [h.line() for h in result.hosts]
    if result.hosts_not_checked:
        lines.append(
            f"not resolved: the sink hosts of {_tenants(result.hosts_not_checked)} with network (a VPC "
            "sink may have a private DNS name)"
        )
    return "\n".join(lines)
