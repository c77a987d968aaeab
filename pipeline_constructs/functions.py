"""One way to build the pipeline's Lambda functions: own role, own log group, JSON logs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

LAMBDA_SOURCE_DIR = Path(__file__).resolve().parent.parent / "lambdas"
RUNTIME = lambda_.Runtime.PYTHON_3_14


@dataclass(frozen=True)
class FunctionSpec:
    """What differs between the pipeline's functions."""

    function_name: str
    handler: str
    timeout: Duration
    memory_size: int = 256
    reserved_concurrency: int | None = None
    description: str = ""


@dataclass(frozen=True)
class PipelineFunction:
    """A function with the role and the log group it owns (alarms read the log group)."""

    function: lambda_.Function
    role: iam.Role
    log_group: logs.LogGroup
    log_group_name: str  # the literal name, for alarm descriptions (log_group's is a token)


def lambda_code() -> lambda_.Code:
    """The runtime code: one asset for every function, no third-party packages."""
    return lambda_.Code.from_asset(str(LAMBDA_SOURCE_DIR), exclude=["__pycache__", "*.pyc"])


def pipeline_function(
    scope: Construct,
    construct_id: str,
    spec: FunctionSpec,
    environment: dict[str, str],
    log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS,
) -> PipelineFunction:
    """A function whose role can do nothing but write its own logs until granted more."""
    log_group_name = f"/aws/lambda/{spec.function_name}"
    log_group = logs.LogGroup(
        scope,
        f"{construct_id}Logs",
        log_group_name=log_group_name,
        retention=log_retention,
        removal_policy=RemovalPolicy.RETAIN,
    )
    role = iam.Role(
        scope,
        f"{construct_id}Role",
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        description=f"Execution role of {spec.function_name}",
    )
    function = lambda_.Function(
        scope,
        construct_id,
        function_name=spec.function_name,
        description=spec.description,
        runtime=RUNTIME,
        architecture=lambda_.Architecture.ARM_64,
        code=lambda_code(),
        handler=spec.handler,
        role=role,
        timeout=spec.timeout,
        memory_size=spec.memory_size,
        reserved_concurrent_executions=spec.reserved_concurrency,
        environment=environment,
        log_group=log_group,
        logging_format=lambda_.LoggingFormat.JSON,
        application_log_level_v2=lambda_.ApplicationLogLevel.INFO,
        system_log_level_v2=lambda_.SystemLogLevel.WARN,
    )
    log_group.grant_write(role)
    return PipelineFunction(function=function, role=role, log_group=log_group, log_group_name=log_group_name)
