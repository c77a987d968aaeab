"""Every IAM policy document of a synthesized app, with its CloudFormation intrinsics rendered
into realistic strings: the common input of the policy linter (`tools/iam_lint.py`) and of the
least-privilege table in docs/security.md (`tools/security_table.py`).

Why a resolver: a linter given `Ref`, `Fn::GetAtt`, `Fn::Sub` and the like either chokes or
checks nothing; rendered with a fixed account, Region and partition, a queue's `Arn` becomes a
real SQS queue ARN, checked against the resource format AWS documents for each action. A
key policy's `Resource: "*"` is the key itself, rendered as its ARN. A resource type or
intrinsic the resolver does not know raises `UnresolvableError` naming it, so a new kind of
resource is added here rather than silently linted as garbage.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

ACCOUNT = "123456789012"
REGION = "us-east-1"
PARTITION = "aws"
URL_SUFFIX = "amazonaws.com"

#: CDK appends 8 hex digits of the construct path's hash to every logical id.
LOGICAL_ID_HASH = re.compile(r"[0-9A-F]{8}$")

#: ARN of a resource from its physical name: type -> format(name, r=Region, a=account, p=partition).
ARN_FORMATS: dict[str, str] = {
    "AWS::S3::Bucket": "arn:{p}:s3:::{name}",
    "AWS::S3::AccessPoint": "arn:{p}:s3:{r}:{a}:accesspoint/{name}",
    "AWS::SQS::Queue": "arn:{p}:sqs:{r}:{a}:{name}",
    "AWS::SNS::Topic": "arn:{p}:sns:{r}:{a}:{name}",
    "AWS::Lambda::Function": "arn:{p}:lambda:{r}:{a}:function:{name}",
    "AWS::Lambda::Alias": "arn:{p}:lambda:{r}:{a}:function:{name}",
    "AWS::Lambda::Version": "arn:{p}:lambda:{r}:{a}:function:{name}:1",
    "AWS::DynamoDB::Table": "arn:{p}:dynamodb:{r}:{a}:table/{name}",
    "AWS::Logs::LogGroup": "arn:{p}:logs:{r}:{a}:log-group:{name}:*",
    "AWS::StepFunctions::StateMachine": "arn:{p}:states:{r}:{a}:stateMachine:{name}",
    "AWS::StepFunctions::StateMachineVersion": "arn:{p}:states:{r}:{a}:stateMachine:{name}:1",
    "AWS::StepFunctions::StateMachineAlias": "arn:{p}:states:{r}:{a}:stateMachine:{name}:live",
    "AWS::IAM::Role": "arn:{p}:iam::{a}:role/{name}",
    "AWS::IAM::ManagedPolicy": "arn:{p}:iam::{a}:policy/{name}",
    "AWS::KMS::Key": "arn:{p}:kms:{r}:{a}:key/{name}",
    "AWS::KMS::Alias": "arn:{p}:kms:{r}:{a}:{name}",
    "AWS::Events::Rule": "arn:{p}:events:{r}:{a}:rule/{name}",
    "AWS::Events::EventBus": "arn:{p}:events:{r}:{a}:event-bus/{name}",
    "AWS::Events::Archive": "arn:{p}:events:{r}:{a}:archive/{name}",
    "AWS::SecretsManager::Secret": "arn:{p}:secretsmanager:{r}:{a}:secret:{name}-AbCdEf",
    "AWS::CloudWatch::Alarm": "arn:{p}:cloudwatch:{r}:{a}:alarm:{name}",
    "AWS::EC2::SecurityGroup": "arn:{p}:ec2:{r}:{a}:security-group/{name}",
}

#: Properties that hold a resource's physical name, by type (else the logical id, hash removed).
NAME_PROPERTIES: dict[str, str] = {
    "AWS::S3::Bucket": "BucketName",
    "AWS::S3::AccessPoint": "Name",
    "AWS::SQS::Queue": "QueueName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::StepFunctions::StateMachine": "StateMachineName",
    "AWS::IAM::Role": "RoleName",
    "AWS::IAM::ManagedPolicy": "ManagedPolicyName",
    "AWS::KMS::Alias": "AliasName",
    "AWS::Events::Rule": "Name",
    "AWS::Events::EventBus": "Name",
    "AWS::SecretsManager::Secret": "Name",
    "AWS::CloudWatch::Alarm": "AlarmName",
}

#: What `Ref` returns when it is not the physical name: "arn", "url" or "id".
REF_RETURNS: dict[str, str] = {
    "AWS::SNS::Topic": "arn",
    "AWS::SQS::Queue": "url",
    "AWS::StepFunctions::StateMachine": "arn",
    "AWS::StepFunctions::StateMachineVersion": "arn",
    "AWS::StepFunctions::StateMachineAlias": "arn",
    "AWS::SecretsManager::Secret": "arn",
    "AWS::IAM::ManagedPolicy": "arn",
    "AWS::EC2::SecurityGroup": "id",
}


class UnresolvableError(Exception):
    """An intrinsic or a resource type the resolver cannot render; the message names it."""


@dataclass(frozen=True)
class PolicyDocument:
    """One policy document of a template, intrinsics rendered.

    `kind`: identity | trust | resource. `resource_id`: the logical id of the resource that
    holds it (the policy, role, bucket policy, key...). `roles`: for identity and trust policies,
    the logical ids of the roles it applies to. `target`: for resource policies, what it
    protects (logical ids)."""

    stack: str
    resource_id: str
    resource_type: str
    kind: str
    document: dict[str, Any]
    roles: tuple[str, ...] = ()
    target: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """`stack/LogicalIdWithoutHash`: stable across code changes that move hashes."""
        return f"{self.stack}/{strip_hash(self.resource_id)}"

    def statements(self) -> list[dict[str, Any]]:
        found = self.document.get("Statement", [])
        return found if isinstance(found, list) else [found]


def strip_hash(logical_id: str) -> str:
    return LOGICAL_ID_HASH.sub("", logical_id)


@dataclass
class Resolver:
    """Renders intrinsics of the app's templates with a fixed account, Region and partition;
    `environments`: (account, Region) of the stacks deployed to explicit ones (deployment targets)."""

    templates: Mapping[str, dict[str, Any]]
    account: str = ACCOUNT
    region: str = REGION
    partition: str = PARTITION
    environments: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    _exports: dict[str, list[tuple[str, Any]]] = field(default_factory=dict, init=False)
    #: The app's own SSM parameters by (Stage, name): (stack, value), what an SSM-typed template
    #: parameter of that name reads.
    _ssm_parameters: dict[tuple[str, str], tuple[str, Any]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        for stack, template in self.templates.items():
            for output in template.get("Outputs", {}).values():
                name = output.get("Export", {}).get("Name")
                if name is not None:
                    self._exports.setdefault(self.resolve(stack, name), []).append((stack, output["Value"]))
            for resource in template.get("Resources", {}).values():
                properties = resource.get("Properties", {})
                if resource["Type"] == "AWS::SSM::Parameter" and isinstance(properties.get("Name"), str):
                    self._ssm_parameters[(stack.rpartition("/")[0], properties["Name"])] = (
                        stack,
                        properties["Value"],
                    )

    def resolve(self, stack: str, value: Any) -> Any:
        """`value` with every intrinsic rendered, in the context of `stack`'s template."""
        if isinstance(value, list):
            return [self.resolve(stack, item) for item in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, argument),) = value.items()
            handler = self._intrinsics().get(key)
            if handler is not None:
                return handler(stack, argument)
            if key.startswith("Fn::"):
                raise UnresolvableError(f"{stack}: intrinsic {key} is not supported by tools/iam_policies.py")
        return {key: self.resolve(stack, item) for key, item in value.items()}

    def _intrinsics(self) -> dict[str, Callable[[str, Any], Any]]:
        return {
            "Ref": self._ref,
            "Fn::GetAtt": self._get_att,
            "Fn::Join": lambda stack, arg: self.resolve(stack, arg[0]).join(
                str(part) for part in self.resolve(stack, arg[1])
            ),
            "Fn::Sub": self._sub,
            "Fn::ImportValue": self._import_value,
            "Fn::Select": lambda stack, arg: self.resolve(stack, arg[1])[int(self.resolve(stack, arg[0]))],
            "Fn::Split": lambda stack, arg: self.resolve(stack, arg[1]).split(self.resolve(stack, arg[0])),
            "Fn::If": lambda stack, arg: self.resolve(
                stack, arg[1] if self.condition(stack, arg[0]) else arg[2]
            ),
        }

    def condition(self, stack: str, name_or_expression: Any) -> bool:
        """A template condition (by name, or an `Fn::Equals`/`Not`/`And`/`Or` expression) with
        the fixed account, Region and partition."""
        if isinstance(name_or_expression, str):
            return self.condition(stack, self.templates[stack].get("Conditions", {})[name_or_expression])
        ((key, argument),) = name_or_expression.items()
        if key == "Condition":
            return self.condition(stack, argument)
        if key == "Fn::Equals":
            left, right = (self.resolve(stack, value) for value in argument)
            return bool(left == right)
        if key == "Fn::Not":
            return not self.condition(stack, argument[0])
        if key in ("Fn::And", "Fn::Or"):
            results = [self.condition(stack, item) for item in argument]
            return all(results) if key == "Fn::And" else any(results)
        raise UnresolvableError(f"{stack}: condition {key} is not supported by tools/iam_policies.py")

    def account_of(self, stack: str) -> str:
        return self.environments.get(stack, (self.account, self.region))[0]

    def region_of(self, stack: str) -> str:
        return self.environments.get(stack, (self.account, self.region))[1]

    def _pseudo(self, stack: str, name: str) -> str | None:
        return {
            "AWS::AccountId": self.account_of(stack),
            "AWS::Region": self.region_of(stack),
            "AWS::Partition": self.partition,
            "AWS::URLSuffix": URL_SUFFIX,
            "AWS::StackName": None,
        }.get(name)

    def _resource(self, stack: str, logical_id: str) -> dict[str, Any]:
        try:
            return self.templates[stack]["Resources"][logical_id]
        except KeyError:
            raise UnresolvableError(f"{stack}: no resource {logical_id}") from None

    def name_of(self, stack: str, logical_id: str) -> str:
        """A resource's physical name: its name property, else its logical id without the hash
        (what CloudFormation would generate is random; a stable stand-in reads better)."""
        resource = self._resource(stack, logical_id)
        prop = NAME_PROPERTIES.get(resource["Type"])
        declared = resource.get("Properties", {}).get(prop) if prop else None
        if declared is not None:
            return str(self.resolve(stack, declared))
        if resource["Type"] in (
            "AWS::StepFunctions::StateMachineVersion",
            "AWS::StepFunctions::StateMachineAlias",
        ):
            machine = (
                resource["Properties"].get("StateMachineArn")
                or resource["Properties"]["RoutingConfiguration"][0]["StateMachineVersionArn"]
            )
            return self.resolve(stack, machine).split(":stateMachine:")[1].split(":")[0]
        if resource["Type"] == "AWS::Lambda::Alias":
            function = self.resolve(stack, resource["Properties"]["FunctionName"])
            return f"{function.rsplit(':', 1)[-1]}:{self.resolve(stack, resource['Properties']['Name'])}"
        return strip_hash(logical_id)

    def arn_of(self, stack: str, logical_id: str) -> str:
        resource = self._resource(stack, logical_id)
        resource_type = resource["Type"]
        bus = resource.get("Properties", {}).get("EventBusName")
        if resource_type == "AWS::Events::Rule" and bus is not None:  # a rule on a custom bus
            bus_name = str(self.resolve(stack, bus)).rsplit("/", 1)[-1]
            if bus_name != "default":
                return (
                    f"arn:{self.partition}:events:{self.region_of(stack)}:{self.account_of(stack)}:rule/{bus_name}/"
                    f"{self.name_of(stack, logical_id)}"
                )
        if resource_type not in ARN_FORMATS:
            raise UnresolvableError(
                f"{stack}: the ARN of {resource_type} ({logical_id}) is not known to tools/iam_policies.py ARN_FORMATS"
            )
        return ARN_FORMATS[resource_type].format(
            name=self.name_of(stack, logical_id),
            r=self.region_of(stack),
            a=self.account_of(stack),
            p=self.partition,
        )

    def _ref(self, stack: str, name: str) -> str:
        pseudo = self._pseudo(stack, name)
        if pseudo is not None:
            return pseudo
        if name == "AWS::StackName":
            return stack
        if name == "AWS::NoValue":
            return ""
        parameters = self.templates[stack].get("Parameters", {})
        if name in parameters:
            if parameters[name].get("Type", "").startswith("AWS::SSM::Parameter::Value<"):
                return self._ssm_value(stack, parameters[name].get("Default", name))
            return str(parameters[name].get("Default", name))
        resource_type = self._resource(stack, name)["Type"]
        returns = REF_RETURNS.get(resource_type, "name")
        if returns == "arn":
            return self.arn_of(stack, name)
        if returns == "url":
            return f"https://sqs.{self.region_of(stack)}.{URL_SUFFIX}/{self.account_of(stack)}/{self.name_of(stack, name)}"
        if returns == "id":
            return f"sg-{strip_hash(name).lower()}"
        return self.name_of(stack, name)

    def _get_att(self, stack: str, argument: Any) -> str:
        logical_id, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
        attribute = self.resolve(stack, attribute)
        resource_type = self._resource(stack, logical_id)["Type"]
        if attribute == "Arn" or (attribute == "TopicArn" and resource_type == "AWS::SNS::Topic"):
            return self.arn_of(stack, logical_id)
        if attribute == "StreamArn":
            return f"{self.arn_of(stack, logical_id)}/stream/2024-01-01T00:00:00.000"
        if attribute in ("QueueName", "TopicName", "Name"):
            return self.name_of(stack, logical_id)
        if attribute == "QueueUrl":
            return self._ref(stack, logical_id)
        if attribute in ("KeyId", "GroupId", "Id"):
            return self._ref(stack, logical_id)
        raise UnresolvableError(
            f"{stack}: Fn::GetAtt {logical_id}.{attribute} ({resource_type}) is not supported"
        )

    def _sub(self, stack: str, argument: Any) -> str:
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        variables = {key: self.resolve(stack, value) for key, value in variables.items()}

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in variables:
                return str(variables[name])
            if "." in name:
                return self._get_att(stack, name)
            return self._ref(stack, name)

        return re.sub(r"\$\{([^}]+)\}", replace, text)

    def _ssm_value(self, stack: str, parameter_name: str) -> str:
        """What CloudFormation reads for an SSM-typed parameter: the value of the app's own
        `AWS::SSM::Parameter` of that name (in the importer's Stage), else the name itself."""
        found = self._ssm_parameters.get((stack.rpartition("/")[0], parameter_name))
        return parameter_name if found is None else str(self.resolve(*found))

    def _import_value(self, stack: str, argument: Any) -> Any:
        name = self.resolve(stack, argument)
        if name not in self._exports:
            raise UnresolvableError(f"{stack}: Fn::ImportValue {name} is exported by no stack of the app")
        # Stages (deployment targets) export the same names: the importer's own Stage's export.
        stage = stack.rpartition("/")[0]
        exporters = self._exports[name]
        exporter, value = next(((s, v) for s, v in exporters if s.rpartition("/")[0] == stage), exporters[0])
        return self.resolve(exporter, value)


#: Resource policies: type -> (the property that holds the document, the property that names
#: what it protects).
RESOURCE_POLICIES: dict[str, tuple[str, str | None]] = {
    "AWS::S3::BucketPolicy": ("PolicyDocument", "Bucket"),
    "AWS::S3::AccessPoint": ("Policy", None),
    "AWS::SQS::QueuePolicy": ("PolicyDocument", "Queues"),
    "AWS::SNS::TopicPolicy": ("PolicyDocument", "Topics"),
    "AWS::KMS::Key": ("KeyPolicy", None),
    "AWS::Logs::ResourcePolicy": ("PolicyDocument", None),
    "AWS::SecretsManager::ResourcePolicy": ("ResourcePolicy", "SecretId"),
}


def policy_documents(
    templates: Mapping[str, dict[str, Any]], resolver: Resolver | None = None
) -> list[PolicyDocument]:
    """Every policy document of every stack, intrinsics rendered, in template order."""
    resolver = resolver or Resolver(templates)
    return [doc for stack, template in templates.items() for doc in _documents(resolver, stack, template)]


def _refs(value: Any) -> tuple[str, ...]:
    """Logical ids a property refers to (`Ref` or `Fn::GetAtt`), in order."""
    items = value if isinstance(value, list) else [value]
    found = []
    for item in items:
        if isinstance(item, dict) and "Ref" in item:
            found.append(item["Ref"])
        elif isinstance(item, dict) and "Fn::GetAtt" in item:
            found.append(item["Fn::GetAtt"][0])
    return tuple(found)


def _render(resolver: Resolver, stack: str, raw: Any) -> dict[str, Any]:
    rendered = resolver.resolve(stack, raw)
    return (
        json.loads(rendered) if isinstance(rendered, str) else rendered
    )  # Logs resource policies are JSON text


def _documents(resolver: Resolver, stack: str, template: dict[str, Any]) -> Iterator[PolicyDocument]:
    for logical_id, resource in template.get("Resources", {}).items():
        kind_of = resource["Type"]
        props = resource.get("Properties", {})
        if kind_of in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            yield PolicyDocument(
                stack,
                logical_id,
                kind_of,
                "identity",
                _render(resolver, stack, props["PolicyDocument"]),
                roles=_refs(props.get("Roles", [])),
            )
        elif kind_of == "AWS::IAM::Role":
            # a trust policy is the role's resource policy: its implicit resource is the role
            trust = PolicyDocument(
                stack,
                logical_id,
                kind_of,
                "trust",
                _render(resolver, stack, props["AssumeRolePolicyDocument"]),
                roles=(logical_id,),
            )
            yield _with_implicit_resource(trust, resolver.arn_of(stack, logical_id), only_when_missing=True)
            for inline in props.get("Policies", []):
                yield PolicyDocument(
                    stack,
                    logical_id,
                    kind_of,
                    "identity",
                    _render(resolver, stack, inline["PolicyDocument"]),
                    roles=(logical_id,),
                )
        elif kind_of in RESOURCE_POLICIES and RESOURCE_POLICIES[kind_of][0] in props:
            document_prop, target_prop = RESOURCE_POLICIES[kind_of]
            target = (
                _refs(props.get(target_prop))
                if target_prop
                else ((logical_id,) if kind_of in ("AWS::KMS::Key", "AWS::S3::AccessPoint") else ())
            )
            found = PolicyDocument(
                stack,
                logical_id,
                kind_of,
                "resource",
                _render(resolver, stack, props[document_prop]),
                target=target,
            )
            if kind_of == "AWS::KMS::Key":  # in a key policy, Resource "*" is this key
                found = _with_implicit_resource(
                    found, resolver.arn_of(stack, logical_id), only_when_missing=False
                )
            yield found


def _with_implicit_resource(found: PolicyDocument, arn: str, *, only_when_missing: bool) -> PolicyDocument:
    """The document with its implicit resource spelled out: a trust policy has no `Resource`
    (it is the role's), a key policy's `"*"` means the key itself."""

    def explicit(statement: dict[str, Any]) -> dict[str, Any]:
        has_resource = "Resource" in statement or "NotResource" in statement
        if has_resource and (only_when_missing or statement.get("Resource") != "*"):
            return statement
        return {**statement, "Resource": arn}

    statements = [explicit(statement) for statement in found.statements()]
    return PolicyDocument(
        found.stack,
        found.resource_id,
        found.resource_type,
        found.kind,
        {**found.document, "Statement": statements},
        found.roles,
        found.target,
    )
