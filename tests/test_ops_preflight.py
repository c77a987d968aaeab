"""`ops preflight`: the account's real quotas and usage against what the tenants file needs.

CloudFormation, EventBridge, Step Functions, IAM, Secrets Manager and STS run on moto
(in-process). moto 5.2.5 implements Service Quotas for the `vpc` service only and not Lambda's
`GetAccountSettings`: those two clients are real boto3 clients under botocore's Stubber, which
checks every request and response against the service model. The sink hosts are resolved by
an injected resolver: no test touches the network.
"""

from __future__ import annotations

import io
import json
import socket
import textwrap

import boto3
import pytest
from botocore.stub import Stubber

from ops.cli import (
    EXIT_DOES_NOT_FIT,
    EXIT_HOST_DOES_NOT_RESOLVE,
    EXIT_NO_CREDENTIALS,
    EXIT_OK,
    EXIT_PRINCIPAL_NOT_READY,
    EXIT_SECRET_NOT_READY,
    EXIT_USAGE,
    main,
)

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
#: The bearer token of THREE_TENANTS' secret `core/token` (no output may hold it).
TOKEN = "tok-9f3a7c1e5b"
#: The hosts the injected resolver knows.
RESOLVABLE = {"core.example.com"}


@pytest.fixture
def account(moto_account):
    """A moto account where acme is already deployed (shared stack, acme's stack, rules, state
    machines, roles, its upload access point) next to another application's resources, and
    acme's and globex's uploader roles, tagged, and the bearer secret `core/token`."""
    cfn, events = boto3.client("cloudformation"), boto3.client("events")
    sfn, iam = boto3.client("stepfunctions"), boto3.client("iam")
    for stack in ("OrderedIngest-Shared", "OrderedIngest-Tenant-acme", "another-app"):
        cfn.create_stack(StackName=stack, TemplateBody=STACK_TEMPLATE)
    for rule in (
        "acme-object-created",
        "acme-sfn-status",
        "ordered-ingest-unmatched-uploads",
        "another-rule",
    ):
        events.put_rule(Name=rule, EventPattern=json.dumps({"source": ["aws.s3"]}))
    definition = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}})
    for machine in (
        "acme-file-ingest-workflow",
        "acme-file-ingest-section",
        "acme-file-ingest-page",
        "another-workflow",
    ):
        sfn.create_state_machine(
            name=machine, definition=definition, roleArn=f"arn:aws:iam::{MOTO_ACCOUNT}:role/sfn"
        )
    trust = json.dumps({"Version": "2012-10-17", "Statement": []})
    for i in range(7):  # acme's 7
        iam.create_role(RoleName=f"role-{i}", AssumeRolePolicyDocument=trust)
    for uploader in ("acme-uploader", "globex-uploader"):  # not this app's: the tenants' own, tagged
        iam.create_role(
            RoleName=uploader, AssumeRolePolicyDocument=trust, Tags=[{"Key": UPLOADER_TAG, "Value": "true"}]
        )
    landing = f"ordered-ingest-landing-{MOTO_ACCOUNT}-us-east-1"
    boto3.client("s3").create_bucket(Bucket=landing)
    boto3.client("s3").create_bucket(Bucket="another-bucket")
    s3control = boto3.client("s3control")
    s3control.create_access_point(AccountId=MOTO_ACCOUNT, Name="acme-uploads", Bucket=landing)
    s3control.create_access_point(
        AccountId=MOTO_ACCOUNT, Name="another-access-point", Bucket="another-bucket"
    )
    boto3.client("secretsmanager").create_secret(Name="core/token", SecretString=TOKEN)


def clients_with(
    *, concurrency: int, unreserved: int, rules_quota: float | None, stacks_quota: float = 2000.0
):
    """moto clients, except Lambda's account settings and Service Quotas (stubbed, in call order)."""
    lambda_ = boto3.client("lambda")
    lambda_stub = Stubber(lambda_)
    lambda_stub.add_response(
        "get_account_settings",
        {"AccountLimit": {"ConcurrentExecutions": concurrency, "UnreservedConcurrentExecutions": unreserved}},
    )
    quotas = boto3.client("service-quotas")
    quotas_stub = Stubber(quotas)
    rules_request = {"ServiceCode": "events", "QuotaCode": "L-244521F2"}
    if rules_quota is None:  # never raised: no applied value, AWS's default answers
        quotas_stub.add_client_error(
            "get_service_quota", "NoSuchResourceException", expected_params=rules_request
        )
        quotas_stub.add_response("get_aws_default_service_quota", {"Quota": {"Value": 300.0}}, rules_request)
    else:
        quotas_stub.add_response("get_service_quota", {"Quota": {"Value": rules_quota}}, rules_request)
    quotas_stub.add_response(
        "get_service_quota",
        {"Quota": {"Value": stacks_quota}},
        {"ServiceCode": "cloudformation", "QuotaCode": "L-0485CB21"},
    )
    lambda_stub.activate()
    quotas_stub.activate()
    stubbed = {"lambda": lambda_, "service-quotas": quotas}
    return (lambda service: stubbed.get(service) or boto3.client(service)), (lambda_stub, quotas_stub)


class Resolver:
    """A resolver that knows ``hosts`` (socket.gaierror for any other) and records each call."""

    def __init__(self, hosts=RESOLVABLE) -> None:
        self.hosts, self.calls = set(hosts), []

    def __call__(self, host: str):
        self.calls.append(host)
        if host not in self.hosts:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("192.0.2.10", 0))]


def run(argv: list[str], clients, resolve=None) -> tuple[int, str]:
    out = io.StringIO()
    return main(argv, clients=clients, out=out, resolve=resolve or Resolver()), out.getvalue()


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
    # both uploader roles are this account's and tagged, the bearer secret holds a token, the host resolves
    assert report["untagged_uploaders"] == [] and report["ready"] is True and report["exit_code"] == EXIT_OK
    assert (report["principals"], report["secrets"], report["sink_hosts"]) == ([], [], [])
    got = {
        q["field"]: (q["limit"], q["source"], q["in_use"], q["this_app"], q["need"], q["after_deploy"])
        for q in report["quotas"]
    }
    assert got == {
        "eventbridge_rules_per_bus": (300, "Service Quotas L-244521F2 (default)", 4, 3, 7, 8),
        "lambda_concurrent_executions": (1000, "Lambda account settings", 100, 1, 103, 202),
        "iam_roles": (1000, "IAM account summary", 9, 4, 12, 17),
        "cloudformation_stacks": (2000, "Service Quotas L-0485CB21 (applied)", 3, 2, 4, 5),
        "state_machines": (100000, "tenants.yaml (declared: not read from the account)", 4, 3, 9, 10),
        # acme's access point is deployed; globex's is new
        "s3_access_points": (10000, "tenants.yaml (declared: not read from the account)", 2, 1, 2, 3),
    }
    # 1,000 less the 100 reserved now, less acme's 1 (replaced), plus 3 controllers: 898 left unreserved
    assert [q.get("unreserved_after_deploy") for q in report["quotas"]] == [None, 898, None, None, None, None]
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
        "eventbridge_rules_per_bus": 0,
        "lambda_concurrent_executions": 0,
        "iam_roles": 0,
        "cloudformation_stacks": 0,
        "state_machines": 0,
        "s3_access_points": 0,
    }
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
        (
            "does not fit: EventBridge rules on the default bus: 8 after the deploy (4 in use, 3 of them this app's, "
            "+ need 7: 2 per tenant x 3 tenants + 1), limit 5; fix: shard the rules over event buses with "
            "routing.shards (docs/scaling.md, Sharded routing), "
            "or move tenants to another target (targets:, docs/scaling.md), or raise the quota and set "
            "account_limits.eventbridge_rules_per_bus"
        ),
        (
            "does not fit: Lambda concurrent executions: 1002 after the deploy (900 in use, 1 of them this app's, "
            "+ need 103: 1 reserved per tenant x 3 tenants + 100 Lambda keeps unreserved), limit 1000: 98 would stay "
            "unreserved, Lambda keeps at least 100; fix: raise the "
            "Lambda concurrent executions quota and set account_limits.lambda_concurrent_executions, or move tenants "
            "to another target (targets:, docs/scaling.md)"
        ),
    ]
    # and the table has one row per quota
    assert output.splitlines()[0] == (
        "preflight of the deployment (the account and Region cdk deploy uses): 3 tenants in the tenants file"
    )
    assert output.splitlines()[1].split() == [
        "quota",
        "limit",
        "source",
        "in",
        "use",
        "this",
        "app",
        "need",
        "after",
        "deploy",
        "fits",
    ]
    assert sum(1 for line in output.splitlines() if line.endswith(" NO")) == 2


def test_fails_when_the_credentials_are_not_the_targets_account(account, tmp_path, capsys):
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(
        THREE_TENANTS.replace(
            "defaults:\n",
            "targets:\n  prod: {account: '111111111111', region: us-east-1}\ndefaults:\n  target: prod\n",
        )
    )
    code, _ = run(["preflight", "--tenants", str(tenants_file)], lambda service: boto3.client(service))
    assert code == EXIT_USAGE
    assert capsys.readouterr().err.strip() == (
        f"ops: the credentials are for account {MOTO_ACCOUNT}, target 'prod' (111111111111/us-east-1) is account "
        "111111111111: use that account's credentials (AWS_PROFILE)"
    )


def test_preflight_checks_the_named_target_only(account, tmp_path):
    # GIVEN two targets; the credentials are those of 'here'
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(
        THREE_TENANTS.replace(
            "defaults:\n",
            textwrap.dedent(f"""\
        targets:
          here: {{account: '{MOTO_ACCOUNT}', region: us-east-1}}
          there: {{account: '111111111111', region: eu-west-1}}
        defaults:
          target: here
        """),
        ).replace("{id: initech, prefix: initech/}", "{id: initech, prefix: initech/, target: there}")
    )
    clients, _ = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
    code, output = run(["preflight", "--tenants", str(tenants_file), "--target", "here", "--json"], clients)
    report = json.loads(output)
    # THEN only 'here's two tenants are needed there
    assert code == EXIT_OK and report["target"] == "here" and report["tenants"] == 2
    assert {q["field"]: q["need"] for q in report["quotas"]}["eventbridge_rules_per_bus"] == 5


def test_fails_when_several_targets_are_declared_and_none_is_named(tmp_path, capsys):
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(
        THREE_TENANTS.replace(
            "defaults:\n",
            textwrap.dedent("""\
        targets:
          a: {account: '111111111111', region: us-east-1}
          b: {account: '222222222222', region: us-east-1}
        defaults:
          target: a
        """),
        ).replace("{id: initech, prefix: initech/}", "{id: initech, prefix: initech/, target: b}")
    )
    code, _ = run(["preflight", "--tenants", str(tenants_file)], lambda service: pytest.fail("no AWS call"))
    assert code == EXIT_USAGE
    assert capsys.readouterr().err.strip() == (
        "ops: the tenants file declares several targets: give --target (one of: a, b)"
    )


def test_preflight_reads_a_file_whose_declared_limits_synth_would_refuse(account, tmp_path):
    # GIVEN declared limits too small for the file: synth refuses it, preflight reads the real ones
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text("account_limits: {iam_roles: 1}\n" + THREE_TENANTS)
    clients, _ = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
    code, output = run(["preflight", "--tenants", str(tenants_file), "--json"], clients)
    assert code == EXIT_OK
    assert {q["field"]: q["limit"] for q in json.loads(output)["quotas"]}["iam_roles"] == 1000


def test_fails_when_the_access_points_in_the_region_leave_no_room_for_the_tenants_uploaders(
    account, tmp_path
):
    # GIVEN a quota of 2 access points (declared: Service Quotas has none to read), another
    # application's access point and acme's, and globex's still to come
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text("account_limits: {s3_access_points: 2}\n" + THREE_TENANTS)
    clients, _ = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
    # WHEN preflight runs
    code, output = run(["preflight", "--tenants", str(tenants_file)], clients)
    # THEN it does not fit, counting acme's deployed access point once
    assert code == EXIT_DOES_NOT_FIT
    assert [line for line in output.splitlines() if line.startswith("does not fit")] == [
        (
            "does not fit: S3 access points: 3 after the deploy (2 in use, 1 of them this app's, + need 2: 1 per tenant "
            "with uploaders x 2), limit 2; fix: raise the S3 access points quota and set account_limits.s3_access_points, "
            "or move tenants to another target (targets:, docs/scaling.md)"
        )
    ]


def test_fails_when_an_uploader_of_the_account_is_not_tagged_or_does_not_exist(account, tmp_path):
    # GIVEN acme's uploader role tagged, globex's untagged, and initech's uploaders: a role that
    # does not exist, a user without the tag, another account's role and another account's root
    iam = boto3.client("iam")
    iam.untag_role(RoleName="globex-uploader", TagKeys=[UPLOADER_TAG])
    iam.create_user(UserName="initech-sftp", Tags=[{"Key": "team", "Value": "initech"}])
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(
        THREE_TENANTS.replace(
            "{id: initech, prefix: initech/}",
            (
                "{id: initech, prefix: initech/, uploaders: ['arn:aws:iam::123456789012:role/initech-uploader', "
                "'arn:aws:iam::123456789012:user/sftp/initech-sftp', 'arn:aws:iam::222222222222:role/partner-uploader', "
                "'arn:aws:iam::222222222222:root']}"
            ),
        )
    )
    looked_up: list[tuple[str, str]] = []
    iam.meta.events.register(
        "before-parameter-build.iam",
        lambda params, model, **_: looked_up.append(
            (model.name, params.get("RoleName") or params.get("UserName"))
        ),
    )
    clients, _ = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
    # WHEN preflight runs
    code, output = run(
        ["preflight", "--tenants", str(tenants_file)],
        lambda service: iam if service == "iam" else clients(service),
    )
    # THEN every quota fits, yet it exits 10 with one line per uploader that is not ready
    assert code == EXIT_PRINCIPAL_NOT_READY
    assert "fits: every quota holds what the tenants file needs" in output.splitlines()
    assert [line for line in output.splitlines() if line.startswith(("uploader", "principal"))] == [
        (
            "uploader not tagged: tenant 'globex': arn:aws:iam::123456789012:role/globex-uploader has no tag "
            "ordered-ingest:uploader, so the landing bucket policy does not keep it to its access point; fix: "
            "aws iam tag-role --role-name globex-uploader --tags Key=ordered-ingest:uploader,Value=true"
        ),
        (
            "principal not found: tenant 'initech', uploaders: arn:aws:iam::123456789012:role/initech-uploader does "
            "not exist in this account (the deploy goes through, the policies name it in a condition, but nothing "
            "can upload as it); fix: create the role, then aws iam tag-role --role-name "
            "initech-uploader --tags Key=ordered-ingest:uploader,Value=true, or correct the ARN in the tenants file"
        ),
        (
            "uploader not tagged: tenant 'initech': arn:aws:iam::123456789012:user/sftp/initech-sftp has no tag "
            "ordered-ingest:uploader, so the landing bucket policy does not keep it to its access point; fix: "
            "aws iam tag-user --user-name initech-sftp --tags Key=ordered-ingest:uploader,Value=true"
        ),
    ]
    # and only this account's roles and users were looked up, by name (a path is not part of it)
    tag_lookups = [call for call in looked_up if call[0] in ("ListRoleTags", "ListUserTags")]
    assert tag_lookups == [
        ("ListRoleTags", "acme-uploader"),
        ("ListRoleTags", "globex-uploader"),
        ("ListRoleTags", "initech-uploader"),
        ("ListUserTags", "initech-sftp"),
    ]
    # the other account's principals are said, once, not to be looked up (not a finding)
    assert [line for line in output.splitlines() if line.startswith("not looked up")] == [
        "not looked up: principals of other accounts and account roots (this account's IAM cannot see them; make "
        "sure they exist before the deploy): arn:aws:iam::222222222222:role/partner-uploader, "
        "arn:aws:iam::222222222222:root"
    ]


def test_preflight_json_lists_the_uploaders_not_tagged(account, tmp_path):
    # GIVEN acme's uploader role without the tag
    boto3.client("iam").untag_role(RoleName="acme-uploader", TagKeys=[UPLOADER_TAG])
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(THREE_TENANTS)
    clients, _ = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
    # WHEN preflight runs with --json THEN the quotas fit, it exits 10 and lists it with its fix
    code, output = run(["preflight", "--tenants", str(tenants_file), "--json"], clients)
    report = json.loads(output)
    assert code == EXIT_PRINCIPAL_NOT_READY and report["fits"] is True and report["ready"] is False
    assert report["exit_code"] == EXIT_PRINCIPAL_NOT_READY
    fix = "aws iam tag-role --role-name acme-uploader --tags Key=ordered-ingest:uploader,Value=true"
    # in the shape `untagged_uploaders` always had, and in `principals` with its field and line
    assert report["untagged_uploaders"] == [
        {"tenant": "acme", "arn": "arn:aws:iam::123456789012:role/acme-uploader", "exists": True, "fix": fix}
    ]
    assert [(p["tenant"], p["field"], p["exists"], p["fix"]) for p in report["principals"]] == [
        ("acme", "uploaders", True, fix)
    ]
    assert report["principals"][0]["line"].startswith("uploader not tagged: tenant 'acme': ")


COMPLETING = textwrap.dedent(
    """
    defaults:
      sink: {url: https://core.example.com/records, auth: {type: bearer, secret: core/token}}
    tenants:
      - id: acme
        prefix: acme/
        completion:
          wait: true
          callers: ['arn:aws:iam::123456789012:role/core-confirmer', 'arn:aws:iam::123456789012:role/core-missing',
                    'arn:aws:iam::333333333333:role/partner-core']
      - id: globex
        prefix: globex/
        uploaders: ['arn:aws:iam::123456789012:role/globex-uploader']
        completion: {wait: false, callers: ['arn:aws:iam::123456789012:role/never-deployed']}
    """
)


def test_a_completion_caller_of_the_account_must_exist_and_another_accounts_is_not_looked_up(
    account, tmp_path
):
    # GIVEN acme waiting for completion with three callers: an existing role of the account, a
    # missing one and another account's; globex not waiting (its callers are in no policy)
    iam = boto3.client("iam")
    iam.create_role(
        RoleName="core-confirmer",
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
    )
    looked_up: list[str] = []
    iam.meta.events.register(
        "before-parameter-build.iam",
        lambda params, model, **_: (
            looked_up.append(params.get("RoleName") or params.get("UserName"))
            if model.name in ("ListRoleTags", "ListUserTags")
            else None
        ),
    )
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(COMPLETING)
    clients, _ = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
    # WHEN preflight runs
    code, output = run(
        ["preflight", "--tenants", str(tenants_file), "--json"],
        lambda service: iam if service == "iam" else clients(service),
    )
    report = json.loads(output)
    # THEN it exits 10 with one finding: the missing caller, its field named, no tag asked of a caller
    assert code == EXIT_PRINCIPAL_NOT_READY
    assert [p["line"] for p in report["principals"]] == [
        "principal not found: tenant 'acme', completion.callers: arn:aws:iam::123456789012:role/core-missing does "
        "not exist in this account (Lambda refuses a permission naming a principal that does not exist: the deploy "
        "would fail); fix: create the role before the deploy, or correct the ARN in the tenants file"
    ]
    assert report["untagged_uploaders"] == []
    # only the account's own principals of deployed policies were looked up; the other account's is listed
    assert looked_up == ["core-confirmer", "core-missing", "globex-uploader"]
    assert report["principals_not_looked_up"] == ["arn:aws:iam::333333333333:role/partner-core"]


def test_unreserved_lambda_concurrency_must_stay_at_least_100_after_the_deploy(account, tmp_path):
    # GIVEN 1,000 concurrent executions, acme's controller deployed (1 reserved, counted once), and
    # 102 unreserved: the 3 controllers leave exactly 100 unreserved; with 101, only 99
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(THREE_TENANTS)
    outcomes = {}
    for unreserved in (102, 101):
        clients, _ = clients_with(concurrency=1000, unreserved=unreserved, rules_quota=None)
        # WHEN preflight runs
        outcomes[unreserved] = run(["preflight", "--tenants", str(tenants_file)], clients)
    # THEN 100 left unreserved fits, 99 does not: exit 8, the line naming the figures and the fix
    assert outcomes[102][0] == EXIT_OK
    code, output = outcomes[101]
    assert code == EXIT_DOES_NOT_FIT
    assert [line for line in output.splitlines() if line.startswith("does not fit")] == [
        "does not fit: Lambda concurrent executions: 1001 after the deploy (899 in use, 1 of them this app's, + need "
        "103: 1 reserved per tenant x 3 tenants + 100 Lambda keeps unreserved), limit 1000: 99 would stay "
        "unreserved, Lambda keeps at least 100; fix: raise the Lambda concurrent executions quota and set "
        "account_limits.lambda_concurrent_executions, or move tenants to another target (targets:, docs/scaling.md)"
    ]


@pytest.mark.parametrize(
    "value", [TOKEN, json.dumps({"token": TOKEN, "user": "core"})], ids=["plain", "json"]
)
def test_a_bearer_secret_holding_a_token_passes(account, tmp_path, value):
    # GIVEN the secret holding the token itself, or JSON with a text `token`
    boto3.client("secretsmanager").put_secret_value(SecretId="core/token", SecretString=value)
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(THREE_TENANTS)
    clients, _ = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
    # WHEN preflight runs THEN it is ready, no secret finding
    code, output = run(["preflight", "--tenants", str(tenants_file), "--json"], clients)
    assert code == EXIT_OK and json.loads(output)["secrets"] == []


def test_a_missing_bearer_secret_is_one_line_with_the_command_that_creates_it(account, tmp_path):
    # GIVEN the three tenants' secret deleted outright, and initech's own secret given by an ARN
    # that does not exist
    boto3.client("secretsmanager").delete_secret(SecretId="core/token", ForceDeleteWithoutRecovery=True)
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:core/initech-AbCdEf"
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(
        THREE_TENANTS.replace(
            "{id: initech, prefix: initech/}",
            f"{{id: initech, prefix: initech/, sink: {{auth: {{type: bearer, secret: '{arn}'}}}}}}",
        )
    )
    clients, _ = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
    # WHEN preflight runs
    code, output = run(["preflight", "--tenants", str(tenants_file)], clients)
    # THEN it exits 11 with one line per secret naming its tenants and the create-secret command
    assert code == EXIT_SECRET_NOT_READY
    assert [line for line in output.splitlines() if line.startswith("bearer secret")] == [
        "bearer secret not ready: tenants 'acme', 'globex': secret 'core/token' does not exist in us-east-1; fix: "
        "aws secretsmanager create-secret --name core/token --secret-string '<token>' --region us-east-1",
        f"bearer secret not ready: tenant 'initech': secret '{arn}' does not exist in us-east-1; fix: aws "
        "secretsmanager create-secret --name core/initech --secret-string '<token>' --region us-east-1, then put "
        "the ARN it prints in the tenant's sink.auth.secret (or check the Region and account of the ARN)",
    ]


SECRET_VALUE = "s3cr3t-DO-NOT-PRINT-41"


@pytest.mark.parametrize(
    ("value", "what", "fix"),
    [
        (
            json.dumps({"user": SECRET_VALUE}),
            "the core system's token secret 'core/token' is JSON without a text field 'token'; store the token itself "
            'or {"token": "..."}',
            "put",
        ),
        (
            json.dumps({"token": 41, "password": SECRET_VALUE}),
            "the core system's token secret 'core/token' is JSON without a text field 'token'; store the token itself "
            'or {"token": "..."}',
            "put",
        ),
        (
            json.dumps({"token": "  ", "password": SECRET_VALUE}),
            "the core system's token secret 'core/token' is empty",
            "put",
        ),
        ("   ", "the core system's token secret 'core/token' is empty", "put"),
        (None, "secret 'core/token' has no current value (no version labelled AWSCURRENT)", "put"),
        (
            "deleted",
            "secret 'core/token' is scheduled for deletion",
            "aws secretsmanager restore-secret --secret-id core/token --region us-east-1",
        ),
    ],
    ids=[
        "json-without-token",
        "json-token-not-text",
        "json-empty-token",
        "blank",
        "no-current-value",
        "deleted",
    ],
)
def test_a_bearer_secret_without_a_token_is_named_and_its_value_never_shown(
    account, tmp_path, capsys, value, what, fix
):
    # GIVEN the tenants' secret holding no usable token
    secrets = boto3.client("secretsmanager")
    secrets.delete_secret(SecretId="core/token", ForceDeleteWithoutRecovery=True)
    if value is None:
        secrets.create_secret(Name="core/token")
    elif value == "deleted":
        secrets.create_secret(Name="core/token", SecretString=SECRET_VALUE)
        secrets.delete_secret(SecretId="core/token")
    else:
        secrets.create_secret(Name="core/token", SecretString=value)
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(THREE_TENANTS)
    if fix == "put":
        fix = "aws secretsmanager put-secret-value --secret-id core/token --secret-string '<token>' --region us-east-1"
    outputs = []
    for json_flag in ([], ["--json"]):
        clients, _ = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
        # WHEN preflight runs, as text and as JSON
        code, output = run(["preflight", "--tenants", str(tenants_file), *json_flag], clients)
        # THEN it exits 11 with one line naming the tenants, the secret, what is wrong and the fix
        assert code == EXIT_SECRET_NOT_READY
        outputs.append(output)
    line = f"bearer secret not ready: tenants 'acme', 'globex', 'initech': {what}; fix: {fix}"
    assert [x for x in outputs[0].splitlines() if x.startswith("bearer secret")] == [line]
    assert [(s["secret"], s["tenants"], s["line"]) for s in json.loads(outputs[1])["secrets"]] == [
        ("core/token", ["acme", "globex", "initech"], line)
    ]
    # and nothing printed holds the value, nor any part of it
    printed = "".join(outputs) + "".join(capsys.readouterr())
    for part in (SECRET_VALUE, SECRET_VALUE[:8], SECRET_VALUE[-8:]):
        assert part not in printed


def test_a_bearer_secret_these_credentials_may_not_read_is_named_with_the_permissions_needed(
    account, tmp_path
):
    # GIVEN Secrets Manager refusing the operator's credentials
    secrets = boto3.client("secretsmanager")
    stub = Stubber(secrets)
    stub.add_client_error(
        "describe_secret", "AccessDeniedException", expected_params={"SecretId": "core/token"}
    )
    stub.activate()
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(THREE_TENANTS)
    clients, _ = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
    # WHEN preflight runs
    code, output = run(
        ["preflight", "--tenants", str(tenants_file)],
        lambda service: secrets if service == "secretsmanager" else clients(service),
    )
    # THEN it exits 11, the line says what preflight needs to read it
    assert code == EXIT_SECRET_NOT_READY
    assert [line for line in output.splitlines() if line.startswith("bearer secret")] == [
        "bearer secret not ready: tenants 'acme', 'globex', 'initech': secret 'core/token' cannot be described with "
        "these credentials (AccessDeniedException); fix: run preflight with credentials allowed "
        "secretsmanager:DescribeSecret and secretsmanager:GetSecretValue on core/token (and kms:Decrypt on its key)"
    ]


HOSTS = textwrap.dedent(
    """
    defaults:
      sink: {url: https://core.example.com/records, auth: {type: bearer, secret: core/token}}
    tenants:
      - {id: acme, prefix: acme/, sink: {url: 'https://CORE.typo.example/records'}}
      - {id: globex, prefix: globex/, sink: {url: 'https://core.typo.example:8443/other'}}
      - {id: initech, prefix: initech/}
      - {id: hooli, prefix: hooli/, sink: {url: 'https://10.0.0.12/records'}}
      - id: vandelay
        prefix: vandelay/
        sink: {url: 'https://core.internal.example/records'}
        network: {vpc_id: vpc-0123abcd, subnet_ids: [subnet-0123abcd], security_group_ids: [sg-0123abcd]}
    """
)


def test_a_sink_host_that_does_not_resolve_is_named_once_with_its_tenants(account, tmp_path):
    # GIVEN acme and globex posting to a host that does not resolve, initech to one that does,
    # hooli to an IP address and vandelay inside a VPC
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(HOSTS)
    clients, _ = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
    resolver = Resolver()
    # WHEN preflight runs
    code, output = run(["preflight", "--tenants", str(tenants_file)], clients, resolver)
    # THEN it exits 12 with one line for the host, naming both tenants and the fix
    assert code == EXIT_HOST_DOES_NOT_RESOLVE
    assert [line for line in output.splitlines() if line.startswith("sink host")] == [
        "sink host does not resolve: tenants 'acme', 'globex': core.typo.example (Name or service not known); fix: "
        "correct the host in the tenant's sink.url, or publish its DNS record before the first file (the register "
        "function posts every record to it)"
    ]
    # each public host resolved once; the IP literal and the VPC sink not at all, which is said once
    assert resolver.calls == ["core.typo.example", "core.example.com"]
    assert [line for line in output.splitlines() if line.startswith("not resolved")] == [
        "not resolved: the sink hosts of tenant 'vandelay' with network (a VPC sink may have a private DNS name)"
    ]


def test_a_sink_host_that_resolves_passes(account, tmp_path):
    # GIVEN every tenant's host resolving
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(HOSTS)
    clients, _ = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
    resolver = Resolver({"core.example.com", "core.typo.example"})
    # WHEN preflight runs THEN it is ready; the JSON says which tenants' hosts were not resolved
    code, output = run(["preflight", "--tenants", str(tenants_file), "--json"], clients, resolver)
    report = json.loads(output)
    assert (
        code == EXIT_OK and report["sink_hosts"] == [] and report["sink_hosts_not_resolved"] == ["vandelay"]
    )


def test_every_finding_is_printed_and_the_lowest_exit_code_wins(account, tmp_path):
    # GIVEN a quota that does not fit, an untagged uploader, a missing secret and a host that
    # does not resolve
    boto3.client("iam").untag_role(RoleName="acme-uploader", TagKeys=[UPLOADER_TAG])
    boto3.client("secretsmanager").delete_secret(SecretId="core/token", ForceDeleteWithoutRecovery=True)
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(THREE_TENANTS)
    clients, _ = clients_with(concurrency=1000, unreserved=100, rules_quota=None)
    # WHEN preflight runs
    code, output = run(["preflight", "--tenants", str(tenants_file)], clients, Resolver(set()))
    # THEN it exits 8 (the quota's, the lowest) and prints a line of each kind
    assert code == EXIT_DOES_NOT_FIT
    starts = ("does not fit", "uploader not tagged", "bearer secret not ready", "sink host does not resolve")
    assert [line.split(":")[0] for line in output.splitlines() if line.startswith(starts)] == list(starts)
    # and without the quota's finding, the principal's 10 wins over the secret's 11 and the host's 12
    clients, _ = clients_with(concurrency=1000, unreserved=900, rules_quota=None)
    assert (
        run(["preflight", "--tenants", str(tenants_file)], clients, Resolver(set()))[0]
        == EXIT_PRINCIPAL_NOT_READY
    )


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """No AWS credentials anywhere boto3 looks (environment, empty shared files, no instance metadata)."""
    import os

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    empty = tmp_path / "empty"
    empty.write_text("")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return monkeypatch


NO_CREDENTIALS_LINE = (
    "ops: no AWS credentials: set AWS_PROFILE (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) and AWS_DEFAULT_REGION "
    "for the deployment's account (preflight: the target's)"
)


@pytest.mark.parametrize(
    "command", [["preflight", "--tenants", "TENANTS"], ["status"]], ids=["preflight", "status"]
)
def test_without_credentials_one_line_says_what_to_set(no_credentials, tmp_path, capsys, command):
    # GIVEN no credentials (a Region set)
    no_credentials.setenv("AWS_DEFAULT_REGION", "us-east-1")
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text(THREE_TENANTS)
    argv = [str(tenants_file) if arg == "TENANTS" else arg for arg in command]
    # WHEN the command runs with the real boto3 clients
    code = main(argv, out=io.StringIO(), resolve=lambda host: pytest.fail("no host is resolved"))
    # THEN one line says what to set, no traceback, exit 13
    captured = capsys.readouterr()
    assert code == EXIT_NO_CREDENTIALS
    assert captured.err.splitlines() == [NO_CREDENTIALS_LINE] and captured.out == ""


def test_without_a_region_or_with_half_the_credentials_one_line_says_what_to_set(no_credentials, capsys):
    # GIVEN credentials but no Region (AWS_REGION is not boto3's) WHEN status runs THEN exit 13 and one line
    no_credentials.setenv("AWS_REGION", "us-east-1")
    no_credentials.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    no_credentials.setenv("AWS_SECRET_ACCESS_KEY", "example")
    assert main(["status"], out=io.StringIO()) == EXIT_NO_CREDENTIALS
    assert capsys.readouterr().err.splitlines() == [
        "ops: no AWS Region: set AWS_DEFAULT_REGION or give --region (preflight: or the target's region in the "
        "tenants file)"
    ]
    # GIVEN a key id without its secret key WHEN status runs THEN exit 13, the line says what is missing
    no_credentials.delenv("AWS_SECRET_ACCESS_KEY")
    assert main(["--region", "us-east-1", "status"], out=io.StringIO()) == EXIT_NO_CREDENTIALS
    assert capsys.readouterr().err.splitlines() == [
        "ops: incomplete AWS credentials (Partial credentials found in env, missing: AWS_SECRET_ACCESS_KEY): set "
        "AWS_PROFILE (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) and AWS_DEFAULT_REGION for the deployment's "
        "account (preflight: the target's)"
    ]
