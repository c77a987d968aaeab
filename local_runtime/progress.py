"""Progress events for a live view of the local run (the demo's UI subscribes to them), and
the reporter that derives them from invocations, core-system requests and executions.

Kinds, each with the tenant and a few fields (never record content):

* ``file_uploaded`` (key, version_id): a file was put into the landing bucket;
* ``controller`` (outcome: started | running | done | waiting | error, execution_name);
* ``file_split`` (key, chunk_count, record_count);
* ``chunk_started`` / ``chunk_finished`` (key, chunk_index, chunk_count, error_type);
* ``record_delivered`` (status, registered): the core system answered one record;
* ``file_finished`` (execution_name, status): an execution closed (found by a watcher that
  polls the executions; it runs only once somebody subscribed);
* ``duplicate_sent`` (message_id, copy_id): an armed duplicate event was put on the queue.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from lambdas import contract
from local_runtime.deploy import DeployedFunction
from local_runtime.lambda_pool import InvocationResult
from local_runtime.synth import CONTROLLER_ROLE, REGISTER_ROLE, SPLIT_ROLE


@dataclass(frozen=True)
class ProgressEvent:
    kind: str
    tenant: str
    time: float
    data: dict[str, Any] = field(default_factory=dict)


Subscriber = Callable[[ProgressEvent], None]


class ProgressEvents:
    """Fan-out of progress events; keeps the most recent ones in ``history``."""

    def __init__(self, history: int = 10_000) -> None:
        self.history: deque[ProgressEvent] = deque(maxlen=history)
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()
        self._on_first_subscriber: Callable[[], None] | None = None

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call ``subscriber`` for every event from now on (from pipeline threads: be quick)."""
        with self._lock:
            first = not self._subscribers
            self._subscribers.append(subscriber)
        if first and self._on_first_subscriber is not None:
            self._on_first_subscriber()

        def unsubscribe() -> None:
            with self._lock:
                if subscriber in self._subscribers:
                    self._subscribers.remove(subscriber)

        return unsubscribe

    def when_subscribed(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once somebody subscribes (now, if somebody already has)."""
        self._on_first_subscriber = callback
        if self._subscribers:
            callback()

    def emit(self, kind: str, tenant: str, **data: Any) -> None:
        event = ProgressEvent(kind, tenant, time.time(), data)
        with self._lock:
            self.history.append(event)
            subscribers = list(self._subscribers)
        for subscriber in subscribers:
            try:
                subscriber(event)
            except Exception:  # noqa: BLE001 - a UI bug must not stop the pipeline
                pass

    def of_kind(self, kind: str, tenant: str | None = None) -> list[ProgressEvent]:
        with self._lock:
            return [e for e in self.history if e.kind == kind and (tenant is None or e.tenant == tenant)]


class ProgressReporter:
    """Emits the events above from what the runtime observes (listener of the dispatcher and
    the sinks; ``list_executions(tenant)`` feeds the ``file_finished`` watcher)."""

    def __init__(
        self,
        events: ProgressEvents,
        list_executions: Callable[[str], list[dict[str, Any]]],
        tenants: list[str],
    ) -> None:
        self._events = events
        self._list_executions = list_executions
        self._tenants = tenants
        self._chunk_counts: dict[str, int] = {}  # chunk_prefix -> chunk_count
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self._watch_lock = threading.Lock()
        events.when_subscribed(self.start_watcher)

    def on_invocation(self, function: DeployedFunction, event: Any, result: InvocationResult | None) -> None:
        tenant = function.tenant or function.name
        value = (
            result.value
            if result is not None and not result.errored and isinstance(result.value, dict)
            else {}
        )
        if function.role == CONTROLLER_ROLE and result is not None:
            if result.errored:
                self._events.emit("controller", tenant, outcome="error", error_type=result.error_type)
            else:
                decided = cast(contract.ControllerResult, value)
                # started | running (a redelivery of the current file) | done | waiting
                self._events.emit(
                    "controller", tenant, outcome=decided.get("outcome"), execution_name=decided.get("execution_name")
                )
        elif function.role == SPLIT_ROLE and result is not None:
            split = cast(contract.SplitResult, value)
            if split:
                self._chunk_counts[split["chunk_prefix"]] = split["chunk_count"]
            self._events.emit(
                "file_split",
                tenant,
                key=cast(contract.SplitRequest, event).get("key"),
                chunk_count=split.get("chunk_count"),
                record_count=split.get("record_count"),
                error_type=result.error_type,
            )
        elif function.role == REGISTER_ROLE:
            task = cast(contract.ChunkTask, event)
            fields = {
                "key": task.get("key"),
                "chunk_index": task.get("chunk_index"),
                "chunk_count": self._chunk_counts.get(task.get("chunk_prefix", "")),
            }
            if result is None:
                self._events.emit("chunk_started", tenant, **fields)
            else:
                self._events.emit("chunk_finished", tenant, error_type=result.error_type, **fields)

    def on_sink_request(self, tenant: str, request: Any) -> None:
        self._events.emit("record_delivered", tenant, status=request.status, registered=request.registered)

    def start_watcher(self) -> None:
        """Emit ``file_finished`` when an execution closes (only once someone subscribed)."""
        with self._watch_lock:
            if self._watcher is not None or self._stopping.is_set():
                return
            self._watcher = threading.Thread(target=self._watch, name="execution-watcher", daemon=True)
            self._watcher.start()

    def _watch(self) -> None:
        reported: set[str] = set()
        while not self._stopping.wait(0.25):
            for tenant in self._tenants:
                try:
                    executions = self._list_executions(tenant)
                except Exception:  # noqa: BLE001 - moto is going away
                    continue
                for execution in executions:
                    if (
                        execution["status"] in contract.CLOSED_STATUSES
                        and execution["executionArn"] not in reported
                    ):
                        reported.add(execution["executionArn"])
                        self._events.emit(
                            "file_finished",
                            tenant,
                            execution_name=execution["name"],
                            status=execution["status"],
                        )

    def stop(self) -> None:
        self._stopping.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
