"""Progress hooks for a live view of the local run (the demo's UI subscribes to them).

Kinds, each with the tenant and a few fields (never record content):

* ``file_uploaded`` (key, version_id): a file was put into the landing bucket;
* ``controller`` (outcome: started | already_started | waiting | error, execution_name);
* ``file_split`` (key, chunk_count, record_count);
* ``chunk_started`` / ``chunk_finished`` (key, chunk_index, chunk_count, error_type);
* ``record_delivered`` (status, registered): the core system answered one record;
* ``file_finished`` (execution_name, status): an execution closed (found by a watcher that
  polls the executions; it runs only once somebody subscribed).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


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

    @property
    def has_subscribers(self) -> bool:
        return bool(self._subscribers)

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
