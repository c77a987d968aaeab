"""CloudFormation intrinsic functions, resolved against locally provisioned resources.

The templates are what CloudFormation would deploy, so the runtime resolves them the way
CloudFormation does (Ref, Fn::GetAtt, Fn::Join, Fn::Sub, Fn::Select, Fn::Split,
Fn::ImportValue, conditions, pseudo parameters) instead of re-deriving names in Python:
a construct change then reaches the local run unchanged.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Marker for ``{"Ref": "AWS::NoValue"}``: the property (or list item) is removed.
NO_VALUE = object()

_SUB_VARIABLE = re.compile(r"\$\{([^}]+)\}")


class IntrinsicError(ValueError):
    """A template value cannot be resolved (unknown function, missing resource or export)."""


@dataclass(frozen=True)
class PseudoParameters:
    """The fixed account and region the local run pretends to be."""

    account_id: str = "123456789012"
    region: str = "us-east-1"
    partition: str = "aws"
    url_suffix: str = "amazonaws.com"

    def for_stack(self, stack_name: str) -> dict[str, Any]:
        return {
            "AWS::AccountId": self.account_id,
            "AWS::Region": self.region,
            "AWS::Partition": self.partition,
            "AWS::URLSuffix": self.url_suffix,
            "AWS::StackName": stack_name,
            "AWS::StackId": (
                f"arn:{self.partition}:cloudformation:{self.region}:{self.account_id}:stack/{stack_name}/local"
            ),
            "AWS::NotificationARNs": [],
        }


@dataclass
class Resolver:
    """Resolves the values of one stack's template.

    ``ref`` and ``get_att`` look up resources that were already provisioned (the provisioner
    creates resources in dependency order, so every lookup succeeds); ``exports`` holds the
    ``Export.Name -> value`` pairs of the stacks provisioned before this one.
    """

    stack_name: str
    template: Mapping[str, Any]
    pseudo: PseudoParameters
    ref: Callable[[str], Any]
    get_att: Callable[[str, str], Any]
    exports: Mapping[str, Any]
    parameters: dict[str, Any] = field(default_factory=dict)
    _conditions: dict[str, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, spec in (self.template.get("Parameters") or {}).items():
            if name not in self.parameters and "Default" in spec:
                self.parameters[name] = spec["Default"]

    # -- public -------------------------------------------------------------------------

    def resolve(self, value: Any) -> Any:
        """Resolve every intrinsic inside ``value``; ``AWS::NoValue`` entries are dropped."""
        resolved = self._resolve(value)
        if resolved is NO_VALUE:
            return None
        return resolved

    def condition(self, name: str) -> bool:
        """Value of a named condition of the template's ``Conditions`` section."""
        if name not in self._conditions:
            spec = (self.template.get("Conditions") or {}).get(name)
            if spec is None:
                raise IntrinsicError(f"{self.stack_name}: unknown condition {name!r}")
            self._conditions[name] = bool(self._resolve(spec))
        return self._conditions[name]

    # -- internals ----------------------------------------------------------------------

    def _resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            items = (self._resolve(item) for item in value)
            return [item for item in items if item is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (key, argument), = value.items()
            function = _FUNCTIONS.get(key)
            if function is not None:
                return function(self, argument)
        resolved = {k: self._resolve(v) for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v is not NO_VALUE}

    def _ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return NO_VALUE
        pseudo = self.pseudo.for_stack(self.stack_name)
        if name in pseudo:
            return pseudo[name]
        if name in self.parameters:
            return self.parameters[name]
        if name in (self.template.get("Resources") or {}):
            return self.ref(name)
        raise IntrinsicError(f"{self.stack_name}: Ref to unknown name {name!r}")

    def _get_att(self, argument: Any) -> Any:
        if isinstance(argument, str):
            logical_id, _, attribute = argument.partition(".")
        else:
            logical_id, attribute = argument[0], self._resolve(argument[1])
        if logical_id not in (self.template.get("Resources") or {}):
            raise IntrinsicError(f"{self.stack_name}: Fn::GetAtt of unknown resource {logical_id!r}")
        return self.get_att(logical_id, attribute)

    def _join(self, argument: Any) -> str:
        delimiter, items = argument
        return str(delimiter).join(_scalar(item) for item in self._resolve(items))

    def _sub(self, argument: Any) -> str:
        if isinstance(argument, str):
            text, variables = argument, {}
        else:
            text, variables = argument[0], self._resolve(argument[1])

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in variables:
                return _scalar(variables[name])
            if "." in name:
                logical_id, attribute = name.split(".", 1)
                return _scalar(self._get_att([logical_id, attribute]))
            return _scalar(self._ref(name))

        return _SUB_VARIABLE.sub(replace, text)

    def _select(self, argument: Any) -> Any:
        index, items = self._resolve(argument)
        return items[int(index)]

    def _split(self, argument: Any) -> list[str]:
        delimiter, text = argument
        return str(self._resolve(text)).split(delimiter)

    def _import_value(self, argument: Any) -> Any:
        name = self._resolve(argument)
        if name not in self.exports:
            raise IntrinsicError(f"{self.stack_name}: Fn::ImportValue of {name!r}, which no provisioned stack exports")
        return self.exports[name]

    def _if(self, argument: Any) -> Any:
        name, when_true, when_false = argument
        return self._resolve(when_true if self.condition(name) else when_false)

    def _equals(self, argument: Any) -> bool:
        left, right = self._resolve(argument)
        return left == right

    def _get_azs(self, argument: Any) -> list[str]:
        region = self._resolve(argument) or self.pseudo.region
        return [f"{region}{zone}" for zone in "abc"]


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


_FUNCTIONS: dict[str, Callable[[Resolver, Any], Any]] = {
    "Ref": lambda r, a: r._ref(a),
    "Fn::GetAtt": Resolver._get_att,
    "Fn::Join": Resolver._join,
    "Fn::Sub": Resolver._sub,
    "Fn::Select": Resolver._select,
    "Fn::Split": Resolver._split,
    "Fn::ImportValue": Resolver._import_value,
    "Fn::If": Resolver._if,
    "Fn::Equals": Resolver._equals,
    "Fn::Not": lambda r, a: not r._resolve(a[0]),
    "Fn::And": lambda r, a: all(r._resolve(c) for c in a),
    "Fn::Or": lambda r, a: any(r._resolve(c) for c in a),
    "Condition": lambda r, a: r.condition(a),
    "Fn::Base64": lambda r, a: base64.b64encode(_scalar(r._resolve(a)).encode()).decode(),
    "Fn::GetAZs": Resolver._get_azs,
}


def references(value: Any) -> Iterator[str]:
    """Names a template value refers to (Ref, Fn::GetAtt, Fn::Sub variables).

    The provisioner uses them to create resources in dependency order; names that are not
    resources of the stack (pseudo parameters, parameters) are filtered out by the caller.
    """
    if isinstance(value, list):
        for item in value:
            yield from references(item)
    elif isinstance(value, dict):
        for key, argument in value.items():
            if key == "Ref" and isinstance(argument, str):
                yield argument
            elif key == "Fn::GetAtt":
                yield argument.split(".", 1)[0] if isinstance(argument, str) else argument[0]
            elif key == "Fn::Sub":
                text = argument if isinstance(argument, str) else argument[0]
                local = set() if isinstance(argument, str) else set(argument[1])
                for match in _SUB_VARIABLE.finditer(text):
                    name = match.group(1)
                    if not name.startswith("!") and name.split(".", 1)[0] not in local:
                        yield name.split(".", 1)[0]
                if not isinstance(argument, str):
                    yield from references(argument[1])
            else:
                yield from references(argument)


def imports(value: Any) -> Iterator[Any]:
    """Export names a template value imports (literal names only, which is what CDK writes)."""
    if isinstance(value, list):
        for item in value:
            yield from imports(item)
    elif isinstance(value, dict):
        for key, argument in value.items():
            if key == "Fn::ImportValue" and isinstance(argument, str):
                yield argument
            else:
                yield from imports(argument)
