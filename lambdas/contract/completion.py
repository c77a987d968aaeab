"""The completion callback (`completion.wait`): the core system confirms or rejects a file.

The workflow waits on a task token it leaves on the tenant's ledger position; the completion
entry point finds it there and answers Step Functions. This module holds the errors such a file
fails with, the ledger attributes both sides use, and the entry point's request and answer.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from lambdas.contract.options import CompletionAction

#: The error of a file the core system rejected through the completion entry point.
COMPLETION_REJECTED_ERROR = "CompletionRejected"
#: The error of a file the core system neither confirmed nor rejected in time (or whose
#: heartbeats stopped): the workflow's `CompletionTimedOut` state sets it.
COMPLETION_TIMED_OUT_ERROR = "CompletionTimedOut"
#: The longest rejection reason kept (it reaches the execution history, the ledger and the
#: notification: a summary, never record content).
MAX_REJECT_REASON = 256
#: Where the workflow leaves the task token: attributes of the tenant's ledger position item
#: (partition `tenant`, sort key `entry = "position"`, the one item naming the current file),
#: written by the workflow's `WaitForCompletion` task only while that execution is the current one.
LEDGER_POSITION_ENTRY = "position"
COMPLETION_TOKEN_ATTRIBUTE = "completion_token"
COMPLETION_EXECUTION_ATTRIBUTE = "completion_execution"
COMPLETION_SINCE_ATTRIBUTE = "completion_since"
#: What the core system answered (`confirmed` or `rejected`), its reason and when: kept on the
#: position (`ops status`), and the answer is final (a second, different answer is refused).
COMPLETION_ANSWER_ATTRIBUTE = "completion_answer"
COMPLETION_REASON_ATTRIBUTE = "completion_reason"
COMPLETION_ANSWERED_AT_ATTRIBUTE = "completion_answered_at"


class CompletionRequest(TypedDict):
    """What the core system sends to the completion entry point (a Lambda invoke under IAM).

    `tenant`: must be the entry point's own tenant. `file`: the file's id (the EventBridge
    event id, as `waiting` returns it); not needed for `waiting`. `reason`: `reject` only."""

    action: CompletionAction
    tenant: str
    file: NotRequired[str]
    reason: NotRequired[str]


class CompletionAnswer(TypedDict):
    """The entry point's answer: `status` is HTTP-like (200 done, 400 bad request, 403 another
    tenant's entry point, 404 no such waiting file, 409 no longer waiting); `message` says why."""

    status: int
    message: str
    file: NotRequired[dict[str, Any]]
