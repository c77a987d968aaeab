"""The tenants file's top-level blocks: who gets the alarms, routing, account limits,
deployment targets, and the whole file (`AppConfig`)."""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import ValidationInfo, field_validator

from lambdas import contract
from pipeline_constructs import routing
from pipeline_constructs.config.blocks import EncryptionConfig, listed
from pipeline_constructs.config.options import KMS_KEY_ARN_PATTERN, REGION_PATTERN, Model, matching, option
from pipeline_constructs.config.tenant import TenantConfig

EMAIL_PATTERN = r"^[^@\s]+@[^@\s]+\.[^@\s]+$"
#: The fix of a declared account quota.
_QUOTA = ": the account's quota (Service Quotas)"
QUALIFIER_FIX = (
    "use a short name of lowercase letters and digits that starts with a letter, e.g. 'staging' or "
    f"'ct1a2b3c' (at most {contract.MAX_QUALIFIER_LENGTH} characters), or leave it out (no qualifier)"
)

SQS_QUEUE_ARN_PATTERN = (
    r"^arn:aws[a-z-]*:sqs:(?P<region>[a-z0-9-]+):(?P<account>[0-9]{12}):[A-Za-z0-9_-]{1,80}(\.fifo)?$"
)
LAMBDA_FUNCTION_ARN_PATTERN = (
    r"^arn:aws[a-z-]*:lambda:(?P<region>[a-z0-9-]+):(?P<account>[0-9]{12}):function:"
    r"[A-Za-z0-9_-]{1,64}(:[A-Za-z0-9$_-]+)?$"
)
SNS_TOPIC_ARN_PATTERN = (
    r"^arn:aws[a-z-]*:sns:(?P<region>[a-z0-9-]+):(?P<account>[0-9]{12}):[A-Za-z0-9_-]{1,256}$"
)


class SubscriptionConfig(Model):
    """One subscription of the alarm topic (docs/operations.md, "Who gets the alarms")."""

    protocol: Literal["email", "https", "sqs", "lambda"] = option(
        description=(
            "`email`: an address, which must confirm (SNS e-mails a link). `https`: a URL that receives each "
            "notification as a POST (it must confirm the subscription by fetching the `SubscribeURL` of the first "
            "one; PagerDuty, Opsgenie and similar do). `sqs`: a standard queue's ARN; its queue policy, which "
            "belongs to the queue's owner, must allow `sns.amazonaws.com` `sqs:SendMessage` with `aws:SourceArn` "
            "the alarm topic's ARN (and its KMS key, if any, allow SNS); a queue of another account must also "
            "confirm the subscription. `lambda`: a function's ARN; in the deploying account the app grants SNS "
            "the invoke, a function of another account needs that grant (`aws lambda add-permission`) from its owner."
        )
    )
    endpoint: str = option(
        validate_default=True,
        fix=(
            "give the address (email), the https:// URL (https), the standard queue's ARN "
            "'arn:aws:sqs:<region>:<account>:<name>' (sqs) or the function's ARN "
            "'arn:aws:lambda:<region>:<account>:function:<name>' (lambda)"
        ),
        description=(
            "Where notifications go: the address (`email`), the `https://` URL (`https`), the queue's ARN "
            "(`arn:aws:sqs:<region>:<account>:<name>`) or the function's ARN "
            "(`arn:aws:lambda:<region>:<account>:function:<name>`)."
        ),
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoint_of_protocol(cls, endpoint: str, info: ValidationInfo) -> str:
        protocol = info.data.get("protocol")
        if protocol == "email":
            return matching(endpoint, EMAIL_PATTERN, "is not an email address")
        if protocol == "https":
            parts = urlsplit(endpoint)
            if parts.scheme != "https" or not parts.hostname:
                raise ValueError(
                    "is not an https:// URL (SNS would send the alarms unencrypted over http://)"
                )
            return endpoint
        if protocol == "sqs":
            matching(endpoint, SQS_QUEUE_ARN_PATTERN, "is not an SQS queue ARN")
            if endpoint.endswith(".fifo"):
                raise ValueError(
                    "is a FIFO queue: the alarm topic is a standard topic, which cannot deliver to it"
                )
            return endpoint
        if protocol == "lambda":
            return matching(endpoint, LAMBDA_FUNCTION_ARN_PATTERN, "is not a Lambda function ARN")
        return endpoint


class NotificationsConfig(Model):
    """Who is told when an alarm fires or a file fails: the subscriptions of the shared alarm
    topic, or a topic of your own. With none of them, alarms reach nobody (`cdk synth` warns)."""

    emails: list[str] = option(
        [],
        schema=listed(EMAIL_PATTERN),
        fix=("list email addresses such as 'oncall@example.com'"),
        description=(
            "Email addresses subscribed to the alarm topic (each confirms its subscription): the short form of "
            "`subscriptions` with `protocol: email`."
        ),
    )
    subscriptions: list[SubscriptionConfig] = option(
        [],
        description=(
            "Subscriptions of the alarm topic of any protocol: `email`, `https`, `sqs`, `lambda`. The topic's ARN is "
            "the shared stack's output `AlarmTopicArn` (`python -m ops status` shows it)."
        ),
    )
    topic_arn: str | None = option(
        None,
        schema={"anyOf": [{"type": "string", "pattern": SNS_TOPIC_ARN_PATTERN}, {"type": "null"}]},
        fix=(
            "use the ARN of a standard SNS topic, 'arn:aws:sns:<region>:<account>:<name>', or leave it out "
            "(the app's own alarm topic)"
        ),
        description=(
            "An existing SNS topic that gets every alarm and notification instead of the app's own topic (then not "
            "created; `emails` and `subscriptions` are refused: subscribe where that topic is managed). In the "
            "Region of the deployment (CloudWatch alarms publish to their own Region only); its topic policy must "
            "allow `cloudwatch.amazonaws.com` `sns:Publish` (and, from another account, the tenants' closer roles); "
            "if it is encrypted, `topic_kms_key` names its key."
        ),
    )
    topic_kms_key: str | None = option(
        None,
        schema={"anyOf": [{"type": "string", "pattern": KMS_KEY_ARN_PATTERN}, {"type": "null"}]},
        fix=(
            "use the ARN of the key that encrypts topic_arn, 'arn:aws:kms:<region>:<account>:key/<id>', "
            "or leave it out (an unencrypted topic)"
        ),
        description=(
            "With `topic_arn`: the ARN of the customer-managed KMS key that encrypts that topic (the tenants' closers "
            "are granted `kms:GenerateDataKey` and `kms:Decrypt` on it; its key policy must allow "
            "`cloudwatch.amazonaws.com` the same). Default (null): the topic is not encrypted."
        ),
    )

    @field_validator("emails")
    @classmethod
    def _emails(cls, emails: list[str]) -> list[str]:
        bad = [e for e in emails if not re.match(EMAIL_PATTERN, e)]
        if bad:
            raise ValueError(f"not an email address: {', '.join(bad)}")
        return emails

    @field_validator("topic_arn")
    @classmethod
    def _topic_arn(cls, topic_arn: str | None) -> str | None:
        if topic_arn is None:
            return None
        if topic_arn.endswith(".fifo"):
            raise ValueError("is a FIFO topic: CloudWatch alarms publish to standard topics only")
        return matching(topic_arn, SNS_TOPIC_ARN_PATTERN, "is not an SNS topic ARN")

    @field_validator("topic_kms_key")
    @classmethod
    def _topic_kms_key(cls, key: str | None, info: ValidationInfo) -> str | None:
        if key is None:
            return None
        if "topic_arn" in info.data and info.data["topic_arn"] is None:
            raise ValueError("is set, but topic_arn is not (the app's own topic has its own key)")
        return matching(
            key, KMS_KEY_ARN_PATTERN, "is not a KMS key ARN (an alias will not do: IAM names the key)"
        )

    @property
    def endpoints(self) -> tuple[tuple[str, str], ...]:
        """Every subscription as (protocol, endpoint): `emails` first, then `subscriptions`."""
        return (*(("email", e) for e in self.emails), *((s.protocol, s.endpoint) for s in self.subscriptions))

    @property
    def reach_nobody(self) -> bool:
        """No subscription and no topic of one's own: every alarm would reach nobody."""
        return self.topic_arn is None and not self.endpoints


#: The warning of a tenants file whose alarms would reach nobody (`AppConfig.notifications.reach_nobody`).
ALARMS_REACH_NOBODY_ID = "ordered-ingest:alarms-reach-nobody"
ALARMS_REACH_NOBODY = (
    "tenants.yaml: no notifications.emails, notifications.subscriptions or notifications.topic_arn: every alarm "
    "and failed-file notification would reach nobody; add an on-call address under notifications.emails, or "
    "see docs/operations.md#who-gets-the-alarms"
)


class RoutingConfig(Model):
    """Where the tenants' EventBridge rules live (docs/scaling.md, "Sharded routing")."""

    shards: int = option(
        0,
        ge=0,
        le=routing.MAX_SHARDS,
        fix=(
            f"use 0 (every rule on the default bus) or a number of shard event buses up to {routing.MAX_SHARDS}"
        ),
        description=(
            "`0`: every tenant's two rules on the account's default event bus (at most 149 tenants under the "
            "default quota of 300 rules per bus). N: on N shard event buses of the shared stack; the default bus "
            "then holds two forwarding rules per shard. Choose it once: changing it moves most tenants between buses."
        ),
    )
    rules_per_bus: int = option(
        routing.RULES_PER_BUS,
        ge=2,
        hint=": the account's 'Rules per event bus' quota",
        description=(
            'The account\'s "Rules per event bus" quota, for the shard buses: a shard bus that would need more '
            "(2 per tenant) is refused."
        ),
    )
    event_pattern_chars: int = option(
        routing.MAX_EVENT_PATTERN_CHARS,
        ge=256,
        hint=": the account's 'Event pattern size' quota in characters",
        description=(
            'The account\'s "Event pattern size" quota, in characters: a forwarding or catch-all pattern above it '
            "is refused."
        ),
    )


class AccountLimits(Model):
    """The account quotas synthesis checks the tenants against (it has no credentials: these
    are declared, AWS's defaults unless raised; declare the raised value after a quota increase;
    `python -m ops preflight` reads the real ones). Sources of the defaults: docs/scaling.md, "Account quotas"."""

    eventbridge_rules_per_bus: int | None = option(
        None,
        ge=1,
        hint=(
            " (Service Quotas: EventBridge, rules per event bus), or leave it out (AWS's default: 300; 100 in af-south-1 "
            "and eu-south-1)"
        ),
        description=(
            "EventBridge rules per event bus. Default (null): AWS's 300, 100 in af-south-1 and eu-south-1."
        ),
    )
    lambda_concurrent_executions: int = option(
        1000,
        ge=1,
        hint=_QUOTA,
        description=(
            "Lambda concurrent executions of the account in the Region (new accounts may have less)."
        ),
    )
    iam_roles: int = option(
        1000,
        ge=1,
        hint=_QUOTA,
        description=(
            "IAM roles of the account (4 per tenant; global to the account: every target in it shares them)."
        ),
    )
    cloudformation_stacks: int = option(
        2000, ge=1, hint=_QUOTA, description=("CloudFormation stacks of the account in the Region.")
    )
    state_machines: int = option(
        100_000,
        ge=1,
        hint=_QUOTA,
        description=("Step Functions state machines of the account in the Region."),
    )
    s3_access_points: int = option(
        10_000,
        ge=1,
        hint=_QUOTA,
        description=("S3 access points of the account in the Region (1 per tenant with `uploaders`)."),
    )


ACCOUNT_ID_PATTERN = r"^[0-9]{12}$"
TARGET_NAME_PATTERN = r"^[a-zA-Z][a-zA-Z0-9-]*$"


class TargetConfig(Model):
    """A deployment target: one account and Region, a CDK Stage of its own (docs/scaling.md, "Deployment targets")."""

    account: str = option(
        pattern=ACCOUNT_ID_PATTERN,
        mismatch="is not a 12-digit AWS account id",
        fix="quote the 12-digit account id, e.g. account: '111111111111'",
        description="The 12-digit account id, quoted (`'111111111111'`).",
    )
    region: str = option(
        pattern=REGION_PATTERN,
        mismatch="is not an AWS Region code",
        fix="use a Region code such as 'eu-west-1'",
        description="The Region code, e.g. `eu-west-1`.",
    )
    account_limits: AccountLimits = option(
        AccountLimits(),
        description=("Overrides of the top-level `account_limits` for this target, key by key."),
    )


class AppConfig(Model):
    """The whole tenants file, validated: the tenants with `defaults:` applied."""

    notifications: NotificationsConfig = option(
        NotificationsConfig(), description=("Who is told when an alarm fires.")
    )
    tenants: tuple[TenantConfig, ...] = option(
        min_length=1,
        description=("The tenants, one entry each; `defaults:` applies under each entry's own keys."),
    )
    routing: RoutingConfig = option(RoutingConfig(), description="Where the tenants' EventBridge rules live.")
    account_limits: AccountLimits = option(
        AccountLimits(), description=("The account quotas `cdk synth` checks the tenants against.")
    )
    targets: dict[str, TargetConfig] = option(
        default_factory=dict,
        description=(
            "Deployment targets by name (letters, digits and hyphens, starting with a letter), each one account and "
            "Region and a CDK Stage of its own; every tenant then names its `target`. Two targets in the same "
            "account and Region, or a target without tenants, are refused. Default (none): one deployment to the "
            "account and Region of `cdk deploy`."
        ),
    )
    encryption: EncryptionConfig | None = option(
        None,
        description=(
            "The shared resources' customer-managed key: the landing and work buckets (SSE-KMS, bucket keys on), "
            "the ledger table, the unmatched-uploads log group and the shared stack's dead-letter queues; `create` "
            "makes it in the shared stack (alias `alias/ordered-ingest`). Default (null): S3-managed keys for the "
            "buckets, the AWS managed key for the ledger table, CloudWatch Logs' own encryption."
        ),
    )
    qualifier: str | None = option(
        None,
        pattern=contract.QUALIFIER_PATTERN,
        min_length=1,
        fix=QUALIFIER_FIX,
        max_length=contract.MAX_QUALIFIER_LENGTH,
        description=(
            "A name that starts every name the app gives what is fixed per account and Region (stacks, buckets, "
            "queues, functions, state machines, rules, event buses, alarms, SSM parameters, KMS aliases, log groups, "
            "access points, the dashboards, the metric namespace): `<qualifier>-OrderedIngest-Shared`, "
            "`<qualifier>-acme-controller`, `alias/<qualifier>-ordered-ingest`, `/<qualifier>-ordered-ingest/...`, so "
            "that a second copy of the app (a staging copy, the cloud test's) deploys beside the first in the same "
            "account and Region. Lowercase letters and digits, starting with a letter, at most "
            f"{contract.MAX_QUALIFIER_LENGTH} characters (the landing bucket's name is the longest); each tenant id "
            "then has the qualifier's length plus one fewer characters. `python -m ops --qualifier <qualifier>` works "
            "on that copy. (Tenant `acme` of the copy and a tenant `<qualifier>-acme` of an unqualified deployment "
            "would share their names: do not give both.) Default (null): no qualifier, the names as documented."
        ),
    )

    @property
    def tenants_without_credentials(self) -> tuple[str, ...]:
        """The ids of the tenants whose register function sends no credentials (`sink.auth` of type
        `none`, their own or inherited from `defaults`), in file order, for a summary to show."""
        return tuple(tenant.id for tenant in self.tenants if tenant.sink.auth.type == "none")

    def limits_of(self, target: str) -> AccountLimits:
        """The top-level limits with the target's own overrides."""
        own = self.targets[target].account_limits
        return self.account_limits.model_copy(update=own.model_dump(exclude_unset=True))
