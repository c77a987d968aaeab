"""The checks: each stack's resources against `LIMITS`, then what counts across the stacks of
an assembly (names unique per account or Region, rules per bus, Logs resource policies)."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from pipeline_constructs.deploy_limits.render import NAME_PROPERTY, Env, Renderer
from pipeline_constructs.deploy_limits.table import FIXES, LIMITS, NAME_PATTERNS, Limit


@dataclass(frozen=True)
class StackTemplate:
    """One synthesized stack: its name, where it deploys, its template and the template's size
    as written (the file the CDK CLI uploads)."""

    name: str
    env: Env
    template: Mapping[str, Any]
    template_bytes: int
    path: str = ""


@dataclass(frozen=True)
class Violation:
    """A template that AWS would refuse at deploy time."""

    limit: Limit
    stack: str
    resource: str
    measured: int | str
    detail: str = ""
    fix: str = ""

    def __str__(self) -> str:
        limit = self.limit
        measured = f"{self.measured:,} {limit.unit}" if isinstance(self.measured, int) else self.measured
        bound = (
            f"limit {limit.value:,} {limit.unit}" if limit.unit else f"allowed: {NAME_PATTERNS[limit.key]}"
        )
        detail = f" ({self.detail})" if self.detail else ""
        fix = f"; {self.fix}" if self.fix else ""
        return f"stack {self.stack}: {self.resource}: {limit.what} is {measured}{detail}, {bound} ({limit.source}){fix}"


@dataclass
class _Stack:
    stack: StackTemplate
    render: Renderer
    found: list[Violation] = field(default_factory=list)

    def over(
        self,
        key: str,
        resource: str,
        measured: int,
        *,
        detail: str = "",
        fix: str = "",
        limit: int | None = None,
    ) -> None:
        """A violation when ``measured`` passes the limit ``key`` (or ``limit``, where it depends)."""
        bound = LIMITS[key] if limit is None else replace(LIMITS[key], value=limit)
        if measured > bound.value:
            self.found.append(Violation(bound, self.stack.name, resource, measured, detail, fix))

    def name(self, key: str, resource: str, value: Any) -> None:
        """One name's length, and its characters (what is resolved at deploy time counts as a
        valid character; a name that starts with such a value is not judged)."""
        if value is None:
            return
        rendered = self.render(value)
        self.over(key, resource, rendered.length, detail=repr(_shown(rendered.text)))
        pattern = NAME_PATTERNS.get(key)
        if (
            pattern
            and not rendered.text.startswith("${")
            and not re.fullmatch(pattern, re.sub(r"\$\{[^}]*\}", "a", rendered.text))
        ):
            self.found.append(
                Violation(
                    replace(LIMITS[key], what=f"{LIMITS[key].what}'s characters", value=0, unit=""),
                    self.stack.name,
                    resource,
                    repr(_shown(rendered.text)),
                )
            )

    def text(self, key: str, resource: str, value: Any) -> None:
        if value is not None:
            self.over(key, resource, self.render(value).length)

    def document(self, key: str, resource: str, value: Any, **kwargs: Any) -> None:
        if value is not None:
            self.over(key, resource, self.render.json(value).length, **kwargs)


def _shown(text: str, width: int = 90) -> str:
    return text if len(text) <= width else f"{text[: width - 30]}...{text[-27:]}"


def _each(stack: _Stack, kind: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for logical_id, resource in stack.stack.template.get("Resources", {}).items():
        if resource.get("Type") == kind:
            yield logical_id, resource.get("Properties", {})


#: The limits one property holds, by resource type: (property, how it is measured, limit).
#: "name": its length and characters; "text": its length; "document": JSON without
#: whitespace; "count": its entries. What needs more than one property is checked below.
PROPERTIES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "AWS::IAM::Role": (
        ("RoleName", "name", "iam-role-name"),
        ("Description", "text", "iam-role-description"),
        ("AssumeRolePolicyDocument", "document", "iam-trust-policy"),
    ),
    "AWS::IAM::Policy": (("PolicyName", "name", "iam-policy-name"),),
    "AWS::IAM::ManagedPolicy": (
        ("ManagedPolicyName", "name", "iam-policy-name"),
        ("PolicyDocument", "document", "iam-managed-policy"),
    ),
    "AWS::S3::Bucket": (("BucketName", "name", "s3-bucket-name"),),
    "AWS::S3::BucketPolicy": (("PolicyDocument", "document", "s3-bucket-policy"),),
    "AWS::S3::AccessPoint": (
        ("Name", "name", "s3-access-point-name"),
        ("Policy", "document", "s3-access-point-policy"),
    ),
    "AWS::SQS::Queue": (("QueueName", "name", "sqs-queue-name"),),
    "AWS::SQS::QueuePolicy": (("PolicyDocument", "document", "sqs-queue-policy"),),
    "AWS::SNS::Topic": (("TopicName", "name", "sns-topic-name"), ("DisplayName", "text", "sns-display-name")),
    "AWS::SNS::TopicPolicy": (("PolicyDocument", "document", "sns-topic-policy"),),
    "AWS::KMS::Key": (
        ("KeyPolicy", "document", "kms-key-policy"),
        ("Description", "text", "kms-key-description"),
    ),
    "AWS::KMS::Alias": (("AliasName", "name", "kms-alias-name"),),
    "AWS::Lambda::Function": (
        ("FunctionName", "name", "lambda-function-name"),
        ("Description", "text", "lambda-description"),
    ),
    "AWS::Lambda::Version": (("Description", "text", "lambda-description"),),
    "AWS::Lambda::Alias": (("Description", "text", "lambda-description"),),
    "AWS::StepFunctions::StateMachine": (("StateMachineName", "name", "sfn-state-machine-name"),),
    "AWS::StepFunctions::StateMachineAlias": (
        ("Name", "name", "sfn-alias-name"),
        ("Description", "text", "sfn-description"),
    ),
    "AWS::StepFunctions::StateMachineVersion": (("Description", "text", "sfn-description"),),
    "AWS::Events::Rule": (
        ("Name", "name", "eventbridge-rule-name"),
        ("Description", "text", "eventbridge-rule-description"),
        ("Targets", "count", "eventbridge-targets-per-rule"),
    ),
    "AWS::Events::EventBus": (
        ("Name", "name", "eventbridge-bus-name"),
        ("Description", "text", "eventbridge-bus-description"),
    ),
    "AWS::CloudWatch::Alarm": (
        ("AlarmName", "text", "cloudwatch-alarm-name"),
        ("AlarmDescription", "text", "cloudwatch-alarm-description"),
        ("AlarmActions", "count", "cloudwatch-alarm-actions"),
        ("OKActions", "count", "cloudwatch-alarm-actions"),
        ("InsufficientDataActions", "count", "cloudwatch-alarm-actions"),
        ("Metrics", "count", "cloudwatch-alarm-queries"),
    ),
    "AWS::CloudWatch::Dashboard": (("DashboardName", "name", "cloudwatch-dashboard-name"),),
    "AWS::Logs::LogGroup": (("LogGroupName", "name", "logs-group-name"),),
    "AWS::Logs::MetricFilter": (
        ("FilterName", "text", "logs-filter-name"),
        ("FilterPattern", "text", "logs-filter-pattern"),
    ),
    "AWS::Logs::ResourcePolicy": (("PolicyDocument", "text", "logs-resource-policy"),),
    "AWS::SSM::Parameter": (
        ("Description", "text", "ssm-parameter-description"),
        ("Value", "text", "ssm-parameter-value"),
    ),
    "AWS::DynamoDB::Table": (("TableName", "name", "dynamodb-table-name"),),
    "AWS::EC2::SecurityGroup": (("GroupDescription", "text", "ec2-security-group-description"),),
}


def _properties(s: _Stack) -> None:
    for logical_id, resource in s.stack.template.get("Resources", {}).items():
        props = resource.get("Properties", {})
        for prop, how, key in PROPERTIES.get(resource.get("Type", ""), ()):
            value = props.get(prop)
            if value is None:
                continue
            if how == "name":
                s.name(key, logical_id, value)
            elif how == "count":
                s.over(key, logical_id, len(value), detail=prop if key == "cloudwatch-alarm-actions" else "")
            else:
                s.over(
                    key, logical_id, (s.render.json(value) if how == "document" else s.render(value)).length
                )


def _template(s: _Stack) -> None:
    template = s.stack.template
    s.over("template-bytes", "template", s.stack.template_bytes, fix=FIXES["template-bytes"])
    for key, section in (
        ("template-resources", "Resources"),
        ("template-outputs", "Outputs"),
        ("template-parameters", "Parameters"),
        ("template-mappings", "Mappings"),
    ):
        s.over(key, "template", len(template.get(section, {})), fix=FIXES.get(key, ""))
    s.text("template-description", "template", template.get("Description"))
    s.name("stack-name", "stack", s.stack.name)
    for output_id, output in template.get("Outputs", {}).items():
        s.text("output-description", f"output {output_id}", output.get("Description"))


def _iam(s: _Stack) -> None:
    """The inline policies of a role, together: its own and the AWS::IAM::Policy attached to it."""
    inline: dict[str, int] = defaultdict(int)
    for logical_id, props in _each(s, "AWS::IAM::Role"):
        for policy in props.get("Policies", []):
            inline[logical_id] += s.render.json(policy.get("PolicyDocument")).length
            s.name("iam-policy-name", logical_id, policy.get("PolicyName"))
    for _, props in _each(s, "AWS::IAM::Policy"):
        size = s.render.json(props.get("PolicyDocument")).length
        for role in props.get("Roles", []):
            inline[role["Ref"] if isinstance(role, dict) and "Ref" in role else s.render(role).text] += size
    for role, size in inline.items():
        s.over("iam-role-inline-policies", role, size)
    for logical_id, props in _each(s, "AWS::SQS::QueuePolicy"):
        s.over(
            "sqs-queue-policy-statements",
            logical_id,
            len((props.get("PolicyDocument") or {}).get("Statement", [])),
        )


def _lambda(s: _Stack) -> None:
    for logical_id, props in _each(s, "AWS::Lambda::Function"):
        variables = (props.get("Environment") or {}).get("Variables")
        if variables:
            s.document("lambda-environment", logical_id, variables)
        vpc = props.get("VpcConfig") or {}
        s.over("lambda-vpc-subnets", logical_id, len(vpc.get("SubnetIds", [])))
        s.over("lambda-vpc-security-groups", logical_id, len(vpc.get("SecurityGroupIds", [])))
    policies: dict[str, int] = defaultdict(lambda: POLICY_ENVELOPE_BYTES)
    for _, props in _each(s, "AWS::Lambda::Permission"):
        principal = s.render(props.get("Principal"))
        conditions = {
            key: "x" * s.render(props[key]).length
            for key in ("SourceArn", "SourceAccount", "PrincipalOrgID", "FunctionUrlAuthType")
            if key in props
        }
        policies[_function_key(s, props.get("FunctionName"))] += (
            permission_statement_bytes(principal.text, conditions) + principal.length - len(principal.text)
        )
    for function, size in policies.items():
        s.over("lambda-resource-policy", function, size)


#: A Lambda resource policy's own JSON around its statements, and the longest statement id.
POLICY_ENVELOPE_BYTES, STATEMENT_ID_CHARS = len('{"Version":"2012-10-17","Id":"default","Statement":[]}'), 100
#: A function's ARN at its longest (the longest name).
FUNCTION_ARN_CHARS = len("arn:aws-us-gov:lambda:xx-xxxxxxxxx-1:123456789012:function:") + 64


def permission_statement_bytes(principal: str, conditions: Mapping[str, str] | None = None) -> int:
    """The bytes one `AddPermission` adds to a function's resource policy (the statement Lambda
    stores: the id CloudFormation gives it at its longest, the principal, the function's ARN and
    the conditions), and the comma between statements."""
    statement = {
        "Sid": "x" * STATEMENT_ID_CHARS,
        "Effect": "Allow",
        "Principal": {"Service" if principal.endswith(".amazonaws.com") else "AWS": principal},
        "Action": "lambda:InvokeFunction",
        "Resource": "x" * FUNCTION_ARN_CHARS,
    }
    if conditions:
        statement["Condition"] = {"ArnLike": dict(conditions)}
    return len(json.dumps(statement, separators=(",", ":"))) + 1


def _function_key(s: _Stack, function: Any) -> str:
    """The function a permission is on: its logical id, or its name (without a qualifier)."""
    if isinstance(function, dict):
        # a template's `Ref` and `Fn::GetAtt` name a logical id
        if "Ref" in function:
            return cast(str, function["Ref"])
        if "Fn::GetAtt" in function:
            return cast(str, function["Fn::GetAtt"][0])
    return s.render(function).text.split(":")[0]


def _step_functions(s: _Stack) -> None:
    for logical_id, props in _each(s, "AWS::StepFunctions::StateMachine"):
        definition = props.get("DefinitionString")
        if definition is None and props.get("Definition") is not None:
            definition = json.dumps(props["Definition"])
        if definition is not None:
            rendered = s.render(definition)
            size = rendered.length + sum(
                s.render(v).length * rendered.text.count(f"${{{k}}}")
                for k, v in (props.get("DefinitionSubstitutions") or {}).items()
            )
            s.over("sfn-definition", logical_id, size)


def _events(s: _Stack) -> None:
    for logical_id, props in _each(s, "AWS::Events::Rule"):
        pattern = props.get("EventPattern")
        if pattern is not None:
            # As `routing.pattern_size` measures it (json.dumps' own separators).
            s.over("eventbridge-event-pattern", logical_id, s.render.json(pattern, (", ", ": ")).length)


def _cloudwatch(s: _Stack) -> None:
    for logical_id, props in _each(s, "AWS::CloudWatch::Alarm"):
        queries = props.get("Metrics", [])
        s.over("cloudwatch-alarm-metrics", logical_id, sum("MetricStat" in m for m in queries))
        periods = (
            [props["Period"]]
            if "Period" in props
            else [m["MetricStat"]["Period"] for m in queries if "MetricStat" in m]
        )
        for period in periods:
            if not isinstance(period, int):
                continue
            if period not in (10, 20, 30) and period % 60:
                s.found.append(
                    Violation(
                        LIMITS["cloudwatch-alarm-period"], s.stack.name, logical_id, f"{period} seconds"
                    )
                )
            window = period * int(props.get("EvaluationPeriods", 1))
            s.over("cloudwatch-alarm-window", logical_id, window, limit=86_400 if period < 3600 else None)
    for logical_id, props in _each(s, "AWS::CloudWatch::Dashboard"):
        # Each widget's JSON has one "properties" key (its own), at any depth of the body.
        widgets = s.render(props.get("DashboardBody")).text.count('"properties":')
        s.over("cloudwatch-dashboard-widgets", logical_id, widgets)


def _ssm(s: _Stack) -> None:
    """A parameter's name counts with its ARN's own characters."""
    arn = len("arn:aws-us-gov:ssm:") + 14 + 1 + 12 + len(":parameter")
    for logical_id, props in _each(s, "AWS::SSM::Parameter"):
        name = s.render(props.get("Name"))
        s.over("ssm-parameter-name", logical_id, arn + name.length + (0 if name.text.startswith("/") else 1))


_PER_STACK: tuple[Callable[[_Stack], None], ...] = (
    _properties,
    _template,
    _iam,
    _lambda,
    _step_functions,
    _events,
    _cloudwatch,
    _ssm,
)


#: Names unique per account in every Region, or across all accounts; every other named type:
#: per account and Region.
_ACCOUNT_WIDE = frozenset({"AWS::IAM::Role", "AWS::IAM::ManagedPolicy", "AWS::CloudWatch::Dashboard"})
_GLOBAL = frozenset({"AWS::S3::Bucket"})
#: Named within another resource: an alias within its state machine, a filter within its log group.
_WITHIN_ANOTHER = frozenset({"AWS::StepFunctions::StateMachineAlias", "AWS::Logs::MetricFilter"})


def _unique(stacks: Sequence[_Stack]) -> list[Violation]:
    """Two resources (or stacks) that would need one name where AWS allows one."""
    seen: dict[tuple[Any, ...], tuple[str, str]] = {}
    found = []
    for s in stacks:
        env = s.stack.env
        named: list[tuple[str, str, str]] = [("AWS::CloudFormation::Stack", "stack", s.stack.name)]
        for logical_id, resource in s.stack.template.get("Resources", {}).items():
            kind = resource.get("Type", "")
            value = resource.get("Properties", {}).get(NAME_PROPERTY.get(kind, ""))
            if value is not None and kind not in _WITHIN_ANOTHER:
                scope = kind
                if kind == "AWS::Events::Rule":
                    scope = f"{kind} on bus {s.render(resource['Properties'].get('EventBusName', 'default')).text}"
                named.append((scope, logical_id, s.render(value).text))
        for kind, logical_id, name in named:
            if kind in _GLOBAL:
                key: tuple[Any, ...] = (kind, name)
                limit = LIMITS["unique-globally"]
            elif kind in _ACCOUNT_WIDE:
                key, limit = (kind, env.account, name), LIMITS["unique-per-account"]
            else:
                key, limit = (kind, env.account, env.region, name), LIMITS["unique-per-region"]
            if key in seen:
                other_stack, other_id = seen[key]
                found.append(
                    Violation(
                        limit,
                        s.stack.name,
                        logical_id,
                        f"{kind} {name!r}",
                        f"also {other_id} of stack {other_stack}, deployed to {env}",
                    )
                )
            else:
                seen[key] = (s.stack.name, logical_id)
    return found


RulesPerBus = Callable[[Env, str], int]


def _per_bus(stacks: Sequence[_Stack], rules_per_bus: RulesPerBus) -> list[Violation]:
    """Rules, and rules with a wildcard filter, per event bus, across the stacks of the assembly."""
    rules: dict[tuple[Env, str], list[tuple[str, str, bool]]] = defaultdict(list)
    for s in stacks:
        for logical_id, props in _each(s, "AWS::Events::Rule"):
            bus = s.render(props.get("EventBusName", "default")).text.rsplit("/", 1)[-1]
            wildcard = '"wildcard"' in json.dumps(props.get("EventPattern"))
            rules[(s.stack.env, bus)].append((s.stack.name, logical_id, wildcard))
    found = []
    for (env, bus), on_bus in rules.items():
        for key, members, limit in (
            ("eventbridge-rules-per-bus", on_bus, rules_per_bus(env, bus)),
            ("eventbridge-wildcard-rules-per-bus", [r for r in on_bus if r[2]], None),
        ):
            bound = LIMITS[key] if limit is None else replace(LIMITS[key], value=limit)
            if len(members) > bound.value:
                stack, logical_id, _ = members[bound.value]
                found.append(
                    Violation(
                        bound,
                        stack,
                        logical_id,
                        len(members),
                        f"bus {bus!r} in {env}, across {len({m[0] for m in members})} stacks",
                        FIXES[key],
                    )
                )
    return found


def _per_region(stacks: Sequence[_Stack]) -> list[Violation]:
    """CloudWatch Logs resource policies, 10 per account and Region, across the stacks."""
    policies: dict[Env, list[tuple[str, str]]] = defaultdict(list)
    for s in stacks:
        policies[s.stack.env] += [
            (s.stack.name, logical_id) for logical_id, _ in _each(s, "AWS::Logs::ResourcePolicy")
        ]
    limit = LIMITS["logs-resource-policies"]
    return [
        Violation(limit, found[limit.value][0], found[limit.value][1], len(found), f"in {env}")
        for env, found in policies.items()
        if len(found) > limit.value
    ]


def check(stacks: Iterable[StackTemplate], *, rules_per_bus: RulesPerBus | None = None) -> list[Violation]:
    """Every violation of `LIMITS` in the stacks of one assembly. `rules_per_bus(env, bus)`: the
    "Rules per event bus" quota of bus `bus` (`default` for the default bus) in `env`."""
    checked = [_Stack(stack, Renderer(stack.template, stack.env, stack.name)) for stack in stacks]
    found: list[Violation] = []
    for s in checked:
        for rule in _PER_STACK:
            rule(s)
        found += s.found
    found += _unique(checked)
    found += _per_region(checked)
    found += _per_bus(checked, rules_per_bus or (lambda env, bus: LIMITS["eventbridge-rules-per-bus"].value))
    return found


def assembly_stacks(template_paths: Iterable[str]) -> list[StackTemplate]:
    """The stacks of the templates of an assembly, with their names and environments from the
    manifest beside each template (a Stage's templates are in an assembly of their own)."""
    stacks = []
    manifests: dict[Path, dict[str, Any]] = {}
    for raw in template_paths:
        path = Path(raw)
        if path.parent not in manifests:
            manifest = path.parent / "manifest.json"
            artifacts = json.loads(manifest.read_text()).get("artifacts", {}) if manifest.exists() else {}
            manifests[path.parent] = {
                a.get("properties", {}).get("templateFile"): a
                for a in artifacts.values()
                if a.get("type") == "aws:cloudformation:stack"
            }
        artifact = manifests[path.parent].get(path.name, {})
        name = artifact.get("properties", {}).get("stackName") or path.name.removesuffix(".template.json")
        account, region = _environment(artifact.get("environment", ""))
        text = path.read_bytes()
        stacks.append(StackTemplate(name, Env(account, region), json.loads(text), len(text), str(path)))
    return stacks


def _environment(environment: str) -> tuple[str | None, str | None]:
    account, _, region = environment.removeprefix("aws://").partition("/")
    return (
        None if not account or account.startswith("unknown-") else account,
        None if not region or region.startswith("unknown-") else region,
    )
