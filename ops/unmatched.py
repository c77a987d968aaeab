"""Uploads outside every tenant prefix: read from the shared stack's log group, where the
catch-all rule logs each such "Object Created" event (`pipeline_constructs/unmatched.py`).
`ops status` shows the recent ones; the demo's `--serve` output prints each new one."""

from __future__ import annotations

import json
from typing import Any

from ops.discovery import shared_outputs

#: How far back `ops status` looks, and how many it shows (newest first).
LOOKBACK_SECONDS = 86400
SHOWN = 20
LOG_GROUP_OUTPUT = "UnmatchedUploadsLogGroupName"


def log_group_name(cfn: Any) -> str | None:
    """The log group the shared stack names, or None (a deployment without the catch-all)."""
    return shared_outputs(cfn).get(LOG_GROUP_OUTPUT) or None


def recent(
    logs: Any, group: str, *, now: float, lookback_seconds: float = LOOKBACK_SECONDS
) -> list[dict[str, Any]]:
    """Unmatched uploads logged since ``now - lookback_seconds``, newest first:
    ``{"key", "bucket", "size", "time"}`` (``time``: the event's, as EventBridge wrote it)."""
    found: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"logGroupName": group, "startTime": int((now - lookback_seconds) * 1000)}
    try:
        while True:
            page = logs.filter_log_events(**kwargs)
            for entry in page.get("events", []):
                upload = _upload(entry)
                if upload is not None:
                    found.append(upload)
            if not page.get("nextToken") or page["nextToken"] == kwargs.get("nextToken"):
                break
            kwargs["nextToken"] = page["nextToken"]
    except logs.exceptions.ResourceNotFoundException:
        return []
    return sorted(found, key=lambda u: (u["logged_at"], u["time"]), reverse=True)


def _upload(entry: dict[str, Any]) -> dict[str, Any] | None:
    try:
        event = json.loads(entry.get("message", ""))
        detail = event["detail"]
        return {
            "key": str(detail["object"]["key"]),
            "bucket": str(detail["bucket"]["name"]),
            "size": detail["object"].get("size"),
            "time": str(event.get("time", "")),
            "logged_at": int(entry.get("timestamp", 0)),
        }
    except (ValueError, KeyError, TypeError):
        return None  # not an S3 event: nothing to show


def render(uploads: list[dict[str, Any]], *, lookback_seconds: float = LOOKBACK_SECONDS) -> str:
    """Lines for `ops status`: what was uploaded outside every tenant prefix, and what to do."""
    hours = round(lookback_seconds / 3600)
    if not uploads:
        return f"Uploads outside every tenant prefix (last {hours} h): none"
    lines = [f"Uploads outside every tenant prefix (last {hours} h): {len(uploads)}; no tenant ingests them"]
    lines += [f"  {u['time']}  s3://{u['bucket']}/{u['key']}" for u in uploads[:SHOWN]]
    if len(uploads) > SHOWN:
        lines.append(f"  ... and {len(uploads) - SHOWN} more")
    lines.append(
        "  move each file under its tenant's prefix (a new upload), or add the tenant to tenants.yaml"
    )
    return "\n".join(lines)
