"""`ops preflight`'s checks of what the first file would otherwise find, outside the quotas and
IAM: each bearer secret holds a token as the register function parses it (its value never kept
or printed), each public sink host resolves. ops/preflight.py runs them with the account reads.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import ClientError

from lambdas import sink_auth
from ops.preflight_report import HostFinding, SecretFinding
from pipeline_constructs.config import TenantConfig

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
    may_read = (
        f"run preflight with credentials allowed secretsmanager:DescribeSecret and "
        f"secretsmanager:GetSecretValue on {secret} (and kms:Decrypt on its key)"
    )
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
        return (
            "scheduled_for_deletion",
            f"{named} is scheduled for deletion",
            f"aws secretsmanager restore-secret --secret-id {secret}{in_region}",
        )
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
    return (
        f"aws secretsmanager create-secret --name {name} --secret-string '<token>'{in_region}, then put the ARN "
        "it prints in the tenant's sink.auth.secret (or check the Region and account of the ARN)"
    )


def resolve_host(host: str) -> Any:
    """The real resolver: raises OSError (`socket.gaierror`) for a host that does not resolve."""
    return socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)


def host_findings(
    tenants: Sequence[TenantConfig], resolve: Callable[[str], Any]
) -> tuple[list[HostFinding], list[str]]:
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
