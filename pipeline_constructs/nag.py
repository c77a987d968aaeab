"""cdk-nag acknowledgements: one helper so every one carries a rule, a finding and a reason,
and every finding of a tenant's pipeline acknowledged in one place (`acknowledge_tenant_pipeline`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

from aws_cdk import Acknowledgment, CfnElement, Stack, Token, Validations
from aws_cdk.aws_s3 import CfnBucket
from constructs import Construct, IConstruct

from lambdas import contract
from pipeline_constructs import names

if TYPE_CHECKING:
    from pipeline_constructs.tenant_pipeline import TenantPipeline

PACK = "AwsSolutions"
IAM5 = "AwsSolutions-IAM5"


def acknowledge(scope: IConstruct, rule: str, reason: str, finding: str | None = None) -> None:
    """Acknowledge ``rule`` (for example ``AwsSolutions-IAM5``) on ``scope``, optionally only
    for one ``finding`` (for example ``Resource::*``), with the reason a reviewer reads."""
    acknowledge_all(scope, [(rule, finding, reason)])


def acknowledge_all(scope: IConstruct, findings: Iterable[tuple[str, str | None, str]]) -> None:
    """Several `(rule, finding, reason)` on one scope, in one call (each call into the CDK
    library is a round trip to its node process: synth time at 1,000 tenants)."""
    acknowledgments = [
        Acknowledgment(id=f"{PACK}::{rule}[{finding}]" if finding else f"{PACK}::{rule}", reason=reason)
        for rule, finding, reason in findings
    ]
    if acknowledgments:
        Validations.of(scope).acknowledge(*acknowledgments)


def acknowledge_tenant_pipeline(pipeline: TenantPipeline) -> None:
    """Every wildcard left in a tenant pipeline's policies is scoped to the tenant, and every
    other finding is a decision; each says why."""
    tenant, tenant_id = pipeline.tenant, pipeline.tenant_id
    # cdk-nag shows pseudo parameters as <AWS::...>, or their values in a stack with an
    # explicit environment (a deployment target's Stage).
    partition, region, account = as_nag_shows(Stack.of(pipeline))
    landing = _bucket_as_nag_shows(
        pipeline,
        pipeline.shared.landing_bucket,
        partition,
        names.landing_bucket_name("<AWS::AccountId>", "<AWS::Region>"),
    )
    work = _bucket_as_nag_shows(
        pipeline,
        pipeline.shared.work_bucket,
        partition,
        names.work_bucket_name("<AWS::AccountId>", "<AWS::Region>"),
    )
    executions = f"arn:{partition}:states:{region}:{account}:execution:"

    acknowledge(
        pipeline.queue,
        "AwsSolutions-SQS3",
        "No DLQ by design: moving a failing head message aside would let later files of the tenant "
        "overtake it (breaks ordering). The message stays at the head and the stall alarm pages instead.",
    )
    acknowledge(
        pipeline.intake_dlq,
        "AwsSolutions-SQS3",
        "This queue is itself the dead-letter queue of the tenant's EventBridge rule targets; its depth is "
        "alarmed (intake-dlq) and ops dlq replay empties it.",
    )

    if tenant.network is not None:
        acknowledge_all(
            pipeline.data_role,
            [
                (
                    IAM5,
                    "Resource::*",
                    (
                        "ec2:DescribeNetworkInterfaces and ec2:DescribeSubnets (Lambda attaching the register function to "
                        "the tenant's subnets with this role) support no resource-level permission; X-Ray trace segments "
                        "(tracing: true) neither."
                    ),
                ),
                (
                    IAM5,
                    f"Resource::arn:{partition}:ec2:{region}:{account}:network-interface/*",
                    (
                        "Lambda names the register function's network interfaces itself; creating one is limited to the "
                        "tenant's subnets and security groups (named in the same statement). Deleting one and assigning its "
                        "addresses is on every interface, as the Lambda guide asks (a unique interface id, unknown in "
                        "advance, or all), so that Lambda can also delete those left in a VPC the tenant no longer uses."
                    ),
                ),
            ],
        )
    acknowledge_all(
        pipeline.data_role,
        [
            (
                IAM5,
                f"Resource::{landing}/{tenant.prefix}*",
                (
                    "Split reads whichever file the tenant drops, register its chunk of it (a ranged GET), and only under "
                    "this tenant's landing prefix."
                ),
            ),
            (
                IAM5,
                f"Resource::{work}/{contract.work_prefix(tenant_id)}*",
                (
                    "Chunk indexes and manifests are named per execution; the wildcard stays inside this tenant's own work "
                    "folder."
                ),
            ),
        ],
    )

    own_executions = (
        IAM5,
        f"Resource::{executions}{names.STATE_MACHINE.render(tenant_id)}:*",
        (
            "Execution names are the EventBridge event ids, unknown in advance; only this tenant's "
            "state machine's executions are covered."
        ),
    )
    acknowledge_all(
        pipeline.controller.role,
        [
            own_executions,
            (
                IAM5,
                f"Resource::{work}/{contract.quarantine_prefix(tenant_id)}*",
                (
                    "Quarantined messages are named by time and message id, unknown in advance; PutObject only, inside "
                    "this tenant's own quarantine folder."
                ),
            ),
        ],
    )
    acknowledge_all(pipeline.closer.role, [own_executions])

    invoke = (
        "The workflow invokes the function (grant_invoke, as CDK's LambdaInvoke task does), which covers its "
        "versions and aliases (ARN:*); it is still this tenant's function only."
    )
    acknowledge_all(
        pipeline.workflow.role,
        [
            *(
                (IAM5, f"Resource::<{_logical_id(made.function)}.Arn>:*", invoke)
                for made in (pipeline.split, pipeline.closer, pipeline.register)
            ),
            (
                IAM5,
                "Resource::*",
                "X-Ray trace segments and CloudWatch Logs vended-log delivery do not support resource-level permissions.",
            ),
            *(
                (
                    IAM5,
                    f"Resource::{executions}{child.render(tenant_id)}*",
                    (
                        "A .sync child start (the statement CDK's StepFunctionsStartExecution adds): describe and stop the "
                        f"executions of this tenant's {kind} state machine; their names derive from the parent's, unknown in "
                        "advance."
                    ),
                )
                for child, kind in (
                    (names.PAGE_STATE_MACHINE, "page"),
                    (names.SECTION_STATE_MACHINE, "section"),
                )
            ),
        ],
    )
    workflow = pipeline.workflow
    if tenant.tracing:
        # Every function's role (the data role is split's and register's), the completion's too.
        for role in dict.fromkeys(made.role for made in pipeline.pipeline_functions.values()):
            acknowledge(
                role,
                IAM5,
                "X-Ray trace segments (the tenant's `tracing: true`) do not support "
                "resource-level permissions.",
                "Resource::*",
            )
    else:
        for machine in (workflow.file, workflow.section, workflow.page):
            acknowledge(
                machine.state_machine,
                "AwsSolutions-SF2",
                "X-Ray tracing is the tenant's choice (`tracing: true`), off by default: traces cost per "
                "trace recorded, and the execution history, the ledger and `ops status` already show where "
                "each file is (docs/configuration.md, tracing).",
            )
    for machine, what in ((workflow.section, "page's"), (workflow.page, "chunk's")):
        acknowledge(
            machine.state_machine,
            "AwsSolutions-SF1",
            f"ERROR level on purpose, as the parent: ALL would log every {what} transitions that the "
            "execution history already keeps; execution data is excluded (no record content in logs).",
        )
    acknowledge(
        workflow.file.state_machine,
        "AwsSolutions-SF1",
        "ERROR level on purpose: failures are what on-call needs in the logs; ALL would log every transition "
        "of every chunk (cost) that the execution history already keeps. Execution data is excluded so no "
        "record content reaches the logs.",
    )


def as_nag_shows(stack: Stack) -> tuple[str, str, str]:
    """The stack's partition, Region and account as they appear in cdk-nag's findings."""

    def shown(value: str, pseudo: str) -> str:
        return pseudo if Token.is_unresolved(value) else value

    return (
        shown(stack.partition, "<AWS::Partition>"),
        shown(stack.region, "<AWS::Region>"),
        shown(stack.account, "<AWS::AccountId>"),
    )


def _bucket_as_nag_shows(pipeline: Construct, bucket: IConstruct, partition: str, fixed_name: str) -> str:
    """A shared bucket's ARN in cdk-nag's findings: `<LogicalId.Arn>` when the bucket is made in
    the pipeline's own stack (`SharedResources` beside the pipelines), else its fixed name (a
    tenant stack imports it by name)."""
    made = isinstance(bucket.node.default_child, CfnBucket) and Stack.of(bucket) is Stack.of(pipeline)
    return f"<{_logical_id(bucket)}.Arn>" if made else f"arn:{partition}:s3:::{fixed_name}"


def _logical_id(construct: IConstruct) -> str:
    stack = Stack.of(construct)
    # a function's or a bucket's default child is its CloudFormation resource; a logical id
    # resolves to a string
    return cast(str, stack.resolve(stack.get_logical_id(cast(CfnElement, construct.node.default_child))))
