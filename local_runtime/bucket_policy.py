"""A small S3 bucket policy evaluator: the local runtime's gate on uploads, and the judge of the
synthesized landing bucket policy in the tests (docs/security.md, "Uploaders").

Why not moto: moto 5.2.5 does not create `AWS::S3::BucketPolicy` from a template, and its S3
evaluates a bucket policy without the caller (`FakeBucket.get_permission(action, resource)`:
no principal), so a Deny that names one uploader would deny every caller, the pipeline's own
functions included; its IAM check reads the caller's identity policies only. So the local
runtime evaluates the synthesized policy here, before it puts the object with its own client.

What it models of S3's authorization (AWS docs, "How Amazon S3 authorizes a request"): an
explicit Deny that matches wins; otherwise a caller of the bucket's own account is allowed
when the bucket policy or its identity policy allows (`identity_allows`), a caller of another
account only when both do. Matching: `Principal` (`*`, an exact role or user ARN, or an
account root ARN: every principal of that account), `Action`/`NotAction` (wildcards, case
insensitive), `Resource`/`NotResource` (wildcards), and the one condition the policy uses,
`Bool` `aws:SecureTransport`. Anything else (another condition, `NotPrincipal`) is refused
rather than guessed.
"""

from __future__ import annotations

import enum
import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_ACCOUNT_ROOT = re.compile(r"^arn:aws[a-z-]*:iam::(\d{12}):root$")


class Decision(enum.Enum):
    ALLOWED = "allowed"
    EXPLICIT_DENY = "explicitly denied"
    IMPLICIT_DENY = "not allowed (no statement allows it)"


@dataclass(frozen=True)
class Request:
    """One S3 request. ``principal``: the caller's role or user ARN (a role session is its role)."""

    principal: str
    action: str
    resource: str
    secure_transport: bool = True


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    #: The Sid (or index) of the statement that denied it, or the ones that allowed it.
    statements: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return self.decision is Decision.ALLOWED


class UnsupportedPolicy(ValueError):
    """The policy uses an element this evaluator does not model."""


def evaluate(
    statements: Iterable[Mapping[str, Any]],
    request: Request,
    *,
    bucket_account: str,
    identity_allows: bool,
) -> Verdict:
    """S3's decision on ``request`` under the bucket policy ``statements`` (see the module docstring)."""
    allows: list[str] = []
    for index, statement in enumerate(statements):
        if not _applies(statement, request):
            continue
        name = str(statement.get("Sid", f"#{index}"))
        if statement["Effect"] == "Deny":
            return Verdict(Decision.EXPLICIT_DENY, (name,))
        allows.append(name)
    same_account = _account(request.principal) == bucket_account
    allowed = (bool(allows) or identity_allows) if same_account else (bool(allows) and identity_allows)
    return Verdict(Decision.ALLOWED if allowed else Decision.IMPLICIT_DENY, tuple(allows))


def _applies(statement: Mapping[str, Any], request: Request) -> bool:
    unknown = set(statement) - {"Sid", "Effect", "Principal", "Action", "NotAction", "Resource", "NotResource",
                                "Condition"}
    if unknown:
        raise UnsupportedPolicy(f"statement {statement.get('Sid', '')!r}: {sorted(unknown)} are not modelled")
    return (
        _principal_matches(statement.get("Principal"), request.principal)
        and _element_matches(statement, "Action", request.action, case_sensitive=False)
        and _element_matches(statement, "Resource", request.resource, case_sensitive=True)
        and _conditions_hold(statement.get("Condition") or {}, request)
    )


def _principal_matches(principal: Any, caller: str) -> bool:
    if principal == "*":
        return True
    if not isinstance(principal, Mapping) or set(principal) != {"AWS"}:
        raise UnsupportedPolicy(f"principal {principal!r} is not modelled (only '*' and AWS ARNs)")
    for arn in _listed(principal["AWS"]):
        root = _ACCOUNT_ROOT.match(arn)
        if arn == "*" or arn == caller or (root is not None and root.group(1) == _account(caller)):
            return True
    return False


def _element_matches(statement: Mapping[str, Any], name: str, value: str, *, case_sensitive: bool) -> bool:
    positive, negative = statement.get(name), statement.get(f"Not{name}")
    if (positive is None) == (negative is None):
        raise UnsupportedPolicy(f"statement {statement.get('Sid', '')!r} needs exactly one of {name}, Not{name}")
    matched = any(_glob(pattern, value, case_sensitive) for pattern in _listed(positive if positive is not None
                                                                              else negative))
    return matched if positive is not None else not matched


def _glob(pattern: str, value: str, case_sensitive: bool) -> bool:
    if not case_sensitive:
        pattern, value = pattern.lower(), value.lower()
    return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))


def _conditions_hold(conditions: Mapping[str, Any], request: Request) -> bool:
    for operator, entries in conditions.items():
        if operator != "Bool" or set(entries) != {"aws:SecureTransport"}:
            raise UnsupportedPolicy(f"condition {operator} {sorted(entries)} is not modelled")
        expected = {str(v).lower() for v in _listed(entries["aws:SecureTransport"])}
        if str(request.secure_transport).lower() not in expected:
            return False
    return True


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _account(arn: str) -> str:
    parts = arn.split(":")
    return parts[4] if len(parts) > 5 else ""


# --- the synthesized landing bucket policy -----------------------------------------------------


def landing_policy(shared_template: Mapping[str, Any], *, bucket_name: str, partition: str = "aws") -> list[dict]:
    """The landing bucket policy's statements from the shared stack's template, its intrinsics
    resolved for a bucket named ``bucket_name`` (the output `LandingBucketName` names the bucket)."""
    resources = shared_template["Resources"]
    landing = shared_template["Outputs"]["LandingBucketName"]["Value"]["Ref"]
    (policy,) = [r for r in resources.values()
                 if r["Type"] == "AWS::S3::BucketPolicy" and r["Properties"]["Bucket"] == {"Ref": landing}]
    known = {("GetAtt", landing, "Arn"): f"arn:{partition}:s3:::{bucket_name}", ("Ref", landing): bucket_name,
             ("Ref", "AWS::Partition"): partition}
    return [_resolve(statement, known) for statement in policy["Properties"]["PolicyDocument"]["Statement"]]


def _resolve(node: Any, known: Mapping[tuple[str, ...], str]) -> Any:
    if isinstance(node, list):
        return [_resolve(item, known) for item in node]
    if not isinstance(node, dict):
        return node
    if set(node) == {"Fn::Join"}:
        delimiter, parts = node["Fn::Join"]
        return delimiter.join(_resolve(part, known) for part in parts)
    if set(node) == {"Fn::GetAtt"}:
        return known[("GetAtt", *node["Fn::GetAtt"])]
    if set(node) == {"Ref"}:
        return known[("Ref", node["Ref"])]
    return {key: _resolve(value, known) for key, value in node.items()}
