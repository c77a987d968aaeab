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
import ssl
import time
import urllib.parse
from collections.abc import Callable

#: A rejection's body is read for `rejected_index` only up to this size (never logged).
MAX_REJECTION_BODY_BYTES = 64 * 1024
#: A kept connection older than this is closed before the next request, which opens a new one:
#: its host name is resolved again, so a core system that moved (a DNS failover to a standby, a
#: blue/green switch) gets the records within this time, not only once the old address stops
#: answering. AWS's failover guidance: cache DNS lookups for no more than 60 seconds. The cost
#: is a handshake a minute (the TLS session resumed), not one a chunk.
MAX_CONNECTION_AGE_SECONDS = 60.0


def batch_idempotency_key(
    bucket: str, key: str, version_id: str, first_record: int, record_count: int
) -> str:
    """Key of the batch of `record_count` records from file position `first_record` on.

    SHA-256 (hex) of `<bucket>/<key>?versionId=<version>#<first>+<count>`. The count is part of
    the key so that a key always names the same records, and so that no batch key ever equals a
    record-mode key (`...#<first>`): a tenant switched between modes never has a batch deduplicated
    against a single record that was registered before.
    """
    return hashlib.sha256(
        f"{bucket}/{key}?versionId={version_id}#{first_record}+{record_count}".encode()
    ).hexdigest()


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


#: What a kept connection raises, before the core system's answer began, when the far side
#: closed it while it was idle (its keep-alive timeout, a load balancer's idle cut, a frozen
#: execution environment thawed later): the request is sent again, at once, on a new connection.
#: `http.client.RemoteDisconnected` (the far side's end of stream where the status line should
#: be) is a ConnectionResetError; over TLS the same close surfaces as `ssl.SSLEOFError` (the TCP
#: connection ended without TLS's close_notify) or `ssl.SSLZeroReturnError` (with it).
CLOSED_CONNECTION_ERRORS = (
    BrokenPipeError,
    ConnectionResetError,
    ConnectionAbortedError,
    ssl.SSLEOFError,
    ssl.SSLZeroReturnError,
)


class _HTTPSConnection(http.client.HTTPSConnection):
    """Resumes the TLS session of the connection before it: a connection opened again after the
    far side closed the kept one costs an abbreviated handshake, not a full one."""

    tls_session: ssl.SSLSession | None = None
    tls_context: ssl.SSLContext  # set by `_Kept` once made, before the first `connect()`

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)  # the TCP connection (no proxy tunnel: none is configured)
        self.sock = self.tls_context.wrap_socket(
            self.sock, server_hostname=self.host, session=self.tls_session
        )

    def keep_session(self) -> None:
        """Remember the session of the current socket (TLS 1.3 tickets arrive with the first answer)."""
        session = self.sock.session
        if session is not None:
            self.tls_session = session


def _default_tls_context() -> ssl.SSLContext:
    """What `http.client.HTTPSConnection` would make: the system's CAs, HTTP/1.1 by ALPN."""
    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    return context


class _Kept:
    """One pooled connection (created unconnected: `http.client` connects on the first request)."""

    def __init__(self, url: str, tls_context: ssl.SSLContext | None) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme == "https":
            context = tls_context or _default_tls_context()
            connection = _HTTPSConnection(
                parts.hostname,  # type: ignore[arg-type]  # None for a URL without a host: http.client raises, as it did
                parts.port,
                context=context,
            )
            connection.tls_context = context
            self.connection: http.client.HTTPConnection = connection
        else:
            self.connection = http.client.HTTPConnection(
                parts.hostname,  # type: ignore[arg-type]  # None for a URL without a host: http.client raises, as it did
                parts.port,
            )
        self.timeout: float | None = None  # the current socket's
        self.opened_at = (
            0.0  # when the current socket was opened (the clock of the SinkConnection that opened it)
        )


class ConnectionPool:
    """The register function's connections to the core system, one per scheme, host and port,
    kept as long as the execution environment stays warm (module-level `POOL`): a chunk costs
    no TCP or TLS handshake while the far side keeps the connection open."""

    def __init__(self, tls_context: ssl.SSLContext | None = None) -> None:
        self.tls_context = tls_context
        self._kept: dict[tuple[str, str | None, int | None], _Kept] = {}

    def kept(self, url: str) -> _Kept:
        parts = urllib.parse.urlsplit(url)
        origin = (parts.scheme, parts.hostname, parts.port)
        kept = self._kept.get(origin)
        if kept is None:
            kept = self._kept[origin] = _Kept(url, self.tls_context)
        return kept

    def clear(self) -> None:
        """Close every connection (a test's cold start)."""
        for kept in self._kept.values():
            kept.connection.close()
        self._kept.clear()


POOL = ConnectionPool()


class SinkConnection:
    """One invocation's use of the kept connection to the sink (`POOL`), and what it cost:
    `opened` (new connections: TCP, and TLS, handshakes; a kept connection older than
    `MAX_CONNECTION_AGE_SECONDS` is replaced between two requests, counted here) and `reconnects`
    (kept connections found closed by the far side, each followed by the same request on a new one).

    `http.client` does not follow redirects, which is what we want: a redirected POST would lose its body.
    """

    def __init__(
        self, url: str, *, pool: ConnectionPool | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._kept = (pool or POOL).kept(url)
        parts = urllib.parse.urlsplit(url)
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._clock = clock
        self.opened = 0
        self.reconnects = 0
        self._answering = False  # the answer to the request at hand has begun (its status line came)

    def post(
        self,
        body: bytes,
        headers: dict[str, str],
        timeout: float,
        *,
        meanwhile: Callable[[], None] | None = None,
    ) -> tuple[int, bytes]:
        """POST; return the HTTP status and the response body (drained so the connection can be
        reused; the caller never logs it). Transport failures raise (OSError, HTTPException).

        `meanwhile` runs once the request is written, before the answer is read: work of the
        caller's own (reading and encoding the next request) done while the core system answers,
        not after. It runs after each write (again after a reconnect): it must not raise, and
        must do its work only once.

        A kept connection that turns out closed before the answer began is opened again and the
        same request (the same body, headers and idempotency key) sent once more, within what is
        left of `timeout`: the far side may or may not have read it, and the key makes that safe."""
        kept = self._kept
        started = self._clock()
        if kept.connection.sock is not None and started - kept.opened_at >= MAX_CONNECTION_AGE_SECONDS:
            kept.connection.close()  # between two requests: nothing is in flight on it
        reused = kept.connection.sock is not None
        try:
            return self._post(body, headers, timeout, meanwhile, started)
        except CLOSED_CONNECTION_ERRORS:
            failed = self._clock()
            left = timeout - (failed - started)
            if not reused or self._answering or left <= 0:
                raise
        self.reconnects += 1
        return self._post(body, headers, left, meanwhile, failed)

    def _post(
        self,
        body: bytes,
        headers: dict[str, str],
        timeout: float,
        meanwhile: Callable[[], None] | None,
        now: float,
    ) -> tuple[int, bytes]:
        kept, connection = self._kept, self._kept.connection
        new = connection.sock is None  # http.client connects in `request`
        if new:
            self.opened += 1
            kept.timeout = None
            kept.opened_at = now
        if timeout != kept.timeout:  # a settimeout system call only when the timeout changes, not per request
            connection.timeout = kept.timeout = timeout
            if connection.sock is not None:
                connection.sock.settimeout(timeout)
        self._answering = False
        try:
            connection.request("POST", self._path, body=body, headers=headers)
            if meanwhile is not None:
                meanwhile()
            response = connection.getresponse()
            self._answering = True
            answer = response.read()
        except BaseException:
            self.close()
            raise
        if new and isinstance(connection, _HTTPSConnection):
            connection.keep_session()
        return response.status, answer

    def close(self) -> None:
        """Drop the connection (the next request opens a new one)."""
        self._kept.connection.close()
