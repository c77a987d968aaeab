"""Register chunk: POST one chunk's records, in order, to the core system (the sink).

Each record carries an `Idempotency-Key` derived from the object version and the record's
position in the file, so resending a chunk after a retry or a redrive registers nothing
twice. The first failure stops the chunk: later records are never sent before it.
"""

from __future__ import annotations

import http.client
import urllib.parse
from dataclasses import dataclass
from typing import Any

from ingest_common import (
    ConfigError,
    KeyOutsidePrefixError,
    aws_client,
    chunk_key,
    configure_logging,
    env,
    env_float,
    get_logger,
    idempotency_key,
    iter_lines,
)

logger = get_logger("register_chunk")


class SinkRetryableError(Exception):
    """The sink is temporarily unavailable (429, 5xx, timeout, connection); retry the chunk."""


class SinkRejectedError(Exception):
    """The sink refused a record (other 4xx, 3xx); retrying the same record cannot help."""

    def __init__(self, message: str, *, status: int, chunk_index: int, record_index: int) -> None:
        super().__init__(message)
        self.status = status
        self.chunk_index = chunk_index
        self.record_index = record_index


@dataclass(frozen=True)
class RegisterConfig:
    """The register function's environment."""

    tenant_id: str
    work_bucket: str
    sink_url: str
    sink_timeout_seconds: float

    @classmethod
    def from_env(cls) -> RegisterConfig:
        sink_url = env("SINK_URL")
        # urllib also opens file:// and ftp:// URLs; a sink is only ever HTTP(S).
        if urllib.parse.urlsplit(sink_url).scheme not in ("http", "https"):
            raise ConfigError(
                f"environment variable SINK_URL={sink_url!r} must be an http:// or https:// URL"
            )
        return cls(
            tenant_id=env("TENANT_ID"),
            work_bucket=env("WORK_BUCKET"),
            sink_url=sink_url,
            sink_timeout_seconds=env_float("SINK_TIMEOUT_SECONDS"),
        )


class _SinkConnection:
    """One keep-alive connection to the sink for a whole chunk.

    A TLS handshake per record would dominate the cost of a chunk. `http.client` does not
    follow redirects, which is what we want: a redirected POST would lose its body.
    """

    def __init__(self, url: str, timeout: float) -> None:
        parts = urllib.parse.urlsplit(url)
        factory = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        self._connection = factory(parts.hostname, parts.port, timeout=timeout)
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    def post(self, body: bytes, headers: dict[str, str]) -> int:
        """POST and return the HTTP status; transport failures raise (OSError, HTTPException)."""
        try:
            self._connection.request("POST", self._path, body=body, headers=headers)
            response = self._connection.getresponse()
            response.read()  # drain (never logged) so the connection can be reused
            return response.status
        except (OSError, http.client.HTTPException):
            self.close()
            raise

    def close(self) -> None:
        self._connection.close()


def _transport_problem(error: BaseException, timeout: float) -> str:
    if isinstance(error, TimeoutError):
        return f"timed out after {timeout:g}s"
    return f"connection failed ({type(error).__name__})"


def register_chunk(task: dict[str, Any], *, config: RegisterConfig, s3: Any) -> dict[str, Any]:
    """Send every record of chunk `task["chunk_index"]` in order; return the count sent.

    `task` is the Map item: `tenant, bucket, key, version_id, chunk_prefix, chunk_size,
    chunk_index`; `s3` a boto3 S3 client for the work bucket.
    """
    chunk_index, chunk_size = int(task["chunk_index"]), int(task["chunk_size"])
    bucket, key, version_id = task["bucket"], task["key"], task["version_id"]
    chunk_prefix = task["chunk_prefix"]
    if chunk_index < 0 or chunk_size < 1:
        raise ValueError(f"chunk_index {chunk_index} must be >= 0 and chunk_size {chunk_size} >= 1")
    if not chunk_prefix.startswith(f"{config.tenant_id}/"):
        raise KeyOutsidePrefixError(
            f"chunk_prefix {chunk_prefix!r} is outside tenant {config.tenant_id!r}'s work prefix"
        )

    body = s3.get_object(Bucket=config.work_bucket, Key=chunk_key(chunk_prefix, chunk_index))["Body"]
    sink = _SinkConnection(config.sink_url, config.sink_timeout_seconds)
    try:
        return _send_records(iter_lines(body), sink, task, config)
    finally:
        sink.close()


def _send_records(lines: Any, sink: _SinkConnection, task: dict[str, Any], config: RegisterConfig) -> dict[str, Any]:
    chunk_index, chunk_size = int(task["chunk_index"]), int(task["chunk_size"])
    bucket, key, version_id = task["bucket"], task["key"], task["version_id"]
    sent = 0
    for _, line in lines:
        record = line.rstrip(b"\r\n")
        if not record:
            continue
        if sent >= chunk_size:
            # More records than chunk_size would reuse the next chunk's idempotency keys.
            raise ValueError(f"chunk {chunk_index} holds more than chunk_size={chunk_size} records")
        file_index = chunk_index * chunk_size + sent
        where = f"chunk {chunk_index} record {sent} (file record {file_index})"
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": idempotency_key(bucket, key, version_id, file_index),
            "X-Tenant-Id": config.tenant_id,
        }
        try:
            status = sink.post(record, headers)
        except (OSError, http.client.HTTPException) as error:
            problem = _transport_problem(error, config.sink_timeout_seconds)
            raise SinkRetryableError(f"{where}: {problem}") from None
        if status == 429 or status >= 500:
            raise SinkRetryableError(f"{where}: HTTP {status}")
        if not 200 <= status < 300:
            raise SinkRejectedError(
                f"{where}: HTTP {status}", status=status, chunk_index=chunk_index, record_index=file_index
            )
        sent += 1
    return {"chunk_index": chunk_index, "records_sent": sent}


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Step Functions Map item entry point."""
    configure_logging()
    config = RegisterConfig.from_env()
    log = {
        "tenant": config.tenant_id,
        "key": event.get("key"),
        "version_id": event.get("version_id"),
        "chunk_prefix": event.get("chunk_prefix"),
        "chunk_index": event.get("chunk_index"),
    }
    try:
        result = register_chunk(event, config=config, s3=aws_client("s3"))
    except SinkRetryableError as error:
        # Transient: the workflow retries the chunk; its retries running out fails the execution.
        logger.warning("sink unavailable, chunk will be retried: %s", error, extra=log)
        raise
    except SinkRejectedError as error:
        logger.error("sink rejected a record: %s", error, extra={**log, "status": error.status})
        raise
    except Exception:
        logger.exception("register chunk failed", extra=log)
        raise
    logger.info("chunk registered", extra={**log, "records_sent": result["records_sent"]})
    return result
