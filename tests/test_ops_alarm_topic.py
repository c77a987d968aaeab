"""`ops status` shows where the alarms go: the alarm topic the shared stack outputs (its
`AlarmTopicArn`) and whether anyone is subscribed, on moto."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ops.cli import EXIT_OK
from ops.status import alarm_topic, render_alarm_topic
from tests.test_ops import Deployment

NOBODY_FIX = (
    "add notifications.emails or notifications.subscriptions to tenants.yaml and deploy "
    "(docs/operations.md#who-gets-the-alarms)"
)


def with_alarm_topic(deployment: Deployment, *endpoints: tuple[str, str]) -> str:
    """The shared stack as this version deploys it: its alarm topic's ARN as an output; the topic
    subscribed to ``endpoints`` (protocol, endpoint)."""
    sns = deployment.clients("sns")
    arn = sns.create_topic(Name="OrderedIngest-Shared-SharedAlarmTopic")["TopicArn"]
    for protocol, endpoint in endpoints:
        sns.subscribe(TopicArn=arn, Protocol=protocol, Endpoint=endpoint)
    deployment.clients("cloudformation").update_stack(
        StackName="OrderedIngest-Shared",
        TemplateBody=json.dumps(
            {
                "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
                "Outputs": {"LedgerTableName": {"Value": "ledger"}, "AlarmTopicArn": {"Value": arn}},
            }
        ),
    )
    return arn


@pytest.fixture
def deployment(moto_account: None) -> Any:
    return Deployment()


def test_status_first_line_names_the_alarm_topic_and_its_subscriptions(deployment):
    arn = with_alarm_topic(
        deployment, ("email", "oncall@example.com"), ("https", "https://alerts.example.com/in")
    )
    code, out = deployment.ops("status")
    assert code == EXIT_OK
    assert out.splitlines()[0] == f"alarm topic: {arn} (2 subscriptions)"
    assert "acme" in out and "idle" in out  # the table follows


def test_fails_when_nobody_is_subscribed_status_says_alarms_reach_nobody_and_the_fix(deployment):
    arn = with_alarm_topic(deployment)
    code, out = deployment.ops("status", "acme")
    assert code == EXIT_OK
    assert (
        out.splitlines()[0]
        == f"alarm topic: {arn}: no confirmed subscription, alarms reach nobody; {NOBODY_FIX}"
    )


def test_status_json_is_the_tenants_only_and_an_older_shared_stack_shows_no_topic_line(deployment):
    code, out = deployment.ops("status")  # the shared stack has no AlarmTopicArn output
    assert code == EXIT_OK and not out.startswith("alarm topic")
    with_alarm_topic(deployment, ("email", "oncall@example.com"))
    code, out = deployment.ops("status", "--json")
    assert code == EXIT_OK and [s["tenant"] for s in json.loads(out)] == ["acme"]


class _Sns:
    """An SNS client whose topic lists what real SNS lists before a confirmation (moto confirms at once)."""

    def __init__(self, subscriptions: list[dict[str, str]] | None = None, error: str | None = None) -> None:
        self.subscriptions, self.error = subscriptions or [], error

    def get_paginator(self, name: str) -> Any:
        assert name == "list_subscriptions_by_topic"
        outer = self

        class Paginator:
            def paginate(self, TopicArn: str) -> list[dict[str, Any]]:
                if outer.error:
                    from botocore.exceptions import ClientError

                    raise ClientError(
                        {"Error": {"Code": outer.error, "Message": "no"}}, "ListSubscriptionsByTopic"
                    )
                return [{"Subscriptions": outer.subscriptions}]

        return Paginator()


class _Cfn:
    def __init__(self, arn: str) -> None:
        self.arn = arn

    def describe_stacks(self, StackName: str) -> dict[str, Any]:
        return {
            "Stacks": [
                {"StackName": StackName, "Outputs": [{"OutputKey": "AlarmTopicArn", "OutputValue": self.arn}]}
            ]
        }


TOPIC = "arn:aws:sns:eu-west-1:111111111111:central-alarms"


def test_a_subscription_pending_confirmation_is_not_counted_as_someone_who_gets_alarms():
    pending = alarm_topic([], _Cfn(TOPIC), _Sns([{"SubscriptionArn": "PendingConfirmation"}]))
    assert render_alarm_topic(pending) == (
        f"alarm topic: {TOPIC}: no confirmed subscription, 1 pending confirmation, alarms reach nobody; confirm it "
        "(the link SNS sent) (docs/operations.md#who-gets-the-alarms)"
    )
    mixed = alarm_topic(
        [], _Cfn(TOPIC), _Sns([{"SubscriptionArn": f"{TOPIC}:1"}, {"SubscriptionArn": "PendingConfirmation"}])
    )
    assert render_alarm_topic(mixed) == f"alarm topic: {TOPIC} (1 subscription, 1 pending confirmation)"


def test_a_topic_of_another_account_whose_subscriptions_are_not_readable_is_still_named():
    topic = alarm_topic([], _Cfn(TOPIC), _Sns(error="AuthorizationError"))
    assert (
        render_alarm_topic(topic)
        == f"alarm topic: {TOPIC} (its subscriptions could not be listed: AuthorizationError)"
    )
