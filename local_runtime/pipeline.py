"""`LocalPipeline`: the whole pipeline on one machine, from the synthesized templates (the API:
local_runtime/README.md). It composes `lifecycle.Runtime` (start and stop), `observation.Observer`
(executions, notifications, idleness) and `faults`.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lambdas import contract
from local_runtime.deploy import Deployment, FunctionEnvironmentHook, Tenant
from local_runtime.faults import Faults
from local_runtime.lifecycle import Runtime
from local_runtime.observation import Notification, Observer
from local_runtime.poller import Delivery
from local_runtime.sink import SinkServer
from local_runtime.synth import AppBuilder


class LocalPipeline:
    """The pipeline of `source` running on moto, with real handlers and local sinks: a tenants
    file, or ``build(outdir) -> App``, an app of its own (`examples/embedded/app.py`).

    `time_scale` multiplies every duration of the templates that the local run honours (0.1: a
    30 s visibility timeout becomes 3 s). `function_environment(tenant, kind, variables) ->
    variables` may change a tenant function's environment before it is deployed, after the
    default hook (`sink.point_register_at`: each register function sends to its tenant's sink).
    """

    def __init__(
        self,
        source: str | Path | AppBuilder,
        *,
        time_scale: float = 0.1,
        function_environment: FunctionEnvironmentHook | None = None,
        status_events: bool = False,
    ) -> None:
        if not 0 < time_scale <= 1:
            raise ValueError("time_scale must be in (0, 1]")
        self.time_scale = time_scale
        self.faults = Faults()
        self._runtime = Runtime(
            source,
            time_scale=time_scale,
            function_environment=function_environment,
            status_events=status_events,
        )
        self._observer: Observer | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> LocalPipeline:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Synthesize, start moto and the sinks, deploy, start workers and pollers."""
        try:
            self._runtime.start()
            self._wire()
        except BaseException:
            self.close()
            raise

    def _wire(self) -> None:
        runtime, deployment = self._runtime, self.deployment
        assert runtime.dispatcher is not None and runtime.server is not None
        self.faults = Faults(deployment.tenants, send_copy=self.send_to_queue)
        runtime.dispatcher.add_fault_source(self.faults.directives)
        runtime.dispatcher.add_crash_observer(self.faults.observe_crash)
        for tenant, poller in runtime.pollers.items():
            poller.add_listener(functools.partial(self.faults.on_delivery, tenant))
        self._observer = Observer(
            runtime.server.client,
            deployment.tenants,
            runtime.pollers,
            runtime.dispatcher,
            deployment.physical_ids("AWS::SNS::Topic"),
        )

    def close(self) -> None:
        """Stop pollers, executions, workers, sinks and moto (idempotent)."""
        self._runtime.close()

    # -- where things are -------------------------------------------------------------------

    @property
    def endpoint_url(self) -> str:
        """The moto server, for boto3 (`endpoint_url=`) or the AWS CLI (`--endpoint-url`)."""
        assert self._runtime.server is not None, "start the pipeline first"
        return self._runtime.server.endpoint_url

    def client(self, service: str) -> Any:
        """A boto3 client of the local account (cached; boto3 clients are thread-safe)."""
        assert self._runtime.server is not None, "start the pipeline first"
        return self._runtime.server.client(service)

    @property
    def deployment(self) -> Deployment:
        """Every stack as created on moto: physical ids, outputs, functions, tenants."""
        assert self._runtime.deployment is not None, "start the pipeline first"
        return self._runtime.deployment

    @property
    def templates(self) -> dict[str, dict[str, Any]]:
        """The synthesized templates, by stack name (before the pre-transform)."""
        assert self._runtime.synthesized is not None, "start the pipeline first"
        return self._runtime.synthesized.templates

    @property
    def tenants(self) -> dict[str, Tenant]:
        return self.deployment.tenants

    @property
    def tenant_ids(self) -> list[str]:
        return list(self.tenants)

    @property
    def landing_bucket(self) -> str:
        """The bucket the tenants' rules listen to."""
        return next(iter(self.tenants.values())).bucket

    # -- input ------------------------------------------------------------------------------

    def put_file(self, tenant: str, name: str, data: bytes | str) -> tuple[str, str]:
        """Upload `name` under the tenant's prefix; returns `(key, version_id)`."""
        where = self.tenants[tenant]
        key = where.prefix + name
        body = data.encode() if isinstance(data, str) else data
        response = self.client("s3").put_object(Bucket=where.bucket, Key=key, Body=body)
        self._runtime.pollers[tenant].wake()  # the event reached the queue within put_object
        return key, response["VersionId"]

    def send_to_queue(self, tenant: str, body: str, *, deduplication_id: str | None = None) -> str:
        """Put a raw message on the tenant's queue (e.g. a duplicate of an EventBridge event).

        A fresh deduplication id by default: the copy reaches the consumer as a redelivery
        from outside SQS's 5-minute deduplication window would.
        """
        queue_url = self.tenants[tenant].queue_url
        message = contract.queue_message(queue_url, tenant, body, deduplication_id or uuid.uuid4().hex)
        message_id = self.client("sqs").send_message(**message)["MessageId"]
        self._runtime.pollers[tenant].wake()
        return message_id

    # -- observation ------------------------------------------------------------------------

    def sink(self, tenant: str) -> SinkServer:
        """The tenant's core-system stand-in (requests, accepted records, fault injection)."""
        return self._runtime.sinks[tenant]

    def add_invocation_listener(self, listener: Callable[[Any, Any, Any], None]) -> None:
        """`listener(function, event, result)` around every Lambda invocation (`result` None
        before it runs); it must not raise."""
        assert self._runtime.dispatcher is not None, "start the pipeline first"
        self._runtime.dispatcher.add_listener(listener)

    def deliveries(self, tenant: str) -> list[Delivery]:
        """Every message the tenant's poller handed to the controller, with the outcome."""
        return list(self._runtime.pollers[tenant].deliveries)

    def executions(self, tenant: str) -> list[dict[str, Any]]:
        """The tenant's executions, oldest first (see `Observer.executions`)."""
        assert self._observer is not None, "start the pipeline first"
        return self._observer.executions(tenant)

    @property
    def notifications(self) -> list[Notification]:
        """Messages published to the app's SNS topics so far, in arrival order."""
        assert self._observer is not None, "start the pipeline first"
        return self._observer.notifications()

    def logs(self, function_name: str) -> str:
        """What a function's workers wrote (the runtime's log lines, JSON in JSON log format)."""
        assert self._runtime.dispatcher is not None, "start the pipeline first"
        path = self._runtime.dispatcher.log_path(function_name)
        return path.read_text(encoding="utf-8") if path.exists() else ""

    def is_idle(self, *, tenants: list[str] | None = None) -> bool:
        """One check of what `wait_until_idle` waits for (for a caller with its own loop)."""
        assert self._observer is not None, "start the pipeline first"
        return self._observer.busy_reason(tenants or self.tenant_ids) is None

    def wait_until_idle(self, timeout: float = 120.0, *, tenants: list[str] | None = None) -> None:
        """Block until nothing is left to do: queues empty (none in flight), no invocation
        running, no execution RUNNING; checked twice in a row. Raises `TimeoutError` saying
        what was still busy."""
        assert self._observer is not None, "start the pipeline first"
        self._observer.wait_until_idle(timeout, tenants or self.tenant_ids)
