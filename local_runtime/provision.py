"""Create on moto what the synthesized templates declare, stack by stack.

A small stand-in for CloudFormation: resources are created in dependency order with their
properties resolved (`intrinsics.Resolver`), stack outputs feed `Fn::ImportValue` of later
stacks. Only what the pipeline's behaviour depends on is created; every other resource type
is listed in `Deployment.skipped` (alarms, metric filters, resource policies: moto does not
evaluate them).

Deliberate differences from a deployment, all driven by the one ``time_scale``:

* SQS ``VisibilityTimeout`` and ``MessageRetentionPeriod``, Lambda ``Timeout`` and the
  state machine's ``TimeoutSeconds``/``HeartbeatSeconds``/``Wait`` seconds are multiplied
  by ``time_scale`` (rounded up, at least 1 s; retention at least 60 s).
* The one override of a template value: a function whose environment has ``SINK_URL``
  gets the URL of its tenant's local sink server instead (the core system stand-in).
* Lambda ``EventSourceMapping`` resources are not created in moto (moto's own SQS-to-Lambda
  mapping invokes synchronously inside `put_object` and never retries); they are returned
  so that `poller.SqsPoller` can play that part.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local_runtime.intrinsics import PseudoParameters, Resolver, imports, references
from local_runtime.synth import Synthesized, SynthesizedStack
from local_runtime.workers import FunctionSpec


class ProvisioningError(RuntimeError):
    """A template resource could not be created on moto."""


@dataclass
class PhysicalResource:
    """A created resource: what `Ref` and `Fn::GetAtt` return for it."""

    logical_id: str
    type: str
    ref: Any
    attributes: dict[str, Any] = field(default_factory=dict)
    properties: dict[str, Any] = field(default_factory=dict)  # resolved


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


@dataclass
class Deployment:
    """Everything provisioned for one tenants file."""

    resources: dict[str, dict[str, PhysicalResource]] = field(default_factory=dict)  # stack -> logical id ->
    exports: dict[str, Any] = field(default_factory=dict)
    functions: dict[str, FunctionSpec] = field(default_factory=dict)  # by function name
    event_source_mappings: list[EventSourceMappingSpec] = field(default_factory=list)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)  # (stack, logical id, type)
    overrides: list[str] = field(default_factory=list)  # human-readable, for the demo and docs

    def of_type(self, resource_type: str, stack: str | None = None) -> list[PhysicalResource]:
        stacks = [stack] if stack else list(self.resources)
        return [r for s in stacks for r in self.resources.get(s, {}).values() if r.type == resource_type]


def scale_seconds(seconds: float, time_scale: float, minimum: int = 1) -> int:
    """A duration in whole seconds (the APIs want integers), scaled and rounded up."""
    return max(minimum, math.ceil(float(seconds) * time_scale - 1e-9))


def scale_definition(definition: dict[str, Any], time_scale: float) -> dict[str, Any]:
    """Scale the timeouts and waits of an ASL definition (Retry intervals are scaled at run time)."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        scaled = {key: walk(value) for key, value in node.items()}
        for key in ("TimeoutSeconds", "HeartbeatSeconds"):
            if isinstance(scaled.get(key), (int, float)):
                scaled[key] = scale_seconds(scaled[key], time_scale)
        if scaled.get("Type") == "Wait" and isinstance(scaled.get("Seconds"), (int, float)):
            scaled["Seconds"] = scale_seconds(scaled["Seconds"], time_scale, minimum=0)
        return scaled

    return walk(definition)


def check_definition(definition: dict[str, Any], name: str) -> None:
    """Refuse a callback task without a timeout: locally (and on AWS) it could wait forever.

    A `.waitForTaskToken` task whose token is never returned stays RUNNING for a year by
    default; the local run would never become idle and tests would hang instead of failing.
    """

    def walk(node: Any, path: str) -> None:
        if isinstance(node, list):
            for index, item in enumerate(node):
                walk(item, f"{path}[{index}]")
            return
        if not isinstance(node, dict):
            return
        resource = node.get("Resource")
        if node.get("Type") == "Task" and isinstance(resource, str) and resource.endswith(".waitForTaskToken"):
            if "TimeoutSeconds" not in node and "TimeoutSecondsPath" not in node:
                raise ProvisioningError(
                    f"state machine {name}: callback task {path} has no TimeoutSeconds; "
                    "give every .waitForTaskToken task a timeout"
                )
        for key, value in node.items():
            walk(value, f"{path}.{key}" if path else key)

    walk(definition, "")


class Provisioner:
    """Creates the resources of a synthesized app on moto through its API."""

    def __init__(
        self,
        synthesized: Synthesized,
        *,
        client: Callable[[str], Any],
        pseudo: PseudoParameters,
        time_scale: float,
        sink_urls: Mapping[str, str],
    ) -> None:
        self._synth = synthesized
        self._client = client
        self._pseudo = pseudo
        self._scale = time_scale
        self._sink_urls = dict(sink_urls)
        self._deployment = Deployment()
        self._zips: dict[Path, bytes] = {}
        self._creators: dict[str, Callable[[str, str, dict[str, Any]], PhysicalResource]] = {
            "AWS::S3::Bucket": self._bucket,
            "AWS::DynamoDB::Table": self._table,
            "AWS::KMS::Key": self._kms_key,
            "AWS::SNS::Topic": self._topic,
            "AWS::SNS::Subscription": self._subscription,
            "AWS::SQS::Queue": self._queue,
            "AWS::IAM::Role": self._role,
            "AWS::IAM::Policy": self._policy,
            "AWS::Logs::LogGroup": self._log_group,
            "AWS::Lambda::Function": self._function,
            "AWS::Lambda::EventSourceMapping": self._event_source_mapping,
            "AWS::StepFunctions::StateMachine": self._state_machine,
            "AWS::Events::Rule": self._rule,
        }

    def provision(self) -> Deployment:
        for stack in self._stack_order():
            self._provision_stack(stack)
        return self._deployment

    # -- ordering ---------------------------------------------------------------------------

    def _stack_order(self) -> list[SynthesizedStack]:
        """Stacks whose imports are exported by stacks before them (CloudFormation's rule)."""
        exporters = {
            output["Export"]["Name"]: stack.name
            for stack in self._synth.stacks
            for output in (stack.template.get("Outputs") or {}).values()
            if isinstance(output.get("Export", {}).get("Name"), str)
        }
        names = {stack.name for stack in self._synth.stacks}
        needs = {
            stack.name: {exporters[name] for name in imports(stack.template) if name in exporters}
            | {dep for dep in stack.dependencies if dep in names}
            for stack in self._synth.stacks
        }
        by_name = {stack.name: stack for stack in self._synth.stacks}
        return [by_name[name] for name in _topological(needs)]

    @staticmethod
    def _resource_order(template: dict[str, Any]) -> list[str]:
        resources = template.get("Resources") or {}
        needs: dict[str, set[str]] = {}
        for logical_id, resource in resources.items():
            depends = resource.get("DependsOn") or []
            depends = [depends] if isinstance(depends, str) else depends
            needs[logical_id] = {n for n in references(resource) if n in resources and n != logical_id} | set(depends)
        return _topological(needs)

    # -- stacks -----------------------------------------------------------------------------

    def _provision_stack(self, stack: SynthesizedStack) -> None:
        created: dict[str, PhysicalResource] = {}
        self._deployment.resources[stack.name] = created

        def ref(logical_id: str) -> Any:
            return created[logical_id].ref

        def get_att(logical_id: str, attribute: str) -> Any:
            resource = created[logical_id]
            if attribute not in resource.attributes:
                raise ProvisioningError(f"{stack.name}/{logical_id}: attribute {attribute!r} is not emulated")
            return resource.attributes[attribute]

        resolver = Resolver(
            stack_name=stack.name,
            template=stack.template,
            pseudo=self._pseudo,
            ref=ref,
            get_att=get_att,
            exports=self._deployment.exports,
        )
        for logical_id in self._resource_order(stack.template):
            resource = stack.resources[logical_id]
            if "Condition" in resource and not resolver.condition(resource["Condition"]):
                continue
            properties = resolver.resolve(resource.get("Properties") or {})
            creator = self._creators.get(resource["Type"])
            if creator is None:
                self._deployment.skipped.append((stack.name, logical_id, resource["Type"]))
                created[logical_id] = PhysicalResource(logical_id, resource["Type"], ref=logical_id, properties=properties)
                continue
            try:
                physical = creator(stack.name, logical_id, properties)
            except Exception as error:
                raise ProvisioningError(f"{stack.name}/{logical_id} ({resource['Type']}): {error}") from error
            physical.properties = properties
            created[logical_id] = physical

        for output in (stack.template.get("Outputs") or {}).values():
            export = output.get("Export")
            if export:
                self._deployment.exports[resolver.resolve(export["Name"])] = resolver.resolve(output["Value"])

    # -- helpers ----------------------------------------------------------------------------

    def _arn(self, service: str, resource: str, *, region: bool = True, account: bool = True) -> str:
        p = self._pseudo
        return f"arn:{p.partition}:{service}:{p.region if region else ''}:{p.account_id if account else ''}:{resource}"

    @staticmethod
    def _generated_name(stack: str, logical_id: str, limit: int, *, lower: bool = False) -> str:
        """CloudFormation-style name for resources the template leaves unnamed (deterministic)."""
        suffix = hashlib.sha256(f"{stack}/{logical_id}".encode()).hexdigest()[:12].upper()
        head = f"{stack}-{logical_id}"[: limit - len(suffix) - 1]
        name = f"{head}-{suffix}"
        return name.lower() if lower else name

    def _tags(self, properties: dict[str, Any]) -> list[dict[str, str]]:
        return [{"Key": t["Key"], "Value": str(t["Value"])} for t in properties.get("Tags") or []]

    # -- resource types ---------------------------------------------------------------------

    def _bucket(self, stack: str, logical_id: str, props: dict[str, Any]) -> PhysicalResource:
        s3 = self._client("s3")
        name = props.get("BucketName") or self._generated_name(stack, logical_id, 63, lower=True)
        kwargs: dict[str, Any] = {"Bucket": name}
        if self._pseudo.region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self._pseudo.region}
        s3.create_bucket(**kwargs)
        if (props.get("VersioningConfiguration") or {}).get("Status") == "Enabled":
            s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        notifications = props.get("NotificationConfiguration") or {}
        if (notifications.get("EventBridgeConfiguration") or {}).get("EventBridgeEnabled") in (True, "true"):
            s3.put_bucket_notification_configuration(
                Bucket=name, NotificationConfiguration={"EventBridgeConfiguration": {}}
            )
        return PhysicalResource(
            logical_id,
            "AWS::S3::Bucket",
            ref=name,
            attributes={
                "Arn": f"arn:{self._pseudo.partition}:s3:::{name}",
                "DomainName": f"{name}.s3.amazonaws.com",
                "RegionalDomainName": f"{name}.s3.{self._pseudo.region}.amazonaws.com",
            },
        )

    def _table(self, stack: str, logical_id: str, props: dict[str, Any]) -> PhysicalResource:
        name = props.get("TableName") or self._generated_name(stack, logical_id, 255)
        kwargs: dict[str, Any] = {
            "TableName": name,
            "KeySchema": props["KeySchema"],
            "AttributeDefinitions": props["AttributeDefinitions"],
            "BillingMode": props.get("BillingMode", "PROVISIONED"),
        }
        if kwargs["BillingMode"] == "PROVISIONED":
            kwargs["ProvisionedThroughput"] = props.get(
                "ProvisionedThroughput", {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5}
            )
        for key in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes", "StreamSpecification"):
            if key in props:
                kwargs[key] = props[key]
        described = self._client("dynamodb").create_table(**kwargs)["TableDescription"]
        return PhysicalResource(
            logical_id,
            "AWS::DynamoDB::Table",
            ref=name,
            attributes={"Arn": described["TableArn"], "StreamArn": described.get("LatestStreamArn", "")},
        )

    def _kms_key(self, stack: str, logical_id: str, props: dict[str, Any]) -> PhysicalResource:
        key = self._client("kms").create_key(Description=props.get("Description", ""))["KeyMetadata"]
        return PhysicalResource(logical_id, "AWS::KMS::Key", ref=key["KeyId"], attributes={"Arn": key["Arn"], "KeyId": key["KeyId"]})

    def _topic(self, stack: str, logical_id: str, props: dict[str, Any]) -> PhysicalResource:
        fifo = props.get("FifoTopic") in (True, "true")
        name = props.get("TopicName") or self._generated_name(stack, logical_id, 251) + (".fifo" if fifo else "")
        attributes = {
            key: str(props[key]).lower() if isinstance(props[key], bool) else str(props[key])
            for key in ("DisplayName", "KmsMasterKeyId", "FifoTopic", "ContentBasedDeduplication")
            if key in props
        }
        arn = self._client("sns").create_topic(Name=name, Attributes=attributes)["TopicArn"]
        for subscription in props.get("Subscription") or []:
            self._client("sns").subscribe(TopicArn=arn, Protocol=subscription["Protocol"], Endpoint=subscription["Endpoint"])
        return PhysicalResource(logical_id, "AWS::SNS::Topic", ref=arn, attributes={"TopicArn": arn, "TopicName": name})

    def _subscription(self, stack: str, logical_id: str, props: dict[str, Any]) -> PhysicalResource:
        arn = self._client("sns").subscribe(
            TopicArn=props["TopicArn"], Protocol=props["Protocol"], Endpoint=props.get("Endpoint", ""), ReturnSubscriptionArn=True
        )["SubscriptionArn"]
        return PhysicalResource(logical_id, "AWS::SNS::Subscription", ref=arn)

    def _queue(self, stack: str, logical_id: str, props: dict[str, Any]) -> PhysicalResource:
        fifo = props.get("FifoQueue") in (True, "true")
        name = props.get("QueueName") or self._generated_name(stack, logical_id, 75) + (".fifo" if fifo else "")
        attributes: dict[str, str] = {}
        for key in ("FifoQueue", "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit",
                    "ReceiveMessageWaitTimeSeconds", "DelaySeconds", "MaximumMessageSize", "SqsManagedSseEnabled"):
            if key in props:
                value = props[key]
                attributes[key] = str(value).lower() if isinstance(value, bool) else str(value)
        attributes["VisibilityTimeout"] = str(scale_seconds(props.get("VisibilityTimeout", 30), self._scale))
        attributes["MessageRetentionPeriod"] = str(
            scale_seconds(props.get("MessageRetentionPeriod", 345600), self._scale, minimum=60)
        )
        if "RedrivePolicy" in props:
            attributes["RedrivePolicy"] = json.dumps(props["RedrivePolicy"])
        sqs = self._client("sqs")
        url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        arn = self._arn("sqs", name)
        return PhysicalResource(
            logical_id, "AWS::SQS::Queue", ref=url, attributes={"Arn": arn, "QueueName": name, "QueueUrl": url}
        )

    def _role(self, stack: str, logical_id: str, props: dict[str, Any]) -> PhysicalResource:
        iam = self._client("iam")
        name = props.get("RoleName") or self._generated_name(stack, logical_id, 64)
        role = iam.create_role(
            RoleName=name,
            Path=props.get("Path", "/"),
            AssumeRolePolicyDocument=json.dumps(props["AssumeRolePolicyDocument"]),
            Description=props.get("Description", ""),
        )["Role"]
        for policy in props.get("Policies") or []:
            iam.put_role_policy(RoleName=name, PolicyName=policy["PolicyName"], PolicyDocument=json.dumps(policy["PolicyDocument"]))
        return PhysicalResource(logical_id, "AWS::IAM::Role", ref=name, attributes={"Arn": role["Arn"], "RoleId": role["RoleId"]})

    def _policy(self, stack: str, logical_id: str, props: dict[str, Any]) -> PhysicalResource:
        iam = self._client("iam")
        for role in props.get("Roles") or []:
            iam.put_role_policy(RoleName=role, PolicyName=props["PolicyName"], PolicyDocument=json.dumps(props["PolicyDocument"]))
        return PhysicalResource(logical_id, "AWS::IAM::Policy", ref=props["PolicyName"])

    def _log_group(self, stack: str, logical_id: str, props: dict[str, Any]) -> PhysicalResource:
        logs = self._client("logs")
        name = props.get("LogGroupName") or self._generated_name(stack, logical_id, 512)
        logs.create_log_group(logGroupName=name)
        if "RetentionInDays" in props:
            logs.put_retention_policy(logGroupName=name, retentionInDays=int(props["RetentionInDays"]))
        return PhysicalResource(logical_id, "AWS::Logs::LogGroup", ref=name, attributes={"Arn": self._arn("logs", f"log-group:{name}:*")})

    def _function(self, stack: str, logical_id: str, props: dict[str, Any]) -> PhysicalResource:
        name = props.get("FunctionName") or self._generated_name(stack, logical_id, 64)
        code = props.get("Code") or {}
        if "S3Key" not in code:
            raise ProvisioningError("only directory assets (Code.S3Key of the assembly) are supported")
        code_dir = self._synth.code_dir(code["S3Key"])
        environment = {k: str(v) for k, v in ((props.get("Environment") or {}).get("Variables") or {}).items()}
        tenant = environment.get("TENANT_ID")
        if "SINK_URL" in environment and tenant in self._sink_urls:
            self._deployment.overrides.append(
                f"{name}: SINK_URL {environment['SINK_URL']} -> {self._sink_urls[tenant]} (local core-system stand-in)"
            )
            environment["SINK_URL"] = self._sink_urls[tenant]
        timeout = float(props.get("Timeout", 3)) * self._scale
        reserved = props.get("ReservedConcurrentExecutions")
        lambda_ = self._client("lambda")
        created = lambda_.create_function(
            FunctionName=name,
            Runtime=props.get("Runtime", "python3.12"),
            Role=props["Role"],
            Handler=props["Handler"],
            Code={"ZipFile": self._zip(code_dir)},
            Description=props.get("Description", ""),
            Timeout=scale_seconds(props.get("Timeout", 3), self._scale),
            MemorySize=int(props.get("MemorySize", 128)),
            Environment={"Variables": environment},
            Architectures=props.get("Architectures") or ["x86_64"],
        )
        if reserved is not None:
            lambda_.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=int(reserved))
        self._deployment.functions[name] = FunctionSpec(
            name=name,
            arn=created["FunctionArn"],
            handler=props["Handler"],
            code_dir=code_dir,
            environment=environment,
            timeout_seconds=max(1.0, timeout),
            memory_size=int(props.get("MemorySize", 128)),
            reserved_concurrency=int(reserved) if reserved is not None else None,
        )
        return PhysicalResource(logical_id, "AWS::Lambda::Function", ref=name, attributes={"Arn": created["FunctionArn"]})

    def _zip(self, code_dir: Path) -> bytes:
        if code_dir not in self._zips:
            buffer = io.BytesIO()
            with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
                for path in sorted(code_dir.rglob("*")):
                    if path.is_file() and "__pycache__" not in path.parts:
                        archive.write(path, path.relative_to(code_dir).as_posix())
            self._zips[code_dir] = buffer.getvalue()
        return self._zips[code_dir]

    def _event_source_mapping(self, stack: str, logical_id: str, props: dict[str, Any]) -> PhysicalResource:
        source = props["EventSourceArn"]
        if ":sqs:" not in source:
            raise ProvisioningError(f"only SQS event sources are emulated, not {source}")
        queue_name = source.rsplit(":", 1)[-1]
        queue_url = self._client("sqs").get_queue_url(QueueName=queue_name)["QueueUrl"]
        function_name = props["FunctionName"].rsplit(":", 1)[-1] if props["FunctionName"].startswith("arn:") else props["FunctionName"]
        self._deployment.event_source_mappings.append(
            EventSourceMappingSpec(
                stack=stack,
                logical_id=logical_id,
                function_name=function_name,
                queue_arn=source,
                queue_url=queue_url,
                batch_size=int(props.get("BatchSize", 10)),
                enabled=props.get("Enabled", True) not in (False, "false"),
            )
        )
        uuid = hashlib.sha256(f"{stack}/{logical_id}".encode()).hexdigest()[:32]
        return PhysicalResource(logical_id, "AWS::Lambda::EventSourceMapping", ref=uuid)

    def _state_machine(self, stack: str, logical_id: str, props: dict[str, Any]) -> PhysicalResource:
        name = props.get("StateMachineName") or self._generated_name(stack, logical_id, 80)
        if "DefinitionString" in props:
            definition = json.loads(props["DefinitionString"])
        elif "Definition" in props:
            definition = props["Definition"]
        else:
            raise ProvisioningError("DefinitionS3Location is not supported")
        for key, value in (props.get("DefinitionSubstitutions") or {}).items():
            definition = json.loads(json.dumps(definition).replace("${" + key + "}", str(value)))
        check_definition(definition, name)
        definition = scale_definition(definition, self._scale)
        kwargs: dict[str, Any] = {
            "name": name,
            "definition": json.dumps(definition),
            "roleArn": props["RoleArn"],
            "type": props.get("StateMachineType", "STANDARD"),
        }
        tags = [{"key": t["Key"], "value": t["Value"]} for t in self._tags(props)]
        if tags:
            kwargs["tags"] = tags
        arn = self._client("stepfunctions").create_state_machine(**kwargs)["stateMachineArn"]
        return PhysicalResource(logical_id, "AWS::StepFunctions::StateMachine", ref=arn, attributes={"Arn": arn, "Name": name})

    def _rule(self, stack: str, logical_id: str, props: dict[str, Any]) -> PhysicalResource:
        events = self._client("events")
        name = props.get("Name") or self._generated_name(stack, logical_id, 64)
        kwargs: dict[str, Any] = {"Name": name, "State": props.get("State", "ENABLED")}
        if "EventPattern" in props:
            pattern = props["EventPattern"]
            kwargs["EventPattern"] = pattern if isinstance(pattern, str) else json.dumps(pattern)
        for key in ("ScheduleExpression", "Description", "EventBusName", "RoleArn"):
            if key in props:
                kwargs[key] = props[key]
        arn = events.put_rule(**kwargs)["RuleArn"]
        targets = props.get("Targets") or []
        if targets:
            target_kwargs: dict[str, Any] = {"Rule": name, "Targets": targets}
            if "EventBusName" in props:
                target_kwargs["EventBusName"] = props["EventBusName"]
            events.put_targets(**target_kwargs)
        return PhysicalResource(logical_id, "AWS::Events::Rule", ref=name, attributes={"Arn": arn})


def _topological(needs: Mapping[str, set[str]]) -> list[str]:
    """Order names so that each comes after what it needs (template order among equals)."""
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(name: str, path: tuple[str, ...]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise ProvisioningError(f"circular dependency: {' -> '.join((*path, name))}")
        state[name] = 1
        for dependency in sorted(needs.get(name, ())):
            if dependency in needs:
                visit(dependency, (*path, name))
        state[name] = 2
        order.append(name)

    for name in needs:
        visit(name, ())
    return order
