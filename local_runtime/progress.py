"""Progress events for a live view of a local run (the demo subscribes to them), and the reporter
that derives them from invocations, core-system requests and executions. Kinds: README,
`events.subscribe`; each event has the tenant and a few fields, never record content."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lambdas import contract
from local_runtime.deploy import DeployedFunction
from local_runtime.lambda_pool import InvocationResult
from local_runtime.sink import SinkRequest
from local_runtime.synth import CONTROLLER_ROLE, REGISTER_ROLE, SPLIT_ROLE


@dataclass(frozen=True)
class ProgressEvent:
    kind: str
    tenant: str
    time: float
    data: dict[str, Any] = field(default_factory=dict)


class ProgressEvents:
    """Fan-out of progress events to the subscribers."""

    def __init__(self) -> None:
        self._subscribers: list[Callable[[ProgressEvent], None]] = []
        self.subscribed = threading.Event()

    def subscribe(self, subscriber: Callable[[ProgressEvent], None]) -> None:
        """Call `subscriber` for every event from now on (from pipeline threads: be quick)."""
        self._subscribers.append(subscriber)
        self.subscribed.set()

    def emit(self, kind: str, tenant: str, **data: Any) -> None:
        event = ProgressEvent(kind, tenant, time.time(), data)
        for subscriber in list(self._subscribers):
            try:
                subscriber(event)
            except Exception:  # noqa: BLE001 - a UI bug must not stop the pipeline
                pass


class ProgressReporter:
    """Emits the events from what the runtime observes: it listens to the dispatcher and the
    sinks, and watches `list_executions(tenant)` for `file_finished` once somebody subscribed."""

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
        self._watcher = threading.Thread(target=self._watch, name="execution-watcher", daemon=True)
        self._watcher.start()

    def on_invocation(self, function: DeployedFunction, event: Any, result: InvocationResult | None) -> None:
        tenant = function.tenant  # set for every function of a tenant's pipeline, the roles below
        if function.role == REGISTER_ROLE:
            fields = {
                "key": event.get("key"),
                "chunk_index": event.get("chunk_index"),
                "chunk_count": self._chunk_counts.get(event.get("chunk_prefix", "")),
            }
            if result is None:
                self._events.emit("chunk_started", tenant, **fields)
            else:
                self._events.emit("chunk_finished", tenant, error_type=result.error_type, **fields)
            return
        if result is None:
            return
        value = {} if result.errored or not isinstance(result.value, dict) else result.value
        if function.role == CONTROLLER_ROLE:
            # started | running (a redelivery of the current file) | done | waiting | quarantined
            outcome = "error" if result.errored else value.get("outcome")
            self._events.emit(
                "controller", tenant, outcome=outcome, execution_name=value.get("execution_name"),
                error_type=result.error_type,
            )
        elif function.role == SPLIT_ROLE:
            if value:
                self._chunk_counts[value["chunk_prefix"]] = value["chunk_count"]
            self._events.emit(
                "file_split", tenant, key=event.get("key"), chunk_count=value.get("chunk_count"),
                record_count=value.get("record_count"), error_type=result.error_type,
            )

    def on_sink_request(self, tenant: str, request: SinkRequest) -> None:
        self._events.emit("record_delivered", tenant, status=request.status, registered=request.registered)

    def _watch(self) -> None:
        reported: set[str] = set()
        while not self._stopping.wait(0.25):
            if not self._events.subscribed.is_set():
                continue  # nobody looks: spare moto the polling
            for tenant in self._tenants:
                try:
                    executions = self._list_executions(tenant)
                except Exception:  # noqa: BLE001 - moto is going away
                    continue
                for execution in executions:
                    arn, status = execution["executionArn"], execution["status"]
                    if status in contract.CLOSED_STATUSES and arn not in reported:
                        reported.add(arn)
                        self._events.emit("file_finished", tenant, execution_name=execution["name"],
                                          status=status)

    def stop(self) -> None:
        self._stopping.set()
        self._watcher.join(timeout=5)
