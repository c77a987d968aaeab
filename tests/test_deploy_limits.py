"""The deploy-time limits (pipeline_constructs/deploy_limits/): for every limit, a template
at the limit passes and one past it is refused, naming the stack, the resource, the measured
value and the limit; the plugin fails a real synth; names unique per account or Region are
compared across stacks and targets; intrinsic values are measured at their longest."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from pipeline_constructs import deploy_limits
from pipeline_constructs.deploy_limits import LIMITS, Env, StackTemplate, check

ANYWHERE = Env(None, None)


def stack(
    resources: dict[str, Any] | None = None,
    *,
    name: str = "Stack",
    env: Env = ANYWHERE,
    size: int = 1000,
    **sections: Any,
) -> StackTemplate:
    template = {"Resources": resources or {}, **sections}
    return StackTemplate(name, env, template, size)


def resource(kind: str, **properties: Any) -> dict[str, Any]:
    return {"Type": kind, "Properties": properties}


def one(kind: str, **properties: Any) -> list[StackTemplate]:
    return [stack({"Thing": resource(kind, **properties)})]


def document(n: int, *, spaced: bool = False) -> dict[str, str]:
    """A JSON document of exactly ``n`` characters (without whitespace, or with json.dumps' own)."""
    return {"a": "x" * (n - (9 if spaced else 8))}


def name(n: int, head: str = "") -> str:
    return head + "a" * (n - len(head))


def rules(n: int, pattern: dict[str, Any]) -> list[StackTemplate]:
    """``n`` rules on the default bus, over two stacks (the count is per bus, not per stack)."""
    half = n // 2

    def make(count, offset):
        return {
            f"Rule{i + offset}": resource("AWS::Events::Rule", EventPattern=pattern) for i in range(count)
        }

    return [stack(make(half, 0), name="One"), stack(make(n - half, half), name="Two")]


def permission(n: int) -> list[StackTemplate]:
    """One permission whose statement makes the function's policy exactly ``n`` bytes."""
    base = deploy_limits.POLICY_ENVELOPE_BYTES + deploy_limits.permission_statement_bytes("")
    return one(
        "AWS::Lambda::Permission",
        FunctionName={"Ref": "Function"},
        Action="lambda:InvokeFunction",
        Principal="p" * (n - base),
    )


SSM_ARN = len("arn:aws-us-gov:ssm:") + 14 + 1 + 12 + len(":parameter")

#: Every limit of the module: a maker of templates whose measured value is exactly ``n``.
MAKERS: dict[str, Callable[[int], list[StackTemplate]]] = {
    "template-bytes": lambda n: [stack(size=n)],
    "template-resources": lambda n: [stack({f"T{i}": resource("AWS::SNS::Topic") for i in range(n)})],
    "template-outputs": lambda n: [stack(Outputs={f"O{i}": {"Value": "v"} for i in range(n)})],
    "template-parameters": lambda n: [stack(Parameters={f"P{i}": {"Type": "String"} for i in range(n)})],
    "template-mappings": lambda n: [stack(Mappings={f"M{i}": {"k": {"k": "v"}} for i in range(n)})],
    "template-description": lambda n: [stack(Description="d" * n)],
    "stack-name": lambda n: [stack(name=name(n, "S"))],
    "output-description": lambda n: [stack(Outputs={"O": {"Value": "v", "Description": "d" * n}})],
    "iam-role-name": lambda n: one("AWS::IAM::Role", RoleName=name(n)),
    "iam-role-description": lambda n: one("AWS::IAM::Role", Description="d" * n),
    "iam-trust-policy": lambda n: one("AWS::IAM::Role", AssumeRolePolicyDocument=document(n)),
    "iam-role-inline-policies": lambda n: [
        stack(
            {
                "Role": resource(
                    "AWS::IAM::Role", Policies=[{"PolicyName": "a", "PolicyDocument": document(n // 2)}]
                ),
                "Policy": resource(
                    "AWS::IAM::Policy",
                    PolicyName="b",
                    Roles=[{"Ref": "Role"}],
                    PolicyDocument=document(n - n // 2),
                ),
            }
        )
    ],
    "iam-policy-name": lambda n: one("AWS::IAM::Policy", PolicyName=name(n), PolicyDocument={}),
    "iam-managed-policy": lambda n: one("AWS::IAM::ManagedPolicy", PolicyDocument=document(n)),
    "s3-bucket-name": lambda n: one("AWS::S3::Bucket", BucketName=name(n)),
    "s3-bucket-policy": lambda n: one("AWS::S3::BucketPolicy", PolicyDocument=document(n)),
    "s3-access-point-name": lambda n: one("AWS::S3::AccessPoint", Name=name(n)),
    "s3-access-point-policy": lambda n: one("AWS::S3::AccessPoint", Policy=document(n)),
    "sqs-queue-name": lambda n: one("AWS::SQS::Queue", QueueName=name(n)),
    "sqs-queue-policy": lambda n: one("AWS::SQS::QueuePolicy", PolicyDocument=document(n)),
    "sqs-queue-policy-statements": lambda n: one(
        "AWS::SQS::QueuePolicy", PolicyDocument={"Statement": [{}] * n}
    ),
    "sns-topic-name": lambda n: one("AWS::SNS::Topic", TopicName=name(n)),
    "sns-display-name": lambda n: one("AWS::SNS::Topic", DisplayName="d" * n),
    "sns-topic-policy": lambda n: one("AWS::SNS::TopicPolicy", PolicyDocument=document(n)),
    "kms-key-policy": lambda n: one("AWS::KMS::Key", KeyPolicy=document(n)),
    "kms-key-description": lambda n: one("AWS::KMS::Key", Description="d" * n),
    "kms-alias-name": lambda n: one("AWS::KMS::Alias", AliasName=name(n, "alias/")),
    "lambda-function-name": lambda n: one("AWS::Lambda::Function", FunctionName=name(n)),
    "lambda-description": lambda n: one("AWS::Lambda::Function", Description="d" * n),
    "lambda-environment": lambda n: one("AWS::Lambda::Function", Environment={"Variables": document(n)}),
    "lambda-resource-policy": permission,
    "lambda-vpc-subnets": lambda n: one("AWS::Lambda::Function", VpcConfig={"SubnetIds": ["s"] * n}),
    "lambda-vpc-security-groups": lambda n: one(
        "AWS::Lambda::Function", VpcConfig={"SecurityGroupIds": ["g"] * n}
    ),
    "sfn-state-machine-name": lambda n: one("AWS::StepFunctions::StateMachine", StateMachineName=name(n)),
    "sfn-definition": lambda n: one("AWS::StepFunctions::StateMachine", DefinitionString="d" * n),
    "sfn-alias-name": lambda n: one("AWS::StepFunctions::StateMachineAlias", Name=name(n)),
    "sfn-description": lambda n: one("AWS::StepFunctions::StateMachineVersion", Description="d" * n),
    "eventbridge-rule-name": lambda n: one("AWS::Events::Rule", Name=name(n)),
    "eventbridge-rule-description": lambda n: one("AWS::Events::Rule", Description="d" * n),
    "eventbridge-event-pattern": lambda n: one("AWS::Events::Rule", EventPattern=document(n, spaced=True)),
    "eventbridge-targets-per-rule": lambda n: one(
        "AWS::Events::Rule", Targets=[{"Id": str(i)} for i in range(n)]
    ),
    "eventbridge-rules-per-bus": lambda n: rules(n, {"source": ["aws.s3"]}),
    "eventbridge-wildcard-rules-per-bus": lambda n: rules(n, {"detail": {"key": [{"wildcard": "a*"}]}}),
    "eventbridge-bus-name": lambda n: one("AWS::Events::EventBus", Name=name(n)),
    "eventbridge-bus-description": lambda n: one("AWS::Events::EventBus", Description="d" * n),
    "cloudwatch-alarm-name": lambda n: one("AWS::CloudWatch::Alarm", AlarmName=name(n)),
    "cloudwatch-alarm-description": lambda n: one("AWS::CloudWatch::Alarm", AlarmDescription="d" * n),
    "cloudwatch-dashboard-name": lambda n: one("AWS::CloudWatch::Dashboard", DashboardName=name(n)),
    "cloudwatch-dashboard-widgets": lambda n: one(
        "AWS::CloudWatch::Dashboard",
        DashboardBody=json.dumps(
            {"widgets": [{"type": "text", "properties": {"markdown": "x"}}] * n}, separators=(",", ":")
        ),
    ),
    "cloudwatch-alarm-metrics": lambda n: one(
        "AWS::CloudWatch::Alarm", Metrics=[{"Id": f"m{i}", "MetricStat": {"Period": 60}} for i in range(n)]
    ),
    "cloudwatch-alarm-queries": lambda n: one(
        "AWS::CloudWatch::Alarm", Metrics=[{"Id": f"e{i}", "Expression": "1"} for i in range(n)]
    ),
    "cloudwatch-alarm-actions": lambda n: one("AWS::CloudWatch::Alarm", AlarmActions=["arn"] * n),
    "logs-group-name": lambda n: one("AWS::Logs::LogGroup", LogGroupName=name(n)),
    "logs-filter-name": lambda n: one("AWS::Logs::MetricFilter", FilterName=name(n)),
    "logs-filter-pattern": lambda n: one("AWS::Logs::MetricFilter", FilterPattern="p" * n),
    "logs-resource-policies": lambda n: [
        stack(
            {f"P{i}": resource("AWS::Logs::ResourcePolicy", PolicyDocument="{}") for i in range(n // 2)},
            name="One",
        ),
        stack(
            {f"P{i}": resource("AWS::Logs::ResourcePolicy", PolicyDocument="{}") for i in range(n - n // 2)},
            name="Two",
        ),
    ],
    "logs-resource-policy": lambda n: one("AWS::Logs::ResourcePolicy", PolicyDocument="p" * n),
    "ssm-parameter-name": lambda n: one("AWS::SSM::Parameter", Name=name(n - SSM_ARN, "/")),
    "ssm-parameter-description": lambda n: one("AWS::SSM::Parameter", Name="/p", Description="d" * n),
    "ssm-parameter-value": lambda n: one("AWS::SSM::Parameter", Name="/p", Value="v" * n),
    "dynamodb-table-name": lambda n: one("AWS::DynamoDB::Table", TableName=name(n)),
    "ec2-security-group-description": lambda n: one("AWS::EC2::SecurityGroup", GroupDescription="d" * n),
    "cloudwatch-alarm-window": lambda n: one(
        "AWS::CloudWatch::Alarm", Period=3600, EvaluationPeriods=n // 3600
    ),
}
#: Limits whose "one past" is not the limit plus one.
PAST = {"cloudwatch-alarm-window": 7 * 86_400 + 3600}
#: Tested apart (below): a period's allowed values, names unique across stacks.
APART = {"cloudwatch-alarm-period", "unique-per-account", "unique-per-region", "unique-globally"}


def keys(violations: list[deploy_limits.Violation]) -> list[str]:
    return [v.limit.key for v in violations]


def test_every_limit_has_a_maker():
    assert set(MAKERS) | APART == set(LIMITS)


@pytest.mark.parametrize("key", sorted(MAKERS))
def test_a_template_at_the_limit_passes_and_one_past_it_is_refused(key):
    limit = LIMITS[key]
    assert key not in keys(check(MAKERS[key](limit.value)))
    found = [v for v in check(MAKERS[key](PAST.get(key, limit.value + 1))) if v.limit.key == key]
    assert len(found) == 1, found
    message = str(found[0])
    assert f"limit {limit.value:,} {limit.unit}" in message and limit.source in message
    assert message.startswith(f"stack {found[0].stack}: {found[0].resource}: {limit.what} is ")


def test_the_message_names_stack_resource_measured_value_limit_and_source():
    (violation,) = check(one("AWS::Events::Rule", Description="d" * 600))
    assert str(violation) == (
        "stack Stack: Thing: EventBridge rule description is 600 characters, limit 512 characters "
        "(https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutRule.html)"
    )


def test_fails_when_an_alarm_period_is_not_10_20_30_or_a_multiple_of_60():
    for period in (10, 20, 30, 60, 300):
        assert "cloudwatch-alarm-period" not in keys(check(one("AWS::CloudWatch::Alarm", Period=period)))
    (found,) = [
        v for v in check(one("AWS::CloudWatch::Alarm", Period=90)) if v.limit.key == "cloudwatch-alarm-period"
    ]
    assert found.measured == "90 seconds"
    metric_math = one(
        "AWS::CloudWatch::Alarm",
        EvaluationPeriods=1441,
        Metrics=[{"Id": "m", "MetricStat": {"Period": 60}}, {"Id": "e", "Expression": "m"}],
    )
    assert "cloudwatch-alarm-window" in keys(check(metric_math))  # 1 day for periods under an hour


def test_fails_when_a_name_has_a_character_aws_refuses():
    (found,) = check(one("AWS::CloudWatch::Dashboard", DashboardName="Ordered Ingest"))
    assert "CloudWatch dashboard name's characters is 'Ordered Ingest', allowed: [A-Za-z0-9_-]+" in str(found)
    assert check(one("AWS::SQS::Queue", QueueName="acme-event-queue.fifo")) == []


def test_fails_when_two_dashboards_of_one_name_are_in_one_account_in_two_regions():
    """Dashboard names are unique per account in every Region, unlike a queue's."""

    def two(kind: str, prop: str, accounts: tuple[str, str] = ("1" * 12, "1" * 12)) -> list[StackTemplate]:
        return [
            stack(
                {"Thing": resource(kind, **{prop: "ordered-ingest"})},
                name="OrderedIngest-Shared",
                env=Env(account, region),
            )
            for account, region in zip(accounts, ("eu-west-1", "us-east-1"))
        ]

    (found,) = check(two("AWS::CloudWatch::Dashboard", "DashboardName"))
    assert found.limit.key == "unique-per-account"
    assert "also Thing of stack OrderedIngest-Shared, deployed to 111111111111/us-east-1" in str(found)
    assert check(two("AWS::SQS::Queue", "QueueName")) == []
    assert keys(check(two("AWS::IAM::Role", "RoleName"))) == ["unique-per-account"]
    assert check(two("AWS::IAM::Role", "RoleName", ("1" * 12, "2" * 12))) == []
    assert keys(check(two("AWS::S3::Bucket", "BucketName", ("1" * 12, "2" * 12)))) == ["unique-globally"]


def test_fails_when_two_stacks_for_the_same_account_and_region_share_a_name():
    twins = [
        stack({"F": resource("AWS::Lambda::Function", FunctionName="acme-split")}, name=n) for n in ("A", "B")
    ]
    assert keys(check(twins)) == ["unique-per-region"]
    same_stack_name = [stack(name="OrderedIngest-Shared"), stack(name="OrderedIngest-Shared")]
    assert keys(check(same_stack_name)) == ["unique-per-region"]
    # A rule's name is unique on its bus only.
    buses = [
        stack({"R": resource("AWS::Events::Rule", Name="r", EventBusName=bus)}, name=bus)
        for bus in ("a", "b")
    ]
    assert check(buses) == []


def test_the_rules_per_bus_quota_is_the_declared_one_of_the_bus():
    twelve = rules(12, {"source": ["aws.s3"]})
    assert check(twelve, rules_per_bus=lambda env, bus: 12) == []
    assert keys(check(twelve, rules_per_bus=lambda env, bus: 11)) == ["eventbridge-rules-per-bus"]


def test_values_resolved_at_deploy_time_are_measured_at_their_longest():
    """An account id is 12 digits, an unknown Region 14 characters, the stack's own name and
    Region as they are, a generated name 64, an ARN 80 more (or around the resource's name)."""
    template = {
        "Resources": {
            "Topic": resource("AWS::SNS::Topic", TopicName="alarms"),
            "Queue": resource("AWS::SQS::Queue"),
        }
    }
    render = deploy_limits.Renderer(template, Env(None, None), "Stack")
    assert render({"Ref": "AWS::AccountId"}).length == 12
    assert render({"Ref": "AWS::Region"}).length == 14
    assert render({"Ref": "AWS::StackName"}).text == "Stack"
    assert render({"Fn::Sub": "a-${AWS::Region}-b"}).length == 2 + 14 + 2
    assert render({"Fn::GetAtt": ["Topic", "Arn"]}).length == len("alarms") + deploy_limits.ARN_CHARS
    assert render({"Ref": "Queue"}).length == deploy_limits.GENERATED_NAME_CHARS
    assert render({"Fn::Join": ["-", ["a", {"Ref": "AWS::Partition"}]]}).length == 2 + 10
    known = deploy_limits.Renderer(template, Env("111111111111", "eu-west-1"), "Stack")
    assert known({"Fn::Sub": "${AWS::Region}/${AWS::AccountId}"}).text == "eu-west-1/111111111111"
    assert render.json({"k": {"Ref": "AWS::Region"}}).length == len('{"k":""}') + 14


def test_the_app_refuses_at_synth_what_breaks_a_limit(tmp_path):
    """GIVEN a template of the app that breaks a limit (here: a rule description made too long
    after the tenants file was validated) WHEN the app synthesizes THEN the synth fails with the
    violation in its validation report, naming the stack and the resource."""
    from aws_cdk import aws_events as events

    from pipeline_constructs.application import build_app, new_app
    from tests.conftest import FIXTURE_TENANTS

    built = build_app(FIXTURE_TENANTS, app=new_app(outdir=str(tmp_path)))
    rule = built.tenants["acme"].pipeline.node.find_child("ObjectCreatedRule").node.default_child
    assert isinstance(rule, events.CfnRule)
    rule.description = "d" * 513
    with pytest.raises(Exception, match="ValidationFailed"):
        built.app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    (limits,) = [r for r in report["pluginReports"] if r["pluginName"] == "ordered-ingest deploy-time limits"]
    (violation,) = limits["violations"]
    assert violation["ruleName"] == "eventbridge-rule-description"
    assert violation["description"].startswith("stack OrderedIngest-Tenant-acme: PipelineObjectCreatedRule")
    assert "is 513 characters, limit 512 characters" in violation["description"]


def test_two_targets_in_one_account_and_two_regions_synthesize(tmp_path):
    """GIVEN two targets in one account, one Region each WHEN the app synthesizes THEN each
    target's dashboard is named after its Region, and nothing global to the account repeats."""
    from pipeline_constructs.application import build_app, new_app

    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(
        yaml.safe_dump(
            {
                "notifications": {"emails": ["oncall@example.com"]},
                "targets": {
                    "eu": {"account": "111111111111", "region": "eu-west-1"},
                    "us": {"account": "111111111111", "region": "us-east-1"},
                },
                "tenants": [
                    {
                        "id": f"t{i}",
                        "prefix": f"t{i}/",
                        "target": target,
                        "sink": {"url": "https://core.example.com", "auth": {"type": "none"}},
                    }
                    for i, target in enumerate(("eu", "us"))
                ],
            }
        )
    )
    built = build_app(tenants, app=new_app(outdir=str(tmp_path / "out")))
    assembly = built.app.synth()
    names = sorted(
        r["Properties"]["DashboardName"]
        for s in assembly.stacks_recursively
        for r in s.template["Resources"].values()
        if r["Type"] == "AWS::CloudWatch::Dashboard"
    )
    assert names == ["OrderedIngest-eu-west-1", "OrderedIngest-us-east-1"]
