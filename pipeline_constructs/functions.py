"""One way to build the pipeline's Lambda functions: own role, own log group, JSON logs.

The log group is made here, and so is its metric filter of ERROR lines: whoever alarms on a
function's errors reads `metrics.TenantMetrics.error_log_lines(kind)`.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

import lambdas
from lambdas import contract

#: The `lambdas` package, wherever it is (this repository, or a site-packages it was installed into).
LAMBDA_SOURCE_DIR = Path(lambdas.__file__).resolve().parent
RUNTIME = lambda_.Runtime.PYTHON_3_14


@dataclass(frozen=True)
class FunctionSpec:
    """What differs between the pipeline's functions. ``kind`` is the function's part in the
    tenant's pipeline (``controller``, ``split``, ``register``, ...); it names its error metric."""

    tenant_id: str
    kind: contract.FunctionKind
    function_name: str
    handler: str
    timeout: Duration
    memory_size: int = 256
    reserved_concurrency: int | None = None
    description: str = ""


@dataclass(frozen=True)
class PipelineFunction:
    """A function with the role and the log group it owns."""

    function: lambda_.Function
    role: iam.Role
    log_group: logs.LogGroup
    log_group_name: str  # the literal name, for alarm descriptions (log_group's is a token)


def lambda_code() -> lambda_.Code:
    """The runtime code: one asset for every function, no third-party packages."""
    return lambda_.Code.from_asset(str(staged_package(LAMBDA_SOURCE_DIR)))


@functools.cache
def staged_package(source: Path) -> Path:
    """A directory that holds the package at ``source`` as `lambdas` and nothing else, as
    Lambda's /var/task will: the handlers import each other as `lambdas.<module>`, so the
    package, not its contents, is the asset's top level. Its subpackages come along (every
    `.py` file under ``source``, at the same relative path; no bytecode caches). Private to this
    process (a directory of a predictable name in a shared /tmp could be planted), staged once,
    removed at exit; the asset's hash is its content's, wherever it is staged."""
    root = Path(tempfile.mkdtemp(prefix="ordered-ingest-lambda-code-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    for file in sorted(source.rglob("*.py")):
        target = root / "lambdas" / file.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, target)
    return root


def pipeline_function(
    scope: Construct,
    construct_id: str,
    spec: FunctionSpec,
    environment: dict[str, str],
    log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS,
    role: iam.Role | None = None,
    tracing: bool = False,
    kms_key: kms.IKey | None = None,
) -> PipelineFunction:
    """A function whose role can do nothing but write its own logs until granted more. Given
    `role`, the function runs with it (a role shared by functions that need the same access:
    IAM roles are an account quota). Given `kms_key` (the tenant's customer-managed key), its
    log group and its environment variables are encrypted with it; the key policy and the
    role's use of the key are the caller's (`encryption`)."""
    log_group_name = contract.FUNCTION_LOG_GROUP.render(function=spec.function_name)
    log_group = logs.LogGroup(
        scope,
        f"{construct_id}Logs",
        log_group_name=log_group_name,
        retention=log_retention,
        # Kept on update and delete, but deleted when the operation that created it rolls back:
        # a retained log group of a fixed name would make the retry fail ("already exists").
        removal_policy=RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
        encryption_key=kms_key,
    )
    logs.MetricFilter(
        scope,
        f"{spec.kind.title()}ErrorLogFilter",
        log_group=log_group,
        # The handlers' ERROR lines, the runtime's own error records and the platform records
        # of a timeout or crash (see `contract.error_log_filter_pattern`).
        filter_pattern=logs.FilterPattern.literal(contract.error_log_filter_pattern()),
        metric_namespace=contract.metric_namespace(),
        metric_name=contract.error_log_metric_name(spec.tenant_id, spec.kind),
        metric_value="1",
        filter_name=contract.ERROR_LOG_FILTER.render(spec.tenant_id, kind=spec.kind),
    )
    role = role or iam.Role(
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
        environment_encryption=kms_key,
        log_group=log_group,
        logging_format=lambda_.LoggingFormat.JSON,
        application_log_level_v2=lambda_.ApplicationLogLevel.INFO,
        # INFO: every invocation's `platform.report` (duration, memory) reaches the log group.
        # A failed one (status "timeout", "error"), which the error-log filter counts, is a
        # WARN system record (contract.PLATFORM_FAILURE_STATUSES): any of the three levels
        # delivers it.
        system_log_level_v2=lambda_.SystemLogLevel.INFO,
        # X-Ray (the tenant's `tracing`): active tracing, or no tracing setting at all.
        tracing=lambda_.Tracing.ACTIVE if tracing else lambda_.Tracing.DISABLED,
    )
    log_group.grant_write(role)
    return PipelineFunction(
        function=function,
        role=role,
        log_group=log_group,
        log_group_name=log_group_name,
    )
