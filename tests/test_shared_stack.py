"""The shared stack: buckets, ledger table and alarm topic, with their protections."""

from __future__ import annotations

import json
import re

import pytest
from aws_cdk.assertions import Match, Template

from tests.conftest import cfn_lint_findings


def buckets(template: Template) -> dict[str, dict]:
    return template.find_resources("AWS::S3::Bucket")


def bucket_named(template: Template, fragment: str) -> dict:
    (bucket,) = [
        b["Properties"]
        for b in buckets(template).values()
        if fragment in str(b["Properties"].get("BucketName", ""))
    ]
    return bucket


def test_landing_bucket_is_versioned_sends_events_to_eventbridge_and_keeps_old_versions_for_a_while(
    shared_template,
):
    landing = bucket_named(shared_template, "ordered-ingest-landing-")
    assert landing["VersioningConfiguration"] == {"Status": "Enabled"}
    assert landing["NotificationConfiguration"] == {"EventBridgeConfiguration": {"EventBridgeEnabled": True}}
    (rule,) = landing["LifecycleConfiguration"]["Rules"]
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 90}
    assert "ExpirationInDays" not in rule, (
        "the landing bucket is the source of truth: current files never expire"
    )


def test_no_custom_resource_is_needed_for_bucket_notifications(shared_template):
    assert not shared_template.find_resources("Custom::S3BucketNotifications")
    assert not shared_template.find_resources("AWS::Lambda::Function")


def test_work_bucket_expires_each_prefix_on_its_own_and_cleans_up_bucket_wide(shared_template):
    """Chunks go after 14 days (the longest a message waits), quarantined messages after 400 (the
    ledger's retention); old versions and abandoned uploads anywhere after a day."""
    work = bucket_named(shared_template, "ordered-ingest-work-")
    rules = {r["Id"]: r for r in work["LifecycleConfiguration"]["Rules"]}
    assert rules["ExpireChunks"]["Prefix"] == "chunks/" and rules["ExpireChunks"]["ExpirationInDays"] == 14
    assert rules["ExpireQuarantine"]["Prefix"] == "quarantine/"
    assert rules["ExpireQuarantine"]["ExpirationInDays"] == 400
    cleanup = rules["CleanUp"]
    assert "Prefix" not in cleanup and "ExpirationInDays" not in cleanup
    assert cleanup["NoncurrentVersionExpiration"] == {"NoncurrentDays": 1}
    assert cleanup["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    assert set(rules) == {"ExpireChunks", "ExpireQuarantine", "CleanUp"}


def test_ops_finds_the_work_bucket_from_an_output(shared_template):
    template = shared_template.to_json()
    (work_id,) = [
        k
        for k, r in template["Resources"].items()
        if r["Type"] == "AWS::S3::Bucket"
        and "ordered-ingest-work-" in json.dumps(r["Properties"].get("BucketName"))
    ]
    assert template["Outputs"]["WorkBucketName"]["Value"] == {"Ref": work_id}


def test_every_bucket_is_encrypted_private_and_logged(shared_template):
    for logical_id, bucket in buckets(shared_template).items():
        props = bucket["Properties"]
        assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0][
            "ServerSideEncryptionByDefault"
        ] == {"SSEAlgorithm": "AES256"}, logical_id
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }, logical_id
        assert (bucket["DeletionPolicy"], bucket["UpdateReplacePolicy"]) == (
            "RetainExceptOnCreate",
            "Retain",
        ), logical_id
        if "LoggingConfiguration" not in props:
            assert "AccessLogs" in logical_id, f"{logical_id} has no access logging"


def test_every_bucket_policy_denies_requests_without_tls(shared_template):
    policies = shared_template.find_resources("AWS::S3::BucketPolicy")
    assert len(policies) == 3
    for policy in policies.values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        assert any(
            s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
            for s in statements
        )


def test_ledger_table_is_on_demand_with_point_in_time_recovery_and_expiring_history(shared_template):
    shared_template.has_resource(
        "AWS::DynamoDB::Table",
        {
            "Properties": {
                "KeySchema": [
                    {"AttributeName": "tenant", "KeyType": "HASH"},
                    {"AttributeName": "entry", "KeyType": "RANGE"},
                ],
                "TimeToLiveSpecification": {"AttributeName": "expires_at", "Enabled": True},
                "BillingMode": "PAY_PER_REQUEST",
                "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
                "SSESpecification": {"SSEEnabled": True},
            },
            "DeletionPolicy": "RetainExceptOnCreate",
            "UpdateReplacePolicy": "Retain",
        },
    )


def test_alarm_topic_is_encrypted_with_a_rotated_key_that_cloudwatch_may_use(shared_template):
    (key_id,) = shared_template.find_resources("AWS::KMS::Key").keys()
    shared_template.has_resource_properties(
        "AWS::KMS::Key",
        {
            "EnableKeyRotation": True,
            "KeyPolicy": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Principal": {"Service": "cloudwatch.amazonaws.com"},
                                "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
                            }
                        )
                    ]
                )
            },
        },
    )
    shared_template.has_resource_properties(
        "AWS::SNS::Topic", {"KmsMasterKeyId": {"Fn::GetAtt": [key_id, "Arn"]}}
    )
    shared_template.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            },
        },
    )


def test_no_email_subscription_unless_configured(shared_template):
    assert not shared_template.find_resources("AWS::SNS::Subscription")


def test_email_subscriptions_come_from_tenants_yaml(tmp_path):
    from aws_cdk import App

    from pipeline_constructs.config import parse_config
    from pipeline_constructs.stacks import SharedStack

    config = parse_config(
        "notifications: {emails: [oncall@example.com, lead@example.com]}\n"
        "tenants: [{id: acme, prefix: a/, sink: {url: 'https://core.example.com', auth: {type: none}}}]\n"
    )
    template = Template.from_stack(SharedStack(App(outdir=str(tmp_path)), config))
    subscriptions = template.find_resources("AWS::SNS::Subscription")
    assert sorted(s["Properties"]["Endpoint"] for s in subscriptions.values()) == [
        "lead@example.com",
        "oncall@example.com",
    ]
    assert {s["Properties"]["Protocol"] for s in subscriptions.values()} == {"email"}


def shared_stack_of(notifications: str, tmp_path, *, head: str = "") -> Template:
    """The shared stack of a one-tenant file with this `notifications:` block."""
    from aws_cdk import App

    from pipeline_constructs.config import parse_config
    from pipeline_constructs.stacks import SharedStack

    config = parse_config(
        f"{head}notifications: {notifications}\n"
        "tenants: [{id: acme, prefix: a/, sink: {url: 'https://core.example.com', auth: {type: none}}}]\n"
    )
    return Template.from_stack(SharedStack(App(outdir=str(tmp_path)), config))


QUEUE = "arn:aws:sqs:eu-west-1:111111111111:alarm-inbox"
FUNCTION = "arn:aws:lambda:eu-west-1:222222222222:function:alarm-to-chat"
TOPIC = "arn:aws:sns:eu-west-1:333333333333:central-alarms"
TOPIC_KEY = "arn:aws:kms:eu-west-1:333333333333:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def test_every_kind_of_subscription_from_tenants_yaml_subscribes_the_alarm_topic(tmp_path):
    """GIVEN an address in `emails` and an https, sqs and lambda subscription THEN each is a
    subscription of the app's topic; the queue's policy is left to its owner (no QueuePolicy,
    which would replace theirs); the function gets SNS's invoke only where it can be granted:
    in the deploying account and Region (a condition, as the account is known at deploy time)."""
    template = shared_stack_of(
        "{emails: [oncall@example.com], subscriptions: [{protocol: https, endpoint: 'https://alerts.example.com/sns'}, "
        f"{{protocol: sqs, endpoint: '{QUEUE}'}}, {{protocol: lambda, endpoint: '{FUNCTION}'}}]}}",
        tmp_path,
    )
    (topic,) = template.find_resources("AWS::SNS::Topic")
    subscriptions = template.find_resources("AWS::SNS::Subscription").values()
    assert sorted((s["Properties"]["Protocol"], s["Properties"]["Endpoint"]) for s in subscriptions) == [
        ("email", "oncall@example.com"),
        ("https", "https://alerts.example.com/sns"),
        ("lambda", FUNCTION),
        ("sqs", QUEUE),
    ]
    assert all(s["Properties"]["TopicArn"] == {"Ref": topic} for s in subscriptions)
    assert "alarm-inbox" not in json.dumps(template.find_resources("AWS::SQS::QueuePolicy"))
    (permission,) = template.find_resources("AWS::Lambda::Permission").values()
    assert permission["Properties"] == {
        "Action": "lambda:InvokeFunction",
        "FunctionName": FUNCTION,
        "Principal": "sns.amazonaws.com",
        "SourceArn": {"Ref": topic},
    }
    assert template.to_json()["Conditions"][permission["Condition"]] == {
        "Fn::And": [
            {"Fn::Equals": ["222222222222", {"Ref": "AWS::AccountId"}]},
            {"Fn::Equals": ["eu-west-1", {"Ref": "AWS::Region"}]},
        ]
    }


def test_the_alarm_topic_arn_is_an_output_with_a_stable_name_and_no_export(shared_template):
    (topic,) = shared_template.find_resources("AWS::SNS::Topic")
    assert shared_template.to_json()["Outputs"]["AlarmTopicArn"] == {
        "Description": "Where every alarm and failed-file notification is published: subscribe here (shown by ops "
        "status)",
        "Value": {"Ref": topic},
    }


def tenants_parameter(template: Template, name: str) -> object:
    (parameter,) = [
        p["Properties"]["Value"]
        for p in template.find_resources("AWS::SSM::Parameter").values()
        if p["Properties"]["Name"].endswith(f"/{name}")
    ]
    return parameter


def test_an_existing_topic_replaces_the_apps_own_for_every_alarm_and_notice(tmp_path):
    """GIVEN `notifications.topic_arn` and its key THEN the app creates no topic and no topic key:
    the tenants read the given topic and key from the shared parameters (their alarms and
    closers publish there), the shared stack's own alarms notify it, and the output names it."""
    template = shared_stack_of(f"{{topic_arn: '{TOPIC}', topic_kms_key: '{TOPIC_KEY}'}}", tmp_path)
    assert template.find_resources("AWS::SNS::Topic") == {}
    assert template.find_resources("AWS::SNS::Subscription") == {}
    assert [k for k in template.find_resources("AWS::KMS::Key") if "AlarmTopicKey" in k] == []
    assert tenants_parameter(template, "alarm-topic-arn") == TOPIC
    assert tenants_parameter(template, "alarm-topic-key-arn") == TOPIC_KEY
    alarms = template.find_resources("AWS::CloudWatch::Alarm").values()
    assert alarms and all(a["Properties"]["AlarmActions"] == [TOPIC] for a in alarms)
    assert template.to_json()["Outputs"]["AlarmTopicArn"]["Value"] == TOPIC


def test_an_existing_unencrypted_topic_keeps_the_apps_topic_key_for_the_closers_grant(tmp_path):
    template = shared_stack_of(f"{{topic_arn: '{TOPIC}'}}", tmp_path)
    (key,) = [k for k in template.find_resources("AWS::KMS::Key") if "AlarmTopicKey" in k]
    assert tenants_parameter(template, "alarm-topic-key-arn") == {"Fn::GetAtt": [key, "Arn"]}


@pytest.mark.parametrize(
    "notifications",
    [
        (
            "{emails: [oncall@example.com], subscriptions: [{protocol: https, endpoint: 'https://alerts.example.com/sns'}, "
            f"{{protocol: sqs, endpoint: '{QUEUE}'}}, {{protocol: lambda, endpoint: '{FUNCTION}'}}]}}"
        ),
        f"{{topic_arn: '{TOPIC}', topic_kms_key: '{TOPIC_KEY}'}}",
    ],
    ids=["subscriptions", "existing-topic"],
)
@pytest.mark.slow  # cfn-lint or synthesis over whole apps: make test (make test-fast runs tests/test_user_tenants.py)
def test_every_kind_of_notification_synthesizes_cdk_nag_and_cfn_lint_clean(notifications, tmp_path):
    from tests.conftest import synthesize

    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(
        f"notifications: {notifications}\n"
        "tenants: [{id: acme, prefix: a/, sink: {url: 'https://core.example.com', auth: {type: none}}}]\n"
    )
    app = synthesize(tenants, tmp_path / "cdk.out")  # cdk-nag runs in the synth
    (nag,) = [r for r in app.validation_report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert nag["conclusion"] == "success" and nag["violations"] == []
    for name, template in app.templates.items():
        assert cfn_lint_findings(template) == [], name


def warnings_of(outdir) -> dict[str, list[str]]:
    """The warnings of each stack of an assembly, as `cdk synth` prints them."""
    manifest = json.loads((outdir / "manifest.json").read_text())
    found = {}
    for name, artifact in manifest["artifacts"].items():
        if artifact["type"] != "aws:cloudformation:stack":
            continue
        metadata = artifact.get("metadata") or {}
        if "additionalMetadataFile" in artifact:  # where the CDK writes it since 2.170
            metadata = json.loads((outdir / artifact["additionalMetadataFile"]).read_text())
        found[name] = [
            entry["data"]
            for entries in metadata.values()
            for entry in entries
            if entry["type"] == "aws:cdk:warning"
        ]
    return found


def test_synth_warns_once_on_the_shared_stack_when_alarms_reach_nobody(synthesized):
    """GIVEN the tests' file (`emails: []`, no subscription, no topic) THEN exactly one warning,
    on the shared stack, naming the fix; none on the tenant stacks (tests/test_app.py checks that
    the CDK CLI prints it once)."""
    from pipeline_constructs.config import ALARMS_REACH_NOBODY

    found = {
        name: [w for w in warnings if ALARMS_REACH_NOBODY in w]
        for name, warnings in warnings_of(synthesized.outdir).items()
    }
    assert {name: len(w) for name, w in found.items() if w} == {"OrderedIngest-Shared": 1}
    assert (
        "notifications.emails" in ALARMS_REACH_NOBODY
        and "docs/operations.md#who-gets-the-alarms" in ALARMS_REACH_NOBODY
    )


def test_no_warning_when_someone_gets_the_alarms(tmp_path):
    from aws_cdk import App

    from pipeline_constructs.config import parse_config
    from pipeline_constructs.stacks import SharedStack

    for index, notifications in enumerate(
        (
            "{emails: [oncall@example.com]}",
            f"{{subscriptions: [{{protocol: sqs, endpoint: '{QUEUE}'}}]}}",
            f"{{topic_arn: '{TOPIC}'}}",
        )
    ):
        app = App(outdir=str(tmp_path / str(index)))
        SharedStack(
            app,
            parse_config(
                f"notifications: {notifications}\n"
                "tenants: [{id: a, prefix: a/, sink: {url: 'https://c.example.com', auth: {type: none}}}]\n"
            ),
        )
        app.synth()
        assert warnings_of(tmp_path / str(index)) == {"OrderedIngest-Shared": []}, notifications


# --- uploads outside every tenant prefix -------------------------------------------------------


def unmatched_rule(template: Template) -> dict:
    (rule,) = template.find_resources(
        "AWS::Events::Rule", {"Properties": {"Name": "ordered-ingest-unmatched-uploads"}}
    ).values()
    return rule["Properties"]


def test_unmatched_rule_catches_object_created_in_the_landing_bucket_outside_every_tenant_prefix(
    shared_template,
):
    pattern = unmatched_rule(shared_template)["EventPattern"]
    assert pattern["source"] == ["aws.s3"] and pattern["detail-type"] == ["Object Created"]
    (landing_id,) = [
        k
        for k, b in buckets(shared_template).items()
        if "ordered-ingest-landing-" in str(b["Properties"].get("BucketName"))
    ]
    assert pattern["detail"]["bucket"] == {"name": [{"Ref": landing_id}]}
    # every tenant of tenants.yaml (three), in one anything-but: a key under none of them matches
    assert pattern["detail"]["object"]["key"] == [
        {"anything-but": {"prefix": ["acme/", "globex/", "initech/incoming/"]}}
    ]


def test_unmatched_rule_logs_to_its_log_group_retries_a_day_and_dead_letters(shared_template):
    (target,) = unmatched_rule(shared_template)["Targets"]
    (group_id,) = shared_template.find_resources(
        "AWS::Logs::LogGroup", {"Properties": {"LogGroupName": "/ordered-ingest/unmatched-uploads"}}
    ).keys()
    arn = target["Arn"]["Fn::Join"][1]
    assert arn[-2:] == [":log-group:", {"Ref": group_id}], "EventBridge wants the log group ARN without ':*'"
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 24 * 3600}
    (dlq_id,) = shared_template.find_resources(
        "AWS::SQS::Queue", {"Properties": {"QueueName": "ordered-ingest-unmatched-uploads-dlq"}}
    ).keys()
    assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [dlq_id, "Arn"]}}
    shared_template.has_resource_properties(
        "AWS::SQS::QueuePolicy",
        {
            "Queues": [{"Ref": dlq_id}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
                        ),
                        Match.object_like(
                            {
                                "Effect": "Allow",
                                "Principal": {"Service": "events.amazonaws.com"},
                                "Action": "sqs:SendMessage",
                            }
                        ),
                    ]
                )
            },
        },
    )


def test_one_statement_lets_every_catch_all_rule_dead_letter_whatever_the_number_of_buses(shared_template):
    """A statement per rule passed SQS's 20 statements per queue policy with many catch-all
    buses; one ArnLike covers the default bus's rule and each catch-all bus's rule, and no
    other app's rule."""
    (dlq_id,) = shared_template.find_resources(
        "AWS::SQS::Queue", {"Properties": {"QueueName": "ordered-ingest-unmatched-uploads-dlq"}}
    ).keys()
    (policy,) = [
        p["Properties"]["PolicyDocument"]
        for p in shared_template.find_resources("AWS::SQS::QueuePolicy").values()
        if p["Properties"]["Queues"] == [{"Ref": dlq_id}]
    ]
    (allow,) = [s for s in policy["Statement"] if s["Effect"] == "Allow"]
    assert allow["Condition"] == {
        "ArnLike": {
            "aws:SourceArn": {
                "Fn::Join": [
                    "",
                    [
                        "arn:",
                        {"Ref": "AWS::Partition"},
                        ":events:",
                        {"Ref": "AWS::Region"},
                        ":",
                        {"Ref": "AWS::AccountId"},
                        ":rule/ordered-ingest-unmatched-*",
                    ],
                ]
            }
        }
    }


def test_unmatched_log_group_keeps_three_months_and_lets_eventbridge_write(shared_template):
    ((group_id, group),) = shared_template.find_resources(
        "AWS::Logs::LogGroup", {"Properties": {"LogGroupName": "/ordered-ingest/unmatched-uploads"}}
    ).items()
    assert group["Properties"]["RetentionInDays"] == 90 and group["DeletionPolicy"] == "RetainExceptOnCreate"
    (policy,) = shared_template.find_resources("AWS::Logs::ResourcePolicy").values()
    document = "".join(
        p if isinstance(p, str) else "<arn>" for p in policy["Properties"]["PolicyDocument"]["Fn::Join"][1]
    )
    assert '"Principal":{"Service":"events.amazonaws.com"}' in document
    assert '"Action":["logs:CreateLogStream","logs:PutLogEvents"]' in document
    assert {"Fn::GetAtt": [group_id, "Arn"]} in policy["Properties"]["PolicyDocument"]["Fn::Join"][1]


def test_unmatched_uploads_are_counted_by_a_metric_filter_and_alarmed(shared_template):
    from lambdas import contract

    (group_id,) = shared_template.find_resources(
        "AWS::Logs::LogGroup", {"Properties": {"LogGroupName": "/ordered-ingest/unmatched-uploads"}}
    ).keys()
    shared_template.has_resource_properties(
        "AWS::Logs::MetricFilter",
        {
            "LogGroupName": {"Ref": group_id},
            "FilterPattern": "",
            "MetricTransformations": [
                {
                    "MetricName": "UnmatchedUploads",
                    "MetricNamespace": contract.METRIC_NAMESPACE,
                    "MetricValue": "1",
                }
            ],
        },
    )
    alarms = {
        a["Properties"]["AlarmName"]: a["Properties"]
        for a in shared_template.find_resources("AWS::CloudWatch::Alarm").values()
    }
    alarm = alarms["ordered-ingest-unmatched-uploads"]
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"], alarm["Threshold"]) == (
        "OrderedIngest",
        "UnmatchedUploads",
        "Sum",
        1,
    )
    assert "First: python -m ops status" in alarm["AlarmDescription"]
    assert "Runbook: docs/operations.md#unmatched-uploads" in alarm["AlarmDescription"]
    assert (
        alarms["ordered-ingest-unmatched-uploads-dlq"]["MetricName"] == "ApproximateNumberOfMessagesVisible"
    )
    for props in alarms.values():
        assert props["AlarmActions"] and props["TreatMissingData"] == "notBreaching"


def test_stack_output_names_the_unmatched_uploads_log_group_for_ops(shared_template):
    outputs = shared_template.to_json()["Outputs"]
    assert outputs["UnmatchedUploadsLogGroupName"]["Value"] == "/ordered-ingest/unmatched-uploads"


def test_with_one_tenant_the_unmatched_rule_excludes_its_prefix(tmp_path):
    from aws_cdk import App

    from pipeline_constructs.config import parse_config
    from pipeline_constructs.stacks import SharedStack

    config = parse_config(
        "tenants: [{id: acme, prefix: in/acme/, sink: {url: 'https://core.example.com', auth: {type: none}}}]\n"
    )
    template = Template.from_stack(SharedStack(App(outdir=str(tmp_path)), config))
    assert unmatched_rule(template)["EventPattern"]["detail"]["object"]["key"] == [
        {"anything-but": {"prefix": "in/acme/"}}
    ]


def test_fails_when_the_unmatched_uploads_catch_all_gets_no_tenant_prefix(tmp_path):
    from aws_cdk import App, Stack

    from pipeline_constructs.shared import SharedResources, SharedResourcesProps
    from pipeline_constructs.unmatched import UnmatchedUploads, UnmatchedUploadsProps

    stack = Stack(App(outdir=str(tmp_path)), "S")
    shared = SharedResources(stack, "Shared", SharedResourcesProps())
    with pytest.raises(ValueError) as raised:
        UnmatchedUploads(stack, "U", UnmatchedUploadsProps(shared.landing_bucket, [], shared.alarm_topic))
    assert str(raised.value) == (
        "UnmatchedUploads needs at least one tenant prefix; without tenants every upload is unmatched"
    )


def test_landing_noncurrent_versions_outlive_the_queue_and_the_docs_quote_the_same_window(shared_template):
    """GIVEN the named retention of superseded landing versions WHEN the shared stack is
    synthesized THEN its lifecycle rule keeps them exactly that long, longer than any file's
    message can wait (a queued file reads its pinned version when it starts), and every doc that
    states the window states this number."""
    from pipeline_constructs.intake import QUEUE_RETENTION
    from pipeline_constructs.shared import LANDING_NONCURRENT_VERSION_DAYS
    from tests.conftest import ROOT

    landing = bucket_named(shared_template, "ordered-ingest-landing-")
    (rule,) = landing["LifecycleConfiguration"]["Rules"]
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": LANDING_NONCURRENT_VERSION_DAYS}
    assert QUEUE_RETENTION.to_days() < LANDING_NONCURRENT_VERSION_DAYS
    for doc in ("docs/operations.md", "docs/cost.md"):
        text = (ROOT / doc).read_text()
        assert "LANDING_NONCURRENT_VERSION_DAYS" in text, doc
        stated = set(re.findall(r"LANDING_NONCURRENT_VERSION_DAYS`?,? (\d+) days", text))
        assert stated == {str(LANDING_NONCURRENT_VERSION_DAYS)}, (doc, stated)
