"""`SqsPoller` plays an SQS event source mapping of the templates (local_runtime/README.md,
"Pollers"). It receives with ``WaitTimeSeconds=0`` (moto's long poll spins while a FIFO group is
blocked) and pauses between empty receives, longer and longer until something wakes it: an
idle tenant's poller would otherwise keep moto's server busy."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from local_runtime.deploy import EventSourceMappingSpec

#: Pause after an empty receive, doubled up to the longest (the resting one after `QUIET_SECONDS`
#: with no message and no wake-up: an idle `--serve`); the first again on a wake-up or a message.
POLL_INTERVAL_SECONDS = 0.05
LONGEST_POLL_INTERVAL_SECONDS, RESTING_POLL_INTERVAL_SECONDS, QUIET_SECONDS = 0.4, 2.0, 10.0


@dataclass(frozen=True)
class Delivery:
    """One receive of one message and what the function made of it."""

    message_id: str
    body: str
    receive_count: int
    started: float
    finished: float
    outcome: (
        str  # "deleted" (success), "kept" (reported as a batch item failure) or "failed" (function error)
    )
    error_type: str | None


class SqsPoller:
    """Polls one queue for one function, like `AWS::Lambda::EventSourceMapping`."""

    def __init__(
        self, mapping: EventSourceMappingSpec, *, sqs: Any, lambda_client: Any, region: str, concurrency: int
    ) -> None:
        self.mapping = mapping
        self._sqs, self._lambda, self._region, self._concurrency = sqs, lambda_client, region, concurrency
        self._listeners: list[Callable[[Delivery], None]] = []
        self._stop = threading.Event()
        self._wake = threading.Event()
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

    def wake(self) -> None:
        """Receive now: a message may have arrived (an upload, an invocation that ended)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self._threads.clear()

    @property
    def busy(self) -> bool:
        """True while a received batch is being handled (received, not yet deleted/released)."""
        return self._busy > 0

    def _run(self) -> None:
        pause, active = POLL_INTERVAL_SECONDS, time.monotonic()
        while not self._stop.is_set():
            try:
                handled = self._poll_once()
            except (BotoCoreError, ClientError, OSError):
                handled = False  # moto shutting down; the message (if any) stays in flight
            if handled:
                pause, active = POLL_INTERVAL_SECONDS, time.monotonic()
                continue
            # A wake-up during the receive above is kept: the wait returns at once.
            woken = self._wake.wait(pause)
            self._wake.clear()
            active = time.monotonic() if woken else active
            quiet = time.monotonic() - active >= QUIET_SECONDS
            longest = RESTING_POLL_INTERVAL_SECONDS if quiet else LONGEST_POLL_INTERVAL_SECONDS
            pause = POLL_INTERVAL_SECONDS if woken else min(2 * pause, longest)

    def _poll_once(self) -> bool:
        messages = self._sqs.receive_message(
            QueueUrl=self.mapping.queue_url,
            MaxNumberOfMessages=self.mapping.batch_size,
            WaitTimeSeconds=0,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages")
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
            Payload=json.dumps({"Records": [self._record(m) for m in messages]}).encode(),
        )
        response = json.loads(invoked["Payload"].read())
        failed = "FunctionError" in invoked
        kept: set[str] = set()
        if not failed:
            if self.mapping.report_batch_item_failures:
                kept = _item_failures(response, messages)
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
                receive_count=int(message["Attributes"]["ApproximateReceiveCount"]),
                started=started,
                finished=finished,
                outcome="failed" if failed else ("kept" if message["MessageId"] in kept else "deleted"),
                error_type=response["errorType"] if failed else None,
            )
            self.deliveries.append(delivery)
            for listener in self._listeners:
                with contextlib.suppress(Exception):  # observers must not stop the poller
                    listener(delivery)

    def _record(self, message: dict[str, Any]) -> dict[str, Any]:
        """The SQS record shape Lambda passes to the function."""
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": message["Attributes"],
            "messageAttributes": message.get("MessageAttributes", {}),
            "md5OfBody": message["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": self.mapping.queue_arn,
            "awsRegion": self._region,
        }


def _item_failures(response: Any, messages: list[dict[str, Any]]) -> set[str]:
    """The message ids a partial batch response lists (none for a null response); like Lambda,
    a malformed response fails the whole batch (every message is kept)."""
    try:
        return {str(item["itemIdentifier"]) for item in (response or {}).get("batchItemFailures") or []}
    except (TypeError, KeyError, AttributeError):
        return {message["MessageId"] for message in messages}
