"""Every alarm watches a metric that something in its own stack publishes, in the unit it compares.

CloudWatch finds no data for an alarm on a metric nobody publishes (a misspelled name, another
dimension set, a queue of another stack), and the alarm stays OK forever. That bug class is
caught here on the synthesized templates (every stack of the default app, and of a sharded app
with a `key_sequence` tenant), not by evaluating alarms: each metric an `AWS::CloudWatch::Alarm`
watches (its own, or each `MetricStat` of its metric math) must be

- in `contract.METRIC_NAMESPACE`: an EMF metric of `contract.EMF_METRICS` (the table the
  handlers publish from, checked in tests/handlers/support.py `emf_records`) with its dimension
  set, the stack's tenant, and the publishing function in the stack; or the metric of an
  `AWS::Logs::MetricFilter` on a log group of the stack;
- `AWS/SQS` of a queue, `AWS/States` of a state machine or of its alias, `AWS/Events` of a rule
  (with the rule's bus unless it is the default one), each of the same stack;

and a duration alarm's threshold is its tenants-file setting in the unit the metric is
published in. The error-log filter's pattern is checked against the lines Lambda writes.
"""

from __future__ import annotations

import copy
import io
import json
import logging
import re
from collections.abc import Callable, Mapping
from contextlib import redirect_stderr
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from lambdas import contract
from pipeline_constructs.config import TenantConfig, load_config
from tests.conftest import DEFAULT_TENANTS, Synthesized, synthesize
from tests.test_sharded_stacks import SHARDED

#: The AWS metrics the app's alarms may watch, with the unit each is published in (the metric
#: references of SQS, Step Functions and EventBridge in the CloudWatch user guide).
AWS_METRICS: dict[str, dict[str, str]] = {
    "AWS/SQS": {
        "ApproximateAgeOfOldestMessage": "Seconds",
        "ApproximateNumberOfMessagesVisible": "Count",
        "ApproximateNumberOfMessagesNotVisible": "Count",
    },
    "AWS/States": dict.fromkeys(
        (
            "ExecutionsStarted",
            "ExecutionsSucceeded",
            "ExecutionsFailed",
            "ExecutionsTimedOut",
            "ExecutionsAborted",
            "ExecutionThrottled",
        ),
        "Count",
    ),
    "AWS/Events": dict.fromkeys(("FailedInvocations", "InvocationsFailedToBeSentToDlq"), "Count"),
}
UNITS_PER_SECOND = {"Seconds": 1, "Milliseconds": 1_000, "Microseconds": 1_000_000}
#: The tenants-file setting (in seconds) each duration alarm's threshold comes from.
DURATION_SETTINGS: dict[tuple[str, str], tuple[str, Callable[[TenantConfig], int]]] = {
    (contract.METRIC_NAMESPACE, contract.HEAD_WAIT_METRIC): (
        "alarms.stall_after_seconds",
        lambda tenant: tenant.alarms.stall_after_seconds,
    ),
    (contract.METRIC_NAMESPACE, contract.SEQUENCE_GAP_METRIC): (
        "ordering.gap_alarm_after_seconds",
        lambda tenant: tenant.ordering.gap_alarm_after_seconds,
    ),
    ("AWS/SQS", "ApproximateAgeOfOldestMessage"): (
        "alarms.queue_age_seconds",
        lambda tenant: tenant.alarms.queue_age_seconds,
    ),
    (contract.METRIC_NAMESPACE, contract.PAUSED_METRIC): (
        "alarms.paused_alarm_after_seconds",
        lambda tenant: tenant.alarms.paused_alarm_after_seconds,
    ),
}


@dataclass(frozen=True)
class Watched:
    """One metric an alarm watches, as the template writes it."""

    alarm: str
    namespace: str
    name: str
    dimensions: dict[str, Any]
    unit: str | None  # the alarm's `Unit` for it, if it sets one
    threshold: float | None  # the alarm's threshold when it compares this metric's value (see `watched`)
    #: False for a metric a math expression only tests (`IF(paused > 0, 0, age)`: `paused`).
    compared: bool = True


def watched(alarm: Mapping[str, Any]) -> list[Watched]:
    """The metrics of one alarm's properties: its own, or each `MetricStat` of its math."""
    name = alarm["AlarmName"]
    if "Metrics" not in alarm:
        return [
            Watched(
                name,
                alarm["Namespace"],
                alarm["MetricName"],
                _dimensions(alarm),
                alarm.get("Unit"),
                alarm["Threshold"],
            )
        ]
    # `IF(condition, constant, id)`: the alarm compares the value of `id`, the condition's
    # metrics are only tested; any other expression compares no one metric's value.
    expression = next(q["Expression"] for q in alarm["Metrics"] if "Expression" in q)
    value = re.fullmatch(r"IF\((.*), [0-9.]+, (\w+)\)", expression)
    stats = [query for query in alarm["Metrics"] if "MetricStat" in query]
    return [
        Watched(
            name,
            q["MetricStat"]["Metric"]["Namespace"],
            q["MetricStat"]["Metric"]["MetricName"],
            _dimensions(q["MetricStat"]["Metric"]),
            q["MetricStat"].get("Unit"),
            alarm["Threshold"] if value and q["Id"] == value[2] else None,
            compared=not (value and q["Id"] in re.findall(r"\w+", value[1]) and q["Id"] != value[2]),
        )
        for q in stats
    ]


def _dimensions(metric: Mapping[str, Any]) -> dict[str, Any]:
    return {d["Name"]: d["Value"] for d in metric.get("Dimensions") or []}


def of_type(template: Mapping[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    """The properties of the template's resources of one type, by logical id."""
    return {
        logical_id: r.get("Properties", {})
        for logical_id, r in template["Resources"].items()
        if r["Type"] == resource_type
    }


class Stack:
    """One template's resources, and the tenant whose functions it holds (None: the shared stack)."""

    def __init__(self, template: Mapping[str, Any], tenants: Mapping[str, TenantConfig]) -> None:
        self._template = template
        self.functions = list(self.of_type("AWS::Lambda::Function").values())
        ids = {
            f.get("Environment", {}).get("Variables", {}).get(contract.env_name("tenant_id"))
            for f in self.functions
        }
        ids.discard(None)
        assert len(ids) <= 1, f"a stack holds the functions of tenants {sorted(ids)}"
        self.tenant_id = next(iter(ids), None)
        self.tenant = tenants[self.tenant_id] if self.tenant_id else None

    def of_type(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return of_type(self._template, resource_type)


def alarm_problems(template: Mapping[str, Any], tenants: Mapping[str, TenantConfig]) -> list[str]:
    """What is wrong with the metrics the template's alarms watch (empty: nothing)."""
    stack = Stack(template, tenants)
    problems = []
    for alarm in stack.of_type("AWS::CloudWatch::Alarm").values():
        for metric in watched(alarm):
            where = f"alarm {metric.alarm}: {metric.namespace} {metric.name}"
            check = PUBLISHERS.get(metric.namespace)
            if check is None:
                problems.append(f"{where}: no check knows who publishes namespace {metric.namespace}")
                continue
            unit, found = check(stack, metric)
            if unit is not None:
                found += _unit_problems(stack, metric, unit)
            problems += [f"{where}: {problem}" for problem in found]
    return problems


def _own_metric(stack: Stack, metric: Watched) -> tuple[str | None, list[str]]:
    """An EMF metric of a handler in the stack, or a metric filter's of the stack."""
    emf = contract.EMF_METRICS.get(metric.name)
    if emf is not None:
        return emf.unit, _emf_problems(stack, metric, emf)
    filters = [
        (props, t)
        for props in stack.of_type("AWS::Logs::MetricFilter").values()
        for t in props["MetricTransformations"]
        if (t["MetricNamespace"], t["MetricName"]) == (metric.namespace, metric.name)
    ]
    if not filters:
        return None, ["no handler publishes it (contract.EMF_METRICS) and no metric filter of the stack does"]
    problems = []
    for props, transformation in filters:
        group = props["LogGroupName"]
        if not (isinstance(group, dict) and group.get("Ref") in stack.of_type("AWS::Logs::LogGroup")):
            problems.append(f"its metric filter reads log group {group!r}, not one of the stack's")
        problems += _dimension_problems(metric, set(transformation.get("Dimensions") or {}))
    return filters[0][1].get("Unit", "None"), problems


def _emf_problems(stack: Stack, metric: Watched, emf: contract.EmfMetric) -> list[str]:
    problems = _dimension_problems(metric, set(contract.EMF_DIMENSIONS))
    tenant = metric.dimensions.get(contract.TENANT_DIMENSION)
    if tenant is not None and tenant != stack.tenant_id:
        problems.append(
            f"{contract.TENANT_DIMENSION} = {tenant!r} is not the stack's tenant {stack.tenant_id!r}"
        )
    emitters = [f for f in stack.functions if f.get("Handler") == f"lambdas.{emf.emitter}.handler"]
    if not emitters:
        problems.append(f"no function of the stack runs lambdas.{emf.emitter}.handler, which publishes it")
    for function in emitters:
        # The controller reads its namespace from its environment; register uses the constant.
        namespace = (
            function.get("Environment", {}).get("Variables", {}).get(contract.env_name("metric_namespace"))
        )
        if namespace not in (None, metric.namespace):
            problems.append(f"{emf.emitter} publishes it into namespace {namespace!r}")
    return problems


def _queue_metric(stack: Stack, metric: Watched) -> tuple[str | None, list[str]]:
    unit, problems = _aws_metric(metric, {"QueueName"})
    queue = metric.dimensions.get("QueueName")
    queues = stack.of_type("AWS::SQS::Queue")
    if isinstance(queue, dict):
        logical_id, attribute = queue.get("Fn::GetAtt", [None, None])
        ours = attribute == "QueueName" and logical_id in queues
    else:
        ours = queue in [q.get("QueueName") for q in queues.values()]
    if not ours:
        problems.append(f"QueueName {queue!r} is not a queue of the stack")
    return unit, problems


def _state_machine_metric(stack: Stack, metric: Watched) -> tuple[str | None, list[str]]:
    """A state machine of the stack, by its `Ref`, or one of its aliases of the stack, by
    `<Ref>:<alias name>` (the workflow alarms watch both: files start through `live`)."""
    unit, problems = _aws_metric(metric, {"StateMachineArn"})
    arn = metric.dimensions.get("StateMachineArn")
    machines = stack.of_type("AWS::StepFunctions::StateMachine")
    if not (isinstance(arn, dict) and (arn.get("Ref") in machines or _alias_of(stack, arn) in machines)):
        problems.append(f"StateMachineArn {arn!r} is not a state machine of the stack nor an alias of one")
    return unit, problems


def _alias_of(stack: Stack, arn: dict[str, Any]) -> str | None:
    """The state machine whose alias of the stack `arn` is (`{"Fn::Join": ["", [{"Ref": <machine>},
    ":<alias name>"]]}`, the alias routing to a version of that machine), or None."""
    parts = arn.get("Fn::Join", [None, []])[1]
    if not (
        len(parts) == 2
        and isinstance(parts[0], dict)
        and isinstance(parts[1], str)
        and parts[1].startswith(":")
    ):
        return None
    machine, name = parts[0].get("Ref"), parts[1][1:]
    versions = stack.of_type("AWS::StepFunctions::StateMachineVersion")
    for alias in stack.of_type("AWS::StepFunctions::StateMachineAlias").values():
        routed = {
            versions.get(route["StateMachineVersionArn"].get("Fn::GetAtt", [None])[0], {})
            .get("StateMachineArn", {})
            .get("Ref")
            for route in alias.get("RoutingConfiguration", [])
        }
        if alias.get("Name") == name and routed == {machine}:
            return machine
    return None


def _rule_metric(stack: Stack, metric: Watched) -> tuple[str | None, list[str]]:
    """A rule of the stack by name; a rule on a custom bus publishes with `EventBusName` too."""
    name = metric.dimensions.get("RuleName")
    rules = [r for r in stack.of_type("AWS::Events::Rule").values() if r.get("Name") == name]
    if not rules:
        return _aws_metric(metric, set(metric.dimensions))[0], [
            f"RuleName {name!r} is not a rule of the stack"
        ]
    bus = rules[0].get("EventBusName")
    custom = bus not in (None, "default")
    unit, problems = _aws_metric(metric, {"RuleName", "EventBusName"} if custom else {"RuleName"})
    if custom and "EventBusName" in metric.dimensions and metric.dimensions["EventBusName"] != bus:
        problems.append(f"EventBusName {metric.dimensions['EventBusName']!r} is not the rule's bus {bus!r}")
    return unit, problems


def _aws_metric(metric: Watched, dimensions: set[str]) -> tuple[str | None, list[str]]:
    unit = AWS_METRICS[metric.namespace].get(metric.name)
    problems = [] if unit else [f"{metric.namespace} publishes no metric {metric.name}"]
    return unit, problems + _dimension_problems(metric, dimensions)


def _dimension_problems(metric: Watched, published: set[str]) -> list[str]:
    if set(metric.dimensions) == published:
        return []
    return [f"dimensions {sorted(metric.dimensions)}, but it is published with {sorted(published)}"]


def _unit_problems(stack: Stack, metric: Watched, unit: str) -> list[str]:
    problems = []
    if metric.unit is not None and metric.unit != unit:
        problems.append(f"the alarm reads unit {metric.unit}, but it is published in {unit}")
    if unit not in UNITS_PER_SECOND:
        return problems
    setting = DURATION_SETTINGS.get((metric.namespace, metric.name))
    if not metric.compared and setting is not None:
        return problems  # only tested (> 0), never compared with a threshold
    if setting is None or metric.threshold is None or stack.tenant is None:
        return [*problems, f"a duration in {unit} whose threshold no tenants-file setting gives"]
    field, read = setting
    expected = read(stack.tenant) * UNITS_PER_SECOND[unit]
    if metric.threshold != expected:
        problems.append(
            f"threshold {metric.threshold:g} {unit}, but {field} is {read(stack.tenant)} s "
            f"({expected:g} {unit})"
        )
    return problems


PUBLISHERS: dict[str, Callable[[Stack, Watched], tuple[str | None, list[str]]]] = {
    contract.METRIC_NAMESPACE: _own_metric,
    "AWS/SQS": _queue_metric,
    "AWS/States": _state_machine_metric,
    "AWS/Events": _rule_metric,
}


# --- the apps ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class App:
    templates: dict[str, dict[str, Any]]
    tenants: dict[str, TenantConfig]


@pytest.fixture(scope="module")
def default_app(synthesized: Synthesized) -> App:
    return App(synthesized.templates, {t.id: t for t in load_config(DEFAULT_TENANTS).tenants})


@pytest.fixture(scope="module")
def sharded_app(tmp_path_factory: pytest.TempPathFactory) -> App:
    """tests/test_sharded_stacks.py's app (rules on shard buses) plus a `key_sequence` tenant
    (the sequence-gap alarm)."""
    document = yaml.safe_load(SHARDED)
    document["tenants"].append(
        {
            "id": "seqco",
            "prefix": "seqco/",
            "alarms": {"stall_after_seconds": 300},
            "ordering": {
                "by": "key_sequence",
                "sequence_pattern": r"(?P<seq>\d+)\.csv$",
                "gap_alarm_after_seconds": 120,
            },
        }
    )
    directory = tmp_path_factory.mktemp("sharded-alarms")
    (directory / "tenants.yaml").write_text(yaml.safe_dump(document))
    synthesized = synthesize(directory / "tenants.yaml", directory / "cdk.out")
    return App(synthesized.templates, {t.id: t for t in load_config(directory / "tenants.yaml").tenants})


def alarm(template: dict[str, Any], name: str) -> dict[str, Any]:
    (props,) = [p for p in of_type(template, "AWS::CloudWatch::Alarm").values() if p["AlarmName"] == name]
    return props


@pytest.mark.parametrize("app", ["default_app", "sharded_app"])
def test_every_alarm_watches_a_metric_its_stack_publishes_in_the_unit_it_compares(app, request):
    app = request.getfixturevalue(app)

    problems = {stack: alarm_problems(template, app.tenants) for stack, template in app.templates.items()}

    assert problems == {stack: [] for stack in app.templates}
    metrics = [
        m
        for t in app.templates.values()
        for a in of_type(t, "AWS::CloudWatch::Alarm").values()
        for m in watched(a)
    ]
    assert {m.namespace for m in metrics} == set(PUBLISHERS), "every kind of publisher was checked"


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation: set the property at ``path`` (from the resource's `Properties`) of the
    resource found by ``path[0]`` (an alarm name, or a callable picking the resource)."""

    def mutate(template: dict[str, Any]) -> None:
        first, *keys = path
        if callable(first):
            (node,) = [r["Properties"] for r in template["Resources"].values() if first(r)]
        else:
            node = alarm(template, first)
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value

    return mutate


def _function(handler: str) -> Callable[[dict[str, Any]], bool]:
    return lambda r: r["Type"] == "AWS::Lambda::Function" and r["Properties"]["Handler"] == handler


def _error_log_filter(kind: str) -> Callable[[dict[str, Any]], bool]:
    return lambda r: (
        r["Type"] == "AWS::Logs::MetricFilter"
        and r["Properties"]["FilterName"] == contract.ERROR_LOG_FILTER.render("acme", kind=kind)
    )


ACME = "OrderedIngest-Tenant-acme"
STALL = f"alarm acme-stall: {contract.METRIC_NAMESPACE} {contract.HEAD_WAIT_METRIC}"
NO_PUBLISHER = "no handler publishes it (contract.EMF_METRICS) and no metric filter of the stack does"


@pytest.mark.parametrize(
    ("app", "stack", "mutate", "expected"),
    [
        pytest.param(
            "default_app",
            ACME,
            _set(["acme-stall", "MetricName"], "HeadMessageWaitSecond"),
            f"alarm acme-stall: OrderedIngest HeadMessageWaitSecond: {NO_PUBLISHER}",
            id="a-misspelled-metric",
        ),
        pytest.param(
            "default_app",
            ACME,
            _set(["acme-sink-errors", "Metrics", 2, "MetricStat", "Metric", "MetricName"], "SinkRequest"),
            f"alarm acme-sink-errors: OrderedIngest SinkRequest: {NO_PUBLISHER}",
            id="a-misspelled-metric-in-metric-math",
        ),
        pytest.param(
            "default_app",
            ACME,
            _set(["acme-stall", "Dimensions"], [{"Name": "TenantId", "Value": "acme"}]),
            f"{STALL}: dimensions ['TenantId'], but it is published with ['Tenant']",
            id="another-dimension",
        ),
        pytest.param(
            "default_app",
            ACME,
            _set(["acme-stall", "Dimensions", 0, "Value"], "globex"),
            f"{STALL}: Tenant = 'globex' is not the stack's tenant 'acme'",
            id="another-tenant",
        ),
        pytest.param(
            "default_app",
            ACME,
            _set(
                [_function("lambdas.controller.handler"), "Environment", "Variables", "METRIC_NAMESPACE"],
                "FileIngest",
            ),
            "alarm acme-queue-age: OrderedIngest PausedSeconds: controller publishes it into namespace "
            f"'FileIngest'\nalarm acme-paused: OrderedIngest PausedSeconds: controller publishes it into "
            f"namespace 'FileIngest'\n{STALL}: controller publishes it into namespace 'FileIngest'\n"
            "alarm acme-quarantine: OrderedIngest QuarantinedMessages: controller publishes it into "
            "namespace 'FileIngest'",
            id="the-controller-publishes-into-another-namespace",
        ),
        pytest.param(
            "default_app",
            ACME,
            _set([_function("lambdas.register_chunk.handler"), "Handler"], "lambdas.register.handler"),
            "\n".join(
                f"alarm acme-sink-errors: OrderedIngest {metric}: no function of the stack runs "
                "lambdas.register_chunk.handler, which publishes it"
                for metric in ("SinkErrors", "SinkRequests")
            ),
            id="no-function-publishes-it",
        ),
        pytest.param(
            "default_app",
            ACME,
            _set(
                [_error_log_filter("split"), "MetricTransformations", 0, "MetricName"],
                "ErrorLogLines-acme-splitter",
            ),
            f"alarm acme-split-error-logs: OrderedIngest ErrorLogLines-acme-split: {NO_PUBLISHER}",
            id="the-metric-filter-publishes-another-name",
        ),
        pytest.param(
            "default_app",
            ACME,
            _set([_error_log_filter("split"), "LogGroupName"], "/aws/lambda/globex-split"),
            "alarm acme-split-error-logs: OrderedIngest ErrorLogLines-acme-split: its metric filter reads "
            "log group '/aws/lambda/globex-split', not one of the stack's",
            id="a-metric-filter-on-a-log-group-of-another-stack",
        ),
        pytest.param(
            "default_app",
            ACME,
            _set(["acme-intake-dlq", "Dimensions", 0, "Value"], "globex-intake-dlq"),
            "alarm acme-intake-dlq: AWS/SQS ApproximateNumberOfMessagesVisible: QueueName "
            "'globex-intake-dlq' is not a queue of the stack",
            id="a-queue-of-another-stack",
        ),
        pytest.param(
            "default_app",
            ACME,
            _set(
                ["acme-queue-age", "Metrics", 1, "MetricStat", "Metric", "MetricName"],
                "ApproximateAgeOfOldestMessages",
            ),
            "alarm acme-queue-age: AWS/SQS ApproximateAgeOfOldestMessages: AWS/SQS publishes no metric "
            "ApproximateAgeOfOldestMessages",
            id="a-misspelled-aws-metric",
        ),
        pytest.param(
            "default_app",
            ACME,
            _set(
                ["acme-workflow-failed", "Metrics", 1, "MetricStat", "Metric", "Dimensions", 0, "Value"],
                {"Fn::ImportValue": "globex-workflow"},
            ),
            "alarm acme-workflow-failed: AWS/States ExecutionsFailed: StateMachineArn "
            "{'Fn::ImportValue': 'globex-workflow'} is not a state machine of the stack nor an alias of one",
            id="a-state-machine-of-another-stack",
        ),
        pytest.param(
            "default_app",
            ACME,
            _set(
                [
                    "acme-workflow-failed",
                    "Metrics",
                    2,
                    "MetricStat",
                    "Metric",
                    "Dimensions",
                    0,
                    "Value",
                    "Fn::Join",
                    1,
                    1,
                ],
                ":canary",
            ),
            "alarm acme-workflow-failed: AWS/States ExecutionsFailed: StateMachineArn "
            "{'Fn::Join': ['', [{'Ref': 'PipelineWorkflow36971942'}, ':canary']]} is not a state machine of "
            "the stack nor an alias of one",
            id="an-alias-the-stack-does-not-have",
        ),
        pytest.param(
            "default_app",
            ACME,
            _set(
                [
                    "acme-workflow-failed",
                    "Metrics",
                    2,
                    "MetricStat",
                    "Metric",
                    "Dimensions",
                    0,
                    "Value",
                    "Fn::Join",
                    1,
                    0,
                    "Ref",
                ],
                "PipelinePageWorkflowE3602F9F",
            ),
            "alarm acme-workflow-failed: AWS/States ExecutionsFailed: StateMachineArn "
            "{'Fn::Join': ['', [{'Ref': 'PipelinePageWorkflowE3602F9F'}, ':live']]} is not a state machine "
            "of the stack nor an alias of one",
            id="the-live-alias-of-a-machine-that-has-none",
        ),
        pytest.param(
            "default_app",
            ACME,
            _set(
                ["acme-intake-failed", "Metrics", 1, "MetricStat", "Metric", "Dimensions", 0, "Value"],
                "globex-object-created",
            ),
            "alarm acme-intake-failed: AWS/Events FailedInvocations: RuleName 'globex-object-created' is "
            "not a rule of the stack",
            id="a-rule-of-another-stack",
        ),
        pytest.param(
            "sharded_app",
            ACME,
            _set(
                ["acme-intake-failed", "Metrics", 1, "MetricStat", "Metric", "Dimensions"],
                [{"Name": "RuleName", "Value": "acme-object-created"}],
            ),
            "alarm acme-intake-failed: AWS/Events FailedInvocations: dimensions ['RuleName'], but it is "
            "published with ['EventBusName', 'RuleName']",
            id="a-rule-on-a-shard-bus-without-its-bus",
        ),
        pytest.param(
            "default_app",
            ACME,
            _set(["acme-stall", "Namespace"], "AWS/Lambda"),
            "alarm acme-stall: AWS/Lambda HeadMessageWaitSeconds: no check knows who publishes namespace "
            "AWS/Lambda",
            id="another-namespace",
        ),
        pytest.param(
            "default_app",
            ACME,
            _set(["acme-stall", "Unit"], "Milliseconds"),
            f"{STALL}: the alarm reads unit Milliseconds, but it is published in Seconds",
            id="another-unit",
        ),
        pytest.param(
            "default_app",
            ACME,
            _set(["acme-stall", "Threshold"], 30),
            f"{STALL}: threshold 30 Seconds, but alarms.stall_after_seconds is 1800 s (1800 Seconds)",
            id="a-stall-threshold-in-minutes",
        ),
        pytest.param(
            "default_app",
            "OrderedIngest-Tenant-initech",
            _set(["initech-queue-age", "Threshold"], 21600),
            "alarm initech-queue-age: AWS/SQS ApproximateAgeOfOldestMessage: threshold 21600 Seconds, but "
            "alarms.queue_age_seconds is 7200 s (7200 Seconds)",
            id="the-default-queue-age-instead-of-the-tenants",
        ),
        pytest.param(
            "sharded_app",
            "OrderedIngest-Tenant-seqco",
            _set(["seqco-sequence-gap", "Threshold"], 300),
            "alarm seqco-sequence-gap: OrderedIngest SequenceGapSeconds: threshold 300 Seconds, but "
            "ordering.gap_alarm_after_seconds is 120 s (120 Seconds)",
            id="the-stall-setting-instead-of-the-gap-setting",
        ),
    ],
)
def test_fails_when_an_alarm_watches_what_its_stack_does_not_publish(app, stack, mutate, expected, request):
    app = request.getfixturevalue(app)
    template = copy.deepcopy(app.templates[stack])
    mutate(template)

    assert "\n".join(alarm_problems(template, app.tenants)) == expected


# --- the error-log filter on the lines Lambda writes ---------------------------------------------

_EQUALS = re.compile(r'\(\$\.([\w.]+) = "([^"*]*)"\)')


def or_of_equalities(pattern: str) -> list[tuple[list[str], str]]:
    """The terms of a JSON filter pattern of the one shape the app uses,
    `{ ($.a = "x") || ($.b.c = "y") }`: (field path, exact value). Any other shape is refused:
    this is no CloudWatch Logs pattern grammar."""
    terms = pattern[2:-2].split(" || ") if pattern.startswith("{ ") and pattern.endswith(" }") else []
    found = [_EQUALS.fullmatch(term) for term in terms]
    if not found or not all(found):
        raise ValueError(f'not an OR of ($.field = "value") terms: {pattern!r}')
    return [(m.group(1).split("."), m.group(2)) for m in found if m]


def error_filter_matches(line: str) -> bool:
    try:
        document = json.loads(line)
    except ValueError:
        return False  # CloudWatch Logs applies a JSON pattern to JSON events only
    for path, value in or_of_equalities(contract.error_log_filter_pattern()):
        node = document
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if node == value:
            return True
    return False


def handler_line(level: int, message: str, **extra: Any) -> str:
    """A handler's log record as the Python runtime writes it in Lambda's JSON log format."""
    from local_runtime.worker_process import LambdaJsonFormatter

    record = logging.LogRecord("controller", level, __file__, 1, message, None, None)
    record.__dict__.update(extra)
    return LambdaJsonFormatter().format(record)


def runtime_unhandled_line() -> str:
    """The runtime's own record of an unhandled exception (outside the handler's wrapper)."""
    from local_runtime import worker_process

    stderr = io.StringIO()
    with redirect_stderr(stderr):
        worker_process._log_unhandled(
            {"errorMessage": "boom", "errorType": "KeyError", "requestId": "r-1", "stackTrace": []}
        )
    return stderr.getvalue().strip()


def platform_record(kind: str, status: str) -> str:
    return json.dumps(
        {
            "time": "2026-11-30T11:00:00.000Z",
            "type": kind,
            "record": {"requestId": "r", "status": status, "metrics": {"durationMs": 20000.0}},
        }
    )


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(handler_line(logging.ERROR, "sink rejected a record", status=400), id="a-handler-error"),
        pytest.param(runtime_unhandled_line(), id="the-runtimes-own-record-with-log_level"),
        pytest.param(
            json.dumps(
                {
                    "timestamp": "2026-11-30T11:00:00Z",
                    "log_level": "ERROR",
                    "errorMessage": "Unable to import module 'controller': No module named 'x'",
                    "errorType": "Runtime.ImportModuleError",
                    "requestId": "r",
                    "stackTrace": [],
                }
            ),
            id="an-import-error",
        ),
        *[
            pytest.param(platform_record(kind, status), id=f"{kind}-{status}")
            for kind in ("platform.report", "platform.runtimeDone", "platform.initReport")
            for status in contract.PLATFORM_FAILURE_STATUSES
        ],
    ],
)
def test_the_error_log_filter_counts_every_error_line_lambda_writes(line):
    assert error_filter_matches(line)


@pytest.mark.parametrize(
    "line",
    [
        handler_line(logging.INFO, "gate busy; the message waits in the queue"),
        handler_line(logging.WARNING, "core system unavailable; waiting before the next try"),
        platform_record("platform.report", "success"),
        '{"_aws": {"Timestamp": 1}, "Tenant": "acme", "SinkErrors": 3}',
        "ERROR but not JSON",
    ],
)
def test_the_error_log_filter_ignores_normal_lines(line):
    assert not error_filter_matches(line)


def test_the_runtimes_own_error_record_says_log_level_not_level():
    """Why the filter has a `log_level` term: a `$.level = "ERROR"` pattern misses this record."""
    record = json.loads(runtime_unhandled_line())
    assert record["log_level"] == "ERROR" and "level" not in record


def test_fails_when_the_error_log_filter_is_not_an_or_of_equalities():
    with pytest.raises(
        ValueError, match=re.escape('not an OR of ($.field = "value") terms: \'{ $.level = "ERR*" }\'')
    ):
        or_of_equalities('{ $.level = "ERR*" }')
