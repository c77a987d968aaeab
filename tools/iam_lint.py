"""Lint every IAM policy of the synthesized app with parliament (duo-labs/parliament).

    python -m tools.iam_lint [--tenants FILE]     # or: make iam-lint TENANTS=FILE

prints each finding, acknowledged ones with their reason, and exits 1 when a finding is not
acknowledged (0 otherwise, 2 when the tenants file cannot be synthesized).

Identity, resource and trust policies are rendered by tools/iam_policies.py (a trust policy is
linted as the role's resource policy: parliament has no notion of them), and each statement
is linted on its own, so every finding names its statement. Findings that are right to keep
are acknowledged in ONE place, tools/iam_lint_acknowledgements.yaml, each narrowed to the
statements it is about, with its reason; a new finding fails tests/test_iam_lint.py.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tools.iam_policies import ACCOUNT, PolicyDocument, Resolver, policy_documents

ROOT = Path(__file__).resolve().parent.parent
ACKNOWLEDGEMENTS = Path(__file__).resolve().parent / "iam_lint_acknowledgements.yaml"
#: parliament issues about the whole document, reported once per document.
DOCUMENT_ISSUES = frozenset(
    {"DUPLICATE_SID", "NO_VERSION", "INVALID_VERSION", "OLD_VERSION", "MALFORMED_JSON"}
)
EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


@dataclass(frozen=True)
class Finding:
    """One parliament finding on one statement (`statement` is its Sid, else its actions)."""

    policy: str  # stack/LogicalIdWithoutHash
    resource_type: str
    kind: str
    statement: str
    principal: str
    issue: str
    detail: str

    def __str__(self) -> str:
        return f"{self.issue} in {self.kind} policy {self.policy} [{self.statement}]: {self.detail}"


@dataclass(frozen=True)
class Acknowledgement:
    """A finding that is right as it is: which statements it covers (globs) and why."""

    issue: str
    reason: str
    policy: str = "*"
    resource_type: str = "*"
    statement: str = "*"
    principal: str = "*"
    detail: str = "*"

    def covers(self, finding: Finding) -> bool:
        return finding.issue == self.issue and all(
            fnmatch.fnmatchcase(value, pattern)
            for value, pattern in (
                (finding.policy, self.policy),
                (finding.resource_type, self.resource_type),
                (finding.statement, self.statement),
                (finding.principal, self.principal),
                (finding.detail, self.detail),
            )
        )


def load_acknowledgements(path: Path = ACKNOWLEDGEMENTS) -> list[Acknowledgement]:
    """The acknowledgements file; every entry needs an issue and a reason."""
    entries = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    found = []
    for index, entry in enumerate(entries):
        missing = [key for key in ("issue", "reason") if not str(entry.get(key, "")).strip()]
        if missing:
            raise ValueError(
                f"{path.name} entry {index + 1}: {', '.join(missing)} missing; "
                "every acknowledgement names its issue and its reason"
            )
        found.append(Acknowledgement(**{key: str(value) for key, value in entry.items()}))
    return found


def statement_key(statement: Mapping[str, Any]) -> str:
    """How a finding names its statement: the Sid, else the sorted actions joined by commas."""
    if statement.get("Sid"):
        return str(statement["Sid"])
    actions = statement.get("Action", statement.get("NotAction", []))
    return ",".join(sorted(actions if isinstance(actions, list) else [actions]))


def principal_key(statement: Mapping[str, Any]) -> str:
    """The statement's principals, one string (`AWS:arn...`, `Service:...`, `*`); empty for identity policies."""
    principal = statement.get("Principal", statement.get("NotPrincipal"))
    if principal is None:
        return ""
    if isinstance(principal, str):
        return principal
    parts = []
    for kind, values in sorted(principal.items()):
        for value in values if isinstance(values, list) else [values]:
            parts.append(f"{kind}:{value}")
    return ",".join(parts)


def _analyze(document: Mapping[str, Any]) -> list[Any]:
    from parliament import analyze_policy_string

    return analyze_policy_string(json.dumps(document), include_community_auditors=True).findings


def _details(finding: Any) -> list[str]:
    """The finding's detail as text; a list of per-action details (RESOURCE_MISMATCH) becomes one
    text per action (`states:DescribeExecution: required_format=...`), so that an acknowledgement
    covers one action's mismatch, not every action of the statement."""
    detail = finding.detail
    if not detail and isinstance(finding.location, dict) and "actions" in finding.location:
        detail = {"actions": sorted(finding.location["actions"])}
    if (
        isinstance(detail, list)
        and detail
        and all(isinstance(item, dict) and "action" in item for item in detail)
    ):
        return [
            f"{item['action']}: "
            + ", ".join(f"{key}={value}" for key, value in sorted(item.items()) if key != "action")
            for item in detail
        ]
    return [detail if isinstance(detail, str) else json.dumps(detail, sort_keys=True, default=str)]


def lint_document(doc: PolicyDocument, own_account: str = ACCOUNT) -> list[Finding]:
    """parliament's findings on one document; in the principals, the account the stack is
    deployed to reads `<account>` (acknowledgements name it so, whatever the target)."""
    findings = []
    for raw in _analyze(doc.document):
        if raw.issue in DOCUMENT_ISSUES:
            findings += [
                Finding(doc.label, doc.resource_type, doc.kind, "", "", raw.issue, detail)
                for detail in _details(raw)
            ]
    for statement in doc.statements():
        single = {"Version": doc.document.get("Version", "2012-10-17"), "Statement": [statement]}
        for raw in _analyze(single):
            if raw.issue not in DOCUMENT_ISSUES:
                findings += [
                    Finding(
                        doc.label,
                        doc.resource_type,
                        doc.kind,
                        statement_key(statement),
                        principal_key(statement).replace(f"::{own_account}:", "::<account>:"),
                        raw.issue,
                        detail,
                    )
                    for detail in _details(raw)
                ]
    return findings


def lint(
    templates: Mapping[str, dict[str, Any]], environments: Mapping[str, tuple[str, str]] | None = None
) -> list[Finding]:
    """Every parliament finding over every policy document of the app's templates.
    `environments`: (account, Region) of each stack deployed to explicit ones (deployment
    targets); the others get the resolver's fixed account and Region."""
    environments = environments or {}
    resolver = Resolver(templates, environments=environments)
    return [
        finding
        for doc in policy_documents(templates, resolver)
        for finding in lint_document(doc, environments.get(doc.stack, (ACCOUNT, ""))[0])
    ]


def unacknowledged(findings: Iterable[Finding], acknowledgements: Sequence[Acknowledgement]) -> list[Finding]:
    return [finding for finding in findings if not any(ack.covers(finding) for ack in acknowledgements)]


def report(findings: Sequence[Finding], acknowledgements: Sequence[Acknowledgement]) -> str:
    """One line per finding: acknowledged ones with their reason, the others marked NEW."""
    lines = []
    for finding in findings:
        ack = next((a for a in acknowledgements if a.covers(finding)), None)
        lines.append(f"{'acknowledged' if ack else 'NEW'}: {finding}")
        if ack:
            lines.append(f"    reason: {' '.join(ack.reason.split())}")
    return "\n".join(lines)


def synthesize_templates(tenants_file: Path) -> dict[str, dict[str, Any]]:
    """Every stack's template of the app built from `tenants_file` (cdk-nag on, as in the tests)."""
    return synthesize_app(tenants_file)[0]


def synthesize_app(tenants_file: Path) -> tuple[dict[str, dict[str, Any]], dict[str, tuple[str, str]]]:
    """Every stack's template of the app built from `tenants_file` (cdk-nag on, as in the
    tests) and the environments of the stacks that name one: see `assembly_templates`."""
    from pipeline_constructs.application import build_app, new_app

    with tempfile.TemporaryDirectory(prefix="iam-lint-") as outdir:
        build_app(tenants_file, app=new_app(outdir=outdir)).app.synth()
        return assembly_templates(Path(outdir))


def assembly_templates(outdir: Path) -> tuple[dict[str, dict[str, Any]], dict[str, tuple[str, str]]]:
    """The templates of a cloud assembly directory (cdk.out), those of its Stages (deployment
    targets) too, by display name (`Stack` or `Stage/Stack`), and the (account, Region) of each
    stack deployed to explicit ones."""
    manifest = json.loads((outdir / "manifest.json").read_text(encoding="utf-8"))
    templates: dict[str, dict[str, Any]] = {}
    environments: dict[str, tuple[str, str]] = {}
    for artifact_id, artifact in manifest.get("artifacts", {}).items():
        properties = artifact.get("properties", {})
        if artifact["type"] == "cdk:cloud-assembly":
            nested = assembly_templates(outdir / properties["directoryName"])
            templates.update(nested[0])
            environments.update(nested[1])
        elif artifact["type"] == "aws:cloudformation:stack":
            name = artifact.get("displayName", artifact_id)
            templates[name] = json.loads((outdir / properties["templateFile"]).read_text(encoding="utf-8"))
            account, _, region = artifact.get("environment", "").removeprefix("aws://").partition("/")
            if account.isdigit():
                environments[name] = (account, region)
    return templates, environments


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--tenants", type=Path, default=ROOT / "tenants.yaml", help="tenants file (default: tenants.yaml)"
    )
    args = parser.parse_args(argv)
    try:
        templates, environments = synthesize_app(args.tenants)
    except Exception as error:
        print(f"cannot synthesize {args.tenants}: {error}", file=sys.stderr)
        return EXIT_ERROR
    acknowledgements = load_acknowledgements()
    findings = lint(templates, environments)
    new = unacknowledged(findings, acknowledgements)
    documents = len(policy_documents(templates))
    print(report(findings, acknowledgements) or "no findings")
    print(
        f"{documents} policy documents in {len(templates)} stacks: {len(findings)} findings, "
        f"{len(findings) - len(new)} acknowledged, {len(new)} new"
    )
    return EXIT_FINDINGS if new else EXIT_CLEAN


if __name__ == "__main__":
    sys.exit(main())
