"""`notifications` in tenants.yaml: `emails` (kept), `subscriptions` of any protocol, or an
existing `topic_arn`; each endpoint checked against its protocol, every problem at once."""

from __future__ import annotations

import textwrap

from pipeline_constructs.config import parse_config
from tests.conftest import one_problem, problems_of

TENANT = "tenants: [{id: acme, prefix: a/, sink: {url: 'https://core.example.com', auth: {type: none}}}]\n"
QUEUE = "arn:aws:sqs:eu-west-1:111111111111:alarm-inbox"
FUNCTION = "arn:aws:lambda:eu-west-1:111111111111:function:alarm-to-chat"
TOPIC = "arn:aws:sns:eu-west-1:111111111111:central-alarms"
ENDPOINT_FIX = (
    "give the address (email), the https:// URL (https), the standard queue's ARN "
    "'arn:aws:sqs:<region>:<account>:<name>' (sqs) or the function's ARN "
    "'arn:aws:lambda:<region>:<account>:function:<name>' (lambda)"
)


def notifications(block: str, head: str = "") -> str:
    return head + "notifications:\n" + textwrap.indent(textwrap.dedent(block), "  ") + TENANT


def test_emails_and_subscriptions_of_every_protocol_are_the_topics_endpoints():
    config = parse_config(
        notifications(f"""\
        emails: [oncall@example.com]
        subscriptions:
          - {{protocol: https, endpoint: 'https://alerts.example.com/sns'}}
          - {{protocol: sqs, endpoint: '{QUEUE}'}}
          - {{protocol: lambda, endpoint: '{FUNCTION}:live'}}
          - {{protocol: email, endpoint: lead@example.com}}
    """)
    )
    assert config.notifications.endpoints == (
        ("email", "oncall@example.com"),
        ("https", "https://alerts.example.com/sns"),
        ("sqs", QUEUE),
        ("lambda", f"{FUNCTION}:live"),
        ("email", "lead@example.com"),
    )
    assert not config.notifications.reach_nobody
    assert parse_config(notifications("emails: []\n")).notifications.reach_nobody
    assert not parse_config(notifications(f"topic_arn: '{TOPIC}'\n")).notifications.reach_nobody


def test_fails_when_an_endpoint_does_not_fit_its_protocol_naming_each():
    assert problems_of(
        notifications(f"""\
        subscriptions:
          - {{protocol: https, endpoint: 'http://alerts.example.com/sns'}}
          - {{protocol: sqs, endpoint: '{QUEUE}.fifo'}}
          - {{protocol: sqs, endpoint: '{FUNCTION}'}}
          - {{protocol: lambda, endpoint: 'notify'}}
          - {{protocol: email, endpoint: 'oncall'}}
          - {{protocol: sms, endpoint: '+15555550100'}}
    """)
    ) == [
        (
            "notifications: field 'subscriptions[0].endpoint' = 'http://alerts.example.com/sns': is not an https:// URL "
            f"(SNS would send the alarms unencrypted over http://); {ENDPOINT_FIX}"
        ),
        (
            f"notifications: field 'subscriptions[1].endpoint' = '{QUEUE}.fifo': is a FIFO queue: the alarm topic is a "
            f"standard topic, which cannot deliver to it; {ENDPOINT_FIX}"
        ),
        f"notifications: field 'subscriptions[2].endpoint' = '{FUNCTION}': is not an SQS queue ARN; {ENDPOINT_FIX}",
        f"notifications: field 'subscriptions[3].endpoint' = 'notify': is not a Lambda function ARN; {ENDPOINT_FIX}",
        f"notifications: field 'subscriptions[4].endpoint' = 'oncall': is not an email address; {ENDPOINT_FIX}",
        (
            "notifications: field 'subscriptions[5].protocol' = 'sms': is not one of 'email', 'https', 'sqs' or "
            "'lambda'; use 'email', 'https', 'sqs' or 'lambda'"
        ),
    ]


def test_fails_when_an_address_is_subscribed_twice():
    assert one_problem(
        notifications("""\
        emails: [oncall@example.com]
        subscriptions: [{protocol: email, endpoint: oncall@example.com}]
    """)
    ) == (
        "notifications: field 'subscriptions[0].endpoint' = 'oncall@example.com': subscribes this email endpoint a "
        "second time; list "
        "each endpoint once (emails is the short form of subscriptions with protocol email)"
    )


def test_fails_when_a_topic_of_ones_own_comes_with_subscriptions():
    assert one_problem(
        notifications(f"""\
        topic_arn: '{TOPIC}'
        emails: [oncall@example.com]
    """)
    ) == (
        f"notifications: field 'topic_arn' = '{TOPIC}': replaces the app's alarm topic, so emails and subscriptions "
        "would subscribe to nothing; subscribe those endpoints to that topic where it is managed and remove emails "
        "and subscriptions, or remove topic_arn to subscribe them to the app's own topic"
    )


def test_fails_when_the_topic_is_not_in_a_targets_region():
    head = "targets: {dr: {account: '111111111111', region: us-east-1}}\ndefaults: {target: dr}\n"
    assert one_problem(notifications(f"topic_arn: '{TOPIC}'\n", head)) == (
        f"notifications: field 'topic_arn' = '{TOPIC}': is in Region eu-west-1, but target 'dr' deploys to "
        "us-east-1: CloudWatch alarms publish only to a topic of their own Region; use a topic in the targets' "
        "Region, or leave topic_arn out (each target then has its own topic)"
    )


def test_fails_when_the_topic_or_its_key_is_not_what_it_must_be():
    key = "arn:aws:kms:eu-west-1:111111111111:alias/alarms"
    assert problems_of(
        notifications(f"""\
        topic_arn: '{TOPIC}.fifo'
        topic_kms_key: '{key}'
    """)
    ) == [
        (
            f"notifications: field 'topic_arn' = '{TOPIC}.fifo': is a FIFO topic: CloudWatch alarms publish to standard "
            "topics only; use the ARN of a standard SNS topic, 'arn:aws:sns:<region>:<account>:<name>', or leave it out "
            "(the app's own alarm topic)"
        ),
        (
            f"notifications: field 'topic_kms_key' = '{key}': is not a KMS key ARN (an alias will not do: IAM names the "
            "key); use the ARN of the key that encrypts topic_arn, 'arn:aws:kms:<region>:<account>:key/<id>', or leave "
            "it out (an unencrypted topic)"
        ),
    ]
    assert one_problem(
        notifications(
            "topic_kms_key: 'arn:aws:kms:eu-west-1:111111111111:key/1234abcd-12ab-34cd-56ef-1234567890ab'\n"
        )
    ) == (
        "notifications: field 'topic_kms_key' = 'arn:aws:kms:eu-west-1:111111111111:key/1234abcd-12ab-34cd-56ef-"
        "1234567890ab': is set, but topic_arn is not (the app's own topic has its own key); use the ARN of the key "
        "that encrypts topic_arn, 'arn:aws:kms:<region>:<account>:key/<id>', or leave it out (an unencrypted topic)"
    )
