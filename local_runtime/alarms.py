"""The synthesized alarms, evaluated on what the local run observed.

moto cannot create `AWS::CloudWatch::Alarm` or `AWS::Logs::MetricFilter` (the pre-transform
removes them), so this module reads them from the synthesized templates and evaluates them
the way CloudWatch would, on metrics rebuilt from what the local runtime saw:

| namespace | source |
| --- | --- |
| any, from EMF | the EMF records the handlers printed (the functions' logs), with their dimensions and units |
| any, from a metric filter | each `AWS::Logs::MetricFilter` of the templates applied to the log lines of its log group's function (`FilterPattern`, `MetricValue`), or to the events moto's CloudWatch Logs holds for another log group (an EventBridge rule's log target) |
| `AWS/States` (`StateMachineArn`) | the executions moto ran: `ExecutionsStarted` at their start, `ExecutionsSucceeded`/`Failed`/`TimedOut`/`Aborted` at their stop |
| `AWS/SQS` (`QueueName`) | every queue (tenants' queues, dead-letter queues), sampled by a thread: `ApproximateAgeOfOldestMessage`, `ApproximateNumberOfMessagesVisible`, `ApproximateNumberOfMessagesNotVisible` |
| `AWS/Events`, `AWS/Lambda`, anything else | no local source: the metric has no data (`unobserved()` names the alarms) |

Evaluation follows the alarm's definition: namespace, metric, dimensions, statistic (`Sum`,
`Average`, `Maximum`, `Minimum`, `SampleCount`), period, threshold, comparison, evaluation
periods, datapoints to alarm, and `TreatMissingData` (missing data is not breaching unless the
alarm says `breaching`); a metric math alarm (`Metrics`) evaluates its expression (`IF`,
`FILL`, arithmetic and comparisons) on its `MetricStat`s. A period without a datapoint is
missing, and so is an expression that reads one.

Time: the local run multiplies the templates' durations by `time_scale`, so each alarm's
period is multiplied by it too, and so is its threshold when the metric is a duration (unit
`Seconds` or `Milliseconds`: the alarm's `Unit`, the unit the EMF record declared, or
`ApproximateAgeOfOldestMessage`): the stall alarm's 1800 s become 54 s at 0.03. Windows slide
(CloudWatch aligns them to the period): an alarm fires here if some alignment of its periods
breaches, which is the strictest reading for a test that expects no alarm.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import math
import operator
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

DURATION_UNITS = {"Seconds": 1.0, "Milliseconds": 0.001, "Microseconds": 0.000001}
#: AWS metrics whose values are durations (their alarms' thresholds are scaled).
DURATION_METRICS = {("AWS/SQS", "ApproximateAgeOfOldestMessage")}
STATES_METRICS = {
    "SUCCEEDED": "ExecutionsSucceeded",
    "FAILED": "ExecutionsFailed",
    "TIMED_OUT": "ExecutionsTimedOut",
    "ABORTED": "ExecutionsAborted",
}
#: How often the queues are sampled (real seconds).
SAMPLE_INTERVAL_SECONDS = 0.25

# --- metric filter patterns -------------------------------------------------------------------


class FilterPatternError(ValueError):
    """A metric filter pattern this evaluator does not understand."""


_TOKEN = re.compile(
    r"""\s*(?:(?P<lp>\()|(?P<rp>\))|(?P<and>&&)|(?P<or>\|\|)
    |(?P<op>!=|<=|>=|=|<|>)
    |(?P<str>"(?:[^"\\]|\\.)*")
    |(?P<sel>\$[\w.\[\]-]*)
    |(?P<num>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
    |(?P<word>[A-Za-z_][\w-]*))""",
    re.VERBOSE,
)


def _tokens(text: str) -> list[tuple[str, str]]:
    position, found = 0, []
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if not match:
            raise FilterPatternError(f"cannot read filter pattern at {text[position:]!r}")
        kind = match.lastgroup
        assert kind is not None
        found.append((kind, match.group(kind)))
        position = match.end()
    return found


def _select(document: Any, selector: str) -> tuple[bool, Any]:
    """`$.a.b[0]` in a JSON document: (exists, value)."""
    value = document
    for part in re.findall(r"\.([\w-]+)|\[(\d+)\]", selector[1:]):
        key, index = part
        if key:
            if not isinstance(value, dict) or key not in value:
                return False, None
            value = value[key]
        else:
            if not isinstance(value, list) or int(index) >= len(value):
                return False, None
            value = value[int(index)]
    return True, value


def _wildcard(pattern: str) -> re.Pattern[str]:
    return re.compile("^" + ".*".join(re.escape(p) for p in pattern.split("*")) + "$", re.DOTALL)


class _JsonPattern:
    """`{ $.a = "x" && ($.b > 1 || $.c NOT EXISTS) }`: a tree of comparisons."""

    def __init__(self, body: str) -> None:
        self._tokens = _tokens(body)
        self._at = 0
        self._tree = self._or()
        if self._at != len(self._tokens):
            raise FilterPatternError(f"unexpected {self._tokens[self._at][1]!r} in filter pattern")

    def _peek(self) -> tuple[str, str] | None:
        return self._tokens[self._at] if self._at < len(self._tokens) else None

    def _take(self, kind: str | None = None) -> tuple[str, str]:
        token = self._peek()
        if token is None or (kind is not None and token[0] != kind):
            raise FilterPatternError(f"filter pattern: expected {kind or 'more'}, found {token}")
        self._at += 1
        return token

    def _or(self) -> Callable[[Any], bool]:
        terms = [self._and()]
        while (token := self._peek()) is not None and token[0] == "or":
            self._take()
            terms.append(self._and())
        return lambda doc: any(term(doc) for term in terms)

    def _and(self) -> Callable[[Any], bool]:
        terms = [self._term()]
        while (token := self._peek()) is not None and token[0] == "and":
            self._take()
            terms.append(self._term())
        return lambda doc: all(term(doc) for term in terms)

    def _term(self) -> Callable[[Any], bool]:
        if (token := self._peek()) is not None and token[0] == "lp":
            self._take()
            inner = self._or()
            self._take("rp")
            return inner
        selector = self._take("sel")[1]
        token = self._take()
        if token[0] == "word":
            words = [token[1].upper()]
            while (more := self._peek()) is not None and more[0] == "word":
                words.append(self._take()[1].upper())
            return self._keyword(selector, " ".join(words))
        if token[0] != "op":
            raise FilterPatternError(f"filter pattern: expected an operator after {selector}")
        kind, raw = self._take()
        return self._comparison(selector, token[1], kind, raw)

    @staticmethod
    def _keyword(selector: str, words: str) -> Callable[[Any], bool]:
        def test(doc: Any) -> bool:
            exists, value = _select(doc, selector)
            return {
                "IS NULL": exists and value is None,
                "NOT EXISTS": not exists,
                "IS TRUE": value is True,
                "IS FALSE": value is False,
            }.get(words, False)

        if words not in ("IS NULL", "NOT EXISTS", "IS TRUE", "IS FALSE"):
            raise FilterPatternError(f"filter pattern: unknown keyword {words!r}")
        return test

    @staticmethod
    def _comparison(selector: str, op: str, kind: str, raw: str) -> Callable[[Any], bool]:
        if kind == "str":
            matcher = _wildcard(json.loads(raw))

            def text(doc: Any) -> bool:
                exists, value = _select(doc, selector)
                if not exists or isinstance(value, (dict, list)) or value is None:
                    return False
                shown = json.dumps(value) if isinstance(value, bool) else str(value)
                hit = bool(matcher.match(shown))
                return hit if op == "=" else (not hit if op == "!=" else False)

            return text
        if kind in ("num", "word"):
            try:
                number = float(raw)
            except ValueError:
                # An unquoted word compares as a string.
                return _JsonPattern._comparison(selector, op, "str", json.dumps(raw))
            compare = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, ">": operator.gt,
                       "<=": operator.le, ">=": operator.ge}[op]

            def numeric(doc: Any) -> bool:
                exists, value = _select(doc, selector)
                if not exists or isinstance(value, bool) or not isinstance(value, (int, float)):
                    return False
                return compare(float(value), number)

            return numeric
        raise FilterPatternError(f"filter pattern: cannot compare {selector} with {raw!r}")

    def __call__(self, document: Any) -> bool:
        return self._tree(document)


class FilterPattern:
    """A CloudWatch Logs metric filter pattern: a JSON pattern (`{ ... }`) or terms.

    Terms: every term must appear (`ERROR "Task timed out"`), `?a ?b` matches either, `-x`
    excludes; the empty pattern matches every line. Space-delimited patterns (`[...]`) are not
    supported (`FilterPatternError`)."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern.strip()
        self._json: _JsonPattern | None = None
        if self.pattern.startswith("{"):
            if not self.pattern.endswith("}"):
                raise FilterPatternError(f"unbalanced JSON filter pattern {pattern!r}")
            self._json = _JsonPattern(self.pattern[1:-1])
        elif self.pattern.startswith("["):
            raise FilterPatternError("space-delimited filter patterns are not supported locally")
        else:
            self._terms = re.findall(r'[?-]?"(?:[^"\\]|\\.)*"|\S+', self.pattern)

    def document(self, line: str) -> Any:
        """The line as JSON, or None."""
        try:
            return json.loads(line)
        except ValueError:
            return None

    def matches(self, line: str) -> bool:
        if self._json is not None:
            document = self.document(line)
            return isinstance(document, dict) and self._json(document)
        required, optional, excluded = [], [], []
        for term in self._terms:
            target = required
            if term[0] in "?-":
                target = optional if term[0] == "?" else excluded
                term = term[1:]
            target.append(json.loads(term) if term.startswith('"') else term)
        if any(term in line for term in excluded):
            return False
        if optional and not any(term in line for term in optional):
            return False
        return all(term in line for term in required)


# --- metrics ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricKey:
    namespace: str
    name: str
    dimensions: frozenset[tuple[str, str]]

    @classmethod
    def of(cls, namespace: str, name: str, dimensions: Mapping[str, str] | None = None) -> MetricKey:
        return cls(namespace, name, frozenset((dimensions or {}).items()))


@dataclass
class MetricStore:
    """Datapoints by metric, with the unit each metric was published with."""

    points: dict[MetricKey, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    units: dict[MetricKey, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, key: MetricKey, when: float, value: float, unit: str | None = None) -> None:
        with self.lock:
            self.points[key].append((when, float(value)))
            if unit:
                self.units.setdefault(key, unit)

    def values(self, key: MetricKey, start: float, end: float) -> list[float]:
        """Values with start < time <= end."""
        with self.lock:
            return [v for t, v in self.points.get(key, ()) if start < t <= end]

    def times(self) -> list[float]:
        with self.lock:
            return sorted({t for points in self.points.values() for t, _ in points})

    def unit(self, key: MetricKey) -> str | None:
        return self.units.get(key)


def _statistic(values: list[float], statistic: str) -> float | None:
    if not values:
        return None
    if statistic == "Sum":
        return sum(values)
    if statistic == "Average":
        return sum(values) / len(values)
    if statistic == "Maximum":
        return max(values)
    if statistic == "Minimum":
        return min(values)
    if statistic == "SampleCount":
        return float(len(values))
    raise ValueError(f"statistic {statistic!r} is not evaluated locally")


def emf_datapoints(line: str) -> list[tuple[MetricKey, float, float, str | None]]:
    """The datapoints of one EMF record (none if the line is not one)."""
    if '"_aws"' not in line:
        return []
    try:
        record = json.loads(line)
    except ValueError:
        return []
    meta = record.get("_aws") if isinstance(record, dict) else None
    if not isinstance(meta, dict):
        return []
    when = float(meta.get("Timestamp", 0)) / 1000
    found = []
    for directive in meta.get("CloudWatchMetrics") or []:
        for dimension_set in directive.get("Dimensions") or [[]]:
            dimensions = {name: str(record.get(name)) for name in dimension_set}
            for metric in directive.get("Metrics") or []:
                value = record.get(metric["Name"])
                for one in value if isinstance(value, list) else [value]:
                    if isinstance(one, (int, float)) and not isinstance(one, bool):
                        key = MetricKey.of(directive["Namespace"], metric["Name"], dimensions)
                        found.append((key, when, float(one), metric.get("Unit")))
    return found


def _line_time(document: Any, default: float) -> float:
    """A log line's own time (`timestamp` of the handlers' and runtime's lines, `time` of the
    platform's records), else when it was read."""
    if isinstance(document, dict):
        for name in ("timestamp", "time"):
            value = document.get(name)
            if isinstance(value, str):
                try:
                    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
                except ValueError:
                    continue
    return default


# --- the alarms of the templates --------------------------------------------------------------


@dataclass(frozen=True)
class MetricQuery:
    key: MetricKey | None  # None: a dimension that could not be resolved (no data)
    statistic: str
    period: float  # seconds, as in the template


@dataclass(frozen=True)
class AlarmSpec:
    """One `AWS::CloudWatch::Alarm` with its intrinsics resolved."""

    name: str
    stack: str
    threshold: float
    comparison: str
    evaluation_periods: int
    datapoints_to_alarm: int
    treat_missing: str
    unit: str | None
    metric: MetricQuery | None = None
    queries: dict[str, MetricQuery] = field(default_factory=dict)
    expression: str | None = None

    @property
    def keys(self) -> list[MetricKey | None]:
        return [self.metric.key] if self.metric else [q.key for q in self.queries.values()]


COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "GreaterThanOrEqualToThreshold": operator.ge,
    "GreaterThanThreshold": operator.gt,
    "LessThanThreshold": operator.lt,
    "LessThanOrEqualToThreshold": operator.le,
}


class _Resolver:
    """Resolves the intrinsics of a stack's alarm and filter properties to physical values."""

    def __init__(self, resources: Mapping[str, tuple[str, str]], region: str, account: str) -> None:
        self.resources, self.region, self.account = resources, region, account

    def __call__(self, value: Any) -> str | None:
        if isinstance(value, (str, int, float)):
            return str(value)
        if not isinstance(value, dict) or len(value) != 1:
            return None
        (function, argument), = value.items()
        if function == "Ref":
            pseudo = {"AWS::Region": self.region, "AWS::AccountId": self.account, "AWS::Partition": "aws",
                      "AWS::URLSuffix": "amazonaws.com"}
            if argument in pseudo:
                return pseudo[argument]
            found = self.resources.get(argument)
            return found[1] if found else None
        if function == "Fn::GetAtt":
            logical, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
            found = self.resources.get(logical)
            if not found:
                return None
            physical = found[1]
            if attribute == "QueueName":
                return physical.rstrip("/").rsplit("/", 1)[-1]
            if attribute in ("Name", "LogGroupName") or attribute == "Arn" and physical.startswith("arn:"):
                return physical
            return None
        if function == "Fn::Join":
            separator, parts = argument
            resolved = [self(part) for part in parts]
            return None if any(p is None for p in resolved) else separator.join(resolved)  # type: ignore[arg-type]
        return None


def _query(stat: Mapping[str, Any], resolve: _Resolver) -> MetricQuery:
    metric = stat["Metric"]
    dimensions = {d["Name"]: resolve(d["Value"]) for d in metric.get("Dimensions") or []}
    key = None if any(v is None for v in dimensions.values()) else MetricKey.of(
        metric["Namespace"], metric["MetricName"], dimensions  # type: ignore[arg-type]
    )
    return MetricQuery(key, stat["Stat"], float(stat["Period"]))


def alarm_specs(templates: Mapping[str, Mapping[str, Any]], resolvers: Mapping[str, _Resolver]) -> list[AlarmSpec]:
    """Every `AWS::CloudWatch::Alarm` of the templates (stack name -> template)."""
    specs = []
    for stack, template in templates.items():
        resolve = resolvers[stack]
        for resource in (template.get("Resources") or {}).values():
            if resource.get("Type") != "AWS::CloudWatch::Alarm":
                continue
            props = resource.get("Properties") or {}
            periods = int(props.get("EvaluationPeriods", 1))
            common = {
                "name": resolve(props.get("AlarmName")) or "(unnamed)",
                "stack": stack,
                "threshold": float(props.get("Threshold", 0)),
                "comparison": props.get("ComparisonOperator", "GreaterThanOrEqualToThreshold"),
                "evaluation_periods": periods,
                "datapoints_to_alarm": int(props.get("DatapointsToAlarm", periods)),
                "treat_missing": props.get("TreatMissingData", "missing"),
                "unit": props.get("Unit"),
            }
            if "Metrics" in props:
                queries, expression = {}, None
                for entry in props["Metrics"]:
                    if "MetricStat" in entry:
                        queries[entry["Id"]] = _query(entry["MetricStat"], resolve)
                    if "Expression" in entry and entry.get("ReturnData", True):
                        expression = entry["Expression"]
                    elif "MetricStat" in entry and entry.get("ReturnData", True) and expression is None:
                        expression = entry["Id"]
                specs.append(AlarmSpec(**common, queries=queries, expression=expression))
            else:
                stat = {
                    "Metric": {"Namespace": props["Namespace"], "MetricName": props["MetricName"],
                               "Dimensions": props.get("Dimensions") or []},
                    "Stat": props.get("Statistic") or props.get("ExtendedStatistic"),
                    "Period": props.get("Period", 300),
                }
                specs.append(AlarmSpec(**common, metric=_query(stat, resolve)))
    return specs


# --- metric math -------------------------------------------------------------------------------


def evaluate_expression(expression: str, values: Mapping[str, float | None]) -> float | None:
    """A metric math expression over single values (None: no datapoint). Supports numbers, the
    ids, + - * /, comparisons (1/0), `IF(c, a, b)` and `FILL(m, v)`; None propagates, a
    division by zero gives None (CloudWatch drops the point)."""
    tree = ast.parse(expression, mode="eval").body

    def ev(node: ast.AST) -> float | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.Name):
            if node.id not in values:
                raise ValueError(f"metric math: unknown id {node.id!r}")
            return values[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = ev(node.operand)
            return None if inner is None else -inner
        if isinstance(node, ast.BinOp):
            left, right = ev(node.left), ev(node.right)
            if left is None or right is None:
                return None
            if isinstance(node.op, ast.Div):
                return None if right == 0 else left / right
            ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
            return ops[type(node.op)](left, right)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, right = ev(node.left), ev(node.comparators[0])
            if left is None or right is None:
                return None
            ops = {ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Lt: operator.lt, ast.LtE: operator.le,
                   ast.Eq: operator.eq, ast.NotEq: operator.ne}
            return 1.0 if ops[type(node.ops[0])](left, right) else 0.0
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name, args = node.func.id.upper(), node.args
            if name == "IF" and len(args) in (2, 3):
                condition = ev(args[0])
                if condition is None:
                    return None
                if condition:
                    return ev(args[1])
                return ev(args[2]) if len(args) == 3 else None
            if name == "FILL" and len(args) == 2:
                value = ev(args[0])
                return ev(args[1]) if value is None else value
        raise ValueError(f"metric math: {ast.unparse(node)!r} is not evaluated locally")

    return ev(tree)


# --- evaluation -------------------------------------------------------------------------------


@dataclass(frozen=True)
class AlarmState:
    name: str
    in_alarm: bool
    values: tuple[float | None, ...]  # one per evaluation period, newest first
    threshold: float  # scaled


class LocalAlarms:
    """The templates' alarms on the local run's observations (see the module docstring).

    ``logs(function_name) -> text``, ``executions(tenant) -> [...]`` and ``queue_stats() ->
    {queue name: {metric: value}}`` are the local runtime's observers; ``functions`` maps
    each function name to its log group name (``/aws/lambda/<name>`` unless said)."""

    def __init__(
        self,
        templates: Mapping[str, Mapping[str, Any]],
        stacks: Mapping[str, Mapping[str, tuple[str, str]]],
        *,
        time_scale: float,
        function_names: Iterable[str],
        logs: Callable[[str], str],
        state_machines: Mapping[str, str],  # tenant -> state machine ARN
        executions: Callable[[str], list[dict[str, Any]]],
        queue_stats: Callable[[], Mapping[str, Mapping[str, float]]] | None = None,
        log_events: Callable[[str], list[tuple[str, float, str]]] | None = None,
        region: str = "us-east-1",
        account: str = "123456789012",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.time_scale = time_scale
        self._logs, self._executions, self._queue_stats = logs, executions, queue_stats
        self._log_events = log_events
        self._seen_events: set[tuple[str, str]] = set()
        self._first_seen_closed: dict[str, float] = {}
        self._state_machines = dict(state_machines)
        self._clock = clock
        resolvers = {name: _Resolver(stacks.get(name, {}), region, account) for name in templates}
        self.specs = alarm_specs(templates, resolvers)
        self._filters = self._metric_filters(templates, resolvers)
        self._function_names = list(function_names)
        self._offsets: dict[str, int] = {}
        self._log_points = MetricStore()
        self._samples = MetricStore()
        self._started = clock()
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    # -- sources --------------------------------------------------------------------------------

    @staticmethod
    def _metric_filters(templates: Mapping[str, Mapping[str, Any]], resolvers: Mapping[str, _Resolver]) -> list[
        tuple[str | None, FilterPattern, list[dict[str, Any]]]
    ]:
        found = []
        for stack, template in templates.items():
            for resource in (template.get("Resources") or {}).values():
                if resource.get("Type") != "AWS::Logs::MetricFilter":
                    continue
                props = resource.get("Properties") or {}
                found.append((resolvers[stack](props.get("LogGroupName")), FilterPattern(props.get("FilterPattern", "")),
                              list(props.get("MetricTransformations") or [])))
        return found

    def _read_logs(self) -> None:
        """Read the functions' new log lines: EMF records and metric filter matches."""
        now = self._clock()
        for function in self._function_names:
            text = self._logs(function)
            start = self._offsets.get(function, 0)
            end = text.rfind("\n") + 1
            if end <= start:
                continue
            self._offsets[function] = end
            group = f"/aws/lambda/{function}"
            filters = [(p, t) for g, p, t in self._filters if g == group]
            for line in text[start:end].splitlines():
                for key, when, value, unit in emf_datapoints(line):
                    self._log_points.add(key, when, value, unit)
                for pattern, transformations in filters:
                    if not pattern.matches(line):
                        continue
                    document = pattern.document(line)
                    when = _line_time(document, now)
                    for transformation in transformations:
                        self._add_filter_point(transformation, document, when)

        self._read_other_groups()

    def _read_other_groups(self) -> None:
        """Metric filters on log groups that are not a function's: their events from moto."""
        if self._log_events is None:
            return
        functions = {f"/aws/lambda/{name}" for name in self._function_names}
        for group, pattern, transformations in self._filters:
            if group is None or group in functions:
                continue
            for event_id, when, message in self._log_events(group):
                if (group, event_id) in self._seen_events:
                    continue
                self._seen_events.add((group, event_id))
                if pattern.matches(message):
                    for transformation in transformations:
                        self._add_filter_point(transformation, pattern.document(message), when)

    def _add_filter_point(self, transformation: Mapping[str, Any], document: Any, when: float) -> None:
        raw = str(transformation.get("MetricValue", "1"))
        if raw.startswith("$."):
            exists, value = _select(document, raw)
            if not exists or not isinstance(value, (int, float)):
                return
        else:
            value = float(raw)
        dimensions = {}
        for name, selector in (transformation.get("Dimensions") or {}).items():
            exists, found = _select(document, selector) if str(selector).startswith("$.") else (True, selector)
            if not exists:
                return
            dimensions[name] = str(found)
        key = MetricKey.of(transformation["MetricNamespace"], transformation["MetricName"], dimensions)
        self._log_points.add(key, when, float(value), transformation.get("Unit"))

    def _execution_points(self) -> MetricStore:
        store = MetricStore()
        for tenant, arn in self._state_machines.items():
            for execution in self._executions(tenant):
                dimensions = {"StateMachineArn": arn}
                started = execution.get("startDate")
                if isinstance(started, dt.datetime):
                    store.add(MetricKey.of("AWS/States", "ExecutionsStarted", dimensions), started.timestamp(), 1)
                name = STATES_METRICS.get(execution.get("status", ""))
                if name:
                    store.add(MetricKey.of("AWS/States", name, dimensions), self._stop_time(execution), 1)
        return store

    def _stop_time(self, execution: Mapping[str, Any]) -> float:
        """When a closed execution stopped: its `stopDate`, or (moto gives a timed-out execution
        none) when this evaluator first saw it closed."""
        stopped = execution.get("stopDate")
        if isinstance(stopped, dt.datetime):
            return stopped.timestamp()
        return self._first_seen_closed.setdefault(str(execution.get("executionArn") or id(execution)), self._clock())

    def sample(self) -> None:
        """Record one sample of the queues' metrics now."""
        if self._queue_stats is None:
            return
        now = self._clock()
        for queue, metrics in self._queue_stats().items():
            for name, value in metrics.items():
                unit = "Seconds" if name == "ApproximateAgeOfOldestMessage" else "Count"
                self._samples.add(MetricKey.of("AWS/SQS", name, {"QueueName": queue}), now, value, unit)

    def start_sampling(self, interval: float = SAMPLE_INTERVAL_SECONDS) -> None:
        """Sample the queues every ``interval`` seconds in a thread, until `stop`."""

        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    self.sample()
                except Exception:  # noqa: BLE001 - moto is shutting down; the next sample may work
                    continue

        self._sampler = threading.Thread(target=loop, name="local-alarms-sampler", daemon=True)
        self._sampler.start()

    def stop(self) -> None:
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(timeout=2)

    # -- evaluation -----------------------------------------------------------------------------

    def _stores(self) -> list[MetricStore]:
        self._read_logs()
        return [self._log_points, self._samples, self._execution_points()]

    def _known(self, stores: list[MetricStore]) -> set[MetricKey]:
        return {key for store in stores for key in store.points}

    def _values(self, stores: list[MetricStore], query: MetricQuery, start: float, end: float) -> float | None:
        if query.key is None:
            return None
        values = [v for store in stores for v in store.values(query.key, start, end)]
        return _statistic(values, query.statistic)

    def _is_duration(self, spec: AlarmSpec, stores: list[MetricStore]) -> float | None:
        """The factor to seconds if the alarm's metric is a duration, else None."""
        if spec.metric is None or spec.metric.key is None:
            return None
        units = [spec.unit] + [store.unit(spec.metric.key) for store in stores]
        for unit in units:
            if unit in DURATION_UNITS:
                return DURATION_UNITS[unit]
        key = spec.metric.key
        return 1.0 if (key.namespace, key.name) in DURATION_METRICS else None

    def scaled_threshold(self, spec: AlarmSpec, stores: list[MetricStore] | None = None) -> float:
        stores = stores if stores is not None else self._stores()
        return spec.threshold * self.time_scale if self._is_duration(spec, stores) else spec.threshold

    def _state(self, spec: AlarmSpec, stores: list[MetricStore], at: float) -> AlarmState:
        period = (spec.metric.period if spec.metric else max(q.period for q in spec.queries.values())) * self.time_scale
        threshold = self.scaled_threshold(spec, stores)
        compare = COMPARISONS[spec.comparison]
        values: list[float | None] = []
        for index in range(spec.evaluation_periods):
            end = at - index * period
            if spec.metric is not None:
                values.append(self._values(stores, spec.metric, end - period, end))
            else:
                inputs = {qid: self._values(stores, q, end - period, end) for qid, q in spec.queries.items()}
                values.append(evaluate_expression(spec.expression or "", inputs))
        breaching = sum(
            (compare(v, threshold) if v is not None and not math.isnan(v) else spec.treat_missing == "breaching")
            for v in values
        )
        return AlarmState(spec.name, breaching >= spec.datapoints_to_alarm, tuple(values), threshold)

    def states(self, at: float | None = None) -> dict[str, AlarmState]:
        """Every alarm's state at ``at`` (default: now)."""
        stores = self._stores()
        at = self._clock() if at is None else at
        return {spec.name: self._state(spec, stores, at) for spec in self.specs}

    def in_alarm(self, at: float | None = None) -> set[str]:
        """The alarms in ALARM at ``at`` (default: now)."""
        return {name for name, state in self.states(at).items() if state.in_alarm}

    def fired(self, since: float | None = None) -> set[str]:
        """The alarms that were in ALARM at some moment from ``since`` (default: the start of
        observation) to now: evaluated at every datapoint's time and on a grid of a tenth of
        the shortest scaled period."""
        stores = self._stores()
        start, end = (self._started if since is None else since), self._clock()
        periods = [(s.metric.period if s.metric else min(q.period for q in s.queries.values())) for s in self.specs]
        step = max(0.05, min(periods, default=300) * self.time_scale / 10)
        instants = {t for store in stores for t in store.times() if start <= t <= end}
        count = int((end - start) / step) + 1
        instants.update(start + i * step for i in range(count))
        instants.add(end)
        fired: set[str] = set()
        for at in sorted(instants):
            for spec in self.specs:
                if spec.name not in fired and self._state(spec, stores, at).in_alarm:
                    fired.add(spec.name)
        return fired

    def unobserved(self) -> set[str]:
        """Alarms none of whose metrics has a local source or has been seen (always no data
        here, e.g. AWS/Events FailedInvocations)."""
        stores = self._stores()
        known = self._known(stores)
        local_namespaces = {"AWS/States", "AWS/SQS"}
        names = set()
        for spec in self.specs:
            keys = spec.keys
            if all(k is None or (k not in known and k.namespace.startswith("AWS/") and k.namespace not in local_namespaces)
                   for k in keys):
                names.add(spec.name)
        return names


def moto_queue_stats(account: str, region: str) -> Callable[[], dict[str, dict[str, float]]]:
    """A sampler of every queue in moto's backend (the server runs in this process: tenants'
    queues, dead-letter queues): the age of the oldest message not deleted, and the visible
    and in-flight counts."""

    def stats() -> dict[str, dict[str, float]]:
        from moto.sqs.models import sqs_backends

        backend = sqs_backends[account][region]
        now = time.time()
        found: dict[str, dict[str, float]] = {}
        for name, queue in list(backend.queues.items()):
            messages = list(queue._messages)  # noqa: SLF001 - no API gives the oldest message's age
            sent = [m.sent_timestamp / 1000 for m in messages if m.sent_timestamp]
            found[name] = {
                "ApproximateAgeOfOldestMessage": max(0.0, now - min(sent)) if sent else 0.0,
                "ApproximateNumberOfMessagesVisible": float(sum(1 for m in messages if m.visible)),
                "ApproximateNumberOfMessagesNotVisible": float(sum(1 for m in messages if not m.visible)),
            }
        return found

    return stats


def moto_log_events(client: Callable[[str], Any]) -> Callable[[str], list[tuple[str, float, str]]]:
    """A reader of a log group that is not a function's (e.g. an EventBridge rule's log
    target) from moto's CloudWatch Logs: (event id, time, message); none if it does not exist."""

    def read(group: str) -> list[tuple[str, float, str]]:
        logs = client("logs")
        events: list[tuple[str, float, str]] = []
        kwargs: dict[str, Any] = {"logGroupName": group}
        try:
            while True:
                page = logs.filter_log_events(**kwargs)
                events += [(e["eventId"], e["timestamp"] / 1000, e["message"]) for e in page.get("events", [])]
                if not page.get("nextToken") or not page.get("events"):
                    return events
                kwargs["nextToken"] = page["nextToken"]
        except Exception:  # noqa: BLE001 - no such group (yet): no data
            return events

    return read
