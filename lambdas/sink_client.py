"""The sending side of the core-system contract: the keep-alive connection, and what one POST
carries in record mode (`batch_size` 1, the seed's contract) and in batch mode.

Record mode: the body is one record (a JSON object), the `Idempotency-Key` is
`chunk_format.idempotency_key` of its position in the file.

Batch mode (`sink.batch_size` N > 1): the body is a JSON array of up to N records, in file
order; the key is `batch_idempotency_key` of the file version, the batch's first record and
its record count. Batches are cut on a grid fixed by the chunk (records `chunk start + k x N`
start a batch), so a batch that is sent again after a crash or a retry always holds the same
records under the same key. The core system registers a batch atomically: all its records
(2xx) or none (4xx, optionally naming the offending record, see `rejected_offset`). docs/core-system.md
("The contract") is the owner-facing version of this.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import urllib.parse

#: A rejection's body is read for `rejected_index` only up to this size (never logged).
MAX_REJECTION_BODY_BYTES = 64 * 1024


def batch_idempotency_key(bucket: str, key: str, version_id: str, first_record: int, record_count: int) -> str:
    """Key of the batch of `record_count` records from file position `first_record` on.

    SHA-256 (hex) of `<bucket>/<key>?versionId=<version>#<first>+<count>`. The count is part of
    the key so that a key always names the same records, and so that no batch key ever equals a
    record-mode key (`...#<first>`): a tenant switched between modes never has a batch deduplicated
    against a single record that was registered before.
    """
    return hashlib.sha256(f"{bucket}/{key}?versionId={version_id}#{first_record}+{record_count}".encode()).hexdigest()


def batch_body(records: list[bytes]) -> bytes:
    """The JSON array of `records` (each already one serialized JSON object, no line ending)."""
    return b"[" + b",".join(records) + b"]"


def batch_ends_after(position_in_chunk: int, batch_size: int) -> bool:
    """Whether the record at `position_in_chunk` (0-based) is the last of its batch on the grid."""
    return (position_in_chunk + 1) % batch_size == 0


def rejected_offset(body: bytes, record_count: int) -> int | None:
    """The offset in the batch of the record a 4xx names (`{"rejected_index": i}`), if any valid one."""
    if not body or len(body) > MAX_REJECTION_BODY_BYTES:
        return None
    try:
        value = json.loads(body).get("rejected_index")
    except (ValueError, AttributeError):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < record_count:
        return value
    return None


class SinkConnection:
    """One keep-alive connection to the sink for a whole chunk.

    A TLS handshake per request would dominate the cost of a chunk. `http.client` does not
    follow redirects, which is what we want: a redirected POST would lose its body.
    """

    def __init__(self, url: str, timeout: float) -> None:
        parts = urllib.parse.urlsplit(url)
        factory = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        self._connection = factory(parts.hostname, parts.port, timeout=timeout)
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._timeout: float | None = None

    def post(self, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
        """POST; return the HTTP status and the response body (drained so the connection can be
        reused; the caller never logs it). Transport failures raise (OSError, HTTPException)."""
        if timeout != self._timeout:  # a settimeout system call per request costs ~2% at local speed
            self._connection.timeout = self._timeout = timeout
            if self._connection.sock is not None:
                self._connection.sock.settimeout(timeout)
        try:
            self._connection.request("POST", self._path, body=body, headers=headers)
            response = self._connection.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise

    def close(self) -> None:
        self._connection.close()
        self._timeout = None
