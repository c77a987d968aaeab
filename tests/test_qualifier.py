"""The name qualifier (tenants.yaml `qualifier`): a qualified copy of the app shares no name that
is fixed per account and Region with the app as shipped, so both deploy side by side."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lambdas import contract
from pipeline_constructs.config import AppConfig, parse_config
from tests.conftest import FIXTURE_TENANTS, Synthesized, one_problem, synthesize

QUALIFIER = "q1"
#: The properties that give a resource its own physical name (`Name`: rules, buses, SSM
#: parameters, access points).
NAME_PROPERTIES = (
    "BucketName",
    "QueueName",
    "FunctionName",
    "StateMachineName",
    "AlarmName",
    "Name",
    "LogGroupName",
    "AliasName",
    "TopicName",
    "TableName",
    "DashboardName",
    "FilterName",
    "RoleName",
    "EventBusName",
    "StackName",
)
#: Named per parent, not per account and Region: the workflows' `live` alias, a function's alias.
PER_PARENT = ("AWS::StepFunctions::StateMachineAlias", "AWS::Lambda::Alias")
#: Name properties that refer to another resource: the bus a rule is on.
REFERENCES = (("AWS::Events::Rule", "EventBusName"),)


def qualified_text(qualifier: str = QUALIFIER) -> str:
    return f"qualifier: {qualifier}\n" + FIXTURE_TENANTS.read_text()


@pytest.fixture(scope="module")
def qualified(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    path = tmp_path_factory.mktemp("qualified") / "tenants.yaml"
    path.write_text(qualified_text())
    return synthesize(path, tmp_path_factory.mktemp("cdk.out"))


def _text(value: Any) -> str:
    """A name property as text: a `Fn::Join` joined, references as `<Ref>`."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(_text(part) for part in parts)
    if isinstance(value, dict) and "Ref" in value:
        return f"<{value['Ref']}>"
    return json.dumps(value, sort_keys=True)


def _refers(value: Any) -> bool:
    """A property that names another resource of the template (`Ref`, `Fn::GetAtt`)."""
    return isinstance(value, dict) and bool({"Ref", "Fn::GetAtt"} & set(value))


def physical_names(app: Synthesized) -> set[tuple[str, str, str]]:
    """(resource type, property, name) of every explicit physical name of every stack: an
    EventBridge rule's `Name` counts; its `EventBusName` (the bus it is on) and a reference to
    another resource (a metric filter's log group) do not."""
    found = set()
    for template in app.templates.values():
        for resource in template.get("Resources", {}).values():
            kind, properties = resource["Type"], resource.get("Properties", {})
            if kind in PER_PARENT:
                continue
            found |= {
                (kind, key, _text(properties[key]))
                for key in NAME_PROPERTIES
                if key in properties and (kind, key) not in REFERENCES and not _refers(properties[key])
            }
    return found


def test_a_qualified_app_shares_no_physical_name_with_the_app_as_shipped(synthesized, qualified):
    plain, other = physical_names(synthesized), physical_names(qualified)
    assert len(plain) == len(other) > 100
    assert {name for _, _, name in plain} & {name for _, _, name in other} == set()
    # Each kind is qualified where its names live: in front, after `/`, after `alias/`.
    assert {
        "AWS::S3::Bucket",
        "AWS::SQS::Queue",
        "AWS::Lambda::Function",
        "AWS::StepFunctions::StateMachine",
        "AWS::CloudWatch::Alarm",
        "AWS::Events::Rule",
        "AWS::SSM::Parameter",
        "AWS::Logs::LogGroup",
        "AWS::CloudWatch::Dashboard",
    } <= {kind for kind, _, _ in other}
    for kind, key, name in other:
        assert name.removeprefix("alias/").removeprefix("/").startswith(f"{QUALIFIER}-") or name.startswith(
            ("/aws/lambda/q1-", "/aws/vendedlogs/states/q1-")
        ), (kind, key, name)


def test_a_qualified_app_has_its_own_stacks(synthesized, qualified):
    assert set(synthesized.templates).isdisjoint(qualified.templates)
    assert sorted(qualified.templates) == sorted(f"{QUALIFIER}-{name}" for name in synthesized.templates)


def test_a_qualified_app_publishes_and_watches_its_own_metric_namespace(qualified):
    """The register function is told the namespace in its environment (it publishes there), the
    controller already was; every alarm and metric filter on the app's metrics uses it."""
    text = json.dumps(qualified.templates)
    namespace = f"{QUALIFIER}-{contract.METRIC_NAMESPACE}"
    register = qualified.template(f"{QUALIFIER}-OrderedIngest-Tenant-acme").find_resources(
        "AWS::Lambda::Function", {"Properties": {"FunctionName": f"{QUALIFIER}-acme-register-chunk"}}
    )
    (function,) = register.values()
    assert function["Properties"]["Environment"]["Variables"]["METRIC_NAMESPACE"] == namespace
    assert f'"Namespace": "{contract.METRIC_NAMESPACE}"' not in text
    assert f'"MetricNamespace": "{contract.METRIC_NAMESPACE}"' not in text
    assert f'"Namespace": "{namespace}"' in text and f'"MetricNamespace": "{namespace}"' in text


def test_the_app_as_shipped_tells_the_register_function_no_namespace(acme):
    """No qualifier: the environment, hence every template, is what it was before qualifiers."""
    (function,) = acme.find_resources(
        "AWS::Lambda::Function", {"Properties": {"FunctionName": "acme-register-chunk"}}
    ).values()
    assert "METRIC_NAMESPACE" not in function["Properties"]["Environment"]["Variables"]


def test_the_longest_qualifier_keeps_every_name_within_its_limit():
    longest = "q" * contract.MAX_QUALIFIER_LENGTH
    tenant_id = "a" * (contract.MAX_TENANT_ID_LENGTH - len(longest) - 1)
    assert contract.qualifier_broken(longest) is None
    assert contract.tightest_broken(tenant_id, longest) is None
    for family in contract.NAME_FAMILIES:
        if "{tenant}" not in family.template:  # the access point's: shortened by a hash, below
            assert len(family.longest(tenant_id, qualifier=longest)) <= family.limit, family
    assert contract.qualifier_broken(longest + "q") is contract.LANDING_BUCKET
    assert len(contract.upload_access_point_name("a" * 60)) <= contract.UPLOAD_ACCESS_POINT.limit
    with contract.qualified(longest):
        assert len(contract.upload_access_point_name("a" * 60)) <= contract.UPLOAD_ACCESS_POINT.limit


def test_a_qualifier_is_read_from_the_tenants_file():
    config: AppConfig = parse_config(qualified_text("staging2"))
    assert config.qualifier == "staging2"
    assert parse_config(FIXTURE_TENANTS.read_text()).qualifier is None


def test_fails_when_the_qualifier_has_bad_characters():
    assert one_problem(qualified_text("Ct-1")) == (
        "file: field 'qualifier' = 'Ct-1': has characters other than lowercase letters and digits, or does not "
        "start with a letter (it starts every resource name); use a short name of lowercase letters and digits "
        "that starts with a letter, e.g. 'staging' or 'ct1a2b3c' (at most 12 characters), or leave it out "
        "(no qualifier)"
    )


def test_fails_when_the_qualifier_is_too_long_for_the_landing_bucket_name():
    assert one_problem(qualified_text("q" * 13)) == (
        "file: field 'qualifier' = 'qqqqqqqqqqqqq': is 13 characters, so the derived S3 bucket name "
        "'qqqqqqqqqqqqq-ordered-ingest-landing-123456789012-ap-southeast-5' is 64 characters (limit 63); use a "
        "short name of lowercase letters and digits that starts with a letter, e.g. 'staging' or 'ct1a2b3c' "
        "(at most 12 characters), or leave it out (no qualifier)"
    )


def test_fails_when_a_tenant_id_is_too_long_with_the_qualifier():
    tenant_id = "a" * contract.MAX_TENANT_ID_LENGTH  # fits without a qualifier
    text = (
        f"qualifier: ct1a2b3c\ndefaults: {{sink: {{url: 'https://core.example.com'}}}}\n"
        f"tenants: [{{id: {tenant_id}, prefix: a/, sink: {{auth: {{type: none}}}}}}]\n"
    )
    assert one_problem(text) == (
        f"tenant '{tenant_id}': field 'id' = '{tenant_id}': is 49 characters, so with qualifier 'ct1a2b3c' the "
        f"derived Lambda function name 'ct1a2b3c-{tenant_id}-register-chunk' is 73 characters (limit 64); use an "
        "id of at most 40 characters, or a shorter qualifier"
    )


def test_names_outside_a_qualified_synth_are_the_app_as_shipped():
    """The qualifier applies inside `contract.qualified` only (a synth, an ops command)."""
    with contract.qualified("q1"):
        assert contract.SHARED_STACK.render() == "q1-OrderedIngest-Shared"
        assert contract.SHARED_KEY_ALIAS.render() == "alias/q1-ordered-ingest"
        assert contract.SHARED_PARAMETER.render(parameter="x") == "/q1-ordered-ingest/shared/x"
        assert contract.FUNCTION_LOG_GROUP.render(function="f") == "/aws/lambda/f"
    assert contract.SHARED_STACK.render() == "OrderedIngest-Shared"
