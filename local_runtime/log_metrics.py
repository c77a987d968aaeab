"""The templates' CloudWatch Logs metric filters, applied to the log groups moto holds.

moto's CloudFormation does not create `AWS::Logs::MetricFilter`, and moto's CloudWatch Logs
never turns log events into metrics. `LogMetricPublisher.publish()` does what CloudWatch would:
for each metric filter of the synthesized templates whose log group exists in moto, it counts
the events logged since the last call that match the filter's pattern (moto's own
`FilterLogEvents`) and puts the metric (`PutMetricData`, value x count). No domain logic: the
filters, names and values all come from the templates. (The functions' log groups stay empty
in moto: their workers log locally, see `LocalPipeline.logs`.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LogMetricFilter:
    """One `AWS::Logs::MetricFilter` of a template, its log group resolved to a name."""

    stack: str
    logical_id: str
    log_group: str
    pattern: str
    namespace: str
    metric: str
    value: float


def metric_filters(
    templates: dict[str, dict[str, Any]], physical_id: Callable[[str, str], str | None]
) -> list[LogMetricFilter]:
    """Every metric filter with a literal value; ``physical_id(stack, logical_id)`` resolves a
    `Ref` to a log group of the same stack."""
    found: list[LogMetricFilter] = []
    for stack, template in templates.items():
        for logical_id, resource in (template.get("Resources") or {}).items():
            if resource.get("Type") != "AWS::Logs::MetricFilter":
                continue
            props = resource.get("Properties") or {}
            group = props.get("LogGroupName")
            if isinstance(group, dict) and "Ref" in group:
                group = physical_id(stack, group["Ref"])
            for transformation in props.get("MetricTransformations") or []:
                try:
                    value = float(transformation.get("MetricValue", "1"))
                except ValueError:
                    continue  # `$.field` values: not needed here
                if isinstance(group, str):
                    found.append(LogMetricFilter(
                        stack, logical_id, group, str(props.get("FilterPattern", "")),
                        transformation["MetricNamespace"], transformation["MetricName"], value,
                    ))
    return found


class LogMetricPublisher:
    """Counts new matching log events per filter and publishes them as CloudWatch metrics."""

    def __init__(self, client: Callable[[str], Any], filters: list[LogMetricFilter]) -> None:
        self._client = client
        self._filters = filters
        self._seen: dict[tuple[str, str], set[str]] = {}

    def publish(self) -> dict[tuple[str, str], float]:
        """Publish what was logged since the last call; returns (namespace, metric) -> value put."""
        logs, cloudwatch = self._client("logs"), self._client("cloudwatch")
        published: dict[tuple[str, str], float] = {}
        for spec in self._filters:
            seen = self._seen.setdefault((spec.stack, spec.logical_id), set())
            try:
                new = [e for e in _events(logs, spec) if e["eventId"] not in seen]
            except logs.exceptions.ResourceNotFoundException:
                continue  # the log group is not in moto (a function's: its workers log locally)
            if not new:
                continue
            seen.update(e["eventId"] for e in new)
            value = spec.value * len(new)
            cloudwatch.put_metric_data(
                Namespace=spec.namespace, MetricData=[{"MetricName": spec.metric, "Value": value, "Unit": "Count"}]
            )
            key = (spec.namespace, spec.metric)
            published[key] = published.get(key, 0.0) + value
        return published


def _events(logs: Any, spec: LogMetricFilter) -> list[dict[str, Any]]:
    kwargs: dict[str, Any] = {"logGroupName": spec.log_group}
    if spec.pattern:
        kwargs["filterPattern"] = spec.pattern
    events: list[dict[str, Any]] = []
    while True:
        page = logs.filter_log_events(**kwargs)
        events.extend(page.get("events", []))
        token = page.get("nextToken")
        if not token or token == kwargs.get("nextToken"):
            return events
        kwargs["nextToken"] = token
