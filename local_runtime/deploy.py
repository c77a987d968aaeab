"""Deploy the synthesized app on moto, with moto's own CloudFormation: bootstrap, the
pre-transform and ``CreateStack`` per stack, the bucket post-step, the read-back
(local_runtime/README.md, "How it works", step 3)."""

from __future__ import annotations

import graphlib
import io
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local_runtime.synth import CodeAsset, Synthesized, SynthesizedTenant
from local_runtime.transform import PreparedTemplate, RemovedMapping, prepare

#: (tenant id, function kind, environment variables) -> environment variables. The values are
#: the template's, possibly unresolved intrinsics (``{"Ref": ...}``).
FunctionEnvironmentHook = Callable[[str, str, dict[str, Any]], dict[str, Any]]

#: What the pinned CDK CLI's bootstrap template writes to /cdk-bootstrap/<qualifier>/version.
BOOTSTRAP_VERSION = "33"


class DeployError(RuntimeError):
    """A stack could not be created on moto."""


@dataclass(frozen=True)
class DeployedFunction:
    """A function as moto holds it, and what a worker needs to run it."""

    name: str
    handler: str
    code_dir: Path
    environment: dict[str, str]  # the function's variables in moto (template + hook)
    timeout_seconds: float  # already scaled
    reserved_concurrency: int | None = None
    log_format: str = "Text"  # LoggingConfig.LogFormat
    log_level: str = "INFO"  # LoggingConfig.ApplicationLogLevel (JSON format only)
    tenant: str | None = None  # for a function of a tenant's pipeline
    kind: str | None = None  # "controller", "split", "register", ...


@dataclass(frozen=True)
class EventSourceMappingSpec:
    """An SQS event source mapping of the templates, run by a local poller."""

    stack: str
    logical_id: str
    function_name: str
    queue_arn: str
    queue_url: str
    batch_size: int
    enabled: bool
    report_batch_item_failures: bool = False  # `FunctionResponseTypes: [ReportBatchItemFailures]`


@dataclass(frozen=True)
class Tenant:
    """Where one tenant's pipeline lives in the local account."""

    id: str
    prefix: str
    stack: str
    bucket: str  # the landing bucket its rule listens to
    queue_url: str
    queue_arn: str
    state_machine_arn: str
    functions: dict[str, str]  # kind -> function name

    @property
    def controller(self) -> str:
        return self.functions["controller"]


@dataclass(frozen=True)
class DeployedStack:
    name: str
    template: dict[str, Any]  # as created, after the pre-transform
    resources: dict[str, tuple[str, str]]  # logical id -> (type, physical id)
    outputs: dict[str, str]
    not_created: list[tuple[str, str]]  # (logical id, type) moto's CloudFormation cannot create


@dataclass
class Deployment:
    """What a tenants file became on moto."""

    stacks: dict[str, DeployedStack] = field(default_factory=dict)
    functions: dict[str, DeployedFunction] = field(default_factory=dict)  # by function name
    event_source_mappings: list[EventSourceMappingSpec] = field(default_factory=list)
    tenants: dict[str, Tenant] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)  # "stack/Logical: VAR old -> new"

    def physical_ids(self, resource_type: str) -> list[str]:
        return [p for s in self.stacks.values() for t, p in s.resources.values() if t == resource_type]


def deploy(
    synthesized: Synthesized,
    *,
    client: Callable[[str], Any],
    time_scale: float,
    function_environment: FunctionEnvironmentHook,
) -> Deployment:
    """Create every stack of ``synthesized`` on moto, in dependency order."""
    from moto.cloudformation.parsing import get_model_map

    sts = client("sts")
    _bootstrap(synthesized, client, sts.get_caller_identity()["Account"], sts.meta.region_name)
    function_kinds = {
        (t.stack, logical_id): (t.id, kind)
        for t in synthesized.tenants
        for kind, logical_id in t.functions.items()
    }
    by_name = {stack.name: stack for stack in synthesized.stacks}
    order = graphlib.TopologicalSorter(
        {s.name: [d for d in s.dependencies if d in by_name] for s in synthesized.stacks}
    )
    deployment = Deployment()
    for name in order.static_order():

        def environment(logical_id: str, variables: dict[str, Any], stack: str = name) -> dict[str, Any]:
            tenant_kind = function_kinds.get((stack, logical_id))
            return function_environment(*tenant_kind, variables) if tenant_kind else variables

        prepared = prepare(
            by_name[name].template,
            time_scale=time_scale,
            creatable=get_model_map().__contains__,
            environment=environment,
        )
        deployed = deployment.stacks[name] = _create_stack(client("cloudformation"), name, prepared)
        deployment.overrides.extend(f"{name}/{override}" for override in prepared.overrides)
        _complete_buckets(client("s3"), deployed)
        for logical_id, (kind, _) in deployed.resources.items():
            if kind == "AWS::Lambda::Function":
                function = _function(
                    client("lambda"),
                    synthesized,
                    deployed,
                    logical_id,
                    function_kinds.get((name, logical_id)),
                )
                deployment.functions[function.name] = function
        deployment.event_source_mappings.extend(
            _mapping(client("sqs"), deployed, m) for m in prepared.mappings
        )
    for tenant in synthesized.tenants:
        deployment.tenants[tenant.id] = _tenant(client, tenant, deployment.stacks[tenant.stack])
    return deployment


def _bootstrap(synthesized: Synthesized, client: Callable[[str], Any], account: str, region: str) -> None:
    def bucket(asset: CodeAsset) -> str:
        return (
            asset.bucket.replace("${AWS::AccountId}", account)
            .replace("${AWS::Region}", region)
            .replace("${AWS::Partition}", "aws")
        )

    s3, assets = client("s3"), synthesized.assets.values()
    location = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
    for name in {bucket(asset) for asset in assets}:
        s3.create_bucket(Bucket=name, **location)
    for asset in assets:
        s3.put_object(Bucket=bucket(asset), Key=asset.key, Body=_zip(asset.directory))
    parameters = [
        p for stack in synthesized.stacks for p in (stack.template.get("Parameters") or {}).values()
    ]
    for name in {str(parameter.get("Default")) for parameter in parameters}:
        if name.startswith("/cdk-bootstrap/"):  # every stack reads it from SSM (`BootstrapVersion`)
            client("ssm").put_parameter(Name=name, Value=BOOTSTRAP_VERSION, Type="String", Overwrite=True)


def _zip(directory: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(directory.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, path.relative_to(directory).as_posix())
    return buffer.getvalue()


def _create_stack(cfn: Any, name: str, prepared: PreparedTemplate) -> DeployedStack:
    try:
        cfn.create_stack(
            StackName=name,
            TemplateBody=json.dumps(prepared.template),
            Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
        )
        described = cfn.describe_stacks(StackName=name)["Stacks"][0]
    except Exception as error:
        raise DeployError(f"stack {name}: moto's CloudFormation failed: {error}") from error
    if described["StackStatus"] != "CREATE_COMPLETE":
        raise DeployError(
            f"stack {name}: {described['StackStatus']} {described.get('StackStatusReason', '')}"
        )
    listed = cfn.describe_stack_resources(StackName=name)["StackResources"]
    return DeployedStack(
        name=name,
        template=prepared.template,
        resources={
            r["LogicalResourceId"]: (r["ResourceType"], r.get("PhysicalResourceId", "")) for r in listed
        },
        outputs={o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs") or []},
        not_created=prepared.not_created,
    )


def _complete_buckets(s3: Any, stack: DeployedStack) -> None:
    """moto 5.2's AWS::S3::Bucket applies only BucketEncryption and Tags."""
    for logical_id, (kind, bucket) in stack.resources.items():
        if kind != "AWS::S3::Bucket":
            continue
        props = stack.template["Resources"][logical_id]["Properties"]
        if props.get("VersioningConfiguration", {}).get("Status") == "Enabled":
            s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        if (
            props.get("NotificationConfiguration", {})
            .get("EventBridgeConfiguration", {})
            .get("EventBridgeEnabled")
        ):
            s3.put_bucket_notification_configuration(
                Bucket=bucket, NotificationConfiguration={"EventBridgeConfiguration": {}}
            )


def _function(
    lambda_: Any,
    synthesized: Synthesized,
    stack: DeployedStack,
    logical_id: str,
    tenant_kind: tuple[str, str] | None,
) -> DeployedFunction:
    """The function as moto holds it, plus what moto's CloudFormation drops (LoggingConfig)."""
    props = stack.template["Resources"][logical_id]["Properties"]
    found = lambda_.get_function(FunctionName=stack.resources[logical_id][1])
    config = found["Configuration"]
    logging_config = props.get("LoggingConfig") or {}
    return DeployedFunction(
        name=config["FunctionName"],
        handler=config["Handler"],
        code_dir=synthesized.assets[props["Code"]["S3Key"]].directory,
        environment=dict((config.get("Environment") or {}).get("Variables") or {}),
        timeout_seconds=float(config["Timeout"]),
        reserved_concurrency=(found.get("Concurrency") or {}).get("ReservedConcurrentExecutions"),
        log_format=logging_config.get("LogFormat", "Text"),
        log_level=logging_config.get("ApplicationLogLevel", "INFO"),
        tenant=tenant_kind[0] if tenant_kind else None,
        kind=tenant_kind[1] if tenant_kind else None,
    )


def _mapping(sqs: Any, stack: DeployedStack, mapping: RemovedMapping) -> EventSourceMappingSpec:
    """Our mappings name the function by `Ref` (its name) and read an SQS queue."""
    queue_arn = stack.outputs[mapping.source_output]
    return EventSourceMappingSpec(
        stack=stack.name,
        logical_id=mapping.logical_id,
        function_name=stack.outputs[mapping.function_output],
        queue_arn=queue_arn,
        queue_url=sqs.get_queue_url(QueueName=queue_arn.rsplit(":", 1)[-1])["QueueUrl"],
        batch_size=mapping.batch_size,
        enabled=mapping.enabled,
        report_batch_item_failures=mapping.report_batch_item_failures,
    )


def _tenant(client: Callable[[str], Any], tenant: SynthesizedTenant, stack: DeployedStack) -> Tenant:
    queue_url = stack.resources[tenant.queue][1]
    attributes = client("sqs").get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    # the landing bucket, as moto resolved it into the pattern of the tenant's rule (on its shard's bus)
    bus = stack.template["Resources"][tenant.rule]["Properties"].get("EventBusName", "default")
    rule = client("events").describe_rule(Name=stack.resources[tenant.rule][1], EventBusName=bus)
    return Tenant(
        id=tenant.id,
        prefix=tenant.prefix,
        stack=tenant.stack,
        bucket=json.loads(rule["EventPattern"])["detail"]["bucket"]["name"][0],
        queue_url=queue_url,
        queue_arn=attributes["Attributes"]["QueueArn"],
        state_machine_arn=stack.resources[tenant.state_machine][1],
        functions={kind: stack.resources[logical_id][1] for kind, logical_id in tenant.functions.items()},
    )
