"""Unit tests of the local runtime's parts that need no synthesis and no moto server: the
template pre-transform, Lambda's JSON log format, the sink, S3 event keys, the Map patch."""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import urllib.error
import urllib.request

import pytest

from local_runtime.sink import SinkServer
from local_runtime.transform import TemplateError, prepare, scale_definition, scale_seconds
from local_runtime.worker_process import LambdaJsonFormatter

DEFINITION = {
    "Fn::Join": [
        "",
        [
            '{"StartAt":"T","States":{"T":{"Type":"Task","TimeoutSeconds":600,"Resource":"arn:',
            {"Ref": "AWS::Partition"},
            ':states:::lambda:invoke","Parameters":{"FunctionName":"',
            {"Fn::GetAtt": ["Fn", "Arn"]},
            '","Payload.$":"$"},"Next":"W"},"W":{"Type":"Wait","Seconds":100,"End":true}}}',
        ],
    ]
}
TEMPLATE = {
    "Resources": {
        "Queue": {"Type": "AWS::SQS::Queue", "Properties": {"VisibilityTimeout": 30, "FifoQueue": True}},
        "Fn": {
            "Type": "AWS::Lambda::Function",
            "Properties": {
                "Timeout": 300,
                "Environment": {"Variables": {"TARGET_URL": "https://core", "KEEP": {"Ref": "Queue"}}},
            },
            "DependsOn": ["Queue", "QueuePolicy"],
        },
        "QueuePolicy": {"Type": "AWS::SQS::QueuePolicy", "Properties": {}},
        "Mapping": {
            "Type": "AWS::Lambda::EventSourceMapping",
            "Properties": {
                "BatchSize": 1,
                "FunctionName": {"Ref": "Fn"},
                "EventSourceArn": {"Fn::GetAtt": ["Queue", "Arn"]},
            },
        },
        "Machine": {
            "Type": "AWS::StepFunctions::StateMachine",
            "Properties": {"DefinitionString": DEFINITION},
        },
    }
}


def test_the_pre_transform_changes_only_what_the_local_run_needs() -> None:
    """GIVEN a template with a queue, a function, its event source mapping, a queue policy and
    a state machine whose definition is an Fn::Join with intrinsics
    WHEN it is prepared with time_scale 0.1 and an environment hook
    THEN durations shrink, the hook's variables replace the template's, the mapping and the
    policy are taken out (and listed), the definition keeps its intrinsics, and the
    original template is unchanged."""
    original = json.dumps(TEMPLATE, sort_keys=True)

    def point_elsewhere(logical_id: str, variables: dict) -> dict:
        return {**variables, "TARGET_URL": "http://127.0.0.1:1/records"}

    prepared = prepare(
        TEMPLATE,
        time_scale=0.1,
        creatable=lambda kind: kind != "AWS::SQS::QueuePolicy",
        environment=point_elsewhere,
    )

    resources = prepared.template["Resources"]
    assert set(resources) == {"Queue", "Fn", "Machine"}
    assert resources["Queue"]["Properties"]["VisibilityTimeout"] == 3
    assert resources["Queue"]["Properties"]["MessageRetentionPeriod"] == 34560
    assert resources["Fn"]["Properties"]["Timeout"] == 30
    assert resources["Fn"]["DependsOn"] == ["Queue"]
    assert resources["Fn"]["Properties"]["Environment"]["Variables"] == {
        "TARGET_URL": "http://127.0.0.1:1/records",
        "KEEP": {"Ref": "Queue"},
    }
    assert prepared.overrides == ["Fn: TARGET_URL 'https://core' -> 'http://127.0.0.1:1/records'"]
    assert prepared.not_created == [("QueuePolicy", "AWS::SQS::QueuePolicy")]
    (mapping,) = prepared.mappings
    assert (mapping.logical_id, mapping.batch_size, mapping.enabled) == ("Mapping", 1, True)
    outputs = prepared.template["Outputs"]
    assert outputs[mapping.function_output] == {"Value": {"Ref": "Fn"}}
    assert outputs[mapping.source_output] == {"Value": {"Fn::GetAtt": ["Queue", "Arn"]}}

    parts = resources["Machine"]["Properties"]["DefinitionString"]["Fn::Join"][1]
    assert [p for p in parts if not isinstance(p, str)] == [
        {"Ref": "AWS::Partition"},
        {"Fn::GetAtt": ["Fn", "Arn"]},
    ]
    text = "".join(p if isinstance(p, str) else "X" for p in parts)
    states = json.loads(text)["States"]
    assert states["T"]["TimeoutSeconds"] == 60 and states["W"]["Seconds"] == 10
    assert states["T"]["Parameters"] == {"FunctionName": "X", "Payload.$": "$"}
    assert json.dumps(TEMPLATE, sort_keys=True) == original


def test_fails_when_a_definition_is_not_json_around_its_intrinsics() -> None:
    """GIVEN an intrinsic outside a JSON string THEN the pre-transform says it cannot scale it."""
    bad = {"Fn::Join": ["", ['{"StartAt":"T","TimeoutSeconds":', {"Ref": "Seconds"}, "}"]]}
    template = {
        "Resources": {
            "M": {"Type": "AWS::StepFunctions::StateMachine", "Properties": {"DefinitionString": bad}}
        }
    }
    with pytest.raises(
        TemplateError, match="M: the definition is not JSON once its intrinsics are set aside"
    ):
        prepare(template, time_scale=0.1, creatable=lambda kind: True)


def test_durations_scale_with_time_scale() -> None:
    """GIVEN time_scale 0.03 THEN durations shrink, rounded up to whole seconds, at least 1 s."""
    assert scale_seconds(30, 0.03) == 1
    assert scale_seconds(300, 0.1) == 30
    assert scale_seconds(1209600, 0.03, minimum=60) == 36288
    definition = {
        "States": {"Wait": {"Type": "Wait", "Seconds": 100}, "Task": {"Type": "Task", "TimeoutSeconds": 600}}
    }
    scaled = scale_definition(definition, 0.1)
    assert scaled["States"]["Wait"]["Seconds"] == 10 and scaled["States"]["Task"]["TimeoutSeconds"] == 60


def _post(url: str, body: dict, key: str) -> int:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_sink_deduplicates_and_injects_faults() -> None:
    """GIVEN a sink with a 503 on the record registered second and a fatal 400 on one record
    WHEN records are posted, some twice with the same idempotency key
    THEN a repeated key is answered 200 and not registered again, the 503 is answered once,
    the rejected record every time, and every request is kept in arrival order."""
    sink = SinkServer("t")
    sink.start()
    try:
        sink.fail_with(503, times=1, on_record=1).reject(on_record={"n": 9}, status=400)
        statuses = [
            _post(sink.url, {"n": 0}, "k0"),
            _post(sink.url, {"n": 1}, "k1"),  # would be registered second: 503 once
            _post(sink.url, {"n": 1}, "k1"),
            _post(sink.url, {"n": 0}, "k0"),  # replay
            _post(sink.url, {"n": 9}, "k9"),
            _post(sink.url, {"n": 9}, "k9"),
        ]
    finally:
        sink.stop()
    assert statuses == [201, 503, 201, 200, 400, 400]
    assert sink.accepted == [{"n": 0}, {"n": 1}]
    assert [(r.idempotency_key, r.registered) for r in sink.requests] == [
        ("k0", True),
        ("k1", False),
        ("k1", True),
        ("k0", False),
        ("k9", False),
        ("k9", False),
    ]


def test_a_slow_sinks_waiting_requests_are_answered_once_its_faults_are_cleared() -> None:
    """GIVEN a sink that answers after a minute (a test keeping a file running)
    WHEN a request waits in it and the test clears the sink's faults
    THEN that request is answered at once and registered, and later ones wait no more."""
    sink = SinkServer("t").latency(60)
    sink.start()
    answers: list[int] = []
    try:
        waiting = threading.Thread(target=lambda: answers.append(_post(sink.url, {"n": 0}, "k0")))
        waiting.start()
        while sink.max_in_flight == 0 and waiting.is_alive():  # the request is inside the sink, waiting
            waiting.join(0.01)
        sink.clear_faults()
        waiting.join(30)
        answers.append(_post(sink.url, {"n": 1}, "k1"))
    finally:
        sink.stop()
    assert answers == [201, 201]
    assert sink.accepted == [{"n": 0}, {"n": 1}]


def test_log_lines_are_shaped_like_lambdas_json_log_format() -> None:
    """GIVEN a record with extra fields and one with an exception
    WHEN the formatter the worker processes install formats them
    THEN each is one JSON object with Lambda's keys, the extra fields at the top level, the
    exception as errorType/errorMessage/stackTrace, and nothing that is None."""
    logger = logging.getLogger("ingest.test")
    record = logger.makeRecord(
        "ingest.test", logging.INFO, __file__, 1, "chunk %d sent", (3,), None, extra={"tenant": "acme"}
    )
    line = json.loads(LambdaJsonFormatter().format(record))
    assert set(line) == {"timestamp", "level", "message", "logger", "tenant"}
    assert (line["level"], line["message"], line["logger"], line["tenant"]) == (
        "INFO",
        "chunk 3 sent",
        "ingest.test",
        "acme",
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", line["timestamp"])

    try:
        raise ValueError("boom")
    except ValueError:
        failed = logger.makeRecord(
            "ingest.test", logging.ERROR, __file__, 2, "failed", (), sys.exc_info(), extra={"tenant_id": "x"}
        )
    line = json.loads(LambdaJsonFormatter().format(failed))
    assert (line["errorType"], line["errorMessage"], line["level"]) == ("ValueError", "boom", "ERROR")
    assert "raise ValueError" in "".join(line["stackTrace"])
    assert "tenant_id" not in line and "tenantId" not in line, "Lambda's runtime reserves tenant_id"


@pytest.mark.parametrize(
    ("key", "in_event"),
    [
        ("in/red flower.jpg", "in/red+flower.jpg"),
        ("in/c++.csv", "in/c%2B%2B.csv"),
        ("in/year=2024/50%.csv", "in/year%3D2024/50%25.csv"),
        ("in/Köln €.csv", "in/K%C3%B6ln+%E2%82%AC.csv"),
        ("in/a-b_c.d/E9.csv", "in/a-b_c.d/E9.csv"),
    ],
)
def test_moto_events_carry_keys_encoded_as_s3_does(key: str, in_event: str) -> None:
    """GIVEN an object key WHEN the local runtime writes it into an S3 event THEN it is encoded as
    S3 encodes it, and the handlers' one decoder gives the key back."""
    from lambdas import contract
    from local_runtime.moto_server import s3_event_key

    assert s3_event_key(key) == in_event
    assert contract.s3_key_from_event(in_event) == key


def _run_map(items: int, fail_at: int | None = None) -> dict:
    """One execution of a Map (MaxConcurrency 1) over `items` Pass (or Fail) iterations, on
    moto with the local runtime's patch of its Map worker."""
    import time

    import boto3

    from local_runtime.moto_sfn_patches import _map_iterations_loop
    from tests.conftest import moto_executing_state_machines

    item = {"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}
    if fail_at is not None:
        item = {
            "StartAt": "C",
            "States": {
                "C": {
                    "Type": "Choice",
                    "Choices": [{"Variable": "$", "NumericEquals": fail_at, "Next": "F"}],
                    "Default": "P",
                },
                "F": {"Type": "Fail", "Error": "Item", "Cause": "failed on purpose"},
                "P": {"Type": "Pass", "End": True},
            },
        }
    definition = {
        "StartAt": "R",
        "States": {
            "R": {
                "Type": "Pass",
                "Parameters": {"items.$": f"States.ArrayRange(0, {items - 1}, 1)"},
                "Next": "M",
            },
            "M": {
                "Type": "Map",
                "ItemsPath": "$.items",
                "MaxConcurrency": 1,
                "ResultPath": None,
                "End": True,
                "ItemProcessor": {"ProcessorConfig": {"Mode": "INLINE"}, **item},
            },
        },
    }
    with _map_iterations_loop(), moto_executing_state_machines():
        sfn = boto3.client("stepfunctions", region_name="us-east-1")
        arn = sfn.create_state_machine(
            name="m", definition=json.dumps(definition), roleArn="arn:aws:iam::123456789012:role/r"
        )["stateMachineArn"]
        execution = sfn.start_execution(stateMachineArn=arn)["executionArn"]
        deadline = time.monotonic() + 120
        while (found := sfn.describe_execution(executionArn=execution))["status"] == "RUNNING":
            assert time.monotonic() < deadline, "the execution did not end"
            time.sleep(0.05)
        events = sfn.get_execution_history(executionArn=execution, maxResults=1000, reverseOrder=True)[
            "events"
        ]
        return {**found, "started": sum(e["type"] == "MapIterationStarted" for e in events)}


def test_a_map_of_a_thousand_items_runs_on_moto_not_a_recursion_error() -> None:
    """GIVEN moto's Map worker, which recursed once per item (RecursionError past about 970
    items) WHEN a Map of 1,000 items (ArrayRange's most) runs with the local runtime's patch
    THEN the execution succeeds: a section's 996 pages run locally as on AWS."""
    assert _run_map(1000)["status"] == "SUCCEEDED"


def test_a_failing_item_still_ends_the_map_with_its_error_under_the_patch() -> None:
    """GIVEN a Map whose item 5 fails WHEN it runs with the patch THEN the execution fails with
    that item's error and no item after it started."""
    found = _run_map(20, fail_at=5)
    assert (found["status"], found.get("error")) == ("FAILED", "Item")
    assert found["started"] == 6


def test_a_kms_keys_tags_are_respelled_for_motos_cloudformation() -> None:
    """GIVEN a tagged AWS::KMS::Key (a tenant stack tags every resource) WHEN prepared THEN its
    tags are in the KMS API's TagKey/TagValue spelling, which moto 5.2.5 reads (it fails on
    CloudFormation's Key/Value), and the other resources' tags are left as they are."""
    template = {
        "Resources": {
            "Key": {
                "Type": "AWS::KMS::Key",
                "Properties": {"KeyPolicy": {}, "Tags": [{"Key": "tenant", "Value": "acme"}]},
            },
            "Queue": {
                "Type": "AWS::SQS::Queue",
                "Properties": {"Tags": [{"Key": "tenant", "Value": "acme"}]},
            },
        }
    }

    resources = prepare(template, time_scale=1, creatable=lambda kind: True).template["Resources"]

    assert resources["Key"]["Properties"]["Tags"] == [{"TagKey": "tenant", "TagValue": "acme"}]
    assert resources["Queue"]["Properties"]["Tags"] == [{"Key": "tenant", "Value": "acme"}]


def test_an_ssm_parameters_tags_are_respelled_for_motos_cloudformation() -> None:
    """GIVEN a tagged AWS::SSM::Parameter (its tags a map, as CloudFormation takes them) WHEN
    prepared THEN they are the API's Key/Value list, which moto 5.2.5 hands to PutParameter."""
    template = {
        "Resources": {
            "Registry": {
                "Type": "AWS::SSM::Parameter",
                "Properties": {
                    "Name": "/ordered-ingest/pipelines/acme",
                    "Type": "String",
                    "Value": "{}",
                    "Tags": {"tenant": "acme"},
                },
            }
        }
    }

    resources = prepare(template, time_scale=1, creatable=lambda kind: True).template["Resources"]

    assert resources["Registry"]["Properties"]["Tags"] == [{"Key": "tenant", "Value": "acme"}]


def test_outputs_of_a_resource_moto_cannot_create_are_dropped_with_it() -> None:
    """GIVEN a tenant's upload access point (no model in moto's CloudFormation) and the outputs
    naming it WHEN prepared THEN the access point and its outputs are gone (moto could not resolve
    them), and every other output is kept."""
    template = {
        "Resources": {
            "UploadAccessPoint": {"Type": "AWS::S3::AccessPoint", "Properties": {"Name": "acme-uploads"}},
            "Queue": {"Type": "AWS::SQS::Queue", "Properties": {}},
        },
        "Outputs": {
            "UploadAccessPointAlias": {"Value": {"Fn::GetAtt": ["UploadAccessPoint", "Alias"]}},
            "UploadAccessPointArn": {"Value": {"Fn::Join": ["", [{"Ref": "UploadAccessPoint"}]]}},
            "QueueUrl": {"Value": {"Ref": "Queue"}},
        },
    }

    prepared = prepare(template, time_scale=1, creatable=lambda kind: kind != "AWS::S3::AccessPoint")

    assert prepared.not_created == [("UploadAccessPoint", "AWS::S3::AccessPoint")]
    assert prepared.template["Outputs"] == {"QueueUrl": {"Value": {"Ref": "Queue"}}}


def test_an_idle_poller_backs_off_to_its_resting_pause_and_a_wake_up_brings_it_back(monkeypatch) -> None:
    """GIVEN a poller whose queue stays empty (a clock that moves only by the pauses it waits)
    THEN its pauses double from 50 ms to 0.4 s, and to 2 s once nothing came and nothing woke it
    for 10 s (an idle `--serve` costs moto little CPU); a wake-up starts it at 50 ms again."""
    from local_runtime import poller
    from local_runtime.deploy import EventSourceMappingSpec

    clock = [0.0]
    monkeypatch.setattr(poller.time, "monotonic", lambda: clock[0])
    mapping = EventSourceMappingSpec("s", "m", "f", "arn:q", "http://q", 1, True)

    class EmptyQueue:
        def receive_message(self, **_: object) -> dict[str, object]:
            return {}

    polling = poller.SqsPoller(
        mapping, sqs=EmptyQueue(), lambda_client=None, region="us-east-1", concurrency=1
    )
    pauses: list[float] = []

    class Wake:
        """Records each pause; is woken once, at the 35th; stops the poller after 40."""

        def wait(self, timeout: float) -> bool:
            pauses.append(timeout)
            clock[0] += timeout
            if len(pauses) == 40:
                polling._stop.set()
            return len(pauses) == 35

        def clear(self) -> None:
            pass

    polling._wake = Wake()
    polling._run()

    # 0.35 s, then 25 pauses of 0.4 s: quiet for 10 s, so the ceiling is the resting pause.
    assert pauses[:28] == [0.05, 0.1, 0.2] + [0.4] * 25
    assert pauses[28:35] == [0.8, 1.6, 2.0, 2.0, 2.0, 2.0, 2.0]
    assert pauses[35:] == [0.05, 0.1, 0.2, 0.4, 0.4]  # woken at the 35th: quick again


def test_tenants_sharing_a_bearer_secret_share_its_one_token() -> None:
    """GIVEN two tenants whose register functions read the same secret, a third its own WHEN the
    auth hook sees their environments THEN one secret is created per name, and both sinks of the
    shared secret demand its token (a token per tenant made the first tenant's requests 401)."""
    from lambdas import contract
    from local_runtime.sink import enforce_auth

    sinks = {t: SinkServer(t) for t in ("cards", "refunds", "fx")}
    hook, to_create = enforce_auth(sinks, ("key", "secret", "session"))
    bearer = {contract.env_name("sink_auth"): "bearer"}
    for tenant, secret in (
        ("cards", "payments/core-token"),
        ("refunds", "payments/core-token"),
        ("fx", "fx/token"),
    ):
        hook(tenant, "register", {**bearer, contract.env_name("sink_auth_secret"): secret})

    assert sorted(to_create) == ["fx/token", "payments/core-token"]
    assert sinks["cards"].auth.token == sinks["refunds"].auth.token == to_create["payments/core-token"]
    assert sinks["fx"].auth.token == to_create["fx/token"] != to_create["payments/core-token"]


def test_the_local_run_warns_that_alarms_reach_nobody_only_when_the_tenants_file_itself_does(
    tmp_path, capfd
) -> None:
    """GIVEN a tenants file with an on-call address WHEN the local runtime synthesizes it (it leaves
    the notifications out itself) THEN no reach-nobody warning; GIVEN the fixture, which names
    nobody, THEN the warning, as `make synth` gives it."""
    from local_runtime.synth import synthesize
    from pipeline_constructs.config import ALARMS_REACH_NOBODY_ID
    from tests.conftest import FIXTURE_TENANTS

    with_oncall = tmp_path / "tenants.yaml"
    with_oncall.write_text(
        FIXTURE_TENANTS.read_text().replace("  emails: []", "  emails: [oncall@example.com]", 1)
    )
    assert "oncall@example.com" in with_oncall.read_text()

    synthesize(with_oncall, tmp_path / "with-oncall")
    assert ALARMS_REACH_NOBODY_ID not in capfd.readouterr().err
    synthesize(FIXTURE_TENANTS, tmp_path / "nobody")
    assert ALARMS_REACH_NOBODY_ID in capfd.readouterr().err
