"""The pipeline registry: what each `TenantPipeline` publishes, and `ops` finding pipelines by it
in any stack."""

from __future__ import annotations

import dataclasses
import json

import boto3
import pytest
from moto import mock_aws

from lambdas import contract
from ops.discovery import DiscoveryError, discover
from pipeline_constructs import registry
from pipeline_constructs.registry import TenantResources

REGION = "us-east-1"
FIELDS = {f.name for f in dataclasses.fields(TenantResources)}


def _rendered(node) -> str:
    """The parameter's value with every intrinsic as a placeholder (CloudFormation renders them)."""
    if isinstance(node, str):
        return node
    if set(node) == {"Fn::Join"}:
        separator, parts = node["Fn::Join"]
        return separator.join(_rendered(p) for p in parts)
    return "X"


def test_each_tenant_stack_registers_its_pipeline_with_every_field_ops_reads(synthesized):
    """GIVEN the synthesized default app THEN each tenant stack holds one registry parameter,
    `/ordered-ingest/pipelines/<tenant>`, whose JSON value has every field of TenantResources,
    the tenant's literal options and the stack's own name."""
    tenant_stacks = {
        name: t for name, t in synthesized.templates.items() if name.startswith("OrderedIngest-Tenant-")
    }
    assert tenant_stacks
    for name, template in tenant_stacks.items():
        tenant = name.removeprefix("OrderedIngest-Tenant-")
        (parameter,) = [
            r["Properties"]
            for r in template["Resources"].values()
            if r["Type"] == "AWS::SSM::Parameter"
            and r["Properties"]["Name"].startswith("/ordered-ingest/pipelines/")
        ]
        assert parameter["Name"] == f"/ordered-ingest/pipelines/{tenant}"
        value = json.loads(_rendered(parameter["Value"]))
        assert set(value) == FIELDS
        assert value["tenant_id"] == tenant and value["stack"] == "X"
        assert value["on_failure"] in ("halt", "continue") and isinstance(value["first_sequence"], int)
        assert all(value[f] for f in FIELDS)


@pytest.fixture
def ssm(monkeypatch):
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield boto3.client("ssm", region_name=REGION)


def _register(ssm, tenant: str, **fields) -> TenantResources:
    resources = TenantResources(
        tenant_id=tenant,
        stack="Payments-Ingest",
        queue_url=f"https://q/{tenant}",
        state_machine_arn=f"arn:aws:states:us-east-1:123456789012:stateMachine:{tenant}",
        landing_prefix=f"{tenant}/",
        on_failure="halt",
        ledger_table="team-ledger",
        **fields,
    )
    ssm.put_parameter(
        Name=registry.parameter_name(tenant), Type="String", Value=json.dumps(registry.record(resources))
    )
    return resources


def clients(service: str):
    return boto3.client(service, region_name=REGION)


def test_ops_finds_registered_pipelines_in_a_stack_of_any_name_without_the_apps_stacks(ssm):
    """GIVEN two pipelines registered by a team's own stack, and none of the app's stacks THEN
    discovery finds both, as they registered themselves."""
    pay = _register(ssm, "pay", first_sequence=3, ordering="key_sequence")
    bill = _register(ssm, "bill")
    assert discover(clients) == {"pay": pay, "bill": bill}


def test_a_qualified_copy_registers_under_its_own_path_and_is_found_only_with_its_qualifier(ssm):
    """GIVEN one pipeline of the plain app and one of the copy qualified `qa` THEN each qualifier
    finds its own only."""
    plain = _register(ssm, "acme")
    with contract.qualified("qa"):
        assert registry.parameter_name("acme") == "/qa-ordered-ingest/pipelines/acme"
        copy = _register(ssm, "acme", work_bucket="qa-work")
        assert discover(clients) == {"acme": copy}
    assert discover(clients) == {"acme": plain}


def test_a_value_with_fields_this_version_does_not_know_keeps_the_ones_it_knows(ssm):
    """GIVEN a registry value written by a newer release (an extra field) THEN it is still read."""
    ssm.put_parameter(
        Name=registry.parameter_name("acme"),
        Type="String",
        Value=json.dumps({**registry.record(_register(ssm, "acme")), "newer_field": "x"}),
        Overwrite=True,
    )
    assert discover(clients)["acme"].ledger_table == "team-ledger"


def test_fails_when_nothing_is_registered_and_no_stack_of_the_app_exists(ssm):
    with pytest.raises(DiscoveryError) as caught:
        discover(clients)
    assert str(caught.value) == (
        "no pipeline registered under /ordered-ingest/pipelines/ and no stack OrderedIngest-Shared found: check the "
        "account, the region (--region), the endpoint (--endpoint-url) or the qualifier (--qualifier)"
    )


def _app_stacks(tenants: list[str]) -> None:
    """The app's shared stack and tenant stacks as a release before the registry deployed them."""
    cfn = clients("cloudformation")
    cfn.create_stack(
        StackName="OrderedIngest-Shared",
        TemplateBody=json.dumps(
            {
                "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
                "Outputs": {"LedgerTableName": {"Value": "app-ledger"}},
            }
        ),
    )
    for tenant in tenants:
        outputs = {
            "TenantId": tenant,
            "QueueUrl": f"https://q/old-{tenant}",
            "StateMachineArn": f"arn:old:{tenant}",
            "LandingPrefix": f"{tenant}/",
            "OnFailure": "continue",
        }
        cfn.create_stack(
            StackName=f"OrderedIngest-Tenant-{tenant}",
            TemplateBody=json.dumps(
                {
                    "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
                    "Outputs": {
                        f"Pipeline{name}0A1B2C3D": {"Value": value} for name, value in outputs.items()
                    },
                }
            ),
        )


def test_the_registry_wins_over_an_app_stacks_outputs_and_unregistered_app_stacks_are_still_found(ssm):
    """GIVEN the app's stacks of acme and globex deployed before the registry, and acme since
    redeployed (registered) THEN acme is what it registered and globex what its outputs say."""
    _app_stacks(["acme", "globex"])
    acme = _register(ssm, "acme")
    found = discover(clients)
    assert found["acme"] == acme
    assert (found["globex"].queue_url, found["globex"].ledger_table, found["globex"].on_failure) == (
        "https://q/old-globex",
        "app-ledger",
        "continue",
    )
