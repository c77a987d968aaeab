"""Register chunk against a real local HTTP sink and the ledger on moto: order, idempotency keys,
progress, the fence, the deadline, and the retry budget spent per fault episode."""

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
from contract import FileRef, RegisterEnv, SinkRejectedError, SinkUnavailableError, StaleExecutionError
from ledger import Ledger
from runtime import BoundLogger, get_logger

from conftest import TENANT, Context  # noqa: E402
WORK = "work"
PREFIX = "chunks/acme/evt-1/"


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


class Clock:
    """A fake clock: `sleep` advances it; the invocation's deadline is on it too."""

    def __init__(self, deadline_in: float = 600.0) -> None:
        self.now = 1_700_000_000.0
        self.deadline = self.now + deadline_in
        self.sleeps: list[float] = []

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def remaining(self) -> float:
        return self.deadline - self.now


@pytest.fixture
def work(s3: Any) -> Any:
    s3.create_bucket(Bucket=WORK)
    return s3


@pytest.fixture
def ledger(ddb: Any, ledger_table: str) -> Ledger:
    """The tenant's ledger with execution `evt-1` running the file."""
    ledger = Ledger(ddb, ledger_table, TENANT)
    file = FileRef(tenant=TENANT, event_id="evt-1", bucket="landing", key="acme/f.csv", version_id="v1", size=1,
                   etag=None, event_time="")
    ledger.claim(ledger.read(), file, "evt-1", 1_700_000_000.0)
    return ledger


def put_chunk(s3: Any, index: int, records: list[dict[str, Any]]) -> None:
    body = "".join(json.dumps(r) + "\n" for r in records).encode()
    s3.put_object(Bucket=WORK, Key=contract.chunk_key(PREFIX, index), Body=body)


def task(index: int, *, chunk_size: int = 3, version_id: str = "v1", prefix: str = PREFIX, start_record: int = 0,
         record_count: int = 100, execution_name: str = "evt-1", fault_since: float | None = None) -> dict[str, Any]:
    return {
        "tenant": TENANT,
        "bucket": "landing",
        "key": "acme/f.csv",
        "version_id": version_id,
        "execution_name": execution_name,
        "chunk_prefix": prefix,
        "chunk_size": chunk_size,
        "chunk_count": -(-record_count // chunk_size),
        "record_count": record_count,
        "chunk_index": index,
        "start_record": start_record,
        "fault_since": fault_since,
    }


def config(sink: Sink, timeout: float = 2.0, budget: float = 3600) -> RegisterEnv:
    return RegisterEnv(tenant_id=TENANT, work_bucket=WORK, ledger_table_name="ledger", sink_url=sink.url,
                       sink_timeout_seconds=timeout, sink_outage_budget_seconds=budget)


def register(work: Any, ledger: Ledger, the_task: dict[str, Any], cfg: RegisterEnv, clock: Clock | None = None) -> dict[str, Any]:
    clock = clock or Clock()
    return register_chunk.register_chunk(
        the_task, config=cfg, s3=work, ledger=ledger, log=BoundLogger(get_logger("register_chunk"), {}),
        remaining_seconds=clock.remaining, clock=clock.time, sleep=clock.sleep,
    )


def expected_key(version_id: str, record_index: int) -> str:
    return hashlib.sha256(f"landing/acme/f.csv?versionId={version_id}#{record_index}".encode()).hexdigest()


def test_records_arrive_in_order_with_their_headers_and_progress_is_recorded(work, sink, ledger):
    """GIVEN chunk 1 (chunk_size 3) WHEN registered THEN its records arrive in file order as JSON, each with
    the idempotency key of its position in the file (3, 4, 5); the chunk is done and the ledger says
    every record before 6 is acknowledged."""
    records = [{"id": "3", "name": "c"}, {"id": "4", "name": "Zoë"}, {"id": "5", "name": "e"}]
    put_chunk(work, 1, records)

    result = register(work, ledger, task(1, start_record=3), config(sink))

    assert (result["done"], result["start_record"], result["records_sent"], result["retry_after_seconds"]) == (True, 6, 3, 0)
    assert result["fault_since"] is None
    assert sink.bodies() == records
    assert sink.keys() == [expected_key("v1", i) for i in (3, 4, 5)]
    for request in sink.requests:
        assert request["path"] == "/records"
        assert request["headers"]["Content-Type"] == "application/json"
        assert request["headers"]["X-Tenant-Id"] == TENANT
    position = ledger.read()
    assert (position.next_record, position.chunk_size, position.record_count) == (6, 3, 100)


def test_the_workflows_invocation_count_comes_back_unchanged(work, sink, ledger):
    """GIVEN a task that carries the page workflow's count of the chunk's invocations (issue 9)
    WHEN registered THEN the progress carries the same count: the workflow adds 1 in its
    ResultSelector and fails the chunk at its budget, so the handler must neither drop nor change it."""
    put_chunk(work, 0, [{"id": "0"}, {"id": "1"}, {"id": "2"}])
    result = register(work, ledger, {**task(0), "invocation": 41}, config(sink))
    assert result["done"] and result["invocation"] == 41


def test_a_record_that_fails_once_is_retried_in_place_and_costs_no_budget(work, sink, ledger):
    """GIVEN every record of a 10-record chunk gets one 503 (or 429) before it is accepted
    WHEN the chunk is registered THEN it is done in one invocation, each record sent twice with the
    same key, never out of order: the budget is spent per fault episode, not per chunk."""
    put_chunk(work, 0, [{"id": i} for i in range(10)])
    sink.respond = lambda n: (503 if n % 4 == 0 else 429) if n % 2 == 0 else 200
    clock = Clock()

    result = register(work, ledger, task(0, chunk_size=10), config(sink, budget=1), clock)

    assert result["done"] is True and result["records_sent"] == 10 and result["fault_since"] is None
    assert sink.keys() == [expected_key("v1", i) for i in range(10) for _ in (0, 1)]
    assert clock.sleeps == [register_chunk.RETRY_BACKOFF_SECONDS[0]] * 10


def test_an_outage_returns_progress_then_waits_and_fails_the_file_only_past_the_budget(work, sink, ledger):
    """GIVEN the core system goes down at record 1 and stays down
    WHEN the chunk is registered THEN the first try backs off in place, then returns (not done) at
    record 1 with the outage's start and a wait; the tries after it carry the outage on, and once it
    lasts longer than the budget the file fails at record 1, with the ledger at record 1."""
    put_chunk(work, 0, [{"id": i} for i in range(3)])
    sink.respond = lambda n: 200 if n == 0 else 503
    clock = Clock()
    cfg = config(sink, budget=60)

    first = register(work, ledger, task(0), cfg, clock)

    assert (first["done"], first["start_record"], first["records_sent"]) == (False, 1, 1)
    started = first["fault_since"]
    assert started is not None and first["retry_after_seconds"] >= register_chunk.MIN_RETRY_AFTER_SECONDS
    assert ledger.read().next_record == 1

    tries = 1
    with pytest.raises(SinkUnavailableError) as failed:
        progress = first
        while True:
            clock.now += progress["retry_after_seconds"]  # the workflow's Wait state
            progress = register(work, ledger, progress, cfg, clock)
            tries += 1
            assert progress["fault_since"] == started and progress["start_record"] == 1
    assert failed.value.next_record == 1 and "longer than the outage budget (60 s)" in str(failed.value)
    assert clock.now - started >= 60 and tries > 2
    assert ledger.read().next_record == 1
    assert {json.loads(r["body"])["id"] for r in sink.requests} == {0, 1}  # never past record 1


@pytest.mark.parametrize("status", [400, 422, 302])
def test_fails_rejected_on_client_error_and_sends_nothing_after_it(work, sink, ledger, status):
    """GIVEN the sink rejects the second record (4xx, or a redirect that must not be followed)
    WHEN the chunk is registered THEN SinkRejectedError names chunk, record and status, no later record
    is sent, and the ledger keeps the rejected record as the first unacknowledged one."""
    put_chunk(work, 2, [{"id": i} for i in range(3)])
    sink.respond = lambda n: status if n == 1 else 200

    with pytest.raises(SinkRejectedError) as raised:
        register(work, ledger, task(2, start_record=6), config(sink))

    assert str(raised.value) == f"chunk 2 record 1 (file record 7): HTTP {status}"
    assert (raised.value.status, raised.value.chunk_index, raised.value.record_index) == (status, 2, 7)
    assert len(sink.requests) == 2
    assert ledger.read().next_record == 7


def test_a_refused_connection_is_a_fault_episode_not_a_failure(work, ledger):
    """GIVEN nothing listens on the sink's port WHEN the chunk is registered
    THEN the try returns with the outage noted (the workflow waits), nothing failed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    put_chunk(work, 0, [{"id": 0}])
    refused = RegisterEnv(tenant_id=TENANT, work_bucket=WORK, ledger_table_name="ledger",
                          sink_url=f"http://127.0.0.1:{port}/records", sink_timeout_seconds=1,
                          sink_outage_budget_seconds=3600)

    result = register(work, ledger, task(0), refused)

    assert result["done"] is False and result["fault_since"] is not None and result["start_record"] == 0


def test_a_hanging_core_system_times_out_per_request(work, sink, ledger):
    """GIVEN the sink never answers WHEN registered with a 0.2 s timeout THEN each try times out and the
    function returns with the outage noted instead of hanging to its own deadline."""
    put_chunk(work, 0, [{"id": 0}, {"id": 1}])
    sink.respond = lambda n: 0

    result = register(work, ledger, task(0), config(sink, timeout=0.2))

    assert result["done"] is False and result["fault_since"] is not None
    assert len(sink.requests) == len(register_chunk.RETRY_BACKOFF_SECONDS) + 1


def test_returns_before_the_deadline_and_the_next_try_continues_at_the_next_record(work, sink, ledger):
    """GIVEN an invocation with too little time left for the third record
    WHEN the chunk is registered THEN it returns (not done) after two records, and the next try sends
    the third only: no record is sent twice, none skipped."""
    put_chunk(work, 0, [{"id": i} for i in range(3)])
    clock = Clock(deadline_in=8)

    class Slow:
        def __init__(self) -> None:
            self.calls = 0

        def __call__(self, n: int) -> int:
            clock.now += 3  # each record takes 3 s of the invocation's 8
            return 200

    sink.respond = Slow()
    cfg = config(sink, timeout=2)

    first = register(work, ledger, task(0), cfg, clock)
    assert (first["done"], first["start_record"], first["retry_after_seconds"]) == (False, 2, 0)

    second = register(work, ledger, first, cfg, Clock())
    assert (second["done"], second["start_record"]) == (True, 3)
    assert [json.loads(r["body"])["id"] for r in sink.requests] == [0, 1, 2]


def test_a_retried_invocation_continues_at_the_ledgers_first_unacknowledged_record(work, sink, ledger):
    """GIVEN an invocation that acknowledged records 0-1 and then died (timeout: its output is lost)
    WHEN the workflow retries the same task THEN it starts at record 2, from the ledger."""
    put_chunk(work, 0, [{"id": i} for i in range(3)])
    ledger.record_progress("evt-1", 2)

    result = register(work, ledger, task(0), config(sink))

    assert result["done"] is True
    assert [json.loads(r["body"])["id"] for r in sink.requests] == [2]


def test_an_execution_that_is_not_the_current_one_is_refused_before_it_sends(work, sink, ledger):
    """GIVEN a hand-made redrive or start of an old execution WHEN its register runs THEN it is refused."""
    put_chunk(work, 0, [{"id": 0}])

    with pytest.raises(StaleExecutionError, match="not the tenant's current running execution"):
        register(work, ledger, task(0, execution_name="evt-0"), config(sink))
    assert sink.requests == []

    ledger.record_close("evt-1", "FAILED", halt_on_failure=True, now=1_700_000_001.0)
    with pytest.raises(StaleExecutionError):  # a redrive of the failed execution itself
        register(work, ledger, task(0), config(sink))
    assert sink.requests == []


def test_fails_when_chunk_prefix_belongs_to_another_tenant(work, sink, ledger):
    """GIVEN a chunk_prefix outside the tenant's folder WHEN registered THEN refused and nothing is sent."""
    with pytest.raises(contract.KeyOutsidePrefixError, match="'chunks/beta/evt-1/' is outside tenant 'acme'"):
        register(work, ledger, task(0, prefix="chunks/beta/evt-1/"), config(sink))
    assert sink.requests == []


def test_fails_when_chunk_holds_more_than_chunk_size_records(work, sink, ledger):
    """GIVEN a chunk with more records than chunk_size WHEN registered THEN it stops before reusing the next
    chunk's idempotency keys."""
    put_chunk(work, 0, [{"id": i} for i in range(3)])

    with pytest.raises(ValueError, match="more than chunk_size=2"):
        register(work, ledger, task(0, chunk_size=2), config(sink))
    assert len(sink.requests) == 2


@pytest.fixture
def handler_env(sink: Sink, ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in contract.environment(config(sink, timeout=2, budget=1)).items():
        monkeypatch.setenv(name, value)


def test_handler_logs_rejection_at_error_without_record_or_response(work, sink, handler_env, logs):
    """GIVEN the sink rejects a record WHEN the handler runs THEN an ERROR log names chunk and status,
    and neither the record nor the response body appears in any log."""
    put_chunk(work, 0, [{"secret": "TOPSECRET"}])
    sink.respond = lambda n: 400

    with pytest.raises(SinkRejectedError):
        register_chunk.handler(task(0), Context())

    (error,) = logs.errors()
    assert (error.chunk_index, error.status) == (0, 400)
    assert "TOPSECRET" not in logs.text()


def test_handler_logs_a_passing_outage_below_error(work, sink, handler_env, logs, monkeypatch):
    """GIVEN a transient 503 WHEN the handler runs THEN it returns the progress to wait on and logs
    WARNING, not ERROR (only an outage past the budget is a fault)."""
    monkeypatch.setattr(register_chunk, "RETRY_BACKOFF_SECONDS", ())
    put_chunk(work, 0, [{"id": 0}])
    sink.respond = lambda n: 503

    result = register_chunk.handler(task(0), Context())

    assert result["done"] is False
    assert logs.errors() == []
    assert len(logs.at(logging.WARNING)) == 1


def test_handler_returns_progress(work, sink, handler_env, logs):
    """GIVEN a chunk of two records WHEN the handler runs THEN both are sent and the progress returned."""
    put_chunk(work, 4, [{"id": 0}, {"id": 1}])
    result = register_chunk.handler(task(4, chunk_size=2, start_record=8), Context())
    assert (result["done"], result["records_sent"], result["start_record"]) == (True, 2, 10)
    assert sink.keys() == [expected_key("v1", 8), expected_key("v1", 9)]


def test_fails_when_sink_url_is_not_http(handler_env, monkeypatch):
    """GIVEN SINK_URL=file:///etc/passwd WHEN the handler starts THEN ConfigError, nothing is read."""
    monkeypatch.setenv(contract.env_name("sink_url"), "file:///etc/passwd")
    with pytest.raises(contract.ConfigError, match="SINK_URL='file:///etc/passwd' must be an http"):
        register_chunk.handler(task(0), Context())


def test_a_chunk_reuses_one_connection_to_the_core_system(work, sink, ledger):
    """GIVEN a chunk of 3 records and a keep-alive core system
    WHEN the chunk is registered
    THEN all records travel over one connection (no handshake per record)."""
    put_chunk(work, 0, [{"n": 1}, {"n": 2}, {"n": 3}])
    register(work, ledger, task(0), config(sink))
    assert len(sink.requests) == 3
    assert len({r["client"] for r in sink.requests}) == 1


# --- metrics -------------------------------------------------------------------------------------


def emf_records(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """The EMF records printed since the last call."""
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    return [line for line in lines if "_aws" in line]


def test_publishes_records_sent_and_sink_errors_once_per_invocation(work, sink, ledger, capsys):
    """GIVEN every record of a 4-record chunk gets one 503 first WHEN registered THEN one EMF record
    says 4 records sent and 4 sink errors, with the tenant dimension."""
    put_chunk(work, 0, [{"id": i} for i in range(4)])
    sink.respond = lambda n: 503 if n % 2 == 0 else 200

    register(work, ledger, task(0, chunk_size=4), config(sink))

    (record,) = emf_records(capsys)
    assert (record["RecordsSent"], record["SinkErrors"], record["Tenant"]) == (4, 4, TENANT)
    (directive,) = record["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "OrderedIngest"
    assert directive["Metrics"] == [{"Name": "RecordsSent", "Unit": "Count"}, {"Name": "SinkErrors", "Unit": "Count"}]


def test_publishes_sink_errors_when_the_outage_fails_the_file(work, sink, ledger, capsys):
    """GIVEN the core system is down for longer than the budget WHEN the try that fails the file runs
    THEN its metrics are still published (errors counted, nothing sent): a long outage is visible as
    errors, not only as WARNING lines."""
    put_chunk(work, 0, [{"id": i} for i in range(3)])
    sink.respond = lambda n: 503
    clock = Clock()
    progress = task(0)
    progress["fault_since"] = clock.now - 120

    with pytest.raises(SinkUnavailableError):
        register(work, ledger, progress, config(sink, budget=60), clock)

    (record,) = emf_records(capsys)
    assert (record["RecordsSent"], record["SinkErrors"]) == (0, 1)


def test_publishes_zero_sink_errors_for_a_clean_chunk(work, sink, ledger, capsys):
    put_chunk(work, 0, [{"id": i} for i in range(3)])

    register(work, ledger, task(0), config(sink))

    (record,) = emf_records(capsys)
    assert (record["RecordsSent"], record["SinkErrors"]) == (3, 0)
