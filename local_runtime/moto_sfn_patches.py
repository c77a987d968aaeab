"""The patches of moto's Step Functions in the local run: stacks' state machines, their versions
and aliases and starts through them, `startExecution` and `.sync` tasks, `States.*` errors,
Map iterations, scaled retry waits and status-change events. Each closes a gap of moto 5.2.5
(README row, canary in tests/test_moto_gaps.py); `moto_patches()` in moto_server.py applies them.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
import types
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from local_runtime.moto_patching import patched


def _scaled_retry_sleeps(time_scale: float) -> Any:
    """A `Retry`'s waits (moto really sleeps them) are scaled by `time_scale`."""
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

    # the retrier's `time` module: it only sleeps
    scaled = types.SimpleNamespace(sleep=lambda seconds: time.sleep(max(0.0, seconds) * time_scale))
    return patched(retrier_decl, "time", scaled)


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

    return patched(StateMachine, "create_from_cloudformation_json", classmethod(create))


@contextmanager
def _cfn_state_machine_versions_and_aliases() -> Iterator[None]:
    """CloudFormation models of `AWS::StepFunctions::StateMachineVersion` (publishes the machine's
    current definition) and `::StateMachineAlias`, Ref and `Arn` their ARNs. moto finds a type
    among `CloudFormationModel`'s direct subclasses, in lru-cached maps cleared on entry and exit."""
    from moto.cloudformation import parsing

    models = [
        _cfn_model("AWS::StepFunctions::StateMachineVersion", _publish_version),
        _cfn_model("AWS::StepFunctions::StateMachineAlias", _create_alias),
    ]
    caches = (parsing.get_model_list, parsing.get_model_map, parsing.get_name_type_map)
    for cached in caches:
        cached.cache_clear()
    try:
        yield
    finally:
        # A class cannot be unregistered from __subclasses__: make them unreachable instead.
        for model in models:
            model.cloudformation_type = staticmethod(lambda: "Custom::LocalRuntimeRemoved")  # type: ignore[method-assign]  # a patch of moto
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
        def create_from_cloudformation_json(  # type: ignore[override]  # moto's signature, patched
            cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **_: Any
        ) -> Model:
            return cls(create(get_backend(account_id, region_name), cloudformation_json["Properties"]))

    return Model


def _publish_version(backend: Any, props: dict[str, Any]) -> str:
    machine = backend.describe_state_machine(props["StateMachineArn"])
    machine.publish(props.get("Description"))
    return str(machine.latest_version.arn)


def _create_alias(backend: Any, props: dict[str, Any]) -> str:
    routes = [
        {"stateMachineVersionArn": r["StateMachineVersionArn"], "weight": int(r["Weight"])}
        for r in props["RoutingConfiguration"]
    ]
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

    def start_execution(
        self: Any,
        state_machine_arn: str,
        name: Any = None,
        execution_input: Any = None,
        trace_header: Any = None,
    ) -> Any:
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
        with _VERSIONED_START, patched(machine, "definition", version.definition):
            execution = original(self, machine_arn, name, execution_input, trace_header)
        if not hasattr(execution, "state_machine_version_arn"):  # not an idempotent repeat
            execution.state_machine_version_arn = version.arn
            execution.state_machine_alias_arn = alias_arn
        return execution

    described = StepFunctionResponse.describe_execution

    def describe_execution(self: Any) -> Any:
        result = described(self)
        execution = self.stepfunction_backend.describe_execution(self._get_param("executionArn"))
        for field, value in (
            ("stateMachineVersionArn", getattr(execution, "state_machine_version_arn", None)),
            ("stateMachineAliasArn", getattr(execution, "state_machine_alias_arn", None)),
        ):
            if value:
                result.result[field] = value
        return result

    with (
        patched(StepFunctionsParserBackend, "start_execution", start_execution),
        patched(StepFunctionResponse, "describe_execution", describe_execution),
    ):
        yield


def _sfn_start_execution_task_calls_boto_with_its_member_names() -> Any:
    """A `states:startExecution` task calls boto3 with its members (`input`, `stateMachineArn`)
    and answers with the state's names (`ExecutionArn`); moto passes the state's names through."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_sfn import (
        StateTaskServiceSfn,
    )

    original = StateTaskServiceSfn._eval_service_task

    def _eval_service_task(
        self: Any, env: Any, resource_runtime_part: Any, normalised_parameters: dict, state_credentials: Any
    ) -> None:
        renamed = {key[:1].lower() + key[1:]: value for key, value in normalised_parameters.items()}
        original(self, env, resource_runtime_part, renamed, state_credentials)
        response = env.stack.pop()
        env.stack.append({key[:1].upper() + key[1:]: value for key, value in response.items()})

    return patched(StateTaskServiceSfn, "_eval_service_task", _eval_service_task)


@contextmanager
def _states_errors_pass_through_fail_states_and_maps() -> Iterator[None]:
    """A `States.*` error passes through a Fail state's `ErrorPath` and out of a Map iteration
    (moto checks it as a custom error name and fails with States.Runtime)."""
    from moto.stepfunctions.parser.asl.component.common.error_name.error_name import ErrorName
    from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration import iteration_worker
    from moto.stepfunctions.parser.asl.component.state.fail import state_fail

    # ErrorName: CustomErrorName without its refusal of the "States." prefix
    with (
        patched(state_fail, "CustomErrorName", ErrorName),
        patched(iteration_worker, "CustomErrorName", ErrorName),
    ):
        yield


#: How often a `.sync` task asks whether its child execution closed (moto: every 0.5 s).
SYNC_POLL_SECONDS = 0.05


def _sync_tasks_poll_often() -> Any:
    """A `.sync` task looks at its child execution every `SYNC_POLL_SECONDS`."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
        state_task_service_callback as callback,
    )

    return patched(callback, "_DELAY_SECONDS_SYNC_CONDITION_CHECK", SYNC_POLL_SECONDS)


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

    with (
        patched(executions.Execution, "start", started),
        patched(executions.BaseExecutionWorkerCommunication, "terminated", ended),
    ):
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
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states",
        "account": execution.account_id,
        "time": time.time(),
        "region": execution.region_name,
        "resources": [execution.exec_arn],
        "detail": detail,
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

    return patched(IterationWorker, "_eval_pool", _eval_pool)
