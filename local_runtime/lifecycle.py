"""Start and stop the parts of a local run, in order.

Start: synthesize the app, start a sink server per tenant, patch moto and start it in server
mode, deploy the templates (`deploy`), start one pool of worker processes per function and one
poller per event source mapping. Stop, in reverse: pollers first (no new work), RUNNING
executions stopped, then workers, moto (reset) and sinks; no process or thread is left.
"""

from __future__ import annotations

import json
import shutil
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
from local_runtime.synth import Synthesized, synthesize

#: The workers' session token (their credentials are moto's fake ones); a sigv4 sink checks it.
WORKER_SESSION_TOKEN = "testing"


class Runtime:
    """The running parts of one local pipeline; `LocalPipeline` composes it."""

    def __init__(
        self,
        tenants_file: Path,
        *,
        time_scale: float,
        region: str,
        workdir: Path | None,
        function_environment: FunctionEnvironmentHook | None,
        status_events: bool = False,
    ) -> None:
        self._status_events = status_events
        self._tenants_file = tenants_file
        self._time_scale = time_scale
        self._region = region
        self._workdir_arg = workdir
        self._function_environment = function_environment
        self._exit = ExitStack()
        self.workdir: Path | None = None
        self.synthesized: Synthesized | None = None
        self.server: MotoServer | None = None
        self.sinks: dict[str, SinkServer] = {}
        self.dispatcher: LambdaDispatcher | None = None
        self.deployment: Deployment | None = None
        self.pollers: dict[str, SqsPoller] = {}  # by tenant (or function name)

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        if self._workdir_arg is not None:
            self.workdir = self._workdir_arg
            self.workdir.mkdir(parents=True, exist_ok=True)
        else:
            self.workdir = Path(tempfile.mkdtemp(prefix="local-pipeline-"))
            self._exit.callback(shutil.rmtree, self.workdir, True)
        (self.workdir / "logs").mkdir(exist_ok=True)

        self.synthesized = synthesize(self._tenants_file, self.workdir / "cdk.out")
        for tenant in self.synthesized.tenants:
            sink = self.sinks[tenant.id] = SinkServer(tenant.id)
            sink.start()
            self._exit.callback(sink.stop)

        # Patched before moto starts and restored after it stopped: while moto can run a
        # state machine, a Lambda invocation never reaches moto's Docker path.
        self._exit.enter_context(moto_patches(
            invoker=self._invoke, time_scale=self._time_scale, status_events=self._status_events
        ))
        self.server = MotoServer(region=self._region)
        self.server.start()
        self._exit.callback(self.server.stop)

        worker_credentials = (FAKE_CREDENTIALS["aws_access_key_id"], FAKE_CREDENTIALS["aws_secret_access_key"],
                              WORKER_SESSION_TOKEN)
        self.dispatcher = LambdaDispatcher(
            runtime_env={
                "AWS_ENDPOINT_URL": self.server.endpoint_url,
                "AWS_ACCESS_KEY_ID": worker_credentials[0],
                "AWS_SECRET_ACCESS_KEY": worker_credentials[1],
                "AWS_SESSION_TOKEN": worker_credentials[2],
                "AWS_REGION": self._region,
                "AWS_DEFAULT_REGION": self._region,
                "AWS_EC2_METADATA_DISABLED": "true",
                "AWS_CONFIG_FILE": "/dev/null",
                "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
            },
            log_dir=self.workdir / "logs",
        )
        self._exit.callback(self.dispatcher.close)
        self._exit.callback(self._stop_activity)  # runs first on exit

        # The sinks demand each tenant's `sink.auth`; its bearer secrets exist before any file flows.
        auth = enforce_auth(self.sinks, sigv4_credentials=worker_credentials)
        self.deployment = deploy(
            self.synthesized,
            client=self.server.client,
            time_scale=self._time_scale,
            function_environment=_after(_after(point_register_at(self.sinks), auth), self._function_environment),
        )
        secretsmanager = self.server.client("secretsmanager")
        for name, token in auth.secrets_to_create.items():
            secretsmanager.create_secret(Name=name, SecretString=token)
        for function in self.deployment.functions.values():
            self.dispatcher.register(function)
        tenant_of_queue = {t.queue_arn: t.id for t in self.deployment.tenants.values()}
        for mapping in self.deployment.event_source_mappings:
            if not mapping.enabled:
                continue
            function = self.deployment.functions[mapping.function_name]
            poller = SqsPoller(
                mapping,
                sqs=self.server.client("sqs"),
                # One attempt: an SDK retry would invoke the function twice for one receive.
                lambda_client=self.server.client(
                    "lambda", read_timeout=max(60.0, function.timeout_seconds + 30), max_attempts=1
                ),
                region=self._region,
                concurrency=function.reserved_concurrency or 1,
            )
            poller.start()
            self.pollers[tenant_of_queue.get(mapping.queue_arn, mapping.function_name)] = poller

    def close(self) -> None:
        """Stop everything that was started (idempotent)."""
        self._exit.close()

    def _invoke(self, function_name: str, environment: dict[str, str], event: Any) -> InvocationResult:
        """moto's Lambda invocations (patched `_invoke_lambda`) land here."""
        if self.dispatcher is None:
            return InvocationResult(
                json.dumps({"errorType": "Runtime.Unavailable", "errorMessage": "no workers"}), True, 0.0
            )
        return self.dispatcher.invoke(function_name, environment, event)

    def _stop_activity(self) -> None:
        for poller in self.pollers.values():
            poller.stop()
        if self.deployment is None or self.server is None:
            return
        sfn = self.server.client("stepfunctions")
        for tenant in self.deployment.tenants.values():
            try:
                for execution in list_executions(sfn, tenant.state_machine_arn, "RUNNING"):
                    sfn.stop_execution(
                        executionArn=execution["executionArn"], cause="local pipeline shutting down"
                    )
            except Exception:  # noqa: BLE001 - best effort while shutting down
                pass


def _after(first: FunctionEnvironmentHook, then: FunctionEnvironmentHook | None) -> FunctionEnvironmentHook:
    """`then` applied to what `first` made of a function's environment."""
    if then is None:
        return first
    return lambda tenant, role, variables: then(tenant, role, first(tenant, role, variables))
