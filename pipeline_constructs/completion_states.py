"""The parent workflow's wait for the core system's confirmation (`completion.wait`): one
task that leaves its token on the ledger position, and the state of a wait that ran out."""

from __future__ import annotations

from dataclasses import dataclass

from lambdas import contract
from pipeline_constructs.asl import State, catch, integration, pass_state


@dataclass(frozen=True)
class CompletionWait:
    """The parent's wait for the core system's confirmation (`completion.wait`).

    ``timeout_seconds``: the task's TimeoutSeconds; ``heartbeat_seconds``: its HeartbeatSeconds
    (None: none); ``ledger_table_name``: the table whose position item gets the task token."""

    timeout_seconds: int
    heartbeat_seconds: int | None
    ledger_table_name: str


#: AWS SDK integration, not the optimized `dynamodb:updateItem`: only the SDK integration
#: supports `.waitForTaskToken` for DynamoDB (docs/design.md, "Completion callback").
COMPLETION_RESOURCE = "aws-sdk:dynamodb:updateItem.waitForTaskToken"
#: The errors of a wait that ran out: its TimeoutSeconds (States.Timeout) or its
#: HeartbeatSeconds (States.HeartbeatTimeout; older documentation calls it States.Timeout).
COMPLETION_TIMEOUT_ERRORS = ("States.Timeout", "States.HeartbeatTimeout")


def completion_states(
    partition: str, completion: CompletionWait, *, next_state: str, record_failure: str
) -> dict[str, State]:
    """`WaitForCompletion` (then `next_state`) and `CompletionTimedOut`: one conditional
    UpdateItem leaves the task token on the tenant's ledger position (only while this
    execution is the current one, RUNNING), then the execution waits for the completion entry
    point. The core system never sees the token: it names the file.

    Native TimeoutSeconds/HeartbeatSeconds: one state, no branch to cancel, and the Catch keeps
    the input (ResultPath `$.error`) for `record_failure`. No Retry: a retry would store a new
    token (the history bound counts one attempt). ``ResultPath: null``: the answer carries
    nothing the workflow needs, and the split result `next_state` reads must go on unchanged
    (moto passes the input on either way: only AWS would show its loss)."""
    a = contract
    wait: State = {
        "Next": next_state,
        "Type": "Task",
        "Comment": "Leave the task token on the ledger position and wait for the core system to confirm the file",
        "Resource": integration(partition, COMPLETION_RESOURCE),
        "Parameters": {
            "TableName": completion.ledger_table_name,
            "Key": {"tenant": {"S.$": "$.tenant"}, "entry": {"S": a.LEDGER_POSITION_ENTRY}},
            "UpdateExpression": (
                f"SET {a.COMPLETION_TOKEN_ATTRIBUTE} = :token, {a.COMPLETION_EXECUTION_ATTRIBUTE} = :execution, "
                f"{a.COMPLETION_SINCE_ATTRIBUTE} = :since "
                f"REMOVE {a.COMPLETION_ANSWER_ATTRIBUTE}, {a.COMPLETION_REASON_ATTRIBUTE}, "
                f"{a.COMPLETION_ANSWERED_AT_ATTRIBUTE}"
            ),
            "ConditionExpression": "execution = :execution AND #status = :running",
            "ExpressionAttributeNames": {"#status": "status"},
            "ExpressionAttributeValues": {
                ":token": {"S.$": "$$.Task.Token"},
                ":execution": {"S.$": "$$.Execution.Name"},
                ":since": {"S.$": "$$.State.EnteredTime"},
                ":running": {"S": "RUNNING"},
            },
        },
        "TimeoutSeconds": completion.timeout_seconds,
    }
    if completion.heartbeat_seconds is not None:
        wait["HeartbeatSeconds"] = completion.heartbeat_seconds
    wait["ResultPath"] = None
    wait["Catch"] = [
        catch("CompletionTimedOut", a.ERROR_RESULT_PATH, COMPLETION_TIMEOUT_ERRORS),
        catch(record_failure, a.ERROR_RESULT_PATH),
    ]
    heartbeat = (
        f" or sent no heartbeat for {completion.heartbeat_seconds} s"
        if completion.heartbeat_seconds is not None
        else ""
    )
    timed_out = pass_state(
        comment="The core system did not answer in time: fail the file with a clear error",
        result_path=a.ERROR_RESULT_PATH,
        parameters={
            "Error": a.COMPLETION_TIMED_OUT_ERROR,
            "Cause": f"the core system did not confirm the file within {completion.timeout_seconds} s{heartbeat}; "
            "every record was acknowledged: `ops resume` waits for the confirmation again, `ops skip` gives the file up",
        },
        next_state=record_failure,
    )
    return {"WaitForCompletion": wait, "CompletionTimedOut": timed_out}
