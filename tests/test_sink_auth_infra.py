"""Template assertions for `sink.auth`: the register function's environment and the data
role's statements for each type (none, bearer by name or ARN, sigv4 to an API or a function URL)."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Template

from pipeline_constructs.shared import SharedResources, SharedResourcesProps
from pipeline_constructs.tenant_pipeline import TenantPipeline
from tests.conftest import tenant_config
from tests.test_tenant_pipeline import function_named, policy_statements_of_role

AUTH_ACTIONS = {
    "secretsmanager:GetSecretValue",
    "execute-api:Invoke",
    "lambda:InvokeFunctionUrl",
    "lambda:InvokeFunction",
}
API_ARN = "arn:aws:execute-api:eu-west-1:111111111111:a1b2c3d4e5/prod/POST/records"
FUNCTION_ARN = "arn:aws:lambda:eu-west-1:111111111111:function:core-records"


def register_only(function_name: str) -> dict[str, Any]:
    """The condition that keeps a statement of the shared data role to the register function."""
    return {
        "ArnEquals": {
            "lambda:SourceFunctionArn": {
                "Fn::Join": [
                    "",
                    [
                        "arn:",
                        {"Ref": "AWS::Partition"},
                        ":lambda:",
                        {"Ref": "AWS::Region"},
                        ":",
                        {"Ref": "AWS::AccountId"},
                        f":function:{function_name}",
                    ],
                ]
            }
        }
    }


def auth_statements(template: Template) -> list[dict]:
    statements = policy_statements_of_role(template, "PipelineDataRole")
    return [
        s
        for s in statements
        if set([s["Action"]] if isinstance(s["Action"], str) else s["Action"]) & AUTH_ACTIONS
    ]


def register_env(template: Template, tenant: str) -> dict[str, str]:
    return function_named(template, f"{tenant}-register-chunk")["Properties"]["Environment"]["Variables"]


def pipeline_with(tmp_path, **auth: Any) -> Template:
    """Tenant `signed` with `sink.auth` `auth` (none when empty), beside the shared resources."""
    stack = Stack(App(outdir=str(tmp_path)), "MyStack")
    shared = SharedResources(stack, "Shared", SharedResourcesProps())
    tenant = tenant_config("signed", "s/", sink={"auth": auth or {"type": "none"}})
    TenantPipeline(stack, "Pipeline", tenant=tenant, shared=shared.refs())
    return Template.from_stack(stack)


def test_a_tenant_without_auth_gets_no_credentials_and_no_statement(acme):
    env = register_env(acme, "acme")
    assert (env["SINK_AUTH"], env["SINK_AUTH_SECRET"], env["SINK_AUTH_SERVICE"]) == ("none", "-", "-")
    assert auth_statements(acme) == []


def test_bearer_by_name_lets_only_the_register_function_read_exactly_that_secret(initech):
    """GIVEN initech's `auth: {type: bearer, secret: ordered-ingest/initech/core-token}` WHEN
    synthesized THEN register's environment names the secret (never a value) and the shared
    data role may read that one secret (with Secrets Manager's 6-character suffix), only with
    the register function's credentials."""
    env = register_env(initech, "initech")
    assert (env["SINK_AUTH"], env["SINK_AUTH_SECRET"], env["SINK_AUTH_CACHE_SECONDS"]) == (
        "bearer",
        "ordered-ingest/initech/core-token",
        "300",
    )
    (statement,) = auth_statements(initech)
    assert statement["Action"] == "secretsmanager:GetSecretValue"
    assert statement["Resource"] == {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":secretsmanager:",
                {"Ref": "AWS::Region"},
                ":",
                {"Ref": "AWS::AccountId"},
                ":secret:ordered-ingest/initech/core-token-??????",
            ],
        ]
    }
    assert statement["Condition"] == register_only("initech-register-chunk")
    split_env = function_named(initech, "initech-split")["Properties"]["Environment"]["Variables"]
    assert not any(name.startswith("SINK_AUTH") for name in split_env)


def test_bearer_by_arn_grants_the_arn_as_given(tmp_path):
    arn = "arn:aws:secretsmanager:eu-west-1:111111111111:secret:core/token-AbC123"
    template = pipeline_with(tmp_path, type="bearer", secret=arn, cache_seconds=60)
    env = register_env(template, "signed")
    assert (env["SINK_AUTH_SECRET"], env["SINK_AUTH_CACHE_SECONDS"]) == (arn, "60")
    (statement,) = auth_statements(template)
    assert (statement["Resource"], statement["Condition"]) == (arn, register_only("signed-register-chunk"))


def test_sigv4_to_an_api_may_invoke_exactly_that_method(tmp_path):
    template = pipeline_with(
        tmp_path, type="sigv4", service="execute-api", region="eu-west-1", invoke_arn=API_ARN
    )
    env = register_env(template, "signed")
    assert (env["SINK_AUTH"], env["SINK_AUTH_SERVICE"], env["SINK_AUTH_REGION"], env["SINK_AUTH_SECRET"]) == (
        "sigv4",
        "execute-api",
        "eu-west-1",
        "-",
    )
    (statement,) = auth_statements(template)
    assert (statement["Action"], statement["Resource"]) == ("execute-api:Invoke", API_ARN)
    assert statement["Condition"] == register_only("signed-register-chunk")


def test_sigv4_to_a_function_url_may_invoke_that_function_through_its_iam_url_only(tmp_path):
    template = pipeline_with(
        tmp_path, type="sigv4", service="lambda", region="eu-west-1", invoke_arn=FUNCTION_ARN
    )
    by_action = {s["Action"]: s for s in auth_statements(template)}
    assert set(by_action) == {"lambda:InvokeFunctionUrl", "lambda:InvokeFunction"}
    assert {s["Resource"] for s in by_action.values()} == {FUNCTION_ARN}
    assert by_action["lambda:InvokeFunctionUrl"]["Condition"] == {
        **register_only("signed-register-chunk"),
        "StringEquals": {"lambda:FunctionUrlAuthType": "AWS_IAM"},
    }
    assert by_action["lambda:InvokeFunction"]["Condition"] == {
        **register_only("signed-register-chunk"),
        "Bool": {"lambda:InvokedViaFunctionUrl": "true"},
    }


@pytest.mark.parametrize("auth", ["bearer", "sigv4"])
def test_adding_auth_adds_no_role(tmp_path, auth):
    """IAM roles are an account quota (capacity.py counts 4 a tenant): auth reuses the data role."""
    extra = (
        {"secret": "core/token"}
        if auth == "bearer"
        else {"service": "lambda", "region": "eu-west-1", "invoke_arn": FUNCTION_ARN}
    )
    template = pipeline_with(tmp_path, type=auth, **extra)
    assert len(template.find_resources("AWS::IAM::Role")) == len(
        pipeline_with(tmp_path / "n").find_resources("AWS::IAM::Role")
    )
