"""The commands beyond `status` and the ledger ones (ops/cli.py runs those): pause and unpause,
quarantine, dlq, reconcile, and preflight, which reads a tenants file instead of discovering
a deployment. Each prints what it did and returns its exit code (ops/exits.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from lambdas import contract, operations
from lambdas.ledger import Ledger
from ops import dlq, preflight, quarantine, reconcile, unmatched
from ops.clients import Clients
from ops.discovery import DiscoveryError
from ops.exits import (
    EXIT_LEFT_IN_DLQ,
    EXIT_NOT_COMPLETED,
    EXIT_NOTHING_TO_DO,
    EXIT_OK,
    EXIT_USAGE,
    NO_ACCOUNT_APIS,
    PREFLIGHT_EXITS,
    failed,
)
from pipeline_constructs import capacity
from pipeline_constructs.config import AppConfig, ConfigError, load_config
from pipeline_constructs.registry import TenantResources


def select(tenants: dict[str, TenantResources], tenant: str | None) -> list[TenantResources]:
    """The tenant named, or every tenant in name order; KeyError for one not deployed here."""
    if tenant is None:
        return [tenants[t] for t in sorted(tenants)]
    if tenant not in tenants:
        known = ", ".join(sorted(tenants)) or "none"
        raise KeyError(f"no tenant {tenant!r} is deployed here (tenants: {known})")
    return [tenants[tenant]]


def run_hold(
    args: argparse.Namespace, tenants: dict[str, TenantResources], clients: Any, out: Any, now: float
) -> int:
    """`pause`/`unpause` of the tenants named (or `--all`), each on its own: one that does not
    apply (paused already, not paused) is said and the others go on; exit 3 if any did not."""
    if args.all == bool(args.tenants):
        raise ValueError(f"{args.command}: name the tenants, or give --all (not both)")
    selected = (
        [tenants[t] for t in sorted(tenants)] if args.all else [select(tenants, t)[0] for t in args.tenants]
    )
    ddb, code = clients("dynamodb"), EXIT_OK
    for tenant in selected:
        ledger = Ledger(ddb, tenant.ledger_table, tenant.tenant_id)
        try:
            if args.command == "pause":
                outcome = operations.pause(ledger, args.reason, now)
            else:
                outcome = operations.unpause(
                    ledger, clients("stepfunctions"), clients("sqs"), tenant.start_arn, tenant.queue_url, now
                )
        except operations.NothingToDo as error:
            print(f"ops: {error}", file=sys.stderr)
            code = EXIT_NOTHING_TO_DO
            continue
        print(f"{tenant.tenant_id}: {outcome.message}", file=out)
    return code


def run_quarantine(args: argparse.Namespace, tenant: TenantResources, clients: Any, out: Any) -> int:
    if not tenant.work_bucket:
        raise DiscoveryError("the shared stack has no WorkBucketName output: deploy this version first")
    s3, bucket, tenant_id = clients("s3"), tenant.work_bucket, tenant.tenant_id
    if args.action == "list":
        print(
            quarantine.render(
                tenant_id, quarantine.list_quarantined(s3, bucket, tenant_id), show_body=args.show_body
            ),
            file=out,
        )
        return EXIT_OK
    if args.all:
        replayed = quarantine.replay_all(
            s3, clients("sqs"), bucket=bucket, tenant_id=tenant_id, queue_url=tenant.queue_url
        )
    else:
        message = quarantine.read(s3, bucket, quarantine.resolve_key(tenant_id, args.key))
        replayed = [
            (
                message,
                quarantine.replay(
                    s3,
                    clients("sqs"),
                    bucket=bucket,
                    tenant_id=tenant_id,
                    queue_url=tenant.queue_url,
                    message=message,
                ),
            )
        ]
    for message, sent in replayed:
        print(f"{tenant_id}: replayed {message.key} as message {sent}", file=out)
    return EXIT_OK


def run_dlq(action: str, tenant: TenantResources, clients: Any, out: Any) -> int:
    """`dlq list|replay`: EXIT_LEFT_IN_DLQ when messages that are not replayable events remain."""
    sqs = clients("sqs")
    if action == "list":
        letters = dlq.list_tenant(tenant, sqs)
        print(f"{tenant.tenant_id}: {len(letters)} message(s) in the intake dead-letter queue", file=out)
        for letter in letters:
            print(f"  {letter.describe()}", file=out)
        left = [letter for letter in letters if letter.kind == dlq.OTHER]
    else:
        report = dlq.replay_tenant(tenant, sqs=sqs, lambda_=clients("lambda"))
        print("\n".join(report.lines(tenant.tenant_id)), file=out)
        left = report.left
    if left:
        print(
            f"ops: {len(left)} message(s) are not events ops can replay; read them with the SQS console or CLI "
            f"and delete them by hand once handled",
            file=sys.stderr,
        )
        return EXIT_LEFT_IN_DLQ
    return EXIT_OK


def print_unmatched(clients: Any, out: Any, now: float) -> None:
    """`status` of every tenant also shows the uploads no tenant owns (the shared stack logs them)."""
    group = unmatched.log_group_name(clients("cloudformation"))
    if group:
        print("\n" + unmatched.render(unmatched.recent(clients("logs"), group, now=now)), file=out)


def run_reconcile(args: argparse.Namespace, tenant: TenantResources, clients: Any, out: Any) -> int:
    if not tenant.landing_bucket:
        raise DiscoveryError("the shared stack has no LandingBucketName output: deploy this version first")
    findings = reconcile.reconcile(
        tenant, tenant.landing_bucket, s3=clients("s3"), ddb=clients("dynamodb"), since=args.since
    )
    never_seen = [f.version for f in findings if f.state == reconcile.NEVER_SEEN]
    replayed = (
        reconcile.replay(clients("sqs"), tenant.queue_url, tenant.tenant_id, never_seen)
        if args.replay
        else None
    )
    if args.json:
        print(
            json.dumps(
                {
                    "tenant": tenant.tenant_id,
                    "versions": [f.as_dict() for f in findings],
                    "replayed": replayed,
                },
                indent=2,
            ),
            file=out,
        )
    else:
        print(reconcile.render(tenant.tenant_id, findings, replayed), file=out)
    unreplayed = [
        f
        for f in findings
        if f.state != reconcile.SEEN_RUNNING
        and not (replayed is not None and f.state == reconcile.NEVER_SEEN)
    ]
    return EXIT_NOT_COMPLETED if unreplayed else EXIT_OK


def run_preflight(args: argparse.Namespace, clients: Any, out: Any, resolve: Any) -> int:
    """`preflight`: 0 ready; the lowest of PREFLIGHT_EXITS' codes for the kinds of finding (8 a
    quota does not fit, 10 a principal, 11 a bearer secret, 12 a sink host); 2 a bad tenants file
    or target; 13 no credentials; 1 an AWS error."""
    try:
        config = load_config(args.tenants, check_capacity=False)
        target = _preflight_target(config, args.target)
        if args.qualifier not in (None, config.qualifier):
            raise ValueError(
                f"--qualifier {args.qualifier}: the tenants file's qualifier is {config.qualifier!r}; "
                "leave --qualifier out (preflight takes the file's)"
            )
    except (ConfigError, ValueError) as error:
        print(f"ops: {error}", file=sys.stderr)
        return EXIT_USAGE
    clients = clients or Clients(args.region or target.region, args.endpoint_url)
    try:
        with contract.qualified(config.qualifier):
            result = preflight.preflight(target, clients, resolve=resolve)
    except preflight.WrongAccount as error:
        print(f"ops: {error}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as error:
        return failed(error, args.endpoint_url, NO_ACCOUNT_APIS)
    code = min((PREFLIGHT_EXITS[kind] for kind in result.kinds), default=EXIT_OK)
    if args.json:
        print(
            json.dumps(
                {
                    "target": target.name or None,
                    "account": target.account,
                    "region": target.region,
                    "tenants": len(target.tenants),
                    "fits": result.fits,
                    "ready": result.ready,
                    "exit_code": code,
                    "quotas": [r.as_dict() for r in result.readings],
                    "untagged_uploaders": [_uploader_dict(u) for u in result.untagged],
                    "principals": [p.as_dict() for p in result.principals],
                    "principals_not_looked_up": result.principals_not_checked,
                    "secrets": [s.as_dict() for s in result.secrets],
                    "sink_hosts": [h.as_dict() for h in result.hosts],
                    "sink_hosts_not_resolved": result.hosts_not_checked,
                },
                indent=2,
            ),
            file=out,
        )
    else:
        print(preflight.render(target, result), file=out)
    return code


def _uploader_dict(finding: preflight.PrincipalFinding) -> dict[str, Any]:
    """`untagged_uploaders`' shape, kept for the scripts that read it (`principals` has every field)."""
    return {
        "tenant": finding.tenant_id,
        "arn": finding.arn,
        "exists": finding.exists,
        "fix": finding.tag_command,
    }


def _preflight_target(config: AppConfig, name: str | None) -> capacity.Target:
    """The target named, the only one, or the single deployment of a file without targets."""
    found = {t.name: t for t in capacity.targets(config)}
    if not config.targets:
        if name is not None:
            raise ValueError(f"--target {name}: the tenants file declares no targets; leave --target out")
        return found[""]
    if name is None:
        if len(found) == 1:
            return next(iter(found.values()))
        raise ValueError(
            f"the tenants file declares several targets: give --target (one of: {', '.join(found)})"
        )
    if name not in found:
        raise ValueError(f"--target {name}: no such target in the tenants file (targets: {', '.join(found)})")
    return found[name]
