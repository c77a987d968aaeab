"""The pace model's steps as a real account runs them (docs/benchmarks.md, "Cost model"):
measured from the file executions' histories and the times the core-system stand-in received
each request, so that a user can put them in `pipeline_constructs/pace.py` in place of its
assumptions.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pipeline_constructs import pace

#: States whose time is only the workflow's own (no task, no wait).
_PLAIN_STATES = ("PassStateEntered", "ChoiceStateEntered")


def _seconds(event: dict[str, Any]) -> float:
    stamp = event["timestamp"]
    return stamp.timestamp() if isinstance(stamp, datetime) else float(stamp)


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass(frozen=True)
class PaceFigures:
    """Medians in seconds; None where the run had nothing to measure."""

    state_transition: float | None
    chunk: float | None
    close_to_next: float | None

    def line(self, tenant: str) -> str:
        def shown(measured: float | None, model: float) -> str:
            return (
                "not measured"
                if measured is None
                else f"{measured * 1000:.0f} ms (model {model * 1000:.0f} ms)"
            )

        return (
            f"{tenant}: pace on AWS: a Pass or Choice state {shown(self.state_transition, pace.STATE_TRANSITION.seconds)}, "
            f"a chunk's fixed cost {shown(self.chunk, pace.chunk_seconds())}, "
            f"close to the next file's first POST {shown(self.close_to_next, pace.close_to_next_seconds())}"
        )


def measure(
    executions: Sequence[dict[str, Any]],
    histories: Sequence[Sequence[dict[str, Any]]],
    request_times: Sequence[float],
) -> PaceFigures:
    """``executions``: a tenant's file executions, oldest first, with ``histories`` their
    events in order; ``request_times``: when the core system received each request (epoch
    seconds). A chunk's fixed cost is its Map iteration's time less the span of the requests
    received during it. (The run's files fit one page: a page's child execution is not
    measured.)"""
    transitions: list[float] = []
    chunks: list[float] = []
    for events in histories:
        for at, event in enumerate(events):
            if event["type"] in _PLAIN_STATES:
                later = next((e for e in events[at + 1 :] if e["type"].endswith("Entered")), None)
                if later is not None:
                    transitions.append(_seconds(later) - _seconds(event))
        started = [e for e in events if e["type"] == "MapIterationStarted"]
        ended = [e for e in events if e["type"] == "MapIterationSucceeded"]
        for begin, end in zip(started, ended):
            window = [t for t in request_times if _seconds(begin) <= t <= _seconds(end)]
            if window:
                chunks.append(_seconds(end) - _seconds(begin) - (max(window) - min(window)))
    gaps = []
    ordered = sorted(request_times)
    for before in executions[:-1]:
        stop = before.get("stopDate")
        if stop is None or before.get("status") != "SUCCEEDED":
            continue
        following = next((t for t in ordered if t > stop.timestamp()), None)
        if following is not None:
            gaps.append(following - stop.timestamp())
    return PaceFigures(_median(transitions), _median(chunks), _median(gaps))
