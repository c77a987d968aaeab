"""Register chunk against a real local HTTP sink: order, idempotency keys, retryable vs rejected."""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import contract
import register_chunk
from contract import RegisterEnv, SinkRejectedError, SinkRetryableError

TENANT = "acme"
WORK = "work"
PREFIX = "acme/evt-1/"


@dataclass
class Sink:
    """The core system stand-in: records every request, answers `respond(request_number)`."""

    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    respond: Callable[[int], int] = lambda n: 200
    release: threading.Event = field(default_factory=threading.Event)

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r["body"]) for r in self.requests]

    def keys(self) -> list[str]:
        return [r["headers"]["Idempotency-Key"] for r in self.requests]


@pytest.fixture
def sink() -> Iterator[Sink]:
    state = Sink(url="")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like a real core system

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.requests.append(
                {"path": self.path, "headers": dict(self.headers), "body": body, "client": self.client_address}
            )
            status = state.respond(len(state.requests) - 1)
            if status == 0:  # hang until the test ends: a timeout without sleeping
                state.release.wait(5)
                return
            self.send_response(status)
            if 300 <= status < 400:
                self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", "12")
            self.end_headers()
            self.wfile.write(b"TOPSECRETRSP")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/records"
    yield state
    state.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def work(s3: Any) -> Any:
    s3.create_bucket(Bucket=WORK)
    return s3


def put_chunk(s3: Any, index: int, records: list[dict[str, Any]]) -> None:
    body = "".join(json.dumps(r) + "\n" for r in records).encode()
    s3.put_object(Bucket=WORK, Key=contract.chunk_key(PREFIX, index), Body=body)


def task(index: int, *, chunk_size: int = 3, version_id: str = "v1", prefix: str = PREFIX) -> dict[str, Any]:
    return {
        "tenant": TENANT,
        "bucket": "landing",
        "key": "acme/f.csv",
        "version_id": version_id,
        "chunk_prefix": prefix,
        "chunk_size": chunk_size,
        "chunk_index": index,
    }


def config(sink: Sink, timeout: float = 2.0) -> RegisterEnv:
    return RegisterEnv(tenant_id=TENANT, work_bucket=WORK, sink_url=sink.url, sink_timeout_seconds=timeout)


def expected_key(version_id: str, record_index: int) -> str:
    return hashlib.sha256(f"landing/acme/f.csv?versionId={version_id}#{record_index}".encode()).hexdigest()


def test_records_arrive_in_order_with_their_headers(work, sink):
    """GIVEN chunk 1 (chunk_size 3) WHEN registered THEN its records arrive in file order as JSON, each with
    the idempotency key of its position in the file (3, 4, 5) and the tenant header."""
    records = [{"id": "3", "name": "c"}, {"id": "4", "name": "Zoë"}, {"id": "5", "name": "e"}]
    put_chunk(work, 1, records)

    result = register_chunk.register_chunk(task(1), config=config(sink), s3=work)

    assert result == {"chunk_index": 1, "records_sent": 3}
    assert sink.bodies() == records
    assert sink.keys() == [expected_key("v1", i) for i in (3, 4, 5)]
    for request in sink.requests:
        assert request["path"] == "/records"
        assert request["headers"]["Content-Type"] == "application/json"
        assert request["headers"]["X-Tenant-Id"] == TENANT


def test_idempotency_keys_are_distinct_per_record_and_version_and_stable_across_retries(work, sink):
    """GIVEN one chunk WHEN registered for version v1 twice and for v2 once THEN the retry repeats v1's keys
    exactly while every record of every version has its own key."""
    put_chunk(work, 0, [{"id": i} for i in range(3)])

    for version_id in ("v1", "v1", "v2"):
        register_chunk.register_chunk(task(0, version_id=version_id), config=config(sink), s3=work)

    keys = sink.keys()
    assert keys[0:3] == keys[3:6]
    assert len(set(keys[0:3] + keys[6:9])) == 6


@pytest.mark.parametrize("status", [503, 500, 429])
def test_fails_retryably_when_sink_is_unavailable_and_a_retry_resends_with_the_same_keys(work, sink, status):
    """GIVEN the sink answers HTTP <status> to the second record once WHEN the chunk is registered
    THEN SinkRetryableError names chunk/record/status, the third record is not sent,
    and the retried chunk resends every record with the same keys."""
    put_chunk(work, 2, [{"id": i} for i in range(3)])
    sink.respond = lambda n: status if n == 1 else 200

    with pytest.raises(SinkRetryableError) as raised:
        register_chunk.register_chunk(task(2), config=config(sink), s3=work)
    assert str(raised.value) == f"chunk 2 record 1 (file record 7): HTTP {status}"
    assert sink.bodies() == [{"id": 0}, {"id": 1}]

    assert register_chunk.register_chunk(task(2), config=config(sink), s3=work)["records_sent"] == 3
    assert sink.keys()[2:] == [expected_key("v1", i) for i in (6, 7, 8)]
    assert sink.keys()[:2] == sink.keys()[2:4]


@pytest.mark.parametrize("status", [400, 422, 302])
def test_fails_rejected_on_client_error_and_sends_nothing_after_it(work, sink, status):
    """GIVEN the sink rejects the second record (4xx, or a redirect that must not be followed)
    WHEN the chunk is registered
    THEN SinkRejectedError names chunk, record and status, and no later record is sent."""
    put_chunk(work, 2, [{"id": i} for i in range(3)])
    sink.respond = lambda n: status if n == 1 else 200

    with pytest.raises(SinkRejectedError) as raised:
        register_chunk.register_chunk(task(2), config=config(sink), s3=work)

    assert str(raised.value) == f"chunk 2 record 1 (file record 7): HTTP {status}"
    assert (raised.value.status, raised.value.chunk_index, raised.value.record_index) == (status, 2, 7)
    assert len(sink.requests) == 2


def test_fails_retryably_when_connection_is_refused(work):
    """GIVEN nothing listens on the sink's port WHEN the chunk is registered THEN SinkRetryableError."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    put_chunk(work, 0, [{"id": 0}])
    refused = RegisterEnv(
        tenant_id=TENANT,
        work_bucket=WORK,
        sink_url=f"http://127.0.0.1:{port}/records",
        sink_timeout_seconds=1,
    )

    expected = r"^chunk 0 record 0 \(file record 0\): connection failed \(ConnectionRefusedError\)$"
    with pytest.raises(SinkRetryableError, match=expected):
        register_chunk.register_chunk(task(0), config=refused, s3=work)


def test_fails_retryably_when_sink_times_out(work, sink):
    """GIVEN the sink never answers WHEN the chunk is registered with a 0.2 s timeout
    THEN SinkRetryableError."""
    put_chunk(work, 0, [{"id": 0}, {"id": 1}])
    sink.respond = lambda n: 0

    expected = r"^chunk 0 record 0 \(file record 0\): timed out after 0.2s$"
    with pytest.raises(SinkRetryableError, match=expected):
        register_chunk.register_chunk(task(0), config=config(sink, timeout=0.2), s3=work)
    assert len(sink.requests) == 1


def test_fails_when_chunk_prefix_belongs_to_another_tenant(work, sink):
    """GIVEN a chunk_prefix outside the tenant's folder WHEN registered THEN refused and nothing is sent."""
    with pytest.raises(contract.KeyOutsidePrefixError, match="'beta/evt-1/' is outside tenant 'acme'"):
        register_chunk.register_chunk(task(0, prefix="beta/evt-1/"), config=config(sink), s3=work)
    assert sink.requests == []


def test_fails_when_chunk_holds_more_than_chunk_size_records(work, sink):
    """GIVEN a chunk with more records than chunk_size WHEN registered THEN it stops before reusing the next
    chunk's idempotency keys."""
    put_chunk(work, 0, [{"id": i} for i in range(3)])

    with pytest.raises(ValueError, match="more than chunk_size=2"):
        register_chunk.register_chunk(task(0, chunk_size=2), config=config(sink), s3=work)
    assert len(sink.requests) == 2


@pytest.fixture
def handler_env(sink: Sink, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in contract.environment(config(sink, timeout=2)).items():
        monkeypatch.setenv(name, value)


def test_handler_logs_rejection_at_error_without_record_or_response(work, sink, handler_env, logs):
    """GIVEN the sink rejects a record WHEN the handler runs THEN an ERROR log names chunk and status,
    and neither the record nor the response body appears in any log."""
    put_chunk(work, 0, [{"secret": "TOPSECRET"}])
    sink.respond = lambda n: 400

    with pytest.raises(SinkRejectedError):
        register_chunk.handler(task(0), None)

    (error,) = logs.errors()
    assert (error.chunk_index, error.status) == (0, 400)
    assert "TOPSECRET" not in logs.text()


def test_handler_logs_retryable_failure_below_error(work, sink, handler_env, logs):
    """GIVEN a transient 503 WHEN the handler runs
    THEN it raises SinkRetryableError and logs WARNING, not ERROR
    (the workflow retries; only exhausted retries are a fault)."""
    put_chunk(work, 0, [{"id": 0}])
    sink.respond = lambda n: 503

    with pytest.raises(SinkRetryableError):
        register_chunk.handler(task(0), None)

    assert logs.errors() == []
    assert len(logs.at(logging.WARNING)) == 1


def test_handler_returns_count(work, sink, handler_env, logs):
    """GIVEN a chunk of two records WHEN the handler runs THEN both are sent and the count returned."""
    put_chunk(work, 4, [{"id": 0}, {"id": 1}])
    assert register_chunk.handler(task(4, chunk_size=2), None) == {"chunk_index": 4, "records_sent": 2}
    assert sink.keys() == [expected_key("v1", 8), expected_key("v1", 9)]


def test_fails_when_sink_url_is_not_http(handler_env, monkeypatch):
    """GIVEN SINK_URL=file:///etc/passwd WHEN the handler starts THEN ConfigError, nothing is read."""
    monkeypatch.setenv(contract.env_name("sink_url"), "file:///etc/passwd")
    with pytest.raises(contract.ConfigError, match="SINK_URL='file:///etc/passwd' must be an http"):
        register_chunk.handler(task(0), None)


def test_a_chunk_reuses_one_connection_to_the_core_system(work, sink):
    """GIVEN a chunk of 3 records and a keep-alive core system
    WHEN the chunk is registered
    THEN all records travel over one connection (no handshake per record)."""
    put_chunk(work, 0, [{"n": 1}, {"n": 2}, {"n": 3}])
    register_chunk.register_chunk(task(0), config=config(sink), s3=work)
    assert len(sink.requests) == 3
    assert len({r["client"] for r in sink.requests}) == 1
