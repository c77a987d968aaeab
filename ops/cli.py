"""`python -m ops`: status, resume and skip, against AWS or the local runtime.

    python -m ops [--region R] [--endpoint-url URL] status [TENANT] [--json]
    python -m ops resume TENANT
    python -m ops skip TENANT --reason TEXT
    python -m ops reconcile TENANT [--since DATE] [--replay] [--json]

Exit codes: 0 done; 1 an AWS call or something unexpected failed; 2 bad usage; 3 refused:
nothing to resume or skip (the message says the tenant's state); 4 the tenant's ledger changed
while acting (run the command again); 5 the tenant or the deployment was not found; 6 reconcile
found object versions not completed and did not replay them (never seen without --replay, or
failed: resume or skip them).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import boto3

import operations
from ledger import Ledger, LedgerConflict
from ops import reconcile
from ops.discovery import DiscoveryError, TenantResources, discover
from ops.status import render, tenant_status

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOTHING_TO_DO, EXIT_CONFLICT, EXIT_NOT_FOUND = 0, 1, 2, 3, 4, 5
EXIT_NOT_COMPLETED = 6


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ops",
        description="Operate the ordered ingestion pipelines: see where tenants stand, resume or skip a failed file.",
        epilog="Exit codes: 0 done, 1 error, 2 usage, 3 nothing to resume/skip, 4 ledger changed (run again), "
        "5 tenant or deployment not found, 6 reconcile found versions not completed (and did not replay them).",
    )
    parser.add_argument("--region", help="AWS region (default: the environment's)")
    parser.add_argument("--endpoint-url", help="a local runtime's endpoint (make demo ARGS=--serve prints it)")
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser("status", help="queue, head wait, current file and progress, last failure, files done")
    status.add_argument("tenant", nargs="?", help="one tenant (default: all)")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    resume = commands.add_parser("resume", help="continue a halted tenant's failed file at its first unacknowledged record")
    resume.add_argument("tenant")
    skip = commands.add_parser("skip", help="give up a halted tenant's failed file and start the next one")
    skip.add_argument("tenant")
    skip.add_argument("--reason", required=True, help="why this file's remaining records may be given up (kept in the ledger)")
    _reconcile_parser(commands)
    return parser


def _reconcile_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "reconcile", help="list the object versions under a tenant's prefix the ledger never saw or never completed")
    parser.add_argument("tenant")
    parser.add_argument("--since", type=reconcile.parse_since, help="only versions modified at or after this date/time (UTC)")
    parser.add_argument("--replay", action="store_true",
                        help="send the never-seen versions to the tenant's queue, in upload order")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


class Clients:
    """boto3 clients for AWS (default credentials) or a local endpoint (any credentials)."""

    def __init__(self, region: str | None, endpoint_url: str | None) -> None:
        session = boto3.session.Session(region_name=region or ("us-east-1" if endpoint_url else None))
        if endpoint_url and session.get_credentials() is None:
            session = boto3.session.Session(
                region_name=session.region_name, aws_access_key_id="local", aws_secret_access_key="local"
            )
        self._session, self._endpoint = session, endpoint_url

    def __call__(self, service: str) -> Any:
        return self._session.client(service, endpoint_url=self._endpoint)


def main(argv: Sequence[str] | None = None, *, clients: Any = None, out: Any = None, now: float | None = None) -> int:
    out = out or sys.stdout
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    clients = clients or Clients(args.region, args.endpoint_url)
    try:
        tenants = discover(clients("cloudformation"))
        selected = _select(tenants, getattr(args, "tenant", None))
        return _run(args, selected, clients, out, time.time() if now is None else now)
    except (DiscoveryError, KeyError) as error:
        print(f"ops: {error.args[0] if error.args else error}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except operations.NothingToDo as error:
        print(f"ops: {error}", file=sys.stderr)
        return EXIT_NOTHING_TO_DO
    except LedgerConflict:
        print("ops: the tenant's ledger changed while acting; check `ops status` and run the command again", file=sys.stderr)
        return EXIT_CONFLICT
    except ValueError as error:
        print(f"ops: {error}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as error:  # noqa: BLE001 - an operator's tool says what failed, with its exit code
        print(f"ops: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_ERROR


def _select(tenants: dict[str, TenantResources], tenant: str | None) -> list[TenantResources]:
    if tenant is None:
        return [tenants[t] for t in sorted(tenants)]
    if tenant not in tenants:
        known = ", ".join(sorted(tenants)) or "none"
        raise KeyError(f"no tenant {tenant!r} is deployed here (tenants: {known})")
    return [tenants[tenant]]


def _run(args: argparse.Namespace, selected: list[TenantResources], clients: Any, out: Any, now: float) -> int:
    ddb = clients("dynamodb")
    if args.command == "status":
        statuses = [tenant_status(t, ddb=ddb, sqs=clients("sqs"), now=now) for t in selected]
        print(json.dumps(statuses, indent=2, default=str) if args.json else render(statuses), file=out)
        return EXIT_OK
    (tenant,) = selected
    if args.command == "reconcile":
        return _reconcile(args, tenant, clients, out)
    ledger = Ledger(ddb, tenant.ledger_table, tenant.tenant_id)
    if args.command == "resume":
        outcome = operations.resume(ledger, clients("stepfunctions"), tenant.state_machine_arn, now)
    else:
        outcome = operations.skip(ledger, clients("sqs"), tenant.queue_url, args.reason, now)
    print(f"{tenant.tenant_id}: {outcome.message}", file=out)
    return EXIT_OK


def _reconcile(args: argparse.Namespace, tenant: TenantResources, clients: Any, out: Any) -> int:
    if not tenant.landing_bucket:
        raise DiscoveryError("the shared stack has no LandingBucketName output: deploy this version first")
    findings = reconcile.reconcile(tenant, tenant.landing_bucket, s3=clients("s3"), ddb=clients("dynamodb"),
                                   since=args.since)
    never_seen = [f.version for f in findings if f.state == reconcile.NEVER_SEEN]
    replayed = reconcile.replay(clients("sqs"), tenant.queue_url, tenant.tenant_id, never_seen) if args.replay else None
    if args.json:
        print(json.dumps({"tenant": tenant.tenant_id, "versions": [f.as_dict() for f in findings],
                          "replayed": replayed}, indent=2), file=out)
    else:
        print(reconcile.render(tenant.tenant_id, findings, replayed), file=out)
    unreplayed = [f for f in findings if f.state != reconcile.SEEN_RUNNING and not (
        replayed is not None and f.state == reconcile.NEVER_SEEN)]
    return EXIT_NOT_COMPLETED if unreplayed else EXIT_OK
