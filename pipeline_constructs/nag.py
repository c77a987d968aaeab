"""cdk-nag acknowledgements: one helper so every one carries a rule, a finding and a reason."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct

PACK = "AwsSolutions"


def acknowledge(scope: IConstruct, rule: str, reason: str, finding: str | None = None) -> None:
    """Acknowledge ``rule`` (for example ``AwsSolutions-IAM5``) on ``scope``, optionally only
    for one ``finding`` (for example ``Resource::*``), with the reason a reviewer reads."""
    rule_id = f"{rule}[{finding}]" if finding else rule
    Validations.of(scope).acknowledge(Acknowledgment(id=f"{PACK}::{rule_id}", reason=reason))
