"""Unit tests of the local runtime's template handling (no moto, no synthesis)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from local_runtime.intrinsics import IntrinsicError, PseudoParameters, Resolver, references
from local_runtime.provision import ProvisioningError, check_definition, scale_definition, scale_seconds
from local_runtime.sink import SinkServer

TEMPLATE = {
    "Parameters": {"Stage": {"Type": "String", "Default": "dev"}},
    "Conditions": {"IsDev": {"Fn::Equals": [{"Ref": "Stage"}, "dev"]}},
    "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}, "Fn": {"Type": "AWS::Lambda::Function"}},
}


def resolver(exports: dict | None = None) -> Resolver:
    attributes = {("Queue", "Arn"): "arn:aws:sqs:eu-west-1:111122223333:q", ("Fn", "Arn"): "arn:fn"}
    return Resolver(
        stack_name="S",
        template=TEMPLATE,
        pseudo=PseudoParameters(account_id="111122223333", region="eu-west-1"),
        ref=lambda logical_id: {"Queue": "https://q", "Fn": "fn-name"}[logical_id],
        get_att=lambda logical_id, attribute: attributes[(logical_id, attribute)],
        exports=exports or {},
    )


def test_resolves_what_cdk_writes() -> None:
    """GIVEN template values using each intrinsic CDK emits
    THEN they resolve as CloudFormation would, with the fixed account and region."""
    r = resolver({"Other:Export": "imported"})
    assert r.resolve({"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::b-", {"Ref": "AWS::AccountId"}]]}) == (
        "arn:aws:s3:::b-111122223333"
    )
    assert r.resolve({"Fn::Sub": "cdk-${AWS::AccountId}-${AWS::Region}-${Fn.Arn}-${!Literal}"}) == (
        "cdk-111122223333-eu-west-1-arn:fn-${Literal}"
    )
    assert r.resolve({"Fn::Sub": ["${A}/${Queue}", {"A": {"Ref": "Fn"}}]}) == "fn-name/https://q"
    assert r.resolve({"Fn::Select": [3, {"Fn::Split": [":", {"Fn::GetAtt": ["Queue", "Arn"]}]}]}) == "eu-west-1"
    assert r.resolve({"Fn::ImportValue": "Other:Export"}) == "imported"
    assert r.resolve({"Fn::If": ["IsDev", "yes", "no"]}) == "yes"
    assert r.resolve({"A": {"Ref": "AWS::NoValue"}, "B": [1, {"Ref": "AWS::NoValue"}]}) == {"B": [1]}
    assert r.resolve({"Ref": "Stage"}) == "dev"


def test_unknown_names_fail_loudly() -> None:
    """GIVEN a reference to something no stack provides THEN resolution fails, naming it."""
    with pytest.raises(IntrinsicError, match="Missing:Export"):
        resolver().resolve({"Fn::ImportValue": "Missing:Export"})
    with pytest.raises(IntrinsicError, match="Nope"):
        resolver().resolve({"Ref": "Nope"})


def test_references_find_dependencies() -> None:
    """GIVEN a resource's properties THEN every Ref, GetAtt and Sub name is found (for ordering)."""
    value = {"A": {"Ref": "Queue"}, "B": {"Fn::GetAtt": ["Fn", "Arn"]}, "C": {"Fn::Sub": "${Other.Arn}${!x}${AWS::Region}"}}
    assert set(references(value)) == {"Queue", "Fn", "Other", "AWS::Region"}


def test_durations_scale_with_time_scale() -> None:
    """GIVEN time_scale 0.03 THEN durations shrink, rounded up to whole seconds, at least 1 s."""
    assert scale_seconds(30, 0.03) == 1
    assert scale_seconds(300, 0.1) == 30
    assert scale_seconds(1209600, 0.03, minimum=60) == 36288
    definition = {"States": {"Wait": {"Type": "Wait", "Seconds": 100}, "Task": {"Type": "Task", "TimeoutSeconds": 600}}}
    scaled = scale_definition(definition, 0.1)
    assert scaled["States"]["Wait"]["Seconds"] == 10 and scaled["States"]["Task"]["TimeoutSeconds"] == 60


def test_callback_task_without_timeout_is_refused() -> None:
    """GIVEN a .waitForTaskToken task without TimeoutSeconds THEN provisioning refuses it."""
    task = {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke.waitForTaskToken", "End": True}
    with pytest.raises(ProvisioningError, match="TimeoutSeconds"):
        check_definition({"StartAt": "T", "States": {"T": task}}, "m")
    check_definition({"StartAt": "T", "States": {"T": {**task, "TimeoutSeconds": 60}}}, "m")


def _post(url: str, body: dict, key: str) -> int:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Idempotency-Key": key, "Content-Type": "application/json"}
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
        ("k0", True), ("k1", False), ("k1", True), ("k0", False), ("k9", False), ("k9", False)
    ]
