"""The template pre-transform: what the local run changes in a template before moto's
CloudFormation creates it. Pure functions on the template dict; nothing here talks to moto.

* Durations are multiplied by ``time_scale`` (rounded up to whole seconds, at least 1 s;
  retention at least 60 s): SQS ``VisibilityTimeout`` and ``MessageRetentionPeriod``, Lambda
  ``Timeout``, and the state machine definition's ``TimeoutSeconds``, ``HeartbeatSeconds``
  and ``Wait`` seconds. A callback task without a timeout is refused.
* A function's ``Environment.Variables`` named ``*_SECONDS`` (durations the handler reads:
  sink timeout, outage budget, waiting visibility) are scaled too, then the variables go
  through a hook (e.g. the sink URL override).
* ``AWS::Lambda::EventSourceMapping`` resources are removed (moto's own mapping invokes
  synchronously inside ``put_object`` and never retries; `poller.SqsPoller` plays them); an
  output per mapping lets moto resolve its function and queue.
* The tags of an ``AWS::KMS::Key`` (a tenant stack tags every resource) are respelled as the
  KMS API's ``TagKey``/``TagValue``: moto 5.2.5's CloudFormation reads them so.
* Resource types moto's CloudFormation cannot create (alarms, metric filters, resource
  policies) are removed and listed, instead of being skipped by moto with a warning.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: (logical id, template variables) -> variables; values may be unresolved intrinsics.
EnvironmentHook = Callable[[str, dict[str, Any]], dict[str, Any]]

_MARK = "@@local-runtime-intrinsic-{}@@"
_MARKS = re.compile(r"@@local-runtime-intrinsic-(\d+)@@")


class TemplateError(ValueError):
    """A template cannot be run locally as it is (the message says why)."""


@dataclass(frozen=True)
class RemovedMapping:
    """An event source mapping taken out of the template; the outputs name its parts."""

    logical_id: str
    function_output: str  # output key whose value is the function name
    source_output: str  # output key whose value is the event source ARN
    batch_size: int
    enabled: bool
    report_batch_item_failures: bool = False


@dataclass
class PreparedTemplate:
    template: dict[str, Any]
    mappings: list[RemovedMapping] = field(default_factory=list)
    not_created: list[tuple[str, str]] = field(default_factory=list)  # (logical id, type)
    overrides: list[str] = field(default_factory=list)  # "Logical: VAR 'old' -> 'new'"


def prepare(
    template: dict[str, Any],
    *,
    time_scale: float,
    creatable: Callable[[str], bool],
    environment: EnvironmentHook = lambda logical_id, variables: variables,
) -> PreparedTemplate:
    """The template moto should create (a copy; ``template`` is left as it is)."""
    prepared = PreparedTemplate(copy.deepcopy(template))
    resources: dict[str, Any] = prepared.template.get("Resources") or {}
    outputs = prepared.template.setdefault("Outputs", {})
    for logical_id, resource in list(resources.items()):
        kind, props = resource["Type"], resource.setdefault("Properties", {})
        if kind == "AWS::Lambda::EventSourceMapping":
            del resources[logical_id]
            mapping = RemovedMapping(
                logical_id,
                f"LocalRuntime{logical_id}Function",
                f"LocalRuntime{logical_id}Source",
                int(props.get("BatchSize", 10)),
                props.get("Enabled", True) not in (False, "false"),
                "ReportBatchItemFailures" in (props.get("FunctionResponseTypes") or []),
            )
            outputs[mapping.function_output] = {"Value": props["FunctionName"]}
            outputs[mapping.source_output] = {"Value": props["EventSourceArn"]}
            prepared.mappings.append(mapping)
        elif not creatable(kind):
            del resources[logical_id]
            prepared.not_created.append((logical_id, kind))
        elif kind == "AWS::SQS::Queue":
            props["VisibilityTimeout"] = scale_seconds(props.get("VisibilityTimeout", 30), time_scale)
            props["MessageRetentionPeriod"] = scale_seconds(
                props.get("MessageRetentionPeriod", 345600), time_scale, minimum=60
            )
        elif kind == "AWS::Lambda::Function":
            props["Timeout"] = scale_seconds(props.get("Timeout", 3), time_scale)
            _scale_environment(props, time_scale)
            _override_environment(prepared, logical_id, props, environment)
        elif kind == "AWS::StepFunctions::StateMachine":
            _scale_state_machine(logical_id, props, time_scale)
        elif kind == "AWS::KMS::Key" and props.get("Tags"):
            # moto 5.2.5 reads a key's CloudFormation tags as the KMS API's TagKey/TagValue
            # (a KeyError on CloudFormation's Key/Value): the same tags, in the API's spelling.
            props["Tags"] = [{"TagKey": tag["Key"], "TagValue": tag["Value"]} for tag in props["Tags"]]
        elif kind == "AWS::StepFunctions::StateMachineVersion":
            # moto has no revisions (nor their GetAtt): a local stack is created once, and
            # publishes the definition it just created.
            props.pop("StateMachineRevisionId", None)
    removed = {logical_id for logical_id, _ in prepared.not_created} | {
        m.logical_id for m in prepared.mappings
    }
    for resource in resources.values():
        depends = resource.get("DependsOn")
        if depends:
            kept = [d for d in ([depends] if isinstance(depends, str) else depends) if d not in removed]
            resource["DependsOn"] = kept
    return prepared


def scale_seconds(seconds: float, time_scale: float, minimum: int = 1) -> int:
    """A duration in whole seconds (the APIs want integers), scaled and rounded up."""
    return max(minimum, math.ceil(float(seconds) * time_scale - 1e-9))


def scale_definition(definition: dict[str, Any], time_scale: float) -> dict[str, Any]:
    """Scale the timeouts and waits of an ASL definition (Retry intervals are scaled at run time)."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        scaled = {key: walk(value) for key, value in node.items()}
        for key in ("TimeoutSeconds", "HeartbeatSeconds"):
            if isinstance(scaled.get(key), (int, float)):
                scaled[key] = scale_seconds(scaled[key], time_scale)
        if scaled.get("Type") == "Wait" and isinstance(scaled.get("Seconds"), (int, float)):
            scaled["Seconds"] = scale_seconds(scaled["Seconds"], time_scale, minimum=0)
        return scaled

    return walk(definition)


def check_definition(definition: dict[str, Any], name: str) -> None:
    """Refuse a callback task without a timeout: locally (and on AWS) it could wait forever.

    A `.waitForTaskToken` task whose token never comes back stays RUNNING for a year by
    default; the local run would never become idle and tests would hang instead of failing.
    """

    def walk(node: Any, path: str) -> None:
        if isinstance(node, list):
            for index, item in enumerate(node):
                walk(item, f"{path}[{index}]")
            return
        if not isinstance(node, dict):
            return
        resource = node.get("Resource")
        if (
            node.get("Type") == "Task"
            and isinstance(resource, str)
            and resource.endswith(".waitForTaskToken")
        ):
            if "TimeoutSeconds" not in node and "TimeoutSecondsPath" not in node:
                raise TemplateError(
                    f"state machine {name}: callback task {path} has no TimeoutSeconds; "
                    "give every .waitForTaskToken task a timeout"
                )
        for key, value in node.items():
            walk(value, f"{path}.{key}" if path else key)

    walk(definition, "")


def _scale_environment(props: dict[str, Any], time_scale: float) -> None:
    """Durations a function reads from its environment (variables named `*_SECONDS`) scale like
    its timeout: a whole number stays whole (at least 1), a fraction stays a fraction."""
    variables = (props.get("Environment") or {}).get("Variables") or {}
    for name, value in variables.items():
        if not name.endswith("_SECONDS") or not isinstance(value, str):
            continue
        try:
            number = float(value)
        except ValueError:
            continue
        scaled = number * time_scale
        variables[name] = str(scale_seconds(number, time_scale)) if value.isdigit() and scaled >= 1 else f"{scaled:g}"


def _override_environment(
    prepared: PreparedTemplate, logical_id: str, props: dict[str, Any], hook: EnvironmentHook
) -> None:
    before = dict((props.get("Environment") or {}).get("Variables") or {})
    after = hook(logical_id, dict(before))
    if after == before:
        return
    props["Environment"] = {**(props.get("Environment") or {}), "Variables": after}
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key):
            prepared.overrides.append(f"{logical_id}: {key} {before.get(key)!r} -> {after.get(key)!r}")


def _scale_state_machine(logical_id: str, props: dict[str, Any], time_scale: float) -> None:
    """Scale the definition in place, keeping its intrinsics (CDK writes an ``Fn::Join``)."""
    if "DefinitionString" not in props:
        raise TemplateError(f"{logical_id}: moto's CloudFormation reads only DefinitionString")
    text, intrinsics = _as_text(props["DefinitionString"], logical_id)
    for key, value in (props.pop("DefinitionSubstitutions", None) or {}).items():
        # moto ignores DefinitionSubstitutions: apply them here, as CloudFormation would.
        intrinsics.append(value)
        text = text.replace("${" + key + "}", _MARK.format(len(intrinsics) - 1))
    try:
        definition = json.loads(text)
    except ValueError as error:
        raise TemplateError(
            f"{logical_id}: the definition is not JSON once its intrinsics are set aside: {error}"
        ) from None
    check_definition(definition, logical_id)
    text = json.dumps(scale_definition(definition, time_scale), separators=(",", ":"))
    # split() alternates text and captured marker indexes: text, 0, text, 1, ..., text
    pieces = enumerate(_MARKS.split(text))
    parts = [intrinsics[int(piece)] if index % 2 else piece for index, piece in pieces if index % 2 or piece]
    props["DefinitionString"] = text if not intrinsics else {"Fn::Join": ["", parts]}


def _as_text(value: Any, logical_id: str) -> tuple[str, list[Any]]:
    """The definition as JSON text with a marker where each intrinsic was."""
    if isinstance(value, str):
        return value, []
    join = value.get("Fn::Join") if isinstance(value, dict) and len(value) == 1 else None
    if not join or join[0] != "" or not isinstance(join[1], list):
        raise TemplateError(
            f"{logical_id}: DefinitionString must be a string or an Fn::Join with an empty delimiter"
        )
    intrinsics: list[Any] = []
    text = ""
    for part in join[1]:
        if isinstance(part, str):
            text += part
        else:
            intrinsics.append(part)
            text += _MARK.format(len(intrinsics) - 1)
    return text, intrinsics
