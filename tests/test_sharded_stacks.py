"""The sharded layout (``routing.shards``) as synthesized: which bus holds which rule, the
forwarding hop's targets, dead-letter queue and alarms, and the catch-all past one pattern."""

from __future__ import annotations

import json
import textwrap

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Template

from pipeline_constructs import names, routing
from pipeline_constructs.shard_buses import Forwarding
from pipeline_constructs.unmatched import UnmatchedUploads, UnmatchedUploadsProps
from tests.conftest import cfn_lint_findings, synthesize

SHARDED = textwrap.dedent(
    """
    defaults:
      sink: {url: https://core.example.com/records, auth: {type: bearer, secret: core/token}}
    routing:
      shards: 2
    tenants:
      - {id: acme, prefix: acme/}
      - {id: globex, prefix: globex/}
      - {id: initech, prefix: initech/incoming/}
    """
)
# sha256 modulo 2 (tests/test_routing.py pins it): acme on shard 0, globex and initech on 1.
SHARD_OF = {"acme": 0, "globex": 1, "initech": 1}


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    directory = tmp_path_factory.mktemp("sharded")
    (directory / "tenants.yaml").write_text(SHARDED)
    return synthesize(directory / "tenants.yaml", directory / "cdk.out")


def resources(template: dict, resource_type: str) -> dict[str, dict]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == resource_type}


def rules_by_name(template: dict) -> dict[str, dict]:
    return {
        r["Properties"]["Name"]: r["Properties"] for r in resources(template, "AWS::Events::Rule").values()
    }


def test_the_shared_stack_has_one_bus_per_shard_and_two_forwarding_rules_per_shard(sharded):
    shared = sharded.templates["OrderedIngest-Shared"]
    buses = {b["Properties"]["Name"]: k for k, b in resources(shared, "AWS::Events::EventBus").items()}
    assert sorted(buses) == ["ordered-ingest-shard-0", "ordered-ingest-shard-1"]
    rules = rules_by_name(shared)
    assert sorted(rules) == [
        "ordered-ingest-shard-0-objects",
        "ordered-ingest-shard-0-status",
        "ordered-ingest-shard-1-objects",
        "ordered-ingest-shard-1-status",
        "ordered-ingest-unmatched-uploads",
    ]
    assert all("EventBusName" not in rule for rule in rules.values()), (
        "every shared rule is on the default bus"
    )
    assert rules["ordered-ingest-shard-1-objects"]["EventPattern"]["detail"]["object"] == {
        "key": [{"prefix": "globex/"}, {"prefix": "initech/incoming/"}]
    }
    assert rules["ordered-ingest-shard-0-status"]["EventPattern"] == {
        "source": ["aws.states"],
        "detail-type": ["Step Functions Execution Status Change"],
        "detail": {
            "stateMachineArn": [
                {"suffix": ":acme-file-ingest-workflow"},
                {"suffix": "-file-ingest-workflow:live"},
            ]
        },
    }
    for k in (0, 1):
        for kind in ("objects", "status"):
            (target,) = rules[f"ordered-ingest-shard-{k}-{kind}"]["Targets"]
            assert target["Arn"] == {"Fn::GetAtt": [buses[f"ordered-ingest-shard-{k}"], "Arn"]}


def test_every_forward_retries_for_a_day_then_dead_letters_with_the_one_routing_role(sharded):
    shared = sharded.templates["OrderedIngest-Shared"]
    (dlq_id,) = [
        k
        for k, q in resources(shared, "AWS::SQS::Queue").items()
        if q["Properties"].get("QueueName") == names.routing_dlq()
    ]
    (role_id,) = resources(shared, "AWS::IAM::Role")
    for name, rule in rules_by_name(shared).items():
        if not name.startswith("ordered-ingest-shard-"):
            continue
        (target,) = rule["Targets"]
        assert target["RetryPolicy"] == {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86400}
        assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [dlq_id, "Arn"]}}
        assert target["RoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}


def test_the_routing_role_may_only_put_events_on_the_apps_own_buses_in_one_statement(sharded):
    """One resource, the prefix of the app's bus names, whatever the number of buses: a
    statement per bus passes IAM's 10,240 characters per role at about 100 buses."""
    shared = sharded.templates["OrderedIngest-Shared"]
    (role,) = resources(shared, "AWS::IAM::Role").values()
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "events.amazonaws.com"
    }
    statements = [
        s
        for p in resources(shared, "AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    (statement,) = statements
    assert statement["Action"] == "events:PutEvents"
    assert statement["Resource"] == {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":events:",
                {"Ref": "AWS::Region"},
                ":",
                {"Ref": "AWS::AccountId"},
                ":event-bus/ordered-ingest-*",
            ],
        ]
    }
    names = [b["Properties"]["Name"] for b in resources(shared, "AWS::Events::EventBus").values()]
    assert names and all(name.startswith("ordered-ingest-") for name in names)


def test_only_this_apps_rules_may_dead_letter_into_the_routing_queue(sharded):
    shared = sharded.templates["OrderedIngest-Shared"]
    (policy,) = [
        p["Properties"]["PolicyDocument"]
        for p in resources(shared, "AWS::SQS::QueuePolicy").values()
        if "ForwardingRulesDeadLetters" in json.dumps(p)
    ]
    (allow,) = [s for s in policy["Statement"] if s["Effect"] == "Allow"]
    assert allow["Principal"] == {"Service": "events.amazonaws.com"} and allow["Action"] == "sqs:SendMessage"
    assert allow["Condition"]["ArnLike"]["aws:SourceArn"]["Fn::Join"][1][-1] == ":rule/ordered-ingest-*"


def test_a_lost_or_dead_lettered_forward_pages(sharded):
    shared = sharded.templates["OrderedIngest-Shared"]
    alarms = {
        a["Properties"]["AlarmName"]: a["Properties"]
        for a in resources(shared, "AWS::CloudWatch::Alarm").values()
    }
    dlq = alarms["ordered-ingest-routing-dlq"]
    assert dlq["MetricName"] == "ApproximateNumberOfMessagesVisible" and dlq["Threshold"] == 1
    assert dlq["AlarmActions"], "the alarm notifies the topic"
    for k in (0, 1):
        failed = alarms[f"ordered-ingest-shard-{k}-routing-failed"]
        watched = {
            (m["MetricStat"]["Metric"]["MetricName"], m["MetricStat"]["Metric"]["Dimensions"][0]["Value"])
            for m in failed["Metrics"]
            if "MetricStat" in m
        }
        assert watched == {
            (metric, f"ordered-ingest-shard-{k}-{kind}")
            for metric in ("FailedInvocations", "InvocationsFailedToBeSentToDlq")
            for kind in ("objects", "status")
        }
        assert failed["AlarmActions"]


@pytest.mark.parametrize("tenant", sorted(SHARD_OF))
def test_each_tenants_rules_sit_on_its_shard_bus_with_their_own_targets_unchanged(sharded, tenant):
    template = sharded.templates[f"OrderedIngest-Tenant-{tenant}"]
    rules = rules_by_name(template)
    assert sorted(rules) == [f"{tenant}-object-created", f"{tenant}-sfn-status"]
    for rule in rules.values():
        assert rule["EventBusName"] == f"ordered-ingest-shard-{SHARD_OF[tenant]}"
        (target,) = rule["Targets"]
        assert target["RetryPolicy"] == {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86400}
        assert "DeadLetterConfig" in target
    assert "shard" not in json.dumps(resources(template, "AWS::IAM::Role")), "no role for the tenant's hop"


def test_a_tenants_intake_failed_alarm_watches_its_rules_on_the_shard_bus(sharded):
    """AWS/Events publishes a custom bus's rule metrics with EventBusName and RuleName."""
    template = sharded.templates["OrderedIngest-Tenant-acme"]
    (alarm,) = [
        a["Properties"]
        for a in resources(template, "AWS::CloudWatch::Alarm").values()
        if a["Properties"]["AlarmName"] == "acme-intake-failed"
    ]
    for metric in (m for m in alarm["Metrics"] if "MetricStat" in m):
        dims = {d["Name"]: d["Value"] for d in metric["MetricStat"]["Metric"]["Dimensions"]}
        assert dims["EventBusName"] == "ordered-ingest-shard-0"
        assert dims["RuleName"] in ("acme-object-created", "acme-sfn-status")


def test_sharding_stays_cdk_nag_clean(sharded):
    (nag,) = [r for r in sharded.validation_report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert nag["conclusion"] == "success" and nag["violations"] == []


@pytest.mark.slow  # cfn-lint or synthesis over whole apps: make test (make test-fast runs tests/test_user_tenants.py)
def test_sharded_templates_pass_cfn_lint(sharded):
    for name, template in sharded.templates.items():
        assert cfn_lint_findings(template) == [], name


def test_without_shards_no_bus_role_or_forward_is_created(shared_template):
    template = shared_template.to_json()
    assert not resources(template, "AWS::Events::EventBus")
    assert not resources(template, "AWS::IAM::Role")
    assert sorted(rules_by_name(template)) == ["ordered-ingest-unmatched-uploads"]


# -- the catch-all past one pattern (a construct test: 400 tenant stacks would take minutes) --


def test_the_catch_all_of_400_prefixes_forwards_subtrees_to_its_buses_each_within_the_limit():
    stack = Stack(App(), "Catch")
    prefixes = [f"tenant-{i:04d}/" for i in range(400)]
    topic = sns.Topic(stack, "Topic")
    catch_all = UnmatchedUploads(
        stack,
        "UnmatchedUploads",
        UnmatchedUploadsProps(
            landing_bucket=s3.Bucket.from_bucket_name(stack, "Landing", "landing"),
            tenant_prefixes=prefixes,
            alarm_topic=topic,
            forwarding=Forwarding(stack, "Forwarding", alarm_topic=topic),
        ),
    )
    layout = routing.unmatched_layout(prefixes)
    template = Template.from_stack(stack).to_json()
    rules = rules_by_name(template)
    assert len(layout.groups) == len(catch_all.buses) >= 2
    top = rules["ordered-ingest-unmatched-uploads"]
    assert top["EventPattern"]["detail"]["object"]["key"] == [
        {"anything-but": {"prefix": list(layout.excluded)}}
    ]
    for group in layout.groups:
        n = group.index + 1
        forward = rules[f"ordered-ingest-unmatched-{n}-forward"]
        assert forward["EventPattern"]["detail"]["object"]["key"] == [{"prefix": r} for r in group.roots]
        logged = rules[f"ordered-ingest-unmatched-uploads-{n}"]
        (bus_id,) = [
            k
            for k, b in resources(template, "AWS::Events::EventBus").items()
            if b["Properties"]["Name"] == f"ordered-ingest-unmatched-{n}"
        ]
        (logged_id,) = [
            k
            for k, r in resources(template, "AWS::Events::Rule").items()
            if r["Properties"]["Name"] == f"ordered-ingest-unmatched-uploads-{n}"
        ]
        assert logged["EventBusName"] == f"ordered-ingest-unmatched-{n}"
        assert bus_id in template["Resources"][logged_id]["DependsOn"]
        assert logged["EventPattern"]["detail"]["object"]["key"] == [
            {"anything-but": {"prefix": list(group.prefixes)}}
        ]
    for rule in rules.values():
        assert len(json.dumps(rule["EventPattern"])) <= routing.MAX_EVENT_PATTERN_CHARS


def shared_stack_only(tmp_path, tenants_yaml: str):
    """The shared stack of a big tenants file, synthesized with cdk-nag (no tenant stacks: fast)."""
    from aws_cdk import Validations
    from cdk_nag import AwsSolutionsChecks

    from pipeline_constructs.config import parse_config
    from pipeline_constructs.stacks import SharedStack

    app = App(outdir=str(tmp_path))
    # The account quotas are the capacity model's (tests/test_capacity.py); routing's are checked here.
    shared = SharedStack(app, parse_config(tenants_yaml, check_capacity=False))
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    assembly = app.synth()
    return (
        shared,
        assembly.get_stack_by_name(shared.stack_name).template,
        json.loads((tmp_path / "validation-report.json").read_text()),
    )


@pytest.mark.slow  # many synthetic tenants: a limit of the code, not of a tenants file (make test only)
def test_many_tenants_without_shards_get_the_catch_all_buses_and_the_forwarding_hop(tmp_path):
    """GIVEN 200 tenants and no shards (their rules stay on the default bus: the capacity model's
    concern) THEN the catch-all still fits: its buses, forwards, the one role, cdk-nag clean."""
    tenants = "".join(f"  - {{id: tenant-{i:04d}, prefix: tenant-{i:04d}/}}\n" for i in range(200))
    shared, template, report = shared_stack_only(
        tmp_path,
        f"defaults:\n  sink: {{url: https://core.example.com/r, auth: {{type: bearer, secret: core/token}}}}\ntenants:\n{tenants}",
    )
    groups = routing.unmatched_layout([f"tenant-{i:04d}/" for i in range(200)]).groups
    assert len(groups) >= 2 and shared.shard_buses is None
    buses = sorted(b["Properties"]["Name"] for b in resources(template, "AWS::Events::EventBus").values())
    assert buses == sorted(names.unmatched_bus_name(g.index + 1) for g in groups)
    assert len(resources(template, "AWS::IAM::Role")) == 1
    alarms = {a["Properties"]["AlarmName"] for a in resources(template, "AWS::CloudWatch::Alarm").values()}
    assert {f"ordered-ingest-unmatched-{g.index + 1}-routing-failed" for g in groups} <= alarms
    assert "ordered-ingest-routing-dlq" in alarms
    (nag,) = [r for r in report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert nag["conclusion"] == "success" and nag["violations"] == []
    assert cfn_lint_findings(template) == []


@pytest.mark.slow  # many synthetic tenants: a limit of the code, not of a tenants file (make test only)
def test_a_1000_tenant_sharded_shared_stack_fits_cloudformation_and_every_pattern(tmp_path):
    """The shared stack is the one template that grows with sharding: 40 buses, 80 forwards,
    the catch-all's buses and the alarms, far below 500 resources, and what routing adds far
    below 1 MB. (The dashboards, a row per tenant, are 3.5 MB at 1,000 tenants: their
    own stacks, not routing's.)"""
    tenants = "".join(f"  - {{id: tenant-{i:04d}, prefix: tenant-{i:04d}/}}\n" for i in range(1000))
    _, template, report = shared_stack_only(
        tmp_path,
        f"defaults:\n  sink: {{url: https://core.example.com/r, auth: {{type: bearer, secret: core/token}}}}\nrouting: "
        f"{{shards: 40}}\ntenants:\n{tenants}",
    )
    assert len(resources(template, "AWS::Events::EventBus")) == 40 + 10
    assert len(template["Resources"]) < 500
    without_dashboards = {
        k: r for k, r in template["Resources"].items() if r["Type"] != "AWS::CloudWatch::Dashboard"
    }
    assert len(json.dumps(without_dashboards)) < 400_000
    for rule in rules_by_name(template).values():
        assert len(json.dumps(rule["EventPattern"])) <= routing.MAX_EVENT_PATTERN_CHARS
    (nag,) = [r for r in report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert nag["conclusion"] == "success"


def test_each_deployment_target_shards_its_own_tenants_on_its_own_buses(tmp_path):
    """GIVEN two targets and routing.shards 2 THEN each Stage's shared stack has its own two shard
    buses, forwarding only its own tenants' prefixes, and each tenant's rules sit on its Stage's
    shard bus (buses are per account and Region: the names repeat across targets)."""
    from pipeline_constructs.application import build_app

    (tmp_path / "tenants.yaml").write_text(
        textwrap.dedent(
            """
        targets:
          prod: {account: '111111111111', region: eu-west-1}
          dr: {account: '222222222222', region: us-east-1}
        routing: {shards: 2}
        defaults:
          sink: {url: https://core.example.com/records, auth: {type: bearer, secret: core/token}}
          target: prod
        tenants:
          - {id: acme, prefix: acme/}
          - {id: globex, prefix: globex/, target: dr}
        """
        )
    )
    built = build_app(tmp_path / "tenants.yaml", app=App(outdir=str(tmp_path / "cdk.out")), nag=False)
    for target, tenant in (("prod", "acme"), ("dr", "globex")):
        stage = built.stages[target]
        shared = Template.from_stack(stage.shared).to_json()
        assert sorted(
            b["Properties"]["Name"] for b in resources(shared, "AWS::Events::EventBus").values()
        ) == ["ordered-ingest-shard-0", "ordered-ingest-shard-1"]
        forwarded = [
            k["prefix"]
            for name, rule in rules_by_name(shared).items()
            if name.endswith("-objects")
            for k in rule["EventPattern"]["detail"]["object"]["key"]
        ]
        assert forwarded == [f"{tenant}/"]
        own = rules_by_name(Template.from_stack(stage.tenants[tenant]).to_json())
        assert {r["EventBusName"] for r in own.values()} == {f"ordered-ingest-shard-{SHARD_OF[tenant]}"}


def test_fails_when_a_targets_shard_does_not_fit_naming_the_target():
    from pipeline_constructs.config import ConfigError, parse_config

    tenants = "".join(f"  - {{id: t{i}, prefix: t{i}/}}\n" for i in range(6))
    with pytest.raises(ConfigError) as caught:
        parse_config(
            "targets:\n  prod: {account: '111111111111', region: eu-west-1}\n"
            "routing: {shards: 1, rules_per_bus: 10}\n"
            f"defaults:\n  sink: {{url: https://core.example.com/r, auth: {{type: bearer, secret: core/token}}}}\n  target: prod\ntenants:\n{tenants}"
        )
    assert caught.value.problems == [
        (
            "target 'prod' shard 0: field 'shard' = 6: its 6 tenants need 12 rules on bus "
            "ordered-ingest-shard-0 (2 each; the quota is 10 per bus); pin some of its tenants ('t0', "
            "'t1', 't2' and 3 more) to a shard with room with 'shard:' (none has room: raise "
            "routing.shards), or raise routing.shards (that moves tenants: docs/scaling.md, Sharded routing)"
        )
    ]
