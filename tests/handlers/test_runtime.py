"""The handler wrapper: config from the environment, bound log keys, level per failure kind."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from lambdas.contract import (
    ControllerEnv,
    FunctionEnvironmentError,
    MalformedFileError,
    PipelineError,
    SinkRetryableError,
    environment,
)
from lambdas.runtime import BoundLogger, lambda_handler

ENV = environment(
    ControllerEnv(
        tenant_id="acme",
        state_machine_arn="arn",
        ledger_table_name="l",
        queue_url="q",
        metric_namespace="N",
        on_failure="halt",
        waiting_visibility_seconds=240,
        work_bucket="w",
        landing_bucket="b",
        landing_prefix="acme/",
    )
)


class IntendedWait(PipelineError):
    """Intended control flow, as the controller's waits are: INFO."""

    log_level = logging.INFO


@pytest.fixture
def controller_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)


def make_handler(raise_: BaseException | None = None) -> Any:
    @lambda_handler("controller", ControllerEnv, log_fields=lambda event: {"key": event.get("key")})
    def handler(
        event: dict[str, Any], config: ControllerEnv, log: BoundLogger, context: Any
    ) -> dict[str, Any]:
        log.bind(execution_name="evt-1")
        log.info("working", extra={"step": 1})
        if raise_ is not None:
            raise raise_
        return {"tenant": config.tenant_id}

    return handler


def test_passes_the_typed_config_and_binds_tenant_and_event_fields(controller_env, logs):
    """GIVEN the function's environment WHEN invoked THEN the logic gets the config and every line
    carries the tenant, the event's fields, fields bound later and its own."""
    assert make_handler()({"key": "acme/f.csv"}, None) == {"tenant": "acme"}
    (record,) = logs.records()
    assert (record.tenant, record.key, record.execution_name, record.step) == (
        "acme",
        "acme/f.csv",
        "evt-1",
        1,
    )
    assert record.name == "ingest.controller"


@pytest.mark.parametrize(
    ("error", "level", "fields"),
    [
        (IntendedWait("busy"), logging.INFO, {}),
        (SinkRetryableError("503"), logging.WARNING, {}),
        (MalformedFileError(4, "bad"), logging.ERROR, {"line_number": 4}),
    ],
    ids=["intended-wait", "transient", "real-fault"],
)
def test_logs_a_known_failure_at_its_level_without_a_stack_trace_and_raises_it(
    controller_env, logs, error, level, fields
):
    with pytest.raises(type(error)):
        make_handler(error)({"key": "k"}, None)
    failure = logs.records()[-1]
    assert failure.levelno == level and failure.exc_info is None
    assert failure.error_type == type(error).__name__ and failure.tenant == "acme"
    assert all(getattr(failure, k) == v for k, v in fields.items())
    assert len(logs.errors()) == (1 if level == logging.ERROR else 0)


def test_logs_an_unexpected_failure_at_error_with_its_stack_trace(controller_env, logs):
    with pytest.raises(KeyError):
        make_handler(KeyError("boom"))({"key": "k"}, None)
    (failure,) = logs.errors()
    assert failure.exc_info is not None and failure.tenant == "acme" and failure.key == "k"


def test_fails_before_the_logic_runs_when_the_environment_is_incomplete(monkeypatch, logs):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(FunctionEnvironmentError, match="TENANT_ID is not set"):
        make_handler()({"key": "k"}, None)
    assert logs.records() == []


@pytest.mark.parametrize("in_lambda", [True, False])
def test_makes_the_declared_clients_at_init_only_in_a_lambda_environment(monkeypatch, in_lambda):
    """GIVEN a handler declaring the clients it uses WHEN its module is imported (the decorator runs)
    in a Lambda execution environment THEN each client exists before the first invocation (init does
    not count against its timeout); outside Lambda importing makes none."""
    from lambdas import runtime

    runtime.aws_client.cache_clear()
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    if in_lambda:
        monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "acme-controller")
    else:
        monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    try:
        lambda_handler("controller", ControllerEnv, clients=("sqs", "dynamodb"))(lambda *args: None)

        made = runtime.aws_client.cache_info().currsize
        assert made == (2 if in_lambda else 0)
    finally:
        runtime.aws_client.cache_clear()
