"""Canaries of the moto gaps that local_runtime/moto_server.py patches, one per gap, in the
order of the table "moto 5.2.5 patches" in local_runtime/README.md.

Each runs moto in-process (`mock_aws`) without the patches, on the smallest setup that shows
the gap, and asserts that the gap is still there. A failing canary means a newer moto closed
the gap itself: its message names the patch to delete, so that no patch outlives its reason.
"""

from __future__ import annotations

import datetime
import inspect
import io
import itertools
import json
import re
import sys
import time
import zipfile
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.conftest import ROOT, moto_executing_state_machines

pytestmark = (
    pytest.mark.slow
)  # moto's own behaviour, for moto upgrades: make test runs it, make test-fast does not

ACCOUNT, REGION = "123456789012", "us-east-1"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/canary"
PASS = {"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}


def closed(does: str, patch: str) -> str:
    return (
        f"moto now {does} itself: delete {patch} in local_runtime/moto_*_patches.py, its line in "
        "moto_server.py and its row in local_runtime/README.md"
    )


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto in-process, Step Functions executing their definitions, as the local runtime runs it."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with moto_executing_state_machines(REGION):
        yield


def run(definition: dict[str, Any], execution_input: Any = None, name: str = "m") -> dict[str, Any]:
    """One execution of `definition`, described once it has ended."""
    sfn = boto3.client("stepfunctions")
    arn = sfn.create_state_machine(name=name, definition=json.dumps(definition), roleArn=ROLE)[
        "stateMachineArn"
    ]
    execution = sfn.start_execution(stateMachineArn=arn, name="e", input=json.dumps(execution_input or {}))
    deadline = time.monotonic() + 10
    while (found := sfn.describe_execution(executionArn=execution["executionArn"]))["status"] == "RUNNING":
        assert time.monotonic() < deadline, "the execution did not end"
        time.sleep(0.005)
    return found


def queue_for_rule(name: str, pattern: dict[str, Any], bus: str = "default") -> str:
    """A queue that receives what a rule on `bus` matching `pattern` delivers."""
    sqs, events = boto3.client("sqs"), boto3.client("events")
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name=name, EventBusName=bus, EventPattern=json.dumps(pattern))
    events.put_targets(Rule=name, EventBusName=bus, Targets=[{"Id": "queue", "Arn": arn}])
    return url


def received(url: str) -> list[dict[str, Any]]:
    messages = boto3.client("sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(message["Body"]) for message in messages]


UPLOADS = {"source": ["aws.s3"], "detail-type": ["Object Created"]}


def s3_events(*keys: str) -> dict[str, list[dict[str, Any]]]:
    """The Object Created events of uploads of `keys` that a default-bus rule and a custom-bus
    rule receive, the bucket sending its events to EventBridge."""
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="landing")
    s3.put_bucket_notification_configuration(
        Bucket="landing", NotificationConfiguration={"EventBridgeConfiguration": {}}
    )
    boto3.client("events").create_event_bus(Name="custom")
    urls = {
        "default": queue_for_rule("on-default", UPLOADS),
        "custom": queue_for_rule("on-custom", UPLOADS, "custom"),
    }
    for key in keys:
        s3.put_object(Bucket="landing", Key=key, Body=b"x")
    return {bus: received(url) for bus, url in urls.items()}


def test_moto_runs_a_function_only_in_docker(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """GIVEN a Python function and no Docker daemon WHEN it is invoked THEN moto does not run its
    code: it answers with a function error about Docker (at once, not after a timeout)."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("handler.py", "def handler(event, context):\n    return {'ran': True}\n")
    role = boto3.client("iam").create_role(RoleName="canary", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    functions = boto3.client("lambda")
    functions.create_function(
        FunctionName="f",
        Runtime="python3.12",
        Role=role,
        Handler="handler.handler",
        Code={"ZipFile": code.getvalue()},
    )

    answer = functions.invoke(FunctionName="f", Payload=b"{}")

    payload = answer["Payload"].read().decode()
    assert answer.get("FunctionError") and "docker" in payload, (
        "moto now runs a function's code without Docker itself: _lambda_runs_local_workers stays (the "
        "workers give each function its own process, environment, timeout and kill), but correct its "
        f"row in local_runtime/README.md; moto answered {payload!r}"
    )


def test_moto_gives_every_s3_event_the_same_id(aws: None) -> None:
    """GIVEN two uploads THEN their two EventBridge events carry the same id."""
    events = s3_events("a.csv", "b.csv")["default"]

    assert len(events) == 2 and events[0]["id"] == events[1]["id"], closed(
        "gives each S3 event its own id", "_s3_events_get_fresh_ids"
    )


def test_moto_puts_the_raw_key_into_s3_events(aws: None) -> None:
    """GIVEN an upload of "in/red flower+1.csv" THEN its event names the key as it is, where S3
    writes "in/red+flower%2B1.csv"."""
    (event,) = s3_events("in/red flower+1.csv")["default"]

    assert event["detail"]["object"]["key"] == "in/red flower+1.csv", closed(
        "URL-encodes the key in S3 events", "_s3_event_keys_encoded"
    )


def test_moto_sleeps_a_retrys_whole_interval(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """GIVEN a state that fails twice under `Retry` (IntervalSeconds 7, BackoffRate 3) THEN moto's
    retrier asks `time.sleep` for 7 s and 21 s (a spy stands in for the sleep)."""
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

    slept: list[float] = []

    class Spy:
        def sleep(self, seconds: float) -> None:
            slept.append(seconds)

        def __getattr__(self, name: str) -> Any:
            return getattr(time, name)

    monkeypatch.setattr(retrier_decl, "time", Spy())
    retried = {
        "Type": "Parallel",
        "End": True,
        "Retry": [{"ErrorEquals": ["Boom"], "IntervalSeconds": 7, "MaxAttempts": 2, "BackoffRate": 3}],
        "Branches": [{"StartAt": "F", "States": {"F": {"Type": "Fail", "Error": "Boom"}}}],
    }

    found = run({"StartAt": "R", "States": {"R": retried}})

    assert found["error"] == "Boom"
    assert slept == [7, 21], closed("shortens or skips a Retry's sleeps", "_scaled_retry_sleeps")


def test_moto_creates_a_stacks_state_machine_where_the_api_does_not_look(aws: None) -> None:
    """GIVEN a stack with an AWS::StepFunctions::StateMachine WHEN it is created THEN the stack is
    complete, but the Step Functions API does not know the state machine."""
    template = {
        "Resources": {
            "Machine": {
                "Type": "AWS::StepFunctions::StateMachine",
                "Properties": {
                    "StateMachineName": "m",
                    "DefinitionString": json.dumps(PASS),
                    "RoleArn": ROLE,
                },
            }
        }
    }
    cloudformation = boto3.client("cloudformation")
    cloudformation.create_stack(StackName="s", TemplateBody=json.dumps(template))

    (resource,) = cloudformation.describe_stack_resources(StackName="s")["StackResources"]
    assert resource["PhysicalResourceId"] == f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:m"
    assert boto3.client("stepfunctions").list_state_machines()["stateMachines"] == [], closed(
        "creates a stack's state machine where Step Functions executes it",
        "_cfn_state_machines_in_the_executing_backend",
    )


def test_moto_has_no_cloudformation_model_for_versions_and_aliases() -> None:
    """THEN moto's CloudFormation knows neither AWS::StepFunctions::StateMachineVersion nor
    ::StateMachineAlias (it skips them: no version, no alias, no Ref)."""
    from moto.cloudformation import parsing

    types = set(parsing.get_model_map())

    assert "AWS::StepFunctions::StateMachine" in types
    assert not {"AWS::StepFunctions::StateMachineVersion", "AWS::StepFunctions::StateMachineAlias"} & types, (
        closed(
            "creates state machine versions and aliases from a template",
            "_cfn_state_machine_versions_and_aliases",
        )
    )


def test_moto_cannot_start_an_execution_through_an_alias_or_a_version(aws: None) -> None:
    """GIVEN a state machine with version 1 and an alias routing to it WHEN StartExecution names
    the alias, then the version THEN moto refuses the alias and fails on the version."""
    sfn = boto3.client("stepfunctions")
    machine = sfn.create_state_machine(name="m", definition=json.dumps(PASS), roleArn=ROLE, publish=True)[
        "stateMachineArn"
    ]
    alias = sfn.create_state_machine_alias(
        name="live", routingConfiguration=[{"stateMachineVersionArn": f"{machine}:1", "weight": 100}]
    )["stateMachineAliasArn"]

    refused = []
    for target in (alias, f"{machine}:1"):
        try:
            sfn.start_execution(stateMachineArn=target, name="e")
        except (ClientError, AttributeError) as error:
            refused.append(type(error).__name__)

    assert refused == ["StateMachineDoesNotExist", "AttributeError"], closed(
        "starts an execution through an alias or version ARN", "_sfn_starts_through_aliases_and_versions"
    )


def test_moto_passes_a_start_execution_tasks_parameter_names_to_boto3(aws: None) -> None:
    """GIVEN a `states:startExecution.sync:2` task with `StateMachineArn` and `Input` (the names
    Step Functions documents) THEN the task fails with moto's KeyError: boto3's members are
    `stateMachineArn` and `input`."""
    child = boto3.client("stepfunctions").create_state_machine(
        name="child", definition=json.dumps(PASS), roleArn=ROLE
    )["stateMachineArn"]
    task = {
        "Type": "Task",
        "Resource": "arn:aws:states:::states:startExecution.sync:2",
        "End": True,
        "Parameters": {"StateMachineArn": child, "Input": {"page": 1}},
    }

    found = run({"StartAt": "RunPage", "States": {"RunPage": task}}, name="parent")

    assert found["error"] == "States.Runtime" and found["cause"].endswith("'StateMachineArn'"), closed(
        "runs a startExecution task with the names Step Functions documents",
        "_sfn_start_execution_task_calls_boto_with_its_member_names",
    )


def test_moto_turns_a_states_error_through_a_fail_states_error_path_into_states_runtime(aws: None) -> None:
    """GIVEN a Fail state whose ErrorPath yields "States.TaskFailed" (a failed page, re-thrown by
    the file's `IngestFailed`) THEN the execution fails with States.Runtime."""
    fail = {"Type": "Fail", "ErrorPath": "$.Error", "CausePath": "$.Cause"}

    found = run({"StartAt": "F", "States": {"F": fail}}, {"Error": "States.TaskFailed", "Cause": "page 2"})

    assert found["error"] == "States.Runtime", closed(
        "passes a States.* error through a Fail state's ErrorPath",
        "the state_fail half of _states_errors_pass_through_fail_states_and_maps",
    )


def test_moto_refuses_a_states_error_ending_a_map_iteration(aws: None) -> None:
    """GIVEN a Map whose item fails with a States.* error (States.Runtime of an intrinsic) THEN
    moto checks the name as a custom error's, and the execution's cause is that refusal, not
    the item's."""
    item = {
        "StartAt": "P",
        "States": {
            "P": {"Type": "Pass", "End": True, "Parameters": {"parsed.$": "States.StringToJson('not json')"}}
        },
    }
    inline_map = {
        "Type": "Map",
        "ItemsPath": "$.items",
        "End": True,
        "ItemProcessor": {"ProcessorConfig": {"Mode": "INLINE"}, **item},
    }

    found = run({"StartAt": "M", "States": {"M": inline_map}}, {"items": [1]})

    assert "MUST NOT begin with the prefix 'States.'" in found["cause"], closed(
        "passes a States.* error out of a Map iteration",
        "the iteration_worker half of _states_errors_pass_through_fail_states_and_maps",
    )


def test_moto_looks_at_a_sync_tasks_child_every_half_second() -> None:
    """THEN a `.sync` task waits 0.5 s between two looks at its child execution: at least
    0.25 s more per page than on our local runtime. (A proxy: it is the constant the patch
    replaces; timing a page would take real seconds.)"""
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_callback as callback,
    )

    from local_runtime.moto_server import SYNC_POLL_SECONDS

    assert callback._DELAY_SECONDS_SYNC_CONDITION_CHECK >= 5 * SYNC_POLL_SECONDS, closed(
        "looks at a .sync task's child often", "_sync_tasks_poll_often"
    )


def test_moto_sends_s3_events_to_the_rules_of_every_bus(aws: None) -> None:
    """GIVEN a rule for uploads on a custom bus that no rule forwards to THEN it gets the upload's
    event too (AWS sends a service's events to the default bus only)."""
    events = s3_events("a.csv")

    assert len(events["default"]) == 1
    assert len(events["custom"]) == 1, closed(
        "sends S3 events to the default bus only",
        "the default-bus check of _event_bus_targets_forward_the_event",
    )


def test_moto_forwards_only_source_detail_type_and_detail_to_another_bus(aws: None) -> None:
    """GIVEN a rule whose target is another bus WHEN an event with a time and resources matches
    THEN the receiving bus's rules get a new event without them."""
    boto3.client("events").create_event_bus(Name="custom")
    url = queue_for_rule("on-custom", {"source": ["app"]}, "custom")
    boto3.client("events").put_rule(Name="forward", EventPattern=json.dumps({"source": ["app"]}))
    boto3.client("events").put_targets(
        Rule="forward", Targets=[{"Id": "bus", "Arn": f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/custom"}]
    )
    when = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)

    boto3.client("events").put_events(
        Entries=[
            {
                "Source": "app",
                "DetailType": "t",
                "Detail": "{}",
                "Time": when,
                "Resources": ["arn:aws:s3:::landing"],
            }
        ]
    )

    (event,) = received(url)
    assert event["resources"] == [] and not event["time"].startswith("2020-01-01"), closed(
        "forwards the whole event to a bus target",
        "the event-bus branch of _event_bus_targets_forward_the_event (and _forward)",
    )


def test_moto_has_no_lambda_target(aws: None) -> None:
    """GIVEN a rule whose target is a Lambda function WHEN an event matches THEN moto raises."""
    events = boto3.client("events")
    events.put_rule(Name="to-function", EventPattern=json.dumps({"source": ["app"]}))
    events.put_targets(
        Rule="to-function", Targets=[{"Id": "f", "Arn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:closer"}]
    )

    try:
        events.put_events(Entries=[{"Source": "app", "DetailType": "t", "Detail": "{}"}])
    except NotImplementedError:
        return
    pytest.fail(
        closed(
            "invokes a Lambda target",
            "the Lambda branch of _event_bus_targets_forward_the_event (and _invoke_async)",
        )
    )


def test_moto_sends_no_step_functions_status_change_events(aws: None) -> None:
    """GIVEN a default-bus rule for Step Functions' events WHEN an execution starts and succeeds
    THEN the rule receives nothing."""
    url = queue_for_rule("statuses", {"source": ["aws.states"]})

    assert run(PASS)["status"] == "SUCCEEDED"

    assert received(url) == [], closed("sends execution status change events", "_sfn_status_change_events")


def test_moto_map_worker_recurses_once_per_item(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """GIVEN a Map of 8 items THEN each item runs at least one Python frame deeper than the one
    before, so a Map of 1,000 items (`States.ArrayRange`'s most: a section's pages) would pass
    the interpreter's recursion limit (a RecursionError, seen as States.Runtime). A cheap proxy
    for running 1,000 items."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.iteration_worker import (
        IterationWorker,
    )

    depths: list[int] = []
    eval_job = IterationWorker._eval_job

    def measured(self: Any, env: Any, job: Any) -> None:
        frame, depth = sys._getframe(), 0
        while frame is not None:
            frame, depth = frame.f_back, depth + 1
        depths.append(depth)
        eval_job(self, env=env, job=job)

    monkeypatch.setattr(IterationWorker, "_eval_job", measured)
    inline_map = {
        "Type": "Map",
        "ItemsPath": "$.items",
        "MaxConcurrency": 1,
        "End": True,
        "ItemProcessor": {"ProcessorConfig": {"Mode": "INLINE"}, **PASS},
    }

    assert (
        run({"StartAt": "M", "States": {"M": inline_map}}, {"items": list(range(8))})["status"] == "SUCCEEDED"
    )

    growth = [deeper - depth for depth, deeper in itertools.pairwise(depths)]
    assert len(depths) == 8 and min(growth) >= 1, closed(
        "runs a Map's items without recursing", "_map_iterations_loop"
    )
    assert depths[0] + 1000 * min(growth) > sys.getrecursionlimit(), (
        "a 1,000-item Map now fits moto's recursion"
    )


def fifo_group_after_a_hand_off_race() -> tuple[Any, str, str, list[str]]:
    """A FIFO queue with messages f2, f3 of one group; f2 received, made visible (the close of
    the file ahead hands it off) and hidden again with the same receipt handle (the controller
    deciding on it waits): f2 is in flight, not deleted. Returns the client, the queue URL, f2's
    receipt handle and the bodies the next receive gets."""
    sqs = boto3.client("sqs")
    url = sqs.create_queue(
        QueueName="gate.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "30"},
    )["QueueUrl"]
    for body in ("f2", "f3"):
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="tenant")
    (f2,) = sqs.receive_message(QueueUrl=url)["Messages"]
    assert f2["Body"] == "f2"
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=f2["ReceiptHandle"], VisibilityTimeout=0)
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=f2["ReceiptHandle"], VisibilityTimeout=30)
    return sqs, url, f2["ReceiptHandle"], bodies(sqs, url)


def bodies(sqs: Any, url: str) -> list[str]:
    return [message["Body"] for message in sqs.receive_message(QueueUrl=url).get("Messages", [])]


def test_moto_hands_out_a_groups_next_message_while_one_is_in_flight(aws: None) -> None:
    """GIVEN f2 handed off and hidden again (`fifo_group_after_a_hand_off_race`) THEN moto hands
    out f3 while f2 is in flight; SQS delivers no later message of a group while one is in flight."""
    *_, following = fifo_group_after_a_hand_off_race()

    assert following == ["f3"], closed(
        "holds a FIFO group while a message of it is in flight", "_fifo_groups_wait_for_messages_in_flight"
    )


def test_the_patched_queue_holds_the_group_while_its_message_is_in_flight(aws: None) -> None:
    """GIVEN the same race under `_fifo_groups_wait_for_messages_in_flight` THEN nothing is
    received while f2 is in flight; f2 again once it is visible; f3 only once f2 is deleted."""
    from local_runtime.moto_delivery_patches import _fifo_groups_wait_for_messages_in_flight

    with _fifo_groups_wait_for_messages_in_flight():
        sqs, url, receipt, following = fifo_group_after_a_hand_off_race()
        assert following == []
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=receipt, VisibilityTimeout=0)
        (f2,) = sqs.receive_message(QueueUrl=url)["Messages"]
        assert f2["Body"] == "f2"
        assert bodies(sqs, url) == []
        sqs.delete_message(QueueUrl=url, ReceiptHandle=f2["ReceiptHandle"])
        assert bodies(sqs, url) == ["f3"]


def test_the_readme_lists_each_patch_in_order_with_its_canaries() -> None:
    """THEN the README's table names exactly the patches `moto_patches()` applies, in its order,
    and the canaries of its rows are exactly this module's canaries."""
    from local_runtime.moto_server import moto_patches

    applied = re.findall(r"enter_context\((_\w+)\(", inspect.getsource(moto_patches))
    readme = (ROOT / "local_runtime" / "README.md").read_text()
    section = readme.split("## moto 5.2.5 patches", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `_")]
    canaries = {
        name for name, value in globals().items() if name.startswith("test_moto_") and callable(value)
    }

    assert [re.match(r"\| `(\w+)`", row)[1] for row in rows] == applied
    assert {
        name for row in rows for name in re.findall(r"`(test_moto_\w+)`", row.rsplit(" | ", 1)[1])
    } == canaries
