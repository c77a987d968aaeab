"""Register chunk against a real local HTTP sink and the ledger on moto: order, idempotency keys,
progress, the fence, the deadline, and the retry budget spent per fault episode."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import random
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from lambdas import chunk_format, contract, register_chunk, sink_client, split
from lambdas.contract import (
    FileRef,
    RegisterEnv,
    SinkRejectedError,
    SinkUnavailableError,
    StaleExecutionError,
    environment,
    from_env,
)
from lambdas.ledger import Ledger, Position
from lambdas.runtime import BoundLogger, get_logger
from tests.handlers import support
from tests.handlers.support import TENANT, Context

#: `Sink.respond`: take the request (it counts as received), close the connection without answering.
HANG_UP = -1
WORK = "work"
LANDING = "landing"
KEY = "acme/f.csv"
PREFIX = "chunks/acme/evt-1/"


@dataclass
class Sink:
    """The core system stand-in: records every request, answers `respond(request_number)` (0:
    never; HANG_UP: takes the request, then closes the connection without an answer), and closes
    the connection after answering when `hang_up_after(request_number)` says so."""

    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    respond: Callable[[int], int] = lambda n: 200
    hang_up_after: Callable[[int], bool] = lambda n: False
    release: threading.Event = field(default_factory=threading.Event)
    answer: bytes = b"TOPSECRETRSP"  # the response body (never logged)
    sockets: list[socket.socket] = field(default_factory=list)  # every connection it accepted

    @property
    def connections(self) -> int:
        return len(self.sockets)

    def close_idle(self) -> None:
        """Close every connection, as a keep-alive timeout does to an idle one (call it between requests)."""
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r["body"]) for r in self.requests]

    def keys(self) -> list[str]:
        return [r["headers"]["Idempotency-Key"] for r in self.requests]


@pytest.fixture
def sink() -> Iterator[Sink]:
    state = Sink(url="")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like a real core system
        disable_nagle_algorithm = True  # else each answer's body waits ~40 ms for a delayed ACK

        def setup(self) -> None:
            super().setup()
            state.sockets.append(self.connection)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.requests.append(
                {
                    "path": self.path,
                    "headers": dict(self.headers),
                    "body": body,
                    "client": self.client_address,
                }
            )
            number = len(state.requests) - 1
            status = state.respond(number)
            if status == 0:  # hang until the test ends: a timeout without sleeping
                state.release.wait(5)
                return
            if status == HANG_UP:
                self.close_connection = True
                return
            self.close_connection = state.hang_up_after(
                number
            )  # no `Connection: close`: the client finds out
            self.send_response(status)
            if 300 <= status < 400:
                self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", str(len(state.answer)))
            self.end_headers()
            self.wfile.write(state.answer)

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


#: The landing object version the test put last (moto makes up version ids).
LANDED: dict[str, str] = {}


@pytest.fixture
def work(s3: Any) -> Any:
    """The work bucket and the versioned landing bucket Register reads its chunks from."""
    s3.create_bucket(Bucket=WORK)
    s3.create_bucket(Bucket=LANDING)
    s3.put_bucket_versioning(Bucket=LANDING, VersioningConfiguration={"Status": "Enabled"})
    LANDED.clear()
    LANDED["version_id"] = "v-none"
    return s3


def put_file(s3: Any, content: bytes, *, fmt: str = "jsonl", chunk_size: int = 3) -> str:
    """Upload `content` as acme/f.csv and split it as the workflow would (execution evt-1): its
    chunk index and manifest under PREFIX. Returns the object version (also the tasks' default)."""
    version_id = s3.put_object(Bucket=LANDING, Key=KEY, Body=content)["VersionId"]
    split_version(s3, version_id, fmt=fmt, chunk_size=chunk_size)
    LANDED["version_id"] = version_id
    return version_id


def split_version(s3: Any, version_id: str, *, fmt: str = "jsonl", chunk_size: int = 3) -> None:
    """Split that version of acme/f.csv as execution evt-1 (its index and manifest under PREFIX)."""
    env = contract.SplitEnv(
        tenant_id=TENANT,
        format=fmt,
        chunk_size=chunk_size,
        work_bucket=WORK,
        landing_prefix="acme/",
        ledger_table_name="ledger",
        duplicate_files="process",
        max_chunks=10**9,
    )
    split.split_file(
        {
            "tenant": TENANT,
            "event_id": "evt-1",
            "bucket": LANDING,
            "key": KEY,
            "version_id": version_id,
            "start_record": 0,
        },
        config=env,
        s3=s3,
    )  # type: ignore[typeddict-item]  # a partial task on purpose


@pytest.fixture(autouse=True)
def cold_function() -> Iterator[None]:
    """Each test starts as a cold function: nothing kept from another test's file."""
    register_chunk._MANIFESTS.clear()
    register_chunk._INDEX_BLOCKS.clear()
    sink_client.POOL.clear()
    yield
    sink_client.POOL.clear()


class CountingS3:
    """The S3 client, counting GETs by bucket."""

    def __init__(self, s3: Any) -> None:
        self._s3, self.gets = s3, []

    def get_object(self, **kwargs: Any) -> Any:
        self.gets.append(kwargs["Bucket"])
        return self._s3.get_object(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._s3, name)


@pytest.fixture
def ledger(ddb: Any, ledger_table: str) -> Ledger:
    """The tenant's ledger with execution `evt-1` running the file."""
    ledger = Ledger(ddb, ledger_table, TENANT)
    file = FileRef(
        tenant=TENANT,
        event_id="evt-1",
        bucket="landing",
        key="acme/f.csv",
        version_id="v1",
        size=1,
        etag=None,
        event_time="",
    )
    ledger.claim(ledger.read(), file, "evt-1", 1_700_000_000.0)
    return ledger


def put_chunk(s3: Any, index: int, records: list[dict[str, Any]], *, chunk_size: int = 3) -> str:
    """A file whose chunk `index` holds `records` (earlier chunks hold filler records)."""
    filler = [{"filler": n} for n in range(index * chunk_size)]
    return put_file(
        s3, "".join(json.dumps(r) + "\n" for r in [*filler, *records]).encode(), chunk_size=chunk_size
    )


def task(
    index: int,
    *,
    chunk_size: int = 3,
    version_id: str | None = None,
    prefix: str = PREFIX,
    start_record: int = 0,
    record_count: int = 100,
    execution_name: str = "evt-1",
    fault_since: float | None = None,
    key: str = "acme/f.csv",
) -> dict[str, Any]:
    return {
        "tenant": TENANT,
        "bucket": LANDING,
        "key": key,
        "version_id": version_id or LANDED["version_id"],
        "execution_name": execution_name,
        "chunk_prefix": prefix,
        "chunk_size": chunk_size,
        "chunk_count": -(-record_count // chunk_size),
        "record_count": record_count,
        "chunk_index": index,
        "start_record": start_record,
        "fault_since": fault_since,
    }


def config(sink: Sink, timeout: float = 2.0, budget: float = 3600, batch_size: int = 1) -> RegisterEnv:
    return RegisterEnv(
        tenant_id=TENANT,
        work_bucket=WORK,
        ledger_table_name="ledger",
        sink_url=sink.url,
        sink_timeout_seconds=timeout,
        sink_outage_budget_seconds=budget,
        landing_prefix="acme/",
        sink_batch_size=batch_size,
    )


def register(
    work: Any,
    ledger: Ledger,
    the_task: dict[str, Any],
    cfg: RegisterEnv,
    clock: Clock | None = None,
    auth: Any = None,
) -> dict[str, Any]:
    clock = clock or Clock()
    return register_chunk.register_chunk(
        the_task,
        config=cfg,
        s3=work,
        ledger=ledger,
        log=BoundLogger(get_logger("register_chunk"), {}),
        remaining_seconds=clock.remaining,
        clock=clock.time,
        sleep=clock.sleep,
        auth=auth,
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

    assert (
        result["done"],
        result["start_record"],
        result["records_sent"],
        result["retry_after_seconds"],
    ) == (True, 6, 3, 0)
    assert result["fault_since"] is None
    assert sink.bodies() == records
    assert sink.keys() == [expected_key(LANDED["version_id"], i) for i in (3, 4, 5)]
    for request in sink.requests:
        assert request["path"] == "/records"
        assert request["headers"]["Content-Type"] == "application/json"
        assert request["headers"]["X-Tenant-Id"] == TENANT
    position = ledger.read()
    assert (position.next_record, position.chunk_size, position.record_count) == (6, 3, 100)


def test_the_workflows_invocation_count_comes_back_unchanged(work, sink, ledger):
    """GIVEN a task that carries the page workflow's count of the chunk's invocations
    WHEN registered THEN the progress carries the same count: the workflow adds 1 in its
    ResultSelector and fails the chunk at its budget, so the handler must neither drop nor change it."""
    put_chunk(work, 0, [{"id": "0"}, {"id": "1"}, {"id": "2"}])
    result = register(work, ledger, {**task(0), "invocation": 41}, config(sink))
    assert result["done"] and result["invocation"] == 41


def test_a_record_that_fails_once_is_retried_in_place_and_costs_no_budget(work, sink, ledger):
    """GIVEN every record of a 10-record chunk gets one 503 (or 429) before it is accepted
    WHEN the chunk is registered THEN it is done in one invocation, each record sent twice with the
    same key, never out of order: the budget is spent per fault episode, not per chunk."""
    put_chunk(work, 0, [{"id": i} for i in range(10)], chunk_size=10)
    sink.respond = lambda n: (503 if n % 4 == 0 else 429) if n % 2 == 0 else 200
    clock = Clock()

    result = register(work, ledger, task(0, chunk_size=10), config(sink, budget=1), clock)

    assert result["done"] is True and result["records_sent"] == 10 and result["fault_since"] is None
    assert sink.keys() == [expected_key(LANDED["version_id"], i) for i in range(10) for _ in (0, 1)]
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
    refused = RegisterEnv(
        tenant_id=TENANT,
        work_bucket=WORK,
        ledger_table_name="ledger",
        sink_url=f"http://127.0.0.1:{port}/records",
        sink_timeout_seconds=1,
        sink_outage_budget_seconds=3600,
        landing_prefix="acme/",
    )

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


def test_fails_when_the_index_was_split_with_another_chunk_size(work, sink, ledger):
    """GIVEN an index of chunks of 3 WHEN a task says chunks of 2 THEN refused before anything is sent
    (its chunk's range would hold the next chunk's records and reuse their idempotency keys)."""
    put_chunk(work, 0, [{"id": i} for i in range(3)])

    with pytest.raises(ValueError, match="^the index has chunks of 3 records, the task 2; nothing was sent$"):
        register(work, ledger, task(0, chunk_size=2), config(sink))
    assert sink.requests == []


def test_fails_when_a_chunk_range_holds_more_than_chunk_size_records(work, sink, ledger):
    """GIVEN an index whose chunk 0 range covers 4 records (chunk_size 3; a damaged index)
    WHEN registered THEN it stops before reusing the next chunk's idempotency keys."""
    put_chunk(work, 0, [{"id": i} for i in range(6)])
    work.put_object(
        Bucket=WORK,
        Key=contract.chunk_index_key(PREFIX),
        Body=chunk_format.INDEX_ENTRY.pack(0) + chunk_format.INDEX_ENTRY.pack(4 * len(b'{"id": 0}\n')),
    )

    with pytest.raises(ValueError, match="more than chunk_size=3"):
        register(work, ledger, task(0), config(sink))
    assert len(sink.requests) == 3


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
    put_chunk(work, 4, [{"id": 0}, {"id": 1}], chunk_size=2)
    result = register_chunk.handler(task(4, chunk_size=2, start_record=8), Context())
    assert (result["done"], result["records_sent"], result["start_record"]) == (True, 2, 10)
    assert sink.keys() == [expected_key(LANDED["version_id"], 8), expected_key(LANDED["version_id"], 9)]


def test_fails_when_sink_url_is_not_http(handler_env, monkeypatch):
    """GIVEN SINK_URL=file:///etc/passwd WHEN the handler starts THEN FunctionEnvironmentError,
    nothing is read."""
    monkeypatch.setenv(contract.env_name("sink_url"), "file:///etc/passwd")
    with pytest.raises(
        contract.FunctionEnvironmentError, match="SINK_URL='file:///etc/passwd' must be an http"
    ):
        register_chunk.handler(task(0), Context())


def test_a_chunk_reuses_one_connection_to_the_core_system(work, sink, ledger):
    """GIVEN a chunk of 3 records and a keep-alive core system
    WHEN the chunk is registered
    THEN all records travel over one connection (no handshake per record)."""
    put_chunk(work, 0, [{"n": 1}, {"n": 2}, {"n": 3}])
    register(work, ledger, task(0), config(sink))
    assert len(sink.requests) == 3
    assert len({r["client"] for r in sink.requests}) == 1


# --- the kept connection (sink_client.POOL) ------------------------------------------------------


def connection_fields(capsys: pytest.CaptureFixture[str]) -> list[tuple[int, int, int]]:
    """Per invocation since the last call: (connections opened, reconnects, sink errors)."""
    return [(r["sink_connections"], r["sink_reconnects"], r["SinkErrors"]) for r in emf_records(capsys)]


def register_chunks(
    work: Any,
    ledger: Ledger,
    sink: Sink,
    chunks: int,
    *,
    between: Callable[[int], None] = lambda i: None,
    chunk_size: int = 3,
    clock: Clock | None = None,
    cfg: RegisterEnv | None = None,
) -> list[dict[str, Any]]:
    """A file of `chunks` chunks registered by one warm function, a chunk per invocation (each to done)."""
    put_file(
        work,
        "".join(json.dumps({"id": i}) + "\n" for i in range(chunks * chunk_size)).encode(),
        chunk_size=chunk_size,
    )
    results = []
    for index in range(chunks):
        between(index)
        progress = task(
            index, chunk_size=chunk_size, start_record=index * chunk_size, record_count=chunks * chunk_size
        )
        while not progress.get("done"):
            progress = register(work, ledger, progress, cfg or config(sink), clock)
        results.append(progress)
    return results


def registered_keys(sink: Sink) -> list[str]:
    """The keys the core system registered, in order: each key once (a resend is deduplicated)."""
    return list(dict.fromkeys(sink.keys()))


def test_a_warm_function_sends_every_chunk_over_the_connection_it_kept(work, sink, ledger, capsys):
    """GIVEN a core system that keeps connections open WHEN a warm function registers three chunks,
    one per invocation THEN one connection carries all of them: the first invocation opens it, the
    others open none (no TCP or TLS handshake per chunk)."""
    register_chunks(work, ledger, sink, 3)

    assert len(sink.requests) == 9 and sink.connections == 1
    assert connection_fields(capsys) == [(1, 0, 0), (0, 0, 0), (0, 0, 0)]


def test_a_kept_connection_closed_while_idle_is_opened_again_once_and_the_record_sent_on_it(
    work, sink, ledger, capsys
):
    """GIVEN the core system closes idle connections (its keep-alive timeout) between two invocations
    WHEN the second chunk is registered THEN its first record, which found the kept connection closed,
    goes again at once on one new connection under the same key: no error, no backoff, each record
    registered once, the reconnect counted."""
    clock = Clock()
    register_chunks(
        work, ledger, sink, 2, between=lambda i: sink.close_idle() if i == 1 else None, clock=clock
    )

    assert registered_keys(sink) == sink.keys()[:3] + sink.keys()[-3:]
    assert registered_keys(sink) == [expected_key(LANDED["version_id"], i) for i in range(6)]
    assert sink.connections == 2 and clock.sleeps == []
    assert connection_fields(capsys) == [(1, 0, 0), (1, 1, 0)]


def test_random_cuts_between_requests_lose_nothing_and_register_nothing_twice(work, sink, ledger, capsys):
    """GIVEN a core system that closes the connection after an answer at random (a load balancer's
    cut, a third of the time) and every idle connection before chunks 4 and 7 (its keep-alive
    timeout) WHEN a warm function registers ten chunks of 3 THEN every record is registered once and
    in order, the request after each cut (and only it) goes on a new connection, each cut costs one
    reconnect and no failed try."""
    cut = random.Random(7)
    closed = {n for n in range(30) if cut.random() < 1 / 3}
    sink.hang_up_after = lambda n: n in closed
    idle_cuts = (4, 7)

    register_chunks(work, ledger, sink, 10, between=lambda i: sink.close_idle() if i in idle_cuts else None)

    assert sink.keys() == [expected_key(LANDED["version_id"], i) for i in range(30)]  # none sent twice
    on_new_connection = [
        n for n in range(1, 30) if sink.requests[n]["client"] != sink.requests[n - 1]["client"]
    ]
    assert on_new_connection == sorted({n + 1 for n in closed if n < 29} | {3 * i for i in idle_cuts})
    fields = connection_fields(capsys)
    assert sum(reconnected for _, reconnected, _ in fields) == len(on_new_connection) > 5
    assert sink.connections == 1 + len(on_new_connection) == sum(opened for opened, _, _ in fields)
    assert [errors for _, _, errors in fields] == [0] * 10


def test_a_request_the_core_system_took_but_did_not_answer_goes_again_under_the_same_key(
    work, sink, ledger, capsys
):
    """GIVEN a kept connection the core system closes after reading a request, before answering (it
    may or may not have registered it) WHEN the chunk is registered THEN the request goes again at
    once on a new connection with the same idempotency key and body, and the chunk continues."""
    sink.respond = lambda n: HANG_UP if n == 1 else 200
    clock = Clock()
    put_chunk(work, 0, [{"id": i} for i in range(3)])

    result = register(work, ledger, task(0), config(sink), clock)

    assert result["done"] and result["records_sent"] == 3
    keys = [expected_key(LANDED["version_id"], i) for i in range(3)]
    assert sink.keys() == [keys[0], keys[1], keys[1], keys[2]]
    assert sink.requests[1]["body"] == sink.requests[2]["body"]
    assert sink.connections == 2 and clock.sleeps == []
    assert connection_fields(capsys) == [(2, 1, 0)]


def test_a_new_connection_that_breaks_is_a_failed_try_not_a_reconnect(work, sink, ledger, capsys):
    """GIVEN the core system hangs up on the first request of a new connection (nothing was kept)
    WHEN the chunk is registered THEN that is a failed try like any transport fault (counted, backed
    off, sent again under the same key), not a silent reconnect."""
    sink.respond = lambda n: HANG_UP if n == 0 else 200
    clock = Clock()
    put_chunk(work, 0, [{"id": i} for i in range(2)])

    result = register(work, ledger, task(0), config(sink), clock)

    assert result["done"] and sink.keys()[0] == sink.keys()[1]
    assert clock.sleeps == [register_chunk.RETRY_BACKOFF_SECONDS[0]]
    assert connection_fields(capsys) == [(2, 0, 1)]


def test_a_reconnect_is_tried_once_then_the_fault_is_a_failed_try(work, sink, ledger, capsys):
    """GIVEN a kept connection closed while idle, and a core system that also hangs up on the
    request sent again on the new connection WHEN the chunk is registered THEN there is one reconnect,
    then a failed try (backed off), then the record goes through: never a loop of reconnects."""
    clock = Clock()
    sink.respond = lambda n: HANG_UP if n == 3 else 200  # the 4th request to arrive: the one sent again
    register_chunks(
        work, ledger, sink, 2, between=lambda i: sink.close_idle() if i == 1 else None, clock=clock
    )

    assert registered_keys(sink) == [expected_key(LANDED["version_id"], i) for i in range(6)]
    assert clock.sleeps == [register_chunk.RETRY_BACKOFF_SECONDS[0]]
    assert connection_fields(capsys) == [(1, 0, 0), (2, 1, 1)]


# --- metrics -------------------------------------------------------------------------------------


def emf_records(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """The EMF records printed since the last call (checked against `contract.EMF_METRICS`)."""
    return support.emf_records(capsys.readouterr().out, "register_chunk")


def test_publishes_records_sent_and_sink_errors_once_per_invocation(work, sink, ledger, capsys):
    """GIVEN every record of a 4-record chunk gets one 503 first WHEN registered THEN one EMF record
    says 4 records sent and 4 sink errors, with the tenant dimension."""
    put_chunk(work, 0, [{"id": i} for i in range(4)], chunk_size=4)
    sink.respond = lambda n: 503 if n % 2 == 0 else 200

    register(work, ledger, task(0, chunk_size=4), config(sink))

    (record,) = emf_records(capsys)
    assert (record["RecordsSent"], record["SinkErrors"], record["Tenant"]) == (4, 4, TENANT)
    (directive,) = record["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "OrderedIngest"
    assert directive["Metrics"] == [
        {"Name": "RecordsSent", "Unit": "Count"},
        {"Name": "SinkErrors", "Unit": "Count"},
        {"Name": "SinkRequests", "Unit": "Count"},
    ]
    assert record["SinkRequests"] == 4  # one acknowledged POST per record in record mode


def test_a_long_invocation_publishes_its_metrics_as_it_goes_and_they_add_up(work, sink, ledger, capsys):
    """GIVEN a chunk of 6 records whose core system takes 25 s an answer (175 s in one invocation), the
    first answer a 503 WHEN registered THEN it publishes while it sends, not only at its end: a record
    once a minute has passed since the last (at 75 s and 150 s), then the end's (175 s); each says what
    happened since the one before, so they add up to the invocation: 6 records, 6 requests, 1 error."""
    put_chunk(work, 0, [{"id": i} for i in range(6)], chunk_size=6)
    clock = Clock(deadline_in=900)
    started = clock.now

    def slow(n: int) -> int:
        clock.now += 25
        return 503 if n == 0 else 200

    sink.respond = slow
    progress = register(work, ledger, task(0, chunk_size=6), config(sink, timeout=30), clock)

    assert progress["done"]
    records = emf_records(capsys)
    sent = [(r["RecordsSent"], r["SinkRequests"], r["SinkErrors"]) for r in records]
    assert sent == [(2, 2, 1), (3, 3, 0), (1, 1, 0)]
    times = [round(r["_aws"]["Timestamp"] / 1000 - started, 1) for r in records]
    assert times == [75.2, 150.2, 175.2]  # .2: the backoff after the 503
    assert [r["sink_connections"] for r in records] == [1, 0, 0]


def test_publishes_in_the_namespace_its_environment_names(work, sink, ledger, capsys):
    """GIVEN the register function of a qualified copy of the app (METRIC_NAMESPACE set by the
    construct) WHEN it registers a chunk THEN its metrics go to that namespace, not the app's."""
    put_chunk(work, 0, [{"id": 0}], chunk_size=1)
    env = {**environment(config(sink)), "METRIC_NAMESPACE": "q1-OrderedIngest"}

    register(work, ledger, task(0, chunk_size=1), from_env(RegisterEnv, env))

    (record,) = emf_records(capsys)
    assert record["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "q1-OrderedIngest"


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


# --- reading the chunk: index entries, then a ranged GET of the pinned version ------------------


class SpyS3:
    """The S3 client, recording each GET (bucket, key, range)."""

    def __init__(self, s3: Any) -> None:
        self._s3 = s3
        self.gets: list[tuple[str, str, str | None]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._s3, name)

    def get_object(self, **kwargs: Any) -> Any:
        self.gets.append((kwargs["Bucket"], kwargs["Key"], kwargs.get("Range")))
        return self._s3.get_object(**kwargs)


def test_csv_chunks_are_read_by_range_and_hold_exactly_their_records(work, sink, ledger):
    """GIVEN a CSV whose records hold quoted newlines and CRLF, split in chunks of 2 WHEN each chunk
    is registered THEN the core system gets exactly the file's records, in order, with the keys of
    their positions, and each chunk read only its own bytes of the pinned landing version."""
    rows = [("1", "a"), ("2", "two\nlines"), ("3", 'x "q"\r\ny'), ("4", "d"), ("5", "e,f")]
    content = (
        "id,text\r\n" + "".join(f'{i},"{t.replace(chr(34), chr(34) * 2)}"\r\n' for i, t in rows)
    ).encode()
    version = put_file(work, content, fmt="csv", chunk_size=2)
    s3 = SpyS3(work)

    for index in range(3):
        progress = register_chunk.register_chunk(
            task(index, chunk_size=2, start_record=2 * index, record_count=5),
            config=config(sink),
            s3=s3,
            ledger=ledger,
            log=BoundLogger(get_logger("register_chunk"), {}),
            remaining_seconds=Clock().remaining,
        )
        assert progress["done"] is True

    assert sink.bodies() == [{"id": i, "text": t} for i, t in rows]
    assert sink.keys() == [expected_key(version, i) for i in range(5)]
    landing_reads = [rng for bucket, _, rng in s3.gets if bucket == LANDING]
    starts = [content.index(f'\r\n{i},"'.encode()) + 2 for i in ("1", "3", "5")] + [len(content)]
    assert landing_reads == [f"bytes={a}-{b - 1}" for a, b in zip(starts, starts[1:])]
    assert {key for bucket, key, _ in s3.gets if bucket == WORK} == {
        PREFIX + "manifest.json",
        PREFIX + "chunk-offsets.bin",
    }


def test_a_stale_execution_is_refused_before_anything_is_read(work, sink, ledger):
    """GIVEN an old execution whose chunk index is gone WHEN its register runs THEN it is refused as
    stale (the fence comes first), not with a missing-object error, and nothing is read."""
    s3 = SpyS3(work)
    with pytest.raises(StaleExecutionError):
        register(s3, ledger, task(0, execution_name="evt-0"), config(sink))
    assert s3.gets == [] and sink.requests == []


def test_fails_when_the_key_is_outside_the_landing_prefix(work, sink, ledger):
    """GIVEN a task naming another tenant's object WHEN registered THEN refused before any read."""
    s3 = SpyS3(work)
    with pytest.raises(
        contract.KeyOutsidePrefixError, match="'beta/f.csv' is outside the landing prefix 'acme/'"
    ):
        register(s3, ledger, task(0, key="beta/f.csv"), config(sink))
    assert s3.gets == [] and sink.requests == []


def test_fails_when_the_index_is_of_another_version(work, sink, ledger):
    """GIVEN the folder's index was made from one version WHEN a task names another version of the key
    THEN refused before anything is sent (offsets of other bytes would cut records anywhere)."""
    put_chunk(work, 0, [{"id": 0}])
    other = work.put_object(Bucket=LANDING, Key=KEY, Body=b'{"id": "other"}\n')["VersionId"]

    with pytest.raises(ValueError, match="is of another object version; nothing was sent"):
        register(work, ledger, task(0, version_id=other), config(sink))
    assert sink.requests == []


# --- the batch contract (sink.batch_size > 1) -------------------------------------------------------


def expected_batch_key(version_id: str, first: int, count: int) -> str:
    """The documented derivation (docs/core-system.md, "The contract")."""
    return hashlib.sha256(f"landing/acme/f.csv?versionId={version_id}#{first}+{count}".encode()).hexdigest()


def test_batches_are_json_arrays_cut_on_the_chunks_grid_with_one_key_each(work, sink, ledger, capsys):
    """GIVEN chunk 1 of 7 records (file records 7-13) and batch_size 3 WHEN registered THEN three POSTs
    carry the arrays [7-9], [10-12], [13] in order, each under the key of its first record and count;
    the chunk is done, 7 records sent, the ledger at 14; RecordsSent counts records, not POSTs."""
    records = [{"id": i} for i in range(7, 14)]
    version = put_chunk(work, 1, records, chunk_size=7)

    result = register(work, ledger, task(1, chunk_size=7, start_record=7), config(sink, batch_size=3))

    assert (result["done"], result["start_record"], result["records_sent"]) == (True, 14, 7)
    assert sink.bodies() == [records[0:3], records[3:6], records[6:7]]
    assert sink.keys() == [
        expected_batch_key(version, 7, 3),
        expected_batch_key(version, 10, 3),
        expected_batch_key(version, 13, 1),
    ]
    assert all(r["headers"]["Content-Type"] == "application/json" for r in sink.requests)
    assert len({r["client"] for r in sink.requests}) == 1  # one connection for the chunk
    assert ledger.read().next_record == 14
    (metrics,) = emf_records(capsys)
    assert (metrics["RecordsSent"], metrics["SinkErrors"], metrics["SinkRequests"]) == (7, 0, 3)


def test_a_batch_key_never_equals_a_record_key():
    """A tenant switched from record to batch mode must not see a batch deduplicated against the
    single record registered under `...#first`: the count is part of the batch key."""
    from lambdas.chunk_format import idempotency_key
    from lambdas.sink_client import batch_idempotency_key

    assert batch_idempotency_key("landing", "acme/f.csv", "v1", 5, 1) != idempotency_key(
        "landing", "acme/f.csv", "v1", 5
    )
    assert batch_idempotency_key("landing", "acme/f.csv", "v1", 5, 3) != batch_idempotency_key(
        "landing", "acme/f.csv", "v1", 5, 2
    )
    assert batch_idempotency_key("landing", "acme/f.csv", "v2", 5, 3) != batch_idempotency_key(
        "landing", "acme/f.csv", "v1", 5, 3
    )


def test_a_resumed_chunk_sends_the_rest_of_its_batch_then_keeps_the_grid(work, sink, ledger):
    """GIVEN the ledger says records before 9 are acknowledged (inside the batch 7-9) WHEN chunk 1 is
    registered THEN it sends [9] first (its own key), then [10-12] and [13]: the same batches, under
    the same keys, that a first run would have sent from there (a crash resends identical batches)."""
    records = [{"id": i} for i in range(7, 14)]
    version = put_chunk(work, 1, records, chunk_size=7)
    ledger.record_progress("evt-1", 9)

    result = register(work, ledger, task(1, chunk_size=7, start_record=7), config(sink, batch_size=3))

    assert (result["done"], result["records_sent"]) == (True, 5)
    assert sink.bodies() == [records[2:3], records[3:6], records[6:7]]
    assert sink.keys() == [
        expected_batch_key(version, 9, 1),
        expected_batch_key(version, 10, 3),
        expected_batch_key(version, 13, 1),
    ]


def test_a_failed_batch_is_retried_whole_under_the_same_key(work, sink, ledger):
    """GIVEN the core system answers 503 then 429 to the second batch WHEN the chunk is registered THEN
    that batch is sent three times, identical body and key, before the third batch; done in one try."""
    version = put_chunk(work, 0, [{"id": i} for i in range(6)], chunk_size=6)
    sink.respond = lambda n: {1: 503, 2: 429}.get(n, 200)
    clock = Clock()

    result = register(work, ledger, task(0, chunk_size=6), config(sink, batch_size=2, budget=1), clock)

    assert (result["done"], result["records_sent"], result["fault_since"]) == (True, 6, None)
    bodies = [r["body"] for r in sink.requests]
    assert bodies[1] == bodies[2] == bodies[3] == b'{"id": 2},{"id": 3}'.join([b"[", b"]"])
    assert sink.keys() == [expected_batch_key(version, 0, 2)] + [expected_batch_key(version, 2, 2)] * 3 + [
        expected_batch_key(version, 4, 2)
    ]
    assert clock.sleeps == list(register_chunk.RETRY_BACKOFF_SECONDS[:2])


def test_a_rejected_batch_stops_the_chunk_and_progress_stays_at_its_first_record(work, sink, ledger):
    """GIVEN the core system rejects the second batch (422) naming its second record (`rejected_index` 1)
    WHEN the chunk is registered THEN SinkRejectedError names the batch and file record 11, nothing after
    it is sent, and the ledger keeps the batch's first record (10) as the first unacknowledged one: the
    whole batch was rejected, so a resume sends it again under the same key."""
    version = put_chunk(work, 1, [{"id": i} for i in range(8, 16)], chunk_size=8)
    sink.respond = lambda n: 422 if n == 1 else 200
    sink.answer = b'{"rejected_index": 1, "reason": "TOPSECRET"}'

    with pytest.raises(SinkRejectedError) as raised:
        register(work, ledger, task(1, chunk_size=8, start_record=8), config(sink, batch_size=2))

    assert str(raised.value) == (
        "chunk 1 batch of records 2-3 (file records 10-11): HTTP 422; the whole batch was rejected, none of it "
        "registered, the core system names file record 11"
    )
    assert (raised.value.status, raised.value.record_index) == (422, 11)
    assert len(sink.requests) == 2
    assert ledger.read().next_record == 10

    sink.respond = lambda n: 200  # the core system is fixed; the operator resumes
    sink.answer = b"{}"
    result = register(work, ledger, task(1, chunk_size=8, start_record=8), config(sink, batch_size=2))
    assert result["done"] is True
    assert (
        sink.keys()[1] == sink.keys()[2] == expected_batch_key(version, 10, 2)
    )  # the same batch, the same key
    assert [b["id"] for body in sink.bodies()[2:] for b in body] == list(range(10, 16))


@pytest.mark.parametrize(
    "answer", [b"", b"not json", b'{"rejected_index": 7}', b'{"rejected_index": true}', b"[1]"]
)
def test_a_rejection_without_a_usable_index_names_the_batchs_first_record(work, sink, ledger, answer):
    put_chunk(work, 0, [{"id": i} for i in range(4)], chunk_size=4)
    sink.respond = lambda n: 400
    sink.answer = answer

    with pytest.raises(SinkRejectedError) as raised:
        register(work, ledger, task(0, chunk_size=4), config(sink, batch_size=4))

    assert raised.value.record_index == 0
    assert str(raised.value).endswith("HTTP 400; the whole batch was rejected, none of it registered")


def test_a_batch_that_might_not_finish_before_the_deadline_waits_for_the_next_invocation(work, sink, ledger):
    """GIVEN each batch takes 3 s of an 8 s invocation WHEN the chunk is registered THEN it returns after
    two batches, and the next try sends the third batch only: no record twice, none skipped."""
    put_chunk(work, 0, [{"id": i} for i in range(6)], chunk_size=6)
    clock = Clock(deadline_in=8)

    def slow(n: int) -> int:
        clock.now += 3
        return 200

    sink.respond = slow
    first = register(work, ledger, task(0, chunk_size=6), config(sink, timeout=2, batch_size=2), clock)
    assert (first["done"], first["start_record"]) == (False, 4)
    assert ledger.read().next_record == 4

    second = register(work, ledger, first, config(sink, timeout=2, batch_size=2), Clock())
    assert (second["done"], second["start_record"]) == (True, 6)
    assert [[r["id"] for r in body] for body in sink.bodies()] == [[0, 1], [2, 3], [4, 5]]


def test_handler_logs_a_batch_rejection_without_records_or_the_answer(
    work, sink, handler_env, logs, monkeypatch
):
    monkeypatch.setenv(contract.env_name("sink_batch_size"), "2")
    put_chunk(work, 0, [{"secret": "TOPSECRET"}, {"secret": "TOPSECRET2"}], chunk_size=2)
    sink.respond = lambda n: 400
    sink.answer = b'{"rejected_index": 0, "reason": "TOPSECRET in field secret"}'

    with pytest.raises(SinkRejectedError):
        register_chunk.handler(task(0, chunk_size=2), Context())

    (error,) = logs.errors()
    assert (error.chunk_index, error.status, error.record_index) == (0, 400, 0)
    assert "TOPSECRET" not in logs.text()


# --- chunk size and timeouts fit together (budgets.py) ----------------------------------------------


class ProgressRecorder(Ledger):
    """The ledger of `ledger`, its progress writes kept in memory: the budget test below makes
    up to 1,740 of them, and moto's conditional update costs tens of milliseconds each (most of
    a minute), which says nothing about the budget. The writes are checked instead."""

    def __init__(self, ledger: Ledger) -> None:
        super().__init__(ledger.ddb, ledger.table, ledger.tenant)
        self.progress: list[int] = []

    def record_progress(self, execution: str, next_record: int, **_counts: Any) -> Position:  # type: ignore[override]  # a scripted ledger
        assert execution == "evt-1"
        self.progress.append(next_record)
        return Position.from_item(self.tenant, {})  # not paused


#: An outage budget near the longest allowed: a page's history then holds 17 invocations for one chunk
#: (657 at the default hour), so the largest chunk at the slowest answer is quick to send here.
LONG_OUTAGE = 42_000


@pytest.mark.parametrize(("sink_timeout", "batch_size"), [(60, 1), (5, 1), (60, 5), (60, 100)])
def test_the_largest_allowed_chunk_at_the_slowest_answer_fits_the_invocation_budget(
    work, sink, ledger, sink_timeout, batch_size
):
    """GIVEN the largest chunk synthesis allows (at most MAX_CHUNK_SIZE) for this sink timeout, batch size
    and outage budget, and a core system that takes the whole timeout for every request WHEN the workflow
    invokes the register function (with the timeout synthesis gives it) until the chunk is done THEN it
    needs the invocations one page's history holds for a chunk and no more, each ending before its
    deadline, every record is sent exactly once, and the progress it wrote only moved forward, to the
    chunk's end."""
    from pipeline_constructs import budgets
    from pipeline_constructs.config import MAX_CHUNK_SIZE

    size = min(MAX_CHUNK_SIZE, budgets.max_chunk_size(sink_timeout, LONG_OUTAGE, batch_size))
    function_timeout = budgets.register_timeout_seconds(size, sink_timeout, batch_size)
    put_chunk(work, 0, [{"id": i} for i in range(size)], chunk_size=size)
    clock = Clock()
    recorder = ProgressRecorder(ledger)

    def slowest(n: int) -> int:
        clock.now += sink_timeout
        return 200

    sink.respond = slowest
    cfg = config(sink, timeout=sink_timeout, batch_size=batch_size)
    progress, invocations = task(0, chunk_size=size, record_count=size), 0
    while not progress.get("done"):
        clock.deadline = clock.now + function_timeout  # a fresh invocation
        progress = register(work, recorder, progress, cfg, clock)
        invocations += 1
        assert clock.now <= clock.deadline  # returned before Lambda would time it out
    assert invocations <= budgets.max_register_invocations_per_chunk(LONG_OUTAGE) == 17
    assert invocations == budgets.register_invocations_per_chunk(size, sink_timeout, batch_size)
    assert len(sink.requests) == budgets.requests_per_chunk(size, batch_size)
    assert len(set(sink.keys())) == len(sink.requests)
    assert recorder.progress == sorted(set(recorder.progress)) and recorder.progress[-1] == size


def test_a_warm_function_reads_a_files_manifest_and_index_once_then_one_ranged_get_per_chunk(
    work, sink, ledger, monkeypatch
):
    """GIVEN a file of 40 records in chunks of 1 whose index spans three blocks (blocks of 16
    entries here; 1,024 deployed: the count changes the cost of the test, not what it shows)
    WHEN chunks 0-39 are registered by one warm function THEN each record arrives once, in
    order, with its own key, and the work bucket was read 1 (manifest) + 3 (index blocks) times,
    not 2 x 40: a chunk costs one ranged GET of the landing object."""
    from lambdas import chunk_format

    for module in (chunk_format, register_chunk):
        monkeypatch.setattr(module, "INDEX_BLOCK_ENTRIES", 16)
    records = 40
    put_file(work, "".join(json.dumps({"id": n}) + "\n" for n in range(records)).encode(), chunk_size=1)
    counting = CountingS3(work)
    for index in range(records):
        result = register(
            counting,
            ledger,
            task(index, chunk_size=1, start_record=index, record_count=records),
            config(sink),
        )
        assert result["done"] and result["start_record"] == index + 1
    assert [body["id"] for body in sink.bodies()] == list(range(records))
    assert sink.keys() == [expected_key(LANDED["version_id"], n) for n in range(records)]
    assert counting.gets.count(WORK) == 1 + 3 and counting.gets.count(LANDING) == records


def test_a_warm_function_does_not_serve_another_version_or_chunk_size_from_what_it_kept(work, sink):
    """GIVEN a warm function that read chunk 0 of one version WHEN the same work prefix holds
    another version's split (a re-upload replayed with the same event id), in chunks of another
    size THEN it reads that version's manifest and index anew: the chunk's records are the new
    version's."""

    def records(the_task: dict[str, Any]) -> list[bytes]:
        return [record for _, record in register_chunk.read_chunk(work, config(sink), the_task)]

    first = put_chunk(work, 0, [{"id": "a"}, {"id": "b"}, {"id": "c"}])
    assert [json.loads(r)["id"] for r in records(task(0, version_id=first))] == ["a", "b", "c"]
    second = put_file(work, b'{"id": "x"}\n{"id": "y"}\n', chunk_size=2)
    assert [
        json.loads(r)["id"] for r in records(task(0, version_id=second, chunk_size=2, record_count=2))
    ] == ["x", "y"]


class CrashedLedger:
    """The ledger as a crashed invocation leaves it: the process died before any of its progress
    writes (they are lost), everything else as usual."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    def record_progress(self, *args: Any, **kwargs: Any) -> Position:
        return Position.from_item(self._ledger.tenant, {})  # the write is lost; not paused

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_a_file_keeps_its_chunk_and_batch_size_when_the_settings_change_before_it_resumes(
    work, sink, ledger, batch_size
):
    """GIVEN chunk 0 (6 records) sent with batch_size 3 (or one record per POST) by an invocation
    that crashed before its progress reached the ledger WHEN the settings change (sink.batch_size 2)
    and the chunk is sent again THEN the file's pinned sizes are used: every record acknowledged
    before goes again under the key it had, never a new one."""
    put_chunk(work, 0, [{"id": i} for i in range(6)], chunk_size=6)
    register(work, CrashedLedger(ledger), task(0, chunk_size=6), config(sink, batch_size=batch_size))
    first_run = list(zip(sink.keys(), sink.bodies()))
    assert ledger.read().next_record == 0 and ledger.read().batch_size == batch_size
    sink.requests.clear()

    result = register(work, ledger, task(0, chunk_size=6), config(sink, batch_size=2))

    assert result["done"] and list(zip(sink.keys(), sink.bodies())) == first_run
    assert (ledger.read().chunk_size, ledger.read().batch_size) == (6, batch_size)


def test_fails_before_sending_when_the_chunks_were_cut_at_another_size_than_the_files(work, sink, ledger):
    """GIVEN a file pinned at chunks of 6 records WHEN a task comes with chunks of 3 (an index
    written by hand or by an older release) THEN nothing is sent and the error says how to recover."""
    put_chunk(work, 0, [{"id": i} for i in range(6)], chunk_size=3)
    ledger.pin_settings("evt-1", 6, 1)

    with pytest.raises(
        ValueError, match="started with chunks of 6 records, this chunk index has 3; nothing was sent"
    ):
        register(work, ledger, task(0, chunk_size=3), config(sink))
    assert sink.requests == []


class ScriptedSink:
    """A core system that answers 200 at once, writing down what happens around each POST."""

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.bodies: list[bytes] = []

    def post(
        self,
        body: bytes,
        headers: dict[str, str],
        timeout: float,
        *,
        meanwhile: Callable[[], None] | None = None,
    ) -> tuple[int, bytes]:
        self.bodies.append(body)
        self.events.append(f"sent {json.loads(body)['n']}")
        if meanwhile is not None:
            meanwhile()
        self.events.append(f"answered {json.loads(body)['n']}")
        return 200, b""


def scripted_lines(
    events: list[str], count: int, *, broken_at: int | None = None
) -> Iterator[tuple[int, bytes]]:
    """A chunk's records as register reads them, writing down each read; the landing object's
    stream breaks when record `broken_at` is read."""
    for n in range(count):
        if n == broken_at:
            raise OSError("the landing object's stream broke")
        events.append(f"read {n}")
        yield n, json.dumps({"n": n}).encode() + b"\n"


def scripted_register(
    ledger: Ledger, *, sink_timeout: float = 2, clock: Clock | None = None
) -> register_chunk.Register:
    """Register of chunk 0 (chunks of 10 records) in record mode, on a fake clock."""
    clock = clock or Clock()
    env = RegisterEnv(
        tenant_id=TENANT,
        work_bucket=WORK,
        ledger_table_name="ledger",
        sink_url="http://127.0.0.1:9/",
        sink_timeout_seconds=sink_timeout,
        sink_outage_budget_seconds=60,
        landing_prefix="acme/",
        sink_batch_size=1,
    )
    return register_chunk.Register(
        task(0, chunk_size=10, version_id="v1"),
        config=env,
        ledger=ledger,
        clock=clock.time,
        remaining_seconds=clock.remaining,
        sleep=clock.sleep,
        log=BoundLogger(get_logger("register_chunk"), {}),
    )


def test_the_next_record_is_read_while_the_core_system_answers_and_sent_only_after_the_answer(ledger):
    """GIVEN a chunk of three records WHEN registered THEN each next record is read and encoded
    while the core system answers the one before (the register side's own work is hidden behind
    the core system's), and it is sent only once that answer came: never two requests at once."""
    events: list[str] = []
    progress = scripted_register(ledger).run(scripted_lines(events, 3), ScriptedSink(events))  # type: ignore[arg-type]  # a scripted sink

    assert events == [
        "read 0",
        "sent 0",
        "read 1",
        "answered 0",
        "sent 1",
        "read 2",
        "answered 1",
        "sent 2",
        "answered 2",
    ]
    assert progress["done"] and progress["start_record"] == 3 and ledger.read().next_record == 3


def test_a_stream_that_breaks_while_the_core_system_answers_fails_after_that_answer_not_as_a_failed_try(
    ledger,
):
    """GIVEN a landing object whose stream breaks while record 2 is read ahead, during the POST
    of record 1 WHEN registered THEN record 1's answer still counts (no failed try, no retry, its
    progress recorded) and the stream's error ends the invocation, as it did without reading ahead."""
    events: list[str] = []
    register = scripted_register(ledger)
    with pytest.raises(OSError, match="stream broke"):
        register.run(scripted_lines(events, 5, broken_at=2), ScriptedSink(events))  # type: ignore[arg-type]  # a scripted sink

    assert events == ["read 0", "sent 0", "read 1", "answered 0", "sent 1", "answered 1"]
    assert (register.sent, register.errors) == (2, 0)
    assert ledger.read().next_record == 2


def test_a_record_is_sent_as_the_file_holds_it_without_its_line_ending(ledger):
    """GIVEN records ending in CRLF, in LF, and in nothing (the file's last line), one with
    spaces before its line ending WHEN registered THEN each body is the record's bytes as the
    file holds them, less the line ending only."""
    lines = [(0, b'{"n": 0}  \r\n'), (1, b'{"n": 1}\n'), (2, b'{"n": 2}')]
    sink = ScriptedSink([])
    scripted_register(ledger).run(iter(lines), sink)  # type: ignore[arg-type]  # a scripted sink

    assert sink.bodies == [b'{"n": 0}  ', b'{"n": 1}', b'{"n": 2}']


def test_a_request_that_just_fits_before_the_deadline_margin_is_still_sent(ledger):
    """GIVEN an invocation with exactly the sink timeout and the deadline margin left after its
    first record (30 s: 27 s timeout + 3 s margin) WHEN registered THEN the second record is
    still sent (a request is held back only when it might not finish in time), and the third,
    with less left, is left to the next invocation."""
    clock = Clock(deadline_in=30.0)
    register = scripted_register(ledger, sink_timeout=27, clock=clock)
    events: list[str] = []

    class Slow(ScriptedSink):
        def post(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
            answer = super().post(*args, **kwargs)
            if len(self.bodies) == 2:
                clock.now += 0.5  # the second answer takes time
            return answer

    progress = register.run(scripted_lines(events, 3), Slow(events))  # type: ignore[arg-type]  # a scripted sink

    assert [e for e in events if e.startswith("sent")] == ["sent 0", "sent 1"]
    assert (progress["done"], progress["start_record"]) == (False, 2)


# --- what a chunk reads, where it starts, and what it writes (found by mutation testing) -------


def test_records_are_read_from_the_tasks_version_not_the_keys_latest(work, sink, ledger):
    """GIVEN chunk 0 of one version WHEN another version of the key is uploaded before it is
    registered THEN the records sent are the task's version's."""
    records = [{"id": "a"}, {"id": "b"}, {"id": "c"}]
    first = put_chunk(work, 0, records)
    work.put_object(Bucket=LANDING, Key=KEY, Body=b'{"id": "newer-version"}\n' * 4)
    register(work, ledger, task(0, version_id=first), config(sink))
    assert sink.bodies() == records


def test_fails_when_the_chunk_index_is_past_the_files_chunks(work, sink, ledger):
    """GIVEN a file of one chunk WHEN a task names chunk 1 THEN it is refused before anything
    is sent."""
    put_chunk(work, 0, [{"id": "a"}, {"id": "b"}, {"id": "c"}])
    with pytest.raises(ValueError, match="chunk 1 is past the file's 1 chunks"):
        register(work, ledger, task(1, start_record=3), config(sink))
    assert sink.requests == []


@pytest.mark.parametrize(("index", "size"), [(-1, 3), (0, 0)])
def test_fails_when_the_chunk_index_or_size_is_out_of_range(work, sink, ledger, index, size):
    """GIVEN a negative chunk index, or a chunk size of 0 WHEN registered THEN refused before
    anything is read or sent."""
    with pytest.raises(ValueError, match=f"chunk_index {index} must be >= 0 and chunk_size {size} >= 1"):
        register(
            work, ledger, {**task(max(index, 0)), "chunk_index": index, "chunk_size": size}, config(sink)
        )
    assert sink.requests == []


def test_fails_when_the_manifest_names_no_source(work, sink, ledger):
    """GIVEN a manifest without its source (damaged by hand) WHEN a chunk is registered THEN it
    is refused as of another object version, nothing sent."""
    put_chunk(work, 0, [{"id": "a"}, {"id": "b"}, {"id": "c"}])
    manifest = json.loads(work.get_object(Bucket=WORK, Key=contract.manifest_key(PREFIX))["Body"].read())
    del manifest["source"]
    work.put_object(Bucket=WORK, Key=contract.manifest_key(PREFIX), Body=json.dumps(manifest).encode())
    with pytest.raises(ValueError, match="is of another object version; nothing was sent"):
        register(work, ledger, task(0), config(sink))
    assert sink.requests == []


def test_a_warm_function_does_not_serve_a_split_of_the_same_version_at_another_chunk_size(work, sink):
    """GIVEN a warm function that read chunk 0 of a version split in chunks of 3 WHEN the same
    version is split again in chunks of 2 (its folder deleted, then resumed) THEN the manifest
    and the index block are read anew: chunk 1 holds records 2 and 3."""

    def ids(the_task: dict[str, Any]) -> list[str]:
        return [json.loads(r)["id"] for _, r in register_chunk.read_chunk(work, config(sink), the_task)]

    version = put_file(work, b"".join(b'{"id": "%d"}\n' % n for n in range(6)), chunk_size=3)
    assert ids(task(0, version_id=version, record_count=6)) == ["0", "1", "2"]
    for key in (contract.manifest_key(PREFIX), contract.chunk_index_key(PREFIX)):
        work.delete_object(Bucket=WORK, Key=key)
    split_version(work, version, chunk_size=2)
    assert ids(task(1, version_id=version, chunk_size=2, record_count=6)) == ["2", "3"]


def test_a_chunk_never_starts_before_its_own_first_record(work, sink, ledger):
    """GIVEN chunk 1 while the ledger says nothing was acknowledged and the task starts at 0
    WHEN registered THEN it sends its own records only, under their own keys (3, 4, 5)."""
    records = [{"id": "3"}, {"id": "4"}, {"id": "5"}]
    put_chunk(work, 1, records)
    register(work, ledger, task(1, start_record=0), config(sink))
    assert sink.bodies() == records
    assert sink.keys() == [expected_key(LANDED["version_id"], i) for i in (3, 4, 5)]


class CountingLedger:
    """The ledger, counting its progress and pause writes."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger, self.progress, self.pauses = ledger, 0, 0

    def record_progress(self, *args: Any, **kwargs: Any) -> Position:
        self.progress += 1
        return self._ledger.record_progress(*args, **kwargs)

    def record_pause(self, *args: Any, **kwargs: Any) -> Any:
        self.pauses += 1
        return self._ledger.record_pause(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)


def test_progress_is_written_once_per_interval_and_always_at_the_end(work, sink, ledger):
    """GIVEN a core system that answers at once (no time passes) WHEN a chunk of 3 records is
    registered THEN progress is written once, at its end, with the file's chunk count."""
    put_chunk(work, 0, [{"id": "a"}, {"id": "b"}, {"id": "c"}])
    counting = CountingLedger(ledger)
    register(work, counting, task(0), config(sink))  # type: ignore[arg-type]
    position = ledger.read()
    assert (counting.progress, position.next_record, position.chunk_count) == (1, 3, 34)


class TickingClock(Clock):
    """A clock that moves on a second each time it is read: every record is a progress write."""

    def time(self) -> float:
        self.now += 1.0
        return self.now


def test_progress_written_as_it_goes_does_not_stop_for_a_pause_nobody_asked_for(work, sink, ledger):
    """GIVEN a second passing between records (a progress write after each) and no pause asked
    for WHEN a chunk is registered THEN every record is sent and no pause is recorded."""
    records = [{"id": "a"}, {"id": "b"}, {"id": "c"}]
    put_chunk(work, 0, records)
    counting = CountingLedger(ledger)
    result = register(work, counting, task(0), config(sink), clock=TickingClock())  # type: ignore[arg-type]
    assert (result["done"], sink.bodies(), counting.pauses) == (True, records, 0)
    assert counting.progress >= 3


def test_the_credential_given_is_the_one_sent(work, sink, ledger):
    """GIVEN a sink credential passed in (the handler's, from the tenant's secret) WHEN a chunk
    is registered THEN its requests carry that credential's headers, not the environment's."""

    class Signed:
        def headers(self, body: bytes, headers: Any) -> dict[str, str]:
            return {"Authorization": "Bearer given"}

        def refresh(self) -> bool:
            return False

    put_chunk(work, 0, [{"id": "a"}, {"id": "b"}, {"id": "c"}])
    register(work, ledger, task(0), config(sink), auth=Signed())
    assert [r["headers"].get("Authorization") for r in sink.requests] == ["Bearer given"] * 3
