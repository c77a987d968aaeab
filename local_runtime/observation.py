"""What a running pipeline did and is doing: executions, notifications, and whether anything
is still in progress (idle detection)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from local_runtime.deploy import Tenant
from local_runtime.lambda_pool import LambdaDispatcher
from local_runtime.poller import SqsPoller

NOTIFICATION_QUEUE = "local-runtime-notifications"
_IDLE_CHECK_INTERVAL = 0.2
#: Keys DescribeExecution leaves out when they have no value; `executions` gives them as None.
_OPTIONAL_EXECUTION_KEYS = ("stopDate", "error", "cause", "stateMachineVersionArn", "stateMachineAliasArn")


@dataclass(frozen=True)
class Notification:
    """A message published to an SNS topic of the app (captured through an SQS subscription)."""

    topic_arn: str
    subject: str | None
    message: str
    time: str


def list_executions(sfn: Any, state_machine_arn: str, status: str | None = None) -> list[dict[str, Any]]:
    """ListExecutions, every page."""
    kwargs = {"stateMachineArn": state_machine_arn, **({"statusFilter": status} if status else {})}
    pages = sfn.get_paginator("list_executions").paginate(**kwargs)
    return [item for page in pages for item in page["executions"]]


class Observer:
    """Executions, notifications and idleness of the tenants' pipelines. Notifications arrive on
    a queue it subscribes to every topic of `topic_arns`."""

    def __init__(
        self,
        client: Callable[[str], Any],
        tenants: Mapping[str, Tenant],
        pollers: Mapping[str, SqsPoller],
        dispatcher: LambdaDispatcher,
        topic_arns: Iterable[str],
    ) -> None:
        self._client = client
        self._tenants = tenants
        self._pollers = pollers
        self._dispatcher = dispatcher
        self._sqs = client("sqs")
        self._queue_url = self._sqs.create_queue(QueueName=NOTIFICATION_QUEUE)["QueueUrl"]
        queue_arn = self._sqs.get_queue_attributes(QueueUrl=self._queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        for topic_arn in topic_arns:
            client("sns").subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=queue_arn)
        self._notifications: list[Notification] = []
        self._lock = threading.Lock()

    def notifications(self) -> list[Notification]:
        """Every notification so far, in arrival order."""
        with self._lock:
            while messages := self._sqs.receive_message(QueueUrl=self._queue_url, MaxNumberOfMessages=10).get(
                "Messages"
            ):
                for message in messages:
                    envelope = json.loads(message["Body"])
                    self._notifications.append(
                        Notification(
                            envelope["TopicArn"],
                            envelope.get("Subject"),
                            envelope["Message"],
                            envelope["Timestamp"],
                        )
                    )
                    self._sqs.delete_message(QueueUrl=self._queue_url, ReceiptHandle=message["ReceiptHandle"])
            return list(self._notifications)

    def list_executions(self, tenant: str, status: str | None = None) -> list[dict[str, Any]]:
        return list_executions(self._client("stepfunctions"), self._tenants[tenant].state_machine_arn, status)

    def executions(self, tenant: str) -> list[dict[str, Any]]:
        """The tenant's executions, oldest first, as DescribeExecution gives them (`error`, `cause`,
        `stopDate`, `stateMachineVersionArn`, `stateMachineAliasArn`: None when absent), `input` and
        `output` parsed, plus the file's `key` and `version_id`."""
        sfn = self._client("stepfunctions")
        described = []
        for item in self.list_executions(tenant):
            detail = sfn.describe_execution(executionArn=item["executionArn"])
            del detail["ResponseMetadata"]
            execution_input = json.loads(detail.get("input") or "{}")
            described.append(
                {
                    **dict.fromkeys(_OPTIONAL_EXECUTION_KEYS),
                    **detail,
                    "input": execution_input,
                    "output": json.loads(detail["output"]) if detail.get("output") else None,
                    "key": execution_input.get("key"),
                    "version_id": execution_input.get("version_id"),
                }
            )
        return sorted(described, key=lambda e: (e["startDate"], e["name"]))

    def busy_reason(self, tenants: Iterable[str]) -> str | None:
        """Why the tenants are not idle (None: idle): a message being handled, a Lambda
        invocation in progress (both known here, asked first), a message waiting or a RUNNING
        execution (asked of moto)."""
        selected = list(tenants)
        for tenant in selected:
            if self._pollers[tenant].busy:
                return f"{tenant}: the controller is handling a message"
        invocations = self._dispatcher.in_flight(
            [f for t in selected for f in self._tenants[t].functions.values()]
        )
        if invocations:
            return f"{invocations} Lambda invocations in progress"
        sqs = self._client("sqs")
        for tenant in selected:
            queue_url = self._tenants[tenant].queue_url
            attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
            waiting = int(attributes.get("ApproximateNumberOfMessages", 0))
            in_flight = int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0))
            if waiting or in_flight:
                return f"{tenant}: queue holds {waiting} visible and {in_flight} in-flight messages"
            running = self.list_executions(tenant, status="RUNNING")
            if running:
                return f"{tenant}: execution {running[0]['name']} is RUNNING"
        return None

    def wait_until_idle(self, timeout: float, tenants: Iterable[str]) -> None:
        """Block until `busy_reason` is None twice in a row; `TimeoutError` says what was busy."""
        selected = list(tenants)
        deadline = time.monotonic() + timeout
        quiet_checks, reason = 0, "not checked"
        while time.monotonic() < deadline:
            reason = self.busy_reason(selected)
            quiet_checks = quiet_checks + 1 if reason is None else 0
            if quiet_checks >= 2:
                return
            time.sleep(_IDLE_CHECK_INTERVAL)
        raise TimeoutError(f"local pipeline not idle after {timeout:g}s: {reason}")
