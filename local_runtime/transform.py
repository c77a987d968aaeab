"""The template pre-transform: what the local run changes in a template before moto's
CloudFormation creates it, as pure functions on the template dict (why each change:
local_runtime/README.md, "The pre-transform")."""

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
        elif kind == "AWS::SSM::Parameter" and isinstance(props.get("Tags"), dict):
            # moto 5.2.5 hands a parameter's CloudFormation tags (a map) to PutParameter, which
            # takes a list of Key/Value: the same tags, in the API's spelling.
            props["Tags"] = [{"Key": key, "Value": value} for key, value in props["Tags"].items()]
        elif kind == "AWS::StepFunctions::StateMachineVersion":
            # moto has no revisions (nor their GetAtt): a local stack is created once, and
            # publishes the definition it just created.
            props.pop("StateMachineRevisionId", None)
    removed = {logical_id for logical_id, _ in prepared.not_created} | {
        m.logical_id for m in prepared.mappings
    }
    for resource in resources.values():
        if "DependsOn" in resource:  # CDK always writes a list
            resource["DependsOn"] = [d for d in resource["DependsOn"] if d not in removed]
    # An output of a resource not created (a tenant's upload access point) cannot be resolved.
    for key in [k for k, output in outputs.items() if _refers_to(output, removed)]:
        del outputs[key]
    return prepared


def _refers_to(node: Any, logical_ids: set[str]) -> bool:
    """Whether a template fragment has a `Ref` or `Fn::GetAtt` of one of ``logical_ids``."""
    if isinstance(node, list):
        return any(_refers_to(item, logical_ids) for item in node)
    if not isinstance(node, dict):
        return False
    if node.get("Ref") in logical_ids:
        return True
    target = node.get("Fn::GetAtt")
    if isinstance(target, list) and target and target[0] in logical_ids:
        return True
    return any(_refers_to(value, logical_ids) for value in node.values())


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


def _scale_environment(props: dict[str, Any], time_scale: float) -> None:
    """Durations a function reads from its environment (variables named `*_SECONDS`: numbers in our
    templates) scale like its timeout: a whole number stays whole while at least 1, else a fraction."""
    variables = props.get("Environment", {}).get("Variables", {})
    for name, value in variables.items():
        if name.endswith("_SECONDS"):
            scaled = float(value) * time_scale
            variables[name] = (
                str(math.ceil(scaled - 1e-9)) if value.isdigit() and scaled >= 1 else f"{scaled:g}"
            )


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
    """Scale the definition in place, keeping its intrinsics (CDK writes an ``Fn::Join`` of
    strings and intrinsics, each intrinsic inside a JSON string)."""
    intrinsics: list[Any] = []
    text = ""
    for part in props["DefinitionString"]["Fn::Join"][1]:
        if not isinstance(part, str):
            intrinsics.append(part)
            part = _MARK.format(len(intrinsics) - 1)
        text += part
    try:
        definition = json.loads(text)
    except ValueError as error:
        raise TemplateError(
            f"{logical_id}: the definition is not JSON once its intrinsics are set aside: {error}"
        ) from None
    text = json.dumps(scale_definition(definition, time_scale), separators=(",", ":"))
    # split() alternates text and captured marker indexes: text, 0, text, 1, ..., text
    pieces = enumerate(_MARKS.split(text))
    parts = [intrinsics[int(piece)] if index % 2 else piece for index, piece in pieces if index % 2 or piece]
    props["DefinitionString"] = {"Fn::Join": ["", parts]}
