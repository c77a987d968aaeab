"""Fixtures for the Lambda handler unit tests: moto-backed AWS."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from lambdas import runtime
from tests.conftest import share_service_models
from tests.handlers.support import LEDGER_TABLE, REGION, TENANT


@pytest.fixture(autouse=True)
def fake_aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fake credentials and region, no endpoint or proxy overrides, fresh client cache."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SECURITY_TOKEN": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    for name in (
        "AWS_PROFILE",
        "AWS_ENDPOINT_URL",
        "AWS_LAMBDA_LOG_FORMAT",
        "http_proxy",
        "https_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
    ):
        monkeypatch.delenv(name, raising=False)
    runtime.aws_client.cache_clear()
    yield
    runtime.aws_client.cache_clear()


@pytest.fixture(autouse=True)
def info_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Capture the handlers' INFO records too (the busy gate is INFO by design)."""
    caplog.set_level(logging.INFO, logger=runtime.LOGGER_NAME)
    return caplog


@pytest.fixture
def aws() -> Iterator[None]:
    """Everything inside runs against moto; Step Functions executions stay RUNNING."""
    with mock_aws():
        share_service_models()
        yield


@pytest.fixture
def s3(aws: None) -> Any:
    return boto3.client("s3", region_name=REGION)


@pytest.fixture
def sfn(aws: None) -> Any:
    return boto3.client("stepfunctions", region_name=REGION)


@pytest.fixture
def ddb(aws: None) -> Any:
    return boto3.client("dynamodb", region_name=REGION)


class Logs:
    """Views of the captured log records that the tests assert on."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self._caplog = caplog

    def records(self) -> list[logging.LogRecord]:
        """The handlers' own records (their `ingest` loggers): what the function's log group
        holds. moto logs too, from threads an earlier test may have left running (a Step
        Functions execution); those are not the function's and never reach its metric filter."""
        return [
            r
            for r in self._caplog.records
            if r.name == runtime.LOGGER_NAME or r.name.startswith(runtime.LOGGER_NAME + ".")
        ]

    def errors(self) -> list[logging.LogRecord]:
        """Records a `{ $.level = "ERROR" }` metric filter would count."""
        return [r for r in self.records() if r.levelno >= logging.ERROR]

    def at(self, level: int) -> list[str]:
        """Messages logged at exactly `level`."""
        return [r.getMessage() for r in self.records() if r.levelno == level]

    def text(self) -> str:
        """Everything a log formatter could print of the captured records: message, arguments,
        every `extra` field and the formatted exception with its stack trace."""
        formatter = logging.Formatter()
        lines = []
        for record in self._caplog.records:
            fields = {k: v for k, v in vars(record).items() if k not in ("exc_info", "exc_text")}
            lines.append(json.dumps({**fields, "message": record.getMessage()}, default=str))
            if record.exc_info:
                lines.append(formatter.formatException(record.exc_info))
        return "\n".join(lines)


@pytest.fixture
def logs(info_logs: pytest.LogCaptureFixture) -> Logs:
    return Logs(info_logs)


@pytest.fixture
def ledger_table(ddb: Any) -> str:
    """The ledger table as the shared stack declares it (tenant + entry)."""
    ddb.create_table(
        TableName=LEDGER_TABLE,
        KeySchema=[
            {"AttributeName": "tenant", "KeyType": "HASH"},
            {"AttributeName": "entry", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "tenant", "AttributeType": "S"},
            {"AttributeName": "entry", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    return LEDGER_TABLE


@pytest.fixture
def ledger(ddb: Any, ledger_table: str) -> Any:
    """The tenant's ledger, empty (a test module may give its own, with a file in it)."""
    from lambdas.ledger import Ledger

    return Ledger(ddb, ledger_table, TENANT)


#: A file workflow that holds its execution 10 minutes: it runs until a test closes it.
HOLD = json.dumps({"StartAt": "Hold", "States": {"Hold": {"Type": "Wait", "Seconds": 600, "End": True}}})


@pytest.fixture
def machine(sfn: Any) -> str:
    """The tenant's file workflow (`HOLD`)."""
    return sfn.create_state_machine(
        name=f"{TENANT}-file-ingest-workflow",
        definition=HOLD,
        roleArn="arn:aws:iam::123456789012:role/workflow",
    )["stateMachineArn"]


@pytest.fixture
def sqs(aws: None) -> Any:
    return boto3.client("sqs", region_name=REGION)


@pytest.fixture
def queue_url(sqs: Any) -> str:
    return sqs.create_queue(
        QueueName=f"{TENANT}-event-queue.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "30"},
    )["QueueUrl"]


@pytest.fixture
def sns(aws: None) -> Any:
    return boto3.client("sns", region_name=REGION)


@pytest.fixture
def buckets(s3: Any) -> Any:
    """A versioned landing bucket `landing` and a work bucket `work`."""
    s3.create_bucket(Bucket="landing")
    s3.put_bucket_versioning(Bucket="landing", VersioningConfiguration={"Status": "Enabled"})
    s3.create_bucket(Bucket="work")
    return s3
