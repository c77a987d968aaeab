"""Lambda execution environments, the Python runtime's stand-in, and the fork server that starts
them (local_runtime/README.md, "Workers" and "Lambda's JSON log format").

The runtime starts one fork server per run (``python .../worker_process.py <socket fd>``): it
imports boto3 and parses the service models once, and each execution environment is a fork of
it, not a new interpreter that would do that work again. A worker's request comes with its stdin, stdout and log file descriptors (``socket.send_fds``);
the fork server answers ``{"spawned": pid}`` and later ``{"exited": pid, "code": returncode}``.

Protocol of a worker: one JSON request per line on stdin (``{"request_id", "event", "faults", "deadline"}``),
one JSON response per line on the original stdout (``{"ready"}`` once the handler is imported,
then ``{"errored", "payload"}``). The handler's own stdout goes to stderr (the function's log),
so a ``print`` in a handler cannot corrupt the protocol.

Run as a script, not as ``-m local_runtime.worker_process``: the function must see only the
standard library, boto3 and its code directory, not the runtime's modules. Standard library
only at import time, so that tests can import `LambdaJsonFormatter` from here.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import logging
import os
import select
import signal
import socket
import sys
import time
import traceback
from typing import Any, NoReturn

_DATETIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
# A LogRecord's own attributes never become fields; every other one (each `extra=` key) does.
# `tenant_id` is Lambda's own (tenant isolation mode): an `extra={"tenant_id": ...}` never
# reaches the log.
_RESERVED_FIELDS = frozenset(vars(logging.makeLogRecord({}))) | {"tenant_id"}

_faults: dict[str, Any] = {}
_request_id = ""
#: The armed kill's `after` events seen in this invocation.
_kill_count = 0
#: The services of the handlers' clients: the fork server parses their models before it forks.
_WARM_SERVICES = ("s3", "sqs", "dynamodb", "stepfunctions", "sns", "secretsmanager")
_loader: Any = None  # the fork server's botocore loader, holding those models


class LambdaJsonFormatter(logging.Formatter):
    """A record as one JSON object, as Lambda's Python runtime writes it in the JSON log format
    (awslambdaric 4.0 `JsonFormatter`); a value that is not JSON fails as it fails on Lambda
    (no ``default=str``)."""

    def format(self, record: logging.LogRecord) -> str:
        exc_info = record.exc_info
        entry: dict[str, Any] = {
            "timestamp": time.strftime(_DATETIME_FORMAT, time.gmtime(record.created)),
            "level": record.levelname,
            "message": record.getMessage(),
            "logger": record.name,
            "stackTrace": traceback.format_tb(exc_info[2]) if exc_info else None,
            "errorType": exc_info[0].__name__ if exc_info and exc_info[0] else None,
            "errorMessage": str(exc_info[1]) if exc_info else None,
            "requestId": _request_id or None,
            "location": f"{record.pathname}:{record.funcName}:{record.lineno}" if exc_info else None,
        }
        entry.update((k, v) for k, v in vars(record).items() if k not in _RESERVED_FIELDS and k not in entry)
        return json.dumps({k: v for k, v in entry.items() if v is not None}, ensure_ascii=False)


def _log_unhandled(payload: dict[str, Any]) -> None:
    """The runtime's own record of an unhandled exception: "log_level", not "level", so a
    `$.level = "ERROR"` metric filter does not count it."""
    record = {"timestamp": time.strftime(_DATETIME_FORMAT, time.gmtime()), "log_level": "ERROR", **payload}
    sys.stderr.write(json.dumps(record) + "\n")


class LambdaContext:
    """The part of Lambda's context object the handlers use."""

    def __init__(self, request_id: str, deadline: float) -> None:
        self.aws_request_id = request_id
        self.function_name = os.environ["AWS_LAMBDA_FUNCTION_NAME"]
        self._deadline = deadline

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.time()) * 1000))


def _count_towards_kill(event: str) -> None:
    """The armed kill (`{"after", "count"}`): at the count-th `after` event of this invocation
    the process is killed for real (SIGKILL, as Lambda kills a runtime out of memory or time):
    no handler code, no `finally`, no flush runs after it."""
    global _kill_count
    kill = _faults.get("kill")
    if kill and kill["after"] == event:
        _kill_count += 1
        if _kill_count >= kill["count"]:
            os.kill(os.getpid(), signal.SIGKILL)


def _after_call(event_name: str, http_response: Any, **_: Any) -> None:
    """botocore's `after-call` hook: a call that succeeded is the event `<service id>.<operation>`."""
    if http_response.status_code < 300:
        _count_towards_kill(event_name.removeprefix("after-call."))


def _install_fault_hooks() -> None:
    import http.client
    import urllib.parse

    import boto3
    import botocore.session

    # Every client the handler creates through boto3's default session inherits the hook; the
    # session is new (this environment's variables), its models those the fork server parsed.
    session = botocore.session.get_session()
    if _loader is not None:
        session.register_component("data_loader", _loader)
    boto3.setup_default_session(botocore_session=session)
    boto3.DEFAULT_SESSION.events.register("after-call", _after_call)
    sink = urllib.parse.urlsplit(os.environ.get("SINK_URL", ""))
    sink_origin = (sink.hostname, sink.port)  # parsed once: `.port` parses the URL on every read
    getresponse = http.client.HTTPConnection.getresponse

    def counted_getresponse(self: http.client.HTTPConnection, *args: Any, **kwargs: Any) -> Any:
        """The event `sink`: the core system has answered (and registered) the request."""
        response = getresponse(self, *args, **kwargs)
        if (self.host, self.port) == sink_origin:
            _count_towards_kill("sink")
        return response

    http.client.HTTPConnection.getresponse = counted_getresponse  # type: ignore[method-assign]  # counts requests in the worker


def main(handler_name: str) -> None:
    global _faults, _request_id, _kill_count
    protocol = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    log = logging.StreamHandler(sys.stderr)
    log.setFormatter(LambdaJsonFormatter())
    logging.getLogger().addHandler(log)
    logging.getLogger().setLevel(os.environ["AWS_LAMBDA_LOG_LEVEL"])
    _install_fault_hooks()
    module_name, _, function_name = handler_name.rpartition(".")
    handler = getattr(importlib.import_module(module_name), function_name)
    protocol.write(json.dumps({"ready": True}) + "\n")

    for line in sys.stdin:
        request = json.loads(line)
        _faults = request["faults"]
        _request_id = request["request_id"]
        _kill_count = 0
        try:
            result = handler(request["event"], LambdaContext(_request_id, request["deadline"]))
            response = {"errored": False, "payload": json.dumps(result)}
        except Exception as error:
            payload = {
                "errorMessage": str(error),
                "errorType": type(error).__name__,
                "requestId": _request_id,
                # From the handler's frame down, as on Lambda (this module's frame is not the function's).
                "stackTrace": traceback.format_tb(error.__traceback__.tb_next),  # type: ignore[union-attr]  # a raised error has a traceback
            }
            _log_unhandled(payload)
            response = {"errored": True, "payload": json.dumps(payload)}
        protocol.write(json.dumps(response) + "\n")


def serve_forks(control: socket.socket) -> None:
    """The fork server: each request on ``control`` becomes a worker process; returns when the
    runtime closes the socket (it stopped its workers first)."""
    global _loader
    import boto3  # noqa: F401  # imported here once, not again in each worker
    import botocore.loaders
    import botocore.session

    _loader = botocore.loaders.create_loader()
    session = botocore.session.get_session()
    session.register_component("data_loader", _loader)
    for service in _WARM_SERVICES:  # parses its model and endpoint rules; no network call
        session.create_client(
            service, region_name="us-east-1", aws_access_key_id="-", aws_secret_access_key="-"
        )
    # What the workers inherit (boto3, the parsed models) goes to the collector's permanent
    # generation: a worker's collections neither scan it nor write to its pages, which fork
    # shares until written (copy-on-write; Python's `gc.freeze` docs).
    gc.freeze()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        readable = select.select([control, wake_r], [], [])[0]
        if wake_r in readable:  # a worker ended: report its exit status
            os.read(wake_r, 4096)
            with contextlib.suppress(ChildProcessError):
                while (ended := os.waitpid(-1, os.WNOHANG))[0]:
                    code = os.waitstatus_to_exitcode(ended[1])
                    control.send(json.dumps({"exited": ended[0], "code": code}).encode())
        if control in readable:
            message, fds, _, _ = socket.recv_fds(control, 1 << 20, 3)
            if not message:
                return
            pid = os.fork()
            if pid == 0:
                control.close()
                _become_worker(json.loads(message), fds, close=(wake_r, wake_w))
            for fd in fds:
                os.close(fd)
            control.send(json.dumps({"spawned": pid}).encode())


def _become_worker(request: dict[str, Any], fds: list[int], *, close: tuple[int, ...]) -> NoReturn:
    """In the forked child: the request's stdin, stdout and log as fds 0-2, the function's
    environment and code directory (sys.path[0], as /var/task on Lambda), then `main`."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in close:
        os.close(fd)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.path[0] = request["cwd"]  # not this script's directory: the runtime's modules stay out of reach
    code = 0
    try:
        main(request["handler"])
    except BaseException:
        traceback.print_exc()
        code = 1
    os._exit(code)


if __name__ == "__main__":
    serve_forks(socket.socket(fileno=int(sys.argv[1])))
