"""What every handler needs from its runtime: its configuration, AWS clients and logs.

`lambda_handler` is the one wrapper around the functions' pure logic: it reads the function's
config from the environment, binds the log keys once, logs a failure at the level its
exception class declares (intended waits at INFO, transient faults at WARNING, the rest at
ERROR with a stack trace only when the failure is unexpected) and raises it on, so that the
workflow's Retry/Catch see the exception's class name as the error.

Logs are plain stdlib `logging`: the functions use Lambda's JSON log format, so the Lambda
runtime writes each record as one JSON object with `level`, `message` and every `extra=`
field. Nothing here runs at import time, except in a Lambda execution environment: there a
handler's clients are made at init (`LambdaHandler`).
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from lambdas.contract import (
    EMF_DIMENSIONS,
    EMF_METRICS,
    TENANT_DIMENSION,
    PipelineError,
    execution_arn,
    from_env,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

LOGGER_NAME = "ingest"

#: A function's config: a dataclass of `lambdas.contract.env`.
ConfigT = TypeVar("ConfigT", bound="DataclassInstance")


@functools.cache
def aws_client(service: str) -> Any:
    """boto3 client, created on first use and reused by warm invocations."""
    import boto3  # deferred: importing this module must stay cheap and side-effect free

    return boto3.client(service)


class BoundLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger whose `extra` fields are bound once and merged with each call's own."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs

    def bind(self, **fields: Any) -> None:
        """Add fields to every later line (e.g. once the event has been parsed)."""
        self.extra = {**(self.extra or {}), **fields}


def get_logger(function: str) -> logging.Logger:
    """The logger of one function, e.g. `ingest.controller`."""
    return logging.getLogger(f"{LOGGER_NAME}.{function}")


Logic = Callable[[Any, ConfigT, BoundLogger, Any], Any]


class LambdaHandler(Generic[ConfigT]):
    """`handler(event, context)` around `logic(event, config, log, context)`; see the module docstring."""

    def __init__(
        self,
        function: str,
        config_type: type[ConfigT],
        logic: Logic[ConfigT],
        *,
        log_fields: Callable[[Any], Mapping[str, Any]] = lambda event: {},
        clients: tuple[str, ...] = (),
    ) -> None:
        self.function = function
        self.config_type = config_type
        self.logic = logic
        self.log_fields = log_fields
        self.logger = get_logger(function)
        functools.update_wrapper(self, logic)
        # In a Lambda execution environment the clients are made at init, as AWS recommends: the
        # init phase does not count against the first invocation's timeout (a scaled-down timeout
        # of the local runtime, 1 s, is less than a busy machine needs to load their models).
        # Elsewhere (unit tests) importing a handler stays side-effect free.
        if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
            for service in clients:
                aws_client(service)

    def __call__(self, event: Any, context: Any) -> Any:
        config = from_env(self.config_type)
        fields = {"tenant": getattr(config, "tenant_id", None)}
        if isinstance(event, dict):
            fields.update(self.log_fields(event))
        log = BoundLogger(self.logger, fields)
        try:
            return self.logic(event, config, log, context)
        except PipelineError as error:
            log.log(
                error.log_level,
                "%s: %s",
                error.log_message or type(error).__name__,
                error,
                extra={"error_type": type(error).__name__, **error.log_fields},
            )
            raise
        except Exception:
            log.exception("%s failed", self.function)
            raise


def lambda_handler(
    function: str,
    config_type: type[ConfigT],
    *,
    log_fields: Callable[[Any], Mapping[str, Any]] = lambda event: {},
    clients: tuple[str, ...] = (),
) -> Callable[[Logic[ConfigT]], LambdaHandler[ConfigT]]:
    """Decorator: `@lambda_handler("split", SplitEnv, log_fields=..., clients=("s3", "dynamodb"))` on
    `def handler(event, config, log, context)`; `clients`: the boto3 clients every invocation uses."""

    def wrap(logic: Logic[ConfigT]) -> LambdaHandler[ConfigT]:
        return LambdaHandler(function, config_type, logic, log_fields=log_fields, clients=clients)

    return wrap


def error_code(error: BaseException) -> str:
    """The AWS error code of a botocore `ClientError` ("" for anything else)."""
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def execution_status(sfn: Any, state_machine_arn: str, execution: str) -> str | None:
    """An execution's status, or None if Step Functions does not know it (never started, or
    forgotten: Step Functions keeps closed executions 90 days)."""
    try:
        description = sfn.describe_execution(executionArn=execution_arn(state_machine_arn, execution))
        status: str = description["status"]
        return status
    except Exception as error:
        if error_code(error) == "ExecutionDoesNotExist":
            return None
        raise


def pick(event: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    """The named fields of an event, for `log_fields` (missing ones as None)."""
    return {key: event.get(key) for key in keys}


def emf_line(
    *,
    namespace: str,
    tenant_id: str,
    now: float,
    metrics: Mapping[str, float],
    fields: Mapping[str, Any] | None = None,
) -> str:
    """One CloudWatch embedded-metric-format record: `metrics` maps a name of `EMF_METRICS`
    to its value, published with the unit and the dimensions that table gives. Printed to
    stdout, CloudWatch Logs turns it into metrics. `fields` ride along as plain log fields
    (searchable with Logs Insights, not metrics)."""
    return json.dumps(
        {
            "_aws": {
                "Timestamp": int(now * 1000),
                "CloudWatchMetrics": [
                    {
                        "Namespace": namespace,
                        "Dimensions": [list(EMF_DIMENSIONS)],
                        "Metrics": [{"Name": name, "Unit": EMF_METRICS[name].unit} for name in metrics],
                    }
                ],
            },
            TENANT_DIMENSION: tenant_id,
            **(fields or {}),
            **metrics,
        }
    )


def emit_metrics(
    *,
    namespace: str,
    tenant_id: str,
    now: float,
    metrics: Mapping[str, float],
    fields: Mapping[str, Any] | None = None,
) -> None:
    """Print one EMF record (see `emf_line`)."""
    print(
        emf_line(namespace=namespace, tenant_id=tenant_id, now=now, metrics=metrics, fields=fields),
        flush=True,
    )
