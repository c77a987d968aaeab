"""moto in server mode on 127.0.0.1, and the patches of the local run (why each:
local_runtime/README.md, "moto 5.2.5 patches"). Server mode, not `mock_aws`: the workers are
processes that reach moto over HTTP, and moto's Step Functions calls Lambda through $MOTO_PORT."""

from __future__ import annotations

import copy
import json
import logging
import os
import threading
import time
import types
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import boto3
from botocore.config import Config

from lambdas import contract
from local_runtime.lambda_pool import InvocationResult

#: Runs one Lambda invocation: (function name, its environment variables in moto, event) -> result.
LambdaInvoker = Callable[[str, dict[str, str], Any], InvocationResult]

#: moto accepts any credentials; the local account is moto's default, 123456789012.
FAKE_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}

_active_lock = threading.Lock()
#: One boto3 session for every local run of this process: a session caches the service models
#: it has parsed, which is costly, and holds no state of a run.
_sessions: dict[str, Any] = {}
_sessions_lock = threading.Lock()  # a session is not thread-safe; creating clients is serialized


class MotoServer:
    """A `ThreadedMotoServer` on a free loopback port, configured for the local run; one per
    process (moto's backends and the patches are process-wide)."""

    def __init__(self, region: str = "us-east-1") -> None:
        self.host = "127.0.0.1"
        self.port = 0  # any free port, known once started
        self.region = region
        self._undo = ExitStack()  # what `stop` undoes, in reverse
        self._clients: dict[tuple[str, float, int], Any] = {}

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def client(self, service: str, *, read_timeout: float = 60.0, max_attempts: int = 2) -> Any:
        """A boto3 client of the local account (cached; boto3 clients are thread-safe)."""
        key = (service, read_timeout, max_attempts)
        with _sessions_lock:
            if key not in self._clients:
                session = _sessions.get(self.region)
                if session is None:
                    session = _sessions[self.region] = boto3.session.Session(region_name=self.region, **FAKE_CREDENTIALS)
                self._clients[key] = session.client(
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
        self._undo.callback(_active_lock.release)
        try:
            from moto.core.config import default_user_config
            from moto.server import ThreadedMotoServer

            # werkzeug logs every request; moto's SFN parser logs each failed task at WARNING/ERROR.
            for name in ("werkzeug", "moto.stepfunctions.parser"):
                logger = logging.getLogger(name)
                self._undo.callback(logger.setLevel, logger.level)
                logger.setLevel(logging.CRITICAL)
            server = ThreadedMotoServer(ip_address=self.host, port=self.port, verbose=False)
            server.start()
            self._undo.callback(server.stop)
            self.port = server.get_host_and_port()[1]
            # moto's Step Functions interpreter reaches Lambda and SNS at localhost:$MOTO_PORT.
            self._set_env("MOTO_PORT", str(self.port))
            # Loopback traffic (moto, sinks) must never go through a proxy from the environment.
            for key in ("NO_PROXY", "no_proxy"):
                present = [h for h in os.environ.get(key, "").split(",") if h]
                self._set_env(
                    key, ",".join([*present, *(h for h in ("127.0.0.1", "localhost") if h not in present)])
                )
            # The config API does not report this key back, so remember it from the module.
            self._undo.callback(
                self._api, "/moto-api/config", {"stepfunctions": dict(default_user_config.get("stepfunctions", {}))}
            )
            self._undo.callback(self.reset)
            self.reset()
            # Run state machines for real (the "mock_aws(config=...)" setting, server-mode API).
            self._api("/moto-api/config", {"stepfunctions": {"execute_state_machine": True}})
        except BaseException:
            self.stop()
            raise

    def reset(self) -> None:
        """Drop every resource of every service (a fresh account)."""
        self._api("/moto-api/reset")

    def stop(self) -> None:
        """Reset moto, stop it, restore what `start` changed (idempotent)."""
        self._undo.close()

    def _set_env(self, key: str, value: str) -> None:
        self._undo.callback(_restore_env, key, os.environ.get(key))
        os.environ[key] = value

    def _api(self, path: str, body: Any = None) -> None:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.endpoint_url + path, data=data, method="POST")
        urllib.request.urlopen(request, timeout=30).close()


def _restore_env(key: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value


# --- patches: each closes a gap of moto 5.2.5 (README row, canary in tests/test_moto_gaps.py) ---


@contextmanager
def moto_patches(*, invoker: LambdaInvoker, time_scale: float, status_events: bool = False) -> Iterator[None]:
    """Apply every patch of the local run for the duration of the block, in the README's order;
    ``status_events``: Step Functions' status-change events reach the default bus."""
    with ExitStack() as stack:
        stack.enter_context(_lambda_runs_local_workers(invoker))
        stack.enter_context(_s3_events_get_fresh_ids())
        stack.enter_context(_s3_event_keys_encoded())
        stack.enter_context(_scaled_retry_sleeps(time_scale))
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
        stack.enter_context(_fifo_groups_wait_for_messages_in_flight())
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
    """Every invocation runs in a worker process (`lambda_pool.py`), not in moto's Docker."""
    from moto.awslambda.models import LambdaFunction

    def _invoke_lambda(self: Any, event: Any = None) -> tuple[str, bool, str]:
        if event is None or isinstance(event, (str, bytes)):  # Invoke's body; a rule target's event
            event = json.loads(event or "{}")
        result = invoker(self.function_name, dict(self.environment_vars or {}), event)
        return result.payload, result.errored, ""  # what moto expects: (payload, errored, logs)

    return _patched(LambdaFunction, "_invoke_lambda", _invoke_lambda)


class _FreshIdEvent(dict):  # type: ignore[type-arg]
    """moto's EventBridge base message, of which each deep copy gets a new id."""

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        event = {key: copy.deepcopy(value, memo) for key, value in self.items()}
        event["id"] = str(uuid.uuid4())
        return event


def _s3_events_get_fresh_ids() -> Any:
    """Each S3 EventBridge event gets its own id (moto deep-copies one constant for all)."""
    import moto.events.utils as events_utils

    # moto.s3.notifications imports the constant on every event; moto.events.models bound it
    # at import, so only S3-originated events are affected.
    return _patched(events_utils, "_BASE_EVENT_MESSAGE", _FreshIdEvent(events_utils._BASE_EVENT_MESSAGE))


def s3_event_key(key: str) -> str:
    """A key as S3 writes it into an event: a space as "+", every character but letters, digits
    and `/ . _ -` as %XX of its UTF-8 bytes. The handlers decode it (`contract.s3_key_from_event`)."""
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
    """S3 EventBridge events carry the key URL-encoded, as S3 writes it (moto: the raw key)."""
    from moto.s3 import notifications

    original = notifications._send_event_bridge_message

    def send(account_id: str, bucket: Any, event_name: str, key: Any) -> None:
        original(account_id, bucket, event_name, _EventKey(key))

    # `send_event` looks the function up in its module on every event.
    return _patched(notifications, "_send_event_bridge_message", send)


def _scaled_retry_sleeps(time_scale: float) -> Any:
    """A `Retry`'s waits (moto really sleeps them) are scaled by `time_scale`."""
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

    # the retrier's `time` module: it only sleeps
    scaled = types.SimpleNamespace(sleep=lambda seconds: time.sleep(max(0.0, seconds) * time_scale))
    return _patched(retrier_decl, "time", scaled)


def _cfn_state_machines_in_the_executing_backend() -> Any:
    """A stack's state machine is created in the backend the API serves when
    `execute_state_machine` is on (moto: in the plain one, which StartExecution never sees)."""
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


@contextmanager
def _cfn_state_machine_versions_and_aliases() -> Iterator[None]:
    """CloudFormation models of `AWS::StepFunctions::StateMachineVersion` (publishes the machine's
    current definition) and `::StateMachineAlias`, Ref and `Arn` their ARNs. moto finds a type
    among `CloudFormationModel`'s direct subclasses, in lru-cached maps cleared on entry and exit."""
    from moto.cloudformation import parsing

    models = [_cfn_model("AWS::StepFunctions::StateMachineVersion", _publish_version),
              _cfn_model("AWS::StepFunctions::StateMachineAlias", _create_alias)]
    caches = (parsing.get_model_list, parsing.get_model_map, parsing.get_name_type_map)
    for cached in caches:
        cached.cache_clear()
    try:
        yield
    finally:
        # A class cannot be unregistered from __subclasses__: make them unreachable instead.
        for model in models:
            model.cloudformation_type = staticmethod(lambda: "Custom::LocalRuntimeRemoved")  # type: ignore[method-assign]
        for cached in caches:
            cached.cache_clear()


def _cfn_model(cfn_type: str, create: Callable[[Any, dict[str, Any]], str]) -> type:
    """A model of `cfn_type` whose Ref and `Arn` are what `create(backend, properties)` returns."""
    from moto.core.common_models import CloudFormationModel
    from moto.stepfunctions.responses import get_backend

    class Model(CloudFormationModel):
        def __init__(self, arn: str) -> None:
            self.physical_resource_id = arn

        @staticmethod
        def cloudformation_type() -> str:
            return cfn_type

        def get_cfn_attribute(self, attribute_name: str) -> str:
            return self.physical_resource_id

        @classmethod
        def create_from_cloudformation_json(  # type: ignore[override]
            cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **_: Any
        ) -> Model:
            return cls(create(get_backend(account_id, region_name), cloudformation_json["Properties"]))

    return Model


def _publish_version(backend: Any, props: dict[str, Any]) -> str:
    machine = backend.describe_state_machine(props["StateMachineArn"])
    machine.publish(props.get("Description"))
    return str(machine.latest_version.arn)


def _create_alias(backend: Any, props: dict[str, Any]) -> str:
    routes = [{"stateMachineVersionArn": r["StateMachineVersionArn"], "weight": int(r["Weight"])}
              for r in props["RoutingConfiguration"]]
    alias = backend.create_state_machine_alias(
        name=props["Name"], routing_configuration=routes, description=props.get("Description")
    )
    return str(alias.arn)


#: One start through a version or alias at a time: it lends the version's definition to the
#: state machine for the moment moto snapshots it.
_VERSIONED_START = threading.Lock()


@contextmanager
def _sfn_starts_through_aliases_and_versions() -> Iterator[None]:
    """StartExecution through an alias or version ARN runs the version's definition as an
    execution of the state machine; DescribeExecution reports both ARNs (moto refuses both)."""
    import random

    from moto.stepfunctions.exceptions import ResourceNotFound
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend
    from moto.stepfunctions.responses import StepFunctionResponse

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
        with _VERSIONED_START, _patched(machine, "definition", version.definition):
            execution = original(self, machine_arn, name, execution_input, trace_header)
        if not hasattr(execution, "state_machine_version_arn"):  # not an idempotent repeat
            execution.state_machine_version_arn = version.arn
            execution.state_machine_alias_arn = alias_arn
        return execution

    described = StepFunctionResponse.describe_execution

    def describe_execution(self: Any) -> Any:
        result = described(self)
        execution = self.stepfunction_backend.describe_execution(self._get_param("executionArn"))
        for field, value in (("stateMachineVersionArn", getattr(execution, "state_machine_version_arn", None)),
                             ("stateMachineAliasArn", getattr(execution, "state_machine_alias_arn", None))):
            if value:
                result.result[field] = value
        return result

    with _patched(StepFunctionsParserBackend, "start_execution", start_execution), \
            _patched(StepFunctionResponse, "describe_execution", describe_execution):
        yield


def _sfn_start_execution_task_calls_boto_with_its_member_names() -> Any:
    """A `states:startExecution` task calls boto3 with its members (`input`, `stateMachineArn`)
    and answers with the state's names (`ExecutionArn`); moto passes the state's names through."""
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
    """A `States.*` error passes through a Fail state's `ErrorPath` and out of a Map iteration
    (moto checks it as a custom error name and fails with States.Runtime)."""
    from moto.stepfunctions.parser.asl.component.common.error_name.error_name import ErrorName
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration import iteration_worker
    from moto.stepfunctions.parser.asl.component.state.fail import state_fail

    # ErrorName: CustomErrorName without its refusal of the "States." prefix
    with _patched(state_fail, "CustomErrorName", ErrorName), _patched(iteration_worker, "CustomErrorName", ErrorName):
        yield


#: How often a `.sync` task asks whether its child execution closed (moto: every 0.5 s).
SYNC_POLL_SECONDS = 0.05


def _sync_tasks_poll_often() -> Any:
    """A `.sync` task looks at its child execution every `SYNC_POLL_SECONDS`."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_callback as callback,
    )

    return _patched(callback, "_DELAY_SECONDS_SYNC_CONDITION_CHECK", SYNC_POLL_SECONDS)


_forwarding = threading.local()  # `active` while `_forward` hands an event to another bus


def _event_bus_targets_forward_the_event() -> Any:
    """Rules deliver as EventBridge does: an AWS service's event reaches the default bus's rules
    only; an event-bus target passes the event itself (a fresh id) to the receiving bus's rules,
    and never on to a third bus; a Lambda target is invoked asynchronously. Other targets: moto."""
    from moto.events import models
    from moto.utilities.arns import parse_arn

    original = models.Rule.send_to_targets

    def ours(target: dict[str, Any]) -> bool:
        return ":event-bus/" in target["Arn"] or ":lambda:" in target["Arn"]

    def send_to_targets(self: Any, original_event: Any, transform_input: bool = True) -> None:
        forwarded = getattr(_forwarding, "active", False)
        if str(original_event.get("source")).startswith("aws.") and self.event_bus_name != "default" and not forwarded:
            return None  # moto's S3 sends its events to every bus
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
            elif not forwarded:
                _forward(models, parse_arn(target["Arn"]), original_event)
        return None

    return _patched(models.Rule, "send_to_targets", send_to_targets)


def _forward(models: Any, bus_arn: Any, original_event: Any) -> None:
    bus = models.events_backends[bus_arn.account][bus_arn.region].describe_event_bus(bus_arn.resource_id)
    event = {**copy.deepcopy(dict(original_event)), "id": str(uuid.uuid4())}
    _forwarding.active = True
    try:
        for rule in list(bus.rules.values()):
            rule.send_to_targets(copy.deepcopy(event), transform_input=False)
    finally:
        _forwarding.active = False


def _invoke_async(function_arn: str, event: dict[str, Any]) -> None:
    """Through the workers (`_lambda_runs_local_workers`); the caller never waits for it."""
    from moto.awslambda.models import lambda_backends
    from moto.utilities.arns import parse_arn

    arn = parse_arn(function_arn)
    function = lambda_backends[arn.account][arn.region].get_function(arn.resource_id.split(":")[0])
    threading.Thread(target=function._invoke_lambda, args=(event,), daemon=True,
                     name=f"eventbridge-{function.function_name}").start()


@contextmanager
def _sfn_status_change_events() -> Iterator[None]:
    """An execution's start and end send "Step Functions Execution Status Change" events to the
    default bus, on a thread of their own (moto sends none)."""
    from moto.events import models
    from moto.stepfunctions.parser.backend import execution as executions

    start, terminated = executions.Execution.start, executions.BaseExecutionWorkerCommunication.terminated

    def started(self: Any) -> None:
        start(self)
        _emit_status(models, self)

    def ended(self: Any) -> None:
        terminated(self)
        _emit_status(models, self.execution)

    with _patched(executions.Execution, "start", started), \
            _patched(executions.BaseExecutionWorkerCommunication, "terminated", ended):
        yield


def _emit_status(models: Any, execution: Any) -> None:
    status = execution.exec_status.value
    detail = {
        "executionArn": execution.exec_arn,
        "stateMachineArn": execution.state_machine_arn,
        "name": execution.name,
        "status": status,
        "startDate": int(execution.start_date.timestamp() * 1000),
        "stopDate": int(execution.stop_date.timestamp() * 1000) if status != "RUNNING" else None,
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
                rule.send_to_targets(copy.deepcopy(event), transform_input=False)  # as moto's S3 events
            except Exception:  # one rule's failure must not stop the others
                logging.getLogger(__name__).exception("status event delivery failed")

    threading.Thread(target=deliver, daemon=True, name="sfn-status-event").start()


def _map_iterations_loop() -> Any:
    """The inline Map worker goes from item to item in a loop (moto recurses once per item:
    a `RecursionError` past about 970 items). The same steps, in the same order."""
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


def _fifo_groups_wait_for_messages_in_flight() -> Any:
    """A FIFO queue delivers no message of a group while an earlier one of it is in flight
    (received, not deleted, its visibility not over), and then the group's oldest first, as SQS
    does. moto keeps "in flight" in a set of its own: a ChangeMessageVisibility to 0 (a close's
    hand-off) takes the message out of it, and a later one with its receipt handle (a controller
    still deciding on that message waits: moto accepts it, SQS answers MessageNotInflight) hides
    it again without putting it back, so the group's next file went out while the one before
    it was in flight; and a receive skips a group's visible oldest message while a later one
    whose visibility ended is still in the set. Before each receive of a FIFO queue, the set
    holds exactly the received messages that are not visible."""
    from moto.sqs.models import SQSBackend

    receive = SQSBackend.receive_message

    def receive_message(self: Any, queue_name: str, *args: Any, **kwargs: Any) -> Any:
        queue = self.get_queue(queue_name)
        if queue.fifo_queue:
            in_flight = {m for m in list(queue._messages) if m.approximate_receive_count and not m.visible}
            queue.pending_messages.intersection_update(in_flight)
            queue.pending_messages.update(in_flight)
        return receive(self, queue_name, *args, **kwargs)

    return _patched(SQSBackend, "receive_message", receive_message)
