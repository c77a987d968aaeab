"""Start and stop the parts of a local run, in order (local_runtime/README.md, "How it works").

Stop, in reverse: pollers first (no new work), RUNNING executions stopped, then workers, moto
(reset) and sinks; no process or thread is left.
"""

from __future__ import annotations

import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from local_runtime.deploy import Deployment, FunctionEnvironmentHook, deploy
from local_runtime.lambda_pool import InvocationResult, LambdaDispatcher
from local_runtime.moto_server import FAKE_CREDENTIALS, MotoServer, moto_patches
from local_runtime.observation import list_executions
from local_runtime.poller import SqsPoller
from local_runtime.sink import SinkServer, enforce_auth, point_register_at
from local_runtime.synth import AppBuilder, Synthesized, synthesize

REGION = "us-east-1"
#: The workers' session token (their credentials are moto's fake ones); a sigv4 sink checks it.
WORKER_SESSION_TOKEN = "testing"
STOP_CAUSE = "local pipeline shutting down"


class Runtime:
    """The running parts of one local pipeline; `LocalPipeline` composes it."""

    def __init__(
        self,
        source: str | Path | AppBuilder,
        *,
        time_scale: float,
        function_environment: FunctionEnvironmentHook | None,
        status_events: bool,
    ) -> None:
        self._source = source
        self._time_scale = time_scale
        self._function_environment = function_environment
        self._status_events = status_events
        self._exit = ExitStack()
        self.synthesized: Synthesized | None = None
        self.server: MotoServer | None = None
        self.sinks: dict[str, SinkServer] = {}
        self.dispatcher: LambdaDispatcher | None = None
        self.deployment: Deployment | None = None
        self.pollers: dict[str, SqsPoller] = {}  # by tenant

    def start(self) -> None:
        """Start everything; on a failure the caller closes what was started."""
        workdir = Path(
            self._exit.enter_context(
                tempfile.TemporaryDirectory(prefix="local-pipeline-", ignore_cleanup_errors=True)
            )
        )
        (workdir / "logs").mkdir()
        self.synthesized = synthesize(self._source, workdir / "cdk.out")
        for tenant in self.synthesized.tenants:
            sink = self.sinks[tenant.id] = SinkServer(tenant.id)
            sink.start()
            self._exit.callback(sink.stop)

        # Patched before moto starts and restored after it stopped: while moto can run a
        # state machine, a Lambda invocation never reaches moto's Docker path.
        self._exit.enter_context(
            moto_patches(invoker=self._invoke, time_scale=self._time_scale, status_events=self._status_events)
        )
        self.server = MotoServer(region=REGION)
        self.server.start()
        self._exit.callback(self.server.stop)

        credentials = (
            FAKE_CREDENTIALS["aws_access_key_id"],
            FAKE_CREDENTIALS["aws_secret_access_key"],
            WORKER_SESSION_TOKEN,
        )
        self.dispatcher = LambdaDispatcher(
            runtime_env={
                "AWS_ENDPOINT_URL": self.server.endpoint_url,
                "AWS_ACCESS_KEY_ID": credentials[0],
                "AWS_SECRET_ACCESS_KEY": credentials[1],
                "AWS_SESSION_TOKEN": credentials[2],
                "AWS_REGION": REGION,
                "AWS_DEFAULT_REGION": REGION,
                "AWS_EC2_METADATA_DISABLED": "true",
                "AWS_CONFIG_FILE": "/dev/null",
                "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
            },
            log_dir=workdir / "logs",
        )
        self._exit.callback(self.dispatcher.close)

        # The sinks demand each tenant's `sink.auth`; its bearer secrets exist before any file flows.
        auth, secrets_to_create = enforce_auth(self.sinks, credentials)
        self.deployment = deploy(
            self.synthesized,
            client=self.server.client,
            time_scale=self._time_scale,
            function_environment=_chained(point_register_at(self.sinks), auth, self._function_environment),
        )
        self._exit.callback(self._stop_activity)  # runs before the workers stop
        secretsmanager = self.server.client("secretsmanager")
        for name, token in secrets_to_create.items():
            secretsmanager.create_secret(Name=name, SecretString=token)
        for function in self.deployment.functions.values():
            self.dispatcher.register(function)
        for mapping in self.deployment.event_source_mappings:
            function = self.deployment.functions[mapping.function_name]
            poller = SqsPoller(
                mapping,
                sqs=self.server.client("sqs"),
                # One attempt: an SDK retry would invoke the function twice for one receive.
                lambda_client=self.server.client(
                    "lambda", read_timeout=max(60.0, function.timeout_seconds + 30), max_attempts=1
                ),
                region=REGION,
                concurrency=function.reserved_concurrency or 1,
            )
            poller.start()
            self.pollers[function.tenant] = poller
        # An invocation that ended may have sent or released a message (a hand-off, a kick).
        self.dispatcher.add_listener(self._wake_pollers)

    def close(self) -> None:
        """Stop everything that was started (idempotent)."""
        self._exit.close()

    def _wake_pollers(self, function: Any, _event: Any, result: InvocationResult | None) -> None:
        """An ended invocation of a tenant's function wakes that tenant's poller (one of a shared
        function every poller), except split and register: they never send or release a message."""
        if result is None or function.kind in ("split", "register"):
            return
        for tenant, poller in self.pollers.items():
            if function.tenant in (None, tenant):
                poller.wake()

    def _invoke(self, function_name: str, environment: dict[str, str], event: Any) -> InvocationResult:
        """moto's Lambda invocations (patched `_invoke_lambda`) land here."""
        assert self.dispatcher is not None, "moto invokes a function only once it is deployed"
        return self.dispatcher.invoke(function_name, environment, event)

    def _stop_activity(self) -> None:
        for poller in self.pollers.values():
            poller.stop()
        assert self.server is not None and self.deployment is not None
        sfn = self.server.client("stepfunctions")
        for tenant in self.deployment.tenants.values():
            try:
                for execution in list_executions(sfn, tenant.state_machine_arn, "RUNNING"):
                    sfn.stop_execution(executionArn=execution["executionArn"], cause=STOP_CAUSE)
            except Exception:
                pass


def _chained(*hooks: FunctionEnvironmentHook | None) -> FunctionEnvironmentHook:
    """The hooks applied in turn to a function's environment."""

    def hook(tenant: str, kind: str, variables: dict[str, Any]) -> dict[str, Any]:
        for one in hooks:
            if one is not None:
                variables = one(tenant, kind, variables)
        return variables

    return hook
