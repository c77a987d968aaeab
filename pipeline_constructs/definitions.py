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
payload's keys come from its `TypedDict` in `lambdas/contract/payloads.py`; `select` refuses a
selector that does not cover exactly those keys.

The definitions are Amazon States Language as plain data, not CDK's state classes, whose jsii
calls slowed a big synth; `workflows.py` makes the grants CDK's task classes made. A state's
keys are in the order CDK wrote them, the parent's states in the order of the flow above.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from lambdas import contract
from pipeline_constructs import budgets
from pipeline_constructs.asl import (
    CHUNK_OVER_BUDGET_ERROR,
    LAMBDA_CRASH_ERRORS,
    PAGE_START_ERRORS,
    State,
    catch,
    choice,
    crashed,
    from_input,
    integration,
    lambda_retry,
    lambda_task,
    pass_state,
    retry,
    select,
    transition,
)
from pipeline_constructs.completion_states import CompletionWait, completion_states


def _in_order(
    *,
    comment: str,
    items_path: str,
    item_selector: State,
    start_at: str,
    states: State,
    next_state: str | None,
    catch: list[State] | None = None,
) -> State:
    """An inline Map over `items_path`, one item at a time (MaxConcurrency 1: order)."""
    state: State = {"Type": "Map", "Comment": comment, "ResultPath": None, **transition(next_state)}
    if catch is not None:
        state["Catch"] = catch
    state.update(
        ItemsPath=items_path,
        ItemSelector=item_selector,
        ItemProcessor={"ProcessorConfig": {"Mode": "INLINE"}, "StartAt": start_at, "States": states},
        MaxConcurrency=1,
    )
    return state


def _clamped_range(
    *,
    names: tuple[str, str, str, str],
    result_path: str,
    span: int,
    step: int,
    list_key: str,
    comment: str,
    next_state: str,
) -> dict[str, State]:
    """The states that make a page's (or a section's) list: its end `first_chunk + span - 1`
    (`names[0]`, the first), lowered to the file's last chunk when past it (`names[1]`
    chooses, `names[2]` clamps), then `States.ArrayRange(first_chunk, end, step)` at
    `<result_path>.<list_key>` (`names[3]`, which goes on to `next_state`)."""
    end_name, choice_name, clamp_name, list_name = names
    return {
        end_name: pass_state(
            result_path=result_path,
            parameters={"last.$": f"States.MathAdd($.first_chunk, {span - 1})"},
            next_state=choice_name,
        ),
        choice_name: choice(
            [
                {
                    "Variable": f"{result_path}.last",
                    "NumericGreaterThanPath": "$.last_chunk",
                    "Next": clamp_name,
                }
            ],
            default=list_name,
        ),
        list_name: pass_state(
            comment=comment,
            result_path=result_path,
            parameters={f"{list_key}.$": f"States.ArrayRange($.first_chunk, {result_path}.last, {step})"},
            next_state=next_state,
        ),
        clamp_name: pass_state(
            result_path=result_path, parameters={"last.$": "$.last_chunk"}, next_state=list_name
        ),
    }


def _chunk_states(partition: str, register_function_arn: str, invocation_budget: int) -> dict[str, State]:
    """The states of one chunk, a Map item of a page (or of a parent that runs its file's one
    page itself): register invocations until the chunk is done, paused, over its invocation
    budget, or crashed; a wait while the core system is unavailable."""
    register = lambda_task(
        partition,
        register_function_arn,
        next_state="ChunkDone",
        retry=lambda_retry(),
        catch=[catch("ChunkCrashed", "$.crash", LAMBDA_CRASH_ERRORS)],
        comment="Send the chunk's records in order from the first unacknowledged one; returns before its deadline",
        result_path="$",
        result_selector=select(
            contract.ChunkProgress,
            {
                **{key: f"$.Payload.{key}" for key in contract.keys_of(contract.ChunkProgress)},
                # the workflow counts the chunk's invocations (the handler passes it back)
                "invocation": "States.MathAdd($.Payload.invocation, 1)",
            },
        ),
        payload={"Payload.$": "$"},
    )
    return {
        "RegisterChunk": register,
        "WaitForCoreSystem": {
            "Type": "Wait",
            "Comment": "The core system is unavailable: wait, then try the same record again",
            "SecondsPath": "$.retry_after_seconds",
            "Next": "RegisterChunk",
        },
        "ChunkDone": choice(
            [
                {"Variable": "$.paused", "BooleanEquals": True, "Next": "ChunkPaused"},
                {"Variable": "$.done", "BooleanEquals": True, "Next": "ChunkRegistered"},
                {
                    "Variable": "$.invocation",
                    "NumericGreaterThanEquals": invocation_budget,
                    "Next": "ChunkOverBudget",
                },
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
        "ChunkCrashed": crashed(
            "register", "in chunk {} of the file", ("$.chunk_index",), "$.crash", "$.crash", "RegisterCrashed"
        ),
        "RegisterCrashed": {"Type": "Fail", "ErrorPath": "$.crash.Error", "CausePath": "$.crash.Cause"},
    }


#: What a chunk's task carries of its file, from the page's input or the parent's state.
_FILE_KEYS = (
    "tenant",
    "bucket",
    "key",
    "version_id",
    "start_record",
    "chunk_prefix",
    "chunk_size",
    "chunk_count",
    "record_count",
)


def _chunk_task(file: Mapping[str, object]) -> dict[str, object]:
    """The ItemSelector of a chunk's task: `file` (`_FILE_KEYS` and `execution_name`), the Map
    item as the chunk's index, no fault yet, no invocation yet."""
    return select(
        contract.ChunkTask, {**file, "chunk_index": "$$.Map.Item.Value", "fault_since": None, "invocation": 0}
    )


def build_page_definition(
    *, partition: str, register_function_arn: str, chunks_per_page: int, invocation_budget: int
) -> State:
    """The page state machine: the chunks `first_chunk` .. `min(first_chunk + chunks_per_page
    - 1, last_chunk)` of a file, one at a time (input: `contract.PageTask`)."""
    if not 1 <= chunks_per_page <= budgets.MAX_ARRAY_RANGE_ITEMS:
        raise ValueError(
            f"chunks_per_page {chunks_per_page} must be from 1 to {budgets.MAX_ARRAY_RANGE_ITEMS}"
        )
    # The page's chunks: first_chunk .. min(first_chunk + chunks_per_page - 1, the file's last chunk).
    states = _clamped_range(
        names=("PageEnd", "LastPage", "ClampToFile", "PageChunks"),
        result_path="$.page",
        span=chunks_per_page,
        step=1,
        list_key="chunks",
        comment="This page's chunk indexes (at most chunks_per_page)",
        next_state="ChunksInOrder",
    )
    states["ChunksInOrder"] = _in_order(
        comment="One chunk at a time: a failing chunk stops every later chunk",
        items_path="$.page.chunks",
        item_selector=_chunk_task(
            {
                **{key: f"$.{key}" for key in _FILE_KEYS},
                # the parent's execution: the register function's fence checks it
                "execution_name": "$.execution_name",
            }
        ),
        start_at="RegisterChunk",
        states=_chunk_states(partition, register_function_arn, invocation_budget),
        next_state=None,
        catch=[catch("PagePaused", None, (contract.TENANT_PAUSED_ERROR,))],
    )
    states["PagePaused"] = PAUSED_END
    return {"StartAt": "PageEnd", "States": states}


#: The end of a page or section execution stopped for `ops pause`: it succeeds, its output
#: says so (`_run_child` reads it), so no execution fails and no alarm fires.
PAUSED_END: State = {
    "Type": "Pass",
    "Comment": "Stopped for ops pause: succeed, saying so",
    "Result": {"paused": True},
    "ResultPath": "$",
    "End": True,
}


def _paused_fail(comment: str) -> State:
    """The state that stops a Map's item for `ops pause` (its error is caught a level up)."""
    return {
        "Type": "Fail",
        "Comment": comment,
        "Error": contract.TENANT_PAUSED_ERROR,
        "Cause": "ops pause: the file stops at a chunk boundary; ops unpause runs it on at its first "
        "unacknowledged record",
    }


def _run_child(
    partition: str, version_arn: str, name_format: str, comment: str, task: str
) -> dict[str, State]:
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
            "Retry": [retry(PAGE_START_ERRORS, max_attempts=budgets.CHILD_TASK_RETRIES)],
            "Type": "Task",
            "Comment": comment,
            # The child's DescribeExecution, its output parsed (`.sync:2`); the Map's item ends here,
            # so it travels no further.
            "ResultPath": "$.child",
            "Resource": integration(partition, "states:startExecution.sync:2"),
            "Parameters": {
                "Input.$": "$",
                "StateMachineArn": version_arn,
                "Name.$": f"States.Format('{name_format}', $.execution_name, $.first_chunk)",
            },
        },
        # Step Functions writes the child's output as `Output`; moto as `output` (local_runtime/README.md).
        f"{task}Outcome": choice(
            [
                {
                    "Or": [
                        {"Variable": f"$.child.{output}.paused", "IsPresent": True}
                        for output in ("Output", "output")
                    ],
                    "Next": f"{task}Paused",
                }
            ],
            default=f"{task}Done",
        ),
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


_PAGES = _Children(
    "One page at a time: a failing page stops every later page",
    "RunPage",
    contract.PAGE_EXECUTION_NAME_FORMAT,
    "Register one page of chunks in a child execution and wait for it (its own bounded history)",
)
_SECTIONS = _Children(
    "One section at a time: a failing section stops every later section",
    "RunSection",
    contract.SECTION_EXECUTION_NAME_FORMAT,
    "Run one section of pages in a child execution and wait for it (its own bounded history)",
)


def _children_in_order(
    partition: str,
    children: _Children,
    version_arn: str,
    items_path: str,
    fields: dict[str, object],
    next_state: str | None,
    paused: str,
    catches: list[State] | None = None,
) -> State:
    """`PagesInOrder` or `SectionsInOrder`: one child execution (of the state machine version
    `version_arn`) at a time over the children's first chunks at `items_path`; each child's
    input is a `contract.PageTask` of `fields`. A child stopped for `ops pause` stops the Map,
    which goes on to `paused`."""
    return _in_order(
        comment=children.comment,
        items_path=items_path,
        item_selector=select(contract.PageTask, fields),
        start_at=children.task,
        states=_run_child(partition, version_arn, children.name_format, children.task_comment, children.task),
        next_state=next_state,
        catch=[catch(paused, None, (contract.TENANT_PAUSED_ERROR,)), *(catches or [])],
    )


def build_section_definition(
    *, partition: str, page_version_arn: str, chunks_per_page: int, pages_per_section: int
) -> State:
    """The section state machine: the pages of chunks `first_chunk` .. `min(first_chunk +
    chunks_per_page x pages_per_section - 1, last_chunk)` of a file, one page execution at a
    time (input: `contract.PageTask`; a section starts on a page boundary, so its pages never
    cross into the next section)."""
    if not 1 <= pages_per_section <= budgets.MAX_ARRAY_RANGE_ITEMS:
        raise ValueError(
            f"pages_per_section {pages_per_section} must be from 1 to {budgets.MAX_ARRAY_RANGE_ITEMS}"
        )
    states = _clamped_range(
        names=("SectionEnd", "LastSection", "ClampSection", "SectionPages"),
        result_path="$.section",
        span=chunks_per_page * pages_per_section,
        step=chunks_per_page,
        list_key="first_chunks",
        comment="The first chunk of each page of this section (at most pages_per_section)",
        next_state="PagesInOrder",
    )
    states["PagesInOrder"] = _children_in_order(
        partition,
        _PAGES,
        page_version_arn,
        "$.section.first_chunks",
        {
            **{key: f"$.{key}" for key in contract.keys_of(contract.PageTask)},
            "first_chunk": "$$.Map.Item.Value",
        },
        next_state=None,
        paused="SectionPaused",
    )
    states["SectionPaused"] = PAUSED_END
    return {"StartAt": "SectionEnd", "States": states}


def build_definition(
    *,
    partition: str,
    split_function_arn: str,
    page_version_arn: str,
    section_version_arn: str,
    closer_function_arn: str,
    register_function_arn: str,
    chunks_per_page: int,
    pages_per_section: int,
    invocation_budget: int,
    inline_chunks: int,
    completion: CompletionWait | None = None,
) -> State:
    """The parent state machine definition of one tenant (one execution per file attempt).
    A file of at most `inline_chunks` chunks (left to send) runs them in this execution, as a
    page would; a bigger one runs pages, or sections of pages, as child executions.
    With `completion`, a file whose chunks are all registered waits for the core system's
    confirmation before it is recorded as a success; without, the definition is unchanged."""
    split_result = contract.SPLIT_RESULT_PATH
    on_error = [catch("RecordFailure", contract.ERROR_RESULT_PATH)]
    # A file with nothing to send (a duplicate, no records) has nothing to confirm either.
    after_chunks = "RecordSuccess" if completion is None else "WaitForCompletion"
    page_fields = {
        **from_input("tenant", "bucket", "key", "version_id", "start_record"),
        "execution_name": "$$.Execution.Name",
        "chunk_prefix": f"{split_result}.chunk_prefix",
        "chunk_size": f"{split_result}.chunk_size",
        "chunk_count": f"{split_result}.chunk_count",
        "record_count": f"{split_result}.record_count",
        "first_chunk": "$$.Map.Item.Value",
        "last_chunk": f"{split_result}.last_chunk",
    }

    def record_close(status: str, error_paths: bool, next_state: str) -> State:
        close = {
            "execution_name": "$$.Execution.Name",
            "status": status,
            "error": None,
            "cause": None,
            "content_sha256": None,
            "duplicate_of": None,
        }
        if error_paths:
            close.update(
                error=f"{contract.ERROR_RESULT_PATH}.Error", cause=f"{contract.ERROR_RESULT_PATH}.Cause"
            )
        else:  # a success: the ledger remembers the file's content, or records it as a duplicate
            close.update(
                content_sha256=f"{split_result}.content_sha256", duplicate_of=f"{split_result}.duplicate_of"
            )
        # If recording fails, the status-change rule records the close (backstop): the file's
        # outcome does not depend on it.
        return lambda_task(
            partition,
            closer_function_arn,
            next_state=next_state,
            retry=lambda_retry("States.TaskFailed"),
            catch=[catch(next_state, None)],
            comment="Record the close in the ledger, notify on failure, hand off to the next file",
            result_path=None,
            payload={"Payload": select(contract.CloseEvent, close)},
        )

    def first_chunks(comment: str, result_path: str, step: int, next_state: str) -> State:
        """The first chunk of every `step` chunks of the file at `<result_path>.first_chunks`."""
        return pass_state(
            comment=comment,
            result_path=result_path,
            parameters={
                "first_chunks.$": f"States.ArrayRange({split_result}.first_chunk, {split_result}.last_chunk, "
                f"{step})"
            },
            next_state=next_state,
        )

    # With `completion`, a file whose chunks are all registered waits for the confirmation; so
    # does a resumed file whose every record was already acknowledged (its completion timed out
    # or was rejected); a duplicate or empty file does not.
    completion_wait: dict[str, State] = (
        {}
        if completion is None
        else {
            **completion_states(
                partition, completion, next_state="RecordSuccess", record_failure="RecordFailure"
            ),
            "ResumedAfterLastRecord": choice(
                [
                    {
                        "And": [
                            {"Variable": "$.start_record", "IsPresent": True},
                            {"Variable": "$.start_record", "NumericGreaterThan": 0},
                        ],
                        "Next": "WaitForCompletion",
                    }
                ],
                default="RecordSuccess",
            ),
        }
    )
    states: dict[str, State] = {
        "Split": lambda_task(
            partition,
            split_function_arn,
            next_state="AnyChunks",
            retry=lambda_retry(),
            catch=[catch("SplitCrashed", contract.ERROR_RESULT_PATH, LAMBDA_CRASH_ERRORS), *on_error],
            comment="Stream the pinned object version, validate it, write chunks and a manifest to S3 (or reuse them)",
            result_path=split_result,
            result_selector=select(
                contract.SplitResult,
                {key: f"$.Payload.{key}" for key in contract.keys_of(contract.SplitResult)},
            ),
            payload={
                "Payload": select(
                    contract.SplitRequest,
                    from_input("tenant", "bucket", "key", "version_id", "event_id", "start_record"),
                )
            },
        ),
        "AnyChunks": choice(
            [
                {
                    "Variable": f"{split_result}.first_chunk",
                    "NumericGreaterThanPath": f"{split_result}.last_chunk",
                    "Next": "RecordSuccess" if completion is None else "ResumedAfterLastRecord",
                }
            ],
            default="Sections",
        ),
        "Sections": first_chunks(
            "The first chunk of each section (at most budgets.max_sections(): Split refuses a bigger file)",
            "$.sections",
            chunks_per_page * pages_per_section,
            "OneSection",
        ),
        "OneSection": choice(
            [{"Variable": "$.sections.first_chunks[1]", "IsPresent": True, "Next": "SectionsInOrder"}],
            default="InlineEnd" if inline_chunks >= 1 else "Pages",
        ),
        **(
            {}
            if inline_chunks < 1
            else {
                "InlineEnd": pass_state(
                    result_path="$.inline",
                    parameters={"last.$": f"States.MathAdd({split_result}.first_chunk, {inline_chunks - 1})"},
                    next_state="FitsInline",
                ),
                "FitsInline": choice(
                    [
                        {
                            "Variable": "$.inline.last",
                            "NumericGreaterThanEqualsPath": f"{split_result}.last_chunk",
                            "Next": "FileChunks",
                        }
                    ],
                    default="Pages",
                ),
                "FileChunks": pass_state(
                    comment="The file fits one page: its chunk indexes, run in this execution (no page execution)",
                    result_path="$.inline",
                    parameters={
                        "chunks.$": f"States.ArrayRange({split_result}.first_chunk, {split_result}.last_chunk, 1)"
                    },
                    next_state="ChunksInOrder",
                ),
                "ChunksInOrder": _in_order(
                    comment="One chunk at a time: a failing chunk stops every later chunk",
                    items_path="$.inline.chunks",
                    item_selector=_chunk_task(
                        {
                            key: value
                            for key, value in page_fields.items()
                            if key in (*_FILE_KEYS, "execution_name")
                        }
                    ),
                    start_at="RegisterChunk",
                    states=_chunk_states(partition, register_function_arn, invocation_budget),
                    next_state=after_chunks,
                    catch=[catch("FilePaused", None, (contract.TENANT_PAUSED_ERROR,)), *on_error],
                ),
            }
        ),
        "Pages": first_chunks(
            "The first chunk of each page (the file fits one section: at most pages_per_section)",
            "$.pages",
            chunks_per_page,
            "PagesInOrder",
        ),
        "PagesInOrder": _children_in_order(
            partition,
            _PAGES,
            page_version_arn,
            "$.pages.first_chunks",
            page_fields,
            next_state=after_chunks,
            paused="FilePaused",
            catches=on_error,
        ),
        "SectionsInOrder": _children_in_order(
            partition,
            _SECTIONS,
            section_version_arn,
            "$.sections.first_chunks",
            page_fields,
            next_state=after_chunks,
            paused="FilePaused",
            catches=on_error,
        ),
        **completion_wait,
        "RecordSuccess": record_close("SUCCEEDED", error_paths=False, next_state="FileIngested"),
        "FileIngested": {"Type": "Succeed"},
        # Not a close: the ledger says PAUSED (register wrote it); ops unpause runs the file on.
        "FilePaused": {
            "Type": "Succeed",
            "Comment": "Stopped for ops pause at a chunk boundary; ops unpause runs "
            "the file on at its first unacknowledged record",
        },
        "SplitCrashed": crashed(
            "split",
            "on this file, before this attempt sent any record",
            (),
            contract.ERROR_RESULT_PATH,
            contract.ERROR_RESULT_PATH,
            "RecordFailure",
        ),
        "RecordFailure": record_close("FAILED", error_paths=True, next_state="IngestFailed"),
        "IngestFailed": {
            "Type": "Fail",
            "ErrorPath": f"{contract.ERROR_RESULT_PATH}.Error",
            "CausePath": f"{contract.ERROR_RESULT_PATH}.Cause",
        },
    }
    return {"StartAt": "Split", "States": states}


def render(definition: State, timeout_seconds: int) -> str:
    """The `DefinitionString` of `definition`, with the execution time limit `timeout_seconds`:
    compact JSON, as CDK writes it (tokens in it become the template's `Fn::Join`)."""
    return json.dumps(
        {**definition, "TimeoutSeconds": timeout_seconds}, separators=(",", ":"), ensure_ascii=False
    )
