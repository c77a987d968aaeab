"""Faults injected into the pipeline: controller crashes and duplicate events (the core
system's faults are on `sink.SinkServer`)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from local_runtime.workers import FunctionSpec, InvocationResult


@dataclass
class Faults:
    """Arms crashes of a tenant's controller; read by the dispatcher on every invocation.

    ``controller_names`` maps tenant id -> controller function name.
    """

    controller_names: dict[str, str]
    crashes: list[tuple[str, float]] = field(default_factory=list)  # (function name, when)
    duplicates_sent: list[tuple[str, str, str]] = field(default_factory=list)  # (tenant, original id, copy id)
    _armed: dict[str, int] = field(default_factory=dict)
    _duplicates: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def crash_controller_after_start(self, tenant: str, times: int = 1) -> None:
        """The controller process dies right after a successful StartExecution, ``times`` times.

        The invocation then fails like a Lambda runtime crash (`Runtime.ExitError`): the
        message is not deleted and comes back after the visibility timeout.
        """
        name = self.controller_names[tenant]
        with self._lock:
            self._armed[name] = self._armed.get(name, 0) + times

    def duplicate_next_event(self, tenant: str, times: int = 1) -> None:
        """The next ``times`` events of the tenant reach the controller twice.

        When the poller first delivers an event, a copy of the same body is put on the queue
        with a new deduplication id: what an at-least-once redelivery from outside SQS's
        5-minute deduplication window looks like.
        """
        if tenant not in self.controller_names:
            raise KeyError(f"unknown tenant {tenant!r}")
        with self._lock:
            self._duplicates[tenant] = self._duplicates.get(tenant, 0) + times

    def take_duplicate(self, tenant: str) -> bool:
        with self._lock:
            if self._duplicates.get(tenant, 0) > 0:
                self._duplicates[tenant] -= 1
                return True
        return False

    def directives(self, spec: FunctionSpec) -> dict[str, Any]:
        with self._lock:
            if self._armed.get(spec.name, 0) > 0:
                return {"crash_after": "sfn.StartExecution"}
        return {}

    def observe_crash(self, spec: FunctionSpec, result: InvocationResult) -> None:
        with self._lock:
            if self._armed.get(spec.name, 0) > 0:
                self._armed[spec.name] -= 1
            self.crashes.append((spec.name, time.time()))

    def clear(self) -> None:
        with self._lock:
            self._armed.clear()
            self._duplicates.clear()
