"""`LocalPipeline`: the whole pipeline on one machine, from the synthesized templates.

    with LocalPipeline("tenants.yaml", time_scale=0.1) as pipe:
        key, version = pipe.put_file("acme", "file-001.csv", b"id,amount\\n1,10\\n")
        pipe.wait_until_idle()
        pipe.sink("acme").accepted        # the records the core system registered

On entry: synthesize the app (in-process), start a sink server per tenant, start moto in
server mode with the patches of `moto_server`, create every resource the templates declare
(`provision`), start one pool of worker processes per Lambda function (`workers`) and one
poller per SQS event source mapping (`poller`). On exit everything is stopped, no process or
thread is left behind, and moto is reset.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from local_runtime.events import ProgressEvents
from local_runtime.faults import Faults
from local_runtime.intrinsics import PseudoParameters
from local_runtime.moto_server import MotoServer, moto_patches
from local_runtime.poller import Delivery, SqsPoller
from local_runtime.provision import Deployment, EventSourceMappingSpec, Provisioner
from local_runtime.sink import SinkRequest, SinkServer
from local_runtime.synth import Synthesized, synthesize
from local_runtime.workers import FunctionSpec, InvocationResult, LambdaDispatcher

FAKE_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
NOTIFICATION_QUEUE = "local-runtime-notifications"
_IDLE_CHECK_INTERVAL = 0.1
_CLOSED = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")


@dataclass(frozen=True)
class Tenant:
    """Where one tenant's pipeline lives in the local account."""

    id: str
    prefix: str
    stack: str
    queue_url: str
    queue_arn: str
    state_machine_arn: str
    controller: str
    functions: tuple[str, ...]  # every function of the tenant's stack


@dataclass(frozen=True)
class Notification:
    """A message published to an SNS topic of the app (captured through an SQS subscription)."""

    topic_arn: str
    subject: str | None
    message: str
    time: str

    @property
    def data(self) -> Any:
        """The message parsed as JSON (the workflow's failure notice is JSON), else the text."""
        try:
            return json.loads(self.message)
        except ValueError:
            return self.message


class LocalPipeline:
    """The pipeline of ``tenants_file`` running on moto, with real handlers and local sinks.

    ``time_scale`` multiplies every duration of the templates that the local run honours:
    queue visibility timeout and retention, function timeouts, state machine timeouts and
    Retry intervals (0.1: a 30 s visibility timeout becomes 3 s).
    """

    def __init__(
        self,
        tenants_file: str | Path,
        *,
        time_scale: float = 0.1,
        region: str = "us-east-1",
        account_id: str = "123456789012",
        workdir: str | Path | None = None,
    ) -> None:
        if not 0 < time_scale <= 1:
            raise ValueError("time_scale must be in (0, 1]")
        self.tenants_file = Path(tenants_file)
        self.time_scale = time_scale
        self.pseudo = PseudoParameters(account_id=account_id, region=region)
        self._workdir_arg = Path(workdir) if workdir else None
        self.workdir: Path | None = None
        self.events = ProgressEvents()
        self._exit = ExitStack()
        self._server: MotoServer | None = None
        self._sinks: dict[str, SinkServer] = {}
        self._pollers: dict[str, SqsPoller] = {}  # by tenant
        self._dispatcher: LambdaDispatcher | None = None
        self._notifications: list[Notification] = []
        self._notification_queue_url: str | None = None
        self._notification_lock = threading.Lock()
        self._duplicate_ids: set[str] = set()  # copies sent by duplicate_next_event
        self._split_counts: dict[str, int] = {}  # chunk_prefix -> chunk_count (for progress events)
        self._watcher: threading.Thread | None = None
        self._stopping = threading.Event()
        self.synthesized: Synthesized | None = None
        self.deployment: Deployment | None = None
        self.tenants: dict[str, Tenant] = {}
        self.faults: Faults = Faults({})
        self.started = False
        self._session: boto3.session.Session | None = None
        self._clients: dict[tuple[str, float, int], Any] = {}
        self._clients_lock = threading.Lock()
        self.startup_seconds: dict[str, float] = {}  # phase -> seconds, for the curious

    # -- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> LocalPipeline:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Synthesize, start moto and the sinks, provision, start workers and pollers."""
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        self.started = True
        if self.events.has_subscribers:  # subscribed before start()
            self._start_watcher()

    def _start(self) -> None:
        if self._workdir_arg is not None:
            self.workdir = self._workdir_arg
            self.workdir.mkdir(parents=True, exist_ok=True)
        else:
            self.workdir = Path(tempfile.mkdtemp(prefix="local-pipeline-"))
            self._exit.callback(shutil.rmtree, self.workdir, True)
        (self.workdir / "logs").mkdir(exist_ok=True)

        mark = time.monotonic()

        def phase(name: str) -> None:
            nonlocal mark
            now = time.monotonic()
            self.startup_seconds[name] = round(now - mark, 3)
            mark = now

        self.synthesized = synthesize(self.tenants_file, self.workdir / "cdk.out")
        phase("synthesize")
        config = self.synthesized.config

        for tenant in config.tenants:
            sink = SinkServer(tenant.id)
            sink.start()
            sink.add_listener(self._on_sink_request)
            self._sinks[tenant.id] = sink
            self._exit.callback(sink.stop)

        # Patched before moto starts and restored after it stopped: while moto can run a
        # state machine, a Lambda invocation never reaches moto's Docker path.
        self._exit.enter_context(moto_patches(invoker=self._invoke, time_scale=self.time_scale))
        self._server = MotoServer()
        self._server.start()
        self._exit.callback(self._server.stop)
        phase("moto and sinks")

        self._dispatcher = LambdaDispatcher(
            runtime_env={
                "AWS_ENDPOINT_URL": self.endpoint_url,
                "AWS_ACCESS_KEY_ID": FAKE_CREDENTIALS["aws_access_key_id"],
                "AWS_SECRET_ACCESS_KEY": FAKE_CREDENTIALS["aws_secret_access_key"],
                "AWS_SESSION_TOKEN": "testing",
                "AWS_REGION": self.pseudo.region,
                "AWS_DEFAULT_REGION": self.pseudo.region,
                "AWS_EC2_METADATA_DISABLED": "true",
                "AWS_CONFIG_FILE": "/dev/null",
                "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
            },
            log_dir=self.workdir / "logs",
        )
        self._exit.callback(self._dispatcher.close)
        # Runs first on exit: stop feeding work, end executions, then workers and moto go.
        self._exit.callback(self._stop_activity)

        self.deployment = Provisioner(
            self.synthesized,
            client=self.client,
            pseudo=self.pseudo,
            time_scale=self.time_scale,
            sink_urls={tenant_id: sink.url for tenant_id, sink in self._sinks.items()},
        ).provision()
        self.tenants = self._discover_tenants()
        phase("provision")
        self.faults = Faults({t.id: t.controller for t in self.tenants.values()})

        for spec in self.deployment.functions.values():
            self._dispatcher.register(spec)
        self._dispatcher.add_fault_source(self.faults.directives)
        self._dispatcher.add_crash_observer(self.faults.observe_crash)
        self._dispatcher.add_listener(self._on_invocation)

        self._subscribe_notifications()
        self._start_pollers()
        self.events._on_first_subscriber = self._start_watcher
        phase("workers and pollers")

    def close(self) -> None:
        """Stop pollers, executions, workers, sinks and moto (idempotent)."""
        self._stopping.set()
        self._exit.close()
        self.started = False

    def _stop_activity(self) -> None:
        for poller in self._pollers.values():
            poller.stop()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
        if self.deployment is None or self._server is None:
            return
        sfn = self.client("stepfunctions")
        for tenant in self.tenants.values():
            try:
                for execution in self._list_executions(tenant, status="RUNNING"):
                    sfn.stop_execution(executionArn=execution["executionArn"], cause="local pipeline shutting down")
            except Exception:  # noqa: BLE001 - best effort while shutting down
                pass

    def _invoke(self, function_name: str, environment: dict[str, str], event: Any) -> InvocationResult:
        """moto's Lambda invocations (patched `_invoke_lambda`) land here."""
        if self._dispatcher is None:
            return InvocationResult(json.dumps({"errorType": "Runtime.Unavailable", "errorMessage": "no workers"}), True, 0.0)
        return self._dispatcher.invoke(function_name, environment, event)

    def _start_pollers(self) -> None:
        assert self.deployment is not None
        for mapping in self.deployment.event_source_mappings:
            if not mapping.enabled:
                continue
            tenant = next((t for t in self.tenants.values() if t.queue_arn == mapping.queue_arn), None)
            spec = self.deployment.functions[mapping.function_name]
            poller = SqsPoller(
                mapping,
                sqs=self.client("sqs"),
                # One attempt: an SDK retry would invoke the function twice for one receive.
                lambda_client=self.client("lambda", read_timeout=max(60.0, spec.timeout_seconds + 30), max_attempts=1),
                region=self.pseudo.region,
                concurrency=spec.reserved_concurrency or 1,
                on_delivery=self._on_delivery,
            )
            poller.start()
            self._pollers[tenant.id if tenant else mapping.function_name] = poller

    # -- clients and names ------------------------------------------------------------------

    @property
    def endpoint_url(self) -> str:
        """The moto server, for boto3 (`endpoint_url=`) or the AWS CLI (`--endpoint-url`)."""
        assert self._server is not None, "start the pipeline first"
        return self._server.endpoint_url

    def client(self, service: str, *, read_timeout: float = 60.0, max_attempts: int = 2) -> Any:
        """A boto3 client of the local account (cached; boto3 clients are thread-safe)."""
        key = (service, read_timeout, max_attempts)
        with self._clients_lock:
            if key not in self._clients:
                if self._session is None:
                    self._session = boto3.session.Session(region_name=self.pseudo.region, **FAKE_CREDENTIALS)
                self._clients[key] = self._session.client(
                    service,
                    endpoint_url=self.endpoint_url,
                    config=Config(retries={"total_max_attempts": max_attempts, "mode": "standard"}, read_timeout=read_timeout),
                )
            return self._clients[key]

    @property
    def templates(self) -> dict[str, dict[str, Any]]:
        assert self.synthesized is not None
        return self.synthesized.templates

    @property
    def tenant_ids(self) -> list[str]:
        return list(self.tenants)

    @property
    def landing_bucket(self) -> str:
        """The bucket the tenants' rules listen to (from the templates' event patterns)."""
        return self._rule_bucket()

    def _rule_bucket(self) -> str:
        assert self.deployment is not None
        for rule in self.deployment.of_type("AWS::Events::Rule"):
            names = (rule.properties.get("EventPattern") or {}).get("detail", {}).get("bucket", {}).get("name")
            if names:
                return names[0]
        raise LookupError("no EventBridge rule names a landing bucket")

    def _discover_tenants(self) -> dict[str, Tenant]:
        """Each tenant's resources: the stack whose queue feeds the controller of that tenant."""
        assert self.deployment is not None and self.synthesized is not None
        found: dict[str, Tenant] = {}
        for config in self.synthesized.config.tenants:
            mapping = next(
                m
                for m in self.deployment.event_source_mappings
                if self.deployment.functions[m.function_name].environment.get("TENANT_ID") == config.id
            )
            controller = self.deployment.functions[mapping.function_name]
            functions = [r.ref for r in self.deployment.of_type("AWS::Lambda::Function", mapping.stack)]
            found[config.id] = Tenant(
                id=config.id,
                prefix=config.prefix,
                stack=mapping.stack,
                queue_url=mapping.queue_url,
                queue_arn=mapping.queue_arn,
                state_machine_arn=controller.environment["STATE_MACHINE_ARN"],
                controller=controller.name,
                functions=tuple(sorted(functions)),
            )
        return found

    # -- input ------------------------------------------------------------------------------

    def put_file(self, tenant: str, name: str, data: bytes | str) -> tuple[str, str]:
        """Upload ``name`` under the tenant's prefix; returns ``(key, version_id)``."""
        key = self.tenants[tenant].prefix + name
        body = data.encode() if isinstance(data, str) else data
        response = self.client("s3").put_object(Bucket=self.landing_bucket, Key=key, Body=body)
        self.events.emit("file_uploaded", tenant, key=key, version_id=response["VersionId"])
        return key, response["VersionId"]

    def send_to_queue(self, tenant: str, body: str, *, deduplication_id: str | None = None) -> str:
        """Put a raw message on the tenant's queue (e.g. a duplicate of an EventBridge event).

        A fresh deduplication id by default: the copy reaches the consumer as a redelivery
        from outside SQS's 5-minute deduplication window would.
        """
        response = self.client("sqs").send_message(
            QueueUrl=self.tenants[tenant].queue_url,
            MessageBody=body,
            MessageGroupId=tenant,
            MessageDeduplicationId=deduplication_id or uuid.uuid4().hex,
        )
        return response["MessageId"]

    # -- observation ------------------------------------------------------------------------

    def sink(self, tenant: str) -> SinkServer:
        """The tenant's core-system stand-in (requests, accepted records, fault injection)."""
        return self._sinks[tenant]

    def deliveries(self, tenant: str) -> list[Delivery]:
        """Every message the tenant's poller handed to the controller, with the outcome."""
        return list(self._pollers[tenant].deliveries)

    def executions(self, tenant: str) -> list[dict[str, Any]]:
        """The tenant's executions, oldest first, as DescribeExecution returns them
        (``executionArn``, ``name``, ``status``, ``startDate``, ``stopDate``, ``error``,
        ``cause``) with ``input``/``output`` parsed, plus the file's ``key`` and ``version_id``."""
        sfn = self.client("stepfunctions")
        described = []
        for item in self._list_executions(self.tenants[tenant]):
            detail = sfn.describe_execution(executionArn=item["executionArn"])
            execution_input = json.loads(detail.get("input") or "{}")
            described.append(
                {
                    "executionArn": detail["executionArn"],
                    "name": detail["name"],
                    "status": detail["status"],
                    "startDate": detail["startDate"],
                    "stopDate": detail.get("stopDate"),
                    "input": execution_input,
                    "output": json.loads(detail["output"]) if detail.get("output") else None,
                    "error": detail.get("error"),
                    "cause": detail.get("cause"),
                    "key": execution_input.get("key"),
                    "version_id": execution_input.get("version_id"),
                }
            )
        return sorted(described, key=lambda e: (e["startDate"], e["name"]))

    def _list_executions(self, tenant: Tenant, status: str | None = None) -> list[dict[str, Any]]:
        sfn = self.client("stepfunctions")
        kwargs: dict[str, Any] = {"stateMachineArn": tenant.state_machine_arn, "maxResults": 1000}
        if status:
            kwargs["statusFilter"] = status
        items: list[dict[str, Any]] = []
        while True:
            page = sfn.list_executions(**kwargs)
            items.extend(page.get("executions", []))
            if not page.get("nextToken"):
                return items
            kwargs["nextToken"] = page["nextToken"]

    @property
    def notifications(self) -> list[Notification]:
        """Messages published to the app's SNS topics so far, in arrival order."""
        self._drain_notifications()
        with self._notification_lock:
            return list(self._notifications)

    def _subscribe_notifications(self) -> None:
        assert self.deployment is not None
        sqs, sns = self.client("sqs"), self.client("sns")
        self._notification_queue_url = sqs.create_queue(QueueName=NOTIFICATION_QUEUE)["QueueUrl"]
        queue_arn = f"arn:{self.pseudo.partition}:sqs:{self.pseudo.region}:{self.pseudo.account_id}:{NOTIFICATION_QUEUE}"
        for topic in self.deployment.of_type("AWS::SNS::Topic"):
            sns.subscribe(TopicArn=topic.ref, Protocol="sqs", Endpoint=queue_arn)

    def _drain_notifications(self) -> None:
        if self._notification_queue_url is None:
            return
        sqs = self.client("sqs")
        with self._notification_lock:
            while True:
                messages = sqs.receive_message(
                    QueueUrl=self._notification_queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0
                ).get("Messages", [])
                if not messages:
                    return
                for message in messages:
                    envelope = json.loads(message["Body"])
                    self._notifications.append(
                        Notification(
                            topic_arn=envelope.get("TopicArn", ""),
                            subject=envelope.get("Subject"),
                            message=envelope.get("Message", ""),
                            time=envelope.get("Timestamp", ""),
                        )
                    )
                    sqs.delete_message(QueueUrl=self._notification_queue_url, ReceiptHandle=message["ReceiptHandle"])

    def logs(self, function_name: str) -> str:
        """What a function's workers wrote to stdout/stderr (JSON log lines)."""
        assert self._dispatcher is not None
        path = self._dispatcher.log_path(function_name)
        return path.read_text(encoding="utf-8") if path.exists() else ""

    # -- waiting ----------------------------------------------------------------------------

    def is_idle(self, *, tenants: list[str] | None = None) -> bool:
        """One check of what `wait_until_idle` waits for (for a caller with its own loop)."""
        return self._busy_reason([self.tenants[t] for t in (tenants or list(self.tenants))]) is None

    def wait_until_idle(self, timeout: float = 120.0, *, tenants: list[str] | None = None) -> None:
        """Block until nothing is left to do: queues empty (none in flight), no invocation
        running, no execution RUNNING; checked twice in a row. Raises `TimeoutError` saying
        what was still busy."""
        deadline = time.monotonic() + timeout
        selected = [self.tenants[t] for t in (tenants or list(self.tenants))]
        quiet_checks = 0
        reason = "not checked"
        while time.monotonic() < deadline:
            reason = self._busy_reason(selected)
            quiet_checks = quiet_checks + 1 if reason is None else 0
            if quiet_checks >= 2:
                return
            time.sleep(_IDLE_CHECK_INTERVAL)
        raise TimeoutError(f"local pipeline not idle after {timeout:g}s: {reason}")

    def _busy_reason(self, tenants: list[Tenant]) -> str | None:
        assert self._dispatcher is not None
        sqs = self.client("sqs")
        for tenant in tenants:
            poller = self._pollers.get(tenant.id)
            if poller is not None and poller.busy:
                return f"{tenant.id}: the controller is handling a message"
            attributes = sqs.get_queue_attributes(QueueUrl=tenant.queue_url, AttributeNames=["All"])["Attributes"]
            waiting = int(attributes.get("ApproximateNumberOfMessages", 0))
            in_flight = int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0))
            if waiting or in_flight:
                return f"{tenant.id}: queue holds {waiting} visible and {in_flight} in-flight messages"
            running = self._list_executions(tenant, status="RUNNING")
            if running:
                return f"{tenant.id}: execution {running[0]['name']} is RUNNING"
        functions = [name for tenant in tenants for name in tenant.functions]
        running = self._dispatcher.in_flight(functions)
        if running:
            return f"{running} Lambda invocations in progress"
        return None

    # -- progress events --------------------------------------------------------------------

    def _tenant_of(self, spec: FunctionSpec) -> str:
        return spec.environment.get("TENANT_ID", spec.name)

    def _on_invocation(self, spec: FunctionSpec, event: Any, result: InvocationResult | None) -> None:
        tenant = self._tenant_of(spec)
        handler = spec.handler.rsplit(".", 1)[0]
        if handler == "controller" and result is not None:
            if result.errored:
                outcome = "waiting" if result.error_type == "GateBusyError" else "error"
                self.events.emit("controller", tenant, outcome=outcome, error_type=result.error_type)
            else:
                value = result.value if isinstance(result.value, dict) else {}
                outcome = "started" if value.get("started") else "already_started"
                self.events.emit("controller", tenant, outcome=outcome, execution_name=value.get("execution_name"))
        elif handler == "split" and result is not None:
            value = result.value if isinstance(result.value, dict) and not result.errored else {}
            if value:
                self._split_counts[value.get("chunk_prefix", "")] = int(value.get("chunk_count", 0))
            self.events.emit(
                "file_split",
                tenant,
                key=event.get("key"),
                chunk_count=value.get("chunk_count"),
                record_count=value.get("record_count"),
                error_type=result.error_type,
            )
        elif handler == "register_chunk":
            fields = {
                "key": event.get("key"),
                "chunk_index": event.get("chunk_index"),
                "chunk_count": self._split_counts.get(event.get("chunk_prefix", "")),
            }
            if result is None:
                self.events.emit("chunk_started", tenant, **fields)
            else:
                self.events.emit("chunk_finished", tenant, error_type=result.error_type, **fields)

    def _on_delivery(self, mapping: EventSourceMappingSpec, delivery: Delivery) -> None:
        """Duplicate a first delivery if armed (`faults.duplicate_next_event`)."""
        tenant = next((t.id for t in self.tenants.values() if t.queue_arn == mapping.queue_arn), None)
        if tenant is None or delivery.receive_count != 1 or delivery.message_id in self._duplicate_ids:
            return
        if self.faults.take_duplicate(tenant):
            copy_id = self.send_to_queue(tenant, delivery.body)
            self._duplicate_ids.add(copy_id)
            self.faults.duplicates_sent.append((tenant, delivery.message_id, copy_id))
            self.events.emit("duplicate_sent", tenant, message_id=delivery.message_id, copy_id=copy_id)

    def _on_sink_request(self, tenant: str, request: SinkRequest) -> None:
        self.events.emit("record_delivered", tenant, status=request.status, registered=request.registered)

    def _start_watcher(self) -> None:
        """Emit ``file_finished`` when an execution closes (only once someone subscribed)."""
        if self._watcher is not None or not self.started:
            return

        def watch() -> None:
            reported: set[str] = set()
            while not self._stopping.wait(0.25):
                for tenant in list(self.tenants.values()):
                    try:
                        items = self._list_executions(tenant)
                    except Exception:  # noqa: BLE001 - moto is going away
                        continue
                    for item in items:
                        if item["status"] in _CLOSED and item["executionArn"] not in reported:
                            reported.add(item["executionArn"])
                            self.events.emit("file_finished", tenant.id, execution_name=item["name"], status=item["status"])

        self._watcher = threading.Thread(target=watch, name="execution-watcher", daemon=True)
        self._watcher.start()
