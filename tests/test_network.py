"""Private core systems (docs/core-system.md, "Private core systems"): `network:` puts the register function,
and only it, in the tenant's VPC, with the network-interface permissions Lambda needs."""

from __future__ import annotations

import json
import textwrap

import pytest
from aws_cdk.assertions import Template

from pipeline_constructs.config import parse_config
from tests.conftest import cfn_lint_findings, problems_of, synthesize

VPC = "vpc-0123456789abcdef0"
SUBNETS = ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"]
GROUPS = ["sg-0123456789abcdef0"]

TENANTS = f"""
defaults:
  sink: {{url: https://core.internal.example.com/records}}
tenants:
  - id: private
    prefix: private/
    sink: {{auth: {{type: none}}}}
    network: {{vpc_id: {VPC}, subnet_ids: {SUBNETS}, security_group_ids: {GROUPS}}}
  - id: public
    prefix: public/
    sink: {{auth: {{type: none}}}}
  - id: traced
    prefix: traced/
    sink: {{auth: {{type: none}}}}
    tracing: true
    network: {{vpc_id: {VPC}, subnet_ids: [{SUBNETS[0]}], security_group_ids: {GROUPS}}}
"""


@pytest.fixture(scope="module")
def network_app(tmp_path_factory):
    root = tmp_path_factory.mktemp("network")
    (root / "tenants.yaml").write_text(TENANTS)
    return synthesize(root / "tenants.yaml", root / "cdk.out")  # cdk-nag on: no unacknowledged finding


def functions_by_kind(template: dict, tenant: str) -> dict[str, dict]:
    """The tenant's four functions by kind, their names made tenant-neutral."""
    kinds = {
        "PipelineSplit": "split",
        "PipelineRegisterChunk": "register",
        "PipelineController": "controller",
        "PipelineCloser": "closer",
    }
    found = {}
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] == "AWS::Lambda::Function":
            found[kinds[logical_id[:-8]]] = json.loads(
                json.dumps(resource["Properties"]).replace(tenant, "<tenant>")
            )
    return found


def data_role_statements(template: dict) -> list[dict]:
    (policy,) = [
        r
        for logical_id, r in template["Resources"].items()
        if r["Type"] == "AWS::IAM::Policy" and logical_id.startswith("PipelineDataRoleDefaultPolicy")
    ]
    return policy["Properties"]["PolicyDocument"]["Statement"]


def arn(resource: str) -> dict:
    return {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":ec2:",
                {"Ref": "AWS::Region"},
                ":",
                {"Ref": "AWS::AccountId"},
                f":{resource}",
            ],
        ]
    }


def test_only_the_register_function_runs_in_the_tenants_subnets_and_security_groups(network_app):
    functions = functions_by_kind(network_app.templates["OrderedIngest-Tenant-private"], "private")
    assert sorted(functions) == ["closer", "controller", "register", "split"]
    assert functions["register"]["VpcConfig"] == {"SubnetIds": SUBNETS, "SecurityGroupIds": GROUPS}
    assert [kind for kind, props in functions.items() if "VpcConfig" in props] == ["register"]


def test_split_controller_and_closer_are_exactly_as_without_network(network_app):
    """GIVEN two tenants alike but for `network` THEN their split, controller and closer
    functions are the same, and their register functions differ only by VpcConfig."""
    private = functions_by_kind(network_app.templates["OrderedIngest-Tenant-private"], "private")
    public = functions_by_kind(network_app.templates["OrderedIngest-Tenant-public"], "public")

    def comparable(props: dict) -> dict:  # the role's and log group's logical ids are the same construct ids
        return {k: v for k, v in props.items() if k not in ("Code",)}

    for kind in ("split", "controller", "closer"):
        assert comparable(private[kind]) == comparable(public[kind]), kind
    register = dict(private["register"])
    register.pop("VpcConfig")
    assert comparable(register) == comparable(public["register"])


#: The EC2 actions of the AWS managed policy AWSLambdaVPCAccessExecutionRole, v3 (2024-01-05):
#: https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AWSLambdaVPCAccessExecutionRole.html
MANAGED_POLICY_EC2_ACTIONS = {
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
}


def test_the_data_role_may_create_interfaces_only_in_the_tenants_subnets_and_manage_them_as_lambda_documents(
    network_app,
):
    """GIVEN a tenant with `network` THEN its data role holds exactly three EC2 statements, and
    no other statement names an EC2 action: Describe on `*` (EC2 supports nothing else for it);
    Create on new interfaces, the tenant's subnets and its security groups; Delete and the
    address assignments on every interface, without condition (the Lambda guide asks for the
    interface's own id or all of them, so no `ec2:Vpc`: an interface left in a VPC the config
    no longer names is deleted too)."""
    all_statements = data_role_statements(network_app.templates["OrderedIngest-Tenant-private"])
    statements = {s["Sid"]: s for s in all_statements if s.get("Sid", "").startswith("RegisterVpc")}
    assert [
        s for s in all_statements if "ec2:" in json.dumps(s["Action"]) and s not in statements.values()
    ] == []
    assert statements == {
        "RegisterVpcDescribe": {
            "Action": ["ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets"],
            "Effect": "Allow",
            "Resource": "*",
            "Sid": "RegisterVpcDescribe",
        },
        "RegisterVpcCreateInterfaces": {
            "Action": "ec2:CreateNetworkInterface",
            "Effect": "Allow",
            "Resource": [
                arn("network-interface/*"),
                arn(f"security-group/{GROUPS[0]}"),
                arn(f"subnet/{SUBNETS[0]}"),
                arn(f"subnet/{SUBNETS[1]}"),
            ],
            "Sid": "RegisterVpcCreateInterfaces",
        },
        "RegisterVpcManageInterfaces": {
            "Action": [
                "ec2:AssignPrivateIpAddresses",
                "ec2:DeleteNetworkInterface",
                "ec2:UnassignPrivateIpAddresses",
            ],
            "Effect": "Allow",
            "Resource": arn("network-interface/*"),
            "Sid": "RegisterVpcManageInterfaces",
        },
    }


def test_the_data_role_has_every_ec2_action_of_the_managed_policy_for_vpc_functions(network_app):
    """GIVEN a tenant with `network` THEN its data role allows each EC2 action AWS's managed
    policy for VPC functions grants (scoped as above): Lambda needs none that is missing."""
    granted = set()
    for statement in data_role_statements(network_app.templates["OrderedIngest-Tenant-private"]):
        actions = statement["Action"]
        granted |= {actions} if isinstance(actions, str) else set(actions)
    assert granted >= MANAGED_POLICY_EC2_ACTIONS


def test_without_network_the_data_role_has_no_ec2_permission_and_no_managed_policy(network_app):
    template = network_app.templates["OrderedIngest-Tenant-public"]
    assert "ec2:" not in json.dumps(data_role_statements(template))
    for name, template in network_app.templates.items():
        for role in Template.from_json(template).find_resources("AWS::IAM::Role").values():
            assert "ManagedPolicyArns" not in role["Properties"], name


def test_the_register_function_is_created_after_its_roles_ec2_permissions(network_app):
    """Lambda checks the execution role's ENI permissions when it creates a VPC function."""
    template = network_app.templates["OrderedIngest-Tenant-private"]
    (register,) = [
        r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function"
        and r["Properties"]["FunctionName"] == "private-register-chunk"
    ]
    assert any(d.startswith("PipelineDataRoleDefaultPolicy") for d in register["DependsOn"])


def test_network_and_tracing_together_leave_no_unacknowledged_finding(network_app):
    (nag,) = [r for r in network_app.validation_report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert nag["conclusion"] == "success" and nag["violations"] == []
    traced = functions_by_kind(network_app.templates["OrderedIngest-Tenant-traced"], "traced")
    assert traced["register"]["VpcConfig"]["SubnetIds"] == [SUBNETS[0]]
    assert traced["register"]["TracingConfig"] == {"Mode": "Active"}


# --- configuration ---------------------------------------------------------------------------------


def test_network_in_defaults_applies_to_every_tenant_and_a_tenant_may_override_a_key():
    config = parse_config(
        textwrap.dedent(f"""
        defaults:
          sink: {{url: https://core.example.com/records, auth: {{type: bearer, secret: core/token}}}}
          network: {{vpc_id: {VPC}, subnet_ids: {SUBNETS}, security_group_ids: {GROUPS}}}
        tenants:
          - {{id: acme, prefix: acme/}}
          - {{id: globex, prefix: globex/, network: {{subnet_ids: [{SUBNETS[1]}]}}}}
    """)
    )
    acme, globex = config.tenants
    assert acme.network is not None and acme.network.subnet_ids == SUBNETS
    assert globex.network is not None and (globex.network.vpc_id, globex.network.subnet_ids) == (
        VPC,
        [SUBNETS[1]],
    )


def test_fails_when_network_ids_are_malformed_or_missing_naming_each_field():
    assert problems_of(f"""
        defaults: {{sink: {{url: https://core.example.com/records, auth: {{type: bearer, secret: core/token}}}}}}
        tenants:
          - id: acme
            prefix: acme/
            network: {{vpc_id: vpc-123, subnet_ids: [{SUBNETS[0]}, subnet_b], security_group_ids: []}}
          - id: globex
            prefix: globex/
            network: {{subnet_ids: [{SUBNETS[0]}], security_group_ids: [sg-0123456789abcdef0], vpcid: {VPC}}}
    """) == [
        "tenant 'acme': field 'network.vpc_id' = 'vpc-123': is not a VPC id (vpc- and 8 or 17 hexadecimal digits); "
        "use the id of the VPC of the subnets, e.g. 'vpc-0123456789abcdef0'",
        f"tenant 'acme': field 'network.subnet_ids' = ['{SUBNETS[0]}', 'subnet_b']: 'subnet_b' is not a subnet id "
        "(subnet- and 8 or 17 hexadecimal digits); list at least one subnet id of that VPC, e.g. "
        "['subnet-0123456789abcdef0'] (two, in different Availability Zones, for availability)",
        "tenant 'acme': field 'network.security_group_ids' = []: has too few entries (at least 1); list at least one "
        "security group id that lets the function reach the core system, e.g. ['sg-0123456789abcdef0']",
        "tenant 'globex': field 'network.vpc_id' = (missing): is required; use the id of the VPC of the subnets, "
        "e.g. 'vpc-0123456789abcdef0'",
        f"tenant 'globex': field 'network.vpcid' = '{VPC}': unknown key; remove it or fix its spelling "
        "(did you mean 'vpc_id'?)",
    ]


def test_fails_when_a_bad_network_in_defaults_is_blamed_on_defaults_once():
    assert problems_of(f"""
        defaults:
          sink: {{url: https://core.example.com/records, auth: {{type: bearer, secret: core/token}}}}
          network: {{vpc_id: {VPC}, subnet_ids: [{SUBNETS[0]}, {SUBNETS[0]}], security_group_ids: {GROUPS}}}
        tenants:
          - {{id: acme, prefix: acme/}}
          - {{id: globex, prefix: globex/}}
    """) == [
        f"defaults: field 'network.subnet_ids' = ['{SUBNETS[0]}', '{SUBNETS[0]}']: lists an id twice; list at least "
        "one subnet id of that VPC, e.g. ['subnet-0123456789abcdef0'] (two, in different Availability Zones, for "
        "availability)",
    ]


@pytest.mark.slow  # cfn-lint or synthesis over whole apps: make test (make test-fast runs tests/test_user_tenants.py)
def test_cfn_lint_finds_nothing_in_a_tenant_stack_with_network(network_app):
    assert cfn_lint_findings(network_app.templates["OrderedIngest-Tenant-private"]) == []


def test_parliament_finds_nothing_in_the_network_interface_statements(network_app):
    """parliament knows which resources and condition keys each EC2
    action has: e.g. a new interface has no `ec2:Subnet` key, so a condition on it would never
    match and Lambda could not attach the function."""
    parliament = pytest.importorskip("parliament")
    from tools.iam_policies import Resolver

    stack = "OrderedIngest-Tenant-private"
    statements = [
        s
        for s in data_role_statements(network_app.templates[stack])
        if s.get("Sid", "").startswith("RegisterVpc")
    ]
    document = Resolver(network_app.templates).resolve(
        stack, {"Version": "2012-10-17", "Statement": statements}
    )
    findings = parliament.analyze_policy_string(json.dumps(document)).findings
    assert [(f.issue, f.detail) for f in findings] == []


def test_a_tenant_opts_out_of_the_defaults_network_with_null():
    config = parse_config(
        textwrap.dedent(f"""
        defaults:
          sink: {{url: https://core.example.com/records, auth: {{type: bearer, secret: core/token}}}}
          network: {{vpc_id: {VPC}, subnet_ids: {SUBNETS}, security_group_ids: {GROUPS}}}
        tenants:
          - {{id: acme, prefix: acme/}}
          - {{id: public, prefix: public/, network: null}}
    """)
    )
    assert [t.network is not None for t in config.tenants] == [True, False]


def test_in_a_deployment_target_the_interface_arns_name_its_account_and_region(tmp_path):
    """GIVEN a tenant with `network` in a target's Stage (explicit account and Region) WHEN
    synthesized with cdk-nag THEN no finding is left (the acknowledgement names the literal
    ARN) and the statements name the target's account and Region."""
    from aws_cdk import App

    from pipeline_constructs.application import build_app

    (tmp_path / "tenants.yaml").write_text(
        textwrap.dedent(f"""
        defaults: {{sink: {{url: https://core.example.com/records}}, target: prod}}
        targets: {{prod: {{account: '111111111111', region: eu-west-1}}}}
        tenants:
          - {{id: acme, prefix: acme/, sink: {{auth: {{type: none}}}}, network: {{vpc_id: {VPC}, subnet_ids: [{SUBNETS[0]}], security_group_ids: {GROUPS}}}}}
    """)
    )
    built = build_app(tmp_path / "tenants.yaml", app=App(outdir=str(tmp_path / "cdk.out")))
    built.app.synth()  # raises on an unacknowledged cdk-nag finding
    template = Template.from_stack(built.tenants["acme"]).to_json()
    statements = {
        s["Sid"]: s for s in data_role_statements(template) if s.get("Sid", "").startswith("RegisterVpc")
    }
    assert statements["RegisterVpcCreateInterfaces"]["Resource"] == [
        "arn:aws:ec2:eu-west-1:111111111111:network-interface/*",
        f"arn:aws:ec2:eu-west-1:111111111111:security-group/{GROUPS[0]}",
        f"arn:aws:ec2:eu-west-1:111111111111:subnet/{SUBNETS[0]}",
    ]
