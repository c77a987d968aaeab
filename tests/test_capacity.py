"""The capacity model: what tenants need of each account quota, per deployment target; the
synth-time refusal against the limits declared in tenants.yaml; the deployment targets' own
validation. The per-tenant counts are checked against the synthesized templates."""

from __future__ import annotations

import textwrap
from collections import Counter

from pipeline_constructs import capacity
from pipeline_constructs.config import parse_config
from tests.conftest import one_problem, problems_of

SINK = "  sink: {url: https://core.example.com/records, auth: {type: bearer, secret: core/token}}\n"


def tenants_yaml(count: int, *, head: str = "", target: str | None = None, start: int = 0) -> str:
    """``count`` tenants t0000, t0001... (optionally all on ``target``), after ``head``."""
    lines = [textwrap.dedent(head), "defaults:", SINK.rstrip("\n"), "tenants:"]
    for i in range(start, start + count):
        lines.append(
            f"  - {{id: t{i:04d}, prefix: t{i:04d}/" + (f", target: {target}" if target else "") + "}"
        )
    return "\n".join(lines) + "\n"


PROD = """
targets:
  prod: {account: '111111111111', region: eu-west-1}
"""


# --- the per-tenant counts are those of the synthesized templates ---------------------------


def test_per_tenant_and_shared_counts_match_the_synthesized_templates(synthesized):
    # GIVEN the default tenants file synthesized once (session fixture): 3 tenant stacks
    tenant_stacks = [name for name in synthesized.templates if name.startswith("OrderedIngest-Tenant-")]
    shared = synthesized.templates["OrderedIngest-Shared"]

    def count(template: dict, kind: str) -> int:
        return Counter(r["Type"] for r in template["Resources"].values())[kind]

    def reserved(template: dict) -> int:
        return sum(
            r["Properties"].get("ReservedConcurrentExecutions", 0)
            for r in template["Resources"].values()
            if r["Type"] == "AWS::Lambda::Function"
        )

    # THEN every tenant stack holds exactly the model's per-tenant figures...
    for name in tenant_stacks:
        template = synthesized.templates[name]
        assert count(template, "AWS::Events::Rule") == capacity.RULES_PER_TENANT, name
        assert count(template, "AWS::IAM::Role") == capacity.ROLES_PER_TENANT, name
        assert count(template, "AWS::StepFunctions::StateMachine") == capacity.STATE_MACHINES_PER_TENANT, name
        assert reserved(template) == capacity.RESERVED_CONCURRENCY_PER_TENANT, name
        # preflight tells this app's rules and state machines by these names
        assert sorted(
            r["Properties"]["Name"]
            for r in template["Resources"].values()
            if r["Type"] == "AWS::Events::Rule"
        ) == sorted(n.render(name.split("-", 2)[2]) for n in capacity.TENANT_RULES), name
        assert sorted(
            r["Properties"]["StateMachineName"]
            for r in template["Resources"].values()
            if r["Type"] == "AWS::StepFunctions::StateMachine"
        ) == sorted(n.render(name.split("-", 2)[2]) for n in capacity.TENANT_STATE_MACHINES), name
        # a custom resource would bring a provider role the model does not count
        assert not [
            r
            for r in template["Resources"].values()
            if r["Type"].startswith("Custom::") or r["Type"] == "AWS::CloudFormation::CustomResource"
        ], name
    # ...and the shared stack the model's shared figures
    assert count(shared, "AWS::Events::Rule") == capacity.SHARED_RULES
    assert count(shared, "AWS::IAM::Role") == capacity.SHARED_ROLES
    assert count(shared, "AWS::StepFunctions::StateMachine") == capacity.SHARED_STATE_MACHINES
    assert reserved(shared) == 0
    assert (
        len(synthesized.templates) == capacity.STACKS_PER_TENANT * len(tenant_stacks) + capacity.SHARED_STACKS
    )


def test_the_default_tenants_file_needs_what_its_templates_hold():
    # GIVEN three tenants and no targets
    config = parse_config(tenants_yaml(3))
    # WHEN the model counts them
    by_field = {u.quota.field: u for u in capacity.usage(capacity.targets(config))}
    # THEN one deployment, with the figures (and how they are made) a user reads
    assert {f: (u.need.count, u.limit) for f, u in by_field.items()} == {
        "eventbridge_rules_per_bus": (7, 300),
        "lambda_concurrent_executions": (103, 1000),
        "iam_roles": (12, 1000),
        "cloudformation_stacks": (4, 2000),
        "state_machines": (9, 100000),
        "s3_access_points": (0, 10000),
        "upload_access_point_policy_bytes": (0, 20480),
    }
    assert by_field["lambda_concurrent_executions"].need.how == (
        "1 reserved per tenant x 3 tenants + 100 Lambda keeps unreserved"
    )


# --- synth refuses what the declared limits cannot hold --------------------------------------


def test_fails_when_the_default_bus_would_hold_more_rules_than_the_quota():
    # (301 tenants also need 2,107 IAM roles: the account's quota is raised to its 5,000 ceiling)
    head = PROD + "account_limits: {iam_roles: 5000}\n"
    assert one_problem(tenants_yaml(301, head=head, target="prod")) == (
        "target 'prod' (111111111111/eu-west-1): EventBridge rules on the default bus: need 606 "
        "(2 per tenant x 301 tenants + 4 (the catch-all of unmatched uploads)), limit 300; fix: shard the rules over "
        "event buses with routing.shards (docs/scaling.md, Sharded routing), "
        "or move tenants to another target (targets:, docs/scaling.md), or raise the quota and set "
        "account_limits.eventbridge_rules_per_bus"
    )


def test_fails_when_a_region_with_a_100_rule_default_gets_50_tenants():
    # af-south-1's default is 100 rules per bus, not 300
    text = tenants_yaml(
        50, head="targets:\n  cape: {account: '111111111111', region: af-south-1}\n", target="cape"
    )
    assert one_problem(text).startswith(
        "target 'cape' (111111111111/af-south-1): EventBridge rules on the default bus: need 101 "
        "(2 per tenant x 50 tenants + 1), limit 100; fix: "
    )


def test_a_raised_rules_quota_declared_in_account_limits_lets_301_tenants_synthesize():
    config = parse_config(
        tenants_yaml(301, head="account_limits: {eventbridge_rules_per_bus: 700, iam_roles: 3000}\n")
    )
    assert len(config.tenants) == 301


def test_fails_when_reserved_concurrency_would_leave_less_than_100_unreserved():
    assert one_problem(tenants_yaml(3, head="account_limits: {lambda_concurrent_executions: 102}\n")) == (
        "the deployment (the account and Region cdk deploy uses): Lambda concurrent executions: need 103 "
        "(1 reserved per tenant x 3 tenants + 100 Lambda keeps unreserved), limit 102; fix: raise the Lambda "
        "concurrent executions quota and set account_limits.lambda_concurrent_executions, or move tenants to "
        "another target (targets:, docs/scaling.md)"
    )


def test_fails_when_251_tenants_need_more_iam_roles_than_the_default_quota():
    # 4 roles a tenant: with the rules on the default bus raised, roles are the next limit
    head = "account_limits: {eventbridge_rules_per_bus: 1000}\n"
    # (251 prefixes do not fit one catch-all pattern: its buses add the shared forwarding role)
    assert one_problem(tenants_yaml(251, head=head)).startswith(
        "the deployment (the account and Region cdk deploy uses): IAM roles: need 1005 (4 per tenant x 251 tenants "
        "+ 1 (the event-bus forwarding role)), limit 1000; fix: "
    )
    parse_config(tenants_yaml(249, head=head))  # 996 + 1 roles fit


def test_a_thousand_tenants_fit_one_account_at_the_iam_ceiling():
    """GIVEN 1,000 tenants, IAM roles at their ceiling (5,000) and the other quotas raised as
    docs/scaling.md says WHEN validated THEN they fit: 4 roles a tenant is 4,000."""
    head = (
        "account_limits: {iam_roles: 5000, eventbridge_rules_per_bus: 2100, "
        "lambda_concurrent_executions: 1100, cloudformation_stacks: 2000}\n"
    )
    assert len(parse_config(tenants_yaml(1000, head=head)).tenants) == 1000


def test_fails_when_150_tenants_need_more_rules_than_the_default_bus_holds():
    assert one_problem(tenants_yaml(150, head="account_limits: {iam_roles: 5000}\n")).startswith(
        "the deployment (the account and Region cdk deploy uses): EventBridge rules on the default bus: need 301 "
        "(2 per tenant x 150 tenants + 1), limit 300; fix: "
    )
    parse_config(tenants_yaml(149, head="account_limits: {iam_roles: 5000}\n"))  # 299 rules fit


def test_fails_when_the_tenants_need_more_iam_roles_than_the_account_has():
    assert one_problem(tenants_yaml(6, head="account_limits: {iam_roles: 20}\n")) == (
        "the deployment (the account and Region cdk deploy uses): IAM roles: need 24 (4 per tenant x 6 tenants), "
        "limit 20; fix: raise the IAM roles quota (at most 5,000) and set account_limits.iam_roles, or move "
        "tenants to a target in another account (targets:, docs/scaling.md)"
    )


def test_fails_when_the_tenants_need_more_stacks_than_the_quota():
    assert one_problem(tenants_yaml(3, head="account_limits: {cloudformation_stacks: 3}\n")) == (
        "the deployment (the account and Region cdk deploy uses): CloudFormation stacks: need 4 "
        "(1 per tenant x 3 tenants + 1 shared stack), limit 3; fix: raise the CloudFormation stack count quota "
        "and set account_limits.cloudformation_stacks, or move tenants to another target (targets:, docs/scaling.md)"
    )


def test_fails_when_the_tenants_need_more_state_machines_than_the_quota():
    assert one_problem(tenants_yaml(3, head="account_limits: {state_machines: 8}\n")) == (
        "the deployment (the account and Region cdk deploy uses): Step Functions state machines: need 9 "
        "(3 per tenant x 3 tenants), limit 8; fix: raise the Step Functions state machines quota and set "
        "account_limits.state_machines, or move tenants to another target (targets:, docs/scaling.md)"
    )


def test_fails_once_listing_every_quota_that_does_not_fit():
    head = (
        "account_limits: {eventbridge_rules_per_bus: 6, lambda_concurrent_executions: 100, iam_roles: 1,"
        " cloudformation_stacks: 1, state_machines: 1}\n"
    )
    problems = problems_of(tenants_yaml(3, head=head))
    assert [p.split(": need ")[0].split(": ")[-1] for p in problems] == [
        "EventBridge rules on the default bus",
        "Lambda concurrent executions",
        "IAM roles",
        "CloudFormation stacks",
        "Step Functions state machines",
    ]


def test_a_targets_own_limits_override_the_top_level_ones_for_that_target_only():
    head = """
    account_limits: {state_machines: 6}
    targets:
      big: {account: '111111111111', region: eu-west-1, account_limits: {state_machines: 100}}
      small: {account: '222222222222', region: eu-west-1}
    """
    text = (
        tenants_yaml(2, head=head, target="big")
        + tenants_yaml(2, target="small", start=2).split("tenants:\n")[1]
    )
    # 2 tenants x 3 = 6 state machines fit 'small's inherited limit of 6; 'big' declares its own
    assert len(parse_config(text).tenants) == 4
    # a third tenant on 'small' does not fit; two more on 'big' would
    text += "  - {id: t0099, prefix: t0099/, target: small}\n"
    assert one_problem(text) == (
        "target 'small' (222222222222/eu-west-1): Step Functions state machines: need 9 (3 per tenant x 3 tenants), "
        "limit 6; fix: raise the Step Functions state machines quota and set account_limits.state_machines, or "
        "move tenants to another target (targets:, docs/scaling.md)"
    )


def test_capacity_is_computed_per_target_and_iam_roles_per_account():
    # GIVEN two targets in one account (two Regions) and one in another
    head = """
    targets:
      eu: {account: '111111111111', region: eu-west-1}
      us: {account: '111111111111', region: us-east-1}
      other: {account: '222222222222', region: eu-west-1}
    """
    text = (
        tenants_yaml(3, head=head, target="eu")
        + tenants_yaml(2, target="us", start=3).split("tenants:\n")[1]
        + tenants_yaml(1, target="other", start=5).split("tenants:\n")[1]
    )
    config = parse_config(text)
    # WHEN the model counts them
    found = {(u.quota.field, u.where): u.need.count for u in capacity.usage(capacity.targets(config))}
    # THEN Regional quotas count each target's tenants only
    assert found[("eventbridge_rules_per_bus", "target 'eu' (111111111111/eu-west-1)")] == 7
    assert found[("eventbridge_rules_per_bus", "target 'us' (111111111111/us-east-1)")] == 5
    assert found[("cloudformation_stacks", "target 'other' (222222222222/eu-west-1)")] == 2
    # and IAM, global to an account, adds the two targets of account 111111111111
    assert found[("iam_roles", "account 111111111111 (targets 'eu', 'us')")] == 20
    assert found[("iam_roles", "target 'other' (222222222222/eu-west-1)")] == 4


def test_fails_when_two_targets_of_one_account_together_need_more_roles_than_it_has():
    head = """
    account_limits: {iam_roles: 20}
    targets:
      eu: {account: '111111111111', region: eu-west-1}
      us: {account: '111111111111', region: us-east-1}
    """
    text = (
        tenants_yaml(3, head=head, target="eu") + tenants_yaml(3, target="us", start=3).split("tenants:\n")[1]
    )
    assert one_problem(text).startswith(
        "account 111111111111 (targets 'eu', 'us'): IAM roles: need 24 (4 per tenant x 6 tenants), limit 20; fix: "
    )


# --- deployment targets: validation ------------------------------------------------------------


def test_fails_when_a_tenant_names_an_undeclared_target():
    text = tenants_yaml(1, head=PROD, target="prd")
    assert one_problem(text) == (
        "tenant 't0000': field 'target' = 'prd': is not a declared target; did you mean 'prod'? use one of: prod"
    )


def test_fails_when_targets_are_declared_and_a_tenant_has_none():
    text = tenants_yaml(1, head=PROD, target="prod") + "  - {id: other, prefix: other/}\n"
    assert one_problem(text) == (
        "tenant 'other': field 'target' = (missing): is required when targets are declared; "
        "set 'target:' in the tenant or in defaults (declared: prod)"
    )


def test_a_target_in_defaults_applies_to_every_tenant():
    text = (
        PROD
        + "defaults:\n  target: prod\n"
        + SINK
        + "tenants:\n  - {id: a, prefix: a/}\n  - {id: b, prefix: b/}\n"
    )
    config = parse_config(text)
    assert [t.target for t in config.tenants] == ["prod", "prod"]


def test_fails_when_a_tenant_names_a_target_and_none_is_declared():
    assert one_problem(tenants_yaml(1, target="prod")) == (
        "tenant 't0000': field 'target' = 'prod': is set, but no targets are declared; declare it under "
        "'targets:' (account and region), or remove it"
    )


def test_fails_when_two_targets_share_an_account_and_region():
    head = """
    targets:
      prod: {account: '111111111111', region: eu-west-1}
      again: {account: '111111111111', region: eu-west-1}
    """
    text = tenants_yaml(1, head=head, target="prod") + "  - {id: b, prefix: b/, target: again}\n"
    assert one_problem(text) == (
        "target 'again': field 'region' = 'eu-west-1': is in the same account and Region as target 'prod' "
        "(111111111111/eu-west-1): both would deploy the same stacks there; give each target its own account or "
        "Region, or assign its tenants to one target"
    )


def test_fails_when_an_account_id_is_not_12_digits_or_not_quoted():
    head = """
    targets:
      short: {account: '12345', region: eu-west-1}
      number: {account: 111111111111, region: eu-west-1}
    """
    text = tenants_yaml(1, head=head, target="short") + "  - {id: b, prefix: b/, target: number}\n"
    assert problems_of(text) == [
        (
            "target 'short': field 'account' = '12345': is not a 12-digit AWS account id; quote the 12-digit account "
            "id, e.g. account: '111111111111'"
        ),
        (
            "target 'number': field 'account' = 111111111111: is not text (quote it); quote the 12-digit "
            "account id, e.g. account: '111111111111'"
        ),
    ]


def test_fails_when_a_region_is_not_a_region_code():
    text = tenants_yaml(
        1, head="targets:\n  prod: {account: '111111111111', region: Ireland}\n", target="prod"
    )
    assert one_problem(text) == (
        "target 'prod': field 'region' = 'Ireland': is not an AWS Region code; use a Region code such as 'eu-west-1'"
    )


def test_fails_when_a_target_has_no_tenant():
    head = PROD + "  spare: {account: '222222222222', region: eu-west-1}\n"
    assert one_problem(tenants_yaml(1, head=head, target="prod")) == (
        "target 'spare': field 'tenants' = (missing): has no tenant; set 'target: spare' on its tenants, "
        "or remove the target"
    )


def test_fails_when_an_account_limit_is_unknown_or_not_positive():
    assert problems_of(tenants_yaml(1, head="account_limits: {iam_role: 2000, state_machines: 0}\n")) == [
        (
            "account_limits: field 'state_machines' = 0: is less than 1; use a whole number, "
            "at least 1 (default 100000): the account's quota (Service Quotas)"
        ),
        (
            "account_limits: field 'iam_role' = 2000: unknown key; remove it or fix its spelling (did you mean "
            "'iam_roles'?)"
        ),
    ]


# --- uploaders: an access point per tenant --------------------------------------------------------


def with_uploaders(count: int, *, head: str = "", principals: int = 1) -> str:
    """``count`` tenants t0000... each with ``principals`` uploader roles of its own."""
    lines = [textwrap.dedent(head), "defaults:", SINK.rstrip("\n"), "tenants:"]
    for i in range(count):
        roles = ", ".join(
            f"'arn:aws:iam::111111111111:role/t{i:04d}-uploader-{n}'" for n in range(principals)
        )
        lines.append(f"  - {{id: t{i:04d}, prefix: t{i:04d}/, uploaders: [{roles}]}}")
    return "\n".join(lines) + "\n"


def test_each_tenant_with_uploaders_needs_one_access_point_and_its_policy_is_counted_alone():
    # GIVEN 50 tenants with an uploader role each, and one without
    config = parse_config(with_uploaders(50) + "  - {id: plain, prefix: plain/}\n")
    by_field = {u.quota.field: u for u in capacity.usage(capacity.targets(config))}
    # THEN 50 access points of the account's 10,000, and the largest access point policy far below 20 KB
    assert (by_field["s3_access_points"].need, by_field["s3_access_points"].limit) == (
        capacity.Need(50, "1 per tenant with uploaders x 50"),
        10_000,
    )
    policy = by_field["upload_access_point_policy_bytes"]
    assert policy.limit == 20 * 1024 and policy.need.count < 2048
    assert policy.need.how == "the largest, tenant 't0000' with 1 uploader"


def test_fails_when_the_tenants_with_uploaders_need_more_access_points_than_the_declared_quota():
    assert one_problem(with_uploaders(3, head="account_limits: {s3_access_points: 2}\n")) == (
        "the deployment (the account and Region cdk deploy uses): S3 access points: need 3 (1 per tenant with "
        "uploaders x 3), limit 2; fix: raise the S3 access points quota and set account_limits.s3_access_points, "
        "or move tenants to another target (targets:, docs/scaling.md)"
    )


def test_fails_when_one_tenants_uploaders_do_not_fit_its_access_point_policy():
    # GIVEN a tenant with 200 uploader roles (about 25 KB of access point policy)
    problem = one_problem(with_uploaders(1, principals=200))
    assert problem.startswith(
        "the deployment (the account and Region cdk deploy uses): S3 access point policy size (20 KB, not "
        "adjustable): need "
    )
    assert problem.endswith(
        "(the largest, tenant 't0000' with 200 uploaders), limit 20480; fix: give the tenant's uploaders fewer "
        "principals (one role per uploading system, or another account's root whose own IAM picks the "
        "principals; docs/security.md, Uploaders)"
    )


def test_the_created_shared_keys_policy_is_counted_only_when_the_app_creates_the_key():
    # GIVEN 10 tenants with 60 uploader roles each (600 principals the shared key's policy names)
    plain = with_uploaders(10, principals=60)
    created = with_uploaders(10, principals=60, head="encryption: {kms_key: create}\n")
    # THEN without a created key nothing names them in a key policy: no such row
    assert "shared_key_policy_bytes" not in {
        u.quota.field for u in capacity.usage(capacity.targets(parse_config(plain)))
    }
    # and with one, the key policy needs 900 bytes + the statement naming all 600
    (usage,) = [
        u
        for u in capacity.usage(capacity.targets(parse_config(created)))
        if u.quota.field == "shared_key_policy_bytes"
    ]
    assert usage.limit == 32 * 1024 and usage.fits
    assert usage.need.how == "900 bytes of its other statements + 600 uploader principals"


def test_fails_when_the_created_shared_keys_policy_cannot_name_every_uploader():
    problem = one_problem(with_uploaders(10, principals=70, head="encryption: {kms_key: create}\n"))
    assert problem.startswith(
        "the deployment (the account and Region cdk deploy uses): KMS key policy size of the created shared key "
        "(32 KB, not adjustable): need "
    )
    assert problem.endswith(
        "(900 bytes of its other statements + 700 uploader principals), limit 32768; fix: name fewer uploader "
        "principals (another account's root for all of that account's uploaders), give encryption.kms_key a key "
        "ARN whose owner writes its policy, or move tenants to another target (targets:, docs/scaling.md)"
    )
