"""moto in server mode on 127.0.0.1, plus the few patches the local run relies on.

Server mode (not `mock_aws`) because the Lambda workers are separate processes that reach
moto over HTTP (`AWS_ENDPOINT_URL`), and because moto's Step Functions interpreter calls
Lambda and SNS through `http://localhost:$MOTO_PORT`.

Every patch is applied on entry and undone on exit; each one says which moto 5.2.5
behaviour it changes and why (see docs/design.md, section 6).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import boto3
from botocore.config import Config

from lambdas import contract
from local_runtime.lambda_pool import InvocationResult

#: Signature of the function that runs one Lambda invocation: (function name, its
#: environment variables in moto, event) -> result.
LambdaInvoker = Callable[[str, dict[str, str], Any], InvocationResult]

#: SQS long polls re-check for deliverable messages this often (instead of spinning).
SQS_WAIT_POLL_SECONDS = 0.05

#: moto accepts any credentials; the local account is moto's default, 123456789012.
FAKE_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}

_active_lock = threading.Lock()


class MotoServer:
    """A `ThreadedMotoServer` on a free loopback port, configured for the local run.

    Only one can run per process: moto's backends and the patches are process-wide.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, region: str = "us-east-1") -> None:
        self.host = host
        self.port = port  # 0: any free port, known once started
        self._server: Any = None
        self._owns_lock = False
        self._saved_env: dict[str, str | None] = {}
        self._saved_config: dict[str, Any] | None = None
        self._saved_log_levels: dict[str, int] = {}
        self._session: boto3.session.Session | None = None
        self._clients: dict[tuple[str, float, int], Any] = {}
        self._clients_lock = threading.Lock()
        self.region = region

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def client(self, service: str, *, read_timeout: float = 60.0, max_attempts: int = 2) -> Any:
        """A boto3 client of the local account (cached; boto3 clients are thread-safe)."""
        key = (service, read_timeout, max_attempts)
        with self._clients_lock:
            if key not in self._clients:
                if self._session is None:
                    self._session = boto3.session.Session(region_name=self.region, **FAKE_CREDENTIALS)
                self._clients[key] = self._session.client(
                    service,
                    endpoint_url=self.endpoint_url,
                    config=Config(
                        retries={"total_max_attempts": max_attempts, "mode": "standard"},
                        read_timeout=read_timeout,
                    ),
                )
            return self._clients[key]

    def start(self) -> None:
        if not _active_lock.acquire(blocking=False):
            raise RuntimeError(
                "a local pipeline is already running in this process (moto state is process-wide)"
            )
        self._owns_lock = True
        try:
            from moto.server import ThreadedMotoServer

            self._quiet_logs()
            self._server = ThreadedMotoServer(ip_address=self.host, port=self.port, verbose=False)
            self._server.start()
            self.port = self._server.get_host_and_port()[1]
            # moto's Step Functions interpreter reaches Lambda and SNS at localhost:$MOTO_PORT.
            self._set_env("MOTO_PORT", str(self.port))
            # Loopback traffic (moto, sinks) must never go through a proxy from the environment.
            for key in ("NO_PROXY", "no_proxy"):
                present = [h for h in os.environ.get(key, "").split(",") if h]
                self._set_env(
                    key, ",".join([*present, *(h for h in ("127.0.0.1", "localhost") if h not in present)])
                )
            self.reset()
            from moto.core.config import default_user_config

            # The config API does not report this key back, so remember it from the module.
            self._saved_config = {"stepfunctions": dict(default_user_config.get("stepfunctions", {}))}
            # Run state machines for real (the "mock_aws(config=...)" setting, server-mode API).
            self._api("POST", "/moto-api/config", {"stepfunctions": {"execute_state_machine": True}})
        except BaseException:
            self.stop()
            raise

    def reset(self) -> None:
        """Drop every resource of every service (a fresh account)."""
        self._api("POST", "/moto-api/reset")

    def stop(self) -> None:
        try:
            if self._server is not None:
                try:
                    self.reset()
                    if self._saved_config is not None:
                        self._api("POST", "/moto-api/config", self._saved_config)
                finally:
                    self._server.stop()
                    self._server = None
        finally:
            for key, value in self._saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            self._saved_env.clear()
            for name, level in self._saved_log_levels.items():
                logging.getLogger(name).setLevel(level)
            self._saved_log_levels.clear()
            if self._owns_lock:
                self._owns_lock = False
                _active_lock.release()

    def _set_env(self, key: str, value: str) -> None:
        self._saved_env.setdefault(key, os.environ.get(key))
        os.environ[key] = value

    def _quiet_logs(self) -> None:
        # werkzeug logs every request; moto's SFN parser logs each failed task at WARNING/ERROR.
        for name in ("werkzeug", "moto.stepfunctions.parser"):
            logger = logging.getLogger(name)
            self._saved_log_levels[name] = logger.level
            logger.setLevel(logging.CRITICAL)

    def _api(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.endpoint_url + path, data=data, method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read()
        try:
            return json.loads(text) if text else None
        except ValueError:
            return None


# --- patches -------------------------------------------------------------------------------


@contextmanager
def moto_patches(*, invoker: LambdaInvoker, time_scale: float, status_events: bool = False) -> Iterator[None]:
    """Apply every patch of the local run for the duration of the block; ``status_events``:
    Step Functions' status-change events reach the default bus (`_sfn_status_change_events`)."""
    with ExitStack() as stack:
        stack.enter_context(_lambda_runs_local_workers(invoker))
        stack.enter_context(_s3_events_get_fresh_ids())
        stack.enter_context(_s3_event_keys_encoded())
        stack.enter_context(_scaled_retry_sleeps(time_scale))
        stack.enter_context(_sqs_long_poll_sleeps())
        stack.enter_context(_cfn_state_machines_in_the_executing_backend())
        stack.enter_context(_cfn_state_machine_versions_and_aliases())
        stack.enter_context(_sfn_starts_through_aliases_and_versions())
        stack.enter_context(_sfn_start_execution_task_calls_boto_with_its_member_names())
        stack.enter_context(_states_errors_pass_through_fail_states_and_maps())
        stack.enter_context(_sync_tasks_poll_often())
        stack.enter_context(_event_bus_targets_forward_the_event())
        if status_events:
            stack.enter_context(_sfn_status_change_events())
        stack.enter_context(_map_iterations_loop())
        yield


@contextmanager
def _patched(target: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, original)


def _lambda_runs_local_workers(invoker: LambdaInvoker) -> Any:
    """`LambdaFunction._invoke_lambda` would start a Docker container: run a worker instead.

    Returns what moto expects, `(payload, errored, logs)`. An errored payload is the Lambda
    runtime's `{"errorType": <exception class>, "errorMessage": ...}`; moto's Step Functions
    interpreter takes `errorType` as the error name, so Retry/Catch match `SinkRetryableError`
    or `MalformedFileError` as on AWS.
    """
    from moto.awslambda.models import LambdaFunction

    def _invoke_lambda(self: Any, event: Any = None) -> tuple[str, bool, str]:
        if isinstance(event, (str, bytes)):
            event = json.loads(event or "{}")
        result = invoker(
            self.function_name, dict(self.environment_vars or {}), event if event is not None else {}
        )
        return result.payload, result.errored, ""

    return _patched(LambdaFunction, "_invoke_lambda", _invoke_lambda)


class _FreshIdEvent(dict):  # type: ignore[type-arg]
    """moto's EventBridge base message; each copy gets a new id and an ISO time, as on AWS.

    moto 5.2.5 deep-copies one constant dict for every S3 event, so all of them carry the
    same id; the controller names executions after it and would take every later file for a
    duplicate of the first.
    """

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        event = {key: copy.deepcopy(value, memo) for key, value in self.items()}
        event["id"] = str(uuid.uuid4())
        return event


@contextmanager
def _s3_events_get_fresh_ids() -> Iterator[None]:
    import moto.events.utils as events_utils

    # moto.s3.notifications imports the constant from moto.events.utils on every event;
    # moto.events.models bound it at import, so only S3-originated events are affected.
    with _patched(events_utils, "_BASE_EVENT_MESSAGE", _FreshIdEvent(events_utils._BASE_EVENT_MESSAGE)):
        yield


def s3_event_key(key: str) -> str:
    """A key as S3 writes it into an event notification: URL-encoded, a space as "+", every
    character but letters, digits and `/ . _ -` as %XX of its UTF-8 bytes ("red flower.jpg"
    -> "red+flower.jpg", "c++" -> "c%2B%2B", "a=1" -> "a%3D1"). The handlers decode it with
    `contract.s3_key_from_event`."""
    safe = contract.S3_EVENT_KEY_SAFE_CHARACTERS
    return "".join(
        c if c in safe else "+" if c == " " else "".join(f"%{byte:02X}" for byte in c.encode("utf-8")) for c in key
    )


class _EventKey:
    """A moto S3 key whose `name` reads as S3 writes it into an event; the rest is the key's."""

    def __init__(self, key: Any) -> None:
        self._key = key

    @property
    def name(self) -> str:
        return s3_event_key(self._key.name)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._key, attribute)


def _s3_event_keys_encoded() -> Any:
    """moto 5.2.5 puts the raw key into its S3 EventBridge events; S3 URL-encodes it. Without
    this, a file named with a space or a "+" would pass locally and fail on AWS."""
    from moto.s3 import notifications

    original = notifications._send_event_bridge_message

    def send(account_id: str, bucket: Any, event_name: str, key: Any) -> None:
        original(account_id, bucket, event_name, _EventKey(key))

    # `send_event` looks the function up in its module on every event.
    return _patched(notifications, "_send_event_bridge_message", send)


class _ScaledTime:
    """Stands in for the `time` module inside moto's retrier: same clock, shorter sleeps."""

    def __init__(self, scale: float) -> None:
        self._scale = scale

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds) * self._scale)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def _scaled_retry_sleeps(time_scale: float) -> Any:
    """moto's Step Functions `Retry` really sleeps IntervalSeconds x BackoffRate^n: scale it."""
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

    return _patched(retrier_decl, "time", _ScaledTime(time_scale))


def _sqs_long_poll_sleeps() -> Any:
    """moto's long poll spins a core while a FIFO group is blocked: sleep between checks.

    `Queue.wait_for_messages` returns at once when the queue holds *any* visible message,
    even one that cannot be delivered (its group has a message in flight), so
    `receive_message` loops hot for the whole WaitTimeSeconds and starves the server.
    """
    from moto.sqs.models import Queue

    def wait_for_messages(self: Any, timeout: int) -> None:
        time.sleep(min(float(timeout), SQS_WAIT_POLL_SECONDS))

    return _patched(Queue, "wait_for_messages", wait_for_messages)


def _cfn_state_machines_in_the_executing_backend() -> Any:
    """moto's CloudFormation creates an `AWS::StepFunctions::StateMachine` in the plain
    Step Functions backend, but with ``execute_state_machine`` on the API serves (and runs)
    the parser backend's: the stack's state machine would not exist for StartExecution.
    Create it in the backend the API uses (name, definition, role, tags, type)."""
    from moto.stepfunctions.models import StateMachine
    from moto.stepfunctions.responses import get_backend
    from moto.stepfunctions.utils import cfn_to_api_tags

    def create(
        cls: Any, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **_: Any
    ) -> Any:
        props = cloudformation_json["Properties"]
        return get_backend(account_id, region_name).create_state_machine(
            props.get("StateMachineName", resource_name),
            props.get("DefinitionString", ""),
            props.get("RoleArn", ""),
            tags=cfn_to_api_tags(props.get("Tags", [])),
            sm_type=props.get("StateMachineType", "STANDARD"),
        )

    return _patched(StateMachine, "create_from_cloudformation_json", classmethod(create))


def _sfn_start_execution_task_calls_boto_with_its_member_names() -> Any:
    """moto 5.2.5's `states:startExecution(.sync|.sync:2)` task passes the state's parameter
    names (`Input`, `Name`, `StateMachineArn`) to boto3, whose members are `input`, `name`,
    `stateMachineArn` (botocore raises KeyError 'Input'), and its `.sync` resolvers then read
    `ExecutionArn` from boto3's `executionArn` answer. Rename both ways, as Step Functions does;
    the parent's page task (issue 9: pages of chunks as child executions) runs on it."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_sfn import (
        StateTaskServiceSfn,
    )

    original = StateTaskServiceSfn._eval_service_task

    def _eval_service_task(self: Any, env: Any, resource_runtime_part: Any, normalised_parameters: dict,
                           state_credentials: Any) -> None:
        renamed = {key[:1].lower() + key[1:]: value for key, value in normalised_parameters.items()}
        original(self, env, resource_runtime_part, renamed, state_credentials)
        response = env.stack.pop()
        env.stack.append({key[:1].upper() + key[1:]: value for key, value in response.items()})

    return _patched(StateTaskServiceSfn, "_eval_service_task", _eval_service_task)


@contextmanager
def _states_errors_pass_through_fail_states_and_maps() -> Iterator[None]:
    """moto 5.2.5 checks a `States.*` error name as if it were a custom one (which must not
    start with "States.") in two places, and fails the execution with States.Runtime instead:
    a Fail state whose `ErrorPath` yields it, and an inline Map iteration that ends with it.
    Step Functions passes such an error on: a failed page execution fails the parent's
    `RunPage` with `States.TaskFailed`, the `PagesInOrder` Map's Catch takes it, and
    `IngestFailed` re-throws it."""
    from moto.stepfunctions.parser.asl.component.common.error_name.error_name import ErrorName
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration import iteration_worker
    from moto.stepfunctions.parser.asl.component.state.fail import state_fail

    class _PassedOnErrorName(ErrorName):
        def __init__(self, error_name: str | None) -> None:
            super().__init__(error_name=error_name)

    with _patched(state_fail, "CustomErrorName", _PassedOnErrorName), \
            _patched(iteration_worker, "CustomErrorName", _PassedOnErrorName):
        yield


#: How often a `.sync` task asks whether its child execution closed (moto: every 0.5 s).
SYNC_POLL_SECONDS = 0.05


def _sync_tasks_poll_often() -> Any:
    """moto 5.2.5 polls a `.sync` task's child execution every 0.5 s: with a page of a few
    hundred records registered in about half a second, that wait would be a large share of a
    file's time on the local runtime. Poll every `SYNC_POLL_SECONDS` (one DescribeExecution
    on loopback) so local throughput figures measure the pipeline, not the poll."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_callback as callback,
    )

    return _patched(callback, "_DELAY_SECONDS_SYNC_CONDITION_CHECK", SYNC_POLL_SECONDS)


_forwarding = threading.local()


def _event_bus_targets_forward_the_event() -> Any:
    """A rule whose target is an event bus (sharded routing, `routing.shards`) forwards the
    event itself, as EventBridge does, not a new one; a rule whose target is a Lambda function
    (the tenants' status rules) invokes it asynchronously, as EventBridge does.

    Also, an AWS service's event reaches the default bus only (`_service_event_off_the_default_bus`).
    moto 5.2.5 re-publishes only `source`, `detail-type` and `detail` through `PutEvents`: the
    forwarded event loses its `time` (the controller's late-arrival check reads it), its
    `resources`, and the S3 event's account and Region become the receiving backend's. Here the
    receiving bus's rules get the whole event with a fresh `id` (one per forward; AWS documents a
    new id for the newer bus type's bus-to-bus target, and nothing of the classic buses: the
    ledger's version marker, not the id, makes a second event for the same object version a
    duplicate). As on AWS, an event a bus received from another bus is not forwarded
    to a third one. moto has no Lambda target at all (it raises); other targets are delivered by
    moto as before."""
    from moto.events import models
    from moto.utilities.arns import parse_arn

    original = models.Rule.send_to_targets

    def ours(target: dict[str, Any]) -> bool:
        return ":event-bus/" in target["Arn"] or ":lambda:" in target["Arn"]

    def send_to_targets(self: Any, original_event: Any, transform_input: bool = True) -> None:
        if _service_event_off_the_default_bus(self, original_event):
            return None
        handled = [t for t in self.targets if ours(t)]
        if not handled:
            return original(self, original_event, transform_input)
        if not self.event_pattern.matches_event(original_event):
            return None
        others = copy.copy(self)
        others.targets = [t for t in self.targets if not ours(t)]
        if others.targets:
            original(others, original_event, transform_input)
        for target in handled:
            if ":lambda:" in target["Arn"]:
                _invoke_async(target["Arn"], copy.deepcopy(dict(original_event)))
            elif not getattr(_forwarding, "active", False):  # AWS: never on to a third bus
                _forward(models, parse_arn(target["Arn"]), original_event)
        return None

    return _patched(models.Rule, "send_to_targets", send_to_targets)


def _forward(models: Any, bus_arn: Any, original_event: Any) -> None:
    bus = models.events_backends[bus_arn.account][bus_arn.region].describe_event_bus(bus_arn.resource_id)
    event = copy.deepcopy(dict(original_event))
    event["id"] = str(uuid.uuid4())
    _forwarding.active = True
    try:
        for rule in list(bus.rules.values()):
            rule.send_to_targets(copy.deepcopy(event), transform_input=False)
    finally:
        _forwarding.active = False


def _service_event_off_the_default_bus(rule: Any, event: Any) -> bool:
    """moto 5.2.5's S3 sends its events to the rules of every bus; AWS services send theirs to
    the account's default bus only (a custom bus gets them only when a rule forwards them)."""
    source = str(event.get("source", "")) if isinstance(event, dict) else ""
    return (source.startswith("aws.") and getattr(rule, "event_bus_name", "default") != "default"
            and not getattr(_forwarding, "active", False))


def _invoke_async(function_arn: str, event: dict[str, Any]) -> None:
    """EventBridge invokes a Lambda target asynchronously: the caller never waits for it."""
    from moto.awslambda.models import lambda_backends
    from moto.utilities.arns import parse_arn

    arn = parse_arn(function_arn)
    function = lambda_backends[arn.account][arn.region].get_function(arn.resource_id.split(":")[0])
    threading.Thread(target=function._invoke_lambda, args=(event,), daemon=True,
                     name=f"eventbridge-{function.function_name}").start()


def _sfn_status_change_events() -> Any:
    """Step Functions sends a "Step Functions Execution Status Change" event to the default bus
    when an execution starts running and when it closes; moto 5.2.5 sends none, so the tenants'
    status rules (the closer's backstop) never fired locally. Emitted here from moto's execution
    (start, and its worker's end), on a thread of their own as the events are asynchronous."""
    from moto.events import models
    from moto.stepfunctions.parser.backend import execution as executions

    start, terminated = executions.Execution.start, executions.BaseExecutionWorkerCommunication.terminated

    def started(self: Any) -> None:
        start(self)
        _emit_status(models, self)

    def ended(self: Any) -> None:
        terminated(self)
        _emit_status(models, self.execution)

    stack = ExitStack()
    stack.enter_context(_patched(executions.Execution, "start", started))
    stack.enter_context(_patched(executions.BaseExecutionWorkerCommunication, "terminated", ended))
    return stack


def _emit_status(models: Any, execution: Any) -> None:
    def millis(when: Any) -> int | None:
        return int(when.timestamp() * 1000) if when is not None else None

    status = execution.exec_status.value
    detail = {
        "executionArn": execution.exec_arn,
        "stateMachineArn": execution.state_machine_arn,
        "name": execution.name,
        "status": status,
        "startDate": millis(execution.start_date),
        "stopDate": millis(execution.stop_date) if status != "RUNNING" else None,
        "input": json.dumps(execution.input_data),
        "output": json.dumps(execution.output) if execution.output is not None else None,
        "error": execution.error,
        "cause": execution.cause,
    }
    event = {
        "version": "0", "id": str(uuid.uuid4()), "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states", "account": execution.account_id, "time": time.time(),
        "region": execution.region_name, "resources": [execution.exec_arn], "detail": detail,
    }
    bus = models.events_backends[execution.account_id][execution.region_name].describe_event_bus("default")

    def deliver() -> None:
        for rule in list(bus.rules.values()):
            try:
                rule.send_to_targets(copy.deepcopy(event))
            except Exception:  # noqa: BLE001 - one rule's failure must not stop the others
                logging.getLogger(__name__).exception("status event delivery failed")

    threading.Thread(target=deliver, daemon=True, name="sfn-status-event").start()
def _map_iterations_loop() -> Any:
    """moto 5.2.5's inline Map worker goes on to each next item by calling itself
    (`IterationWorker._eval_pool`), one Python frame per item, so a Map of about 970 items
    exceeds the interpreter's recursion limit (a `RecursionError`, seen as `States.Runtime`).
    Step Functions has no such limit: a section's Map runs up to 996 pages. The same steps,
    in the same order, as a loop."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.iteration_worker import (
        IterationWorker,
    )

    def _eval_pool(self: Any, job: Any, worker_frame: Any) -> None:
        while job is not None:
            job_frame = worker_frame.open_inner_frame()
            self._eval_job(env=job_frame, job=job)
            worker_frame.close_frame(job_frame)
            if isinstance(job.job_output, Exception) or self.stopped():
                break  # a failed item, or a stopped worker: the Map ends here
            next_job = self._job_pool.next_job()
            if next_job is None:
                # the last item's events are the source of the states that follow
                worker_frame.event_history_context.source_event_id = (
                    job_frame.event_history_context.last_published_event_id
                )
                break
            self._job_pool.close_job(job)
            job = next_job
        self._env.close_frame(worker_frame)
        if job is not None:
            self._job_pool.close_job(job)

    return _patched(IterationWorker, "_eval_pool", _eval_pool)


# --- state machine versions and aliases (pipeline_constructs/versions.py) ------------------


def _cfn_versions_models() -> tuple[type, type]:
    """`AWS::StepFunctions::StateMachineVersion` and `::StateMachineAlias` for moto's
    CloudFormation, which has neither (moto 5.2.5 implements the API only). A version publishes
    the state machine's current definition (Ref and `Arn`: the version ARN); an alias routes to
    its versions (Ref and `Arn`: the alias ARN)."""
    from moto.core.common_models import CloudFormationModel
    from moto.stepfunctions.responses import get_backend

    class _Published:  # moto looks for CloudFormationModel's *direct* subclasses only
        def __init__(self, arn: str) -> None:
            self.arn = arn

        @property
        def physical_resource_id(self) -> str:
            return self.arn

        @classmethod
        def has_cfn_attr(cls, attr: str) -> bool:  # noqa: D102
            return attr == "Arn"

        def get_cfn_attribute(self, attribute_name: str) -> str:
            return self.arn

        @staticmethod
        def cloudformation_name_type() -> str:
            return ""

    class CfnStateMachineVersion(_Published, CloudFormationModel):
        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::StepFunctions::StateMachineVersion"

        @classmethod
        def create_from_cloudformation_json(  # type: ignore[override]
            cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **_: Any
        ) -> _Published:
            props = cloudformation_json["Properties"]
            machine = get_backend(account_id, region_name).describe_state_machine(props["StateMachineArn"])
            machine.publish(props.get("Description"))
            return cls(machine.latest_version.arn)

    class CfnStateMachineAlias(_Published, CloudFormationModel):
        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::StepFunctions::StateMachineAlias"

        @classmethod
        def create_from_cloudformation_json(  # type: ignore[override]
            cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **_: Any
        ) -> _Published:
            props = cloudformation_json["Properties"]
            routes = [{"stateMachineVersionArn": r["StateMachineVersionArn"], "weight": int(r["Weight"])}
                      for r in props["RoutingConfiguration"]]
            alias = get_backend(account_id, region_name).create_state_machine_alias(
                name=props["Name"], routing_configuration=routes, description=props.get("Description")
            )
            return cls(alias.arn)

    return CfnStateMachineVersion, CfnStateMachineAlias


@contextmanager
def _cfn_state_machine_versions_and_aliases() -> Iterator[None]:
    """Register the two models (`_cfn_versions_models`) for the block: moto finds a resource
    type among `CloudFormationModel`'s subclasses, in lru-cached maps cleared on entry and exit."""
    from moto.cloudformation import parsing

    def clear() -> None:
        for cached in (parsing.get_model_list, parsing.get_model_map, parsing.get_name_type_map):
            cached.cache_clear()

    models = _cfn_versions_models()
    clear()
    try:
        yield
    finally:
        # A class cannot be unregistered from __subclasses__: make them unreachable instead.
        for model in models:
            model.cloudformation_type = staticmethod(lambda: "Custom::LocalRuntimeRemoved")  # type: ignore[method-assign]
        clear()


#: One start through a version or alias at a time: it lends the version's definition to the
#: state machine for the moment moto snapshots it.
_VERSIONED_START = threading.Lock()


def _sfn_starts_through_aliases_and_versions() -> Any:
    """moto 5.2.5 cannot start an execution through an alias ARN (`StateMachineDoesNotExist`)
    and fails on a version ARN. Step Functions runs the version's definition (an alias's: the
    version its routing picks), names the execution after the state machine
    (`...:execution:<machine>:<name>`), lists it under the state machine, and reports
    `stateMachineVersionArn` / `stateMachineAliasArn` in DescribeExecution. Do the same: run
    the execution on the state machine with the version's definition, remember both ARNs."""
    import random

    from moto.stepfunctions.exceptions import ResourceNotFound
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    original = StepFunctionsParserBackend.start_execution

    def start_execution(self: Any, state_machine_arn: str, name: Any = None, execution_input: Any = None,
                        trace_header: Any = None) -> Any:
        parts = state_machine_arn.split(":")
        if len(parts) != 8:
            return original(self, state_machine_arn, name, execution_input, trace_header)
        machine_arn, qualifier = ":".join(parts[:7]), parts[7]
        machine = self.describe_state_machine(machine_arn)
        alias_arn = None
        if not qualifier.isdigit():
            alias = machine.aliases.get(qualifier)
            if alias is None:
                raise ResourceNotFound(f"State Machine Alias Does Not Exist: '{state_machine_arn}'")
            alias_arn = alias.arn
            routes = alias.routing_configuration
            chosen = random.choices(routes, weights=[int(r["weight"]) for r in routes])[0]
            qualifier = chosen["stateMachineVersionArn"].rsplit(":", 1)[1]
        version = machine.versions.get(int(qualifier))
        if version is None:
            raise ResourceNotFound(f"State Machine Version Does Not Exist: '{state_machine_arn}'")
        with _VERSIONED_START:
            latest = machine.definition
            machine.definition = version.definition
            try:
                execution = original(self, machine_arn, name, execution_input, trace_header)
            finally:
                machine.definition = latest
        if not hasattr(execution, "state_machine_version_arn"):  # not an idempotent repeat
            execution.state_machine_version_arn = version.arn
            execution.state_machine_alias_arn = alias_arn
        return execution

    from moto.stepfunctions.responses import StepFunctionResponse

    described = StepFunctionResponse.describe_execution

    def describe_execution(self: Any) -> Any:
        result = described(self)
        execution = self.stepfunction_backend.describe_execution(self._get_param("executionArn"))
        for field, value in (("stateMachineVersionArn", getattr(execution, "state_machine_version_arn", None)),
                             ("stateMachineAliasArn", getattr(execution, "state_machine_alias_arn", None))):
            if value:
                result.result[field] = value
        return result

    stack = ExitStack()
    stack.enter_context(_patched(StepFunctionsParserBackend, "start_execution", start_execution))
    stack.enter_context(_patched(StepFunctionResponse, "describe_execution", describe_execution))
    return stack
