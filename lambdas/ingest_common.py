"""Helpers shared by the three ingestion functions (stdlib + boto3 only).

Nothing here touches the network or the environment at import time: handlers read their
configuration per invocation, so one module can serve several configurations in tests.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import io
import json
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

LOGGER_NAME = "ingest"

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_RECORD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


class ConfigError(RuntimeError):
    """The function's environment is incomplete or invalid (a deployment fault)."""


class KeyOutsidePrefixError(ValueError):
    """An input names an S3 key outside the tenant's own prefix; refused, never read."""


class JsonFormatter(logging.Formatter):
    """One JSON object per record, shaped like Lambda's JSON log format."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "timestamp": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "message": record.getMessage(),
            "logger": record.name,
        }
        entry.update((k, v) for k, v in vars(record).items() if k not in _RECORD_ATTRS)
        if record.exc_info:
            entry["errorType"] = record.exc_info[0].__name__ if record.exc_info[0] else None
            entry["stackTrace"] = self.formatException(record.exc_info).splitlines()
        return json.dumps(entry, default=str)


class _StderrHandler(logging.Handler):
    """Writes to whatever `sys.stderr` is at emit time (test runners swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - logging must never break the handler
            self.handleError(record)


def get_logger(name: str) -> logging.Logger:
    """Logger for one function, e.g. `get_logger("controller")` -> `ingest.controller`."""
    return logging.getLogger(f"{LOGGER_NAME}.{name}")


def configure_logging() -> None:
    """Make stdlib logging emit JSON with a `level` field; idempotent, call per invocation.

    With `AWS_LAMBDA_LOG_FORMAT=JSON` the Lambda runtime already does this (and applies the
    function's log level), so nothing is changed. Elsewhere a JSON formatter is installed on
    stderr so the same `{ $.level = "ERROR" }` metric filter would match.
    """
    if os.environ.get("AWS_LAMBDA_LOG_FORMAT", "").upper() == "JSON":
        return
    package_logger = logging.getLogger(LOGGER_NAME)
    if package_logger.level == logging.NOTSET:
        package_logger.setLevel(os.environ.get("LOG_LEVEL", "INFO").upper())
    if not any(isinstance(h, _StderrHandler) for h in package_logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(JsonFormatter())
        package_logger.addHandler(handler)


def env(name: str) -> str:
    """Value of a required environment variable; raises `ConfigError` naming it."""
    value = os.environ.get(name, "").strip()
    if not value:
        raise ConfigError(f"environment variable {name} is not set; the function's deployment must set it")
    return value


def env_int(name: str, *, minimum: int = 1) -> int:
    """Required integer environment variable, at least `minimum`."""
    raw = env(name)
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"environment variable {name}={raw!r} is not an integer") from None
    if value < minimum:
        raise ConfigError(f"environment variable {name}={value} must be at least {minimum}")
    return value


def env_float(name: str, *, minimum: float = 0.0) -> float:
    """Required number environment variable, greater than `minimum`."""
    raw = env(name)
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"environment variable {name}={raw!r} is not a number") from None
    if not value > minimum:
        raise ConfigError(f"environment variable {name}={value} must be greater than {minimum}")
    return value


@functools.cache
def aws_client(service: str) -> Any:
    """boto3 client, created on first use and reused by warm invocations."""
    import boto3  # deferred: importing this module must stay cheap and side-effect free

    return boto3.client(service)


def idempotency_key(bucket: str, key: str, version_id: str, record_index: int) -> str:
    """Key the core system deduplicates on: stable across retries, distinct per version and record."""
    return hashlib.sha256(f"{bucket}/{key}?versionId={version_id}#{record_index}".encode()).hexdigest()


def chunk_key(chunk_prefix: str, index: int) -> str:
    """Work-bucket key of one chunk file."""
    return f"{chunk_prefix}chunk-{index:06d}.jsonl"


# Bounds on a single read from S3 and on a single physical line: memory stays flat whatever
# the file size, and a file without newlines cannot exhaust the function's memory.
READ_SIZE_BYTES = 64 * 1024
MAX_LINE_BYTES = 8 * 1024 * 1024


class _RawBody(io.RawIOBase):
    """Raw-IO view of a botocore StreamingBody that only ever asks it for bounded reads."""

    def __init__(self, body: Any) -> None:
        super().__init__()
        self._body = body

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._body.read(min(len(buffer), READ_SIZE_BYTES))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._body.close()
        super().close()


class LineTooLongError(ValueError):
    """A physical line exceeds `MAX_LINE_BYTES`."""

    def __init__(self, line_number: int) -> None:
        super().__init__(f"line {line_number}: longer than {MAX_LINE_BYTES} bytes")
        self.line_number = line_number


def iter_lines(body: Any) -> Iterator[tuple[int, bytes]]:
    """Yield `(line_number, raw_line)` from a streaming body, 1-based, line ending kept.

    Lines are split on b"\\n" only, so a CRLF line keeps its "\\r\\n" (what `csv` wants).
    Decoding is left to the caller so an invalid UTF-8 byte can be reported with its line.
    """
    with io.BufferedReader(_RawBody(body), buffer_size=READ_SIZE_BYTES) as stream:
        line_number = 0
        while line := stream.readline(MAX_LINE_BYTES + 1):
            line_number += 1
            if len(line) > MAX_LINE_BYTES:
                raise LineTooLongError(line_number)
            yield line_number, line
