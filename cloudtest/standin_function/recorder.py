"""The recording core-system stand-in of the cloud test: a Lambda function behind an
IAM-authorized function URL that keeps the core system's contract (docs/core-system.md, "The
contract", record mode) and records every request it receives in a DynamoDB table.

Items (partition key `pk`, sort key `sk`):

* `pk = <tenant>` (the `X-Tenant-Id` header), `sk = req#<receive time, ns>#<request id>`: one per
  request, in arrival order: `key` (the Idempotency-Key), `record` (the body, JSON text),
  `status` (what it answered), `registered` (True only the first time its key was accepted).
* `pk = key#<idempotency key>`: the key is registered (a conditional put: a repeated key is
  answered 200 and registered nothing, as the contract asks).
* `pk = rule`, `sk = reject#<tenant>`: while present, a record containing every field of its
  `record` (JSON object text) is rejected with 400 (the test's "the core system refuses this
  record"); deleting it is "accept it now". Rejections are never bound to the key.

The records are the test's synthetic files; nothing is logged but counts and statuses.
"""

from __future__ import annotations

import base64
import json
import os
import time
from typing import Any

import boto3

TABLE = os.environ.get("TABLE_NAME", "")
_table: Any = None


def table() -> Any:
    global _table
    if _table is None:
        _table = boto3.resource("dynamodb").Table(TABLE)
    return _table


def _header(event: dict[str, Any], name: str) -> str | None:
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    return headers.get(name.lower())


def _body(event: dict[str, Any]) -> str:
    raw = event.get("body") or ""
    return base64.b64decode(raw).decode("utf-8") if event.get("isBase64Encoded") else raw


def _answer(status: int, message: str) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps({"status": status, "message": message}),
    }


def decide(db: Any, tenant: str, key: str, record: Any) -> tuple[int, bool]:
    """(status, registered) of one record under `key`, as the contract asks."""
    if "Item" in db.get_item(Key={"pk": f"key#{key}", "sk": "key"}, ConsistentRead=True):
        return 200, False
    rule = db.get_item(Key={"pk": "rule", "sk": f"reject#{tenant}"}, ConsistentRead=True).get("Item")
    if rule is not None:
        wanted = json.loads(rule["record"])
        if isinstance(record, dict) and all(record.get(k) == v for k, v in wanted.items()):
            return 400, False
    try:
        db.put_item(
            Item={"pk": f"key#{key}", "sk": "key", "tenant": tenant},
            ConditionExpression="attribute_not_exists(pk)",
        )
    except db.meta.client.exceptions.ConditionalCheckFailedException:
        return 200, False  # the same key at the same moment: registered once, by the other request
    return 201, True


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    received = time.time_ns()
    if (event.get("requestContext", {}).get("http", {}).get("method") or "POST") != "POST":
        return _answer(405, "POST only")
    tenant, key = _header(event, "X-Tenant-Id"), _header(event, "Idempotency-Key")
    if not tenant or not key:
        return _answer(400, "X-Tenant-Id and Idempotency-Key headers are required")
    text = _body(event)
    try:
        record = json.loads(text)
    except ValueError:
        return _answer(400, "the body is not JSON")
    if isinstance(record, list):
        return _answer(400, "record mode only: one JSON object per request")
    db = table()
    status, registered = decide(db, tenant, key, record)
    db.put_item(
        Item={
            "pk": tenant,
            "sk": f"req#{received:020d}#{getattr(context, 'aws_request_id', '-')}",
            "key": key,
            "record": text,
            "status": status,
            "registered": registered,
            "received_ns": received,
        }
    )
    print(json.dumps({"level": "INFO", "tenant": tenant, "status": status, "registered": registered}))
    return _answer(
        status, "registered" if registered else ("already registered" if status == 200 else "rejected")
    )
