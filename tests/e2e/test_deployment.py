"""The deployment on moto holds what the templates declare (moto's CloudFormation plus the
runtime's pre-transform and post-steps), and the functions log in Lambda's JSON format; tenants
with options that change their stack's shape (a private network, uploaders) deploy and run."""

from __future__ import annotations

import json

import pytest

from lambdas import contract
from local_runtime import LocalPipeline
from tests.e2e.pipeline_checks import E2E_TIME_SCALE, assert_records_in_file_order, csv_file, wait_for

NETWORK = {
    "vpc_id": "vpc-0123456789abcdef0",
    "subnet_ids": ["subnet-0123456789abcdef0"],
    "security_group_ids": ["sg-0123456789abcdef0"],
}


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline(
        [
            {"id": "acme"},
            {"id": "private", "network": NETWORK},
            {"id": "loaded", "uploaders": ["arn:aws:iam::222222222222:role/loaded-uploader"]},
        ],
        chunk_size=3,
    )


def test_queue_rule_and_bucket_are_as_declared(pipe: LocalPipeline) -> None:
    """GIVEN the deployed tenant stack
    THEN its queue is FIFO with content-based deduplication and the scaled visibility timeout,
    its rule sends the landing bucket's events to that queue with the tenant as message
    group, and the landing bucket is versioned (that it sends its events to EventBridge is
    shown by the last test: moto 5.2.5's GetBucketNotificationConfiguration omits it)."""
    acme = pipe.tenants["acme"]
    attributes = pipe.client("sqs").get_queue_attributes(QueueUrl=acme.queue_url, AttributeNames=["All"])[
        "Attributes"
    ]
    assert (attributes["FifoQueue"], attributes["ContentBasedDeduplication"]) == ("true", "true")
    assert attributes["VisibilityTimeout"] == "1"  # 30 s x 0.03, rounded up

    events = pipe.client("events")
    (rule,) = events.list_rule_names_by_target(TargetArn=acme.queue_arn)["RuleNames"]
    (target,) = events.list_targets_by_rule(Rule=rule)["Targets"]
    assert target["SqsParameters"] == {"MessageGroupId": "acme"}
    pattern = json.loads(events.describe_rule(Name=rule)["EventPattern"])
    assert pattern["detail"]["object"]["key"] == [{"prefix": acme.prefix}]

    assert pipe.client("s3").get_bucket_versioning(Bucket=acme.bucket)["Status"] == "Enabled"


def test_functions_and_workflow_are_as_declared(pipe: LocalPipeline) -> None:
    """GIVEN the deployed functions and state machine
    THEN the controller has reserved concurrency 1 and its template environment with the
    cross-stack values resolved, timeouts are scaled, the register function points at the
    local sink (the one override, listed), and the definition names the deployed functions."""
    acme = pipe.tenants["acme"]
    lambda_ = pipe.client("lambda")
    controller = lambda_.get_function(FunctionName=acme.controller)
    assert controller["Concurrency"]["ReservedConcurrentExecutions"] == 1
    variables = controller["Configuration"]["Environment"]["Variables"]
    # files start through the workflow's `live` alias (docs/operations.md, "Versions, aliases and rollback")
    assert variables[contract.env_name("state_machine_arn")] == f"{acme.state_machine_arn}:live"
    assert (
        variables[contract.env_name("ledger_table_name")]
        in pipe.client("dynamodb").list_tables()["TableNames"]
    )
    assert controller["Configuration"]["Timeout"] == 1  # 20 s x 0.03, rounded up

    register = lambda_.get_function_configuration(FunctionName=acme.functions["register"])
    assert register["Environment"]["Variables"][contract.env_name("sink_url")] == pipe.sink("acme").url
    (override,) = [o for o in pipe.deployment.overrides if o.startswith(f"{acme.stack}/")]
    assert contract.env_name("sink_url") in override and pipe.sink("acme").url in override
    assert len(pipe.deployment.overrides) == len(pipe.tenants)  # one per tenant: its sink URL

    definition = json.loads(
        pipe.client("stepfunctions").describe_state_machine(stateMachineArn=acme.state_machine_arn)[
            "definition"
        ]
    )
    split_arn = lambda_.get_function_configuration(FunctionName=acme.functions["split"])["FunctionArn"]
    assert definition["States"]["Split"]["Parameters"]["FunctionName"] == split_arn
    assert definition["States"]["PagesInOrder"]["MaxConcurrency"] == 1


def test_what_moto_cannot_create_is_listed_and_topics_are_captured(pipe: LocalPipeline) -> None:
    """GIVEN the deployment THEN alarms, metric filters and resource policies are listed as not
    created, and every SNS topic of the app exists (the notifications are captured from it)."""
    not_created = {kind for stack in pipe.deployment.stacks.values() for _, kind in stack.not_created}
    assert {"AWS::CloudWatch::Alarm", "AWS::Logs::MetricFilter", "AWS::SQS::QueuePolicy"} <= not_created
    topics = {t["TopicArn"] for t in pipe.client("sns").list_topics()["Topics"]}
    assert set(pipe.deployment.physical_ids("AWS::SNS::Topic")) <= topics
    assert pipe.time_scale == E2E_TIME_SCALE


def test_functions_log_in_lambdas_json_format(pipe: LocalPipeline) -> None:
    """GIVEN a file uploaded to the landing bucket
    WHEN it is processed (through the bucket's EventBridge notification, the rule, the queue)
    THEN every line of the controller's log is one JSON object, its own lines with level,
    message, logger, the request id and their extra fields, as the Lambda runtime writes them."""
    key, _ = pipe.put_file("acme", "logged.csv", csv_file("logged", 4))
    pipe.wait_until_idle(timeout=60)
    assert [(e["key"], e["status"]) for e in pipe.executions("acme")] == [(key, "SUCCEEDED")]

    lines = [
        json.loads(line) for line in pipe.logs(pipe.tenants["acme"].controller).splitlines() if line.strip()
    ]
    handler_lines = [line for line in lines if str(line.get("logger", "")).startswith("ingest.")]
    assert handler_lines, "the controller logged nothing of its own"
    for line in handler_lines:
        assert {"timestamp", "level", "message", "logger", "requestId", "tenant"} <= set(line)
        assert line["tenant"] == "acme" and line["requestId"]


def test_a_tenant_on_a_private_network_deploys_and_runs_locally(pipe: LocalPipeline) -> None:
    """GIVEN a tenant with `network` (moto keeps the VpcConfig and attaches nothing) WHEN a file
    arrives THEN its register function, deployed with the tenant's subnets, delivers it."""
    register = pipe.tenants["private"].functions["register"]
    config = pipe.client("lambda").get_function_configuration(FunctionName=register)
    assert config["VpcConfig"]["SubnetIds"] == NETWORK["subnet_ids"]
    pipe.put_file("private", "d.csv", csv_file("d", 3))
    pipe.wait_until_idle(timeout=120, tenants=["private"])
    assert_records_in_file_order(pipe.sink("private").accepted, [("d", 3)])


def test_a_tenant_with_uploaders_deploys_and_runs_locally(pipe: LocalPipeline) -> None:
    """GIVEN a tenant with an uploader (its stack holds an access point, which moto's
    CloudFormation cannot create and which is listed as not created; tests/test_uploaders.py
    asserts its policy on the template) WHEN a file arrives in the landing bucket THEN it is
    delivered in order."""
    not_created = {kind for _, kind in pipe.deployment.stacks[pipe.tenants["loaded"].stack].not_created}
    assert "AWS::S3::AccessPoint" in not_created
    pipe.put_file("loaded", "u.csv", csv_file("u", 4))
    pipe.wait_until_idle(timeout=120, tenants=["loaded"])
    assert_records_in_file_order(pipe.sink("loaded").accepted, [("u", 4)])
