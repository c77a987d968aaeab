"""The cloud test's AWS-only parts, offline: the stand-in's stack (template, cdk-nag, cfn-lint),
its recorder on moto (the core system's contract, as the scenario reads it back), the
preflight's refusals, and the teardown on moto with a fake set of stacks. The scenario itself
runs on the local runtime: tests/e2e/test_cloud_scenario.py."""

from __future__ import annotations

import json
from datetime import UTC
from pathlib import Path

import boto3
import pytest
from aws_cdk.assertions import Match, Template
from moto import mock_aws

from cloudtest import runs, standin, targets, teardown
from cloudtest.standin_function import recorder
from lambdas import contract
from pipeline_constructs import names
from pipeline_constructs.application import new_app
from tests.conftest import cfn_lint_findings

REGION = "eu-west-1"


# -- the stand-in's stack ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def standin_stack(tmp_path_factory: pytest.TempPathFactory):
    outdir = tmp_path_factory.mktemp("standin")
    app, stack = standin.build("r1a2b3", new_app(outdir=str(outdir)))
    assembly = app.synth()  # cdk-nag runs: an unacknowledged finding raises ValidationFailed
    return stack, assembly.get_stack_by_name(stack.stack_name).template, outdir


def test_the_stand_in_is_an_iam_authorized_function_url_recording_into_its_own_table(standin_stack) -> None:
    stack, template, _ = standin_stack
    t = Template.from_json(template)
    assert stack.stack_name == "OrderedIngestCloudTest-r1a2b3-CoreStandIn"
    t.has_resource_properties("AWS::Lambda::Url", {"AuthType": "AWS_IAM"})
    t.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "FunctionName": runs.standin_function_name("r1a2b3"),
            "Handler": "recorder.handler",
            "Environment": {"Variables": {"TABLE_NAME": Match.any_value()}},
        },
    )
    # throwaway: nothing of it outlives the stack
    for logical_id, resource in template["Resources"].items():
        assert resource.get("DeletionPolicy", "Delete") == "Delete", logical_id
    assert {o for o in template["Outputs"]} >= {"FunctionUrl", "FunctionArn", "TableName"}
    # the run's tag, which teardown selects stacks by
    assert {"Key": runs.RUN_TAG, "Value": "r1a2b3"} in t.find_resources("AWS::Lambda::Function").popitem()[1][
        "Properties"
    ]["Tags"]


def test_the_stand_in_stack_is_cdk_nag_clean_and_cfn_lint_clean(standin_stack) -> None:
    _, template, outdir = standin_stack
    report = json.loads((outdir / "validation-report.json").read_text())
    assert all(r["conclusion"] == "success" and r["violations"] == [] for r in report["pluginReports"])
    # one Region with function URLs (cfn-lint's default Region); W3005: CDK's redundant DependsOn
    assert cfn_lint_findings(template, regions=(REGION,)) == []


# -- the recorder, on moto --------------------------------------------------------------------


def _url_event(tenant: str, key: str, record: dict[str, str]) -> dict:
    return {
        "requestContext": {"http": {"method": "POST"}},
        "headers": {"x-tenant-id": tenant, "idempotency-key": key},
        "body": json.dumps(record),
        "isBase64Encoded": False,
    }


class _Context:
    def __init__(self, n: int) -> None:
        self.aws_request_id = f"req-{n:04d}"


@mock_aws
def test_the_recorder_keeps_the_contract_and_the_scenario_reads_it_back_in_order(monkeypatch) -> None:
    """GIVEN the stand-in's table and a reject rule for one record WHEN the register function's
    requests arrive (a refusal, its retry after the rule is gone, a resend of a registered key)
    THEN the answers are the contract's and `AwsCore` reads them back in arrival order."""
    ddb = boto3.resource("dynamodb", region_name=REGION)
    table = ddb.create_table(
        TableName="standin",
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
    )
    monkeypatch.setattr(recorder, "_table", table)
    core = targets.AwsCore(table)
    core.reject("acme", {"file": "f", "seq": "1"})
    calls = [("k0", {"file": "f", "seq": "0"}), ("k1", {"file": "f", "seq": "1"})]
    answers = [
        recorder.handler(_url_event("acme", k, r), _Context(n))["statusCode"]
        for n, (k, r) in enumerate(calls)
    ]
    core.accept_all("acme")
    answers += [
        recorder.handler(_url_event("acme", "k1", calls[1][1]), _Context(2))["statusCode"],
        recorder.handler(_url_event("acme", "k0", calls[0][1]), _Context(3))["statusCode"],
    ]

    assert answers == [201, 400, 201, 200]
    received = core.received("acme")
    assert [(r.idempotency_key, r.status, r.registered) for r in received] == [
        ("k0", 201, True),
        ("k1", 400, False),
        ("k1", 201, True),
        ("k0", 200, False),
    ]
    assert [r.body for r in received if r.registered] == [calls[0][1], calls[1][1]]
    assert core.received("other") == []
    bad = {"requestContext": {"http": {"method": "POST"}}, "headers": {}, "body": "{}"}
    assert recorder.handler(bad, _Context(4))["statusCode"] == 400


# -- preflight ----------------------------------------------------------------------------------


class _NoCredentials:
    region_name = REGION

    def get_credentials(self):
        return None


def test_fails_when_there_are_no_credentials_with_one_line(tmp_path: Path) -> None:
    target = targets.AwsTarget(_NoCredentials(), "r1", tmp_path)
    with pytest.raises(targets.Refused) as refused:
        target.preflight()
    assert str(refused.value).startswith("no AWS credentials: set AWS_PROFILE")
    assert "\n" not in str(refused.value)


def test_fails_when_there_is_no_region_with_one_line(tmp_path: Path) -> None:
    session = _NoCredentials()
    session.region_name = None
    with pytest.raises(targets.Refused, match="^no AWS Region: set AWS_REGION"):
        targets.AwsTarget(session, "r1", tmp_path).preflight()


@mock_aws
def test_fails_when_the_account_and_region_are_not_bootstrapped(tmp_path: Path) -> None:
    session = boto3.Session(region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y")
    target = targets.AwsTarget(session, "r1", tmp_path)
    with pytest.raises(
        targets.Refused,
        match=r"is not bootstrapped for the CDK: run `cdk bootstrap aws://123456789012/eu-west-1`",
    ):
        target.preflight()


# -- teardown, on moto ------------------------------------------------------------------------


def _stack(cfn, name: str, run_id: str, resources: dict) -> None:
    cfn.create_stack(
        StackName=name,
        TemplateBody=json.dumps({"Resources": resources}),
        Tags=[{"Key": runs.RUN_TAG, "Value": run_id}],
    )


def _retained(kind: str, **properties) -> dict:
    return {
        "Type": kind,
        "DeletionPolicy": "Retain",
        "UpdateReplacePolicy": "Retain",
        "Properties": properties,
    }


@mock_aws
def test_teardown_deletes_the_runs_stacks_and_what_they_retain_and_nothing_else(tmp_path: Path) -> None:
    """GIVEN the stacks of run r1, named with its qualifier (a shared one with a versioned bucket
    holding files, a table with deletion protection, a log group and a key, all retained; a
    tenant stack), a log group Lambda made for one of r1's functions, a stack of another run and
    the app as shipped, deployed beside them WHEN teardown runs THEN r1's stacks and retained
    resources are gone, the others are untouched, and no state file is left."""
    session = boto3.Session(region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y")
    cfn, s3 = session.client("cloudformation"), session.client("s3")
    with contract.qualified(runs.qualifier("r1")):
        shared, tenant = names.shared_stack_name(), names.TENANT_STACK.render("ct-r1-a")
    assert (shared, tenant) == ("ctr1-OrderedIngest-Shared", "ctr1-OrderedIngest-Tenant-ct-r1-a")
    cfn.create_stack(
        StackName=names.shared_stack_name(),
        TemplateBody=json.dumps(
            {"Resources": {"Logs": _retained("AWS::Logs::LogGroup", LogGroupName="/aws/lambda/acme-split")}}
        ),
    )
    session.client("logs").create_log_group(logGroupName="/aws/lambda/ctr1-ct-r1-b-controller")
    _stack(
        cfn,
        shared,
        "r1",
        {
            "Landing": _retained(
                "AWS::S3::Bucket", BucketName="landing-r1", VersioningConfiguration={"Status": "Enabled"}
            ),
            "Ledger": _retained(
                "AWS::DynamoDB::Table",
                TableName="ledger-r1",
                BillingMode="PAY_PER_REQUEST",
                DeletionProtectionEnabled=True,
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            ),
            "Key": _retained(
                "AWS::KMS::Key", KeyPolicy=json.dumps({"Version": "2012-10-17", "Statement": []})
            ),
        },
    )
    _stack(
        cfn,
        tenant,
        "r1",
        {
            "Logs": _retained("AWS::Logs::LogGroup", LogGroupName="/aws/lambda/ctr1-ct-r1-a-split"),
            "Queue": {"Type": "AWS::SQS::Queue"},
        },
    )
    _stack(
        cfn,
        "OrderedIngestCloudTest-r2-CoreStandIn",
        "r2",
        {
            "Logs": _retained("AWS::Logs::LogGroup", LogGroupName="/other-run"),
        },
    )
    for n in range(3):
        s3.put_object(Bucket="landing-r1", Key="acme/f.csv", Body=f"v{n}".encode())
    s3.delete_object(Bucket="landing-r1", Key="acme/f.csv")  # a delete marker too
    key_id = next(
        r["PhysicalResourceId"]
        for r in cfn.list_stack_resources(StackName=shared)["StackResourceSummaries"]
        if r["ResourceType"] == "AWS::KMS::Key"
    )
    state = tmp_path / "r1.teardown.json"
    said: list[str] = []

    problems = teardown.Teardown(session.client, "r1", state, say=said.append, poll_seconds=0).run()

    assert problems == []
    left = {s["StackName"] for s in cfn.describe_stacks()["Stacks"] if s["StackStatus"] != "DELETE_COMPLETE"}
    assert left == {"OrderedIngestCloudTest-r2-CoreStandIn", "OrderedIngest-Shared"}
    assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == []
    assert session.client("dynamodb").list_tables()["TableNames"] == []
    groups = [g["logGroupName"] for g in session.client("logs").describe_log_groups()["logGroups"]]
    assert groups == ["/aws/lambda/acme-split", "/other-run"]
    assert session.client("kms").describe_key(KeyId=key_id)["KeyMetadata"]["KeyState"] == "PendingDeletion"
    # the tenant stack goes before the shared one
    deleting = [line for line in said if line.startswith("deleting stack")]
    assert deleting[-1] == f"deleting stack {shared}"
    assert not state.exists()


@mock_aws
def test_teardown_finds_the_runs_retained_buckets_and_log_groups_by_its_qualifier(tmp_path: Path) -> None:
    """GIVEN run r1's landing bucket (with a file) and log groups left after its stacks are gone,
    with no state file, and the app as shipped's bucket and log group WHEN teardown runs THEN
    r1's are gone, found by the qualifier `ctr1`, and the app's are untouched."""
    session = boto3.Session(region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y")
    s3, logs = session.client("s3"), session.client("logs")
    with contract.qualified(runs.qualifier("r1")):
        landing = names.landing_bucket_name("123456789012", REGION)
        unmatched = names.unmatched_uploads_log_group()
    plain = names.landing_bucket_name("123456789012", REGION)
    for bucket in (landing, plain):
        s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
        s3.put_object(Bucket=bucket, Key="a/f.csv", Body=b"x")
    for group in (
        unmatched,
        "/aws/lambda/ctr1-ct-r1-a-split",
        "/aws/vendedlogs/states/ctr1-ct-r1-a-file-ingest-page",
        names.unmatched_uploads_log_group(),
    ):
        logs.create_log_group(logGroupName=group)

    state = tmp_path / "state.json"
    assert teardown.Teardown(session.client, "r1", state, say=lambda _: None, poll_seconds=0).run() == []
    assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == [plain]
    groups = [g["logGroupName"] for g in logs.describe_log_groups()["logGroups"]]
    assert groups == ["/ordered-ingest/unmatched-uploads"]


@mock_aws
def test_teardown_finishes_from_its_state_file_after_the_stacks_are_gone(tmp_path: Path) -> None:
    """GIVEN a teardown interrupted after the stacks were deleted (its state file lists a bucket
    and a log group) WHEN it runs again THEN it deletes them, and a leftover already gone is
    no problem."""
    session = boto3.Session(region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y")
    session.client("s3").create_bucket(
        Bucket="work-r1", CreateBucketConfiguration={"LocationConstraint": REGION}
    )
    session.client("s3").put_object(Bucket="work-r1", Key="chunks/0", Body=b"x")
    state = tmp_path / "r1.teardown.json"
    state.write_text(
        json.dumps(
            {
                "run_id": "r1",
                "leftovers": [
                    {"type": "AWS::S3::Bucket", "physical_id": "work-r1"},
                    {"type": "AWS::Logs::LogGroup", "physical_id": "/aws/lambda/gone"},
                ],
            }
        )
    )

    assert teardown.Teardown(session.client, "r1", state, say=lambda _: None, poll_seconds=0).run() == []
    assert session.client("s3").list_buckets()["Buckets"] == []
    assert not state.exists()


def test_teardown_skips_a_resource_its_stack_failed_to_create() -> None:
    """A bucket whose name already existed fails to create: it is somebody else's, never deleted;
    a function's own log group (Lambda may create it) is the stack's."""
    paginator_result = [
        {
            "StackResourceSummaries": [
                {
                    "ResourceType": "AWS::S3::Bucket",
                    "PhysicalResourceId": "theirs",
                    "ResourceStatus": "CREATE_FAILED",
                    "LogicalResourceId": "B",
                },
                {
                    "ResourceType": "AWS::Lambda::Function",
                    "PhysicalResourceId": "fn",
                    "ResourceStatus": "CREATE_COMPLETE",
                    "LogicalResourceId": "F",
                },
            ]
        }
    ]

    class _Paginator:
        def paginate(self, **_):
            return paginator_result

    class _Cfn:
        def get_paginator(self, _):
            return _Paginator()

    assert teardown.leftovers_of(_Cfn(), "s") == {teardown.Leftover("AWS::Logs::LogGroup", "/aws/lambda/fn")}


# -- the AWS run's deploy and its clean-up, offline -------------------------------------------


def _bootstrapped_session():
    session = boto3.Session(region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y")
    session.client("ssm").put_parameter(Name="/cdk-bootstrap/hnb659fds/version", Value="30", Type="String")
    return session


@mock_aws
def test_the_aws_deploy_puts_the_stand_in_first_and_points_the_tagged_tenants_at_it(tmp_path: Path) -> None:
    """GIVEN a bootstrapped account (moto) where the app is deployed, and a CDK CLI that records its
    commands WHEN the AWS target deploys THEN the stand-in goes first, the tenants file qualifies
    every name with the run's qualifier, signs requests to the stand-in's URL and names exactly its
    function, and every cell is deployed with the run's tag."""
    from pipeline_constructs.config import load_config

    session = _bootstrapped_session()
    arn = f"arn:aws:lambda:{REGION}:123456789012:function:{runs.standin_function_name('r9')}"
    commands: list[list[str]] = []

    def cdk(argv: list[str], cwd: Path) -> int:
        commands.append(argv)
        outputs = Path(argv[argv.index("--outputs-file") + 1])
        outputs.write_text(
            json.dumps(
                {
                    runs.standin_stack_name("r9"): {
                        "FunctionUrl": "https://abc.lambda-url.eu-west-1.on.aws/",
                        "FunctionArn": arn,
                        "TableName": "t",
                    }
                }
            )
        )
        return 0

    def cells(argv) -> tuple[int, str]:
        commands.append(list(argv))
        return 0, ""

    # the app as shipped is deployed here: no obstacle, the run's names are qualified
    session.client("cloudformation").create_stack(
        StackName=names.shared_stack_name(),
        TemplateBody=json.dumps({"Resources": {"T": {"Type": "AWS::SNS::Topic"}}}),
    )
    target = targets.AwsTarget(session, "r9", tmp_path, say=lambda _: None, runner=cdk, cells_runner=cells)
    target.preflight()
    target.deploy()

    assert "-m cloudtest.standin" in commands[0][commands[0].index("--app") + 1]
    assert "run_id=r9" in commands[0]
    config = load_config(tmp_path / "tenants.yaml")
    assert [t.id for t in config.tenants] == ["ct-r9-a", "ct-r9-b"]
    assert config.qualifier == target.qualifier == "ctr9"
    for tenant in config.tenants:
        assert tenant.sink.url == "https://abc.lambda-url.eu-west-1.on.aws/"
        assert (tenant.sink.auth.type, tenant.sink.auth.service, tenant.sink.auth.invoke_arn) == (
            "sigv4",
            "lambda",
            arn,
        )
    deploys = [c for c in commands[1:] if c[1] == "deploy"]
    assert deploys and all(f"{runs.RUN_TAG}=r9" in c for c in deploys)
    assert target.core is not None and target.core.table.name == "t"


@mock_aws
def test_an_interrupted_aws_run_still_destroys_what_it_deployed(tmp_path: Path, monkeypatch) -> None:
    """GIVEN an AWS run whose deploy is interrupted (Ctrl-C) after one of its stacks was created
    WHEN the run ends THEN teardown deleted that stack and its retained bucket, and the exit
    code says the test did not pass."""
    from cloudtest import __main__ as cli

    session = _bootstrapped_session()
    monkeypatch.setattr(cli, "WORKDIR", tmp_path)
    monkeypatch.setattr(cli, "new_run_id", lambda: "r7")
    monkeypatch.setattr(teardown.Teardown, "__init__", _fast_teardown(teardown.Teardown.__init__))

    def deploy(self) -> None:
        _stack(
            session.client("cloudformation"),
            runs.standin_stack_name("r7"),
            "r7",
            {"B": _retained("AWS::S3::Bucket", BucketName="standin-r7")},
        )
        raise KeyboardInterrupt

    monkeypatch.setattr(targets.AwsTarget, "deploy", deploy)
    said: list[str] = []

    assert cli.run_on_aws(session, said.append) == cli.EXIT_FAILED
    assert "interrupted" in said
    assert [
        s["StackStatus"]
        for s in session.client("cloudformation").describe_stacks()["Stacks"]
        if s["StackName"] == runs.standin_stack_name("r7")
    ] in ([], ["DELETE_COMPLETE"])
    assert session.client("s3").list_buckets()["Buckets"] == []
    assert said[-1].startswith("run r7: everything it deployed is gone")


def _fast_teardown(init):
    def fast(self, *args, **kwargs):
        init(self, *args, **{**kwargs, "poll_seconds": 0})

    return fast


def test_the_cli_refuses_without_credentials_in_one_line(monkeypatch, capsys, tmp_path: Path) -> None:
    from cloudtest import __main__ as cli

    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_REGION", REGION)

    assert cli.main([]) == cli.EXIT_REFUSED
    err = capsys.readouterr().err
    assert err.startswith("cloud-test: no AWS credentials: set AWS_PROFILE") and err.count("\n") == 1


def test_the_deploy_shows_the_cdk_clis_output_as_it_comes_and_returns_its_exit_code(capfd) -> None:
    import sys

    code, output = targets.run_streaming([sys.executable, "-c", "print('deploying'); raise SystemExit(3)"])
    assert (code, output) == (3, "")
    assert capfd.readouterr().out == "deploying\n"


def test_the_pace_figures_are_measured_from_the_histories_and_the_arrival_times() -> None:
    """GIVEN two file executions: the first a Choice state 30 ms before its next state and one
    chunk iteration of 1.0 s whose requests arrived over 0.8 s, closing at t=10; the next
    file's first request at t=10.6 WHEN measured THEN a state takes 30 ms, a chunk's fixed cost
    0.2 s, and the close to the next first POST 0.6 s; a run without them measures nothing."""
    from datetime import datetime, timezone

    from cloudtest import pace_figures

    def at(seconds: float) -> datetime:
        return datetime.fromtimestamp(seconds, tz=UTC)

    first = [
        {"type": "ChoiceStateEntered", "timestamp": at(1.0)},
        {"type": "ChoiceStateExited", "timestamp": at(1.01)},
        {"type": "PassStateEntered", "timestamp": at(1.03)},
        {"type": "PassStateExited", "timestamp": at(1.04)},
        {"type": "MapStateEntered", "timestamp": at(1.05)},
        {"type": "MapIterationStarted", "timestamp": at(2.0)},
        {"type": "MapIterationSucceeded", "timestamp": at(3.0)},
    ]
    executions = [
        {"status": "SUCCEEDED", "stopDate": at(10.0)},
        {"status": "SUCCEEDED", "stopDate": at(12.0)},
    ]
    measured = pace_figures.measure(executions, [first, []], [2.05, 2.5, 2.85, 10.6, 10.7])
    assert measured.state_transition == pytest.approx(0.025)  # median of 0.03 and 0.02
    assert measured.chunk == pytest.approx(0.2)
    assert measured.close_to_next == pytest.approx(0.6)
    assert "a chunk's fixed cost 200 ms (model 142 ms)" in measured.line("t")
    nothing = pace_figures.measure([], [], [])
    assert (nothing.state_transition, nothing.chunk, nothing.close_to_next) == (None, None, None)
    assert nothing.line("t").count("not measured") == 3
