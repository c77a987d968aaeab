"""`ops preflight`: the account's real quotas and usage against what the tenants file needs.

CloudFormation, EventBridge, Step Functions, IAM and STS run on moto (in-process). moto 5.2.5
implements Service Quotas for the `vpc` service only and not Lambda's `GetAccountSettings`:
those two clients are real boto3 clients under botocore's Stubber, which checks every request
and response against the service model.
"""

from __future__ import annotations

import io
import json
import textwrap

import boto3
import pytest
from botocore.stub import Stubber

from ops.cli import EXIT_DOES_NOT_FIT, EXIT_OK, EXIT_USAGE, main

MOTO_ACCOUNT = "123456789012"
UPLOADER_TAG = "ordered-ingest:uploader"
THREE_TENANTS = textwrap.dedent(
    """
    defaults:
      sink: {url: https://core.example.com/records, auth: {type: bearer, secret: core/token}}
    tenants:
      - {id: acme, prefix: acme/, uploaders: ['arn:aws:iam::123456789012:role/acme-uploader']}
      - {id: globex, prefix: globex/, uploaders: ['arn:aws:iam::123456789012:role/globex-uploader']}
      - {id: initech, prefix: initech/}
    """
)
STACK_TEMPLATE = json.dumps({"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}})


@pytest.fixture
def account(moto_account):
    """A moto account where acme is already deployed (shared stack, acme's stack, rules, state
    machines, roles, its upload access point) next to another application's resources, and
    acme's and globex's uploader roles, tagged."""
    cfn, events = boto3.client("cloudformation"), boto3.client("events")
    sfn, iam = boto3.client("stepfunctions"), boto3.client("iam")
    for stack in ("OrderedIngest-Shared", "OrderedIngest-Tenant-acme", "another-app"):
        cfn.create_stack(StackName=stack, TemplateBody=STACK_TEMPLATE)
    for rule in ("acme-object-created", "acme-sfn-status", "ordered-ingest-unmatched-uploads", "another-rule"):
        events.put_rule(Name=rule, EventPattern=json.dumps({"source": ["aws.s3"]}))
    definition = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}})
    for machine in ("acme-file-ingest-workflow", "acme-file-ingest-section", "acme-file-ingest-page",
                    "another-workflow"):
        sfn.create_state_machine(name=machine, definition=definition,
                                 roleArn=f"arn:aws:iam::{MOTO_ACCOUNT}:role/sfn")
    trust = json.dumps({"Version": "2012-10-17", "Statement": []})
    for i in range(7):  # acme's 7
        iam.create_role(RoleName=f"role-{i}", AssumeRolePolicyDocument=trust)
    for uploader in ("acme-uploader", "globex-uploader"):  # not this app's: the tenants' own, tagged
        iam.create_role(RoleName=uploader, AssumeRolePolicyDocument=trust, Tags=[{"Key": UPLOADER_TAG, "Value": "true"}])
    landing = f"ordered-ingest-landing-{MOTO_ACCOUNT}-us-east-1"
    boto3.client("s3").create_bucket(Bucket=landing)
    boto3.client("s3").create_bucket(Bucket="another-bucket")
    s3control = boto3.client("s3control")
    s3control.create_access_point(AccountId=MOTO_ACCOUNT, Name="acme-uploads", Bucket=landing)
    s3control.create_access_point(AccountId=MOTO_ACCOUNT, Name="another-access-point", Bucket="another-bucket")


def clients_with(*, concurrency: int, unreserved: int, rules_quota: float | None, stacks_quota: float = 2000.0):
    """moto clients, except Lambda's account settings and Service Quotas (stubbed, in call order)."""
    lambda_ = boto3.client("lambda")
    lambda_stub = Stubber(lambda_)
    lambda_stub.add_response("get_account_settings", {"AccountLimit": {
        "ConcurrentExecutions": concurrency, "UnreservedConcurrentExecutions": unreserved}})
    quotas = boto3.client("service-quotas")
    quotas_stub = Stubber(quotas)
    rules_request = {"ServiceCode": "events", "QuotaCode": "L-244521F2"}
    if rules_quota is None:  # never raised: no applied value, AWS's default answers
        quotas_stub.add_client_error("get_service_quota", "NoSuchResourceException", expected_params=rules_request)
        quotas_stub.add_response("get_aws_default_service_quota", {"Quota": {"Value": 300.0}}, rules_request)
    else:
        quotas_stub.add_response("get_service_quota", {"Quota": {"Value": rules_quota}}, rules_request)
    quotas_stub.add_response("get_service_quota", {"Quota": {"Value": stacks_quota}},
                             {"ServiceCode": "cloudformation", "QuotaCode": "L-0485CB21"})
    lambda_stub.activate()
    quotas_stub.activate()
    stubbed = {"lambda": lambda_, "service-quotas": quotas}
    return (lambda service: stubbed.get(service) or boto3.client(service)), (lambda_stub, quotas_stub)


def run(argv: list[str], clients) -> tuple[int, str]:
    out = io.StringIO()
    return main(argv, clients=clients, out=out), out.getvalue()


def test_a_fitting_account_passes_and_this_apps_deployed_resources_are_not_counted_twice(account, tmp_path):
    # GIVEN three tenants, acme already deployed, and an account with room
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(THREE_TENANTS)
    clients, stubs = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
    # WHEN preflight runs
    code, output = run(["preflight", "--tenants", str(tenants_file), "--json"], clients)
    # THEN it fits, and each quota shows the account's use less this app's, plus the need
    assert code == EXIT_OK
    report = json.loads(output)
    assert report["fits"] is True and report["tenants"] == 3
    # both uploader roles are this account's and tagged
    assert report["untagged_uploaders"] == []
    got = {q["field"]: (q["limit"], q["source"], q["in_use"], q["this_app"], q["need"], q["after_deploy"])
           for q in report["quotas"]}
    assert got == {
        "eventbridge_rules_per_bus": (300, "Service Quotas L-244521F2 (default)", 4, 3, 7, 8),
        "lambda_concurrent_executions": (1000, "Lambda account settings", 100, 1, 103, 202),
        "iam_roles": (1000, "IAM account summary", 9, 4, 12, 17),
        "cloudformation_stacks": (2000, "Service Quotas L-0485CB21 (applied)", 3, 2, 4, 5),
        "state_machines": (100000, "tenants.yaml (declared: not read from the account)", 4, 3, 9, 10),
        # acme's access point is deployed; globex's is new
        "s3_access_points": (10000, "tenants.yaml (declared: not read from the account)", 2, 1, 2, 3),
    }
    for stub in stubs:
        stub.assert_no_pending_responses()


def test_a_qualified_copy_counts_the_app_as_shipped_as_another_applications_use(account, tmp_path):
    # GIVEN the three tenants with `qualifier: q1`, beside the app as shipped (acme deployed)
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text("qualifier: q1\n" + THREE_TENANTS)
    clients, _ = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
    # WHEN preflight runs (it takes the file's qualifier)
    code, output = run(["preflight", "--tenants", str(tenants_file), "--json"], clients)
    # THEN none of acme's deployed resources is the copy's own: all count as the account's use
    assert code == EXIT_OK
    assert {q["field"]: q["this_app"] for q in json.loads(output)["quotas"]} == {
        "eventbridge_rules_per_bus": 0, "lambda_concurrent_executions": 0, "iam_roles": 0, "cloudformation_stacks": 0,
        "state_machines": 0, "s3_access_points": 0}
    assert run(["--qualifier", "q2", "preflight", "--tenants", str(tenants_file)], clients)[0] == EXIT_USAGE


def test_fails_when_the_accounts_real_quotas_cannot_hold_the_tenants(account, tmp_path):
    # GIVEN other functions reserving 899 of 1,000 and a rules quota lowered to 5
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(THREE_TENANTS)
    clients, _ = clients_with(concurrency=1000, unreserved=100, rules_quota=5.0)
    # WHEN preflight runs
    code, output = run(["preflight", "--tenants", str(tenants_file)], clients)
    # THEN it exits 8 and names each quota that does not fit, with its figures and fix
    assert code == EXIT_DOES_NOT_FIT
    verdicts = [line for line in output.splitlines() if line.startswith("does not fit")]
    assert verdicts == [
        ("does not fit: EventBridge rules on the default bus: 8 after the deploy (4 in use, 3 of them this app's, "
         "+ need 7: 2 per tenant x 3 tenants + 1), limit 5; fix: shard the rules over event buses with "
         "routing.shards (docs/scaling.md, Sharded routing), "
         "or move tenants to another target (targets:, docs/scaling.md), or raise the quota and set "
         "account_limits.eventbridge_rules_per_bus"),
        ("does not fit: Lambda concurrent executions: 1002 after the deploy (900 in use, 1 of them this app's, "
         "+ need 103: 1 reserved per tenant x 3 tenants + 100 Lambda keeps unreserved), limit 1000; fix: raise the "
         "Lambda concurrent executions quota and set account_limits.lambda_concurrent_executions, or move tenants "
         "to another target (targets:, docs/scaling.md)"),
    ]
    # and the table has one row per quota
    assert output.splitlines()[0] == (
        "preflight of the deployment (the account and Region cdk deploy uses): 3 tenants in the tenants file")
    assert output.splitlines()[1].split() == ["quota", "limit", "source", "in", "use", "this", "app", "need",
                                              "after", "deploy", "fits"]
    assert sum(1 for line in output.splitlines() if line.endswith(" NO")) == 2


def test_fails_when_the_credentials_are_not_the_targets_account(account, tmp_path, capsys):
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(THREE_TENANTS.replace(
        "defaults:\n", "targets:\n  prod: {account: '111111111111', region: us-east-1}\ndefaults:\n  target: prod\n"))
    code, _ = run(["preflight", "--tenants", str(tenants_file)], lambda service: boto3.client(service))
    assert code == EXIT_USAGE
    assert capsys.readouterr().err.strip() == (
        f"ops: the credentials are for account {MOTO_ACCOUNT}, target 'prod' (111111111111/us-east-1) is account "
        "111111111111: use that account's credentials (AWS_PROFILE)")


def test_preflight_checks_the_named_target_only(account, tmp_path):
    # GIVEN two targets; the credentials are those of 'here'
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(THREE_TENANTS.replace("defaults:\n", textwrap.dedent(f"""\
        targets:
          here: {{account: '{MOTO_ACCOUNT}', region: us-east-1}}
          there: {{account: '111111111111', region: eu-west-1}}
        defaults:
          target: here
        """)).replace("{id: initech, prefix: initech/}", "{id: initech, prefix: initech/, target: there}"))
    clients, _ = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
    code, output = run(["preflight", "--tenants", str(tenants_file), "--target", "here", "--json"], clients)
    report = json.loads(output)
    # THEN only 'here's two tenants are needed there
    assert code == EXIT_OK and report["target"] == "here" and report["tenants"] == 2
    assert {q["field"]: q["need"] for q in report["quotas"]}["eventbridge_rules_per_bus"] == 5


def test_fails_when_several_targets_are_declared_and_none_is_named(tmp_path, capsys):
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(THREE_TENANTS.replace("defaults:\n", textwrap.dedent("""\
        targets:
          a: {account: '111111111111', region: us-east-1}
          b: {account: '222222222222', region: us-east-1}
        defaults:
          target: a
        """)).replace("{id: initech, prefix: initech/}", "{id: initech, prefix: initech/, target: b}"))
    code, _ = run(["preflight", "--tenants", str(tenants_file)], lambda service: pytest.fail("no AWS call"))
    assert code == EXIT_USAGE
    assert capsys.readouterr().err.strip() == (
        "ops: the tenants file declares several targets: give --target (one of: a, b)")


def test_preflight_reads_a_file_whose_declared_limits_synth_would_refuse(account, tmp_path):
    # GIVEN declared limits too small for the file: synth refuses it, preflight reads the real ones
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text("account_limits: {iam_roles: 1}\n" + THREE_TENANTS)
    clients, _ = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
    code, output = run(["preflight", "--tenants", str(tenants_file), "--json"], clients)
    assert code == EXIT_OK
    assert {q["field"]: q["limit"] for q in json.loads(output)["quotas"]}["iam_roles"] == 1000


def test_fails_when_the_access_points_in_the_region_leave_no_room_for_the_tenants_uploaders(account, tmp_path):
    # GIVEN a quota of 2 access points (declared: Service Quotas has none to read), another
    # application's access point and acme's, and globex's still to come
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text("account_limits: {s3_access_points: 2}\n" + THREE_TENANTS)
    clients, _ = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
    # WHEN preflight runs
    code, output = run(["preflight", "--tenants", str(tenants_file)], clients)
    # THEN it does not fit, counting acme's deployed access point once
    assert code == EXIT_DOES_NOT_FIT
    assert [line for line in output.splitlines() if line.startswith("does not fit")] == [(
        "does not fit: S3 access points: 3 after the deploy (2 in use, 1 of them this app's, + need 2: 1 per tenant "
        "with uploaders x 2), limit 2; fix: raise the S3 access points quota and set account_limits.s3_access_points, "
        "or move tenants to another target (targets:, docs/scaling.md)"
    )]


def test_fails_when_an_uploader_of_the_account_is_not_tagged_or_does_not_exist(account, tmp_path):
    # GIVEN acme's uploader role tagged, globex's untagged, and initech's uploaders: a role that
    # does not exist, a user without the tag, another account's role and another account's root
    iam = boto3.client("iam")
    iam.untag_role(RoleName="globex-uploader", TagKeys=[UPLOADER_TAG])
    iam.create_user(UserName="initech-sftp", Tags=[{"Key": "team", "Value": "initech"}])
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(THREE_TENANTS.replace("{id: initech, prefix: initech/}", (
        "{id: initech, prefix: initech/, uploaders: ['arn:aws:iam::123456789012:role/initech-uploader', "
        "'arn:aws:iam::123456789012:user/sftp/initech-sftp', 'arn:aws:iam::222222222222:role/partner-uploader', "
        "'arn:aws:iam::222222222222:root']}")))
    looked_up: list[tuple[str, str]] = []
    iam.meta.events.register("before-parameter-build.iam", lambda params, model, **_: looked_up.append(
        (model.name, params.get("RoleName") or params.get("UserName"))))
    clients, _ = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
    # WHEN preflight runs
    code, output = run(["preflight", "--tenants", str(tenants_file)],
                       lambda service: iam if service == "iam" else clients(service))
    # THEN every quota fits, yet it exits 8 with one line per uploader that is not ready
    assert code == EXIT_DOES_NOT_FIT
    assert "fits: every quota holds what the tenants file needs" in output.splitlines()
    assert [line for line in output.splitlines() if line.startswith("uploader")] == [
        ("uploader not tagged: tenant 'globex': arn:aws:iam::123456789012:role/globex-uploader has no tag "
         "ordered-ingest:uploader, so the landing bucket policy does not keep it to its access point; fix: "
         "aws iam tag-role --role-name globex-uploader --tags Key=ordered-ingest:uploader,Value=true"),
        ("uploader not found: tenant 'initech': arn:aws:iam::123456789012:role/initech-uploader does not exist in "
         "this account (the deploy of the tenant's access point would fail); fix: create the role, then "
         "aws iam tag-role --role-name initech-uploader --tags Key=ordered-ingest:uploader,Value=true, or correct "
         "the ARN in the tenants file"),
        ("uploader not tagged: tenant 'initech': arn:aws:iam::123456789012:user/sftp/initech-sftp has no tag "
         "ordered-ingest:uploader, so the landing bucket policy does not keep it to its access point; fix: "
         "aws iam tag-user --user-name initech-sftp --tags Key=ordered-ingest:uploader,Value=true"),
    ]
    # and only this account's roles and users were looked up, by name (a path is not part of it)
    tag_lookups = [call for call in looked_up if call[0] in ("ListRoleTags", "ListUserTags")]
    assert tag_lookups == [("ListRoleTags", "acme-uploader"), ("ListRoleTags", "globex-uploader"),
                           ("ListRoleTags", "initech-uploader"), ("ListUserTags", "initech-sftp")]


def test_preflight_json_lists_the_uploaders_not_tagged(account, tmp_path):
    # GIVEN acme's uploader role without the tag
    boto3.client("iam").untag_role(RoleName="acme-uploader", TagKeys=[UPLOADER_TAG])
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(THREE_TENANTS)
    clients, _ = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
    # WHEN preflight runs with --json THEN the quotas fit, it exits 8 and lists it with its fix
    code, output = run(["preflight", "--tenants", str(tenants_file), "--json"], clients)
    report = json.loads(output)
    assert code == EXIT_DOES_NOT_FIT and report["fits"] is True
    assert report["untagged_uploaders"] == [{
        "tenant": "acme", "arn": "arn:aws:iam::123456789012:role/acme-uploader", "exists": True,
        "fix": "aws iam tag-role --role-name acme-uploader --tags Key=ordered-ingest:uploader,Value=true"}]
