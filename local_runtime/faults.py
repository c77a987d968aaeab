"""Faults armed on a running pipeline: real kills of a function's process at a chosen point, and
duplicate events (local_runtime/README.md; the core system's faults are on `sink.SinkServer`)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from local_runtime.deploy import DeployedFunction
from local_runtime.lambda_pool import InvocationResult
from local_runtime.poller import Delivery


class Faults:
    """Armed faults, read on every invocation and every delivery; ``send_copy(tenant, body)``
    puts a message on the tenant's queue and returns its id."""

    def __init__(
        self, tenants: Iterable[str] = (), send_copy: Callable[[str, str], str] | None = None
    ) -> None:
        self._tenants = set(tenants)
        self._send_copy = send_copy
        self._kills_armed: dict[
            tuple[Any, Any], tuple[int, dict[str, Any]]
        ] = {}  # (tenant, kind) -> (times, kill)
        self._duplicates_armed: Counter[str] = Counter()
        self._copies: set[str] = set()
        self._lock = threading.Lock()
        self.kills: list[tuple[str, str, str]] = []  # (tenant, kind, error type) of each kill that happened
        self.duplicates_sent: list[tuple[str, str, str]] = []  # (tenant, original id, copy id)

    def kill(
        self,
        tenant: str,
        kind: str,
        *,
        after: str,
        count: int = 1,
        times: int = 1,
        error_type: str = "Runtime.ExitError",
    ) -> None:
        """SIGKILL the process of the tenant's ``kind`` function in its next ``times`` invocations
        that get that far, at the ``count``-th ``after`` event: a botocore call that succeeded,
        ``<service id>.<operation>`` (``"sfn.StartExecution"``), or ``"sink"`` (the core system
        answered). The invocation fails with ``error_type``, as Lambda reports a killed runtime."""
        self._check(tenant)
        with self._lock:
            self._kills_armed[(tenant, kind)] = (
                times,
                {"after": after, "count": count, "error_type": error_type},
            )

    def duplicate_next_event(self, tenant: str) -> None:
        """The tenant's next event reaches the controller twice: once the poller delivered it, a
        copy goes on the queue with a new deduplication id (a redelivery from outside SQS's
        5-minute deduplication window)."""
        self._check(tenant)
        with self._lock:
            self._duplicates_armed[tenant] += 1

    def clear(self) -> None:
        with self._lock:
            self._kills_armed.clear()
            self._duplicates_armed.clear()

    def _check(self, tenant: str) -> None:
        if tenant not in self._tenants:
            raise KeyError(f"unknown tenant {tenant!r} (have: {', '.join(sorted(self._tenants))})")

    # -- called by the dispatcher and the pollers ---------------------------------------------

    def directives(self, function: DeployedFunction) -> dict[str, Any]:
        """What the worker of this invocation must do (a `LambdaDispatcher` fault source)."""
        with self._lock:
            times, kill = self._kills_armed.get((function.tenant, function.kind), (0, {}))
        return {"kill": kill} if times > 0 else {}

    def observe_crash(self, function: DeployedFunction, result: InvocationResult) -> None:
        """An armed kill happened: record it and count it off (unless cleared meanwhile)."""
        armed = (function.tenant, function.kind)
        with self._lock:
            times, kill = self._kills_armed.get(armed, (0, {}))
            if times > 0:
                self.kills.append((*armed, kill["error_type"]))
                self._kills_armed[armed] = (times - 1, kill)

    def on_delivery(self, tenant: str, delivery: Delivery) -> str | None:
        """Send a copy of a first delivery if a duplicate is armed; returns the copy's id."""
        with self._lock:
            if (
                delivery.receive_count != 1
                or delivery.message_id in self._copies
                or not self._duplicates_armed[tenant]
            ):
                return None
            self._duplicates_armed[tenant] -= 1
        assert self._send_copy is not None  # a duplicate is armed on a started pipeline only
        copy_id = self._send_copy(tenant, delivery.body)
        self._copies.add(copy_id)
        self.duplicates_sent.append((tenant, delivery.message_id, copy_id))
        return copy_id
