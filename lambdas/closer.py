"""Closer: records that an execution closed, tells a person when a file failed, hands off.

Invoked by the workflow's last state (`RecordSuccess`, `RecordFailure`) and, as a backstop
because those events are best effort, by the "Step Functions Execution Status Change" rule of
the tenant's state machine. Both may arrive for one close; the ledger's conditional write
makes the second a no-op. On a close it:

1. records it in the ledger (a failure halts the tenant when `on_failure` is `halt`);
2. for a failure, publishes one notification a person can act on: tenant, file, chunk and
   record where it stopped, the error without a stack trace, and the `ops` command;
3. makes the message waiting at the head of the tenant's queue visible at once (fast
   hand-off), unless the tenant is halted.

An execution that starts running outside the gate (a `RedriveExecution` or `StartExecution`
made by hand) is stopped; the register function refuses such an execution anyway.
"""

from __future__ import annotations

import json
import time
from typing import Any

from botocore.exceptions import ClientError

from contract import CLOSED_STATUSES, CloseEvent, CloserEnv, StaleExecutionError, execution_arn
from ledger import FAILED, Ledger, LedgerConflict, Position, hand_off
from runtime import BoundLogger, aws_client, error_code, execution_status, lambda_handler

RUNBOOK = "docs/operations.md"


def close_event(event: dict[str, Any]) -> CloseEvent:
    """The close, from the workflow's payload or from an EventBridge status-change event."""
    if "detail" in event:
        detail = event.get("detail") or {}
        return CloseEvent(
            execution_name=str(detail.get("name") or detail.get("executionArn", "").rsplit(":", 1)[-1]),
            status=str(detail.get("status", "")),
            error=detail.get("error"),
            cause=detail.get("cause"),
        )
    return CloseEvent(
        execution_name=str(event["execution_name"]),
        status=str(event["status"]),
        error=event.get("error"),
        cause=event.get("cause"),
        content_sha256=event.get("content_sha256"),
        duplicate_of=event.get("duplicate_of"),
    )


def error_summary(error: str | None, cause: str | None) -> tuple[str, str]:
    """(error type, message) of a failure, without the stack trace or escaped JSON.

    A Lambda task's cause is the runtime's JSON (`errorType`, `errorMessage`, `stackTrace`);
    a failed page execution (`RunPage`, `startExecution.sync:2`) fails the parent with
    `States.TaskFailed` and the child's DescribeExecution output as cause: its own `error` and
    `cause` are what happened (e.g. `SinkRejectedError`); other causes are text.
    """
    if cause:
        try:
            parsed = json.loads(cause)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and ("executionArn" in parsed or "ExecutionArn" in parsed):
            child_error = parsed.get("error") or parsed.get("Error")
            if child_error:
                return error_summary(str(child_error), parsed.get("cause") or parsed.get("Cause"))
        if isinstance(parsed, dict) and ("errorMessage" in parsed or "errorType" in parsed):
            return str(parsed.get("errorType") or error or "Error"), str(parsed.get("errorMessage") or "")
        return error or "Error", cause
    return error or "Error", ""


class Closer:
    """Handles one close event for one tenant."""

    def __init__(self, *, config: CloserEnv, ledger: Ledger, sqs: Any, sns: Any, sfn: Any, now: float,
                 log: BoundLogger) -> None:
        self.config, self.ledger, self.sqs, self.sns, self.sfn = config, ledger, sqs, sns, sfn
        self.now, self.log = now, log

    def handle(self, event: CloseEvent) -> dict[str, Any]:
        name, status = event["execution_name"], event["status"]
        self.log.bind(execution=name, status=status)
        if status not in CLOSED_STATUSES:
            return self._started(name)
        error_type, message = error_summary(event.get("error"), event.get("cause"))
        try:
            after = self.ledger.record_close(
                name,
                status,
                halt_on_failure=self.config.on_failure == "halt",
                now=self.now,
                error=error_type if status != "SUCCEEDED" else None,
                cause=message if status != "SUCCEEDED" else None,
                content_sha256=event.get("content_sha256"),
                duplicate_of=event.get("duplicate_of"),
            )
            recorded = True
            self.log.info("close recorded", extra={"halted": after.halted, "next_record": after.next_record,
                                                   "recorded_as": after.status})
        except LedgerConflict:
            after, recorded = self.ledger.read(), False
            self.log.info("close already recorded, or not the current execution; nothing to record",
                          extra={"current": after.execution, "current_status": after.status})
        if recorded and after.status == FAILED:
            self._notify(after, status, error_type, message)
        kicked = self._hand_off(after)
        return {"execution_name": name, "recorded": recorded, "halted": after.halted, "handed_off": kicked}

    def _started(self, name: str) -> dict[str, Any]:
        """An execution (re)started: fine if it is the ledger's running one, else refuse it."""
        position = self.ledger.read()
        unchanged = {"execution_name": name, "recorded": False, "halted": position.halted, "handed_off": False}
        if position.execution == name and position.running:
            return unchanged
        if self._status(name) != "RUNNING":
            # A late event of an execution that has closed since: nothing runs outside the gate.
            self.log.info("late RUNNING event of a closed execution; ignored")
            return unchanged
        self.log.error(
            "execution started outside the gate (a hand-made redrive or start); stopping it. "
            "Use `ops resume` to continue a failed file",
            extra={"current": position.execution, "current_status": position.status},
        )
        try:
            self.sfn.stop_execution(
                executionArn=execution_arn(self.config.state_machine_arn, name),
                error=StaleExecutionError.__name__,
                cause="started outside the gate; use `ops resume`",
            )
        except ClientError as error:
            self.log.warning("could not stop the execution", extra={"error_code": error_code(error)})
        return {**unchanged, "stopped": True}

    def _status(self, name: str) -> str | None:
        return execution_status(self.sfn, self.config.state_machine_arn, name)

    def _hand_off(self, position: Position) -> bool:
        """Make the waiting message visible now; the visibility timeout stays the fallback."""
        handed_off = hand_off(self.ledger, self.sqs, self.config.queue_url, position)
        if handed_off:
            self.log.info("next file handed off", extra={"message_id": position.waiting_message_id})
        elif position.waiting_receipt and not (position.halted or position.running):
            self.log.info("waiting message not in flight any more; nothing to hand off")
        return handed_off

    def _notify(self, position: Position, status: str, error_type: str, message: str) -> None:
        file = position.file or {}
        tenant = self.config.tenant_id
        chunk_size = position.chunk_size
        where = f"record {position.next_record:,}"
        if position.record_count is not None:
            where += f" of {position.record_count:,}"
        if chunk_size and position.chunk_count:
            where = f"chunk {position.next_record // chunk_size + 1} of {position.chunk_count}, {where}"
        what = {"FAILED": "failed", "TIMED_OUT": "timed out", "ABORTED": "was stopped"}.get(status, status.lower())
        if position.halted:
            consequence = (
                f"Tenant {tenant} is halted (on_failure: halt): its later files wait in the queue, in order."
            )
            actions = (
                f"Fix the cause, then continue this file where it stopped:\n"
                f"  python -m ops resume {tenant}\n"
                f"or give it up and start the next file:\n"
                f"  python -m ops skip {tenant} --reason \"...\""
            )
        else:
            consequence = f"Tenant {tenant} goes on with its next file (on_failure: continue)."
            actions = f"Check the tenant with:\n  python -m ops status {tenant}"
        body = "\n".join(
            [
                f"A file of tenant {tenant} {what}.",
                consequence,
                "",
                f"File:      s3://{file.get('bucket', '?')}/{file.get('key', '?')} (version {file.get('version_id', '?')})",
                f"Stopped:   {where} (every record before it reached the core system)",
                f"Error:     {error_type}" + (f": {message}" if message else ""),
                f"Execution: {position.execution}",
                "",
                actions,
                "",
                f"Runbook: {RUNBOOK}#workflow-failed",
            ]
        )
        subject = f"[ordered-ingest] {tenant}: file {what} ({error_type})"[:100]
        self.sns.publish(TopicArn=self.config.alarm_topic_arn, Subject=subject, Message=body)


@lambda_handler("closer", CloserEnv, log_fields=lambda event: {})
def handler(event: dict[str, Any], config: CloserEnv, log: BoundLogger, context: Any) -> dict[str, Any]:
    """Workflow task or EventBridge target: an execution of this tenant changed status."""
    closer = Closer(
        config=config,
        ledger=Ledger(aws_client("dynamodb"), config.ledger_table_name, config.tenant_id),
        sqs=aws_client("sqs"),
        sns=aws_client("sns"),
        sfn=aws_client("stepfunctions"),
        now=time.time(),
        log=log,
    )
    return closer.handle(close_event(event))
