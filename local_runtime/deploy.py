"""Deploy the synthesized app on moto, with moto's own CloudFormation.

1. Bootstrap the local account as `cdk bootstrap` would for these templates: the assets
   bucket (with the zipped code assets where the templates' ``Code.S3Bucket``/``S3Key``
   point) and the bootstrap version parameter the templates read from SSM.
2. Each stack, in dependency order: the pre-transform (`transform.prepare`), ``CreateStack``
   (cross-stack ``Fn::ImportValue`` resolved by moto), then what moto's CloudFormation leaves
   out of ``AWS::S3::Bucket``: ``VersioningConfiguration`` and the EventBridge notification.
3. Read back from moto: physical ids, outputs, every function's configuration, each tenant's
   resources (from the logical ids synthesis recorded) and the removed event source mappings.
"""

from __future__ import annotations

import graphlib
import io
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local_runtime.synth import Synthesized, SynthesizedTenant
from local_runtime.transform import RemovedMapping, prepare

#: (tenant id, function role, environment variables) -> environment variables. The values are
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
    arn: str
    handler: str
    code_dir: Path
    environment: dict[str, str]  # the function's variables in moto (template + hook)
    timeout_seconds: float  # already scaled
    memory_size: int = 128
    reserved_concurrency: int | None = None
    log_format: str = "Text"  # LoggingConfig.LogFormat
    log_level: str = "INFO"  # LoggingConfig.ApplicationLogLevel (JSON format only)
    tenant: str | None = None  # for a function of a tenant's pipeline
    role: str | None = None  # "controller", "split", "register"


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
    #: `FunctionResponseTypes: [ReportBatchItemFailures]`: messages the function lists in
    #: `batchItemFailures` stay in the queue, the others are deleted.
    report_batch_item_failures: bool = False


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
    functions: dict[str, str]  # role -> function name

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
    function_environment: FunctionEnvironmentHook | None = None,
) -> Deployment:
    """Create every stack of ``synthesized`` on moto (see the module docstring)."""
    from moto.cloudformation.parsing import get_model_map

    sts = client("sts")
    _bootstrap(synthesized, client, sts.get_caller_identity()["Account"], sts.meta.region_name)
    roles = {
        (t.stack, logical_id): (t.id, role)
        for t in synthesized.tenants
        for role, logical_id in t.functions.items()
    }
    by_name = {stack.name: stack for stack in synthesized.stacks}
    order = graphlib.TopologicalSorter(
        {s.name: [d for d in s.dependencies if d in by_name] for s in synthesized.stacks}
    )
    deployment = Deployment()
    for name in order.static_order():

        def environment(logical_id: str, variables: dict[str, Any], stack: str = name) -> dict[str, Any]:
            if function_environment is None or (stack, logical_id) not in roles:
                return variables
            return function_environment(*roles[(stack, logical_id)], variables)

        prepared = prepare(
            by_name[name].template,
            time_scale=time_scale,
            creatable=get_model_map().__contains__,
            environment=environment,
        )
        deployed = deployment.stacks[name] = _create_stack(
            client, name, prepared.template, prepared.not_created
        )
        deployment.overrides.extend(f"{name}/{override}" for override in prepared.overrides)
        _complete_buckets(client("s3"), deployed)
        for logical_id, (kind, _) in deployed.resources.items():
            if kind == "AWS::Lambda::Function":
                function = _function(
                    client("lambda"), synthesized, deployed, logical_id, roles.get((name, logical_id))
                )
                deployment.functions[function.name] = function
        deployment.event_source_mappings.extend(
            _mapping(client("sqs"), deployed, m) for m in prepared.mappings
        )
    for tenant in synthesized.tenants:
        deployment.tenants[tenant.id] = _tenant(client, tenant, deployment.stacks[tenant.stack].resources)
    return deployment


def _bootstrap(synthesized: Synthesized, client: Callable[[str], Any], account: str, region: str) -> None:
    s3, created = client("s3"), set()
    for asset in synthesized.assets:
        bucket = asset.bucket
        for name, value in (("AWS::AccountId", account), ("AWS::Region", region), ("AWS::Partition", "aws")):
            bucket = bucket.replace("${" + name + "}", value)
        if bucket not in created:
            location = (
                {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
            )
            s3.create_bucket(Bucket=bucket, **location)
            created.add(bucket)
        s3.put_object(Bucket=bucket, Key=asset.key, Body=_zip(asset.directory))
    for stack in synthesized.stacks:
        for parameter in (stack.template.get("Parameters") or {}).values():
            name = str(parameter.get("Default", ""))
            if parameter.get("Type", "").startswith("AWS::SSM::Parameter::Value") and name.startswith(
                "/cdk-bootstrap/"
            ):
                client("ssm").put_parameter(Name=name, Value=BOOTSTRAP_VERSION, Type="String", Overwrite=True)


def _zip(directory: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(directory.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, path.relative_to(directory).as_posix())
    return buffer.getvalue()


def _create_stack(
    client: Callable[[str], Any],
    name: str,
    template: dict[str, Any],
    not_created: list[tuple[str, str]],
) -> DeployedStack:
    cfn = client("cloudformation")
    try:
        cfn.create_stack(
            StackName=name,
            TemplateBody=json.dumps(template),
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
        template=template,
        resources={r["LogicalResourceId"]: (r["ResourceType"], r.get("PhysicalResourceId", "")) for r in listed},
        outputs={o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs") or []},
        not_created=not_created,
    )


def _complete_buckets(s3: Any, stack: DeployedStack) -> None:
    """moto 5.2's AWS::S3::Bucket applies only BucketEncryption and Tags."""
    for logical_id, (kind, bucket) in stack.resources.items():
        if kind != "AWS::S3::Bucket":
            continue
        props = stack.template["Resources"][logical_id].get("Properties") or {}
        if (props.get("VersioningConfiguration") or {}).get("Status") == "Enabled":
            s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        eventbridge = (props.get("NotificationConfiguration") or {}).get("EventBridgeConfiguration") or {}
        if eventbridge.get("EventBridgeEnabled") in (True, "true"):
            s3.put_bucket_notification_configuration(
                Bucket=bucket, NotificationConfiguration={"EventBridgeConfiguration": {}}
            )


def _function(
    lambda_: Any,
    synthesized: Synthesized,
    stack: DeployedStack,
    logical_id: str,
    tenant_role: tuple[str, str] | None,
) -> DeployedFunction:
    """The function as moto holds it, plus what moto's CloudFormation drops (LoggingConfig)."""
    props = stack.template["Resources"][logical_id]["Properties"]
    found = lambda_.get_function(FunctionName=stack.resources[logical_id][1])
    config = found["Configuration"]
    logging_config = props.get("LoggingConfig") or {}
    return DeployedFunction(
        name=config["FunctionName"],
        arn=config["FunctionArn"],
        handler=config["Handler"],
        code_dir=synthesized.asset(props["Code"]["S3Key"]).directory,
        environment=dict((config.get("Environment") or {}).get("Variables") or {}),
        timeout_seconds=float(config["Timeout"]),
        memory_size=int(config.get("MemorySize", 128)),
        reserved_concurrency=(found.get("Concurrency") or {}).get("ReservedConcurrentExecutions"),
        log_format=logging_config.get("LogFormat", "Text"),
        log_level=logging_config.get("ApplicationLogLevel", "INFO"),
        tenant=tenant_role[0] if tenant_role else None,
        role=tenant_role[1] if tenant_role else None,
    )


def _landing_bucket(events: Any, queue_arn: str) -> str:
    """The bucket named in the event pattern of the rule that feeds the queue, on whichever bus
    holds it (the default bus, or the tenant's shard bus with `routing.shards`): every bus and
    rule, page by page (up to 99 shard and catch-all buses; a page holds 50)."""
    for bus in _event_bus_names(events):
        pages = events.get_paginator("list_rule_names_by_target").paginate(TargetArn=queue_arn, EventBusName=bus)
        for rule in (name for page in pages for name in page["RuleNames"]):
            pattern = json.loads(events.describe_rule(Name=rule, EventBusName=bus).get("EventPattern") or "{}")
            names = pattern.get("detail", {}).get("bucket", {}).get("name")
            if names:
                return names[0]
    raise DeployError(f"no EventBridge rule sends a bucket's events to {queue_arn}")


def _event_bus_names(events: Any) -> list[str]:
    """Every event bus of the account (ListEventBuses has no boto3 paginator)."""
    found, kwargs = [], {}
    while True:
        response = events.list_event_buses(**kwargs)
        found += [bus["Name"] for bus in response["EventBuses"]]
        if not response.get("NextToken"):
            return found
        kwargs["NextToken"] = response["NextToken"]


def _mapping(sqs: Any, stack: DeployedStack, mapping: RemovedMapping) -> EventSourceMappingSpec:
    function = stack.outputs[
        mapping.function_output
    ]  # a name, or an ARN (`arn:...:function:NAME[:qualifier]`)
    queue_arn = stack.outputs[mapping.source_output]
    if ":sqs:" not in queue_arn:
        raise DeployError(
            f"{stack.name}/{mapping.logical_id}: only SQS event sources run locally, not {queue_arn}"
        )
    return EventSourceMappingSpec(
        stack=stack.name,
        logical_id=mapping.logical_id,
        function_name=function.split(":")[6] if function.startswith("arn:") else function,
        queue_arn=queue_arn,
        queue_url=sqs.get_queue_url(QueueName=queue_arn.rsplit(":", 1)[-1])["QueueUrl"],
        batch_size=mapping.batch_size,
        enabled=mapping.enabled,
        report_batch_item_failures=mapping.report_batch_item_failures,
    )


def _tenant(
    client: Callable[[str], Any], tenant: SynthesizedTenant, resources: dict[str, tuple[str, str]]
) -> Tenant:
    queue_url = resources[tenant.queue][1]
    attributes = client("sqs").get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]
    return Tenant(
        id=tenant.id,
        prefix=tenant.prefix,
        stack=tenant.stack,
        bucket=_landing_bucket(client("events"), attributes["QueueArn"]),
        queue_url=queue_url,
        queue_arn=attributes["QueueArn"],
        state_machine_arn=resources[tenant.state_machine][1],
        functions={role: resources[logical_id][1] for role, logical_id in tenant.functions.items()},
    )
