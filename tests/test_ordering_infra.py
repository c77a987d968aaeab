"""A tenant ordered by key sequence: a standard queue, the controller's settings, the gap alarm."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match, Template

from tests.conftest import synthesize

TENANTS = """
defaults:
  sink: {url: "https://core.example.com/records", auth: {type: bearer, secret: core/token}}
tenants:
  - id: seqco
    prefix: seqco/
    ordering:
      by: key_sequence
      sequence_pattern: '(?P<seq>\\d+)\\.csv$'
      first_sequence: 0
      gap_alarm_after_seconds: 600
  - id: plain
    prefix: plain/
"""


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> dict[str, Template]:
    directory = tmp_path_factory.mktemp("ordering")
    (directory / "tenants.yaml").write_text(TENANTS, encoding="utf-8")
    synthesized = synthesize(directory / "tenants.yaml", directory / "cdk.out")
    return {tenant: synthesized.template(f"OrderedIngest-Tenant-{tenant}") for tenant in ("seqco", "plain")}


def test_a_key_sequence_tenant_gets_a_standard_queue_and_a_rule_without_message_group(templates):
    seqco = templates["seqco"]
    (queue,) = seqco.find_resources(
        "AWS::SQS::Queue", {"Properties": {"QueueName": "seqco-event-queue"}}
    ).values()
    assert "FifoQueue" not in queue["Properties"] and "ContentBasedDeduplication" not in queue["Properties"]
    (rule,) = seqco.find_resources(
        "AWS::Events::Rule", {"Properties": {"Name": "seqco-object-created"}}
    ).values()
    (target,) = rule["Properties"]["Targets"]
    assert "SqsParameters" not in target


def test_the_controller_orders_by_the_configured_pattern_from_the_first_number(templates):
    templates["seqco"].has_resource_properties(
        "AWS::Lambda::Function",
        {
            "FunctionName": "seqco-controller",
            "Environment": {
                "Variables": Match.object_like(
                    {
                        "ORDERING": "key_sequence",
                        "SEQUENCE_PATTERN": r"(?P<seq>\d+)\.csv$",
                        "FIRST_SEQUENCE": "0",
                    }
                )
            },
        },
    )
    templates["plain"].has_resource_properties(
        "AWS::Lambda::Function",
        {
            "FunctionName": "plain-controller",
            "Environment": {"Variables": Match.object_like({"ORDERING": "arrival", "SEQUENCE_PATTERN": "-"})},
        },
    )


def test_only_a_key_sequence_tenant_has_the_gap_alarm_on_the_controllers_gap_metric(templates):
    templates["seqco"].has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "AlarmName": "seqco-sequence-gap",
            "MetricName": "SequenceGapSeconds",
            "Namespace": "OrderedIngest",
            "Dimensions": [{"Name": "Tenant", "Value": "seqco"}],
            "Statistic": "Maximum",
            "Threshold": 600,
            "AlarmDescription": Match.string_like_regexp("ops skip-gap seqco"),
        },
    )
    assert not templates["plain"].find_resources(
        "AWS::CloudWatch::Alarm", {"Properties": {"AlarmName": "plain-sequence-gap"}}
    )


def test_the_ordering_is_a_stack_output_that_ops_reads(templates):
    outputs = templates["seqco"].find_outputs("*")
    values = {key.rstrip("0123456789ABCDEF"): output["Value"] for key, output in outputs.items()}
    assert values["PipelineOrdering"] == "key_sequence" and values["PipelineFirstSequence"] == "0"
