"""`ops status`: where each tenant stands, from its ledger and its queue."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import asdict
from typing import Any

from lambdas.hints import Hint, commands, hint_for
from lambdas.ledger import DUPLICATE, FAILED, PAUSED, SKIPPED, SUCCEEDED, Ledger, Position
from lambdas.operations import describe_state
from ops.discovery import shared_outputs
from pipeline_constructs import names
from pipeline_constructs.registry import TenantResources

DAY_SECONDS = 86400
#: What SNS lists instead of an ARN for a subscription not confirmed yet.
PENDING = "PendingConfirmation"


def alarm_topic(tenants: list[TenantResources], cfn: Any, sns: Any) -> dict[str, Any] | None:
    """The alarm topic of ``tenants`` (what their pipelines registered, else the shared stack's
    output) and its subscriptions: ``{"arn", "confirmed", "pending", "error"}`` (``error``: why
    they could not be listed, e.g. a topic of another account); None when neither says."""
    arn = next((t.alarm_topic_arn for t in tenants if t.alarm_topic_arn), "") or shared_outputs(cfn).get(
        names.ALARM_TOPIC_OUTPUT
    )
    if not arn:
        return None
    found: list[dict[str, Any]] = []
    try:
        for page in sns.get_paginator("list_subscriptions_by_topic").paginate(TopicArn=arn):
            found.extend(page.get("Subscriptions", []))
    except Exception as error:
        code = getattr(error, "response", {}).get("Error", {}).get("Code") or type(error).__name__
        return {"arn": arn, "confirmed": None, "pending": None, "error": code}
    pending = sum(1 for s in found if s.get("SubscriptionArn") == PENDING)
    return {"arn": arn, "confirmed": len(found) - pending, "pending": pending, "error": None}


def render_alarm_topic(topic: dict[str, Any]) -> str:
    """One line: where the alarms go, and whether anyone gets them."""
    head = f"alarm topic: {topic['arn']}"
    if topic["error"]:
        return f"{head} (its subscriptions could not be listed: {topic['error']})"
    confirmed, pending = topic["confirmed"], topic["pending"]
    waiting = f", {pending} pending confirmation" if pending else ""
    if confirmed:
        return f"{head} ({confirmed} subscription{'s' if confirmed > 1 else ''}{waiting})"
    return (
        f"{head}: no confirmed subscription{waiting}, alarms reach nobody; "
        + (
            "confirm it (the link SNS sent)"
            if pending
            else "add notifications.emails or notifications.subscriptions to tenants.yaml and deploy"
        )
        + " (docs/operations.md#who-gets-the-alarms)"
    )


def tenant_status(
    resources: TenantResources, *, ddb: Any, sqs: Any, now: float | None = None
) -> dict[str, Any]:
    """One tenant's status as plain data (the `--json` output)."""
    now = time.time() if now is None else now
    ledger = Ledger(ddb, resources.ledger_table, resources.tenant_id)
    position = ledger.read()
    attributes = sqs.get_queue_attributes(
        QueueUrl=resources.queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    history = ledger.history(since=now - DAY_SECONDS)
    last_failure = next(
        (
            {
                "execution": e["execution"],
                "key": (e["file"] or {}).get("key"),
                "error": e["error"],
                "cause": e["cause"],
                "closed_at": e["closed_at"],
                "skip_reason": e["skip_reason"],
            }
            for e in ledger.history(limit=1, statuses=(FAILED, SKIPPED))
        ),
        None,
    )
    current = None
    if position.file is not None:
        chunk = None
        if position.chunk_size and position.chunk_count:
            # Numbered from 0, as every output numbers chunks and records (`hints.stopped_at`).
            chunk = {
                "index": min(position.next_record // position.chunk_size, position.chunk_count - 1),
                "count": position.chunk_count,
            }
        current = {
            "key": position.file["key"],
            "version_id": position.file["version_id"],
            "execution": position.execution,
            "status": position.status,
            "attempt": position.attempt,
            "next_record": position.next_record,
            "record_count": position.record_count,
            "chunk": chunk,
            "started_at": position.started_at,
            "replaces": position.replaces,
        }
    files = files_of(history, position)
    return {
        "tenant": resources.tenant_id,
        "state": "halted"
        if position.halted
        else ("paused" if position.paused else ("running" if position.running else "idle")),
        # What to do about the halted file: the notification's hint (lambdas/hints.py).
        "hint": asdict(hint_for(position)) if position.halted else None,
        "paused": {
            "since": position.paused_at,
            "reason": position.pause_reason,
            "file_stopped": position.status == PAUSED,
        }
        if position.paused
        else None,
        "summary": describe_state(position),
        "on_failure": resources.on_failure,
        "queue": {
            "visible": int(attributes.get("ApproximateNumberOfMessages", 0)),
            "in_flight": int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0)),
        },
        "head_wait_seconds": round(now - position.waiting_sent_at, 1) if position.waiting_sent_at else None,
        "current_file": current,
        "last_failure": last_failure,
        "ordering": resources.ordering,
        "sequence": _sequence(ledger, position, resources),
        # Files, by their outcome (their last attempt's): a file that succeeded after a resume
        # or a replacement is done, its failed attempts are attempts.
        "last_24h": {
            "succeeded": sum(1 for f in files if f["outcome"] == SUCCEEDED),
            "failed": sum(1 for f in files if f["outcome"] == FAILED),
            "skipped": sum(1 for f in files if f["outcome"] == SKIPPED),
        },
        "attempts_24h": {
            "total": sum(1 for e in history if e["file"] is not None),
            "failed": sum(
                1 for e in history if e["status"] == FAILED or (e["status"] == SKIPPED and e["closed_as"])
            ),
            "paused": sum(1 for e in history if e["status"] == PAUSED),
        },
        # Files that took more than one attempt (resumed, replaced, paused), their attempts oldest first.
        "retried_24h": [f for f in files if len(f["attempts"]) > 1],
        # duplicate_files: skip -- byte-identical copies of files that succeeded, not sent.
        "duplicates_24h": [
            {
                "key": (e["file"] or {}).get("key"),
                "version_id": (e["file"] or {}).get("version_id"),
                "execution": e["execution"],
                "closed_at": e["closed_at"],
                "duplicate_of": e["duplicate_of"],
            }
            for e in history
            if e["status"] == DUPLICATE
        ],
    }


def files_of(history: list[dict[str, Any]], position: Position) -> list[dict[str, Any]]:
    """The attempts of `history` (newest first) grouped by file, newest file first: a resume and
    an unpause are attempts at the same event, a replacement joins the file it replaces
    (`replaces.file_event`). A file's outcome is its last closed attempt's status (None while
    an attempt of it runs or is paused); a gap skip is a file of its own."""
    by_file: dict[str, dict[str, Any]] = {}
    for attempt in history:
        file = attempt["file"] or {}
        group = (attempt["replaces"] or {}).get("file_event") or file.get("event_id") or attempt["execution"]
        entry = by_file.setdefault(
            group, {"key": file.get("key"), "outcome": None, "replaced": False, "attempts": []}
        )
        entry["attempts"].insert(
            0,
            {
                "execution": attempt["execution"],
                "key": file.get("key"),
                "version_id": file.get("version_id"),
                "status": attempt["status"],
                "error": attempt["error"],
                "started_at": attempt["started_at"],
                "closed_at": attempt["closed_at"],
                "replaced_by": attempt["replaced_by"],
            },
        )
        entry["replaced"] = entry["replaced"] or attempt["replaced_by"] is not None
        if entry["outcome"] is None and attempt["status"] != PAUSED:
            entry["outcome"] = attempt["status"]
    if position.file is not None and (position.running or position.status == PAUSED):
        current = (position.replaces or {}).get("file_event") or position.file["event_id"]
        if current in by_file:
            by_file[current]["outcome"] = None  # it is being worked on again
    return list(by_file.values())


def _sequence(ledger: Ledger, position: Any, resources: TenantResources) -> dict[str, Any] | None:
    """`key_sequence` ordering: the next sequence number and the later ones that wait."""
    if resources.ordering != "key_sequence":
        return None
    expected = position.next_sequence(resources.first_sequence)
    waiting = [sequence for sequence, _ in ledger.waiting_sequences(after=expected - 1)]
    return {
        "next": expected,
        "waiting": waiting,
        "gap": bool(waiting) and waiting[0] > expected and not position.running,
    }


def render(statuses: list[dict[str, Any]]) -> str:
    """A table a person reads, then one detail line per halted tenant."""
    headers = [
        "tenant",
        "state",
        "queue",
        "head wait",
        "current file",
        "progress",
        "done 24h",
        "last failure",
    ]
    rows = []
    for s in statuses:
        current = s["current_file"] or {}
        progress = "-"
        if current:
            records = f"{current['next_record']:,}" + (
                f"/{current['record_count']:,}" if current["record_count"] is not None else ""
            )
            chunk = (
                f"chunk {current['chunk']['index']} of {current['chunk']['count']}, "
                if current["chunk"]
                else ""
            )
            progress = f"{chunk}records {records}"
        failure = s["last_failure"]
        rows.append(
            [
                s["tenant"],
                s["state"],
                f"{s['queue']['visible']} (+{s['queue']['in_flight']} in flight)",
                f"{s['head_wait_seconds']:.0f} s" if s["head_wait_seconds"] is not None else "-",
                f"{current.get('key', '-')} [{current.get('status', '-')}]" if current else "-",
                progress,
                "{succeeded} ok, {failed} failed, {skipped} skipped".format(**s["last_24h"]),
                f"{failure['key']}: {failure['error']}" if failure else "-",
            ]
        )
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [headers, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for s in statuses:
        duplicates = s.get("duplicates_24h") or []
        if duplicates:
            last = duplicates[0]  # newest first
            of = last["duplicate_of"] or {}
            lines += [
                "",
                f"{s['tenant']}: {len(duplicates)} duplicate file(s) in 24 h, not sent (duplicate_files: skip); "
                f"last: {last['key']} has the bytes of {of.get('key')} (version {of.get('version_id')})",
            ]
    for s in statuses:
        if s.get("paused"):
            paused = s["paused"]
            since = dt.datetime.fromtimestamp(paused["since"], dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            stopped = (
                f"; {s['current_file']['key']} stopped at record {s['current_file']['next_record']:,}"
                if paused["file_stopped"]
                else ""
            )
            lines += [
                "",
                f"{s['tenant']} is paused since {since}: {paused['reason']}{stopped}",
                f"  end the pause (the file runs on where it stopped): python -m ops unpause {s['tenant']}",
            ]
        for file in s.get("retried_24h") or []:
            lines += [
                "",
                f"{s['tenant']}: {file['key']} took {len(file['attempts'])} attempts, "
                f"{(file['outcome'] or 'in progress').lower()}:",
            ]
            lines += [
                f"  {a['execution']}: {a['key']} (version {a['version_id']}) {a['status']}"
                + (f" ({a['error']})" if a["error"] else "")
                + (
                    f", replaced by {a['replaced_by']['key']} (version {a['replaced_by']['version_id']})"
                    if a["replaced_by"]
                    else ""
                )
                for a in file["attempts"]
            ]
        if s["state"] == "halted" and s["last_failure"]:
            failure = s["last_failure"]
            lines += [
                "",
                f"{s['tenant']} is halted: {failure['key']} failed with {failure['error']}: {failure['cause'] or ''}".rstrip(
                    ": "
                ),
                f"  hint: {s['hint']['text']}",
                *(
                    f"  {line}"
                    for line in commands(
                        Hint(**s["hint"]),
                        s["tenant"],
                        key=failure["key"],
                        next_record=(s["current_file"] or {}).get("next_record"),
                    )
                ),
            ]
        sequence = s.get("sequence")
        if sequence and sequence["gap"]:
            lines += [
                "",
                f"{s['tenant']} waits for sequence number {sequence['next']}; files waiting: "
                + ", ".join(str(n) for n in sequence["waiting"][:10])
                + (" ..." if len(sequence["waiting"]) > 10 else ""),
                f'  upload the missing file, or give the number(s) up: python -m ops skip-gap {s["tenant"]} --reason "..."',
            ]
    return "\n".join(lines)
