"""Faults injected into the pipeline: real kills of any function's process at a chosen point
(the controller's after StartExecution included), and duplicate events (the core system's
faults are on `sink.SinkServer`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from local_runtime.deploy import DeployedFunction
from local_runtime.lambda_pool import InvocationResult
from local_runtime.poller import Delivery


class Faults:
    """Armed faults of a running pipeline, read on every invocation and every delivery.

    ``send_copy(tenant, body)`` puts a message on the tenant's queue and returns its id.
    """

    def __init__(
        self, tenants: Iterable[str] = (), send_copy: Callable[[str, str], str] | None = None
    ) -> None:
        self._tenants = set(tenants)
        self._send_copy = send_copy
        self.duplicates_sent: list[tuple[str, str, str]] = []  # (tenant, original id, copy id)
        self._kills_armed: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}  # (tenant, role) -> (times, directive)
        self.kills: list[tuple[str, str, str]] = []  # (tenant, role, error type) of each kill that happened
        self._duplicates_armed: dict[str, int] = {}
        self._copies: set[str] = set()
        self._lock = threading.Lock()

    def kill(self, tenant: str, role: str, *, after: str, count: int = 1, times: int = 1,
             error_type: str = "Runtime.ExitError") -> None:
        """Kill the process of the tenant's ``role`` function (``split``, ``register``, ...) for
        real, with SIGKILL, in its next ``times`` invocations that get that far: at the
        ``count``-th ``after`` event of the invocation, where ``after`` is a botocore call
        (``"s3.PutObject"``: once it succeeded) or ``"sink"`` (once the core system answered a
        request, so the records it carried are registered and the handler never hears of it).
        A botocore call is named as in botocore's event names, ``<service id>.<operation>``:
        ``kill(tenant, "controller", after="sfn.StartExecution")`` kills the controller right
        after it started an execution.

        The invocation fails as Lambda reports a killed runtime: ``error_type``
        (`Runtime.ExitError`; `Runtime.OutOfMemory` for an out-of-memory kill), message
        "Runtime exited with error: signal: killed". A message the killed function was
        handling is not deleted: it comes back after the visibility timeout.
        """
        if tenant not in self._tenants:
            raise KeyError(f"unknown tenant {tenant!r} (have: {', '.join(sorted(self._tenants))})")
        with self._lock:
            self._kills_armed[(tenant, role)] = (
                times, {"after": after, "count": count, "error_type": error_type})

    def duplicate_next_event(self, tenant: str, times: int = 1) -> None:
        """The next ``times`` events of the tenant reach the controller twice.

        When the poller first delivers an event, a copy of the same body is put on the queue
        with a new deduplication id: what an at-least-once redelivery from outside SQS's
        5-minute deduplication window looks like.
        """
        self._arm(self._duplicates_armed, tenant, times)

    def clear(self) -> None:
        with self._lock:
            self._kills_armed.clear()
            self._duplicates_armed.clear()

    def _arm(self, armed: dict[str, int], tenant: str, times: int) -> None:
        if tenant not in self._tenants:
            raise KeyError(f"unknown tenant {tenant!r} (have: {', '.join(sorted(self._tenants))})")
        with self._lock:
            armed[tenant] = armed.get(tenant, 0) + times

    # -- called by the dispatcher and the pollers ---------------------------------------------

    def directives(self, function: DeployedFunction) -> dict[str, Any]:
        """What the worker of this invocation must do (a `LambdaDispatcher` fault source)."""
        with self._lock:
            times, kill = self._kills_armed.get((function.tenant or "", function.role or ""), (0, {}))
            if times > 0:
                return {"kill": kill}
        return {}

    def observe_crash(self, function: DeployedFunction, result: InvocationResult) -> None:
        """An armed kill happened: record it and count it off."""
        with self._lock:
            armed = (function.tenant or "", function.role or "")
            times, kill = self._kills_armed.get(armed, (0, {}))
            if times > 0:
                self.kills.append((*armed, kill["error_type"]))
                self._kills_armed[armed] = (times - 1, kill)

    def on_delivery(self, tenant: str, delivery: Delivery) -> str | None:
        """Send a copy of a first delivery if a duplicate is armed; returns the copy's id."""
        if delivery.receive_count != 1 or delivery.message_id in self._copies or self._send_copy is None:
            return None
        with self._lock:
            if self._duplicates_armed.get(tenant, 0) <= 0:
                return None
            self._duplicates_armed[tenant] -= 1
        copy_id = self._send_copy(tenant, delivery.body)
        self._copies.add(copy_id)
        self.duplicates_sent.append((tenant, delivery.message_id, copy_id))
        return copy_id
