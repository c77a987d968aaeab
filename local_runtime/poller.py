"""An SQS poller that plays the Lambda event source mapping of the templates.

What it reproduces: batches of the mapping's size (1 here), at most the function's reserved
concurrency invocations at a time, the event Lambda sends (``Records[0]`` with messageId,
receiptHandle, body, attributes including SentTimestamp, ApproximateReceiveCount and
MessageGroupId, eventSourceARN), delete on success, and on failure nothing: the message stays
in flight until its (scaled) visibility timeout expires and is received again, its receive
count one higher. Receives use ``WaitTimeSeconds=0`` and a short sleep: moto's long poll
would spin while a FIFO group is blocked.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from local_runtime.deploy import EventSourceMappingSpec

#: Pause between empty receives (the real mapping long-polls; this keeps moto idle).
POLL_INTERVAL_SECONDS = 0.05


@dataclass(frozen=True)
class Delivery:
    """One receive of one message and what the function made of it."""

    message_id: str
    body: str
    receive_count: int
    started: float
    finished: float
    outcome: str  # "deleted" (success), "kept" (reported as a batch item failure) or "failed" (function error)
    error_type: str | None
    error_message: str | None


class SqsPoller:
    """Polls one queue for one function, like `AWS::Lambda::EventSourceMapping`."""

    def __init__(
        self,
        mapping: EventSourceMappingSpec,
        *,
        sqs: Any,
        lambda_client: Any,
        region: str,
        concurrency: int,
    ) -> None:
        self.mapping = mapping
        self._sqs = sqs
        self._lambda = lambda_client
        self._region = region
        self._concurrency = max(1, concurrency)
        self._listeners: list[Callable[[Delivery], None]] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._busy = 0
        self._lock = threading.Lock()
        self.deliveries: list[Delivery] = []

    def start(self) -> None:
        for index in range(self._concurrency):
            thread = threading.Thread(
                target=self._run, name=f"poller-{self.mapping.function_name}-{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def add_listener(self, listener: Callable[[Delivery], None]) -> None:
        """Called after each delivery (from the poller's thread; must not raise)."""
        self._listeners.append(listener)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self._threads.clear()

    @property
    def busy(self) -> bool:
        """True while a received batch is being handled (received, not yet deleted/released)."""
        return self._busy > 0

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                handled = self._poll_once()
            except (BotoCoreError, ClientError, OSError):
                # moto restarting or shutting down; the message (if any) stays in flight.
                if self._stop.is_set():
                    return
                handled = False
            if not handled:
                self._stop.wait(POLL_INTERVAL_SECONDS)

    def _poll_once(self) -> bool:
        response = self._sqs.receive_message(
            QueueUrl=self.mapping.queue_url,
            MaxNumberOfMessages=min(self.mapping.batch_size, 10),
            WaitTimeSeconds=0,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        messages = response.get("Messages") or []
        if not messages:
            return False
        with self._lock:
            self._busy += 1
        try:
            self._handle(messages)
        finally:
            with self._lock:
                self._busy -= 1
        return True

    def _handle(self, messages: list[dict[str, Any]]) -> None:
        started = time.time()
        invoked = self._lambda.invoke(
            FunctionName=self.mapping.function_name,
            InvocationType="RequestResponse",
            Payload=json.dumps({"Records": [self._record(m) for m in messages]}).encode(),
        )
        payload = invoked["Payload"].read().decode("utf-8", "replace")
        failed = "FunctionError" in invoked
        error_type = error_message = None
        if failed:
            try:
                error = json.loads(payload)
                error_type, error_message = error.get("errorType"), error.get("errorMessage")
            except (ValueError, AttributeError):
                error_message = payload
        kept: set[str] = set()
        if not failed:
            if self.mapping.report_batch_item_failures:
                kept = _item_failures(payload)
                if "*" in kept:
                    kept = {m["MessageId"] for m in messages}
            # Success deletes the batch, less the messages the function reported as failed
            # (partial batch responses): those stay in flight until their visibility ends.
            for message in messages:
                if message["MessageId"] not in kept:
                    self._sqs.delete_message(
                        QueueUrl=self.mapping.queue_url, ReceiptHandle=message["ReceiptHandle"]
                    )
        finished = time.time()
        for message in messages:
            delivery = Delivery(
                message_id=message["MessageId"],
                body=message["Body"],
                receive_count=int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1")),
                started=started,
                finished=finished,
                outcome="failed" if failed else ("kept" if message["MessageId"] in kept else "deleted"),
                error_type=error_type,
                error_message=error_message,
            )
            self.deliveries.append(delivery)
            for listener in self._listeners:
                try:
                    listener(delivery)
                except Exception:  # noqa: BLE001 - observers must not stop the poller
                    pass

    def _record(self, message: dict[str, Any]) -> dict[str, Any]:
        """The SQS record shape Lambda passes to the function."""
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": {k: str(v) for k, v in (message.get("Attributes") or {}).items()},
            "messageAttributes": message.get("MessageAttributes") or {},
            "md5OfBody": message.get("MD5OfBody") or hashlib.md5(message["Body"].encode()).hexdigest(),  # noqa: S324
            "eventSource": "aws:sqs",
            "eventSourceARN": self.mapping.queue_arn,
            "awsRegion": self._region,
        }


def _item_failures(payload: str) -> set[str]:
    """The message ids a partial batch response lists; like Lambda, a malformed response fails
    the whole batch (every message is kept)."""
    try:
        response = json.loads(payload)
        return {str(item["itemIdentifier"]) for item in (response or {}).get("batchItemFailures") or []}
    except (ValueError, TypeError, KeyError, AttributeError):
        return {"*"}
