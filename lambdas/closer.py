"""Closer: records that an execution closed, tells a person when a file failed, hands off.

Invoked by the workflow's last state and, as a backstop (those events are best effort), by the
tenant's "Step Functions Execution Status Change" rule. Both may arrive for one close and
either may fail part-way, so every step is idempotent and whichever report comes next
finishes it:

1. record the close and the attempt's history item in one ledger transaction (a failure
   halts the tenant when `on_failure` is `halt`); a close found recorded is finished from the
   ledger's data, never the report's;
2. on a failure, publish one notification a person can act on (`hints.py`); the mark is
   written after the publish, so a crash sends it twice rather than never (SNS cannot publish
   conditionally);
3. unless the tenant is halted, make the message waiting at the head of its queue visible.

An execution the ledger does not know (started or redriven by hand) is stopped.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from lambdas.contract import (
    CLOSED_STATUSES,
    CRASHED_CAUSE,
    CloseEvent,
    CloserEnv,
    StaleExecutionError,
    execution_arn,
)
from lambdas.hints import CRASH_ERRORS, commands, hint_for, stopped_at
from lambdas.ledger import FAILED, Ledger, LedgerConflict, Position, hand_off
from lambdas.runtime import BoundLogger, aws_client, error_code, lambda_handler

if TYPE_CHECKING:
    from collections.abc import Mapping

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


def of_other_machine(event: dict[str, Any], state_machine_arn: str) -> bool:
    """A status-change event of another state machine's execution (a page or section child
    execution): the rule should not send it here, and nothing here is about it."""
    arn = str((event.get("detail") or {}).get("stateMachineArn") or "") if "detail" in event else ""
    return bool(arn) and arn.split(":")[6:7] != state_machine_arn.split(":")[6:7]


def _child(cause: str | None) -> dict[str, Any] | None:
    """A failed page or section execution's description, as Step Functions gives it as the
    cause of `States.TaskFailed` (`startExecution.sync:2`), if it names an error of its own."""
    try:
        parsed = json.loads(cause or "")
    except ValueError:
        return None
    named = isinstance(parsed, dict) and ("executionArn" in parsed or "ExecutionArn" in parsed)
    return parsed if named and (parsed.get("error") or parsed.get("Error")) else None


def error_summary(error: str | None, cause: str | None) -> tuple[str, str]:
    """(error type, message) of a failure, without the stack trace or escaped JSON.

    A Lambda task's cause is the runtime's JSON (`errorType`, `errorMessage`, `stackTrace`);
    a failed page execution (`RunPage`, `startExecution.sync:2`) fails the parent with
    `States.TaskFailed` and the child's DescribeExecution output as cause: its own `error` and
    `cause` are what happened (e.g. `SinkRejectedError`); other causes are text.
    """
    child = _child(cause)
    if child is not None:
        return error_summary(
            str(child.get("error") or child.get("Error")), child.get("cause") or child.get("Cause")
        )
    if cause:
        try:
            parsed = json.loads(cause)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and ("errorMessage" in parsed or "errorType" in parsed):
            return str(parsed.get("errorType") or error or "Error"), str(parsed.get("errorMessage") or "")
        return error or "Error", cause
    return error or "Error", ""


def crashed_function(error: str | None, cause: str | None) -> str | None:
    """The function whose repeated crash failed the file: "register" when the failure came up
    from a page or section execution (they run only the register function) or its cause says
    so (a file of one page runs its chunks in its own execution: "register crashed ..."), else
    "split". None when the failure is not a crash."""
    kind, message = error_summary(error, cause)
    if kind not in CRASH_ERRORS:
        return None
    from_register = _child(cause) is not None or message.startswith(CRASHED_CAUSE.format("register"))
    return "register" if from_register else "split"


class Closer:
    """Handles one close event for one tenant."""

    def __init__(
        self, *, config: CloserEnv, ledger: Ledger, sqs: Any, sns: Any, sfn: Any, now: float, log: BoundLogger
    ) -> None:
        self.config, self.ledger, self.sqs, self.sns, self.sfn = config, ledger, sqs, sns, sfn
        self.now, self.log = now, log

    def handle_event(self, event: dict[str, Any]) -> dict[str, Any]:
        """The workflow's payload or an EventBridge status-change event."""
        if of_other_machine(event, self.config.state_machine_arn):
            self.log.info(
                "status change of another state machine's execution; ignored",
                extra={"state_machine": event["detail"].get("stateMachineArn")},
            )
            return {
                "execution_name": event["detail"].get("name"),
                "recorded": False,
                "halted": None,
                "handed_off": False,
            }
        return self.handle(close_event(event))

    def handle(self, event: CloseEvent) -> dict[str, Any]:
        name, status = event["execution_name"], event["status"]
        self.log.bind(execution=name, status=status)
        if status not in CLOSED_STATUSES:
            return self._started(name)
        failed = status != "SUCCEEDED"
        error_type, message = error_summary(event.get("error"), event.get("cause"))
        attempt: Position | None
        try:
            attempt = self.ledger.record_close(
                name,
                status,
                halt_on_failure=self.config.on_failure == "halt",
                now=self.now,
                error=error_type if failed else None,
                cause=message if failed else None,
                content_sha256=event.get("content_sha256"),
                duplicate_of=event.get("duplicate_of"),
                failed_in=crashed_function(event.get("error"), event.get("cause")) if failed else None,
            )
            recorded = True
            self.log.info(
                "close recorded",
                extra={
                    "halted": attempt.halted,
                    "next_record": attempt.next_record,
                    "recorded_as": attempt.status,
                },
            )
        except LedgerConflict:
            # Recorded before (this report's earlier try, or the other report): finish what may
            # not have been done after it, from the ledger's data.
            attempt, recorded = self.ledger.closed_attempt(name), False
            if attempt is None:
                self.log.info("not the tenant's current or a recent closed execution; nothing to record")
            else:
                self.log.info(
                    "close already recorded; finishing its report",
                    extra={
                        "recorded_as": attempt.status,
                        "closed_as": attempt.closed_as,
                        "notified": attempt.notified_at is not None,
                    },
                )
        if attempt is not None and attempt.status == FAILED and attempt.notified_at is None:
            self._notify(attempt)
        position = self.ledger.read()
        kicked = self._hand_off(position)
        return {"execution_name": name, "recorded": recorded, "halted": position.halted, "handed_off": kicked}

    def _started(self, name: str) -> dict[str, Any]:
        """An execution (re)started. Stopped only if the ledger does not know it (a hand-made
        start) or it was redriven by hand: the ledger's current execution and its recent closed
        attempts run on after their close is recorded, until their last state ends."""
        position = self.ledger.read()
        unchanged = {
            "execution_name": name,
            "recorded": False,
            "halted": position.halted,
            "handed_off": False,
        }
        if position.execution == name and position.running:
            return unchanged
        described = self._describe(name)
        if described is None or described["status"] != "RUNNING":
            self.log.info("late RUNNING event of a closed execution; ignored")
            return unchanged
        redriven = int(described.get("redriveCount") or 0) > 0
        if not redriven and (position.execution == name or self.ledger.closed_attempt(name) is not None):
            self.log.info(
                "RUNNING event of an execution whose close is recorded (it is finishing); ignored",
                extra={"current": position.execution, "current_status": position.status},
            )
            return unchanged
        self.log.error(
            "execution started outside the gate (a hand-made redrive or start); stopping it. "
            "Use `ops resume` to continue a failed file",
            extra={"current": position.execution, "current_status": position.status, "redriven": redriven},
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

    def _describe(self, name: str) -> dict[str, Any] | None:
        try:
            description: dict[str, Any] = self.sfn.describe_execution(
                executionArn=execution_arn(self.config.state_machine_arn, name)
            )
            return description
        except ClientError as error:
            if error_code(error) == "ExecutionDoesNotExist":
                return None
            raise

    def _hand_off(self, position: Position) -> bool:
        """Make the waiting message visible now; the visibility timeout stays the fallback."""
        handed_off = hand_off(self.ledger, self.sqs, self.config.queue_url, position)
        if handed_off:
            self.log.info("next file handed off", extra={"message_id": position.waiting_message_id})
        elif position.waiting_receipt and not (position.halted or position.running):
            self.log.info("waiting message not in flight any more; nothing to hand off")
        return handed_off

    def _notify(self, attempt: Position) -> None:
        """Publish the failure of `attempt` (its history item), then mark it published."""
        file: Mapping[str, Any] = attempt.file or {}
        tenant = self.config.tenant_id
        where = stopped_at(attempt.next_record, attempt.record_count, attempt.chunk_size, attempt.chunk_count)
        closed_as = attempt.closed_as or "FAILED"
        what = {"FAILED": "failed", "TIMED_OUT": "timed out", "ABORTED": "was stopped"}.get(
            closed_as, closed_as.lower()
        )
        error_type = attempt.error or "Error"
        if attempt.halted:
            consequence = (
                f"Tenant {tenant} is halted (on_failure: halt): its later files wait in the queue, in order."
            )
            found = hint_for(attempt)
            actions = [
                f"Hint:      {found.text}",
                "",
                *commands(found, tenant, key=file.get("key"), next_record=attempt.next_record),
            ]
        else:
            consequence = f"Tenant {tenant} goes on with its next file (on_failure: continue)."
            actions = ["Check the tenant with:", f"  python -m ops status {tenant}"]
        body = "\n".join(
            [
                f"A file of tenant {tenant} {what}.",
                consequence,
                "",
                f"File:      s3://{file.get('bucket', '?')}/{file.get('key', '?')} (version {file.get('version_id', '?')})",
                f"Stopped:   {where}",
                f"Error:     {error_type}" + (f": {attempt.cause}" if attempt.cause else ""),
                f"Execution: {attempt.execution}",
                "",
                *actions,
                "",
                f"Runbook: {RUNBOOK}#workflow-failed",
            ]
        )
        subject = f"[ordered-ingest] {tenant}: file {what} ({error_type})"[:100]
        self.sns.publish(TopicArn=self.config.alarm_topic_arn, Subject=subject, Message=body)
        try:
            self.ledger.mark_notified(attempt, self.now)
        except (ClientError, LedgerConflict) as error:
            # Not worth failing the invocation for: the next report (the backstop) sends it again.
            self.log.warning(
                "notification sent but not marked; a later report of this close sends it again",
                extra={"error_code": error_code(error)},
            )


@lambda_handler(
    "closer", CloserEnv, log_fields=lambda event: {}, clients=("dynamodb", "sqs", "sns", "stepfunctions")
)
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
    return closer.handle_event(event)
