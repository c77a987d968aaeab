"""Lambda execution environments as local processes, one pool per function.

moto would run a function in Docker; here every invocation moto receives is handed to a
worker process of that function instead (see `moto_server`). A process per function keeps
each function's environment variables and module state apart (two tenants' register
functions read different sink URLs). A pool grows like Lambda's execution environments when
one function is invoked concurrently, up to its reserved concurrency.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from local_runtime import worker_process
from local_runtime.deploy import DeployedFunction

WORKER_SCRIPT = Path(worker_process.__file__).resolve()

#: Upper bound on environments of a function without reserved concurrency (2-core machines).
DEFAULT_MAX_ENVIRONMENTS = 4
#: How long a new worker may take to import its handler before the invocation fails.
STARTUP_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class InvocationResult:
    """What moto's Lambda `invoke` returns: the payload, and whether it is a function error."""

    payload: str
    errored: bool
    duration: float
    crashed: bool = False  # an armed kill (`faults.kill`) killed the process during the invocation

    @property
    def error_type(self) -> str | None:
        if not self.errored:
            return None
        try:
            return json.loads(self.payload).get("errorType")
        except (ValueError, AttributeError):
            return None

    @property
    def value(self) -> Any:
        try:
            return json.loads(self.payload)
        except ValueError:
            return self.payload


class WorkerTimeout(Exception):
    pass


class WorkerDied(Exception):
    def __init__(self, returncode: int | None) -> None:
        super().__init__(f"worker exited with status {returncode}")
        self.returncode = returncode


class Worker:
    """One process running one function's handler, one invocation at a time."""

    def __init__(self, function: DeployedFunction, env: dict[str, str], log: TextIO) -> None:
        self.function = function
        self._buffer = b""
        self._ready = False
        self.process = subprocess.Popen(
            [sys.executable, "-u", str(WORKER_SCRIPT), function.handler],
            env=env,
            cwd=str(function.code_dir),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,  # a Ctrl-C of the demo reaches the parent only
        )

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def invoke(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        if not self._ready:
            self._read_line(time.monotonic() + STARTUP_TIMEOUT_SECONDS)
            self._ready = True
        # As on Lambda, the init (imports) of a new environment does not count against the
        # invocation's timeout: at a small time scale it would time out every cold start.
        deadline = time.monotonic() + timeout
        assert self.process.stdin is not None
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerDied(self.process.wait()) from None
        return json.loads(self._read_line(deadline))

    def _read_line(self, deadline: float) -> bytes:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerTimeout()
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable:
                continue
            data = os.read(fd, 65536)
            if not data:
                raise WorkerDied(self.process.wait())
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def stop(self) -> None:
        """Close stdin (the worker exits on EOF); kill it if it does not."""
        self.request_stop()
        self.wait_stopped()

    def request_stop(self) -> None:
        if self.process.poll() is None and self.process.stdin is not None and not self.process.stdin.closed:
            try:
                self.process.stdin.close()
            except OSError:
                pass

    def wait_stopped(self, timeout: float = 2.0) -> None:
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None and not stream.closed:
                try:
                    stream.close()
                except OSError:
                    pass

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


#: Called around every invocation (progress events, tests); must not raise.
InvocationListener = Callable[[DeployedFunction, Any, "InvocationResult | None"], None]


@dataclass
class FunctionPool:
    """The execution environments of one function."""

    function: DeployedFunction
    process_env: dict[str, str]
    log_path: Path
    max_environments: int
    _idle: list[Worker] = field(default_factory=list)
    _all: set[Worker] = field(default_factory=set)
    _busy: int = 0
    _closed: bool = False
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _log: TextIO | None = None

    def __post_init__(self) -> None:
        self._log = open(self.log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed in close()

    def prewarm(self) -> None:
        """Start one environment now, so the first invocation does not pay for the import."""
        with self._cond:
            if not self._idle and not self._closed:
                self._idle.append(self._new_worker())

    def _new_worker(self) -> Worker:
        assert self._log is not None
        worker = Worker(self.function, self.process_env, self._log)
        self._all.add(worker)
        return worker

    def _acquire(self) -> Worker:
        with self._cond:
            while True:
                if self._closed:
                    raise WorkerDied(None)
                if self._idle:
                    worker = self._idle.pop()
                    if not worker.alive:
                        worker.stop()
                        self._all.discard(worker)
                        continue
                    self._busy += 1
                    return worker
                if self._busy < self.max_environments:
                    self._busy += 1
                    return self._new_worker()
                self._cond.wait(0.5)

    def _release(self, worker: Worker | None) -> None:
        retired = None
        with self._cond:
            self._busy -= 1
            if worker is not None and worker.alive and not self._closed:
                self._idle.append(worker)
            elif worker is not None:
                self._all.discard(worker)
                retired = worker
            self._cond.notify()
        if retired is not None:
            retired.stop()

    def _discard(self, worker: Worker) -> None:
        with self._cond:
            self._all.discard(worker)
        self._release(None)

    @property
    def in_flight(self) -> int:
        return self._busy

    def invoke(self, event: Any, faults: dict[str, Any] | None = None) -> InvocationResult:
        """Run one invocation; a timeout or a dead process is reported as Lambda reports it."""
        request_id = str(uuid.uuid4())
        started = time.monotonic()
        try:
            worker = self._acquire()
        except WorkerDied:
            return _runtime_error(request_id, "Runtime.ExitError", "runtime is shutting down", started)
        timeout = self.function.timeout_seconds
        request = {
            "request_id": request_id,
            "event": event,
            "faults": faults or {},
            "deadline": time.time() + timeout,
        }
        try:
            response = worker.invoke(request, timeout)
        except WorkerTimeout:
            worker.kill()
            self._discard(worker)
            self._platform_report(request_id, "timeout", started, f"Task timed out after {timeout:.2f} seconds")
            return _runtime_error(
                request_id, "Sandbox.Timedout", f"Task timed out after {timeout:.2f} seconds", started
            )
        except WorkerDied as died:
            worker.stop()
            self._discard(worker)
            # As Lambda words it: a killed runtime is "signal: killed", an exit its status.
            code = died.returncode or 0
            how = ("signal: killed" if code == -signal.SIGKILL else f"signal: {signal.Signals(-code).name}" if code < 0
                   else f"exit status {code}")
            self._platform_report(request_id, "error", started, f"Runtime exited with error: {how}")
            # A kill armed by a fault says how Lambda would report it (e.g. Runtime.OutOfMemory).
            error_type = (faults or {}).get("kill", {}).get("error_type") or "Runtime.ExitError"
            result = _runtime_error(request_id, error_type, f"Runtime exited with error: {how}", started)
            injected = "kill" in (faults or {}) and died.returncode == -signal.SIGKILL
            return InvocationResult(result.payload, True, result.duration, crashed=injected)
        self._release(worker)
        return InvocationResult(response["payload"], bool(response["errored"]), time.monotonic() - started)

    def _platform_report(self, request_id: str, status: str, started: float, text: str) -> None:
        """The record Lambda writes to the function's log when an invocation times out or its
        runtime dies: a `platform.report` record with its `status` in JSON log format (the
        error-log metric filter counts it), the "Task timed out" line in text format."""
        if self._log is None or self._log.closed:
            return
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
        if self.function.log_format.upper() == "JSON":
            record = {"requestId": request_id, "status": status,
                      "metrics": {"durationMs": round((time.monotonic() - started) * 1000, 3)}}
            line = json.dumps({"time": stamp, "type": "platform.report", "record": record})
        else:
            line = f"{stamp} {request_id} {text}"
        try:
            self._log.write(line + "\n")
        except ValueError:  # closed meanwhile
            pass

    def close(self) -> list[Worker]:
        """Ask idle environments to exit and kill busy ones (their invocations fail like a
        crash); returns the workers to wait for, so that many pools can stop in parallel."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = self._all.difference(idle)
            self._all.clear()
            self._cond.notify_all()
        for worker in busy:
            worker.kill()
        for worker in idle:
            worker.request_stop()
        if self._log is not None:
            self._log.close()
        return [*idle, *busy]


def _runtime_error(request_id: str, error_type: str, message: str, started: float) -> InvocationResult:
    payload = {"errorMessage": f"RequestId: {request_id} Error: {message}", "errorType": error_type}
    return InvocationResult(json.dumps(payload), True, time.monotonic() - started)


class LambdaDispatcher:
    """Routes moto's Lambda invocations to the pool of the invoked function.

    ``runtime_env`` is added to every function's own variables (the moto endpoint, fake
    credentials, the region); ``PYTHONPATH`` is the function's code asset directory, as
    ``/var/task`` on Lambda. Nothing else of this process's environment is passed on.
    """

    def __init__(self, runtime_env: dict[str, str], log_dir: Path) -> None:
        self._runtime_env = runtime_env
        self._log_dir = log_dir
        self._pools: dict[str, FunctionPool] = {}
        self._lock = threading.Lock()
        self._listeners: list[InvocationListener] = []
        self._fault_sources: list[Callable[[DeployedFunction], dict[str, Any]]] = []
        self._crash_observers: list[Callable[[DeployedFunction, InvocationResult], None]] = []
        self._closed = False

    def register(self, function: DeployedFunction, *, prewarm: bool = True) -> None:
        with self._lock:
            old = self._pools.get(function.name)
            pool = FunctionPool(
                function=function,
                process_env=self._process_env(function),
                log_path=self._log_dir / f"{function.name}.log",
                max_environments=function.reserved_concurrency or DEFAULT_MAX_ENVIRONMENTS,
            )
            self._pools[function.name] = pool
        if old is not None:
            for worker in old.close():
                worker.wait_stopped()
        if prewarm:
            pool.prewarm()

    def log_path(self, function_name: str) -> Path:
        return self._pools[function_name].log_path

    def add_listener(self, listener: InvocationListener) -> None:
        self._listeners.append(listener)

    def add_fault_source(self, source: Callable[[DeployedFunction], dict[str, Any]]) -> None:
        self._fault_sources.append(source)

    def add_crash_observer(self, observer: Callable[[DeployedFunction, InvocationResult], None]) -> None:
        self._crash_observers.append(observer)

    def in_flight(self, function_names: list[str] | tuple[str, ...] | None = None) -> int:
        """Invocations running now, of the named functions (default: all)."""
        pools = dict(self._pools)
        names = pools if function_names is None else function_names
        return sum(pools[name].in_flight for name in names if name in pools)

    def invoke(self, function_name: str, environment: dict[str, str] | None, event: Any) -> InvocationResult:
        """Invoke by name; ``environment`` is the function's current configuration in moto."""
        pool = self._pools.get(function_name)
        if pool is None or self._closed:
            return _runtime_error(
                str(uuid.uuid4()),
                "Runtime.InvalidEntrypoint",
                f"no local worker for {function_name}",
                time.monotonic(),
            )
        if environment is not None and environment != pool.function.environment:
            # The function was reconfigured in moto (update-function-configuration): new environments.
            self.register(replace(pool.function, environment=dict(environment)))
            pool = self._pools[function_name]
        faults: dict[str, Any] = {}
        for source in self._fault_sources:
            faults.update(source(pool.function))
        self._notify(pool.function, event, None)
        result = pool.invoke(event, faults)
        if result.crashed:
            for observer in self._crash_observers:
                observer(pool.function, result)
        self._notify(pool.function, event, result)
        return result

    def _notify(self, function: DeployedFunction, event: Any, result: InvocationResult | None) -> None:
        for listener in self._listeners:
            try:
                listener(function, event, result)
            except Exception:  # noqa: BLE001 - a broken listener must not break the pipeline
                pass

    def _process_env(self, function: DeployedFunction) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if key in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")
        }
        env.update(function.environment)
        env.update(self._runtime_env)
        env.update(
            {
                "AWS_LAMBDA_FUNCTION_NAME": function.name,
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(function.memory_size),
                "AWS_LAMBDA_FUNCTION_TIMEOUT": str(function.timeout_seconds),
                "AWS_LAMBDA_LOG_FORMAT": function.log_format,
                "LOCAL_RUNTIME_FUNCTION_ARN": function.arn,
                "PYTHONPATH": str(function.code_dir),
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        if function.log_format.upper() == "JSON":
            env["AWS_LAMBDA_LOG_LEVEL"] = function.log_level  # what Lambda sets in JSON log format
        return env

    def close(self) -> None:
        self._closed = True
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        stopping = [worker for pool in pools for worker in pool.close()]
        for worker in stopping:
            worker.wait_stopped()
