"""Register chunk: POST one chunk's records, in order, to the core system (the sink).

Each record carries an `Idempotency-Key` derived from the object version and the record's
position in the file, so resending a chunk after a retry or a redrive registers nothing
twice. The first failure stops the chunk: later records are never sent before it.
"""

from __future__ import annotations

import http.client
import urllib.parse
from typing import Any

from chunk_format import idempotency_key, iter_lines
from contract import (
    ChunkResult,
    ChunkTask,
    KeyOutsidePrefixError,
    RegisterEnv,
    SinkRejectedError,
    SinkRetryableError,
    chunk_key,
    work_prefix,
)
from runtime import BoundLogger, aws_client, lambda_handler, pick


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


def register_chunk(task: ChunkTask, *, config: RegisterEnv, s3: Any) -> ChunkResult:
    """Send every record of chunk `task["chunk_index"]` in order; return the count sent.

    `s3` is a boto3 S3 client for the work bucket.
    """
    chunk_index, chunk_size = int(task["chunk_index"]), int(task["chunk_size"])
    bucket, key, version_id = task["bucket"], task["key"], task["version_id"]
    chunk_prefix = task["chunk_prefix"]
    if chunk_index < 0 or chunk_size < 1:
        raise ValueError(f"chunk_index {chunk_index} must be >= 0 and chunk_size {chunk_size} >= 1")
    if not chunk_prefix.startswith(work_prefix(config.tenant_id)):
        raise KeyOutsidePrefixError(
            f"chunk_prefix {chunk_prefix!r} is outside tenant {config.tenant_id!r}'s work prefix"
        )

    body = s3.get_object(Bucket=config.work_bucket, Key=chunk_key(chunk_prefix, chunk_index))["Body"]
    sink = _SinkConnection(config.sink_url, config.sink_timeout_seconds)
    try:
        return _send_records(iter_lines(body), sink, task, config)
    finally:
        sink.close()


def _send_records(lines: Any, sink: _SinkConnection, task: ChunkTask, config: RegisterEnv) -> ChunkResult:
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
    return ChunkResult(chunk_index=chunk_index, records_sent=sent)


@lambda_handler(
    "register_chunk",
    RegisterEnv,
    log_fields=lambda event: pick(event, "key", "version_id", "chunk_prefix", "chunk_index"),
)
def handler(event: ChunkTask, config: RegisterEnv, log: BoundLogger) -> ChunkResult:
    """Step Functions Map item entry point (`ChunkTask` in, `ChunkResult` out)."""
    result = register_chunk(event, config=config, s3=aws_client("s3"))
    log.info("chunk registered", extra={"records_sent": result["records_sent"]})
    return result
