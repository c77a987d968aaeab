"""Resources every tenant pipeline uses: buckets, the ledger table and the alarm topic."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from aws_cdk import ArnFormat, Aws, CfnCondition, Duration, Fn, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from lambdas import contract
from pipeline_constructs import encryption, names, uploaders
from pipeline_constructs.uploaders import TenantUploaders, bucket_statements

#: How long a superseded landing-file version is kept (the landing bucket's lifecycle rule for
#: noncurrent versions). A file is always read from the version its event announced (Split
#: validates it, Register reads each chunk from it by a ranged GET), so an overwritten or
#: deleted file stays processable, resumable (`ops resume`) and visible to `ops reconcile` for
#: this long. It must outlive the longest a file's message can wait in its queue (14 days) and
#: gives an operator three months to resume a halted file; it matches how long Step Functions
#: keeps a closed execution. docs/operations.md, docs/design.md and docs/cost.md quote it.
LANDING_NONCURRENT_VERSION_DAYS = 90


@dataclass(frozen=True)
class SharedResourcesProps:
    """Settings of the shared resources (`SharedResources`): the alarm topic and its
    subscriptions, retention in the landing and work buckets, the tenants' uploaders and the
    shared customer-managed key."""

    #: Addresses subscribed to the alarm topic.
    alarm_emails: tuple[str, ...] = ()
    #: More subscriptions, as (protocol, endpoint): ``email``, ``https``, ``sqs`` (a queue ARN), ``lambda``.
    alarm_subscriptions: tuple[tuple[str, str], ...] = ()
    #: An existing topic that replaces the app's own (then no subscription: they belong where it is managed).
    alarm_topic_arn: str | None = None
    #: The key that encrypts that topic, granted to the closers (without one: the app's alarm-topic key).
    alarm_topic_key_arn: str | None = None
    #: Superseded landing-file versions are kept this long: the source of truth for replays and resumes.
    noncurrent_version_retention: Duration = field(
        default_factory=lambda: Duration.days(LANDING_NONCURRENT_VERSION_DAYS)
    )
    #: Chunks and manifests (``chunks/``) expire after the longest a message can wait in a queue.
    work_object_expiry: Duration = field(default_factory=lambda: Duration.days(14))
    #: Quarantined messages (``quarantine/``) are kept as long as the ledger keeps its history.
    quarantine_retention: Duration = field(default_factory=lambda: Duration.days(400))
    #: Per tenant, who may put files under its prefix, only through its access point (`uploaders.py`).
    uploaders: tuple[TenantUploaders, ...] = ()
    #: `encryption.kms_key` (``create`` or an ARN) for the buckets and the ledger; None: AWS-managed.
    kms_key: str | None = None


@dataclass(frozen=True)
class SharedRefs:
    """The shared resources a tenant's pipeline plugs into. A tenant stack imports them by
    fixed name or SSM parameter (`stacks.shared_refs`); a stack that holds `SharedResources`
    passes its own (`SharedResources.refs()`)."""

    landing_bucket: s3.IBucket
    work_bucket: s3.IBucket
    ledger_table: dynamodb.ITable
    alarm_topic: sns.ITopic
    alarm_topic_key: kms.IKey
    #: The bus that holds the tenant's two rules: its shard's bus with `routing.shards`.
    #: None: the account's default event bus.
    event_bus: events.IEventBus | None = None
    #: The ARN of the shared resources' customer-managed key (top-level `encryption`): the
    #: tenant's roles use it through S3 and DynamoDB. None: AWS-managed keys there.
    shared_kms_key_arn: str | None = None


class SharedResources(Construct):
    """Landing bucket, work bucket, access-log bucket, ledger table and alarm topic (the app's
    own with its key and subscriptions, or an existing one: `alarm_topic_arn`).

    ``data_key``: the customer-managed key of the buckets and the table (`kms_key`), or None.
    ``grant_upload(principals)``: what an uploader needs of that key."""

    def __init__(self, scope: Construct, construct_id: str, props: SharedResourcesProps) -> None:
        super().__init__(scope, construct_id)
        # Access logs are delivered under a bucket policy, not the legacy ACL (which
        # BUCKET_OWNER_ENFORCED forbids), whatever the enclosing app's feature flags.
        self.node.set_context("@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy", True)
        self.kms_key_setting = props.kms_key
        self.data_key = self._data_key(props.kms_key)
        # Every bucket, the table and the keys: RETAIN_ON_UPDATE_OR_DELETE (CloudFormation's
        # RetainExceptOnCreate) keeps them and their data when the stack is deleted, and deletes
        # them when the operation that created them rolls back, so that the retry of a failed
        # first deploy does not fail on a bucket of its fixed name left behind.

        self.access_logs_bucket = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(365))],
            removal_policy=RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
        )

        self.landing_bucket = self._bucket(
            "Landing",
            bucket_name=names.landing_bucket_name(Aws.ACCOUNT_ID, Aws.REGION),
            log_prefix="landing/",
            lifecycle=[
                s3.LifecycleRule(
                    noncurrent_version_expiration=props.noncurrent_version_retention,
                    abort_incomplete_multipart_upload_after=Duration.days(7),
                )
            ],
        )
        # EventBridge notifications through the CloudFormation property itself: the L2
        # `event_bridge_enabled` would add a custom-resource Lambda to do the same.
        landing = cast(s3.CfnBucket, self.landing_bucket.node.default_child)  # an L2 bucket's resource
        landing.notification_configuration = s3.CfnBucket.NotificationConfigurationProperty(
            event_bridge_configuration=s3.CfnBucket.EventBridgeConfigurationProperty(
                event_bridge_enabled=True
            )
        )

        # Uploaders put through their tenant's access point (its own policy, in the tenant's
        # stack): one statement delegates to them and one keeps tagged uploaders to them,
        # whatever the number of tenants (docs/security.md, "Uploaders").
        if any(tenant.principals for tenant in props.uploaders):
            for statement in bucket_statements(self.landing_bucket.bucket_arn, Aws.ACCOUNT_ID):
                self.landing_bucket.add_to_resource_policy(iam.PolicyStatement.from_json(statement))
        # ... and, with a key this app creates, may encrypt what they put with it.
        self.grant_upload([arn for tenant in props.uploaders for arn in tenant.principals])

        self.work_bucket = self._bucket(
            "Work",
            bucket_name=names.work_bucket_name(Aws.ACCOUNT_ID, Aws.REGION),
            log_prefix="work/",
            # One expiry per prefix (contract.CHUNKS_ROOT, QUARANTINE_ROOT); clean-ups bucket-wide.
            lifecycle=[
                s3.LifecycleRule(
                    id="ExpireChunks", prefix=contract.CHUNKS_ROOT, expiration=props.work_object_expiry
                ),
                s3.LifecycleRule(
                    id="ExpireQuarantine",
                    prefix=contract.QUARANTINE_ROOT,
                    expiration=props.quarantine_retention,
                ),
                s3.LifecycleRule(
                    id="CleanUp",
                    noncurrent_version_expiration=Duration.days(1),
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                ),
            ],
        )

        # The ledger: each tenant's position and the record of its files (lambdas/ledger/).
        self.ledger_table = dynamodb.Table(
            self,
            "LedgerTable",
            partition_key=dynamodb.Attribute(name="tenant", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="entry", type=dynamodb.AttributeType.STRING),
            time_to_live_attribute="expires_at",
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=(
                dynamodb.TableEncryption.AWS_MANAGED
                if self.data_key is None
                else dynamodb.TableEncryption.CUSTOMER_MANAGED
            ),
            encryption_key=self.data_key,
            removal_policy=RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
        )

        # CloudWatch alarms cannot publish to a topic encrypted with the AWS managed key,
        # so the topic has its own key that allows them. With an existing topic the tenants'
        # closers are granted its key, or (unencrypted) this one, kept for them.
        self.alarm_key: kms.Key | None = None
        if props.alarm_topic_arn is None or props.alarm_topic_key_arn is None:
            self.alarm_key = kms.Key(
                self,
                "AlarmTopicKey",
                description="Encrypts the ordered-ingest alarm topic",
                enable_key_rotation=True,
                removal_policy=RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
            )
            self.alarm_key.add_to_resource_policy(
                iam.PolicyStatement(
                    sid="AllowCloudWatchAlarmsToPublish",
                    principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                    actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                    resources=["*"],
                )
            )
        if props.alarm_topic_arn is not None:
            if props.alarm_emails or props.alarm_subscriptions:
                raise ValueError("subscriptions belong where an existing alarm topic is managed")
            self.alarm_topic: sns.ITopic = sns.Topic.from_topic_arn(self, "AlarmTopic", props.alarm_topic_arn)
        else:
            self.alarm_topic = sns.Topic(
                self,
                "AlarmTopic",
                display_name="Ordered ingest alarms",
                master_key=self.alarm_key,
                enforce_ssl=True,
            )
        #: The key the tenants' closers may use to publish (`alarm-topic-key-arn`).
        self.alarm_topic_key: kms.IKey = (
            self.alarm_key
            if self.alarm_key is not None
            # no key of its own only when an existing topic and its key are given
            else kms.Key.from_key_arn(self, "GivenAlarmTopicKey", cast(str, props.alarm_topic_key_arn))
        )
        endpoints = (*(("email", email) for email in props.alarm_emails), *props.alarm_subscriptions)
        for protocol, endpoint in endpoints:
            self.alarm_topic.add_subscription(self._subscription(protocol, endpoint))

    def _subscription(self, protocol: str, endpoint: str) -> sns.ITopicSubscription:
        """A subscription of the alarm topic. An SQS queue's policy is its owner's (an imported
        queue's is not changed here: docs/operations.md says what it must allow). A Lambda
        function in the deploying account and Region gets SNS's invoke permission from this
        stack, conditionally (the stack's account is known at deploy time only); one elsewhere
        needs it from its owner."""
        if protocol == "email":
            return subscriptions.EmailSubscription(endpoint)
        if protocol == "https":
            return subscriptions.UrlSubscription(endpoint, protocol=sns.SubscriptionProtocol.HTTPS)
        if protocol == "sqs":
            return subscriptions.SqsSubscription(
                sqs.Queue.from_queue_arn(self, f"Queue{self._slug(endpoint)}", endpoint)
            )
        assert protocol == "lambda", protocol
        slug = self._slug(endpoint)
        function = lambda_.Function.from_function_attributes(
            self, f"Function{slug}", function_arn=endpoint, skip_permissions=True
        )
        arn = Stack.of(self).split_arn(endpoint, ArnFormat.COLON_RESOURCE_NAME)
        here = CfnCondition(
            self,
            f"Function{slug}IsHere",
            expression=Fn.condition_and(
                Fn.condition_equals(arn.account, Aws.ACCOUNT_ID), Fn.condition_equals(arn.region, Aws.REGION)
            ),
        )
        permission = lambda_.CfnPermission(
            self,
            f"Function{slug}InvokedByAlarmTopic",
            action="lambda:InvokeFunction",
            function_name=endpoint,
            principal="sns.amazonaws.com",
            source_arn=self.alarm_topic.topic_arn,
        )
        permission.cfn_options.condition = here
        return subscriptions.LambdaSubscription(function)

    @staticmethod
    def _slug(endpoint: str) -> str:
        """A stable construct id part for an endpoint (its ARN's last part and a short hash)."""
        name = "".join(c for c in endpoint.rsplit(":", 1)[-1] if c.isalnum())[:40]
        return name + hashlib.sha256(endpoint.encode()).hexdigest()[:8].upper()

    def refs(self, event_bus: events.IEventBus | None = None) -> SharedRefs:
        """What a `TenantPipeline` in the same stack plugs into: these resources, and the rules on
        ``event_bus`` (default: the account's default bus, where the landing bucket's events arrive)."""
        return SharedRefs(
            landing_bucket=self.landing_bucket,
            work_bucket=self.work_bucket,
            ledger_table=self.ledger_table,
            alarm_topic=self.alarm_topic,
            alarm_topic_key=self.alarm_topic_key,
            event_bus=event_bus,
            shared_kms_key_arn=None if self.data_key is None else self.data_key.key_arn,
        )

    def grant_upload(self, principals: Sequence[str]) -> bool:
        """What uploaders (external systems putting files into the landing bucket, maybe from
        another account; role, user or account root ARNs) need of the landing bucket's
        customer-managed key: key-policy statements allowing `kms:GenerateDataKey` (a put) and
        `kms:Decrypt` (the parts of a multipart upload), through S3 and for the landing bucket
        only (`uploaders.key_statements`: roles and users by `aws:PrincipalArn`, so that the key
        policy stays valid while one of them does not exist). The uploaders get no
        `s3:GetObject`, so `kms:Decrypt` reads nothing. Their S3 permissions are their access
        points' policies; a cross-account uploader also needs the same KMS actions in its own IAM.

        Returns False when there is nothing this app can add: no customer-managed key (S3-managed
        encryption needs no grant) or a key given by ARN (its owner's policy must allow it)."""
        if self.data_key is None or not principals:
            return False
        # From the fixed name: the bucket's own ARN would make the key depend on the bucket
        # that depends on it.
        landing = Stack.of(self).format_arn(
            service="s3",
            region="",
            account="",
            resource=names.landing_bucket_name(Aws.ACCOUNT_ID, Aws.REGION),
        )
        added = [
            self.data_key.add_to_resource_policy(iam.PolicyStatement.from_json(statement))
            for statement in uploaders.key_statements(principals, encryption.via("s3"), landing)
        ]
        return all(result.statement_added for result in added)

    def _data_key(self, setting: str | None) -> kms.IKey | None:
        """The shared resources' key; a created one is published under its fixed SSM name for the
        tenant stacks (`encryption.shared_key_parameter()`)."""
        if setting is None:
            return None
        key = encryption.customer_key(
            self,
            "DataKey",
            setting,
            alias=encryption.shared_key_alias(),
            description="Encrypts the ordered-ingest landing and work buckets and the ledger table",
        )
        # The dead-letter queues of the shared stack's rules (unmatched uploads, forwarding to
        # the shard and catch-all buses), all named `ordered-ingest-...` (names.py); on a custom
        # bus a rule's ARN is rule/<bus>/<name>, and the buses are named so too.
        encryption.allow_rules(
            key,
            [
                Stack.of(self).format_arn(
                    service="events", resource="rule", resource_name=encryption.shared_rules()
                )
            ],
            sid="EventBridgeDeadLettersOfSharedRules",
            operator="ArnLike",
        )
        if setting == encryption.CREATE:
            ssm.StringParameter(
                self,
                "DataKeyArnParameter",
                parameter_name=encryption.shared_key_parameter(),
                string_value=key.key_arn,
                description="ARN of the ordered-ingest shared key (read by the tenant stacks)",
            )
        return key

    def _bucket(
        self, construct_id: str, *, bucket_name: str, log_prefix: str, lifecycle: list[s3.LifecycleRule]
    ) -> s3.Bucket:
        return s3.Bucket(
            self,
            construct_id,
            bucket_name=bucket_name,
            versioned=True,
            # With a customer-managed key, bucket keys: S3 asks KMS for a bucket-level key now
            # and then instead of a data key per object (fewer KMS requests, less cost).
            encryption=s3.BucketEncryption.S3_MANAGED if self.data_key is None else s3.BucketEncryption.KMS,
            encryption_key=self.data_key,
            bucket_key_enabled=True if self.data_key is not None else None,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=self.access_logs_bucket,
            server_access_logs_prefix=log_prefix,
            lifecycle_rules=lifecycle,
            removal_policy=RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
        )
