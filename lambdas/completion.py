"""Completion entry point: the core system confirms or rejects the tenant's waiting file.

With `completion.wait`, a file whose records were all acknowledged waits in the workflow's
`WaitForCompletion` task, its task token on the tenant's ledger position (docs/core-system.md,
"Completion callback"). The core system (the principals of `completion.callers`) invokes this
function with a `contract.CompletionRequest`: `waiting`, `confirm`, `reject` or `heartbeat`.

It names the file, never the token, which stays between Step Functions, the ledger and this
function; the file must be the tenant's current one, RUNNING and waiting in this execution. A
request that fails validation is answered (`contract.CompletionAnswer`, an HTTP-like status),
not raised: it is the caller's mistake and must not page on-call. The first answer is final
(Step Functions accepts one per token); a later one is refused (409).
"""

from __future__ import annotations

import json
import time
from typing import Any

from lambdas.contract import (
    COMPLETION_ACTIONS,
    COMPLETION_ANSWER_ATTRIBUTE,
    COMPLETION_ANSWERED_AT_ATTRIBUTE,
    COMPLETION_EXECUTION_ATTRIBUTE,
    COMPLETION_REASON_ATTRIBUTE,
    COMPLETION_REJECTED_ERROR,
    COMPLETION_SINCE_ATTRIBUTE,
    COMPLETION_TOKEN_ATTRIBUTE,
    LEDGER_POSITION_ENTRY,
    MAX_REJECT_REASON,
    CompletionAnswer,
    CompletionEnv,
)
from lambdas.runtime import BoundLogger, aws_client, error_code, lambda_handler

CONFIRMED = "confirmed"
REJECTED = "rejected"
#: Step Functions' answers to a token that is no longer waiting (answered, timed out, or its
#: execution closed): the file is no longer waiting.
STALE_TOKEN_ERRORS = ("TaskTimedOut", "InvalidToken", "TaskDoesNotExist")
#: Characters of a reason kept as they are; the rest (control characters) become spaces.
_PRINTABLE = set(range(32, 127))


class CompletionRefused(Exception):
    """A request the entry point answers with a 4xx status (`status`, message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def answer(
    request: Any, *, tenant_id: str, table: str, ddb: Any, sfn: Any, now: float, log: BoundLogger
) -> CompletionAnswer:
    """Validate `request` and act on it; every refusal is a `CompletionAnswer` with a 4xx status."""
    try:
        action, file_id, reason = _parse(request, tenant_id)
        item = _position(ddb, table, tenant_id)
        current = _current_file(item)
        if action == "waiting":
            if current is None or COMPLETION_TOKEN_ATTRIBUTE not in item or not _waiting_now(item):
                return CompletionAnswer(
                    status=404, message=f"no file of tenant {tenant_id} waits for an answer"
                )
            return CompletionAnswer(
                status=200, message="this file waits for an answer", file=_describe(item, current)
            )
        token = _waiting_token(item, current, file_id, tenant_id)
        log.bind(file_id=file_id, execution=item["execution"]["S"], action=action)
        if action == "heartbeat":
            _send(sfn, "send_task_heartbeat", taskToken=token)
            return CompletionAnswer(status=200, message=f"heartbeat recorded for file {file_id}")
        outcome = CONFIRMED if action == "confirm" else REJECTED
        # Step Functions decides which answer is first (a token is answered once); the ledger
        # then keeps it for `ops status`, and the reason (the execution's cause has it too).
        if outcome == CONFIRMED:
            _send(sfn, "send_task_success", taskToken=token, output=json.dumps({"completion": CONFIRMED}))
        else:
            _send(sfn, "send_task_failure", taskToken=token, error=COMPLETION_REJECTED_ERROR, cause=reason)
        _record(ddb, table, tenant_id, token, outcome, reason, now)
        log.info("the core system %s the file", outcome, extra={"reason_length": len(reason)})
        return CompletionAnswer(status=200, message=f"file {file_id} {outcome}")
    except CompletionRefused as refused:
        log.warning("completion request refused: %s", refused, extra={"status": refused.status})
        return CompletionAnswer(status=refused.status, message=str(refused))


def _parse(request: Any, tenant_id: str) -> tuple[str, str, str]:
    if not isinstance(request, dict):
        raise CompletionRefused(400, "the request must be a JSON object with 'action' and 'tenant'")
    action = request.get("action")
    if action not in COMPLETION_ACTIONS:
        raise CompletionRefused(400, f"action {action!r} is not one of {', '.join(COMPLETION_ACTIONS)}")
    if request.get("tenant") != tenant_id:
        # Each tenant has its own entry point; a caller of another tenant's is refused here too.
        raise CompletionRefused(
            403,
            f"this is tenant {tenant_id}'s completion entry point, "
            f"not tenant {str(request.get('tenant'))[:64]!r}'s",
        )
    unknown = set(request) - {"action", "tenant", "file", "reason"}
    if unknown:
        raise CompletionRefused(400, f"unknown field(s) {', '.join(sorted(unknown))}")
    file_id = request.get("file")
    if action != "waiting" and (not isinstance(file_id, str) or not file_id or len(file_id) > 256):
        raise CompletionRefused(400, "'file' must be the waiting file's id (as 'waiting' returns it)")
    reason = request.get("reason", "")
    if action == "reject":
        if not isinstance(reason, str) or not reason.strip():
            raise CompletionRefused(400, "a rejection needs a 'reason' (a short summary, no record content)")
        if len(reason) > MAX_REJECT_REASON:
            raise CompletionRefused(400, f"'reason' is {len(reason)} characters; at most {MAX_REJECT_REASON}")
        reason = "".join(c if ord(c) in _PRINTABLE or ord(c) > 159 else " " for c in reason).strip()
    elif "reason" in request:
        raise CompletionRefused(400, "'reason' goes with 'reject' only")
    return str(action), str(file_id or ""), str(reason)


def _position(ddb: Any, table: str, tenant_id: str) -> dict[str, Any]:
    key = {"tenant": {"S": tenant_id}, "entry": {"S": LEDGER_POSITION_ENTRY}}
    return ddb.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item") or {}


def _current_file(item: dict[str, Any]) -> dict[str, Any] | None:
    raw = item.get("file_ref", {}).get("S")
    return json.loads(raw) if raw else None


def _waiting_now(item: dict[str, Any]) -> bool:
    """The position's execution is RUNNING and is the one that left the token."""
    return (
        item.get("status", {}).get("S") == "RUNNING"
        and item.get(COMPLETION_EXECUTION_ATTRIBUTE, {}).get("S") == item.get("execution", {}).get("S")
        and COMPLETION_ANSWER_ATTRIBUTE not in item
    )


def _describe(item: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """The waiting file, as the core system may match it: never the token."""
    return {
        "file": current.get("event_id"),
        "key": current.get("key"),
        "version_id": current.get("version_id"),
        "record_count": int(item["record_count"]["N"]) if "record_count" in item else None,
        "waiting_since": item.get(COMPLETION_SINCE_ATTRIBUTE, {}).get("S"),
    }


def _waiting_token(item: dict[str, Any], current: dict[str, Any] | None, file_id: str, tenant_id: str) -> str:
    if current is None or current.get("event_id") != file_id:
        raise CompletionRefused(404, f"file {file_id[:64]!r} is not tenant {tenant_id}'s current file")
    if COMPLETION_TOKEN_ATTRIBUTE not in item or item.get("status", {}).get("S") != "RUNNING":
        raise CompletionRefused(
            409,
            f"file {file_id} is not waiting for an answer "
            f"(its state: {item.get('status', {}).get('S', 'unknown')})",
        )
    if item.get(COMPLETION_EXECUTION_ATTRIBUTE, {}).get("S") != item.get("execution", {}).get("S"):
        raise CompletionRefused(
            409, f"file {file_id} is not waiting for an answer yet (it is being sent again)"
        )
    if COMPLETION_ANSWER_ATTRIBUTE in item:
        raise CompletionRefused(409, f"file {file_id} was already {item[COMPLETION_ANSWER_ATTRIBUTE]['S']}")
    return str(item[COMPLETION_TOKEN_ATTRIBUTE]["S"])


def _record(ddb: Any, table: str, tenant_id: str, token: str, outcome: str, reason: str, now: float) -> None:
    """The answer on the position, once, while the position still holds the token it answered
    (a position that moved on to the next file keeps nothing of it)."""
    try:
        ddb.update_item(
            TableName=table,
            Key={"tenant": {"S": tenant_id}, "entry": {"S": LEDGER_POSITION_ENTRY}},
            UpdateExpression=(
                f"SET {COMPLETION_ANSWER_ATTRIBUTE} = :answer, {COMPLETION_REASON_ATTRIBUTE} = :reason, "
                f"{COMPLETION_ANSWERED_AT_ATTRIBUTE} = :now"
            ),
            ConditionExpression=f"{COMPLETION_TOKEN_ATTRIBUTE} = :token AND attribute_not_exists({COMPLETION_ANSWER_ATTRIBUTE})",
            ExpressionAttributeValues={
                ":answer": {"S": outcome},
                ":reason": {"S": reason or "-"},
                ":now": {"N": repr(now)},
                ":token": {"S": token},
            },
        )
    except Exception as error:
        if error_code(error) != "ConditionalCheckFailedException":
            raise


def _send(sfn: Any, operation: str, **kwargs: Any) -> None:
    try:
        getattr(sfn, operation)(**kwargs)
    except Exception as error:
        if error_code(error) in STALE_TOKEN_ERRORS:
            raise CompletionRefused(
                409, "the file is no longer waiting for an answer (timed out or closed)"
            ) from None
        raise


@lambda_handler(
    "completion",
    CompletionEnv,
    log_fields=lambda event: {"action": event.get("action"), "file_id": event.get("file")},
    clients=("dynamodb", "stepfunctions"),
)
def handler(event: Any, config: CompletionEnv, log: BoundLogger, context: Any) -> CompletionAnswer:
    return answer(
        event,
        tenant_id=config.tenant_id,
        table=config.ledger_table_name,
        ddb=aws_client("dynamodb"),
        sfn=aws_client("stepfunctions"),
        now=time.time(),
        log=log,
    )
