"""The shared stack: buckets, ledger table and alarm topic, with their protections."""

from __future__ import annotations

from aws_cdk.assertions import Match, Template


def buckets(template: Template) -> dict[str, dict]:
    return template.find_resources("AWS::S3::Bucket")


def bucket_named(template: Template, fragment: str) -> dict:
    (bucket,) = [
        b["Properties"] for b in buckets(template).values()
        if fragment in str(b["Properties"].get("BucketName", ""))
    ]
    return bucket


def test_landing_bucket_is_versioned_sends_events_to_eventbridge_and_keeps_old_versions_for_a_while(shared_template):
    landing = bucket_named(shared_template, "ordered-ingest-landing-")
    assert landing["VersioningConfiguration"] == {"Status": "Enabled"}
    assert landing["NotificationConfiguration"] == {"EventBridgeConfiguration": {"EventBridgeEnabled": True}}
    (rule,) = landing["LifecycleConfiguration"]["Rules"]
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 90}
    assert "ExpirationInDays" not in rule, "the landing bucket is the source of truth: current files never expire"


def test_no_custom_resource_is_needed_for_bucket_notifications(shared_template):
    assert not shared_template.find_resources("Custom::S3BucketNotifications")
    assert not shared_template.find_resources("AWS::Lambda::Function")


def test_work_bucket_expires_chunk_manifests(shared_template):
    work = bucket_named(shared_template, "ordered-ingest-work-")
    (rule,) = work["LifecycleConfiguration"]["Rules"]
    assert rule["ExpirationInDays"] == 14


def test_every_bucket_is_encrypted_private_and_logged(shared_template):
    for logical_id, bucket in buckets(shared_template).items():
        props = bucket["Properties"]
        assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
            "SSEAlgorithm": "AES256"
        }, logical_id
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True,
        }, logical_id
        assert bucket["DeletionPolicy"] == "Retain", logical_id
        if "LoggingConfiguration" not in props:
            assert "AccessLogs" in logical_id, f"{logical_id} has no access logging"


def test_every_bucket_policy_denies_requests_without_tls(shared_template):
    policies = shared_template.find_resources("AWS::S3::BucketPolicy")
    assert len(policies) == 3
    for policy in policies.values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        assert any(
            s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in statements
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
            "DeletionPolicy": "Retain",
        },
    )


def test_alarm_topic_is_encrypted_with_a_rotated_key_that_cloudwatch_may_use(shared_template):
    (key_id,) = shared_template.find_resources("AWS::KMS::Key").keys()
    shared_template.has_resource_properties("AWS::KMS::Key", {
        "EnableKeyRotation": True,
        "KeyPolicy": {"Statement": Match.array_with([Match.object_like({
            "Principal": {"Service": "cloudwatch.amazonaws.com"},
            "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
        })])},
    })
    shared_template.has_resource_properties("AWS::SNS::Topic", {"KmsMasterKeyId": {"Fn::GetAtt": [key_id, "Arn"]}})
    shared_template.has_resource_properties("AWS::SNS::TopicPolicy", {
        "PolicyDocument": {"Statement": Match.array_with([Match.object_like({
            "Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        })])},
    })


def test_no_email_subscription_unless_configured(shared_template):
    assert not shared_template.find_resources("AWS::SNS::Subscription")


def test_email_subscriptions_come_from_tenants_yaml(tmp_path):
    from aws_cdk import App

    from pipeline_constructs.config import parse_config
    from pipeline_constructs.stacks import SharedStack

    config = parse_config(
        "notifications: {emails: [oncall@example.com, lead@example.com]}\n"
        "tenants: [{id: acme, prefix: a/, sink: {url: 'https://core.example.com'}}]\n"
    )
    template = Template.from_stack(SharedStack(App(outdir=str(tmp_path)), config))
    subscriptions = template.find_resources("AWS::SNS::Subscription")
    assert sorted(s["Properties"]["Endpoint"] for s in subscriptions.values()) == [
        "lead@example.com", "oncall@example.com",
    ]
    assert {s["Properties"]["Protocol"] for s in subscriptions.values()} == {"email"}
