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
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

import boto3
import botocore.loaders
import botocore.session
from lambdas import operations
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
)
from botocore.parsers import ResponseParserError
from lambdas.ledger import Ledger, LedgerConflict

from lambdas import contract
from ops import dlq, preflight, quarantine, reconcile, unmatched
from ops.discovery import DiscoveryError, discover
from ops.status import alarm_topic, render, render_alarm_topic, tenant_status
from pipeline_constructs import capacity
from pipeline_constructs.config import AppConfig, ConfigError, load_config
from pipeline_constructs.registry import TenantResources

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOTHING_TO_DO, EXIT_CONFLICT, EXIT_NOT_FOUND = 0, 1, 2, 3, 4, 5
EXIT_LEFT_IN_DLQ = 6
EXIT_NOT_COMPLETED = 7
EXIT_DOES_NOT_FIT = 8
EXIT_HALTED = 9
EXIT_PRINCIPAL_NOT_READY = 10
EXIT_SECRET_NOT_READY = 11
EXIT_HOST_DOES_NOT_RESOLVE = 12
EXIT_NO_CREDENTIALS = 13
#: `preflight`'s code per kind of finding; with several kinds, the lowest code is the exit.
PREFLIGHT_EXITS = {preflight.QUOTA: EXIT_DOES_NOT_FIT, preflight.PRINCIPAL: EXIT_PRINCIPAL_NOT_READY,
                   preflight.SECRET: EXIT_SECRET_NOT_READY, preflight.HOST: EXIT_HOST_DOES_NOT_RESOLVE}
#: What boto3 raises when it has no credentials or Region to work with.
CREDENTIAL_ERRORS = (NoCredentialsError, PartialCredentialsError, NoRegionError)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ops",
        description="Operate the ordered ingestion pipelines: see where tenants stand, resume, replace or skip a failed "
        "file, pause and unpause tenants.",
        epilog="Exit codes: 0 done, 1 error, 2 usage, 3 refused: nothing to resume/replace/skip/pause/unpause, or a "
        "correction replace cannot take (nothing changed), 4 ledger changed (run again), "
        "5 tenant or deployment not found, 6 dlq: messages left that are not replayable events, "
        "7 reconcile found versions not completed (and did not replay them), "
        "8 preflight: a quota of the account cannot hold what the tenants file needs, "
        "9 status: a tenant shown is halted (resume or skip its file), "
        "10 preflight: a principal of the account does not exist or an uploader is not tagged, "
        "11 preflight: a bearer secret is missing or not a token, "
        "12 preflight: a sink host does not resolve (several: the lowest), "
        "13 no AWS credentials or Region.",
    )
    parser.add_argument("--region", help="AWS region (default: the environment's)")
    parser.add_argument("--endpoint-url", help="a local runtime's endpoint (make demo ARGS=--serve prints it)")
    parser.add_argument("--qualifier", type=_qualifier, help="the copy of the app deployed with this `qualifier` in "
                        "its tenants file (default: none, the app's names as shipped)")
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser("status", help="queue, head wait, current file and progress, last failure, files done")
    status.add_argument("tenant", nargs="?", help="one tenant (default: all)")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    resume = commands.add_parser("resume", help="continue a halted tenant's failed file at its first unacknowledged record")
    resume.add_argument("tenant")
    replace = commands.add_parser(
        "replace", help="run a corrected object version in a halted tenant's failed file's place, before the files "
        "waiting behind it")
    replace.add_argument("tenant")
    replace.add_argument("--key", required=True, help="the correction's key in the landing bucket (under the tenant's "
                         "prefix: the failed file's key, or another)")
    replace.add_argument("--version", help="the correction's version id (default: the key's latest version)")
    replace.add_argument("--from-record", type=int, default=0, metavar="N",
                         help="send from record N (0-based) on: only if the correction's first N records are those "
                         "the core system acknowledged of the failed version (default 0: send it whole)")
    for name, text in (("pause", "hold tenants (a planned outage of the core system): no file starts, a running one "
                                 "stops at its next chunk boundary, nothing fails or pages"),
                       ("unpause", "end a pause: a stopped file runs on at its first unacknowledged record")):
        held = commands.add_parser(name, help=text)
        held.add_argument("tenants", nargs="*", metavar="TENANT")
        held.add_argument("--all", action="store_true", help="every tenant deployed here")
        if name == "pause":
            held.add_argument("--reason", required=True, help="why (shown by ops status and kept in the ledger)")
    skip = commands.add_parser("skip", help="give up a halted tenant's failed file and start the next one")
    skip.add_argument("tenant")
    skip.add_argument("--reason", required=True, help="why this file's remaining records may be given up (kept in the ledger)")
    _quarantine_parser(commands)
    gap = commands.add_parser(
        "skip-gap", help="ordering key_sequence: give up missing sequence numbers so the file waiting after them starts"
    )
    gap.add_argument("tenant")
    gap.add_argument("--reason", required=True, help="why the missing files may be given up (kept in the ledger)")
    gap.add_argument("--to", type=int, help="the sequence number to go on with (default: the lowest that waits)")
    dead_letters = commands.add_parser("dlq", help="events EventBridge could not deliver to a tenant's queue or closer")
    dlq_action = dead_letters.add_subparsers(dest="dlq_action", required=True)
    for action, text in (("list", "show them, in the order replay would deliver them (nothing changes)"),
                         ("replay", "put file events back into the queue in upload order, status changes to the closer")):
        dlq_action.add_parser(action, help=text).add_argument("tenant")
    _reconcile_parser(commands)
    _preflight_parser(commands)
    return parser


def _qualifier(value: str) -> str:
    if not re.match(contract.QUALIFIER_PATTERN, value) or len(value) > contract.MAX_QUALIFIER_LENGTH:
        raise argparse.ArgumentTypeError(f"{value!r} is not a qualifier: lowercase letters and digits, starting with "
                                         f"a letter, at most {contract.MAX_QUALIFIER_LENGTH} characters")
    return value


def _preflight_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "preflight", help="before a deploy: do the account's quotas hold what the tenants file needs, do its "
        "principals exist (uploaders tagged), do the bearer secrets hold a token, do the sink hosts resolve?")
    parser.add_argument("--tenants", default="tenants.yaml", help="the tenants file (default: tenants.yaml)")
    parser.add_argument("--target", help="the deployment target to check (required when the file declares several); "
                        "its Region is the default --region")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _quarantine_parser(commands: Any) -> None:
    held = commands.add_parser("quarantine", help="messages the controller set aside (not usable file events)")
    actions = held.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="what, why and when, oldest first (the body only with --show-body)")
    listing.add_argument("tenant")
    listing.add_argument("--show-body", action="store_true", help="also print each message's body (may hold anything)")
    replay = actions.add_parser("replay", help="send stored messages back to the tenant's queue, then mark them replayed")
    replay.add_argument("tenant")
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument("key", nargs="?", help="a name from `quarantine list` (or the full key)")
    which.add_argument("--all", action="store_true", help="every quarantined message of the tenant, oldest first")


def _reconcile_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "reconcile", help="list the object versions under a tenant's prefix the ledger never saw or never completed")
    parser.add_argument("tenant")
    parser.add_argument("--since", type=reconcile.parse_since, help="only versions modified at or after this date/time (UTC)")
    parser.add_argument("--replay", action="store_true",
                        help="send the never-seen versions to the tenant's queue, in upload order")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


@functools.cache
def _service_models() -> botocore.loaders.Loader:
    """One loader per process: a new session parses each service's model again, and the demo
    and the tests run commands in-process, one session each."""
    return botocore.loaders.create_loader()


def shared_session(**options: Any) -> boto3.session.Session:
    """A new boto3 session (`boto3.session.Session` options) whose models come from the process's loader."""
    core = botocore.session.get_session()
    core.register_component("data_loader", _service_models())
    return boto3.session.Session(botocore_session=core, **options)


class Clients:
    """boto3 clients for AWS (default credentials) or a local endpoint (any credentials)."""

    def __init__(self, region: str | None, endpoint_url: str | None) -> None:
        session = shared_session(region_name=region or ("us-east-1" if endpoint_url else None))
        if endpoint_url and session.get_credentials() is None:
            session = shared_session(region_name=session.region_name, aws_access_key_id="local", aws_secret_access_key="local")
        self._session, self._endpoint = session, endpoint_url

    def __call__(self, service: str) -> Any:
        return self._session.client(service, endpoint_url=self._endpoint)


def main(argv: Sequence[str] | None = None, *, clients: Any = None, out: Any = None, now: float | None = None,
         resolve: Any = None) -> int:
    """Run one command; ``resolve`` is `preflight`'s host resolver (default: the system's)."""
    out = out or sys.stdout
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        if args.command == "preflight":
            return _preflight(args, clients, out, resolve or preflight.resolve_host)
        clients = clients or Clients(args.region, args.endpoint_url)
        with contract.qualified(args.qualifier):
            return _discover_and_run(args, clients, out, time.time() if now is None else now)
    except CREDENTIAL_ERRORS as error:  # making the clients; a call's are caught where it is made (_failed)
        return _no_credentials(error)


def _no_credentials(error: Exception) -> int:
    """One line saying what to set, for every command: EXIT_NO_CREDENTIALS."""
    setting = ("set AWS_PROFILE (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) and AWS_DEFAULT_REGION for the "
               "deployment's account (preflight: the target's)")
    if isinstance(error, NoRegionError):
        # boto3 reads AWS_DEFAULT_REGION (or the profile's region), not AWS_REGION
        print("ops: no AWS Region: set AWS_DEFAULT_REGION or give --region (preflight: or the target's region in "
              "the tenants file)", file=sys.stderr)
    elif isinstance(error, PartialCredentialsError):
        print(f"ops: incomplete AWS credentials ({_first_line(error)}): {setting}", file=sys.stderr)
    else:
        print(f"ops: no AWS credentials: {setting}", file=sys.stderr)
    return EXIT_NO_CREDENTIALS


def _discover_and_run(args: argparse.Namespace, clients: Any, out: Any, now: float) -> int:
    try:
        tenants = discover(clients)
        if args.command in ("pause", "unpause"):
            return _hold(args, tenants, clients, out, now)
        selected = _select(tenants, getattr(args, "tenant", None))
        return _run(args, selected, clients, out, now)
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
        return _failed(error, args.endpoint_url)


NOT_A_PIPELINE = "not an AWS endpoint or no ordered-ingest stacks there"
#: `preflight` reads account APIs (Lambda account settings, IAM, Service Quotas) a local run does not serve.
NO_ACCOUNT_APIS = "not an AWS endpoint, or one without the account APIs preflight reads (a local run has no quotas)"


def _failed(error: Exception, endpoint_url: str | None, what: str = NOT_A_PIPELINE) -> int:
    """Say in one line what failed: EXIT_NOT_FOUND for an endpoint that does not answer as AWS
    does (a web server's HTML page, an API it does not serve, nothing listening): `what` it is
    then; else EXIT_ERROR with the error."""
    if isinstance(error, CREDENTIAL_ERRORS):
        return _no_credentials(error)
    where = endpoint_url or "the AWS endpoint"
    if isinstance(error, (EndpointConnectionError, ConnectionClosedError)):
        print(f"ops: {where}: nothing answers there (is the local pipeline still running? "
              "`python -m demo --serve` prints its endpoint)", file=sys.stderr)
        return EXIT_NOT_FOUND
    # botocore names an error it could not read from the body by the bare HTTP status ("404").
    unreadable = isinstance(error, ClientError) and str(error.response.get("Error", {}).get("Code", "")).isdigit()
    if isinstance(error, ResponseParserError) or unreadable:
        print(f"ops: {where}: {what}; its answer is not an AWS API response (check --endpoint-url or --region)",
              file=sys.stderr)
        return EXIT_NOT_FOUND
    print(f"ops: {type(error).__name__}: {_first_line(error)}", file=sys.stderr)
    return EXIT_ERROR


def _first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


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
        topic = None if args.json else alarm_topic(selected, clients("cloudformation"), clients("sns"))
        if topic is not None:
            print(render_alarm_topic(topic) + "\n", file=out)
        print(json.dumps(statuses, indent=2, default=str) if args.json else render(statuses), file=out)
        if not args.json and args.tenant is None:
            _print_unmatched(clients, out, now)
        return EXIT_HALTED if any(s["state"] == "halted" for s in statuses) else EXIT_OK
    (tenant,) = selected
    if args.command == "quarantine":
        return _quarantine(args, tenant, clients, out)
    if args.command == "dlq":
        return _dlq(args.dlq_action, tenant, clients, out)
    if args.command == "reconcile":
        return _reconcile(args, tenant, clients, out)
    ledger = Ledger(ddb, tenant.ledger_table, tenant.tenant_id)
    if args.command == "resume":
        outcome = operations.resume(ledger, clients("stepfunctions"), tenant.start_arn, now)
    elif args.command == "replace":
        outcome = operations.replace(ledger, clients("stepfunctions"), clients("s3"), tenant.start_arn,
                                     landing_prefix=tenant.landing_prefix, key=args.key, version_id=args.version,
                                     now=now, from_record=args.from_record, work_bucket=tenant.work_bucket,
                                     sequence_pattern=_sequence_pattern(tenant, clients))
    elif args.command == "skip-gap":
        if tenant.ordering != "key_sequence":
            raise operations.NothingToDo(f"tenant {tenant.tenant_id} is ordered by {tenant.ordering}: it has no sequence gaps")
        outcome = operations.skip_gap(ledger, clients("sqs"), tenant.queue_url, first_sequence=tenant.first_sequence,
                                      reason=args.reason, now=now, to=args.to)
    else:
        outcome = operations.skip(ledger, clients("sqs"), tenant.queue_url, args.reason, now)
    print(f"{tenant.tenant_id}: {outcome.message}", file=out)
    return EXIT_OK


def _sequence_pattern(tenant: TenantResources, clients: Any) -> str | None:
    """`key_sequence` ordering: the tenant's `sequence_pattern`, as its controller has it (None otherwise)."""
    if tenant.ordering != "key_sequence":
        return None
    configuration = clients("lambda").get_function_configuration(
        FunctionName=contract.CONTROLLER_FUNCTION.render(tenant.tenant_id))
    return configuration["Environment"]["Variables"][contract.env_name("sequence_pattern")]


def _hold(args: argparse.Namespace, tenants: dict[str, TenantResources], clients: Any, out: Any, now: float) -> int:
    """`pause`/`unpause` of the tenants named (or `--all`), each on its own: one that does not
    apply (paused already, not paused) is said and the others go on; exit 3 if any did not."""
    if args.all == bool(args.tenants):
        raise ValueError(f"{args.command}: name the tenants, or give --all (not both)")
    selected = [tenants[t] for t in sorted(tenants)] if args.all else [_select(tenants, t)[0] for t in args.tenants]
    ddb, code = clients("dynamodb"), EXIT_OK
    for tenant in selected:
        ledger = Ledger(ddb, tenant.ledger_table, tenant.tenant_id)
        try:
            if args.command == "pause":
                outcome = operations.pause(ledger, args.reason, now)
            else:
                outcome = operations.unpause(ledger, clients("stepfunctions"), clients("sqs"), tenant.start_arn,
                                             tenant.queue_url, now)
        except operations.NothingToDo as error:
            print(f"ops: {error}", file=sys.stderr)
            code = EXIT_NOTHING_TO_DO
            continue
        print(f"{tenant.tenant_id}: {outcome.message}", file=out)
    return code


def _quarantine(args: argparse.Namespace, tenant: TenantResources, clients: Any, out: Any) -> int:
    if not tenant.work_bucket:
        raise DiscoveryError("the shared stack has no WorkBucketName output: deploy this version first")
    s3, bucket, tenant_id = clients("s3"), tenant.work_bucket, tenant.tenant_id
    if args.action == "list":
        print(quarantine.render(tenant_id, quarantine.list_quarantined(s3, bucket, tenant_id), show_body=args.show_body),
              file=out)
        return EXIT_OK
    if args.all:
        replayed = quarantine.replay_all(s3, clients("sqs"), bucket=bucket, tenant_id=tenant_id,
                                         queue_url=tenant.queue_url)
    else:
        message = quarantine.read(s3, bucket, quarantine.resolve_key(tenant_id, args.key))
        replayed = [(message, quarantine.replay(s3, clients("sqs"), bucket=bucket, tenant_id=tenant_id,
                                                queue_url=tenant.queue_url, message=message))]
    for message, sent in replayed:
        print(f"{tenant_id}: replayed {message.key} as message {sent}", file=out)
    return EXIT_OK


def _dlq(action: str, tenant: TenantResources, clients: Any, out: Any) -> int:
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
        print(f"ops: {len(left)} message(s) are not events ops can replay; read them with the SQS console or CLI "
              f"and delete them by hand once handled", file=sys.stderr)
        return EXIT_LEFT_IN_DLQ
    return EXIT_OK


def _print_unmatched(clients: Any, out: Any, now: float) -> None:
    """`status` of every tenant also shows the uploads no tenant owns (the shared stack logs them)."""
    group = unmatched.log_group_name(clients("cloudformation"))
    if group:
        print("\n" + unmatched.render(unmatched.recent(clients("logs"), group, now=now)), file=out)


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


def _preflight(args: argparse.Namespace, clients: Any, out: Any, resolve: Any) -> int:
    """`preflight`: 0 ready; the lowest of PREFLIGHT_EXITS' codes for the kinds of finding (8 a
    quota does not fit, 10 a principal, 11 a bearer secret, 12 a sink host); 2 a bad tenants file
    or target; 13 no credentials; 1 an AWS error."""
    try:
        config = load_config(args.tenants, check_capacity=False)
        target = _preflight_target(config, args.target)
        if args.qualifier not in (None, config.qualifier):
            raise ValueError(f"--qualifier {args.qualifier}: the tenants file's qualifier is {config.qualifier!r}; "
                             "leave --qualifier out (preflight takes the file's)")
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
    except Exception as error:  # noqa: BLE001 - an operator's tool says what failed, with its exit code
        return _failed(error, args.endpoint_url, NO_ACCOUNT_APIS)
    code = min((PREFLIGHT_EXITS[kind] for kind in result.kinds), default=EXIT_OK)
    if args.json:
        print(json.dumps({"target": target.name or None, "account": target.account, "region": target.region,
                          "tenants": len(target.tenants), "fits": result.fits, "ready": result.ready,
                          "exit_code": code, "quotas": [r.as_dict() for r in result.readings],
                          "untagged_uploaders": [_uploader_dict(u) for u in result.untagged],
                          "principals": [p.as_dict() for p in result.principals],
                          "principals_not_looked_up": result.principals_not_checked,
                          "secrets": [s.as_dict() for s in result.secrets],
                          "sink_hosts": [h.as_dict() for h in result.hosts],
                          "sink_hosts_not_resolved": result.hosts_not_checked}, indent=2), file=out)
    else:
        print(preflight.render(target, result), file=out)
    return code


def _uploader_dict(finding: preflight.PrincipalFinding) -> dict[str, Any]:
    """`untagged_uploaders`' shape, kept for the scripts that read it (`principals` has every field)."""
    return {"tenant": finding.tenant_id, "arn": finding.arn, "exists": finding.exists, "fix": finding.tag_command}


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
        raise ValueError(f"the tenants file declares several targets: give --target (one of: {', '.join(found)})")
    if name not in found:
        raise ValueError(f"--target {name}: no such target in the tenants file (targets: {', '.join(found)})")
    return found[name]
