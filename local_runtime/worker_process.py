"""One Lambda execution environment: ``python .../worker_process.py <handler>``.

The stand-in for the Lambda Python runtime: the process environment is the function's (from
its template), the root logger is set up as the runtime sets it up, and an unhandled
exception is reported and logged as the runtime reports and logs it.

Protocol: one JSON request per line on stdin (``{"request_id", "event", "faults",
"deadline"}``), one JSON response per line on the original stdout (``{"errored",
"payload"}``). The handler's own stdout goes to stderr (the function's log), so a ``print``
in a handler cannot corrupt the protocol.

Run as a script, not as ``-m local_runtime.worker_process``: the process must not import the
runtime package (nor see its modules), only the standard library, boto3 and the function's
code directory, which is first on ``sys.path`` as in the Lambda runtime. Standard library
only at import time, so that tests can import `LambdaJsonFormatter` from here.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
import sys
import time
import traceback
from typing import Any

_DATETIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
# LogRecord attributes the runtime never copies into a line; every other attribute (each
# `extra=` key) becomes a field. `tenant_id` is Lambda's own (tenant isolation mode): the
# runtime overwrites it, so an `extra={"tenant_id": ...}` never reaches the log.
_RESERVED_FIELDS = frozenset(
    "name msg args levelname levelno pathname filename module exc_info exc_text stack_info lineno funcName"
    " created msecs relativeCreated thread threadName processName process aws_request_id tenant_id".split()
)

_faults: dict[str, Any] = {}
_request_id = ""
#: What the armed `kill` directive has counted in this invocation.
_kill_count = 0


class LambdaJsonFormatter(logging.Formatter):
    """A record as one JSON object, the way Lambda's Python runtime writes it in the JSON log
    format (awslambdaric 4.0 `JsonFormatter`): ``timestamp``, ``level``, ``message``,
    ``logger``, ``requestId``, each ``extra=`` field, and for an exception ``errorType``,
    ``errorMessage``, ``stackTrace`` and ``location``. Fields that are None are left out; a
    value that is not JSON fails as it fails on Lambda (no ``default=str``)."""

    converter = time.gmtime

    def __init__(self) -> None:
        super().__init__(datefmt=_DATETIME_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        record.levelno = min(50, max(0, record.levelno)) // 10 * 10
        record.levelname = logging.getLevelName(record.levelno)
        exc_info = record.exc_info
        entry: dict[str, Any] = {
            "timestamp": self.formatTime(record, self.datefmt),
            "level": record.levelname,
            "message": record.getMessage(),
            "logger": record.name,
            "stackTrace": traceback.format_tb(exc_info[2]) if exc_info else None,
            "errorType": exc_info[0].__name__ if exc_info and exc_info[0] else None,
            "errorMessage": str(exc_info[1]) if exc_info else None,
            "requestId": getattr(record, "aws_request_id", None),
            "location": f"{record.pathname}:{record.funcName}:{record.lineno}" if exc_info else None,
        }
        entry.update((k, v) for k, v in vars(record).items() if k not in _RESERVED_FIELDS and k not in entry)
        return json.dumps({k: v for k, v in entry.items() if v is not None}, ensure_ascii=False)


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.aws_request_id = _request_id
        record.tenant_id = None
        return True


def setup_logging(log_format: str, log_level: str) -> None:
    """The root logger as the runtime configures it from AWS_LAMBDA_LOG_FORMAT/_LEVEL (an
    empty level leaves Python's default, WARNING)."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format.upper() == "JSON":
        handler.setFormatter(LambdaJsonFormatter())
    else:
        text = "[%(levelname)s]\t%(asctime)s.%(msecs)03dZ\t%(aws_request_id)s\t%(message)s"
        handler.setFormatter(logging.Formatter(text, "%Y-%m-%dT%H:%M:%S"))
        handler.formatter.converter = time.gmtime  # type: ignore[union-attr]
    handler.addFilter(_RequestIdFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    level = {"TRACE": "DEBUG"}.get(log_level.upper(), log_level.upper())
    if level in logging.getLevelNamesMapping():
        root.setLevel(level)


def _log_unhandled(payload: dict[str, Any], log_format: str) -> None:
    """The runtime's own line for an unhandled exception. In JSON it says "log_level", not
    "level", so a `$.level = "ERROR"` metric filter does not count it."""
    if log_format.upper() == "JSON":
        line = json.dumps(
            {"timestamp": time.strftime(_DATETIME_FORMAT, time.gmtime()), "log_level": "ERROR", **payload}
        )
    else:
        trace = [line for frame in payload["stackTrace"] for line in frame.splitlines()]
        line = "\r".join(
            [
                f"[ERROR] {payload['errorType']}: {payload['errorMessage']}",
                "Traceback (most recent call last):",
                *trace,
            ]
        )
    sys.stderr.write(line + "\n")


class LambdaContext:
    """The parts of the Lambda context object handlers commonly use."""

    def __init__(self, request_id: str, deadline: float) -> None:
        self.aws_request_id = request_id
        self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "")
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        self.invoked_function_arn = os.environ.get("LOCAL_RUNTIME_FUNCTION_ARN", "")
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "local"
        self._deadline = deadline

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.time()) * 1000))


def _after_call(event_name: str, http_response: Any = None, **_: Any) -> None:
    """botocore `after-call` hook: a succeeded call that the armed `kill` names counts towards it."""
    if http_response is None or http_response.status_code >= 300:
        return
    kill = _faults.get("kill") or {}
    if kill.get("after") and event_name == f"after-call.{kill['after']}":
        _count_towards_kill(kill)


def _count_towards_kill(kill: dict[str, Any]) -> None:
    """The `kill` directive (`{"after": "s3.PutObject" | "sink", "count": n}`): at the n-th
    such event of this invocation the process is killed for real (SIGKILL, as the Lambda
    service kills a runtime out of memory or out of time): no handler code, no `finally`, no
    flush runs after it."""
    global _kill_count
    _kill_count += 1
    if _kill_count >= int(kill.get("count", 1)):
        os.kill(os.getpid(), signal.SIGKILL)


def _sink_endpoint() -> tuple[str, int] | None:
    """(host, port) of the function's core system (`SINK_URL`), if it has one."""
    import urllib.parse

    url = urllib.parse.urlsplit(os.environ.get("SINK_URL", ""))
    if not url.hostname:
        return None
    return url.hostname, url.port or (443 if url.scheme == "https" else 80)


def _install_fault_hooks() -> None:
    # Every client the handler creates through boto3's default session inherits the hook.
    import http.client

    import boto3

    boto3.setup_default_session()
    boto3.DEFAULT_SESSION.events.register("after-call", _after_call)
    sink = _sink_endpoint()
    if sink is None:
        return
    getresponse = http.client.HTTPConnection.getresponse

    def counted_getresponse(self: http.client.HTTPConnection, *args: Any, **kwargs: Any) -> Any:
        """`kill` after `sink`: the core system has answered (and registered) the request."""
        response = getresponse(self, *args, **kwargs)
        kill = _faults.get("kill") or {}
        if kill.get("after") == "sink" and (self.host, self.port) == sink:
            _count_towards_kill(kill)
        return response

    http.client.HTTPConnection.getresponse = counted_getresponse  # type: ignore[method-assign]


def _error_payload(error: BaseException, request_id: str) -> dict[str, Any]:
    """The payload the Python Lambda runtime returns for an unhandled exception."""
    return {
        "errorMessage": str(error),
        "errorType": type(error).__name__,
        "requestId": request_id,
        # From the handler's frame down, as on Lambda (this module's frame is not the function's).
        "stackTrace": traceback.format_tb(error.__traceback__.tb_next if error.__traceback__ else None),
    }


def main() -> None:
    global _request_id, _kill_count
    # A script's own directory is sys.path[0]; the function must not import runtime modules.
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    protocol = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    log_format = os.environ.get("AWS_LAMBDA_LOG_FORMAT", "Text")
    setup_logging(log_format, os.environ.get("AWS_LAMBDA_LOG_LEVEL", ""))
    module_name, _, function_name = sys.argv[1].rpartition(".")
    _install_fault_hooks()
    try:
        handler = getattr(importlib.import_module(module_name), function_name)
        init_error = None
    except Exception as error:  # noqa: BLE001 - reported on every invocation, like Lambda
        handler, init_error = None, error
        traceback.print_exc()
    protocol.write(json.dumps({"ready": True}) + "\n")

    for line in sys.stdin:
        request = json.loads(line)
        _request_id = request["request_id"]
        _faults.clear()
        _faults.update(request.get("faults") or {})
        _kill_count = 0
        if handler is None:
            payload = {
                "errorMessage": f"Unable to import module '{module_name}': {init_error}",
                "errorType": "Runtime.ImportModuleError",
                "requestId": _request_id,
                "stackTrace": [],
            }
            response = {"errored": True, "payload": json.dumps(payload)}
        else:
            try:
                result = handler(request["event"], LambdaContext(_request_id, request["deadline"]))
                response = {"errored": False, "payload": json.dumps(result)}
            except Exception as error:  # noqa: BLE001 - the runtime reports every exception
                payload = _error_payload(error, _request_id)
                _log_unhandled(payload, log_format)
                response = {"errored": True, "payload": json.dumps(payload)}
        sys.stdout.flush()
        sys.stderr.flush()
        protocol.write(json.dumps(response) + "\n")


if __name__ == "__main__":
    main()
