"""Amazon States Language building blocks, as plain data: the retriers and catchers every
task shares, the task and flow states, and the selectors that build a payload of the contract.
`definitions.py` assembles the workflows from them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lambdas import contract
from pipeline_constructs import budgets

#: One state, or a whole definition, as Amazon States Language.
State = dict[str, Any]

#: Transient errors of the Lambda service itself. The seed's retrier, plus SDK client errors.
LAMBDA_TRANSIENT_ERRORS = (
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
)
#: A crashed, killed or timed-out runtime (docs/design.md §4.7): the process died
#: (`Runtime.ExitError`, killed or crashed; `Runtime.OutOfMemory`), ran out of time
#: (`Sandbox.Timedout`; the handlers return before their deadline, so this is a crash or a hung
#: connection) or Lambda could not tell (`Lambda.Unknown`, `Lambda.ClientExecutionTimeoutException`).
#: Transient until it repeats: every Lambda task retries them (`crash_retry`), and a retry is
#: safe because every step is idempotent (register continues at the first unacknowledged
#: record under the same keys, split writes the same index again, the closer finishes a
#: recorded close). Past `budgets.CRASH_RETRIES` retries the file fails, saying what crashed.
LAMBDA_CRASH_ERRORS = (
    "Runtime.ExitError",
    "Runtime.OutOfMemory",
    "Sandbox.Timedout",
    "Lambda.Unknown",
    "Lambda.ClientExecutionTimeoutException",
    "States.Timeout",
)


def select(payload_type: type, values: Mapping[str, object]) -> dict[str, object]:
    """A Parameters/ItemSelector block building `payload_type`: a JSONPath (`$...`) or a
    constant for every key of the contract's TypedDict, and no other key. A `None` constant
    leaves the key out (the ASL that CDK writes has no nulls): such keys are `NotRequired` in
    the contract and read with `.get()`."""
    keys = contract.keys_of(payload_type)
    if set(values) != set(keys):
        raise ValueError(
            f"selector for {payload_type.__name__} has keys {sorted(values)}, the contract has {sorted(keys)}"
        )
    absent = {key for key in keys if values[key] is None}
    return {
        (
            f"{key}.$"
            if isinstance(values[key], str) and str(values[key]).startswith(("$", "States."))
            else key
        ): values[key]
        for key in keys
        if key not in absent
    }


def from_input(*keys: str) -> dict[str, object]:
    """`{"key": "$.key"}` for keys copied unchanged from the execution input."""
    unknown = set(keys) - set(contract.keys_of(contract.ExecutionInput))
    if unknown:
        raise ValueError(f"the execution input has no {sorted(unknown)}")
    return {key: f"$.{key}" for key in keys}


#: The error of a chunk that used its whole invocation budget (the page fails, so does the file).
CHUNK_OVER_BUDGET_ERROR = "ChunkInvocationBudgetExhausted"

#: Errors of StartExecution (the parent's page task) worth another try: throttling and the
#: service's own faults. A failed page is not retried: the file fails and halts the tenant.
PAGE_START_ERRORS = (
    "StepFunctions.ExecutionLimitExceededException",
    "StepFunctions.SdkClientException",
    "StepFunctions.AWSStepFunctionsException",
)


def retry(errors: tuple[str, ...], max_attempts: int = 3) -> State:
    """The seed's retrier: 1 s, backoff 2, full jitter."""
    return {
        "ErrorEquals": list(errors),
        "IntervalSeconds": 1,
        "MaxAttempts": max_attempts,
        "BackoffRate": 2,
        "JitterStrategy": "FULL",
    }


def crash_retry() -> State:
    """The retrier of crashed runtimes: 2 s, then 4 s, then 8 s (full jitter), `budgets.CRASH_RETRIES` times."""
    return {**retry(LAMBDA_CRASH_ERRORS, max_attempts=budgets.CRASH_RETRIES), "IntervalSeconds": 2}


def lambda_retry(*extra_transient: str) -> list[State]:
    """Every Lambda task's retriers: the Lambda service's transient errors (the seed's
    retrier, plus `extra_transient`), then crashes."""
    return [retry((*LAMBDA_TRANSIENT_ERRORS, *extra_transient)), crash_retry()]


def crashed(
    step: str, where: str, where_paths: tuple[str, ...], error_path: str, result_path: str, next_state: str
) -> State:
    """The Pass state after a Lambda task whose crashes outlasted its retries: the error stays
    the runtime's (`Runtime.OutOfMemory`, ...); the cause says what crashed, how often and where
    (`where`, a `States.Format` template of `where_paths`), for the notification and `ops status`."""
    arguments = ", ".join((*where_paths, f"{error_path}.Error"))
    return pass_state(
        comment=f"{step} crashed on every attempt: fail the file saying so",
        result_path=result_path,
        parameters={
            "Error.$": f"{error_path}.Error",
            "Cause.$": f"States.Format('{contract.CRASHED_CAUSE.format(step)} {budgets.CRASH_RETRIES + 1} times in a row {where} "
            f"(last: {{}})', {arguments})",
        },
        next_state=next_state,
    )


def catch(next_state: str, result_path: str | None, errors: tuple[str, ...] = ("States.ALL",)) -> State:
    return {"ErrorEquals": list(errors), "ResultPath": result_path, "Next": next_state}


def transition(next_state: str | None) -> State:
    """`Next`, or `End` for the last state of a (sub)workflow."""
    return {"Next": next_state} if next_state is not None else {"End": True}


def integration(partition: str, resource: str) -> str:
    """A service integration's `Resource` (`partition` is a token in a template)."""
    return f"arn:{partition}:states:::{resource}"


def lambda_task(
    partition: str,
    function_arn: str,
    *,
    next_state: str,
    retry: list[State],
    comment: str,
    result_path: str | None,
    payload: State,
    result_selector: State | None = None,
    catch: list[State] | None = None,
) -> State:
    """An optimized Lambda invoke (`lambda:invoke`): the function's answer at `$.Payload`."""
    state: State = {"Next": next_state, "Retry": retry}
    if catch is not None:
        state["Catch"] = catch
    state.update(Type="Task", Comment=comment, ResultPath=result_path)
    if result_selector is not None:
        state["ResultSelector"] = result_selector
    state.update(
        Resource=integration(partition, "lambda:invoke"),
        Parameters={"FunctionName": function_arn, **payload},
    )
    return state


def pass_state(*, result_path: str, parameters: State, next_state: str, comment: str | None = None) -> State:
    state: State = {"Type": "Pass"}
    if comment is not None:
        state["Comment"] = comment
    state.update(ResultPath=result_path, Parameters=parameters, Next=next_state)
    return state


def choice(choices: list[State], default: str) -> State:
    return {"Type": "Choice", "Choices": choices, "Default": default}
