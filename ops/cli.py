"""`python -m ops` (or the installed `ops`): the operator's CLI, against AWS or the local runtime.

    python -m ops [--region R] [--endpoint-url URL] [--qualifier Q] status [TENANT] [--json]
    python -m ops resume TENANT
    python -m ops replace TENANT --key KEY [--version VERSION_ID] [--from-record N]
    python -m ops skip TENANT --reason TEXT
    python -m ops pause (TENANT... | --all) --reason TEXT
    python -m ops unpause (TENANT... | --all)
    python -m ops quarantine list TENANT [--show-body]
    python -m ops quarantine replay TENANT (NAME | --all)
    python -m ops skip-gap TENANT --reason TEXT [--to N]
    python -m ops dlq list|replay TENANT
    python -m ops reconcile TENANT [--since DATE] [--replay] [--json]
    python -m ops preflight [--tenants FILE] [--target NAME] [--json]

Exit codes (0 done, 1 failed, 2 bad usage, 3 refused with nothing changed, 4 to 13 one
situation each): `--help` and docs/operations.md list them. `--qualifier Q` works on the copy
of the app deployed with `qualifier: Q` (its names start with `Q-`); `preflight` takes the
qualifier of the tenants file it reads.

The parser is in ops/cli_parser.py, the exit codes and failure messages in ops/exits.py, the
clients in ops/clients.py, the other commands in ops/commands.py; the exit codes, `Clients`
and `shared_session` are importable from here as before.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from lambdas import contract, operations
from lambdas.ledger import Ledger, LedgerConflict
from ops import preflight
from ops.cli_parser import build_parser
from ops.clients import Clients, shared_session
from ops.commands import (
    print_unmatched,
    run_dlq,
    run_hold,
    run_preflight,
    run_quarantine,
    run_reconcile,
    select,
)
from ops.discovery import DiscoveryError, discover
from ops.exits import (
    CREDENTIAL_ERRORS,
    EXIT_CONFLICT,
    EXIT_DOES_NOT_FIT,
    EXIT_ERROR,
    EXIT_HALTED,
    EXIT_HOST_DOES_NOT_RESOLVE,
    EXIT_LEFT_IN_DLQ,
    EXIT_NO_CREDENTIALS,
    EXIT_NOT_COMPLETED,
    EXIT_NOT_FOUND,
    EXIT_NOTHING_TO_DO,
    EXIT_OK,
    EXIT_PRINCIPAL_NOT_READY,
    EXIT_SECRET_NOT_READY,
    EXIT_USAGE,
    NO_ACCOUNT_APIS,
    NOT_A_PIPELINE,
    PREFLIGHT_EXITS,
    failed,
    no_credentials,
)
from ops.status import alarm_topic, render, render_alarm_topic, tenant_status
from pipeline_constructs.registry import TenantResources

__all__ = [
    "CREDENTIAL_ERRORS",
    "EXIT_CONFLICT",
    "EXIT_DOES_NOT_FIT",
    "EXIT_ERROR",
    "EXIT_HALTED",
    "EXIT_HOST_DOES_NOT_RESOLVE",
    "EXIT_LEFT_IN_DLQ",
    "EXIT_NOTHING_TO_DO",
    "EXIT_NOT_COMPLETED",
    "EXIT_NOT_FOUND",
    "EXIT_NO_CREDENTIALS",
    "EXIT_OK",
    "EXIT_PRINCIPAL_NOT_READY",
    "EXIT_SECRET_NOT_READY",
    "EXIT_USAGE",
    "NOT_A_PIPELINE",
    "NO_ACCOUNT_APIS",
    "PREFLIGHT_EXITS",
    "Clients",
    "main",
    "shared_session",
]


def main(
    argv: Sequence[str] | None = None,
    *,
    clients: Any = None,
    out: Any = None,
    now: float | None = None,
    resolve: Any = None,
) -> int:
    """Run one command; ``resolve`` is `preflight`'s host resolver (default: the system's)."""
    out = out or sys.stdout
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        if args.command == "preflight":
            return run_preflight(args, clients, out, resolve or preflight.resolve_host)
        clients = clients or Clients(args.region, args.endpoint_url)
        with contract.qualified(args.qualifier):
            return _discover_and_run(args, clients, out, time.time() if now is None else now)
    except CREDENTIAL_ERRORS as error:  # making the clients; a call's are caught where it is made (failed)
        return no_credentials(error)


def _discover_and_run(args: argparse.Namespace, clients: Any, out: Any, now: float) -> int:
    try:
        tenants = discover(clients)
        if args.command in ("pause", "unpause"):
            return run_hold(args, tenants, clients, out, now)
        selected = select(tenants, getattr(args, "tenant", None))
        return _run(args, selected, clients, out, now)
    except (DiscoveryError, KeyError) as error:
        print(f"ops: {error.args[0] if error.args else error}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except operations.NothingToDo as error:
        print(f"ops: {error}", file=sys.stderr)
        return EXIT_NOTHING_TO_DO
    except LedgerConflict:
        print(
            "ops: the tenant's ledger changed while acting; check `ops status` and run the command again",
            file=sys.stderr,
        )
        return EXIT_CONFLICT
    except ValueError as error:
        print(f"ops: {error}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as error:
        return failed(error, args.endpoint_url)


def _run(
    args: argparse.Namespace, selected: list[TenantResources], clients: Any, out: Any, now: float
) -> int:
    ddb = clients("dynamodb")
    if args.command == "status":
        statuses = [tenant_status(t, ddb=ddb, sqs=clients("sqs"), now=now) for t in selected]
        topic = None if args.json else alarm_topic(selected, clients("cloudformation"), clients("sns"))
        if topic is not None:
            print(render_alarm_topic(topic) + "\n", file=out)
        print(json.dumps(statuses, indent=2, default=str) if args.json else render(statuses), file=out)
        if not args.json and args.tenant is None:
            print_unmatched(clients, out, now)
        return EXIT_HALTED if any(s["state"] == "halted" for s in statuses) else EXIT_OK
    (tenant,) = selected
    if args.command == "quarantine":
        return run_quarantine(args, tenant, clients, out)
    if args.command == "dlq":
        return run_dlq(args.dlq_action, tenant, clients, out)
    if args.command == "reconcile":
        return run_reconcile(args, tenant, clients, out)
    ledger = Ledger(ddb, tenant.ledger_table, tenant.tenant_id)
    if args.command == "resume":
        outcome = operations.resume(ledger, clients("stepfunctions"), tenant.start_arn, now)
    elif args.command == "replace":
        outcome = operations.replace(
            ledger,
            clients("stepfunctions"),
            clients("s3"),
            tenant.start_arn,
            landing_prefix=tenant.landing_prefix,
            key=args.key,
            version_id=args.version,
            now=now,
            from_record=args.from_record,
            work_bucket=tenant.work_bucket,
            sequence_pattern=_sequence_pattern(tenant, clients),
        )
    elif args.command == "skip-gap":
        if tenant.ordering != "key_sequence":
            raise operations.NothingToDo(
                f"tenant {tenant.tenant_id} is ordered by {tenant.ordering}: it has no sequence gaps"
            )
        outcome = operations.skip_gap(
            ledger,
            clients("sqs"),
            tenant.queue_url,
            first_sequence=tenant.first_sequence,
            reason=args.reason,
            now=now,
            to=args.to,
        )
    else:
        outcome = operations.skip(ledger, clients("sqs"), tenant.queue_url, args.reason, now)
    print(f"{tenant.tenant_id}: {outcome.message}", file=out)
    return EXIT_OK


def _sequence_pattern(tenant: TenantResources, clients: Any) -> str | None:
    """`key_sequence` ordering: the tenant's `sequence_pattern`, as its controller has it (None otherwise)."""
    if tenant.ordering != "key_sequence":
        return None
    configuration = clients("lambda").get_function_configuration(
        FunctionName=contract.CONTROLLER_FUNCTION.render(tenant.tenant_id)
    )
    return configuration["Environment"]["Variables"][contract.env_name("sequence_pattern")]
