"""The least-privilege tables of docs/security.md, generated from the synthesized templates.

    python -m tools.security_table            # print the tables
    python -m tools.security_table --write    # replace them in docs/security.md
    python -m tools.security_table --check    # exit 1 when docs/security.md differs

The doc's tables are whatever the templates grant, never a hand-kept list: tests/test_security_doc.py
fails when they drift. The app is tests/fixtures/tenants.yaml with DOC_OPTIONS added, so that
every kind of role exists; one tenant (DOC_TENANT) is shown as `<tenant>` and `<prefix>`, the
shared resources by name, any other ARN without its partition, Region and account.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tools.iam_lint import synthesize_templates
from tools.iam_policies import (
    ACCOUNT,
    PARTITION,
    REGION,
    PolicyDocument,
    Resolver,
    policy_documents,
    strip_hash,
)

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "security.md"
FIXTURE_TENANTS = ROOT / "tests" / "fixtures" / "tenants.yaml"
BEGIN, END = "<!-- tools/security_table.py: begin -->", "<!-- tools/security_table.py: end -->"

#: The tenant the tables show (its id and prefix differ, so `<tenant>` and `<prefix>` do not mix).
DOC_TENANT = "initech"
CORE_SYSTEM_CALLER = "arn:aws:iam::111111111111:role/core-system"
#: Options added to the fixture file so that every kind of role and permission is in the tables:
#: app-level keys, and the doc tenant's own. Add an option here when a feature adds permissions
#: only with that option (sink auth, network, encryption...).
DOC_OPTIONS: dict[str, Any] = {"routing": {"shards": 2}, "encryption": {"kms_key": "create"}}
UPLOADER = "arn:aws:iam::222222222222:role/tenant-uploader"
DOC_TENANT_OPTIONS: dict[str, Any] = {
    "completion": {"wait": True, "timeout_seconds": 3600, "callers": [CORE_SYSTEM_CALLER]},
    "network": {
        "vpc_id": "vpc-0a1b2c3d4e5f60718",
        "subnet_ids": ["subnet-0a1b2c3d4e5f60718"],
        "security_group_ids": ["sg-0a1b2c3d4e5f60718"],
    },
    "uploaders": [UPLOADER],
    "encryption": {"kms_key": "create"},
}
#: Shared resources by logical id (hash removed): how the tables name them.
LABELS = {
    "SharedLanding": "landing bucket",
    "SharedWork": "work bucket",
    "SharedAccessLogs": "access log bucket",
    "SharedLedgerTable": "ledger table",
    "SharedAlarmTopic": "alarm topic",
    "SharedAlarmTopicKey": "alarm topic key",
}
SHARED_STACK = "OrderedIngest-Shared"
TENANT_STACK = f"OrderedIngest-Tenant-{DOC_TENANT}"


#: The other tenants' options: every kind of sink auth is in the app (the parliament check of
#: tests/test_iam_lint.py lints it), though the tables show the doc tenant's (bearer) only.
OTHER_TENANT_OPTIONS: dict[str, dict[str, Any]] = {
    "acme": {
        "sink": {
            "auth": {
                "type": "sigv4",
                "service": "execute-api",
                "region": "us-east-1",
                "invoke_arn": "arn:aws:execute-api:us-east-1:111111111111:a1b2c3d4e5/prod/POST/records",
            }
        }
    },
    "globex": {
        "sink": {
            "auth": {
                "type": "sigv4",
                "service": "lambda",
                "region": "us-east-1",
                "invoke_arn": "arn:aws:lambda:us-east-1:111111111111:function:core-records",
            }
        }
    },
}


def doc_tenants_yaml() -> str:
    """The tests' tenants file with DOC_OPTIONS, DOC_TENANT_OPTIONS and OTHER_TENANT_OPTIONS added."""
    config = yaml.safe_load(FIXTURE_TENANTS.read_text(encoding="utf-8"))
    config.update(DOC_OPTIONS)
    (tenant,) = [entry for entry in config["tenants"] if entry["id"] == DOC_TENANT]
    tenant.update(DOC_TENANT_OPTIONS)
    for entry in config["tenants"]:
        entry.update(OTHER_TENANT_OPTIONS.get(entry["id"], {}))
    return yaml.safe_dump(config, sort_keys=False)


def synthesize() -> dict[str, dict[str, Any]]:
    """The templates of the doc's app (cdk-nag on)."""
    with tempfile.TemporaryDirectory(prefix="security-table-") as directory:
        tenants = Path(directory) / "tenants.yaml"
        tenants.write_text(doc_tenants_yaml(), encoding="utf-8")
        return synthesize_templates(tenants)


class Symbols:
    """Renders resolved strings symbolically: labelled resources by label, the doc tenant's
    prefix and id as `<prefix>` and `<tenant>`, ARNs without partition, Region and account."""

    def __init__(self, templates: Mapping[str, dict[str, Any]], resolver: Resolver) -> None:
        self.replacements: list[tuple[str, str]] = []
        for logical_id in templates[SHARED_STACK]["Resources"]:
            label = LABELS.get(strip_hash(logical_id))
            if label is None:
                continue
            self.replacements.append((resolver.arn_of(SHARED_STACK, logical_id), label))
            self.replacements.append((resolver.name_of(SHARED_STACK, logical_id), label))
        self.replacements.sort(key=lambda pair: -len(pair[0]))  # an ARN before the name inside it
        self.prefix = _tenant_prefix()

    def __call__(self, value: str) -> str:
        for concrete, label in self.replacements:
            value = value.replace(concrete, label)
        value = re.sub(rf"arn:{PARTITION}:([a-z0-9-]+):{REGION}?:{ACCOUNT}?:", r"\1:", value)
        value = value.replace(ACCOUNT, "<account>").replace(REGION, "<region>")
        return value.replace(self.prefix, "<prefix>").replace(DOC_TENANT, "<tenant>")


def _tenant_prefix() -> str:
    config = yaml.safe_load(FIXTURE_TENANTS.read_text(encoding="utf-8"))
    (tenant,) = [entry for entry in config["tenants"] if entry["id"] == DOC_TENANT]
    return str(tenant["prefix"])


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _cell(values: Sequence[str]) -> str:
    return "<br>".join(f"`{value}`" for value in values) if values else ""


def _conditions(statement: Mapping[str, Any], symbols: Symbols) -> list[str]:
    found = []
    for operator, keys in statement.get("Condition", {}).items():
        for key, values in keys.items():
            found.append(f"{operator} {key}: {', '.join(symbols(str(v)) for v in _listed(values))}")
    return found


def _principals(statement: Mapping[str, Any], symbols: Symbols) -> list[str]:
    principal = statement.get("Principal", statement.get("NotPrincipal", ""))
    if isinstance(principal, str):
        return [principal]
    return [
        f"{kind}: {symbols(str(value))}" for kind, values in principal.items() for value in _listed(values)
    ]


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _users(
    template: Mapping[str, Any], role_id: str, symbols: Symbols, resolver: Resolver, stack: str
) -> list[str]:
    """What runs with the role: functions, state machines, rule targets."""
    users = []
    for logical_id, resource in template["Resources"].items():
        props = resource.get("Properties", {})
        refers = {"Fn::GetAtt": [role_id, "Arn"]}
        if props.get("Role") == refers or props.get("RoleArn") == refers:
            users.append(symbols(resolver.name_of(stack, logical_id)))
        for target in props.get("Targets", []) if resource["Type"] == "AWS::Events::Rule" else []:
            if target.get("RoleArn") == refers:
                users.append(f"rule {symbols(resolver.name_of(stack, logical_id))}")
    return sorted(set(users)) if len(users) > 6 else users


def role_tables(
    templates: Mapping[str, dict[str, Any]],
    documents: Sequence[PolicyDocument],
    symbols: Symbols,
    resolver: Resolver,
) -> str:
    """One section per role of the shared stack and the doc tenant's stack."""
    parts = []
    for stack in (TENANT_STACK, SHARED_STACK):
        template = templates[stack]
        for role_id, role in template["Resources"].items():
            if role["Type"] != "AWS::IAM::Role":
                continue
            props = role["Properties"]
            title = symbols(props.get("Description", strip_hash(role_id))).replace("<tenant>", "`<tenant>`")
            (trust,) = [
                d for d in documents if d.stack == stack and d.kind == "trust" and d.resource_id == role_id
            ]
            assumed = sorted({p for s in trust.statements() for p in _principals(s, symbols)})
            users = _users(template, role_id, symbols, resolver, stack)
            scope = "shared" if stack == SHARED_STACK else "one per tenant"
            by = ", ".join(f"`{p}`" for p in assumed)
            used = ", ".join(f"`{u}`" for u in users) or "nothing"
            lines = [
                f"#### {title}",
                "",
                f"Role `{strip_hash(role_id)}` ({scope}), assumed by {by}; used by {used}.",
                "",
            ]
            for managed in props.get("ManagedPolicyArns", []):
                lines += [f"Managed policy: `{symbols(str(resolver.resolve(stack, managed)))}`", ""]
            lines += [_row(["Sid", "Effect", "Actions", "Resources", "Conditions"]), _row(["---"] * 5)]
            for doc in documents:
                if doc.stack == stack and doc.kind == "identity" and role_id in doc.roles:
                    for statement in doc.statements():
                        lines.append(
                            _row(
                                [
                                    symbols(statement.get("Sid", "")),
                                    statement["Effect"],
                                    _actions_cell(statement),
                                    _resources_cell(statement, symbols),
                                    _cell(_conditions(statement, symbols)),
                                ]
                            )
                        )
            parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _actions_cell(statement: Mapping[str, Any]) -> str:
    """The statement's actions; a `NotAction` statement reads "every action but"."""
    if "Action" in statement:
        return _cell([str(a) for a in _listed(statement["Action"])])
    return "every action but " + _cell([str(a) for a in _listed(statement.get("NotAction"))])


def _resources_cell(statement: Mapping[str, Any], symbols: Symbols) -> str:
    """The statement's resources; a `NotResource` statement reads "everything but"."""
    if "Resource" in statement or "NotResource" not in statement:
        return _cell([symbols(str(r)) for r in _listed(statement.get("Resource"))])
    return "everything but " + _cell([symbols(str(r)) for r in _listed(statement["NotResource"])])


def resource_policy_table(
    templates: Mapping[str, dict[str, Any]],
    documents: Sequence[PolicyDocument],
    symbols: Symbols,
    resolver: Resolver,
) -> str:
    """Every resource policy statement and function invoke permission of the two stacks."""
    lines = [
        _row(["On", "Sid", "Effect", "Principal", "Actions", "Resources", "Conditions"]),
        _row(["---"] * 7),
    ]
    for stack in (TENANT_STACK, SHARED_STACK):
        for doc in documents:
            if doc.stack != stack or doc.kind != "resource":
                continue
            on = ", ".join(symbols(resolver.name_of(stack, target)) for target in doc.target) or symbols(
                str(_listed(doc.statements()[0].get("Resource", strip_hash(doc.resource_id)))[0])
            )
            for statement in doc.statements():
                lines.append(
                    _row(
                        [
                            f"`{on}`",
                            symbols(statement.get("Sid", ""))
                            if len(statement.get("Sid", "")) <= 40
                            else "(generated)",
                            statement["Effect"],
                            _cell(_principals(statement, symbols)),
                            _actions_cell(statement),
                            _resources_cell(statement, symbols),
                            _cell(_conditions(statement, symbols)),
                        ]
                    )
                )
        for resource in templates[stack]["Resources"].values():
            if resource["Type"] != "AWS::Lambda::Permission":
                continue
            props = resolver.resolve(stack, resource["Properties"])
            function = symbols(str(props["FunctionName"]))
            conditions = [
                f"{key}: {symbols(str(props[key]))}"
                for key in ("SourceArn", "SourceAccount", "PrincipalOrgID", "FunctionUrlAuthType")
                if key in props
            ]
            lines.append(
                _row(
                    [
                        f"`{function.rsplit(':', 1)[-1]}`",
                        "(invoke permission)",
                        "Allow",
                        _cell([symbols(str(props["Principal"]))]),
                        _cell([props["Action"]]),
                        _cell([function]),
                        _cell(conditions),
                    ]
                )
            )
    return "\n".join(lines)


#: The modules `python -m ops` runs: every AWS call they make is an action an operator needs.
OPS_MODULES = (
    "ops/*.py",
    "pipeline_constructs/registry.py",
    "lambdas/operations.py",
    "lambdas/ledger/*.py",
    "lambdas/runtime.py",
)
#: The clients ops creates (`clients("<service>")`), botocore names.
OPS_SERVICES = (
    "cloudformation",
    "dynamodb",
    "events",
    "iam",
    "lambda",
    "logs",
    "s3",
    "s3control",
    "service-quotas",
    "sqs",
    "ssm",
    "stepfunctions",
    "sts",
)
#: botocore service name -> IAM prefix, where they differ.
IAM_PREFIX = {"stepfunctions": "states", "service-quotas": "servicequotas", "s3control": "s3"}
#: An API operation whose IAM actions are not `<prefix>:<Operation>`.
IAM_ACTIONS_OF = {
    "lambda:Invoke": ("lambda:InvokeFunction",),
    "s3:ListObjectVersions": ("s3:ListBucketVersions",),
    "s3:HeadObject": ("s3:GetObject",),
    "s3:ListObjectsV2": ("s3:ListBucket",),
    "s3:CopyObject": ("s3:GetObject", "s3:PutObject"),
    "dynamodb:TransactWriteItems": ("dynamodb:ConditionCheckItem", "dynamodb:PutItem", "dynamodb:UpdateItem"),
}
#: What each action of an operator is used on (the stacks' resources, by the tables' names).
#: A new AWS call in ops/ fails tests/test_security_doc.py until it is described here.
OPS_RESOURCES = {
    "cloudformation:DescribeStacks": "`*` (discovery: the outputs of the app's stacks deployed before the registry)",
    "cloudformation:ListStacks": "`*` (preflight counts stacks)",
    "dynamodb:BatchGetItem": "`ledger table`, the tenant's items",
    "dynamodb:ConditionCheckItem": "`ledger table`, the tenant's items",
    "dynamodb:DeleteItem": "`ledger table`, the tenant's items",
    "dynamodb:GetItem": "`ledger table`, the tenant's items",
    "dynamodb:PutItem": "`ledger table`, the tenant's items",
    "dynamodb:Query": "`ledger table`, the tenant's items",
    "dynamodb:UpdateItem": "`ledger table`, the tenant's items",
    "events:ListRules": "`*` (preflight counts the default bus's rules)",
    "iam:GetAccountSummary": "`*` (preflight reads the role quota)",
    "iam:ListRoleTags": "the tenants' uploader roles of the account (preflight checks their uploader tag)",
    "iam:ListUserTags": "the tenants' uploader users of the account (preflight checks their uploader tag)",
    "lambda:GetAccountSettings": "`*` (preflight reads the concurrency quota)",
    "lambda:GetFunctionConfiguration": "`<tenant>-controller` (replace, `key_sequence` ordering: its sequence_pattern)",
    "lambda:InvokeFunction": "`<tenant>-close-file` (dlq replay hands status changes to the closer)",
    "logs:FilterLogEvents": "`/ordered-ingest/unmatched-uploads` (status lists unmatched uploads)",
    "s3:DeleteObject": "`work bucket/quarantine/<tenant>/*` (quarantine replay moves a message)",
    "s3:GetObject": "`work bucket/quarantine/<tenant>/*`; `landing bucket/<prefix>*` (replace: the correction's "
    "version, and with --from-record the failed one's records), `work bucket/chunks/<tenant>/*` "
    "(replace --from-record: the failed file's manifest)",
    "s3:ListAccessPoints": "`*` (preflight counts the Region's access points)",
    "s3:ListBucket": "`work bucket`, prefix `quarantine/<tenant>/`",
    "s3:ListBucketVersions": "`landing bucket`, prefix `<prefix>` (reconcile)",
    "s3:PutObject": "`work bucket/quarantine/<tenant>/*` (the replayed copy)",
    "ssm:GetParametersByPath": "`parameter/ordered-ingest/pipelines/*` (discovery: the pipelines' registry)",
    "servicequotas:GetAWSDefaultServiceQuota": "`*` (preflight)",
    "servicequotas:GetServiceQuota": "`*` (preflight)",
    "sqs:ChangeMessageVisibility": "`<tenant>-event-queue.fifo` (or `<tenant>-event-queue`), `<tenant>-intake-dlq`",
    "sqs:DeleteMessage": "`<tenant>-intake-dlq` (dlq replay)",
    "sqs:GetQueueAttributes": "`<tenant>-event-queue.fifo` (status)",
    "sqs:ReceiveMessage": "`<tenant>-intake-dlq` (dlq list and replay)",
    "sqs:SendMessage": "`<tenant>-event-queue.fifo` (replays), `<tenant>-event-queue` (the standard queue of key_sequence tenants)",
    "states:DescribeExecution": "executions of `<tenant>-file-ingest-workflow`",
    "states:ListStateMachines": "`*` (preflight counts state machines)",
    "states:StartExecution": "`<tenant>-file-ingest-workflow` through its `live` alias (resume)",
    "sts:GetCallerIdentity": "none needed (preflight checks the account)",
}


def ops_actions() -> dict[str, list[str]]:
    """Every IAM action the ops modules' AWS calls need, with the modules that make them: the
    botocore operations of OPS_SERVICES whose client method or paginator the code names."""
    import botocore.session
    from botocore import xform_name

    session = botocore.session.get_session()
    operations: dict[str, list[str]] = {}
    for service in OPS_SERVICES:
        model = session.get_service_model(service)
        prefix = IAM_PREFIX.get(service, model.metadata.get("signingName", service))
        for operation in model.operation_names:
            operations.setdefault(xform_name(operation), []).append(f"{prefix}:{operation}")
    found: dict[str, set[str]] = {}
    for pattern in OPS_MODULES:
        for path in sorted(ROOT.glob(pattern)):
            source = path.read_text(encoding="utf-8")
            names = set(re.findall(r"\.([a-z0-9_]+)\b", source)) | set(
                re.findall(r"get_paginator\(\s*\"([a-z0-9_]+)\"", source)
            )
            for name in names & operations.keys():
                for api in operations[name]:
                    for action in IAM_ACTIONS_OF.get(api, (api,)):
                        found.setdefault(action, set()).add(path.relative_to(ROOT).as_posix())
    return {action: sorted(modules) for action, modules in sorted(found.items())}


def ops_table() -> str:
    lines = [_row(["Action", "On", "Called from"]), _row(["---"] * 3)]
    for action, modules in ops_actions().items():
        if action not in OPS_RESOURCES:
            raise KeyError(
                f"{action} (called from {', '.join(modules)}) has no entry in tools/security_table.py "
                "OPS_RESOURCES: say what it is used on"
            )
        lines.append(_row([f"`{action}`", OPS_RESOURCES[action], ", ".join(f"`{m}`" for m in modules)]))
    return "\n".join(lines)


def render(templates: Mapping[str, dict[str, Any]]) -> str:
    resolver = Resolver(templates)
    documents = policy_documents(templates, resolver)
    symbols = Symbols(templates, resolver)
    return "\n".join(
        [
            BEGIN,
            "### Roles",
            "",
            role_tables(templates, documents, symbols, resolver),
            "",
            "### Resource policies",
            "",
            resource_policy_table(templates, documents, symbols, resolver),
            "",
            "### Operators (`python -m ops`)",
            "",
            ops_table(),
            END,
        ]
    )


def embedded(text: str) -> str:
    return text[text.index(BEGIN) : text.index(END) + len(END)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="replace the tables in docs/security.md")
    mode.add_argument("--check", action="store_true", help="exit 1 when docs/security.md differs")
    args = parser.parse_args(argv)
    block = render(synthesize())
    if not (args.write or args.check):
        print(block)
        return 0
    text = DOC.read_text(encoding="utf-8")
    if args.write:
        DOC.write_text(text.replace(embedded(text), block), encoding="utf-8")
    elif args.check and embedded(text) != block:
        print(
            "docs/security.md differs from the templates: run python -m tools.security_table --write",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
