"""cdk-nag acknowledgements: one helper so every one carries a rule, a finding and a reason."""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct

PACK = "AwsSolutions"


def acknowledge(scope: IConstruct, rule: str, reason: str, finding: str | None = None) -> None:
    """Acknowledge ``rule`` (for example ``AwsSolutions-IAM5``) on ``scope``, optionally only
    for one ``finding`` (for example ``Resource::*``), with the reason a reviewer reads."""
    acknowledge_all(scope, [(rule, finding, reason)])


def acknowledge_all(scope: IConstruct, findings: Iterable[tuple[str, str | None, str]]) -> None:
    """Several `(rule, finding, reason)` on one scope, in one call (each call into the CDK
    library is a round trip to its node process: synth time at 1,000 tenants)."""
    acknowledgments = [Acknowledgment(id=f"{PACK}::{rule}[{finding}]" if finding else f"{PACK}::{rule}", reason=reason)
                       for rule, finding, reason in findings]
    if acknowledgments:
        Validations.of(scope).acknowledge(*acknowledgments)
