"""Lambda execution environments as local processes: a pool of workers per function, growing up
to its reserved concurrency (local_runtime/README.md, "Workers")."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
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
    """What moto's Lambda `invoke` returns: the payload (JSON), and whether it is a function error."""

    payload: str
    errored: bool
    crashed: bool = False  # an armed kill (`faults.kill`) killed the process during the invocation

    @property
    def value(self) -> Any:
        return json.loads(self.payload)

    @property
    def error_type(self) -> str | None:
        return self.value.get("errorType") if self.errored else None


class WorkerTimeout(Exception):
    pass


class WorkerDied(Exception):
    def __init__(self, returncode: int) -> None:
        super().__init__(f"worker exited with status {returncode}")
        self.returncode = returncode


class ForkServer:
    """The parent of a run's workers (`worker_process.serve_forks`): boto3 imported and its models
    parsed once, each worker a fork. Its own session: a Ctrl-C of the demo reaches this process only."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self._socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs, open(log, "ab") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-u", str(WORKER_SCRIPT), str(theirs.fileno())],
                env=env,
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
                start_new_session=True,
            )
        self._lock = threading.Lock()
        self._exits: dict[int, int] = {}  # pid -> returncode, reported and not yet asked for

    def spawn(self, request: dict[str, Any], fds: list[int]) -> int:
        """A new worker for ``request`` (handler, env, cwd) with ``fds`` as its stdin, stdout, stderr."""
        with self._lock:
            socket.send_fds(self._socket, [json.dumps(request).encode()], fds)
            while "spawned" not in (message := self._receive()):
                pass
            return message["spawned"]

    def returncode(self, pid: int) -> int:
        """The exit status of a worker whose pipes closed (it has ended, or is ending); killed
        (-9) when the fork server is gone: the run is closing."""
        with self._lock:
            try:
                while pid not in self._exits:
                    self._receive()
            except (OSError, RuntimeError):
                return -signal.SIGKILL
            return self._exits.pop(pid)

    def _receive(self) -> dict[str, Any]:
        data = self._socket.recv(4096)
        if not data:
            raise RuntimeError(f"the workers' fork server ended (status {self.process.wait()})")
        message = json.loads(data)
        if "exited" in message:
            self._exits[message["exited"]] = message["code"]
        return message

    def close(self) -> None:
        self._socket.close()  # the fork server returns on end of file
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Worker:
    """One process running one function's handler, one invocation at a time."""

    def __init__(
        self, function: DeployedFunction, env: dict[str, str], log: TextIO, forks: ForkServer
    ) -> None:
        self._buffer = b""
        self._ready = False
        self._forks = forks
        stdin, stdin_w = os.pipe()
        self._stdout, stdout = os.pipe()
        self._stdin = open(stdin_w, "wb")  # noqa: SIM115  # closed in stop()
        try:
            request = {"handler": function.handler, "env": env, "cwd": str(function.code_dir)}
            self.pid = forks.spawn(request, [stdin, stdout, log.fileno()])
        finally:
            os.close(stdin)
            os.close(stdout)

    @property
    def alive(self) -> bool:
        """False once the process has ended: an idle worker writes nothing, so a readable
        stdout is its end of file."""
        return not select.select([self._stdout], [], [], 0)[0]

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def invoke(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        if not self._ready:
            self._read_line(time.monotonic() + STARTUP_TIMEOUT_SECONDS)
            self._ready = True
        # As on Lambda, the init (imports) of a new environment does not count against the
        # invocation's timeout: at a small time scale it would time out every cold start.
        deadline = time.monotonic() + timeout
        try:
            self._stdin.write((json.dumps(request) + "\n").encode())
            self._stdin.flush()
        except OSError:
            raise WorkerDied(self._forks.returncode(self.pid)) from None
        return json.loads(self._read_line(deadline))

    def _read_line(self, deadline: float) -> bytes:
        fd = self._stdout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerTimeout()
            if not select.select([fd], [], [], remaining)[0]:
                continue
            data = os.read(fd, 65536)
            if not data:
                raise WorkerDied(self._forks.returncode(self.pid))
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def stop(self) -> None:
        """Kill the process (an idle worker has nothing left to do; the fork server reaps it), close its pipes."""
        self.kill()
        with contextlib.suppress(OSError):
            self._stdin.close()
        stdout, self._stdout = self._stdout, -1
        if stdout >= 0:
            os.close(stdout)


#: Called around every invocation (the demo's live view, tests); must not raise.
InvocationListener = Callable[[DeployedFunction, Any, "InvocationResult | None"], None]


class FunctionPool:
    """The execution environments of one function; one is started at once, so that the first
    invocation does not wait for the handler's imports."""

    def __init__(
        self, function: DeployedFunction, env: dict[str, str], log_path: Path, size: int, forks: ForkServer
    ) -> None:
        self.function = function
        self._forks = forks
        self.log_path = log_path
        self._env = env
        self._size = size
        self._log = open(log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115  # closed in close()
        self._idle = [Worker(function, env, self._log, forks)]
        self._busy: set[Worker] = set()
        self._closed = False
        self._cond = threading.Condition()

    @property
    def in_flight(self) -> int:
        return len(self._busy)

    def _acquire(self) -> Worker | None:
        with self._cond:
            while not self._closed:
                while self._idle and not self._idle[-1].alive:
                    self._idle.pop().stop()
                if self._idle or len(self._busy) < self._size:
                    worker = (
                        self._idle.pop()
                        if self._idle
                        else Worker(self.function, self._env, self._log, self._forks)
                    )
                    self._busy.add(worker)
                    return worker
                self._cond.wait()
            return None

    def _release(self, worker: Worker, *, reusable: bool) -> None:
        with self._cond:
            self._busy.discard(worker)
            if reusable and not self._closed:
                self._idle.append(worker)
            self._cond.notify()
        if not reusable:
            worker.stop()

    def invoke(self, event: Any, faults: dict[str, Any]) -> InvocationResult:
        """Run one invocation; a timeout or a dead process is reported as Lambda reports it."""
        request_id = str(uuid.uuid4())
        started = time.monotonic()
        worker = self._acquire()
        if worker is None:
            return _runtime_error(request_id, "Runtime.ExitError", "runtime is shutting down")
        timeout = self.function.timeout_seconds
        request = {
            "request_id": request_id,
            "event": event,
            "faults": faults,
            "deadline": time.time() + timeout,
        }
        try:
            response = worker.invoke(request, timeout)
        except WorkerTimeout:
            self._release(worker, reusable=False)
            self._platform_report(request_id, "timeout", started)
            return _runtime_error(
                request_id, "Sandbox.Timedout", f"Task timed out after {timeout:.2f} seconds"
            )
        except WorkerDied as died:
            self._release(worker, reusable=False)
            self._platform_report(request_id, "error", started)
            # As Lambda words it: a killed runtime is "signal: killed", an exit its status.
            code = died.returncode
            how = (
                "signal: killed"
                if code == -signal.SIGKILL
                else f"signal: {signal.Signals(-code).name}"
                if code < 0
                else f"exit status {code}"
            )
            # A kill armed by a fault says how Lambda would report it (e.g. Runtime.OutOfMemory).
            kill = faults.get("kill")
            error_type = kill["error_type"] if kill else "Runtime.ExitError"
            result = _runtime_error(request_id, error_type, f"Runtime exited with error: {how}")
            return replace(result, crashed=kill is not None and code == -signal.SIGKILL)
        self._release(worker, reusable=True)
        return InvocationResult(response["payload"], response["errored"])

    def _platform_report(self, request_id: str, status: str, started: float) -> None:
        """Lambda's `platform.report` record of an invocation that timed out or whose runtime
        died (the error-log metric filter counts it)."""
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        record = {
            "requestId": request_id,
            "status": status,
            "metrics": {"durationMs": round((time.monotonic() - started) * 1000, 3)},
        }
        with contextlib.suppress(ValueError):  # the pool closed meanwhile, and its log
            self._log.write(json.dumps({"time": now, "type": "platform.report", "record": record}) + "\n")

    def close(self) -> None:
        """Stop every environment; an invocation still running fails as a crash."""
        with self._cond:
            self._closed = True
            idle, busy, self._idle = self._idle, list(self._busy), []
            self._cond.notify_all()
        for worker in busy:
            worker.kill()  # the invocation's thread sees it die and stops it
        for worker in idle:
            worker.stop()
        self._log.close()


def _host_env() -> dict[str, str]:
    """What a worker keeps of this process's environment."""
    return {
        key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
    }


def _runtime_error(request_id: str, error_type: str, message: str) -> InvocationResult:
    payload = {"errorMessage": f"RequestId: {request_id} Error: {message}", "errorType": error_type}
    return InvocationResult(json.dumps(payload), True)


class LambdaDispatcher:
    """Routes moto's Lambda invocations to the pool of the invoked function.

    A worker's environment is the function's variables, ``runtime_env`` (the moto endpoint,
    fake credentials, the region) and what Lambda sets; ``PYTHONPATH`` is the function's code
    asset directory, as ``/var/task`` on Lambda. Nothing else of this process's is passed on.
    """

    def __init__(self, runtime_env: dict[str, str], log_dir: Path) -> None:
        self._runtime_env = runtime_env
        self._log_dir = log_dir
        self._pools: dict[str, FunctionPool] = {}
        self._lock = threading.Lock()
        self._listeners: list[InvocationListener] = []
        self._fault_sources: list[Callable[[DeployedFunction], dict[str, Any]]] = []
        self._crash_observers: list[Callable[[DeployedFunction, InvocationResult], None]] = []
        # Compiled once per run, outside the code directories, so that a worker's start does not
        # compile the handler's modules again.
        self._forks = ForkServer(
            {**_host_env(), "PYTHONPYCACHEPREFIX": str(log_dir.parent / "pycache")},
            log_dir / "fork-server.log",
        )

    def register(self, function: DeployedFunction) -> None:
        """Start the function's pool, in place of its previous one."""
        if function.log_format != "JSON":
            raise ValueError(
                f"{function.name}: LoggingConfig.LogFormat {function.log_format!r}; the local "
                "workers write Lambda's JSON log format only"
            )
        env = {
            **_host_env(),
            **function.environment,
            **self._runtime_env,
            "AWS_LAMBDA_FUNCTION_NAME": function.name,
            "AWS_LAMBDA_LOG_FORMAT": function.log_format,
            "AWS_LAMBDA_LOG_LEVEL": function.log_level,
            "PYTHONPATH": str(function.code_dir),
        }
        size = function.reserved_concurrency or DEFAULT_MAX_ENVIRONMENTS
        pool = FunctionPool(function, env, self._log_dir / f"{function.name}.log", size, self._forks)
        with self._lock:
            old = self._pools.get(function.name)
            self._pools[function.name] = pool
        if old is not None:
            old.close()

    def log_path(self, function_name: str) -> Path:
        return self._pools[function_name].log_path

    def add_listener(self, listener: InvocationListener) -> None:
        self._listeners.append(listener)

    def add_fault_source(self, source: Callable[[DeployedFunction], dict[str, Any]]) -> None:
        self._fault_sources.append(source)

    def add_crash_observer(self, observer: Callable[[DeployedFunction, InvocationResult], None]) -> None:
        self._crash_observers.append(observer)

    def in_flight(self, function_names: Iterable[str]) -> int:
        """Invocations of the named functions running now."""
        pools = dict(self._pools)
        return sum(pools[name].in_flight for name in function_names if name in pools)

    def invoke(self, function_name: str, environment: dict[str, str], event: Any) -> InvocationResult:
        """Invoke by name; ``environment`` is the function's current configuration in moto."""
        pool = self._pools.get(function_name)
        if pool is None:  # an unknown function, or the runtime closed
            return _runtime_error(
                str(uuid.uuid4()), "Runtime.InvalidEntrypoint", f"no local worker for {function_name}"
            )
        if environment != pool.function.environment:
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
            with contextlib.suppress(Exception):  # a broken listener must not break the pipeline
                listener(function, event, result)

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()
        self._forks.close()
