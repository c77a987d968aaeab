"""AWS's deploy-time limits: each with its value, unit and documentation page, the characters
names may have, and the fix of a violation that follows from the tenants file."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline_constructs import routing

_CFN = "https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cloudformation-limits.html"
_IAM = "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html"
_S3_POLICY = "https://docs.aws.amazon.com/AmazonS3/latest/userguide/add-bucket-policy.html"
_S3_NAMES = "https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html"
_S3_AP = "https://docs.aws.amazon.com/AmazonS3/latest/userguide/access-points-restrictions-limitations-naming-rules.html"
_SQS_POLICY = (
    "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-policies.html"
)
_SQS_QUEUES = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-queues.html"
_SNS = "https://docs.aws.amazon.com/general/latest/gr/sns.html"
_SNS_TOPIC = "https://docs.aws.amazon.com/sns/latest/api/API_CreateTopic.html"
_KMS = "https://docs.aws.amazon.com/kms/latest/developerguide/resource-limits.html"
_KMS_ALIAS = "https://docs.aws.amazon.com/kms/latest/APIReference/API_CreateAlias.html"
_LAMBDA = "https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html"
_LAMBDA_API = "https://docs.aws.amazon.com/lambda/latest/api/API_CreateFunction.html"
_LAMBDA_VPC = "https://docs.aws.amazon.com/lambda/latest/dg/API_VpcConfig.html"
_SFN = "https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html"
_SFN_API = "https://docs.aws.amazon.com/step-functions/latest/apireference/API_CreateStateMachine.html"
_EB = "https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-quota.html"
_EB_RULE = "https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutRule.html"
_EB_BUS = "https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_CreateEventBus.html"
_CW_ALARM = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html"
_CW_ALARM_LIMITS = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-limits.html"
_CW_QUOTAS = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch_limits.html"
_CW_DASHBOARD = (
    "https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-cloudwatch-dashboard.html"
)
_LOGS = "https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_CreateLogGroup.html"
_LOGS_POLICY = (
    "https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_PutResourcePolicy.html"
)
_LOGS_FILTER = "https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_PutMetricFilter.html"
_SSM = "https://docs.aws.amazon.com/systems-manager/latest/userguide/sysman-parameter-name-constraints.html"
_SSM_API = "https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_PutParameter.html"
_STACK = "https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_CreateStack.html"
_DDB = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html"
_EC2_SG = "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateSecurityGroup.html"


@dataclass(frozen=True)
class Limit:
    """One documented limit: what it bounds, its value and unit, where AWS documents it."""

    key: str
    what: str
    value: int
    unit: str
    source: str


def _limits(*rows: tuple[str, str, int, str, str]) -> dict[str, Limit]:
    return {key: Limit(key, what, value, unit, source) for key, what, value, unit, source in rows}


#: Every limit checked, by key. "characters" and "bytes" count the JSON CloudFormation passes on
#: (policies without whitespace, as IAM counts them).
LIMITS = _limits(
    ("template-bytes", "CloudFormation template body", 1_000_000, "bytes", _CFN),
    ("template-resources", "resources in one template", 500, "resources", _CFN),
    ("template-outputs", "outputs in one template", 200, "outputs", _CFN),
    ("template-parameters", "parameters in one template", 200, "parameters", _CFN),
    ("template-mappings", "mappings in one template", 200, "mappings", _CFN),
    ("template-description", "template Description", 1024, "bytes", _CFN),
    ("stack-name", "stack name", 128, "characters", _STACK),
    ("output-description", "output Description", 1024, "characters", _CFN),
    ("iam-role-name", "IAM role name", 64, "characters", _IAM),
    ("iam-role-description", "IAM role description", 1000, "characters", _IAM),
    ("iam-trust-policy", "IAM role trust policy", 2048, "characters", _IAM),
    ("iam-role-inline-policies", "inline policies of one IAM role, together", 10_240, "characters", _IAM),
    ("iam-policy-name", "IAM policy name", 128, "characters", _IAM),
    ("iam-managed-policy", "IAM managed policy", 6144, "characters", _IAM),
    ("s3-bucket-name", "S3 bucket name", 63, "characters", _S3_NAMES),
    ("s3-bucket-policy", "S3 bucket policy", 20_480, "bytes", _S3_POLICY),
    ("s3-access-point-name", "S3 access point name", 50, "characters", _S3_AP),
    ("s3-access-point-policy", "S3 access point policy", 20_480, "bytes", _S3_AP),
    ("sqs-queue-name", "SQS queue name", 80, "characters", _SQS_QUEUES),
    ("sqs-queue-policy", "SQS queue policy", 8192, "bytes", _SQS_POLICY),
    ("sqs-queue-policy-statements", "statements in one SQS queue policy", 20, "statements", _SQS_POLICY),
    ("sns-topic-name", "SNS topic name", 256, "characters", _SNS_TOPIC),
    ("sns-display-name", "SNS topic display name", 100, "characters", _SNS_TOPIC),
    ("sns-topic-policy", "SNS topic policy", 30_720, "bytes", _SNS),
    ("kms-key-policy", "KMS key policy", 32_768, "bytes", _KMS),
    ("kms-key-description", "KMS key description", 8192, "characters", _KMS),
    ("kms-alias-name", "KMS alias name", 256, "characters", _KMS_ALIAS),
    ("lambda-function-name", "Lambda function name", 64, "characters", _LAMBDA_API),
    ("lambda-description", "Lambda function, version or alias description", 256, "characters", _LAMBDA_API),
    ("lambda-environment", "Lambda environment variables, together", 4096, "bytes", _LAMBDA),
    ("lambda-resource-policy", "Lambda function resource-based policy", 20_480, "bytes", _LAMBDA),
    ("lambda-vpc-subnets", "subnets of one Lambda function", 16, "subnets", _LAMBDA_VPC),
    (
        "lambda-vpc-security-groups",
        "security groups of one Lambda function",
        5,
        "security groups",
        _LAMBDA_VPC,
    ),
    ("sfn-state-machine-name", "state machine name", 80, "characters", _SFN),
    ("sfn-definition", "state machine definition", 1_048_576, "bytes", _SFN),
    ("sfn-alias-name", "state machine alias name", 80, "characters", _SFN_API),
    ("sfn-description", "state machine version or alias description", 256, "characters", _SFN_API),
    ("eventbridge-rule-name", "EventBridge rule name", 64, "characters", _EB_RULE),
    ("eventbridge-rule-description", "EventBridge rule description", 512, "characters", _EB_RULE),
    (
        "eventbridge-event-pattern",
        "EventBridge event pattern",
        routing.MAX_EVENT_PATTERN_CHARS,
        "characters",
        _EB,
    ),
    ("eventbridge-targets-per-rule", "targets of one EventBridge rule", 5, "targets", _EB),
    ("eventbridge-rules-per-bus", "EventBridge rules on one event bus", 300, "rules", _EB),
    (
        "eventbridge-wildcard-rules-per-bus",
        "EventBridge rules with a wildcard filter on one event bus (not adjustable)",
        30,
        "rules",
        _EB,
    ),
    ("eventbridge-bus-name", "EventBridge event bus name", 256, "characters", _EB_BUS),
    ("eventbridge-bus-description", "EventBridge event bus description", 512, "characters", _EB_BUS),
    ("cloudwatch-alarm-name", "CloudWatch alarm name", 255, "characters", _CW_ALARM),
    ("cloudwatch-alarm-description", "CloudWatch alarm description", 1024, "characters", _CW_ALARM),
    (
        "cloudwatch-alarm-metrics",
        "metrics of one metric-math alarm (not adjustable)",
        10,
        "metrics",
        _CW_ALARM_LIMITS,
    ),
    ("cloudwatch-alarm-queries", "metrics and expressions of one alarm", 20, "queries", _CW_ALARM),
    ("cloudwatch-alarm-actions", "actions of one alarm state", 5, "actions", _CW_ALARM),
    (
        "cloudwatch-alarm-period",
        "CloudWatch alarm period: 10, 20, 30 or a multiple of 60",
        60,
        "seconds",
        _CW_ALARM,
    ),
    (
        "cloudwatch-alarm-window",
        "CloudWatch alarm period x evaluation periods (1 day for periods under an hour)",
        7 * 86_400,
        "seconds",
        _CW_ALARM,
    ),
    ("cloudwatch-dashboard-name", "CloudWatch dashboard name", 255, "characters", _CW_DASHBOARD),
    ("cloudwatch-dashboard-widgets", "widgets of one CloudWatch dashboard", 500, "widgets", _CW_QUOTAS),
    ("logs-group-name", "CloudWatch Logs log group name", 512, "characters", _LOGS),
    ("logs-filter-name", "CloudWatch Logs metric filter name", 512, "characters", _LOGS_FILTER),
    ("logs-filter-pattern", "CloudWatch Logs metric filter pattern", 1024, "characters", _LOGS_FILTER),
    (
        "logs-resource-policies",
        "CloudWatch Logs resource policies per account and Region",
        10,
        "policies",
        _LOGS_POLICY,
    ),
    ("logs-resource-policy", "CloudWatch Logs resource policy", 5120, "characters", _LOGS_POLICY),
    ("ssm-parameter-name", "SSM parameter name with its ARN", 1011, "characters", _SSM),
    ("ssm-parameter-description", "SSM parameter description", 1024, "characters", _SSM_API),
    ("ssm-parameter-value", "SSM parameter value (standard tier)", 4096, "characters", _SSM_API),
    ("dynamodb-table-name", "DynamoDB table name", 255, "characters", _DDB),
    ("ec2-security-group-description", "security group description", 255, "characters", _EC2_SG),
    (
        "unique-per-account",
        "names of IAM roles, IAM managed policies and dashboards, unique per account in every Region",
        1,
        "resource per name",
        _CW_DASHBOARD,
    ),
    (
        "unique-per-region",
        "every other name, unique per account and Region (a rule's per event bus)",
        1,
        "resource per name",
        _CFN,
    ),
    ("unique-globally", "S3 bucket names, unique across all accounts", 1, "bucket per name", _S3_NAMES),
)

#: Character sets of names, by limit key (AWS's documented patterns).
NAME_PATTERNS = {
    "stack-name": r"[A-Za-z][A-Za-z0-9-]*",
    "iam-role-name": r"[\w+=,.@-]+",
    "iam-policy-name": r"[\w+=,.@-]+",
    "s3-bucket-name": r"[a-z0-9][a-z0-9.-]*[a-z0-9]",
    "s3-access-point-name": r"[a-z0-9][a-z0-9-]*[a-z0-9]",
    "sqs-queue-name": r"[A-Za-z0-9_-]+(\.fifo)?",
    "sns-topic-name": r"[A-Za-z0-9_-]+(\.fifo)?",
    "kms-alias-name": r"alias/[A-Za-z0-9/_-]+",
    "lambda-function-name": r"[A-Za-z0-9_-]+",
    "sfn-state-machine-name": r"[A-Za-z0-9_-]+",
    "sfn-alias-name": r"[A-Za-z0-9_-]+",
    "eventbridge-rule-name": r"[.\-_A-Za-z0-9]+",
    "eventbridge-bus-name": r"[/.\-_A-Za-z0-9]+",
    "cloudwatch-dashboard-name": r"[A-Za-z0-9_-]+",
    "logs-group-name": r"[.\-_/#A-Za-z0-9]+",
    "dynamodb-table-name": r"[A-Za-z0-9_.-]+",
    "ssm-parameter-name": r"/?[A-Za-z0-9_.\-/]+",
}


def reference_table() -> str:
    """The limits as docs/scaling.md lists them (a Markdown table, generated)."""
    rows = ["| limit | value | AWS documentation |", "| --- | --- | --- |"]
    for limit in LIMITS.values():
        shape = f"; characters `{NAME_PATTERNS[limit.key]}`" if limit.key in NAME_PATTERNS else ""
        page = limit.source.rsplit("/", 1)[-1].removesuffix(".html")
        rows.append(f"| {limit.what} | {limit.value:,} {limit.unit}{shape} | [{page}]({limit.source}) |")
    return "\n".join(rows) + "\n"


#: Fixes of violations that follow from the tenants file, by limit key.
FIXES = {
    "template-bytes": "fewer tenants or routing shards per deployment target (`routing.shards`, `targets`), or "
    "shorter tenant ids and prefixes",
    "template-resources": "fewer routing shards or tenants per deployment target (`routing.shards`, `targets`), "
    "or fewer `notifications.emails` and `subscriptions` (a topic of your own: "
    "`notifications.topic_arn`)",
    "eventbridge-rules-per-bus": "raise `routing.shards` (or `account_limits.eventbridge_rules_per_bus` after a "
    "quota increase)",
    "eventbridge-wildcard-rules-per-bus": "fewer rules with wildcard filters on this bus",
}
