"""A tenant's workflow as resources: the file, section and page state machines (their
definitions are data, `definitions.py`), each with its log group and this deploy's version; the
`live` alias files start through (versions.py); and the one role of the three with the
statements their tasks need, written beside the definition that needs them.

What CDK's task classes would add to the role, this module adds by hand: invoking the
functions a definition names, and starting the child state machine it names `.sync`.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import ArnFormat, Aws, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from lambdas import contract
from pipeline_constructs import names
from pipeline_constructs.asl import State
from pipeline_constructs.budgets import PageBudget
from pipeline_constructs.completion_states import CompletionWait
from pipeline_constructs.config import TenantConfig
from pipeline_constructs.definitions import (
    build_definition,
    build_page_definition,
    build_section_definition,
    render,
)
from pipeline_constructs.versions import live_alias, publish_version

#: The partition's token (one jsii call for every definition of every tenant).
_PARTITION = Aws.PARTITION


def state_machine_arn(scope: Construct, name: names.DerivedName, tenant_id: str) -> str:
    """The ARN of tenant ``tenant_id``'s state machine ``name``, from its fixed name (no reference)."""
    return Stack.of(scope).format_arn(
        service="states",
        resource="stateMachine",
        resource_name=name.render(tenant_id),
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )


def execution_arn_pattern(
    scope: Construct, name: names.DerivedName, tenant_id: str, suffix: str = ":*"
) -> str:
    """The executions of tenant ``tenant_id``'s state machine ``name``: its fixed name, then ``suffix``.
    Not `state_machine.grant_execution`: it derives the name from the ARN token with
    Fn::Select/Fn::Split; the literal name is as narrow and reads plainly in `cdk diff`."""
    return Stack.of(scope).format_arn(
        service="states",
        resource="execution",
        resource_name=f"{name.render(tenant_id)}{suffix}",
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )


@dataclass(frozen=True)
class Machine:
    """One state machine with its log group and this deploy's version of it."""

    state_machine: sfn.StateMachine
    log_group: logs.LogGroup
    version: sfn.CfnStateMachineVersion


@dataclass(frozen=True)
class Workflow:
    """The file's state machine (``file``, started through ``alias``), the section's and the
    page's, and ``role``, the one role of the three."""

    role: iam.Role
    page: Machine
    section: Machine
    file: Machine
    alias: sfn.CfnStateMachineAlias


def build_workflow(
    scope: Construct,
    *,
    tenant: TenantConfig,
    budget: PageBudget,
    split: lambda_.IFunction,
    register: lambda_.IFunction,
    closer: lambda_.IFunction,
    ledger_table: dynamodb.ITable,
    kms_key: kms.IKey | None,
) -> Workflow:
    """The three state machines of ``tenant`` in ``scope`` (page, section, then the file's, which
    names both children's versions), on one role (IAM roles are an account quota)."""
    role = iam.Role(
        scope,
        "WorkflowRole",
        assumed_by=iam.ServicePrincipal("states.amazonaws.com"),
        description=f"Execution role of tenant {tenant.id}'s file, section and page state machines",
    )

    # A page of a file's chunks per execution, started (and waited for) by the parent's or a
    # section's `RunPage`. Neither children's executions are watched by the status rule: the
    # parent's close is the file's close, and the register function's fence checks the
    # parent's execution name, which each child carries.
    _grant_invoke(role, register)
    page = _machine(
        scope,
        role,
        "Page",
        names.PAGE_STATE_MACHINE,
        tenant,
        kms_key,
        build_page_definition(
            partition=_PARTITION,
            register_function_arn=register.function_arn,
            chunks_per_page=budget.chunks_per_page,
            invocation_budget=budget.invocation_budget,
        ),
    )

    # A section of a file's pages per execution, when a file has more pages than one section
    # holds. Its definition names the page version: a page change publishes a section version too.
    _grant_start_child(scope, role, tenant.id, names.PAGE_STATE_MACHINE, rule=True)
    section = _machine(
        scope,
        role,
        "Section",
        names.SECTION_STATE_MACHINE,
        tenant,
        kms_key,
        build_section_definition(
            partition=_PARTITION,
            page_version_arn=page.version.attr_arn,
            chunks_per_page=budget.chunks_per_page,
            pages_per_section=budget.pages_per_section,
        ),
    )

    # The file: one execution per attempt. Its definition names both children's versions, so
    # any change of the three publishes a version of it.
    _grant_invoke(role, split, closer)
    _grant_start_child(scope, role, tenant.id, names.SECTION_STATE_MACHINE)
    completion = None
    if tenant.completion.wait:
        completion = CompletionWait(
            timeout_seconds=tenant.completion.timeout_seconds,
            heartbeat_seconds=tenant.completion.heartbeat_seconds,
            ledger_table_name=ledger_table.table_name,
        )
    file = _machine(
        scope,
        role,
        "",
        names.STATE_MACHINE,
        tenant,
        kms_key,
        build_definition(
            partition=_PARTITION,
            split_function_arn=split.function_arn,
            page_version_arn=page.version.attr_arn,
            section_version_arn=section.version.attr_arn,
            closer_function_arn=closer.function_arn,
            register_function_arn=register.function_arn,
            chunks_per_page=budget.chunks_per_page,
            pages_per_section=budget.pages_per_section,
            invocation_budget=budget.invocation_budget,
            inline_chunks=budget.inline_chunks,
            completion=completion,
        ),
        version_description=f"Tenant {tenant.id}'s file workflow (and, pinned, its section and page versions) as "
        "one deploy published it",
    )
    if completion is not None:
        # WaitForCompletion writes the task token to the tenant's own ledger position only.
        role.add_to_policy(
            iam.PolicyStatement(
                sid="LeaveCompletionTokenOnOwnPosition",
                actions=["dynamodb:UpdateItem"],
                resources=[ledger_table.table_arn],
                conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [tenant.id]}},
            )
        )
    alias = live_alias(
        scope,
        "WorkflowLiveAlias",
        file.version,
        f"Tenant {tenant.id}'s files start here; point it at an earlier version to roll back",
    )
    return Workflow(role=role, page=page, section=section, file=file, alias=alias)


def _machine(
    scope: Construct,
    role: iam.Role,
    kind: str,
    name: names.DerivedName,
    tenant: TenantConfig,
    kms_key: kms.IKey | None,
    definition: State,
    *,
    version_description: str | None = None,
) -> Machine:
    """A state machine of the workflow (construct ids ``<kind>Workflow...``; ``kind`` "" for the
    file's): its log group, the machine on the workflow's ``role``, and this deploy's version of it.

    Without a time limit an execution may run a year, and the timed-out alarm could only fire
    then; the close of a TIMED_OUT execution halts the tenant like a failure. A child never
    outlives its file: the three state machines have the same limit. ERROR level without
    execution data: no record content reaches the logs."""
    machine_name = name.render(tenant.id)
    log_group = logs.LogGroup(
        scope,
        f"{kind}WorkflowLogs",
        log_group_name=contract.STATE_MACHINE_LOG_GROUP.render(state_machine=machine_name),
        retention=logs.RetentionDays.THREE_MONTHS,
        removal_policy=RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
        encryption_key=kms_key,
    )
    machine = sfn.StateMachine(
        scope,
        f"{kind}Workflow",
        state_machine_name=machine_name,
        role=role,
        state_machine_type=sfn.StateMachineType.STANDARD,
        definition_body=sfn.DefinitionBody.from_string(render(definition, tenant.file_time_limit)),
        logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ERROR, include_execution_data=False),
        tracing_enabled=tenant.tracing,
    )
    version = publish_version(
        scope,
        f"{kind}WorkflowVersion",
        machine,
        version_description or f"Tenant {tenant.id}'s {kind.lower()} workflow as one deploy published it",
    )
    return Machine(state_machine=machine, log_group=log_group, version=version)


def _grant_invoke(role: iam.Role, *functions: lambda_.IFunction) -> None:
    """Invoke ``functions`` (their versions and aliases too, ARN:*), the statement `LambdaInvoke` adds."""
    for function in functions:
        function.grant_invoke(role)


def _grant_start_child(
    scope: Construct, role: iam.Role, tenant_id: str, child: names.DerivedName, *, rule: bool = False
) -> None:
    """Start the state machine ``child`` `.sync` (the statements `StepFunctionsStartExecution`
    adds): start it, describe and stop its executions, and (``rule``, once for the role) the
    managed rule through which Step Functions learns that a child execution closed.

    The child by its fixed name's ARN, not by reference: the three state machines share one
    role, whose policy names the children; a reference would make each child depend on the
    policy that depends on it (a cycle). The definitions start children by *version* ARN; IAM
    authorizes that on the unqualified ARN (versions.py)."""
    statements = [
        iam.PolicyStatement(
            actions=["states:StartExecution"], resources=[state_machine_arn(scope, child, tenant_id)]
        ),
        # `<child>*`, as CDK writes it: a child's execution name starts with the parent's.
        iam.PolicyStatement(
            actions=["states:DescribeExecution", "states:StopExecution"],
            resources=[execution_arn_pattern(scope, child, tenant_id, suffix="*")],
        ),
    ]
    if rule:
        statements.append(
            iam.PolicyStatement(
                actions=["events:PutTargets", "events:PutRule", "events:DescribeRule"],
                resources=[
                    Stack.of(scope).format_arn(
                        service="events",
                        resource="rule",
                        resource_name="StepFunctionsGetEventsForStepFunctionsExecutionRule",
                    )
                ],
            )
        )
    for statement in statements:
        role.add_to_principal_policy(statement)
