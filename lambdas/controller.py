"""Controller: per-tenant gate in front of the file-ingest workflow (docs/design.md §4.1).

One SQS FIFO message (an S3 "Object Created" EventBridge event) per invocation. The gate
item in DynamoDB names the last started execution; a new one starts only when that one is
closed or is this message's own. A busy gate raises `GateBusyError`: the invocation fails
on purpose, the message stays at the head of the FIFO group and is redelivered later.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

from botocore.exceptions import ClientError

from contract import (
    CLOSED_STATUSES,
    HEAD_WAIT_METRIC,
    TENANT_DIMENSION,
    ControllerEnv,
    ControllerResult,
    FileRef,
    GateBusyError,
    execution_arn,
)
from runtime import BoundLogger, aws_client, lambda_handler

# Right after StartExecution, DescribeExecution may not see the execution yet; past this
# age a missing execution means something else is wrong (its message was deleted?).
GATE_GRACE_SECONDS = 300


def file_ref_from_sqs_body(body: str | None, tenant_id: str) -> FileRef:
    """The execution input announced by an SQS body holding an S3 "Object Created" event.

    Deterministic, so a restart with it is idempotent. `ValueError` (never quoting the body)
    if the body is not such an event.
    """
    try:
        event = json.loads(body or "")
    except (TypeError, ValueError):
        raise ValueError("SQS message body is not JSON; expected an S3 'Object Created' EventBridge event") from None

    def fail(what: str) -> ValueError:
        return ValueError(f"SQS message body is not an S3 'Object Created' EventBridge event: {what}")

    if not isinstance(event, dict):
        raise fail("not a JSON object")
    if event.get("source") != "aws.s3" or event.get("detail-type") != "Object Created":
        raise fail("source must be 'aws.s3' and detail-type 'Object Created'")
    detail = event.get("detail")
    obj = detail.get("object") if isinstance(detail, dict) else None
    bucket = detail.get("bucket") if isinstance(detail, dict) else None
    if not isinstance(obj, dict) or not isinstance(bucket, dict):
        raise fail("missing detail.bucket or detail.object")
    fields = {
        "id": event.get("id"),
        "detail.bucket.name": bucket.get("name"),
        "detail.object.key": obj.get("key"),
        # Required: each event processes exactly the version it announced (docs/design.md §4.5).
        "detail.object.version-id": obj.get("version-id"),
    }
    missing = [name for name, value in fields.items() if not isinstance(value, str) or not value]
    if missing:
        raise fail(f"missing or empty {', '.join(missing)}")
    size = obj.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise fail("detail.object.size is not a non-negative integer")
    return FileRef(
        tenant=tenant_id,
        event_id=fields["id"],
        bucket=fields["detail.bucket.name"],
        key=fields["detail.object.key"],
        version_id=fields["detail.object.version-id"],
        size=size,
        # S3 writes "etag"; moto writes "eTag".
        etag=obj.get("etag", obj.get("eTag")),
        event_time=_event_time(event.get("time")),
    )


def _event_time(value: Any) -> str:
    # EventBridge writes an ISO 8601 string; moto writes epoch seconds.
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return dt.datetime.fromtimestamp(value, dt.timezone.utc).isoformat().replace("+00:00", "Z")
    return value if isinstance(value, str) else ""


def emf_line(*, namespace: str, tenant_id: str, now: float, sent_timestamp_ms: int) -> str:
    """CloudWatch EMF record of the head-wait metric (how long the head message waited)."""
    return json.dumps(
        {
            "_aws": {
                "Timestamp": int(now * 1000),
                "CloudWatchMetrics": [
                    {
                        "Namespace": namespace,
                        "Dimensions": [[TENANT_DIMENSION]],
                        "Metrics": [{"Name": HEAD_WAIT_METRIC, "Unit": "Seconds"}],
                    }
                ],
            },
            TENANT_DIMENSION: tenant_id,
            HEAD_WAIT_METRIC: round(max(0.0, now - sent_timestamp_ms / 1000), 3),
        }
    )


def _error_code(error: ClientError) -> str:
    return error.response.get("Error", {}).get("Code", "")


def _check_gate(
    item: dict[str, Any] | None,
    event: FileRef,
    *,
    config: ControllerEnv,
    sfn: Any,
    now: float,
    log: BoundLogger,
) -> str | None:
    """Return the execution name the gate holds if it may be replaced; raise `GateBusyError` if not."""
    observed = item.get("execution_name", {}).get("S") if item else None
    if observed is None:
        return None
    if observed == event["event_id"]:
        log.info("gate already holds this event's execution (redelivery); start is idempotent")
        return observed
    arn = item.get("execution_arn", {}).get("S") or execution_arn(config.state_machine_arn, observed)
    try:
        status = sfn.describe_execution(executionArn=arn)["status"]
    except ClientError as error:
        if _error_code(error) != "ExecutionDoesNotExist":
            raise
        age = now - float(item.get("updated_at", {}).get("N", "0"))
        fields = {"gate_execution": observed, "gate_age_seconds": round(age, 3)}
        if age < GATE_GRACE_SECONDS:
            log.info("gate execution not visible yet (just started); treating gate as busy", extra=fields)
        else:
            log.error(
                "gate execution does not exist and the gate entry is old; gate stays closed, "
                "check whether its queue message was deleted",
                extra=fields,
            )
        raise GateBusyError(f"tenant {config.tenant_id}: execution {observed} is not visible") from None
    if status not in CLOSED_STATUSES:
        raise GateBusyError(f"tenant {config.tenant_id}: execution {observed} is {status}")
    return observed


def _claim_gate(
    observed: str | None, event: FileRef, arn: str, *, config: ControllerEnv, ddb: Any, now: float
) -> None:
    """Write this event's execution into the gate, only if it still holds what was observed."""
    values: dict[str, Any] = {
        ":mine": {"S": event["event_id"]},
        ":arn": {"S": arn},
        ":now": {"N": str(int(now))},
    }
    if observed is None:
        # Absent item, or an item without an execution (its attributes do not exist either).
        condition = "attribute_not_exists(execution_name)"
    else:
        condition = "attribute_not_exists(tenant) OR execution_name = :observed"
        values[":observed"] = {"S": observed}
    try:
        ddb.update_item(
            TableName=config.gate_table_name,
            Key={"tenant": {"S": config.tenant_id}},
            UpdateExpression="SET execution_name = :mine, execution_arn = :arn, updated_at = :now",
            ConditionExpression=condition,
            ExpressionAttributeValues=values,
        )
    except ClientError as error:
        if _error_code(error) == "ConditionalCheckFailedException":
            raise GateBusyError(f"tenant {config.tenant_id}: gate changed since it was read") from None
        raise


def process_message(
    record: dict[str, Any], *, config: ControllerEnv, sfn: Any, ddb: Any, now: float, log: BoundLogger
) -> ControllerResult:
    """Run the gate for one SQS record; return what happened, raise `GateBusyError` to wait.

    `sfn` and `ddb` are boto3 Step Functions and DynamoDB clients; `now` is epoch seconds;
    `log` gets the event's fields bound once they are known.
    """
    print(
        emf_line(
            namespace=config.metric_namespace,
            tenant_id=config.tenant_id,
            now=now,
            sent_timestamp_ms=int(record["attributes"]["SentTimestamp"]),
        ),
        flush=True,
    )
    event = file_ref_from_sqs_body(record.get("body"), config.tenant_id)
    log.bind(event_id=event["event_id"], key=event["key"], version_id=event["version_id"])

    gate = ddb.get_item(
        TableName=config.gate_table_name, Key={"tenant": {"S": config.tenant_id}}, ConsistentRead=True
    ).get("Item")
    observed = _check_gate(gate, event, config=config, sfn=sfn, now=now, log=log)
    arn = execution_arn(config.state_machine_arn, event["event_id"])
    _claim_gate(observed, event, arn, config=config, ddb=ddb, now=now)

    try:
        sfn.start_execution(
            stateMachineArn=config.state_machine_arn,
            name=event["event_id"],
            input=json.dumps(event, sort_keys=True),
        )
        started = True
        log.info("execution started", extra={"execution_arn": arn})
    except ClientError as error:
        if _error_code(error) != "ExecutionAlreadyExists":
            raise
        started = False
        log.info("execution already exists (redelivered message); nothing to start")
    return ControllerResult(execution_name=event["event_id"], execution_arn=arn, started=started)


@lambda_handler("controller", ControllerEnv, log_fields=lambda event: {"records": len(event.get("Records") or [])})
def handler(event: dict[str, Any], config: ControllerEnv, log: BoundLogger) -> ControllerResult:
    """SQS event source entry point (batch size 1)."""
    records = event.get("Records") or []
    if len(records) != 1:
        raise ValueError(f"expected exactly one SQS record (batch size 1), got {len(records)}")
    log.bind(message_id=records[0].get("messageId"))
    return process_message(
        records[0], config=config, sfn=aws_client("stepfunctions"), ddb=aws_client("dynamodb"), now=time.time(), log=log
    )
