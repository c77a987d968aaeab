"""The command line `python -m ops` accepts: its arguments, subcommands and help texts (the
parser's epilog lists the exit codes of ops/exits.py). Kept apart from what the commands do
(ops/cli.py, ops/commands.py) so `--help` can be read and changed in one place.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from lambdas import contract
from ops import reconcile


def build_parser() -> argparse.ArgumentParser:
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
    parser.add_argument(
        "--endpoint-url", help="a local runtime's endpoint (make demo ARGS=--serve prints it)"
    )
    parser.add_argument(
        "--qualifier",
        type=_qualifier,
        help="the copy of the app deployed with this `qualifier` in "
        "its tenants file (default: none, the app's names as shipped)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser(
        "status", help="queue, head wait, current file and progress, last failure, files done"
    )
    status.add_argument("tenant", nargs="?", help="one tenant (default: all)")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    resume = commands.add_parser(
        "resume", help="continue a halted tenant's failed file at its first unacknowledged record"
    )
    resume.add_argument("tenant")
    replace = commands.add_parser(
        "replace",
        help="run a corrected object version in a halted tenant's failed file's place, before the files "
        "waiting behind it",
    )
    replace.add_argument("tenant")
    replace.add_argument(
        "--key",
        required=True,
        help="the correction's key in the landing bucket (under the tenant's "
        "prefix: the failed file's key, or another)",
    )
    replace.add_argument("--version", help="the correction's version id (default: the key's latest version)")
    replace.add_argument(
        "--from-record",
        type=int,
        default=0,
        metavar="N",
        help="send from record N (0-based) on: only if the correction's first N records are those "
        "the core system acknowledged of the failed version (default 0: send it whole)",
    )
    for name, text in (
        (
            "pause",
            "hold tenants (a planned outage of the core system): no file starts, a running one "
            "stops at its next chunk boundary, nothing fails or pages",
        ),
        ("unpause", "end a pause: a stopped file runs on at its first unacknowledged record"),
    ):
        held = commands.add_parser(name, help=text)
        held.add_argument("tenants", nargs="*", metavar="TENANT")
        held.add_argument("--all", action="store_true", help="every tenant deployed here")
        if name == "pause":
            held.add_argument(
                "--reason", required=True, help="why (shown by ops status and kept in the ledger)"
            )
    skip = commands.add_parser("skip", help="give up a halted tenant's failed file and start the next one")
    skip.add_argument("tenant")
    skip.add_argument(
        "--reason",
        required=True,
        help="why this file's remaining records may be given up (kept in the ledger)",
    )
    _quarantine_parser(commands)
    gap = commands.add_parser(
        "skip-gap",
        help="ordering key_sequence: give up missing sequence numbers so the file waiting after them starts",
    )
    gap.add_argument("tenant")
    gap.add_argument(
        "--reason", required=True, help="why the missing files may be given up (kept in the ledger)"
    )
    gap.add_argument(
        "--to", type=int, help="the sequence number to go on with (default: the lowest that waits)"
    )
    dead_letters = commands.add_parser(
        "dlq", help="events EventBridge could not deliver to a tenant's queue or closer"
    )
    dlq_action = dead_letters.add_subparsers(dest="dlq_action", required=True)
    for action, text in (
        ("list", "show them, in the order replay would deliver them (nothing changes)"),
        ("replay", "put file events back into the queue in upload order, status changes to the closer"),
    ):
        dlq_action.add_parser(action, help=text).add_argument("tenant")
    _reconcile_parser(commands)
    _preflight_parser(commands)
    return parser


def _qualifier(value: str) -> str:
    if not re.match(contract.QUALIFIER_PATTERN, value) or len(value) > contract.MAX_QUALIFIER_LENGTH:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a qualifier: lowercase letters and digits, starting with "
            f"a letter, at most {contract.MAX_QUALIFIER_LENGTH} characters"
        )
    return value


def _preflight_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "preflight",
        help="before a deploy: do the account's quotas hold what the tenants file needs, do its "
        "principals exist (uploaders tagged), do the bearer secrets hold a token, do the sink hosts resolve?",
    )
    parser.add_argument("--tenants", default="tenants.yaml", help="the tenants file (default: tenants.yaml)")
    parser.add_argument(
        "--target",
        help="the deployment target to check (required when the file declares several); "
        "its Region is the default --region",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _quarantine_parser(commands: Any) -> None:
    held = commands.add_parser(
        "quarantine", help="messages the controller set aside (not usable file events)"
    )
    actions = held.add_subparsers(dest="action", required=True)
    listing = actions.add_parser(
        "list", help="what, why and when, oldest first (the body only with --show-body)"
    )
    listing.add_argument("tenant")
    listing.add_argument(
        "--show-body", action="store_true", help="also print each message's body (may hold anything)"
    )
    replay = actions.add_parser(
        "replay", help="send stored messages back to the tenant's queue, then mark them replayed"
    )
    replay.add_argument("tenant")
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument("key", nargs="?", help="a name from `quarantine list` (or the full key)")
    which.add_argument(
        "--all", action="store_true", help="every quarantined message of the tenant, oldest first"
    )


def _reconcile_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "reconcile",
        help="list the object versions under a tenant's prefix the ledger never saw or never completed",
    )
    parser.add_argument("tenant")
    parser.add_argument(
        "--since", type=reconcile.parse_since, help="only versions modified at or after this date/time (UTC)"
    )
    parser.add_argument(
        "--replay",
        action="store_true",
        help="send the never-seen versions to the tenant's queue, in upload order",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
