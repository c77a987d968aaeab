"""moto in server mode on 127.0.0.1, its client factory, and `moto_patches()`, which applies the
patches of the local run in the order of local_runtime/README.md, "moto 5.2.5 patches" (why
each; the patches: moto_delivery_patches.py, moto_sfn_patches.py). Server mode, not `mock_aws`:
the workers are processes that reach moto over HTTP, and moto's Step Functions calls Lambda
through $MOTO_PORT."""

from __future__ import annotations

import json
import logging
import os
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import boto3
from botocore.config import Config

from local_runtime.moto_delivery_patches import (
    LambdaInvoker,
    _event_bus_targets_forward_the_event,
    _fifo_groups_wait_for_messages_in_flight,
    _lambda_runs_local_workers,
    _s3_event_keys_encoded,
    _s3_events_get_fresh_ids,
    s3_event_key,
)
from local_runtime.moto_sfn_patches import (
    SYNC_POLL_SECONDS,
    _cfn_state_machine_versions_and_aliases,
    _cfn_state_machines_in_the_executing_backend,
    _map_iterations_loop,
    _scaled_retry_sleeps,
    _sfn_start_execution_task_calls_boto_with_its_member_names,
    _sfn_starts_through_aliases_and_versions,
    _sfn_status_change_events,
    _states_errors_pass_through_fail_states_and_maps,
    _sync_tasks_poll_often,
)

#: This module's names, and those of the patch modules that other modules import from here.
__all__ = [
    "FAKE_CREDENTIALS",
    "SYNC_POLL_SECONDS",
    "LambdaInvoker",
    "MotoServer",
    "moto_patches",
    "s3_event_key",
]

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
                    session = _sessions[self.region] = boto3.session.Session(
                        region_name=self.region, **FAKE_CREDENTIALS
                    )
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
                self._api,
                "/moto-api/config",
                {"stepfunctions": dict(default_user_config.get("stepfunctions", {}))},
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
