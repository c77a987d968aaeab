"""Controller gate (docs/design.md §4.1) on moto: one execution per tenant at a time, idempotent start."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from moto.stepfunctions.models import StepFunctionBackend

import controller
from contract import ControllerEnv, GateBusyError, environment, execution_arn
from controller import process_message
from runtime import BoundLogger, get_logger

TENANT = "acme"
TABLE = "gate"
NOW = 1_700_000_100.5
DEFINITION = json.dumps({"StartAt": "Hold", "States": {"Hold": {"Type": "Wait", "Seconds": 60, "End": True}}})


def s3_event(event_id: str, *, key: str = "acme/f.csv", version_id: str = "v1") -> dict[str, Any]:
    return {
        "version": "0",
        "id": event_id,
        "detail-type": "Object Created",
        "source": "aws.s3",
        "time": "2024-01-01T00:00:00Z",
        "detail": {
            "bucket": {"name": "landing"},
            "object": {"key": key, "size": 12, "etag": "abc", "version-id": version_id},
        },
    }


def sqs_record(
    event_id: str, *, sent_ms: int = 1_700_000_000_000, body: str | None = None, **kw: Any
) -> dict[str, Any]:
    return {
        "messageId": f"msg-{event_id}",
        "body": body if body is not None else json.dumps(s3_event(event_id, **kw)),
        "attributes": {"SentTimestamp": str(sent_ms), "MessageGroupId": TENANT},
    }


@pytest.fixture
def config(sfn: Any, ddb: Any) -> ControllerEnv:
    ddb.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "tenant", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "tenant", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    arn = sfn.create_state_machine(
        name=f"{TENANT}-file-ingest-workflow",
        definition=DEFINITION,
        roleArn="arn:aws:iam::123456789012:role/workflow",
    )["stateMachineArn"]
    return ControllerEnv(
        tenant_id=TENANT, state_machine_arn=arn, gate_table_name=TABLE, metric_namespace="FileIngest"
    )


def run(
    record: dict[str, Any], config: ControllerEnv, sfn: Any, ddb: Any, now: float = NOW
) -> dict[str, Any]:
    log = BoundLogger(get_logger("controller"), {"tenant": config.tenant_id})
    return process_message(record, config=config, sfn=sfn, ddb=ddb, now=now, log=log)


def executions(sfn: Any, config: ControllerEnv) -> dict[str, str]:
    """Execution name -> status."""
    found = sfn.list_executions(stateMachineArn=config.state_machine_arn)["executions"]
    return {e["name"]: e["status"] for e in found}


def gate(ddb: Any) -> dict[str, Any] | None:
    return ddb.get_item(TableName=TABLE, Key={"tenant": {"S": TENANT}}, ConsistentRead=True).get("Item")


def put_gate(ddb: Any, config: ControllerEnv, name: str, updated_at: float) -> None:
    ddb.put_item(
        TableName=TABLE,
        Item={
            "tenant": {"S": TENANT},
            "execution_name": {"S": name},
            "execution_arn": {"S": execution_arn(config.state_machine_arn, name)},
            "updated_at": {"N": str(int(updated_at))},
        },
    )


def test_free_gate_starts_execution_named_by_event_id_with_file_ref(config, sfn, ddb):
    """GIVEN an empty gate WHEN a message arrives
    THEN the gate names its execution and it runs with FileRef."""
    result = run(sqs_record("evt-a", version_id="ver-1"), config, sfn, ddb)

    arn = execution_arn(config.state_machine_arn, "evt-a")
    assert result == {"execution_name": "evt-a", "execution_arn": arn, "started": True}
    described = sfn.describe_execution(executionArn=arn)
    assert described["status"] == "RUNNING"
    assert json.loads(described["input"]) == {
        "tenant": TENANT,
        "event_id": "evt-a",
        "bucket": "landing",
        "key": "acme/f.csv",
        "version_id": "ver-1",
        "size": 12,
        "etag": "abc",
        "event_time": "2024-01-01T00:00:00Z",
    }
    assert gate(ddb) == {
        "tenant": {"S": TENANT},
        "execution_name": {"S": "evt-a"},
        "execution_arn": {"S": arn},
        "updated_at": {"N": str(int(NOW))},
    }


def test_gate_race_second_message_waits_while_first_runs_even_when_list_executions_sees_nothing(
    config, sfn, ddb, monkeypatch
):
    """GIVEN message A's execution RUNNING and ListExecutions (eventually consistent) returning nothing
    WHEN message B arrives THEN B raises GateBusyError and starts nothing;
    WHEN A is then stopped THEN B starts."""
    run(sqs_record("evt-a"), config, sfn, ddb)

    with monkeypatch.context() as patch:
        patch.setattr(StepFunctionBackend, "list_executions", lambda self, *a, **k: ([], None))
        assert sfn.list_executions(stateMachineArn=config.state_machine_arn)["executions"] == []
        with pytest.raises(GateBusyError, match="execution evt-a is RUNNING"):
            run(sqs_record("evt-b", key="acme/g.csv"), config, sfn, ddb)

    assert executions(sfn, config) == {"evt-a": "RUNNING"}
    assert gate(ddb)["execution_name"] == {"S": "evt-a"}

    sfn.stop_execution(executionArn=execution_arn(config.state_machine_arn, "evt-a"))
    result = run(sqs_record("evt-b", key="acme/g.csv"), config, sfn, ddb, now=NOW + 5)

    assert result["started"] is True
    assert executions(sfn, config) == {"evt-a": "ABORTED", "evt-b": "RUNNING"}
    assert gate(ddb)["execution_name"] == {"S": "evt-b"}


@pytest.mark.parametrize("status", ["PENDING_REDRIVE", "RUNNING"])
def test_open_statuses_keep_the_gate_closed(config, sfn, ddb, status):
    """GIVEN the gate's execution reported as RUNNING or PENDING_REDRIVE WHEN another message arrives
    THEN it is busy and the gate is unchanged."""
    put_gate(ddb, config, "evt-old", NOW - 10)

    class Described:
        def __getattr__(self, name: str) -> Any:
            return getattr(sfn, name)

        def describe_execution(self, executionArn: str) -> dict[str, Any]:
            return {"executionArn": executionArn, "status": status}

    with pytest.raises(GateBusyError, match=f"is {status}"):
        run(sqs_record("evt-new"), config, Described(), ddb)
    assert gate(ddb)["execution_name"] == {"S": "evt-old"}
    assert executions(sfn, config) == {}


def test_redelivery_after_crash_after_start_starts_nothing_new_and_succeeds(config, sfn, ddb):
    """GIVEN message A wrote the gate and started its execution, then the controller crashed before the
    message was deleted WHEN A is redelivered THEN the handler succeeds and there is still one execution."""
    run(sqs_record("evt-a"), config, sfn, ddb)

    run(sqs_record("evt-a"), config, sfn, ddb, now=NOW + 30)

    assert executions(sfn, config) == {"evt-a": "RUNNING"}
    assert gate(ddb)["execution_name"] == {"S": "evt-a"}


def test_redelivery_after_crash_between_gate_write_and_start_starts_once(config, sfn, ddb):
    """GIVEN message A wrote the gate but StartExecution failed WHEN A is redelivered
    THEN its own gate entry lets it through and exactly one execution runs."""

    class FailingStart:
        def __getattr__(self, name: str) -> Any:
            return getattr(sfn, name)

        def start_execution(self, **kwargs: Any) -> None:
            raise RuntimeError("crash before StartExecution")

    with pytest.raises(RuntimeError):
        run(sqs_record("evt-a"), config, FailingStart(), ddb)
    assert gate(ddb)["execution_name"] == {"S": "evt-a"}
    assert executions(sfn, config) == {}

    assert run(sqs_record("evt-a"), config, sfn, ddb, now=NOW + 30)["started"] is True
    assert executions(sfn, config) == {"evt-a": "RUNNING"}


def test_execution_already_exists_counts_as_success(config, sfn, ddb, logs):
    """GIVEN A's execution already ran and closed (StartExecution now answers ExecutionAlreadyExists)
    WHEN A is redelivered THEN the handler succeeds at INFO and starts nothing."""
    run(sqs_record("evt-a"), config, sfn, ddb)
    sfn.stop_execution(executionArn=execution_arn(config.state_machine_arn, "evt-a"))

    result = run(sqs_record("evt-a"), config, sfn, ddb, now=NOW + 30)

    assert result["started"] is False
    assert executions(sfn, config) == {"evt-a": "ABORTED"}
    assert any("already exists" in m for m in logs.at(logging.INFO))
    assert logs.errors() == []


class RacingGate:
    """DynamoDB client whose gate changes right after the controller has read it."""

    def __init__(self, ddb: Any, config: ControllerEnv) -> None:
        self._ddb, self._config = ddb, config

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ddb, name)

    def get_item(self, **kwargs: Any) -> dict[str, Any]:
        observed = self._ddb.get_item(**kwargs)
        put_gate(self._ddb, self._config, "evt-sneaky", NOW)
        return observed


@pytest.mark.parametrize("gate_before", [None, "evt-done"], ids=["empty-gate", "closed-execution"])
def test_gate_changed_between_read_and_write_is_busy(config, sfn, ddb, gate_before):
    """GIVEN the gate read as free (empty, or holding a closed execution) WHEN another writer claims it
    before the conditional update THEN GateBusyError, nothing started, the other writer's entry stays."""
    if gate_before:
        put_gate(ddb, config, gate_before, NOW - 100)
        sfn.start_execution(stateMachineArn=config.state_machine_arn, name=gate_before, input="{}")
        sfn.stop_execution(executionArn=execution_arn(config.state_machine_arn, gate_before))

    with pytest.raises(GateBusyError, match="gate changed"):
        run(sqs_record("evt-b"), config, sfn, RacingGate(ddb, config))

    assert "evt-b" not in executions(sfn, config)
    assert gate(ddb)["execution_name"] == {"S": "evt-sneaky"}


@pytest.mark.parametrize(
    ("age_seconds", "level"),
    [(10, logging.INFO), (3600, logging.ERROR)],
    ids=["fresh-gate-entry", "old-gate-entry"],
)
def test_gate_execution_that_does_not_exist_is_busy(config, sfn, ddb, logs, age_seconds, level):
    """GIVEN the gate names an execution DescribeExecution cannot find WHEN a message arrives
    THEN it is busy either way; logged INFO within the grace period, ERROR after it."""
    put_gate(ddb, config, "evt-ghost", NOW - age_seconds)

    with pytest.raises(GateBusyError):
        run(sqs_record("evt-b"), config, sfn, ddb)

    assert executions(sfn, config) == {}
    assert gate(ddb)["execution_name"] == {"S": "evt-ghost"}
    ghost_logs = [r for r in logs.records() if getattr(r, "gate_execution", None) == "evt-ghost"]
    assert [r.levelno for r in ghost_logs] == [level]
    assert len(logs.errors()) == (1 if level == logging.ERROR else 0)


def test_emits_head_message_wait_metric_as_emf(config, sfn, ddb, capsys):
    """GIVEN a message sent 100.25 s before now WHEN processed
    THEN one EMF line reports 100.25 s for the tenant."""
    run(sqs_record("evt-a", sent_ms=1_700_000_000_250), config, sfn, ddb, now=NOW)

    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines == [
        {
            "_aws": {
                "Timestamp": 1_700_000_100_500,
                "CloudWatchMetrics": [
                    {
                        "Namespace": "FileIngest",
                        "Dimensions": [["Tenant"]],
                        "Metrics": [{"Name": "HeadMessageWaitSeconds", "Unit": "Seconds"}],
                    }
                ],
            },
            "Tenant": TENANT,
            "HeadMessageWaitSeconds": 100.25,
        }
    ]


def test_metric_is_emitted_even_when_the_gate_is_busy(config, sfn, ddb, capsys):
    """GIVEN a busy gate WHEN the waiting head message is retried THEN its wait is still measured
    (the stall alarm depends on it)."""
    run(sqs_record("evt-a"), config, sfn, ddb)
    capsys.readouterr()

    with pytest.raises(GateBusyError):
        run(sqs_record("evt-b", sent_ms=1_700_000_090_000), config, sfn, ddb)

    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["HeadMessageWaitSeconds"] == 10.5


@pytest.fixture
def handler_env(config: ControllerEnv, monkeypatch: pytest.MonkeyPatch) -> ControllerEnv:
    for name, value in environment(config).items():
        monkeypatch.setenv(name, value)
    return config


def test_handler_logs_busy_gate_at_info_not_error_and_fails_the_invocation(handler_env, sfn, ddb, logs):
    """GIVEN A running WHEN the handler gets B THEN the invocation fails with GateBusyError,
    logged at INFO only (no ERROR record for the alarm's metric filter)."""
    controller.handler({"Records": [sqs_record("evt-a")]}, None)

    with pytest.raises(GateBusyError):
        controller.handler({"Records": [sqs_record("evt-b")]}, None)

    assert logs.errors() == []
    (busy,) = [r for r in logs.records() if "gate busy" in r.getMessage()]
    assert busy.levelno == logging.INFO
    assert (busy.tenant, busy.event_id, busy.key, busy.version_id) == (TENANT, "evt-b", "acme/f.csv", "v1")
    assert executions(sfn, handler_env) == {"evt-a": "RUNNING"}


@pytest.mark.parametrize(
    "body",
    [
        "TOPSECRET,not json",
        json.dumps({"source": "aws.s3", "detail-type": "Object Deleted", "secret": "TOPSECRET"}),
        json.dumps(
            {**s3_event("evt-x"), "detail": {"bucket": {"name": "b"}, "object": {"key": "TOPSECRET"}}}
        ),
    ],
    ids=["not-json", "wrong-detail-type", "no-version-id"],
)
def test_fails_when_body_is_not_an_object_created_event(handler_env, sfn, ddb, logs, body):
    """GIVEN a body that is not an S3 Object Created event WHEN handled THEN ValueError, an ERROR log,
    nothing started, and the body never appears in the logs."""
    with pytest.raises(ValueError, match="not .*S3 'Object Created' EventBridge event"):
        controller.handler({"Records": [sqs_record("evt-x", body=body)]}, None)

    assert len(logs.errors()) == 1
    assert "TOPSECRET" not in logs.text()
    assert executions(sfn, handler_env) == {}
    assert gate(ddb) is None


def test_fails_when_event_carries_more_than_one_record(handler_env, sfn, ddb, logs):
    """GIVEN a batch of two records (batch size misconfigured) WHEN handled
    THEN ValueError and nothing starts."""
    with pytest.raises(ValueError, match="exactly one SQS record"):
        controller.handler({"Records": [sqs_record("evt-a"), sqs_record("evt-b")]}, None)
    assert executions(sfn, handler_env) == {}
    assert len(logs.errors()) == 1


def test_execution_arn_is_derived_from_the_state_machine_arn():
    """GIVEN a state machine ARN WHEN deriving an execution ARN THEN only the resource part changes."""
    assert (
        execution_arn("arn:aws:states:eu-west-1:111122223333:stateMachine:acme-wf", "evt-1")
        == "arn:aws:states:eu-west-1:111122223333:execution:acme-wf:evt-1"
    )
