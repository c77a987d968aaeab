"""Entry point of one Lambda worker process: ``python .../_worker.py <handler>``.

A worker is one "execution environment" of one function: its environment variables are the
function's (from the template), so modules that read configuration at import or per call
behave as on Lambda, and two functions never share module state.

Protocol: one JSON request per line on stdin (``{"request_id", "event", "faults",
"deadline"}``), one JSON response per line on the original stdout (``{"errored",
"payload"}``). The handler's own stdout is sent to stderr (the function's log), so a
``print`` in a handler cannot corrupt the protocol.

Run as a script, not as ``-m local_runtime._worker``: the process must not import the
runtime package (nor see its modules), only the standard library, boto3 and the function's
code directory, which is first on ``sys.path`` like in the Lambda runtime.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from typing import Any

#: Exit status of a deliberate crash (fault injection); the parent tells it from a real one.
CRASH_EXIT_CODE = 86

_faults: dict[str, Any] = {}


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


def _crash_hook(event_name: str, http_response: Any = None, **_: Any) -> None:
    """botocore `after-call` hook: die right after the named call succeeded, if armed."""
    target = _faults.get("crash_after")
    if not target or http_response is None or http_response.status_code >= 300:
        return
    service, operation = target.split(".", 1)
    if event_name == f"after-call.{service}.{operation}":
        sys.stderr.write(f"local-runtime: injected crash after {target}\n")
        sys.stderr.flush()
        os._exit(CRASH_EXIT_CODE)


def _install_fault_hooks() -> None:
    # Every client the handler creates through boto3's default session inherits the hook.
    import boto3

    boto3.setup_default_session()
    boto3.DEFAULT_SESSION.events.register("after-call", _crash_hook)


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
    # A script's own directory is sys.path[0]; the function must not import runtime modules.
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    protocol = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    handler_spec = sys.argv[1]
    module_name, _, function_name = handler_spec.rpartition(".")
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
        request_id = request["request_id"]
        _faults.clear()
        _faults.update(request.get("faults") or {})
        if handler is None:
            payload = {
                "errorMessage": f"Unable to import module '{module_name}': {init_error}",
                "errorType": "Runtime.ImportModuleError",
                "requestId": request_id,
                "stackTrace": [],
            }
            response = {"errored": True, "payload": json.dumps(payload)}
        else:
            try:
                result = handler(request["event"], LambdaContext(request_id, request["deadline"]))
                response = {"errored": False, "payload": json.dumps(result)}
            except Exception as error:  # noqa: BLE001 - the runtime reports every exception
                payload = _error_payload(error, request_id)
                # What awslambdaric logs in JSON log format: note "log_level", not "level", so
                # a `$.level = "ERROR"` metric filter does not count unhandled exceptions.
                record = {"timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "log_level": "ERROR", **payload}
                sys.stderr.write(json.dumps(record) + "\n")
                response = {"errored": True, "payload": json.dumps(payload)}
        sys.stdout.flush()
        sys.stderr.flush()
        protocol.write(json.dumps(response) + "\n")


if __name__ == "__main__":
    main()
