"""The file-ingest workflow of one tenant: a parent state machine, a section state machine
and a page state machine, each a Map (MaxConcurrency 1) over the level below.

Parent (`<id>-file-ingest-workflow`, one execution per file attempt):
    Split -> AnyChunks? -- none (duplicate, empty) ---------------------------> RecordSuccess
                        -- else -> Sections (first chunk of each section: States.ArrayRange)
                                -> OneSection? -- yes -> Pages (first chunk of each page)
                                                         -> PagesInOrder (Map, MaxConcurrency 1)
                                                              RunPage (StartExecution.sync:2, page)
                                               -- no --> SectionsInOrder (Map, MaxConcurrency 1)
                                                              RunSection (StartExecution.sync:2, section)
          -> (WaitForCompletion, with `completion.wait`) -> RecordSuccess (closer) -> FileIngested
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
                                  -- over budget --------> ChunkOverBudget (fails the page)
                                  -- core system down --> WaitForCoreSystem -> RegisterChunk
                                  -- deadline ----------------------------> RegisterChunk

Every execution's history has a bound that does not grow with the file
(`pipeline_constructs/budgets.py`, recounted from the synthesized definitions by
`tests/test_history_bound.py`): a page holds at most `chunks_per_page` chunks and a chunk at
most its invocation budget (counted in `invocation`); a section at most
`pages_per_section` pages; a file at most `budgets.max_sections()` sections. Most files fit
one section and never start a section execution.

Only S3 references, counts and index ranges travel between states: the execution history
never holds a record, and no state holds a list that grows with the file (the section list
has at most `budgets.max_sections()` entries, a page list at most `pages_per_section`, a
page's chunk list at most `chunks_per_page`). Each payload's keys come from its `TypedDict`
in `lambdas/contract.py`; `_select` refuses a selector that does not cover exactly those keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Aws, Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from lambdas import contract
from pipeline_constructs import budgets
from pipeline_constructs.versions import PinnedChild, StartPinnedExecution

#: Transient errors of the Lambda service itself. The seed's retrier, plus SDK client errors.
LAMBDA_TRANSIENT_ERRORS = (
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
)
#: A register invocation that ran out of time (the handler returns before its deadline, so
#: this is a crash or a hung connection): retried, and the retry continues at the first
#: record the ledger does not have as acknowledged.
LAMBDA_TIMEOUT_ERRORS = (
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


def _retry(task: sfn.TaskStateBase, errors: tuple[str, ...]) -> None:
    task.add_retry(
        errors=list(errors),
        interval=Duration.seconds(1),
        max_attempts=3,
        backoff_rate=2,
        jitter_strategy=sfn.JitterType.FULL,
    )


def _clamped_range(scope: Construct, *, names: tuple[str, str, str, str], result_path: str, span: int, step: int,
                   list_key: str, comment: str) -> tuple[sfn.IChainable, sfn.Pass]:
    """The states that make a page's (or a section's) list: its end `first_chunk + span - 1`
    (`names[0]`), lowered to the file's last chunk when past it (`names[1]` chooses,
    `names[2]` clamps), then `States.ArrayRange(first_chunk, end, step)` at
    `<result_path>.<list_key>` (`names[3]`, returned second: chain the Map to it)."""
    end_name, choice_name, clamp_name, list_name = names
    end = sfn.Pass(scope, end_name, parameters={"last.$": f"States.MathAdd($.first_chunk, {span - 1})"},
                   result_path=result_path)
    clamp = sfn.Pass(scope, clamp_name, parameters={"last.$": "$.last_chunk"}, result_path=result_path)
    listed = sfn.Pass(
        scope, list_name, comment=comment,
        parameters={f"{list_key}.$": f"States.ArrayRange($.first_chunk, {result_path}.last, {step})"},
        result_path=result_path,
    )
    choice = (
        sfn.Choice(scope, choice_name)
        .when(sfn.Condition.number_greater_than_json_path(f"{result_path}.last", "$.last_chunk"), clamp.next(listed))
        .otherwise(listed)
    )
    return end.next(choice), listed


def build_page_definition(
    scope: Construct,
    *,
    register_function: lambda_.IFunction,
    chunks_per_page: int,
    invocation_budget: int,
) -> sfn.IChainable:
    """The page state machine: the chunks `first_chunk` .. `min(first_chunk + chunks_per_page
    - 1, last_chunk)` of a file, one at a time (input: `contract.PageTask`)."""
    if not 1 <= chunks_per_page <= budgets.MAX_ARRAY_RANGE_ITEMS:
        raise ValueError(f"chunks_per_page {chunks_per_page} must be from 1 to {budgets.MAX_ARRAY_RANGE_ITEMS}")
    register = tasks.LambdaInvoke(
        scope,
        "RegisterChunk",
        comment="Send the chunk's records in order from the first unacknowledged one; returns before its deadline",
        lambda_function=register_function,
        payload=sfn.TaskInput.from_json_path_at("$"),
        result_selector=_select(
            contract.ChunkProgress,
            {
                **{key: f"$.Payload.{key}" for key in contract.keys_of(contract.ChunkProgress)},
                # the workflow counts the chunk's invocations (the handler passes it back)
                "invocation": "States.MathAdd($.Payload.invocation, 1)",
            },
        ),
        result_path="$",
        retry_on_service_exceptions=False,
    )
    _retry(register, LAMBDA_TRANSIENT_ERRORS)
    _retry(register, LAMBDA_TIMEOUT_ERRORS)
    wait = sfn.Wait(
        scope,
        "WaitForCoreSystem",
        comment="The core system is unavailable: wait, then try the same record again",
        time=sfn.WaitTime.seconds_path("$.retry_after_seconds"),
    )
    over_budget = sfn.Fail(
        scope,
        "ChunkOverBudget",
        error=CHUNK_OVER_BUDGET_ERROR,
        cause=f"the chunk used its {invocation_budget} register invocations (a bounded history); nothing is lost: "
        "`ops resume` continues at the first unacknowledged record",
    )
    chunk_done = (
        sfn.Choice(scope, "ChunkDone")
        .when(sfn.Condition.boolean_equals("$.done", True), sfn.Succeed(scope, "ChunkRegistered"))
        .when(sfn.Condition.number_greater_than_equals("$.invocation", invocation_budget), over_budget)
        .when(sfn.Condition.number_greater_than("$.retry_after_seconds", 0), wait.next(register))
        .otherwise(register)
    )

    # The page's chunks: first_chunk .. min(first_chunk + chunks_per_page - 1, the file's last chunk).
    page_range, page_chunks = _clamped_range(
        scope, names=("PageEnd", "LastPage", "ClampToFile", "PageChunks"), result_path="$.page",
        span=chunks_per_page, step=1, list_key="chunks",
        comment="This page's chunk indexes (at most chunks_per_page)",
    )
    chunks = sfn.Map(
        scope,
        "ChunksInOrder",
        comment="One chunk at a time: a failing chunk stops every later chunk",
        items_path="$.page.chunks",
        max_concurrency=1,
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
        result_path=sfn.JsonPath.DISCARD,
    )
    chunks.item_processor(register.next(chunk_done))
    page_chunks.next(chunks)
    return page_range


def _run_child(scope: Construct, construct_id: str, state_machine: sfn.IStateMachine | PinnedChild,
               name_format: str, comment: str) -> tasks.StepFunctionsStartExecution:
    """A `.sync:2` task that starts a child execution named `name_format` of the file's parent
    execution (`$.execution_name`) and the child's first chunk, and waits for it. A failed
    child is not retried: the file fails and halts the tenant (resume continues it). A
    `PinnedChild` is started by its version ARN (versions.py: the parent's version pins it)."""
    if isinstance(state_machine, PinnedChild):
        task_type, target = StartPinnedExecution, {"child": state_machine}
    else:
        task_type, target = tasks.StepFunctionsStartExecution, {"state_machine": state_machine}
    run = task_type(
        scope,
        construct_id,
        comment=comment,
        **target,
        integration_pattern=sfn.IntegrationPattern.RUN_JOB,
        name=sfn.JsonPath.format(
            name_format,
            sfn.JsonPath.string_at("$.execution_name"),
            sfn.JsonPath.string_at("$.first_chunk"),
        ),
        input=sfn.TaskInput.from_json_path_at("$"),
        result_path=sfn.JsonPath.DISCARD,
    )
    run.add_retry(
        errors=list(PAGE_START_ERRORS),
        interval=Duration.seconds(1),
        max_attempts=budgets.CHILD_TASK_RETRIES,
        backoff_rate=2,
        jitter_strategy=sfn.JitterType.FULL,
    )
    return run


def _pages_in_order(scope: Construct, page_state_machine: sfn.IStateMachine | PinnedChild, items_path: str,
                    page_fields: dict[str, object]) -> sfn.Map:
    """`PagesInOrder`: one page execution at a time over the page starts at `items_path`."""
    run_page = _run_child(scope, "RunPage", page_state_machine, contract.PAGE_EXECUTION_NAME_FORMAT,
                          "Register one page of chunks in a child execution and wait for it (its own bounded history)")
    pages_in_order = sfn.Map(
        scope,
        "PagesInOrder",
        comment="One page at a time: a failing page stops every later page",
        items_path=items_path,
        max_concurrency=1,
        item_selector=_select(contract.PageTask, page_fields),
        result_path=sfn.JsonPath.DISCARD,
    )
    return pages_in_order.item_processor(run_page)


def build_section_definition(
    scope: Construct,
    *,
    page_state_machine: sfn.IStateMachine | PinnedChild,
    chunks_per_page: int,
    pages_per_section: int,
) -> sfn.IChainable:
    """The section state machine: the pages of chunks `first_chunk` .. `min(first_chunk +
    chunks_per_page x pages_per_section - 1, last_chunk)` of a file, one page execution at a
    time (input: `contract.PageTask`; a section starts on a page boundary, so its pages never
    cross into the next section)."""
    if not 1 <= pages_per_section <= budgets.MAX_ARRAY_RANGE_ITEMS:
        raise ValueError(f"pages_per_section {pages_per_section} must be from 1 to {budgets.MAX_ARRAY_RANGE_ITEMS}")
    section_range, section_pages = _clamped_range(
        scope, names=("SectionEnd", "LastSection", "ClampSection", "SectionPages"), result_path="$.section",
        span=chunks_per_page * pages_per_section, step=chunks_per_page, list_key="first_chunks",
        comment="The first chunk of each page of this section (at most pages_per_section)",
    )
    pages_in_order = _pages_in_order(scope, page_state_machine, "$.section.first_chunks", {
        **{key: f"$.{key}" for key in contract.keys_of(contract.PageTask)},
        "first_chunk": "$$.Map.Item.Value",
    })
    section_pages.next(pages_in_order)
    return section_range


def build_definition(
    scope: Construct,
    *,
    split_function: lambda_.IFunction,
    page_state_machine: sfn.IStateMachine | PinnedChild,
    section_state_machine: sfn.IStateMachine | PinnedChild,
    closer_function: lambda_.IFunction,
    chunks_per_page: int,
    pages_per_section: int,
    completion: CompletionWait | None = None,
) -> sfn.IChainable:
    """The parent state machine definition of one tenant (one execution per file attempt).
    With `completion`, a file whose chunks are all registered waits for the core system's
    confirmation before it is recorded as a success; without, the definition is unchanged."""
    split_result = contract.SPLIT_RESULT_PATH
    split = tasks.LambdaInvoke(
        scope,
        "Split",
        comment="Stream the pinned object version, validate it, write chunks and a manifest to S3 (or reuse them)",
        lambda_function=split_function,
        payload=sfn.TaskInput.from_object(
            _select(contract.SplitRequest, _from_input("tenant", "bucket", "key", "version_id", "event_id", "start_record"))
        ),
        result_selector=_select(
            contract.SplitResult, {key: f"$.Payload.{key}" for key in contract.keys_of(contract.SplitResult)}
        ),
        result_path=split_result,
        retry_on_service_exceptions=False,
    )
    _retry(split, LAMBDA_TRANSIENT_ERRORS)

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
    chunks_per_section = chunks_per_page * pages_per_section
    sections = sfn.Pass(
        scope,
        "Sections",
        comment="The first chunk of each section (at most budgets.max_sections(): Split refuses a bigger file)",
        parameters={
            "first_chunks.$": f"States.ArrayRange({split_result}.first_chunk, {split_result}.last_chunk, {chunks_per_section})"
        },
        result_path="$.sections",
    )
    pages = sfn.Pass(
        scope,
        "Pages",
        comment="The first chunk of each page (the file fits one section: at most pages_per_section)",
        parameters={
            "first_chunks.$": f"States.ArrayRange({split_result}.first_chunk, {split_result}.last_chunk, {chunks_per_page})"
        },
        result_path="$.pages",
    )
    pages_in_order = _pages_in_order(scope, page_state_machine, "$.pages.first_chunks", page_fields)
    run_section = _run_child(scope, "RunSection", section_state_machine, contract.SECTION_EXECUTION_NAME_FORMAT,
                             "Run one section of pages in a child execution and wait for it (its own bounded history)")
    sections_in_order = sfn.Map(
        scope,
        "SectionsInOrder",
        comment="One section at a time: a failing section stops every later section",
        items_path="$.sections.first_chunks",
        max_concurrency=1,
        item_selector=_select(contract.PageTask, page_fields),
        result_path=sfn.JsonPath.DISCARD,
    )
    sections_in_order.item_processor(run_section)

    def record_close(construct_id: str, status: str, error_paths: bool) -> tasks.LambdaInvoke:
        close = {"execution_name": "$$.Execution.Name", "status": status, "error": None, "cause": None,
                 "content_sha256": None, "duplicate_of": None}
        if error_paths:
            close.update(error=f"{contract.ERROR_RESULT_PATH}.Error", cause=f"{contract.ERROR_RESULT_PATH}.Cause")
        else:  # a success: the ledger remembers the file's content, or records it as a duplicate
            close.update(content_sha256=f"{split_result}.content_sha256", duplicate_of=f"{split_result}.duplicate_of")
        task = tasks.LambdaInvoke(
            scope,
            construct_id,
            comment="Record the close in the ledger, notify on failure, hand off to the next file",
            lambda_function=closer_function,
            payload=sfn.TaskInput.from_object(_select(contract.CloseEvent, close)),
            result_path=sfn.JsonPath.DISCARD,
            retry_on_service_exceptions=False,
        )
        _retry(task, (*LAMBDA_TRANSIENT_ERRORS, "States.TaskFailed"))
        return task

    done = sfn.Succeed(scope, "FileIngested")
    failed = sfn.Fail(
        scope,
        "IngestFailed",
        error_path=f"{contract.ERROR_RESULT_PATH}.Error",
        cause_path=f"{contract.ERROR_RESULT_PATH}.Cause",
    )
    # If recording fails, the status-change rule records the close (backstop): the file's
    # outcome does not depend on it.
    record_success = record_close("RecordSuccess", "SUCCEEDED", error_paths=False)
    record_success.add_catch(done, errors=["States.ALL"], result_path=sfn.JsonPath.DISCARD)
    record_failure = record_close("RecordFailure", "FAILED", error_paths=True)
    record_failure.add_catch(failed, errors=["States.ALL"], result_path=sfn.JsonPath.DISCARD)
    on_error = record_failure.next(failed)

    for step in (split, pages_in_order, sections_in_order):
        step.add_catch(on_error, errors=["States.ALL"], result_path=contract.ERROR_RESULT_PATH)
    record_success.next(done)
    # A file with nothing to send (a duplicate, no records) has nothing to confirm either.
    after_chunks: sfn.State = record_success
    if completion is not None:
        after_chunks = _wait_for_completion(scope, completion, record_failure)
        after_chunks.next(record_success)
    one_section = (
        sfn.Choice(scope, "OneSection")
        .when(sfn.Condition.is_present("$.sections.first_chunks[1]"), sections_in_order.next(after_chunks))
        .otherwise(pages.next(pages_in_order).next(after_chunks))
    )
    nothing_to_send: sfn.State = record_success
    if completion is not None:
        # A resumed file whose every record was already acknowledged (its completion timed out
        # or was rejected) still waits for the confirmation; a duplicate or empty file does not.
        nothing_to_send = (
            sfn.Choice(scope, "ResumedAfterLastRecord")
            .when(
                sfn.Condition.and_(
                    sfn.Condition.is_present("$.start_record"),
                    sfn.Condition.number_greater_than("$.start_record", 0),
                ),
                after_chunks,
            )
            .otherwise(record_success)
        )
    any_chunks = (
        sfn.Choice(scope, "AnyChunks")
        .when(
            sfn.Condition.number_greater_than_json_path(f"{split_result}.first_chunk", f"{split_result}.last_chunk"),
            nothing_to_send,
        )
        .otherwise(sections.next(one_section))
    )
    return split.next(any_chunks)


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
COMPLETION_RESOURCE = f"arn:{Aws.PARTITION}:states:::aws-sdk:dynamodb:updateItem.waitForTaskToken"
#: The errors of a wait that ran out: its TimeoutSeconds (States.Timeout) or its
#: HeartbeatSeconds (States.HeartbeatTimeout; older documentation calls it States.Timeout).
COMPLETION_TIMEOUT_ERRORS = ("States.Timeout", "States.HeartbeatTimeout")


def _wait_for_completion(scope: Construct, completion: CompletionWait, record_failure: sfn.State) -> sfn.CustomState:
    """`WaitForCompletion`: one conditional UpdateItem leaves the task token on the tenant's
    ledger position (only while this execution is the current one, RUNNING), then the
    execution waits for the completion entry point to answer. The core system never sees the
    token: it names the file, the entry point looks the token up.

    Native TimeoutSeconds/HeartbeatSeconds, not the seed's Parallel + Wait race: one state, no
    branch to cancel, and the Catch keeps the input (ResultPath `$.error`), so RecordFailure
    still has the file. No Retry: a retry would store a new token (the history bound counts one
    attempt); a DynamoDB error fails the file like any other (on_failure decides)."""
    a = contract
    state: dict[str, object] = {
        "Type": "Task",
        "Comment": "Leave the task token on the ledger position and wait for the core system to confirm the file",
        "Resource": COMPLETION_RESOURCE,
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
        # The answer carries nothing the workflow needs: the input goes on unchanged.
        "ResultPath": None,
    }
    if completion.heartbeat_seconds is not None:
        state["HeartbeatSeconds"] = completion.heartbeat_seconds
    wait = sfn.CustomState(scope, "WaitForCompletion", state_json=state)
    heartbeat = (f" or sent no heartbeat for {completion.heartbeat_seconds} s"
                 if completion.heartbeat_seconds is not None else "")
    timed_out = sfn.Pass(
        scope,
        "CompletionTimedOut",
        comment="The core system did not answer in time: fail the file with a clear error",
        parameters={
            "Error": contract.COMPLETION_TIMED_OUT_ERROR,
            "Cause": f"the core system did not confirm the file within {completion.timeout_seconds} s{heartbeat}; "
            "every record was acknowledged: `ops resume` waits for the confirmation again, `ops skip` gives the file up",
        },
        result_path=contract.ERROR_RESULT_PATH,
    )
    timed_out.next(record_failure)
    wait.add_catch(timed_out, errors=list(COMPLETION_TIMEOUT_ERRORS), result_path=contract.ERROR_RESULT_PATH)
    wait.add_catch(record_failure, errors=["States.ALL"], result_path=contract.ERROR_RESULT_PATH)
    return wait
