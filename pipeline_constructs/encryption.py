"""Customer-managed KMS keys (`encryption: {kms_key: create | <key ARN>}`): making or importing a
key, the key-policy statements the AWS services need, and the role statements that use a key.

The account's root has ``kms:*``, which delegates to IAM (each principal still needs its own
statement) and keeps the key manageable: a key policy without its account can never be
administered or deleted again. Services acting as themselves (CloudWatch Logs, EventBridge)
are narrowed to this deployment's resources; the functions' roles use a key only through the
service that stores the data (``kms:ViaService``). A created key has rotation on and outlives
its stack, like the data it encrypts; a key given by ARN is used as given, its policy its
owner's (docs/security.md, "Customer-managed keys").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

from aws_cdk import ArnFormat, Aws, RemovalPolicy, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from lambdas import contract
from pipeline_constructs import names

if TYPE_CHECKING:
    from pipeline_constructs.tenant_pipeline import TenantPipeline

#: The `kms_key` value that makes the app create the key.
CREATE = "create"


def shared_key_alias() -> str:
    """The alias of the shared resources' key (one per account and Region)."""
    return contract.SHARED_KEY_ALIAS.render()


def shared_key_parameter() -> str:
    """Where the shared stack publishes the ARN of the key it created: tenant stacks read it by
    this fixed name (a CloudFormation SSM parameter type, resolved at each deploy), so a tenant
    stack needs no export of the shared stack and the shared key can change without the
    "export in use" lock."""
    return contract.SHARED_KEY_PARAMETER.render()


def shared_rules() -> str:
    """The names of the shared stack's rules whose dead-letter queues the shared key encrypts
    (names.py: `ordered-ingest-unmatched-...`, `ordered-ingest-shard-<k>-...`, qualified; on a
    custom bus, whose name starts so too, `<bus>/<rule>`). The same pattern as the routing DLQ's
    queue policy."""
    return contract.qualify(contract.SHARED_PREFIX) + "-*"


#: What CloudWatch Logs does with the key of an encrypted log group.
LOGS_ACTIONS = [
    "kms:Encrypt",
    "kms:Decrypt",
    "kms:ReEncryptFrom",
    "kms:ReEncryptTo",
    "kms:GenerateDataKey",
    "kms:GenerateDataKeyWithoutPlaintext",
    "kms:DescribeKey",
]


def tenant_key_alias(tenant_id: str) -> str:
    """The alias of a tenant's own key."""
    return contract.TENANT_KEY_ALIAS.render(tenant_id)


def customer_key(
    scope: Construct, construct_id: str, setting: str, *, alias: str, description: str
) -> kms.IKey:
    """The key of `setting`: a new one (``create``) or the existing key of that ARN."""
    if setting != CREATE:
        return kms.Key.from_key_arn(scope, construct_id, setting)
    return kms.Key(
        scope,
        construct_id,
        description=description,
        alias=alias,
        enable_key_rotation=True,
        removal_policy=RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
    )


def shared_key_arn(scope: Construct, setting: str | None) -> str | None:
    """The shared key's ARN as a tenant stack names it: as given, or (``create``) the value of
    `shared_key_parameter()` at deploy time. None: the shared resources use AWS-managed keys."""
    if setting is None or setting != CREATE:
        return setting
    return ssm.StringParameter.value_for_string_parameter(scope, shared_key_parameter())


class QueueEncryptionArgs(TypedDict, total=False):
    """The encryption arguments of `sqs.Queue`."""

    encryption: sqs.QueueEncryption
    encryption_master_key: kms.IKey


def queue_encryption(key: kms.IKey | None) -> QueueEncryptionArgs:
    """A queue's encryption arguments: SQS-managed, or `key` (data keys reused for 5 minutes,
    SQS's default: at most one KMS request per 5 minutes per sender and receiver)."""
    if key is None:
        return {"encryption": sqs.QueueEncryption.SQS_MANAGED}
    return {"encryption": sqs.QueueEncryption.KMS, "encryption_master_key": key}


def via(*services: str) -> list[str]:
    """`kms:ViaService` values of the stack's Region."""
    return [f"{service}.{Aws.REGION}.amazonaws.com" for service in services]


def allow_log_groups(key: kms.IKey, log_group_names: Sequence[str], *, sid: str) -> iam.PolicyStatement:
    """CloudWatch Logs may encrypt and decrypt these log groups' events, and no other's.
    A no-op for a key given by ARN (its owner's policy decides). Returns the statement."""
    stack = Stack.of(key)
    arns = [
        stack.format_arn(
            service="logs", resource="log-group", resource_name=name, arn_format=ArnFormat.COLON_RESOURCE_NAME
        )
        for name in log_group_names
    ]
    return _add(
        key,
        iam.PolicyStatement(
            sid=sid,
            principals=[iam.ServicePrincipal(f"logs.{Aws.REGION}.amazonaws.com")],
            # What CloudWatch Logs documents for an encrypted log group (Encrypt*, Decrypt*,
            # ReEncrypt*, GenerateDataKey*, Describe*), spelled out without the key-pair actions.
            actions=LOGS_ACTIONS,
            resources=["*"],
            conditions={"ArnEquals": {"kms:EncryptionContext:aws:logs:arn": arns}},
        ),
    )


def allow_rules(
    key: kms.IKey, rule_arns: Sequence[str], *, sid: str, operator: str = "ArnEquals"
) -> iam.PolicyStatement:
    """EventBridge may deliver these rules' events to a queue encrypted with `key` (and
    dead-letter them), and nothing else (``operator`` ``ArnLike``: `rule_arns` are patterns).
    A no-op for a key given by ARN. Returns the statement."""
    return _add(
        key,
        iam.PolicyStatement(
            sid=sid,
            principals=[iam.ServicePrincipal("events.amazonaws.com")],
            actions=["kms:GenerateDataKey", "kms:Decrypt"],
            resources=["*"],
            conditions={operator: {"aws:SourceArn": list(rule_arns)}},
        ),
    )


def _add(key: kms.IKey, statement: iam.PolicyStatement) -> iam.PolicyStatement:
    key.add_to_resource_policy(statement)
    return statement


def pin_key_policy(key: kms.IKey, statements: Sequence[iam.PolicyStatement]) -> None:
    """Make a created key's policy exactly the account's administration plus `statements`.

    Why: CDK's `SqsQueue` rule target grants `events.amazonaws.com` Encrypt, Decrypt,
    ReEncrypt* and GenerateDataKey* on an encrypted queue's key with no condition (any rule of
    any account could then use it); `allow_rules` says the same narrowed to the tenant's rules.
    Principals of the account use the key through their IAM statements, never the key policy,
    so nothing else belongs in it. A no-op for a key given by ARN."""
    cfn = key.node.default_child
    if not isinstance(cfn, kms.CfnKey):
        return
    cfn.key_policy = iam.PolicyDocument(statements=[account_administers(), *statements])


def account_administers() -> iam.PolicyStatement:
    """The account administers the key and delegates its use to IAM (CDK's default statement)."""
    return iam.PolicyStatement(actions=["kms:*"], principals=[iam.AccountRootPrincipal()], resources=["*"])


def grant_via(
    principal: iam.IGrantable,
    key_arn: str,
    actions: Sequence[str],
    services: Sequence[str],
    *,
    sid: str,
    bucket_arn: str | None = None,
) -> None:
    """`actions` on the key, only through `services` (and, for S3, only for `bucket_arn`).

    Not `key.grant`: it cannot add conditions, and the key may be another stack's (by ARN)."""
    equals: dict[str, object] = {"kms:ViaService": via(*services)}
    if bucket_arn is not None:
        equals["kms:EncryptionContext:aws:s3:arn"] = bucket_arn
    principal.grant_principal.add_to_principal_policy(
        iam.PolicyStatement(
            sid=sid, actions=list(actions), resources=[key_arn], conditions={"StringEquals": equals}
        )
    )


# -- a tenant's pipeline ------------------------------------------------------------------------


def tenant_rule_arns(scope: Construct, tenant_id: str, event_bus: events.IEventBus | None) -> list[str]:
    """The ARNs of a tenant's rules from their fixed names (object-created, status): what a key
    policy and a queue policy name without referring to the rules (no dependency cycle)."""
    bus = f"{event_bus.event_bus_name}/" if event_bus is not None else ""
    stack = Stack.of(scope)
    return [
        stack.format_arn(service="events", resource="rule", resource_name=f"{bus}{name.render(tenant_id)}")
        for name in (names.RULE, names.STATUS_RULE)
    ]


def use_tenant_keys(pipeline: TenantPipeline) -> None:
    """The key policy of the tenant's key (its log groups, its rules) and every role's use of
    the tenant's and the shared key: each only through the service that stores the data."""
    tenant_id, shared, key = pipeline.tenant_id, pipeline.shared, pipeline.kms_key
    functions = pipeline.pipeline_functions
    if key is not None:
        log_groups = [made.log_group_name for made in functions.values()] + [
            f"/aws/vendedlogs/states/{name.render(tenant_id)}"
            for name in (names.STATE_MACHINE, names.SECTION_STATE_MACHINE, names.PAGE_STATE_MACHINE)
        ]
        # The object-created rule sends to the queue, both rules dead-letter to the intake DLQ.
        pin_key_policy(
            key,
            [
                allow_log_groups(key, log_groups, sid="CloudWatchLogsOwnLogGroups"),
                allow_rules(
                    key,
                    tenant_rule_arns(pipeline, tenant_id, shared.event_bus),
                    sid="EventBridgeDeliversOwnRules",
                ),
            ],
        )
        for role in dict.fromkeys(made.role for made in functions.values()):  # split and register share one
            # Lambda decrypts a function's environment at start with its execution role. (The
            # controller's kms:Decrypt of the queue's messages is the SQS event source's grant.)
            grant_via(role, key.key_arn, ["kms:Decrypt"], ["lambda"], sid="DecryptOwnEnvironment")
    key_arn = shared.shared_kms_key_arn
    if key_arn is None:
        return
    landing, work = shared.landing_bucket.bucket_arn, shared.work_bucket.bucket_arn
    grant_via(
        pipeline.data_role, key_arn, ["kms:Decrypt"], ["s3"], sid="DecryptOwnLandingFiles", bucket_arn=landing
    )
    grant_via(
        pipeline.data_role,
        key_arn,
        ["kms:GenerateDataKey", "kms:Decrypt"],
        ["s3"],
        sid="EncryptOwnChunks",
        bucket_arn=work,
    )
    grant_via(
        pipeline.controller.role,
        key_arn,
        ["kms:GenerateDataKey"],
        ["s3"],
        sid="EncryptQuarantinedMessages",
        bucket_arn=work,
    )
    ledger_users: list[iam.IRole] = [
        pipeline.data_role,
        *(made.role for kind, made in functions.items() if kind not in ("split", "register")),
    ]
    if pipeline.tenant.completion.wait:
        ledger_users.append(pipeline.workflow.role)  # it leaves the completion token on the position
    for user in ledger_users:
        # The table key: DynamoDB decrypts it with the caller's permission.
        grant_via(user, key_arn, ["kms:Decrypt"], ["dynamodb"], sid="UseLedgerTableKey")
