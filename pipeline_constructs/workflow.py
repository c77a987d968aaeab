"""The file-ingest workflow of one tenant.

    Split -> ChunksInOrder (Map, MaxConcurrency 1; no chunks for a duplicate file)
               RegisterChunk -> ChunkDone? -- done ---------------> ChunkRegistered
                                           -- core system down --> WaitForCoreSystem -> RegisterChunk
                                           -- deadline ----------------------------> RegisterChunk
          -> RecordSuccess (closer) -> FileIngested
    Catch (Split, ChunksInOrder) -> RecordFailure (closer: ledger, notification, halt) -> IngestFailed

Only S3 references and counts travel between states: the execution history never holds a
record (docs/design.md §4.4). Each payload's keys come from its `TypedDict` in
`lambdas/contract.py`; `_select` refuses a selector that does not cover exactly those keys.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from lambdas import contract

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
        (f"{key}.$" if isinstance(values[key], str) and str(values[key]).startswith("$") else key): values[key]
        for key in keys
        if key not in absent
    }


def _from_input(*keys: str) -> dict[str, object]:
    """`{"key": "$.key"}` for keys copied unchanged from the execution input."""
    unknown = set(keys) - set(contract.keys_of(contract.ExecutionInput))
    if unknown:
        raise ValueError(f"the execution input has no {sorted(unknown)}")
    return {key: f"$.{key}" for key in keys}


def _retry(task: tasks.LambdaInvoke, errors: tuple[str, ...]) -> None:
    task.add_retry(
        errors=list(errors),
        interval=Duration.seconds(1),
        max_attempts=3,
        backoff_rate=2,
        jitter_strategy=sfn.JitterType.FULL,
    )


def build_definition(
    scope: Construct,
    *,
    split_function: lambda_.IFunction,
    register_function: lambda_.IFunction,
    closer_function: lambda_.IFunction,
) -> sfn.IChainable:
    """The state machine definition of one tenant."""
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

    register = tasks.LambdaInvoke(
        scope,
        "RegisterChunk",
        comment="Send the chunk's records in order from the first unacknowledged one; returns before its deadline",
        lambda_function=register_function,
        payload=sfn.TaskInput.from_json_path_at("$"),
        result_selector=_select(
            contract.ChunkProgress, {key: f"$.Payload.{key}" for key in contract.keys_of(contract.ChunkProgress)}
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
    chunk_done = (
        sfn.Choice(scope, "ChunkDone")
        .when(sfn.Condition.boolean_equals("$.done", True), sfn.Succeed(scope, "ChunkRegistered"))
        .when(sfn.Condition.number_greater_than("$.retry_after_seconds", 0), wait.next(register))
        .otherwise(register)
    )

    chunks = sfn.Map(
        scope,
        "ChunksInOrder",
        comment="One chunk at a time: a failing chunk stops every later chunk",
        items_path=f"{split_result}.chunks",
        max_concurrency=1,
        item_selector=_select(
            contract.ChunkTask,
            {
                **_from_input("tenant", "bucket", "key", "version_id", "start_record"),
                "execution_name": "$$.Execution.Name",
                "chunk_prefix": f"{split_result}.chunk_prefix",
                "chunk_size": f"{split_result}.chunk_size",
                "chunk_count": f"{split_result}.chunk_count",
                "record_count": f"{split_result}.record_count",
                "chunk_index": "$$.Map.Item.Value",
                "fault_since": None,
            },
        ),
        result_path=sfn.JsonPath.DISCARD,
    )
    chunks.item_processor(register.next(chunk_done))

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

    split.add_catch(on_error, errors=["States.ALL"], result_path=contract.ERROR_RESULT_PATH)
    chunks.add_catch(on_error, errors=["States.ALL"], result_path=contract.ERROR_RESULT_PATH)
    return split.next(chunks).next(record_success).next(done)
