"""Values as CloudFormation will resolve them at deploy time, measured at their longest."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

#: The longest value of each pseudo parameter whose value synthesis does not know.
_PSEUDO_LONGEST = {
    "AWS::AccountId": 12,
    "AWS::Region": 14,
    "AWS::Partition": 10,
    "AWS::URLSuffix": 16,
    "AWS::StackId": 165,
}
#: A resource's generated physical name and the ARN around a name, at their longest.
GENERATED_NAME_CHARS, ARN_CHARS = 64, 80
#: The property that names a resource, by type (the name `Ref` and its ARN return).
NAME_PROPERTY = {
    "AWS::IAM::Role": "RoleName",
    "AWS::IAM::ManagedPolicy": "ManagedPolicyName",
    "AWS::S3::Bucket": "BucketName",
    "AWS::S3::AccessPoint": "Name",
    "AWS::SQS::Queue": "QueueName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::KMS::Alias": "AliasName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::StepFunctions::StateMachine": "StateMachineName",
    "AWS::StepFunctions::StateMachineAlias": "Name",
    "AWS::Events::Rule": "Name",
    "AWS::Events::EventBus": "Name",
    "AWS::CloudWatch::Alarm": "AlarmName",
    "AWS::CloudWatch::Dashboard": "DashboardName",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::Logs::MetricFilter": "FilterName",
    "AWS::SSM::Parameter": "Name",
    "AWS::DynamoDB::Table": "TableName",
}


@dataclass(frozen=True)
class Env:
    """Where a stack deploys: None for what `cdk deploy`'s credentials decide."""

    account: str | None
    region: str | None

    def __str__(self) -> str:
        return f"{self.account or 'the deploy account'}/{self.region or 'the deploy Region'}"


@dataclass(frozen=True)
class Rendered:
    """A value as CloudFormation will pass it on: `text` with `${...}` for what is resolved at
    deploy time (comparable between stacks: a pseudo parameter or an SSM parameter renders the
    same in each, a resource of the stack with the stack's name), `length` its longest length."""

    text: str
    length: int


class Renderer:
    """Renders the intrinsic functions of one template (see the module docstring)."""

    def __init__(self, template: Mapping[str, Any], env: Env, stack_name: str) -> None:
        self.resources = template.get("Resources", {})
        self.parameters = template.get("Parameters", {})
        self.env, self.stack_name = env, stack_name

    def __call__(self, value: Any) -> Rendered:
        parts = list(self._parts(value))
        return Rendered("".join(p for p, _ in parts), sum(n for _, n in parts))

    def json(self, value: Any, separators: tuple[str, str] = (",", ":")) -> Rendered:
        """A JSON document (a policy, a pattern, an environment), by default without whitespace,
        its intrinsic values rendered into its strings."""
        marks: dict[str, Rendered] = {}

        def strings(node: Any) -> Any:
            if isinstance(node, dict) and len(node) == 1 and next(iter(node)).startswith(("Fn::", "Ref")):
                mark = f"<<intrinsic {len(marks)}>>"
                marks[mark] = self(node)
                return mark
            if isinstance(node, dict):
                return {k: strings(v) for k, v in node.items()}
            if isinstance(node, list):
                return [strings(v) for v in node]
            return node

        text = json.dumps(strings(value), separators=separators)
        length = len(text.encode())
        for mark, rendered in marks.items():
            count = text.count(mark)
            text = text.replace(mark, rendered.text)
            length += count * (rendered.length - len(mark))
        return Rendered(text, length)

    def _parts(self, value: Any) -> Iterator[tuple[str, int]]:
        if value is None:
            return
        if isinstance(value, (str, int, float, bool)):
            text = value if isinstance(value, str) else json.dumps(value)
            yield text, len(text.encode())
            return
        if isinstance(value, list):
            rendered = self.json(value)
            yield rendered.text, rendered.length
            return
        if not isinstance(value, dict) or len(value) != 1:
            rendered = self.json(value)
            yield rendered.text, rendered.length
            return
        ((function, argument),) = value.items()
        if function == "Ref":
            yield from self._ref(argument)
        elif function == "Fn::GetAtt":
            logical_id, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
            name = self._name_of(logical_id)
            longest = len(name.encode()) if name is not None else GENERATED_NAME_CHARS
            yield (
                f"${{{self.stack_name}:{logical_id}.{attribute}}}",
                longest + (ARN_CHARS if "Arn" in attribute else 0),
            )
        elif function == "Fn::Join":
            separator, items = argument
            if not isinstance(items, list):
                yield from self._parts(items)
                return
            for index, item in enumerate(items):
                if index:
                    yield separator, len(separator.encode())
                yield from self._parts(item)
        elif function == "Fn::Sub":
            text, variables = (argument, {}) if isinstance(argument, str) else argument
            pieces = re.split(r"\$\{([^}]*)\}", text)  # literal, name, literal, name, ..., literal
            for index, piece in enumerate(pieces):
                if index % 2 == 0:
                    yield piece, len(piece.encode())
                    continue
                name = piece
                yield from (
                    self._parts(variables[name])
                    if name in variables
                    else self._ref(name)
                    if "." not in name
                    else self._parts({"Fn::GetAtt": name})
                )
        elif function == "Fn::If":
            longer = max((self(branch) for branch in argument[1:]), key=lambda rendered: rendered.length)
            yield longer.text, longer.length
        else:  # Fn::Select, Fn::ImportValue, Fn::Base64, ...: an opaque value of a name's length
            yield f"${{{function}}}", GENERATED_NAME_CHARS

    def _ref(self, name: str) -> Iterator[tuple[str, int]]:
        if name == "AWS::NoValue":
            return
        if name == "AWS::StackName":
            yield self.stack_name, len(self.stack_name)
        elif name == "AWS::Region" and self.env.region:
            yield self.env.region, len(self.env.region)
        elif name == "AWS::AccountId" and self.env.account:
            yield self.env.account, len(self.env.account)
        elif name in _PSEUDO_LONGEST:
            yield f"${{{name}}}", _PSEUDO_LONGEST[name]
        elif name in self.parameters:
            default = self.parameters[name].get("Default")
            # SSM parameter values (the shared stack's ARNs) and CDK's asset parameters.
            yield f"${{{name}}}", max(len(str(default or "")), GENERATED_NAME_CHARS + ARN_CHARS)
        else:
            own = self._name_of(name)  # a resource of this stack: its name, or a generated one
            yield (
                (own, len(own))
                if own is not None
                else (f"${{{self.stack_name}:{name}}}", GENERATED_NAME_CHARS)
            )

    def _name_of(self, logical_id: str) -> str | None:
        resource = self.resources.get(logical_id, {})
        name = resource.get("Properties", {}).get(NAME_PROPERTY.get(resource.get("Type", ""), ""))
        return self(name).text if name is not None else None
