"""The file-ingest workflow of one tenant: a parent state machine, a section state machine
and a page state machine, each a Map (MaxConcurrency 1) over the level below.

Parent (`<id>-file-ingest-workflow`, one execution per file attempt):
    Split -> AnyChunks? -- none (duplicate, empty) ---------------------------> RecordSuccess
                        -- else -> Sections (first chunk of each section: States.ArrayRange)
                                -> OneSection? -- yes -> Pages (first chunk of each page)
                                                         -> PagesInOrder (Map, MaxConcurrency 1)
                                                              RunPage (StartExecution.sync:2, page)
                                                              -> RunPageOutcome? -- paused -> RunPagePaused
                                               -- no --> SectionsInOrder (Map, MaxConcurrency 1)
                                                              RunSection (StartExecution.sync:2, section)
                                                              -> RunSectionOutcome? (the same)
          -> (WaitForCompletion, with `completion.wait`) -> RecordSuccess (closer) -> FileIngested
    PagesInOrder, SectionsInOrder Catch TenantPaused (a child stopped for `ops pause`) -> FilePaused
          (Succeed, no close: the ledger says PAUSED; `ops unpause` runs the file on)
    WaitForCompletion Catch States.Timeout|HeartbeatTimeout -> CompletionTimedOut -> RecordFailure
    Catch (Split, PagesInOrder, SectionsInOrder, WaitForCompletion) -> RecordFailure (closer: ledger,
          notification, halt) -> IngestFailed

Section (`<id>-file-ingest-section`, one execution per section of a file of more than one,
named `<parent>-s<first chunk>`):
    SectionEnd -> LastSection? -> (ClampSection) -> SectionPages (States.ArrayRange) ->
    PagesInOrder (Map, MaxConcurrency 1) -> RunPage (StartExecution.sync:2, page)

Page (`<id>-file-ingest-page`, one execution per page, named `<parent>-p<first chunk>`
whichever execution starts it):
    PageEnd -> LastPage? -> (ClampToFile) -> PageChunks (States.ArrayRange) ->
    ChunksInOrder (Map, MaxConcurrency 1)
      RegisterChunk -> ChunkDone? -- done ---------------> ChunkRegistered
                                  -- paused (ops pause) -> ChunkPaused (TenantPaused) -> PagePaused
                                                           (the Map's Catch: the page succeeds, output
                                                           {"paused": true})
                                  -- over budget --------> ChunkOverBudget (fails the page)
                                  -- core system down --> WaitForCoreSystem -> RegisterChunk
                                  -- deadline ----------------------------> RegisterChunk

Every execution's history has a bound that does not grow with the file (`budgets.py`,
recounted by `tests/test_history_bound.py`), and only S3 references, counts and index ranges
travel between states: no state holds a record, or a list that grows with the file. Each
payload's keys come from its `TypedDict` in `lambdas/contract/payloads.py`; `_select` refuses a
selector that does not cover exactly those keys.

The definitions are Amazon States Language as plain data, not CDK's state classes, whose jsii
calls slowed a big synth; `workflows.py` makes the grants CDK's task classes made. A state's
keys are in the order CDK wrote them, the parent's states in the order of the flow above.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
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
#: Transient until it repeats: every Lambda task retries them (`_crash_retry`), and a retry is
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


def _select(payload_type: type, values: dict[str, object]) -> dict[str, object]:
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
        (f"{key}.$" if isinstance(values[key], str) and str(values[key]).startswith(("$", "States.")) else key): values[key]
        for key in keys
        if key not in absent
    }


def _from_input(*keys: str) -> dict[str, object]:
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


def _retry(errors: tuple[str, ...], max_attempts: int = 3) -> State:
    """The seed's retrier: 1 s, backoff 2, full jitter."""
    return {"ErrorEquals": list(errors), "IntervalSeconds": 1, "MaxAttempts": max_attempts, "BackoffRate": 2,
            "JitterStrategy": "FULL"}


def _crash_retry() -> State:
    """The retrier of crashed runtimes: 2 s, then 4 s, then 8 s (full jitter), `budgets.CRASH_RETRIES` times."""
    return {**_retry(LAMBDA_CRASH_ERRORS, max_attempts=budgets.CRASH_RETRIES), "IntervalSeconds": 2}


def _lambda_retry(*extra_transient: str) -> list[State]:
    """Every Lambda task's retriers: the Lambda service's transient errors (the seed's
    retrier, plus `extra_transient`), then crashes."""
    return [_retry((*LAMBDA_TRANSIENT_ERRORS, *extra_transient)), _crash_retry()]


def _crashed(step: str, where: str, where_paths: tuple[str, ...], error_path: str, result_path: str,
             next_state: str) -> State:
    """The Pass state after a Lambda task whose crashes outlasted its retries: the error stays
    the runtime's (`Runtime.OutOfMemory`, ...); the cause says what crashed, how often and where
    (`where`, a `States.Format` template of `where_paths`), for the notification and `ops status`."""
    arguments = ", ".join((*where_paths, f"{error_path}.Error"))
    return _pass(
        comment=f"{step} crashed on every attempt: fail the file saying so",
        result_path=result_path,
        parameters={
            "Error.$": f"{error_path}.Error",
            "Cause.$": f"States.Format('{step} crashed {budgets.CRASH_RETRIES + 1} times in a row {where} "
                       f"(last: {{}})', {arguments})",
        },
        next_state=next_state,
    )


def _catch(next_state: str, result_path: str | None, errors: tuple[str, ...] = ("States.ALL",)) -> State:
    return {"ErrorEquals": list(errors), "ResultPath": result_path, "Next": next_state}


def _transition(next_state: str | None) -> State:
    """`Next`, or `End` for the last state of a (sub)workflow."""
    return {"Next": next_state} if next_state is not None else {"End": True}


def _integration(partition: str, resource: str) -> str:
    """A service integration's `Resource` (`partition` is a token in a template)."""
    return f"arn:{partition}:states:::{resource}"


def _lambda_task(partition: str, function_arn: str, *, next_state: str, retry: list[State], comment: str,
                 result_path: str | None, payload: State, result_selector: State | None = None,
                 catch: list[State] | None = None) -> State:
    """An optimized Lambda invoke (`lambda:invoke`): the function's answer at `$.Payload`."""
    state: State = {"Next": next_state, "Retry": retry}
    if catch is not None:
        state["Catch"] = catch
    state.update(Type="Task", Comment=comment, ResultPath=result_path)
    if result_selector is not None:
        state["ResultSelector"] = result_selector
    state.update(Resource=_integration(partition, "lambda:invoke"), Parameters={"FunctionName": function_arn, **payload})
    return state


def _pass(*, result_path: str, parameters: State, next_state: str, comment: str | None = None) -> State:
    state: State = {"Type": "Pass"}
    if comment is not None:
        state["Comment"] = comment
    state.update(ResultPath=result_path, Parameters=parameters, Next=next_state)
    return state


def _choice(choices: list[State], default: str) -> State:
    return {"Type": "Choice", "Choices": choices, "Default": default}


def _in_order(*, comment: str, items_path: str, item_selector: State, start_at: str, states: State,
              next_state: str | None, catch: list[State] | None = None) -> State:
    """An inline Map over `items_path`, one item at a time (MaxConcurrency 1: order)."""
    state: State = {"Type": "Map", "Comment": comment, "ResultPath": None, **_transition(next_state)}
    if catch is not None:
        state["Catch"] = catch
    state.update(
        ItemsPath=items_path,
        ItemSelector=item_selector,
        ItemProcessor={"ProcessorConfig": {"Mode": "INLINE"}, "StartAt": start_at, "States": states},
        MaxConcurrency=1,
    )
    return state


def _clamped_range(*, names: tuple[str, str, str, str], result_path: str, span: int, step: int, list_key: str,
                   comment: str, next_state: str) -> dict[str, State]:
    """The states that make a page's (or a section's) list: its end `first_chunk + span - 1`
    (`names[0]`, the first), lowered to the file's last chunk when past it (`names[1]`
    chooses, `names[2]` clamps), then `States.ArrayRange(first_chunk, end, step)` at
    `<result_path>.<list_key>` (`names[3]`, which goes on to `next_state`)."""
    end_name, choice_name, clamp_name, list_name = names
    return {
        end_name: _pass(result_path=result_path, parameters={"last.$": f"States.MathAdd($.first_chunk, {span - 1})"},
                        next_state=choice_name),
        choice_name: _choice(
            [{"Variable": f"{result_path}.last", "NumericGreaterThanPath": "$.last_chunk", "Next": clamp_name}],
            default=list_name,
        ),
        list_name: _pass(
            comment=comment, result_path=result_path,
            parameters={f"{list_key}.$": f"States.ArrayRange($.first_chunk, {result_path}.last, {step})"},
            next_state=next_state,
        ),
        clamp_name: _pass(result_path=result_path, parameters={"last.$": "$.last_chunk"}, next_state=list_name),
    }


def build_page_definition(*, partition: str, register_function_arn: str, chunks_per_page: int,
                          invocation_budget: int) -> State:
    """The page state machine: the chunks `first_chunk` .. `min(first_chunk + chunks_per_page
    - 1, last_chunk)` of a file, one at a time (input: `contract.PageTask`)."""
    if not 1 <= chunks_per_page <= budgets.MAX_ARRAY_RANGE_ITEMS:
        raise ValueError(f"chunks_per_page {chunks_per_page} must be from 1 to {budgets.MAX_ARRAY_RANGE_ITEMS}")
    register = _lambda_task(
        partition, register_function_arn,
        next_state="ChunkDone",
        retry=_lambda_retry(),
        catch=[_catch("ChunkCrashed", "$.crash", LAMBDA_CRASH_ERRORS)],
        comment="Send the chunk's records in order from the first unacknowledged one; returns before its deadline",
        result_path="$",
        result_selector=_select(
            contract.ChunkProgress,
            {
                **{key: f"$.Payload.{key}" for key in contract.keys_of(contract.ChunkProgress)},
                # the workflow counts the chunk's invocations (the handler passes it back)
                "invocation": "States.MathAdd($.Payload.invocation, 1)",
            },
        ),
        payload={"Payload.$": "$"},
    )
    chunk_states = {
        "RegisterChunk": register,
        "WaitForCoreSystem": {
            "Type": "Wait",
            "Comment": "The core system is unavailable: wait, then try the same record again",
            "SecondsPath": "$.retry_after_seconds",
            "Next": "RegisterChunk",
        },
        "ChunkDone": _choice(
            [
                {"Variable": "$.paused", "BooleanEquals": True, "Next": "ChunkPaused"},
                {"Variable": "$.done", "BooleanEquals": True, "Next": "ChunkRegistered"},
                {"Variable": "$.invocation", "NumericGreaterThanEquals": invocation_budget, "Next": "ChunkOverBudget"},
                {"Variable": "$.retry_after_seconds", "NumericGreaterThan": 0, "Next": "WaitForCoreSystem"},
            ],
            default="RegisterChunk",
        ),
        "ChunkRegistered": {"Type": "Succeed"},
        "ChunkPaused": _paused_fail("The tenant is paused (ops pause): stop this page, without failing it"),
        "ChunkOverBudget": {
            "Type": "Fail",
            "Error": CHUNK_OVER_BUDGET_ERROR,
            "Cause": f"the chunk used its {invocation_budget} register invocations (a bounded history); nothing is "
            "lost: `ops resume` continues at the first unacknowledged record",
        },
        "ChunkCrashed": _crashed("register", "in chunk {} of the file", ("$.chunk_index",), "$.crash",
                                 "$.crash", "RegisterCrashed"),
        "RegisterCrashed": {"Type": "Fail", "ErrorPath": "$.crash.Error", "CausePath": "$.crash.Cause"},
    }
    # The page's chunks: first_chunk .. min(first_chunk + chunks_per_page - 1, the file's last chunk).
    states = _clamped_range(
        names=("PageEnd", "LastPage", "ClampToFile", "PageChunks"), result_path="$.page",
        span=chunks_per_page, step=1, list_key="chunks",
        comment="This page's chunk indexes (at most chunks_per_page)", next_state="ChunksInOrder",
    )
    states["ChunksInOrder"] = _in_order(
        comment="One chunk at a time: a failing chunk stops every later chunk",
        items_path="$.page.chunks",
        item_selector=_select(
            contract.ChunkTask,
            {
                **{key: f"$.{key}" for key in ("tenant", "bucket", "key", "version_id", "start_record",
                                               "chunk_prefix", "chunk_size", "chunk_count", "record_count")},
                # the parent's execution: the register function's fence checks it
                "execution_name": "$.execution_name",
                "chunk_index": "$$.Map.Item.Value",
                "fault_since": None,
                "invocation": 0,
            },
        ),
        start_at="RegisterChunk",
        states=chunk_states,
        next_state=None,
        catch=[_catch("PagePaused", None, (contract.TENANT_PAUSED_ERROR,))],
    )
    states["PagePaused"] = PAUSED_END
    return {"StartAt": "PageEnd", "States": states}


#: The end of a page or section execution stopped for `ops pause`: it succeeds, its output
#: says so (`_run_child` reads it), so no execution fails and no alarm fires.
PAUSED_END: State = {"Type": "Pass", "Comment": "Stopped for ops pause: succeed, saying so",
                     "Result": {"paused": True}, "ResultPath": "$", "End": True}


def _paused_fail(comment: str) -> State:
    """The state that stops a Map's item for `ops pause` (its error is caught a level up)."""
    return {"Type": "Fail", "Comment": comment, "Error": contract.TENANT_PAUSED_ERROR,
            "Cause": "ops pause: the file stops at a chunk boundary; ops unpause runs it on at its first "
                     "unacknowledged record"}


def _run_child(partition: str, version_arn: str, name_format: str, comment: str, task: str) -> dict[str, State]:
    """A `.sync:2` task (`task`) that starts a child execution of the state machine version
    `version_arn` (versions.py: the parent's version pins its children's), named `name_format`
    of the file's parent execution (`$.execution_name`) and the child's first chunk, and waits
    for it; then `<task>Outcome`: a child stopped for `ops pause` (its output has `paused`)
    stops the Map with `TenantPaused` (caught by it), any other ends the item. A failed child
    is not retried: the file fails and halts the tenant (resume continues it); only the start
    is, on throttling and the service's faults."""
    return {
        task: {
            "Next": f"{task}Outcome",
            "Retry": [_retry(PAGE_START_ERRORS, max_attempts=budgets.CHILD_TASK_RETRIES)],
            "Type": "Task",
            "Comment": comment,
            # The child's DescribeExecution, its output parsed (`.sync:2`); the Map's item ends here,
            # so it travels no further.
            "ResultPath": "$.child",
            "Resource": _integration(partition, "states:startExecution.sync:2"),
            "Parameters": {
                "Input.$": "$",
                "StateMachineArn": version_arn,
                "Name.$": f"States.Format('{name_format}', $.execution_name, $.first_chunk)",
            },
        },
        # Step Functions writes the child's output as `Output`; moto as `output` (local_runtime/README.md).
        f"{task}Outcome": _choice([{"Or": [{"Variable": f"$.child.{output}.paused", "IsPresent": True}
                                           for output in ("Output", "output")],
                                    "Next": f"{task}Paused"}],
                                  default=f"{task}Done"),
        f"{task}Paused": _paused_fail("The child stopped for ops pause: stop the later ones too"),
        f"{task}Done": {"Type": "Succeed"},
    }


@dataclass(frozen=True)
class _Children:
    """What differs between the parent's two ways of running children: pages or sections."""

    comment: str
    task: str
    name_format: str
    task_comment: str


_PAGES = _Children("One page at a time: a failing page stops every later page", "RunPage",
                   contract.PAGE_EXECUTION_NAME_FORMAT,
                   "Register one page of chunks in a child execution and wait for it (its own bounded history)")
_SECTIONS = _Children("One section at a time: a failing section stops every later section", "RunSection",
                      contract.SECTION_EXECUTION_NAME_FORMAT,
                      "Run one section of pages in a child execution and wait for it (its own bounded history)")


def _children_in_order(partition: str, children: _Children, version_arn: str, items_path: str,
                       fields: dict[str, object], next_state: str | None, paused: str,
                       catch: list[State] | None = None) -> State:
    """`PagesInOrder` or `SectionsInOrder`: one child execution (of the state machine version
    `version_arn`) at a time over the children's first chunks at `items_path`; each child's
    input is a `contract.PageTask` of `fields`. A child stopped for `ops pause` stops the Map,
    which goes on to `paused`."""
    return _in_order(
        comment=children.comment,
        items_path=items_path,
        item_selector=_select(contract.PageTask, fields),
        start_at=children.task,
        states=_run_child(partition, version_arn, children.name_format, children.task_comment, children.task),
        next_state=next_state,
        catch=[_catch(paused, None, (contract.TENANT_PAUSED_ERROR,)), *(catch or [])],
    )


def build_section_definition(*, partition: str, page_version_arn: str, chunks_per_page: int,
                             pages_per_section: int) -> State:
    """The section state machine: the pages of chunks `first_chunk` .. `min(first_chunk +
    chunks_per_page x pages_per_section - 1, last_chunk)` of a file, one page execution at a
    time (input: `contract.PageTask`; a section starts on a page boundary, so its pages never
    cross into the next section)."""
    if not 1 <= pages_per_section <= budgets.MAX_ARRAY_RANGE_ITEMS:
        raise ValueError(f"pages_per_section {pages_per_section} must be from 1 to {budgets.MAX_ARRAY_RANGE_ITEMS}")
    states = _clamped_range(
        names=("SectionEnd", "LastSection", "ClampSection", "SectionPages"), result_path="$.section",
        span=chunks_per_page * pages_per_section, step=chunks_per_page, list_key="first_chunks",
        comment="The first chunk of each page of this section (at most pages_per_section)",
        next_state="PagesInOrder",
    )
    states["PagesInOrder"] = _children_in_order(partition, _PAGES, page_version_arn, "$.section.first_chunks", {
        **{key: f"$.{key}" for key in contract.keys_of(contract.PageTask)},
        "first_chunk": "$$.Map.Item.Value",
    }, next_state=None, paused="SectionPaused")
    states["SectionPaused"] = PAUSED_END
    return {"StartAt": "SectionEnd", "States": states}


def build_definition(
    *,
    partition: str,
    split_function_arn: str,
    page_version_arn: str,
    section_version_arn: str,
    closer_function_arn: str,
    chunks_per_page: int,
    pages_per_section: int,
    completion: CompletionWait | None = None,
) -> State:
    """The parent state machine definition of one tenant (one execution per file attempt).
    With `completion`, a file whose chunks are all registered waits for the core system's
    confirmation before it is recorded as a success; without, the definition is unchanged."""
    split_result = contract.SPLIT_RESULT_PATH
    on_error = [_catch("RecordFailure", contract.ERROR_RESULT_PATH)]
    # A file with nothing to send (a duplicate, no records) has nothing to confirm either.
    after_chunks = "RecordSuccess" if completion is None else "WaitForCompletion"
    page_fields = {
        **_from_input("tenant", "bucket", "key", "version_id", "start_record"),
        "execution_name": "$$.Execution.Name",
        "chunk_prefix": f"{split_result}.chunk_prefix",
        "chunk_size": f"{split_result}.chunk_size",
        "chunk_count": f"{split_result}.chunk_count",
        "record_count": f"{split_result}.record_count",
        "first_chunk": "$$.Map.Item.Value",
        "last_chunk": f"{split_result}.last_chunk",
    }

    def record_close(status: str, error_paths: bool, next_state: str) -> State:
        close = {"execution_name": "$$.Execution.Name", "status": status, "error": None, "cause": None,
                 "content_sha256": None, "duplicate_of": None}
        if error_paths:
            close.update(error=f"{contract.ERROR_RESULT_PATH}.Error", cause=f"{contract.ERROR_RESULT_PATH}.Cause")
        else:  # a success: the ledger remembers the file's content, or records it as a duplicate
            close.update(content_sha256=f"{split_result}.content_sha256", duplicate_of=f"{split_result}.duplicate_of")
        # If recording fails, the status-change rule records the close (backstop): the file's
        # outcome does not depend on it.
        return _lambda_task(
            partition, closer_function_arn,
            next_state=next_state,
            retry=_lambda_retry("States.TaskFailed"),
            catch=[_catch(next_state, None)],
            comment="Record the close in the ledger, notify on failure, hand off to the next file",
            result_path=None,
            payload={"Payload": _select(contract.CloseEvent, close)},
        )

    def first_chunks(comment: str, result_path: str, step: int, next_state: str) -> State:
        """The first chunk of every `step` chunks of the file at `<result_path>.first_chunks`."""
        return _pass(
            comment=comment, result_path=result_path,
            parameters={"first_chunks.$": f"States.ArrayRange({split_result}.first_chunk, {split_result}.last_chunk, "
                                          f"{step})"},
            next_state=next_state,
        )

    # With `completion`, a file whose chunks are all registered waits for the confirmation; so
    # does a resumed file whose every record was already acknowledged (its completion timed out
    # or was rejected); a duplicate or empty file does not.
    completion_wait: dict[str, State] = {} if completion is None else {
        **completion_states(partition, completion, next_state="RecordSuccess", record_failure="RecordFailure"),
        "ResumedAfterLastRecord": _choice(
            [{"And": [{"Variable": "$.start_record", "IsPresent": True},
                      {"Variable": "$.start_record", "NumericGreaterThan": 0}],
              "Next": "WaitForCompletion"}],
            default="RecordSuccess",
        ),
    }
    states: dict[str, State] = {
        "Split": _lambda_task(
            partition, split_function_arn,
            next_state="AnyChunks",
            retry=_lambda_retry(),
            catch=[_catch("SplitCrashed", contract.ERROR_RESULT_PATH, LAMBDA_CRASH_ERRORS), *on_error],
            comment="Stream the pinned object version, validate it, write chunks and a manifest to S3 (or reuse them)",
            result_path=split_result,
            result_selector=_select(
                contract.SplitResult, {key: f"$.Payload.{key}" for key in contract.keys_of(contract.SplitResult)}
            ),
            payload={"Payload": _select(
                contract.SplitRequest,
                _from_input("tenant", "bucket", "key", "version_id", "event_id", "start_record"),
            )},
        ),
        "AnyChunks": _choice(
            [{"Variable": f"{split_result}.first_chunk", "NumericGreaterThanPath": f"{split_result}.last_chunk",
              "Next": "RecordSuccess" if completion is None else "ResumedAfterLastRecord"}],
            default="Sections",
        ),
        "Sections": first_chunks(
            "The first chunk of each section (at most budgets.max_sections(): Split refuses a bigger file)",
            "$.sections", chunks_per_page * pages_per_section, "OneSection",
        ),
        "OneSection": _choice(
            [{"Variable": "$.sections.first_chunks[1]", "IsPresent": True, "Next": "SectionsInOrder"}],
            default="Pages",
        ),
        "Pages": first_chunks(
            "The first chunk of each page (the file fits one section: at most pages_per_section)",
            "$.pages", chunks_per_page, "PagesInOrder",
        ),
        "PagesInOrder": _children_in_order(partition, _PAGES, page_version_arn, "$.pages.first_chunks", page_fields,
                                           next_state=after_chunks, paused="FilePaused", catch=on_error),
        "SectionsInOrder": _children_in_order(partition, _SECTIONS, section_version_arn, "$.sections.first_chunks",
                                              page_fields, next_state=after_chunks, paused="FilePaused",
                                              catch=on_error),
        **completion_wait,
        "RecordSuccess": record_close("SUCCEEDED", error_paths=False, next_state="FileIngested"),
        "FileIngested": {"Type": "Succeed"},
        # Not a close: the ledger says PAUSED (register wrote it); ops unpause runs the file on.
        "FilePaused": {"Type": "Succeed", "Comment": "Stopped for ops pause at a chunk boundary; ops unpause runs "
                                                     "the file on at its first unacknowledged record"},
        "SplitCrashed": _crashed("split", "on this file, before this attempt sent any record", (), contract.ERROR_RESULT_PATH,
                                 contract.ERROR_RESULT_PATH, "RecordFailure"),
        "RecordFailure": record_close("FAILED", error_paths=True, next_state="IngestFailed"),
        "IngestFailed": {"Type": "Fail", "ErrorPath": f"{contract.ERROR_RESULT_PATH}.Error",
                         "CausePath": f"{contract.ERROR_RESULT_PATH}.Cause"},
    }
    return {"StartAt": "Split", "States": states}


def render(definition: State, timeout_seconds: int) -> str:
    """The `DefinitionString` of `definition`, with the execution time limit `timeout_seconds`:
    compact JSON, as CDK writes it (tokens in it become the template's `Fn::Join`)."""
    return json.dumps({**definition, "TimeoutSeconds": timeout_seconds}, separators=(",", ":"), ensure_ascii=False)


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


def completion_states(partition: str, completion: CompletionWait, *, next_state: str,
                      record_failure: str) -> dict[str, State]:
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
        "Resource": _integration(partition, COMPLETION_RESOURCE),
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
        _catch("CompletionTimedOut", a.ERROR_RESULT_PATH, COMPLETION_TIMEOUT_ERRORS),
        _catch(record_failure, a.ERROR_RESULT_PATH),
    ]
    heartbeat = (f" or sent no heartbeat for {completion.heartbeat_seconds} s"
                 if completion.heartbeat_seconds is not None else "")
    timed_out = _pass(
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
