"""The file-ingest workflow: Split -> chunks in order -> Register chunk; Catch -> notify -> Fail.

Only S3 references and counts travel between states: the execution history never holds a
record (docs/design.md §4.4). Each payload's keys come from its `TypedDict` in
`lambdas/contract.py`; `_select` refuses a selector that does not cover exactly those keys.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
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
#: Raised by Register chunk on 429, 5xx, timeouts and connection errors of the core system.
SINK_RETRYABLE_ERROR = contract.SinkRetryableError.__name__


def _select(payload_type: type, paths: dict[str, str]) -> dict[str, str]:
    """A Parameters/ItemSelector block building `payload_type`: every key gets a JSONPath."""
    keys = contract.keys_of(payload_type)
    if set(paths) != set(keys):
        raise ValueError(
            f"selector for {payload_type.__name__} has keys {sorted(paths)}, the contract has {sorted(keys)}"
        )
    return {f"{key}.$": paths[key] for key in keys}


def _from_input(*keys: str) -> dict[str, str]:
    """`{"key": "$.key"}` for keys copied unchanged from the execution input (`FileRef`)."""
    unknown = set(keys) - set(contract.keys_of(contract.FileRef))
    if unknown:
        raise ValueError(f"the execution input (FileRef) has no {sorted(unknown)}")
    return {key: f"$.{key}" for key in keys}


def _retry_lambda_transients(task: tasks.LambdaInvoke) -> None:
    task.add_retry(
        errors=list(LAMBDA_TRANSIENT_ERRORS),
        interval=Duration.seconds(1),
        max_attempts=3,
        backoff_rate=2,
        jitter_strategy=sfn.JitterType.FULL,
    )


def build_definition(
    scope: Construct,
    *,
    tenant_id: str,
    split_function: lambda_.IFunction,
    register_function: lambda_.IFunction,
    alarm_topic: sns.ITopic,
) -> sfn.IChainable:
    """The state machine definition of one tenant."""
    split = tasks.LambdaInvoke(
        scope,
        "Split",
        comment="Stream the pinned object version, validate it, write chunks and a manifest to S3",
        lambda_function=split_function,
        payload=sfn.TaskInput.from_object(
            _select(
                contract.SplitRequest,
                {**_from_input("tenant", "bucket", "key", "version_id"), "execution_name": "$$.Execution.Name"},
            )
        ),
        result_selector=_select(
            contract.SplitResult, {key: f"$.Payload.{key}" for key in contract.keys_of(contract.SplitResult)}
        ),
        result_path=contract.SPLIT_RESULT_PATH,
        retry_on_service_exceptions=False,
    )
    _retry_lambda_transients(split)

    register = tasks.LambdaInvoke(
        scope,
        "RegisterChunk",
        comment="Send the chunk's records one by one, in order, with idempotency keys",
        lambda_function=register_function,
        payload=sfn.TaskInput.from_json_path_at("$"),
        result_path=sfn.JsonPath.DISCARD,
        retry_on_service_exceptions=False,
    )
    _retry_lambda_transients(register)
    register.add_retry(
        errors=[SINK_RETRYABLE_ERROR],
        interval=Duration.seconds(2),
        max_attempts=6,
        backoff_rate=2,
        max_delay=Duration.seconds(60),
        jitter_strategy=sfn.JitterType.FULL,
    )

    chunks = sfn.Map(
        scope,
        "ChunksInOrder",
        comment="One chunk at a time: a failing chunk stops every later chunk",
        items_path=f"{contract.SPLIT_RESULT_PATH}.chunks",
        max_concurrency=1,
        item_selector=_select(
            contract.ChunkTask,
            {
                **_from_input("tenant", "bucket", "key", "version_id"),
                "chunk_prefix": f"{contract.SPLIT_RESULT_PATH}.chunk_prefix",
                "chunk_size": f"{contract.SPLIT_RESULT_PATH}.chunk_size",
                "chunk_index": "$$.Map.Item.Value",
            },
        ),
        result_path=sfn.JsonPath.DISCARD,
    )
    chunks.item_processor(register)

    notify = tasks.SnsPublish(
        scope,
        "NotifyFailure",
        comment="Tell the on-call person which file failed and why (no record content)",
        topic=alarm_topic,
        subject=f"[ordered-ingest] {tenant_id}: file ingest failed",
        message=sfn.TaskInput.from_object(
            {
                "tenant": tenant_id,
                "execution.$": "$$.Execution.Id",
                "bucket.$": "$.bucket",
                "key.$": "$.key",
                "version_id.$": "$.version_id",
                "error.$": f"{contract.ERROR_RESULT_PATH}.Error",
                "cause.$": f"{contract.ERROR_RESULT_PATH}.Cause",
            }
        ),
        result_path=sfn.JsonPath.DISCARD,
    )
    notify.add_retry(
        errors=["States.TaskFailed"],
        interval=Duration.seconds(1),
        max_attempts=3,
        backoff_rate=2,
        jitter_strategy=sfn.JitterType.FULL,
    )
    failed = sfn.Fail(
        scope,
        "IngestFailed",
        error_path=f"{contract.ERROR_RESULT_PATH}.Error",
        cause_path=f"{contract.ERROR_RESULT_PATH}.Cause",
    )
    on_error = notify.next(failed)

    split.add_catch(on_error, errors=["States.ALL"], result_path=contract.ERROR_RESULT_PATH)
    chunks.add_catch(on_error, errors=["States.ALL"], result_path=contract.ERROR_RESULT_PATH)

    done = sfn.Succeed(scope, "FileIngested")
    return split.next(chunks).next(done)
