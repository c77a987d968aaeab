"""AWS's deploy-time limits, checked on every synthesized cloud assembly.

CloudFormation, IAM, S3, SQS, SNS, KMS, Lambda, Step Functions, EventBridge, CloudWatch and
SSM refuse at deploy time what a template may well express: a template over 1 MB, a Lambda
environment over 4 KB, a rule description over 512 characters, a 31st wildcard rule on a bus,
two dashboards of one name in one account. Nothing here deploys to a real account before its
users do, so `application.DeployLimits` (a CDK validation plugin that every synth runs) holds
every template of the assembly against the limits of `LIMITS`, each with its AWS
documentation page, and fails the synth (`cdk synth`, `make synth`, `make diff`,
`make deploy`, the tests, the local runtime) naming the stack, the resource, the measured value
and the limit.

Values CloudFormation resolves at deploy time (`Ref`, `Fn::GetAtt`, `Fn::Sub`, SSM parameters)
are measured at their longest: an account id is 12 digits, an unknown Region 14 characters, a
resource's generated name 64 (its name when the template gives one), an ARN 80 more.

Names that must be unique are compared across every stack of the assembly: per account (IAM
roles and managed policies, dashboards, and S3 buckets, global to all accounts) or per account
and Region (everything else named), an environment-agnostic stack counting as "the account and
Region of `cdk deploy`".

The config model refuses a tenants file first where a limit follows from one field (its
bounds, `capacity.py`); this is the net under every combination it cannot foresee.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline_constructs import routing

_CFN = "https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cloudformation-limits.html"
_IAM = "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html"
_S3_POLICY = "https://docs.aws.amazon.com/AmazonS3/latest/userguide/add-bucket-policy.html"
_S3_NAMES = "https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html"
_S3_AP = "https://docs.aws.amazon.com/AmazonS3/latest/userguide/access-points-restrictions-limitations-naming-rules.html"
_SQS_POLICY = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-policies.html"
_SQS_QUEUES = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-queues.html"
_SNS = "https://docs.aws.amazon.com/general/latest/gr/sns.html"
_SNS_TOPIC = "https://docs.aws.amazon.com/sns/latest/api/API_CreateTopic.html"
_KMS = "https://docs.aws.amazon.com/kms/latest/developerguide/resource-limits.html"
_KMS_ALIAS = "https://docs.aws.amazon.com/kms/latest/APIReference/API_CreateAlias.html"
_LAMBDA = "https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html"
_LAMBDA_API = "https://docs.aws.amazon.com/lambda/latest/api/API_CreateFunction.html"
_LAMBDA_VPC = "https://docs.aws.amazon.com/lambda/latest/dg/API_VpcConfig.html"
_SFN = "https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html"
_SFN_API = "https://docs.aws.amazon.com/step-functions/latest/apireference/API_CreateStateMachine.html"
_EB = "https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-quota.html"
_EB_RULE = "https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutRule.html"
_EB_BUS = "https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_CreateEventBus.html"
_CW_ALARM = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html"
_CW_DASHBOARD = "https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-cloudwatch-dashboard.html"
_LOGS = "https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_CreateLogGroup.html"
_LOGS_POLICY = "https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_PutResourcePolicy.html"
_LOGS_FILTER = "https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_PutMetricFilter.html"
_SSM = "https://docs.aws.amazon.com/systems-manager/latest/userguide/sysman-parameter-name-constraints.html"
_SSM_API = "https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_PutParameter.html"
_STACK = "https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_CreateStack.html"
_DDB = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html"
_EC2_SG = "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateSecurityGroup.html"


@dataclass(frozen=True)
class Limit:
    """One documented limit: what it bounds, its value and unit, where AWS documents it."""

    key: str
    what: str
    value: int
    unit: str
    source: str


def _limits(*rows: tuple[str, str, int, str, str]) -> dict[str, Limit]:
    return {key: Limit(key, what, value, unit, source) for key, what, value, unit, source in rows}


#: Every limit checked, by key. "characters" and "bytes" count the JSON CloudFormation passes on
#: (policies without whitespace, as IAM counts them).
LIMITS = _limits(
    ("template-bytes", "CloudFormation template body", 1_000_000, "bytes", _CFN),
    ("template-resources", "resources in one template", 500, "resources", _CFN),
    ("template-outputs", "outputs in one template", 200, "outputs", _CFN),
    ("template-parameters", "parameters in one template", 200, "parameters", _CFN),
    ("template-mappings", "mappings in one template", 200, "mappings", _CFN),
    ("template-description", "template Description", 1024, "bytes", _CFN),
    ("stack-name", "stack name", 128, "characters", _STACK),
    ("output-description", "output Description", 1024, "characters", _CFN),
    ("iam-role-name", "IAM role name", 64, "characters", _IAM),
    ("iam-role-description", "IAM role description", 1000, "characters", _IAM),
    ("iam-trust-policy", "IAM role trust policy", 2048, "characters", _IAM),
    ("iam-role-inline-policies", "inline policies of one IAM role, together", 10_240, "characters", _IAM),
    ("iam-policy-name", "IAM policy name", 128, "characters", _IAM),
    ("iam-managed-policy", "IAM managed policy", 6144, "characters", _IAM),
    ("s3-bucket-name", "S3 bucket name", 63, "characters", _S3_NAMES),
    ("s3-bucket-policy", "S3 bucket policy", 20_480, "bytes", _S3_POLICY),
    ("s3-access-point-name", "S3 access point name", 50, "characters", _S3_AP),
    ("s3-access-point-policy", "S3 access point policy", 20_480, "bytes", _S3_AP),
    ("sqs-queue-name", "SQS queue name", 80, "characters", _SQS_QUEUES),
    ("sqs-queue-policy", "SQS queue policy", 8192, "bytes", _SQS_POLICY),
    ("sqs-queue-policy-statements", "statements in one SQS queue policy", 20, "statements", _SQS_POLICY),
    ("sns-topic-name", "SNS topic name", 256, "characters", _SNS_TOPIC),
    ("sns-display-name", "SNS topic display name", 100, "characters", _SNS_TOPIC),
    ("sns-topic-policy", "SNS topic policy", 30_720, "bytes", _SNS),
    ("kms-key-policy", "KMS key policy", 32_768, "bytes", _KMS),
    ("kms-key-description", "KMS key description", 8192, "characters", _KMS),
    ("kms-alias-name", "KMS alias name", 256, "characters", _KMS_ALIAS),
    ("lambda-function-name", "Lambda function name", 64, "characters", _LAMBDA_API),
    ("lambda-description", "Lambda function, version or alias description", 256, "characters", _LAMBDA_API),
    ("lambda-environment", "Lambda environment variables, together", 4096, "bytes", _LAMBDA),
    ("lambda-resource-policy", "Lambda function resource-based policy", 20_480, "bytes", _LAMBDA),
    ("lambda-vpc-subnets", "subnets of one Lambda function", 16, "subnets", _LAMBDA_VPC),
    ("lambda-vpc-security-groups", "security groups of one Lambda function", 5, "security groups", _LAMBDA_VPC),
    ("sfn-state-machine-name", "state machine name", 80, "characters", _SFN),
    ("sfn-definition", "state machine definition", 1_048_576, "bytes", _SFN),
    ("sfn-alias-name", "state machine alias name", 80, "characters", _SFN_API),
    ("sfn-description", "state machine version or alias description", 256, "characters", _SFN_API),
    ("eventbridge-rule-name", "EventBridge rule name", 64, "characters", _EB_RULE),
    ("eventbridge-rule-description", "EventBridge rule description", 512, "characters", _EB_RULE),
    ("eventbridge-event-pattern", "EventBridge event pattern", routing.MAX_EVENT_PATTERN_CHARS, "characters", _EB),
    ("eventbridge-targets-per-rule", "targets of one EventBridge rule", 5, "targets", _EB),
    ("eventbridge-rules-per-bus", "EventBridge rules on one event bus", 300, "rules", _EB),
    ("eventbridge-wildcard-rules-per-bus", "EventBridge rules with a wildcard filter on one event bus (not "
     "adjustable)", 30, "rules", _EB),
    ("eventbridge-bus-name", "EventBridge event bus name", 256, "characters", _EB_BUS),
    ("eventbridge-bus-description", "EventBridge event bus description", 512, "characters", _EB_BUS),
    ("cloudwatch-alarm-name", "CloudWatch alarm name", 255, "characters", _CW_ALARM),
    ("cloudwatch-alarm-description", "CloudWatch alarm description", 1024, "characters", _CW_ALARM),
    ("cloudwatch-alarm-period", "CloudWatch alarm period: 10, 20, 30 or a multiple of 60", 60, "seconds", _CW_ALARM),
    ("cloudwatch-alarm-window", "CloudWatch alarm period x evaluation periods (1 day for periods under an hour)",
     7 * 86_400, "seconds", _CW_ALARM),
    ("cloudwatch-dashboard-name", "CloudWatch dashboard name", 255, "characters", _CW_DASHBOARD),
    ("logs-group-name", "CloudWatch Logs log group name", 512, "characters", _LOGS),
    ("logs-filter-name", "CloudWatch Logs metric filter name", 512, "characters", _LOGS_FILTER),
    ("logs-filter-pattern", "CloudWatch Logs metric filter pattern", 1024, "characters", _LOGS_FILTER),
    ("logs-resource-policies", "CloudWatch Logs resource policies per account and Region", 10, "policies",
     _LOGS_POLICY),
    ("logs-resource-policy", "CloudWatch Logs resource policy", 5120, "characters", _LOGS_POLICY),
    ("ssm-parameter-name", "SSM parameter name with its ARN", 1011, "characters", _SSM),
    ("ssm-parameter-description", "SSM parameter description", 1024, "characters", _SSM_API),
    ("ssm-parameter-value", "SSM parameter value (standard tier)", 4096, "characters", _SSM_API),
    ("dynamodb-table-name", "DynamoDB table name", 255, "characters", _DDB),
    ("ec2-security-group-description", "security group description", 255, "characters", _EC2_SG),
    ("unique-per-account", "names of IAM roles, IAM managed policies and dashboards, unique per account in every "
     "Region", 1, "resource per name", _CW_DASHBOARD),
    ("unique-per-region", "every other name, unique per account and Region (a rule's per event bus)", 1,
     "resource per name", _CFN),
    ("unique-globally", "S3 bucket names, unique across all accounts", 1, "bucket per name", _S3_NAMES),
)

#: Character sets of names, by limit key (AWS's documented patterns).
NAME_PATTERNS = {
    "stack-name": r"[A-Za-z][A-Za-z0-9-]*",
    "iam-role-name": r"[\w+=,.@-]+",
    "iam-policy-name": r"[\w+=,.@-]+",
    "s3-bucket-name": r"[a-z0-9][a-z0-9.-]*[a-z0-9]",
    "s3-access-point-name": r"[a-z0-9][a-z0-9-]*[a-z0-9]",
    "sqs-queue-name": r"[A-Za-z0-9_-]+(\.fifo)?",
    "sns-topic-name": r"[A-Za-z0-9_-]+(\.fifo)?",
    "kms-alias-name": r"alias/[A-Za-z0-9/_-]+",
    "lambda-function-name": r"[A-Za-z0-9_-]+",
    "sfn-state-machine-name": r"[A-Za-z0-9_-]+",
    "sfn-alias-name": r"[A-Za-z0-9_-]+",
    "eventbridge-rule-name": r"[.\-_A-Za-z0-9]+",
    "eventbridge-bus-name": r"[/.\-_A-Za-z0-9]+",
    "cloudwatch-dashboard-name": r"[A-Za-z0-9_-]+",
    "logs-group-name": r"[.\-_/#A-Za-z0-9]+",
    "dynamodb-table-name": r"[A-Za-z0-9_.-]+",
    "ssm-parameter-name": r"/?[A-Za-z0-9_.\-/]+",
}

def reference_table() -> str:
    """The limits as docs/scaling.md lists them (a Markdown table, generated)."""
    rows = ["| limit | value | AWS documentation |", "| --- | --- | --- |"]
    for limit in LIMITS.values():
        shape = f"; characters `{NAME_PATTERNS[limit.key]}`" if limit.key in NAME_PATTERNS else ""
        page = limit.source.rsplit("/", 1)[-1].removesuffix(".html")
        rows.append(f"| {limit.what} | {limit.value:,} {limit.unit}{shape} | [{page}]({limit.source}) |")
    return "\n".join(rows) + "\n"


# -- values CloudFormation resolves at deploy time ------------------------------------------------

#: The longest value of each pseudo parameter whose value synthesis does not know.
_PSEUDO_LONGEST = {"AWS::AccountId": 12, "AWS::Region": 14, "AWS::Partition": 10, "AWS::URLSuffix": 16,
                   "AWS::StackId": 165}
#: A resource's generated physical name and the ARN around a name, at their longest.
GENERATED_NAME_CHARS, ARN_CHARS = 64, 80
#: The property that names a resource, by type (the name `Ref` and its ARN return).
_NAME_PROPERTY = {
    "AWS::IAM::Role": "RoleName", "AWS::IAM::ManagedPolicy": "ManagedPolicyName",
    "AWS::S3::Bucket": "BucketName", "AWS::S3::AccessPoint": "Name", "AWS::SQS::Queue": "QueueName",
    "AWS::SNS::Topic": "TopicName", "AWS::KMS::Alias": "AliasName", "AWS::Lambda::Function": "FunctionName",
    "AWS::StepFunctions::StateMachine": "StateMachineName", "AWS::StepFunctions::StateMachineAlias": "Name",
    "AWS::Events::Rule": "Name", "AWS::Events::EventBus": "Name", "AWS::CloudWatch::Alarm": "AlarmName",
    "AWS::CloudWatch::Dashboard": "DashboardName", "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::Logs::MetricFilter": "FilterName", "AWS::SSM::Parameter": "Name", "AWS::DynamoDB::Table": "TableName",
}


@dataclass(frozen=True)
class Env:
    """Where a stack deploys: None for what `cdk deploy`'s credentials decide."""

    account: str | None
    region: str | None

    def __str__(self) -> str:
        return f"{self.account or 'the deploy account'}/{self.region or 'the deploy Region'}"


@dataclass
class Rendered:
    """A value as CloudFormation will pass it on: `text` with `${...}` for what is resolved at
    deploy time (comparable between resources: the same token renders the same), `length` its
    longest length."""

    text: str
    length: int


class _Renderer:
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
        (function, argument), = value.items()
        if function == "Ref":
            yield from self._ref(argument)
        elif function == "Fn::GetAtt":
            logical_id, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
            name = self._name_of(logical_id)
            longest = len(name.encode()) if name is not None else GENERATED_NAME_CHARS
            yield f"${{{logical_id}.{attribute}}}", longest + (ARN_CHARS if "Arn" in attribute else 0)
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
                yield from (self._parts(variables[name]) if name in variables else
                                self._ref(name) if "." not in name else self._parts({"Fn::GetAtt": name}))
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
            own = self._name_of(name)
            yield (own, len(own)) if own is not None else (f"${{{name}}}", GENERATED_NAME_CHARS)

    def _name_of(self, logical_id: str) -> str | None:
        resource = self.resources.get(logical_id, {})
        name = resource.get("Properties", {}).get(_NAME_PROPERTY.get(resource.get("Type", ""), ""))
        return self(name).text if name is not None else None


# -- the checks -----------------------------------------------------------------------------------


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
        measured = (f"{self.measured:,} {limit.unit}" if isinstance(self.measured, int) else self.measured)
        bound = f"limit {limit.value:,} {limit.unit}" if limit.unit else f"allowed: {NAME_PATTERNS[limit.key]}"
        detail = f" ({self.detail})" if self.detail else ""
        fix = f"; {self.fix}" if self.fix else ""
        return f"stack {self.stack}: {self.resource}: {limit.what} is {measured}{detail}, {bound} ({limit.source}){fix}"


@dataclass
class _Stack:
    stack: StackTemplate
    render: _Renderer
    found: list[Violation] = field(default_factory=list)

    def over(self, key: str, resource: str, measured: int, *, detail: str = "", fix: str = "",
             limit: int | None = None) -> None:
        bound = LIMITS[key].value if limit is None else limit
        if measured > bound:
            used = LIMITS[key] if limit is None else Limit(key, LIMITS[key].what, bound, LIMITS[key].unit,
                                                             LIMITS[key].source)
            self.found.append(Violation(used, self.stack.name, resource, measured, detail, fix))

    def name(self, key: str, resource: str, value: Any) -> Rendered | None:
        """Check one name's length and characters; the name as rendered."""
        if value is None:
            return None
        rendered = self.render(value)
        self.over(key, resource, rendered.length, detail=repr(_shown(rendered.text)))
        pattern = NAME_PATTERNS.get(key)
        literal = re.sub(r"\$\{[^}]*\}", "a", rendered.text)
        if pattern and not re.fullmatch(pattern, literal) and "${" not in rendered.text[:1]:
            self.found.append(Violation(
                Limit(key, f"{LIMITS[key].what}'s characters", 0, "", LIMITS[key].source), self.stack.name,
                resource, repr(_shown(rendered.text))))
        return rendered

    def text(self, key: str, resource: str, value: Any) -> None:
        if value is not None:
            self.over(key, resource, self.render(value).length)

    def document(self, key: str, resource: str, value: Any, **kwargs: Any) -> None:
        if value is not None:
            self.over(key, resource, self.render.json(value).length, **kwargs)


def _shown(text: str, width: int = 90) -> str:
    return text if len(text) <= width else f"{text[:width - 30]}...{text[-27:]}"


#: Fixes of violations that follow from the tenants file, by limit key.
FIXES = {
    "template-bytes": "fewer tenants or routing shards per deployment target (`routing.shards`, `targets`), or "
                      "shorter tenant ids and prefixes",
    "template-resources": "fewer routing shards or tenants per deployment target (`routing.shards`, `targets`), "
                          "or fewer `notifications.emails` and `subscriptions` (a topic of your own: "
                          "`notifications.topic_arn`)",
    "eventbridge-rules-per-bus": "raise `routing.shards` (or `account_limits.eventbridge_rules_per_bus` after a "
                                 "quota increase)",
    "eventbridge-wildcard-rules-per-bus": "fewer rules with wildcard filters on this bus",
}


def _each(stack: _Stack, kind: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for logical_id, resource in stack.stack.template.get("Resources", {}).items():
        if resource.get("Type") == kind:
            yield logical_id, resource.get("Properties", {})


def _template(s: _Stack) -> None:
    template, name = s.stack.template, s.stack.name
    s.over("template-bytes", "template", s.stack.template_bytes, fix=FIXES["template-bytes"])
    for key, section in (("template-resources", "Resources"), ("template-outputs", "Outputs"),
                         ("template-parameters", "Parameters"), ("template-mappings", "Mappings")):
        s.over(key, "template", len(template.get(section, {})), fix=FIXES.get(key, ""))
    s.text("template-description", "template", template.get("Description"))
    s.name("stack-name", "stack", name)
    for output_id, output in template.get("Outputs", {}).items():
        s.text("output-description", f"output {output_id}", output.get("Description"))


def _iam(s: _Stack) -> None:
    inline: dict[str, int] = defaultdict(int)
    for logical_id, props in _each(s, "AWS::IAM::Role"):
        s.name("iam-role-name", logical_id, props.get("RoleName"))
        s.text("iam-role-description", logical_id, props.get("Description"))
        s.document("iam-trust-policy", logical_id, props.get("AssumeRolePolicyDocument"))
        for policy in props.get("Policies", []):
            inline[logical_id] += s.render.json(policy.get("PolicyDocument")).length
            s.name("iam-policy-name", logical_id, policy.get("PolicyName"))
    for logical_id, props in _each(s, "AWS::IAM::Policy"):
        s.name("iam-policy-name", logical_id, props.get("PolicyName"))
        size = s.render.json(props.get("PolicyDocument")).length
        for role in props.get("Roles", []):
            inline[role["Ref"] if isinstance(role, dict) and "Ref" in role else s.render(role).text] += size
    for role, size in inline.items():
        s.over("iam-role-inline-policies", role, size)
    for logical_id, props in _each(s, "AWS::IAM::ManagedPolicy"):
        s.document("iam-managed-policy", logical_id, props.get("PolicyDocument"))
        s.name("iam-policy-name", logical_id, props.get("ManagedPolicyName"))


def _resource_policies(s: _Stack) -> None:
    for logical_id, props in _each(s, "AWS::S3::Bucket"):
        s.name("s3-bucket-name", logical_id, props.get("BucketName"))
    for logical_id, props in _each(s, "AWS::S3::BucketPolicy"):
        s.document("s3-bucket-policy", logical_id, props.get("PolicyDocument"))
    for logical_id, props in _each(s, "AWS::S3::AccessPoint"):
        s.name("s3-access-point-name", logical_id, props.get("Name"))
        s.document("s3-access-point-policy", logical_id, props.get("Policy"))
    for logical_id, props in _each(s, "AWS::SQS::Queue"):
        s.name("sqs-queue-name", logical_id, props.get("QueueName"))
    for logical_id, props in _each(s, "AWS::SQS::QueuePolicy"):
        document = props.get("PolicyDocument") or {}
        s.document("sqs-queue-policy", logical_id, document)
        s.over("sqs-queue-policy-statements", logical_id, len(document.get("Statement", [])))
    for logical_id, props in _each(s, "AWS::SNS::Topic"):
        s.name("sns-topic-name", logical_id, props.get("TopicName"))
        s.text("sns-display-name", logical_id, props.get("DisplayName"))
    for logical_id, props in _each(s, "AWS::SNS::TopicPolicy"):
        s.document("sns-topic-policy", logical_id, props.get("PolicyDocument"))
    for logical_id, props in _each(s, "AWS::KMS::Key"):
        s.document("kms-key-policy", logical_id, props.get("KeyPolicy"))
        s.text("kms-key-description", logical_id, props.get("Description"))
    for logical_id, props in _each(s, "AWS::KMS::Alias"):
        s.name("kms-alias-name", logical_id, props.get("AliasName"))


def _lambda(s: _Stack) -> None:
    for logical_id, props in _each(s, "AWS::Lambda::Function"):
        s.name("lambda-function-name", logical_id, props.get("FunctionName"))
        s.text("lambda-description", logical_id, props.get("Description"))
        variables = (props.get("Environment") or {}).get("Variables")
        if variables:
            s.document("lambda-environment", logical_id, variables)
        vpc = props.get("VpcConfig") or {}
        s.over("lambda-vpc-subnets", logical_id, len(vpc.get("SubnetIds", [])))
        s.over("lambda-vpc-security-groups", logical_id, len(vpc.get("SecurityGroupIds", [])))
    for kind in ("AWS::Lambda::Version", "AWS::Lambda::Alias"):
        for logical_id, props in _each(s, kind):
            s.text("lambda-description", logical_id, props.get("Description"))
    policies: dict[str, int] = defaultdict(lambda: POLICY_ENVELOPE_BYTES)
    for logical_id, props in _each(s, "AWS::Lambda::Permission"):
        principal = s.render(props.get("Principal"))
        conditions = {key: "x" * s.render(props[key]).length
                      for key in ("SourceArn", "SourceAccount", "PrincipalOrgID", "FunctionUrlAuthType") if key in props}
        policies[_function_key(s, props.get("FunctionName"))] += (
            permission_statement_bytes(principal.text, conditions) + principal.length - len(principal.text))
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
    statement = {"Sid": "x" * STATEMENT_ID_CHARS, "Effect": "Allow",
                 "Principal": {"Service" if principal.endswith(".amazonaws.com") else "AWS": principal},
                 "Action": "lambda:InvokeFunction", "Resource": "x" * FUNCTION_ARN_CHARS}
    if conditions:
        statement["Condition"] = {"ArnLike": dict(conditions)}
    return len(json.dumps(statement, separators=(",", ":"))) + 1


def _function_key(s: _Stack, function: Any) -> str:
    """The function a permission is on: its logical id, or its name (without a qualifier)."""
    if isinstance(function, dict):
        if "Ref" in function:
            return function["Ref"]
        if "Fn::GetAtt" in function:
            return function["Fn::GetAtt"][0]
    return s.render(function).text.split(":")[0]


def _step_functions(s: _Stack) -> None:
    for logical_id, props in _each(s, "AWS::StepFunctions::StateMachine"):
        s.name("sfn-state-machine-name", logical_id, props.get("StateMachineName"))
        definition = props.get("DefinitionString")
        if definition is None and props.get("Definition") is not None:
            definition = json.dumps(props["Definition"])
        if definition is not None:
            rendered = s.render(definition)
            size = rendered.length + sum(s.render(v).length * rendered.text.count(f"${{{k}}}")
                                         for k, v in (props.get("DefinitionSubstitutions") or {}).items())
            s.over("sfn-definition", logical_id, size)
    for logical_id, props in _each(s, "AWS::StepFunctions::StateMachineAlias"):
        s.name("sfn-alias-name", logical_id, props.get("Name"))
        s.text("sfn-description", logical_id, props.get("Description"))
    for logical_id, props in _each(s, "AWS::StepFunctions::StateMachineVersion"):
        s.text("sfn-description", logical_id, props.get("Description"))


def _events(s: _Stack) -> None:
    for logical_id, props in _each(s, "AWS::Events::Rule"):
        s.name("eventbridge-rule-name", logical_id, props.get("Name"))
        s.text("eventbridge-rule-description", logical_id, props.get("Description"))
        pattern = props.get("EventPattern")
        if pattern is not None:
            # As `routing.pattern_size` measures it (json.dumps' own separators).
            s.over("eventbridge-event-pattern", logical_id, s.render.json(pattern, (", ", ": ")).length)
        s.over("eventbridge-targets-per-rule", logical_id, len(props.get("Targets", [])))
    for logical_id, props in _each(s, "AWS::Events::EventBus"):
        s.name("eventbridge-bus-name", logical_id, props.get("Name"))
        s.text("eventbridge-bus-description", logical_id, props.get("Description"))


def _cloudwatch(s: _Stack) -> None:
    for logical_id, props in _each(s, "AWS::CloudWatch::Alarm"):
        s.text("cloudwatch-alarm-name", logical_id, props.get("AlarmName"))
        s.text("cloudwatch-alarm-description", logical_id, props.get("AlarmDescription"))
        periods = [props["Period"]] if "Period" in props else [
            m["MetricStat"]["Period"] for m in props.get("Metrics", []) if "MetricStat" in m]
        for period in periods:
            if not isinstance(period, int):
                continue
            if period not in (10, 20, 30) and period % 60:
                s.found.append(Violation(LIMITS["cloudwatch-alarm-period"], s.stack.name, logical_id,
                                         f"{period} seconds"))
            window = period * int(props.get("EvaluationPeriods", 1))
            s.over("cloudwatch-alarm-window", logical_id, window, limit=86_400 if period < 3600 else None)
    for logical_id, props in _each(s, "AWS::CloudWatch::Dashboard"):
        s.name("cloudwatch-dashboard-name", logical_id, props.get("DashboardName"))
    for logical_id, props in _each(s, "AWS::Logs::LogGroup"):
        s.name("logs-group-name", logical_id, props.get("LogGroupName"))
    for logical_id, props in _each(s, "AWS::Logs::MetricFilter"):
        s.text("logs-filter-name", logical_id, props.get("FilterName"))
        s.text("logs-filter-pattern", logical_id, props.get("FilterPattern"))
    for logical_id, props in _each(s, "AWS::Logs::ResourcePolicy"):
        s.over("logs-resource-policy", logical_id, s.render(props.get("PolicyDocument")).length)


def _others(s: _Stack) -> None:
    prefix = len("arn:aws-us-gov:ssm:") + 14 + 1 + 12 + len(":parameter")
    for logical_id, props in _each(s, "AWS::SSM::Parameter"):
        name = s.render(props.get("Name"))
        s.over("ssm-parameter-name", logical_id, prefix + name.length + (0 if name.text.startswith("/") else 1))
        s.text("ssm-parameter-description", logical_id, props.get("Description"))
        s.text("ssm-parameter-value", logical_id, props.get("Value"))
    for logical_id, props in _each(s, "AWS::DynamoDB::Table"):
        s.name("dynamodb-table-name", logical_id, props.get("TableName"))
    for logical_id, props in _each(s, "AWS::EC2::SecurityGroup"):
        s.text("ec2-security-group-description", logical_id, props.get("GroupDescription"))


_PER_STACK: tuple[Callable[[_Stack], None], ...] = (_template, _iam, _resource_policies, _lambda, _step_functions,
                                                    _events, _cloudwatch, _others)

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
            value = resource.get("Properties", {}).get(_NAME_PROPERTY.get(kind, ""))
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
                found.append(Violation(limit, s.stack.name, logical_id, f"{kind} {name!r}",
                                       f"also {other_id} of stack {other_stack}, deployed to {env}"))
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
                ("eventbridge-wildcard-rules-per-bus", [r for r in on_bus if r[2]], None)):
            bound = LIMITS[key] if limit is None else Limit(key, LIMITS[key].what, limit, LIMITS[key].unit,
                                                              LIMITS[key].source)
            if len(members) > bound.value:
                stack, logical_id, _ = members[bound.value]
                found.append(Violation(bound, stack, logical_id, len(members),
                                       f"bus {bus!r} in {env}, across {len({m[0] for m in members})} stacks",
                                       FIXES[key]))
    return found


def _per_region(stacks: Sequence[_Stack]) -> list[Violation]:
    """CloudWatch Logs resource policies, 10 per account and Region, across the stacks."""
    policies: dict[Env, list[tuple[str, str]]] = defaultdict(list)
    for s in stacks:
        policies[s.stack.env] += [(s.stack.name, logical_id) for logical_id, _ in _each(s, "AWS::Logs::ResourcePolicy")]
    limit = LIMITS["logs-resource-policies"]
    return [Violation(limit, found[limit.value][0], found[limit.value][1], len(found), f"in {env}")
            for env, found in policies.items() if len(found) > limit.value]


def check(stacks: Iterable[StackTemplate], *, rules_per_bus: RulesPerBus | None = None) -> list[Violation]:
    """Every violation of `LIMITS` in the stacks of one assembly. `rules_per_bus(env, bus)`: the
    "Rules per event bus" quota of bus `bus` (`default` for the default bus) in `env`."""
    checked = [_Stack(stack, _Renderer(stack.template, stack.env, stack.name)) for stack in stacks]
    found: list[Violation] = []
    for s in checked:
        for rule in _PER_STACK:
            rule(s)
        found += s.found
    found += _unique(checked)
    found += _per_region(checked)
    found += _per_bus(checked, rules_per_bus or (lambda env, bus: LIMITS["eventbridge-rules-per-bus"].value))
    return found


# -- the synth step ---------------------------------------------------------------------------------


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
            manifests[path.parent] = {a.get("properties", {}).get("templateFile"): a for a in artifacts.values()
                                      if a.get("type") == "aws:cloudformation:stack"}
        artifact = manifests[path.parent].get(path.name, {})
        name = artifact.get("properties", {}).get("stackName") or path.name.removesuffix(".template.json")
        account, region = _environment(artifact.get("environment", ""))
        text = path.read_bytes()
        stacks.append(StackTemplate(name, Env(account, region), json.loads(text), len(text), str(path)))
    return stacks


def _environment(environment: str) -> tuple[str | None, str | None]:
    account, _, region = environment.removeprefix("aws://").partition("/")
    return (None if not account or account.startswith("unknown-") else account,
            None if not region or region.startswith("unknown-") else region)
