"""Register chunk: POST one chunk's records, in order, to the core system (the sink).

Each request (a record, or with `sink.batch_size` > 1 a batch cut on the chunk's grid) carries
an `Idempotency-Key` from the object version and its position in the file, so a resend after a
crash or a resume registers nothing twice. Only the tenant's current, running execution may
send (the ledger's fence). The first request not acknowledged stops the chunk: nothing after it
is sent before it. Progress is written to the ledger at least every second and at every stop
(deadline, pause, outage, rejection), and the next try starts at the first unacknowledged
record. Budget, retries, connections and read-ahead: docs/architecture.md, "Register within
its budget".
"""

from __future__ import annotations

import http.client
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterator
from typing import Any, NamedTuple

from lambdas.chunk_format import (
    INDEX_BLOCK_ENTRIES,
    chunk_byte_range,
    chunk_entries_from_block,
    chunk_records,
    idempotency_key,
    index_block_range,
)
from lambdas.contract import (
    PROGRESS_EVERY_SECONDS,
    RECORDS_SENT_METRIC,
    SINK_ERRORS_METRIC,
    SINK_REQUESTS_METRIC,
    ChunkProgress,
    ChunkTask,
    KeyOutsidePrefixError,
    RegisterEnv,
    SinkAuthError,
    SinkRejectedError,
    SinkUnavailableError,
    StaleExecutionError,
    chunk_index_key,
    keys_of,
    manifest_key,
    work_prefix,
)
from lambdas.ledger import PAUSED, Ledger, LedgerConflict, Position
from lambdas.runtime import BoundLogger, aws_client, emit_metrics, lambda_handler, pick
from lambdas.sink_auth import CredentialUnavailable, NoAuth, SinkAuth, sink_auth_for
from lambdas.sink_client import (
    SinkConnection,
    batch_body,
    batch_ends_after,
    batch_idempotency_key,
    rejected_offset,
)

#: Time kept in hand at the deadline for the last progress write and the return: this much,
#: or a tenth of the invocation's time if that is less.
DEADLINE_MARGIN_SECONDS = 3.0
#: In-place retries of one request (a record, or a batch): waits before each (then the function returns and waits in the workflow).
RETRY_BACKOFF_SECONDS = (0.2, 0.5, 1.0, 2.0)
#: Bounds of the workflow's wait between tries while the core system is unavailable.
MIN_RETRY_AFTER_SECONDS, MAX_RETRY_AFTER_SECONDS = 1, 60
#: An invocation publishes its metrics at its end, and while it sends at least this often: a
#: big chunk may send for up to 15 minutes, and the dashboard (1-minute points) and the
#: sink-errors alarm (5-minute periods) should see it as it goes, not in one lump at its end.
METRICS_EVERY_SECONDS = 60.0


def _transport_problem(error: BaseException, timeout: float) -> str:
    if isinstance(error, TimeoutError):
        return f"timed out after {timeout:g}s"
    return f"connection failed ({type(error).__name__})"


class _Request(NamedTuple):
    """One POST: the records from file position `first` on (`count` of them), ready to send."""

    first: int
    count: int  # type: ignore[assignment]  # the field shadows tuple.count(), which nothing here calls
    body: bytes
    key: str
    where: str  # names the request in errors and logs


class _ReadAhead:
    """The chunk's requests, one read ahead: `fill` (a POST's `meanwhile`) reads and encodes the
    next request while the core system answers the one at hand, `take` hands it over. Nothing
    is sent ahead: the next request goes out only after this one's answer. An error reading it
    (a chunk longer than its size, the landing object's stream failing) is raised by `take`,
    once the request at hand was answered and its progress counted, as it would have been
    without reading ahead."""

    def __init__(self, requests: Iterator[_Request]) -> None:
        self._requests = requests
        self._filled = False
        self._next: _Request | None = None
        self._error: Exception | None = None

    def fill(self) -> None:
        if self._filled:
            return
        self._filled = True
        try:
            self._next = next(self._requests, None)
        except Exception as error:  # raised by take(), not inside the POST at hand
            self._error = error

    def take(self) -> _Request | None:
        self.fill()
        self._filled = False
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._next


class Register:
    """Sends one task's records; see the module docstring."""

    def __init__(
        self,
        task: ChunkTask,
        *,
        config: RegisterEnv,
        ledger: Ledger,
        clock: Callable[[], float],
        remaining_seconds: Callable[[], float],
        sleep: Callable[[float], None],
        log: BoundLogger,
        auth: SinkAuth | None = None,
    ) -> None:
        self.task, self.config, self.ledger = task, config, ledger
        self.auth: SinkAuth = auth or NoAuth()
        self.clock, self.remaining, self.sleep, self.log = clock, remaining_seconds, sleep, log
        self.chunk_index, self.chunk_size = int(task["chunk_index"]), int(task["chunk_size"])
        self.chunk_start = self.chunk_index * self.chunk_size
        self.fault_since: float | None = task.get("fault_since")
        #: Records per POST: the file's pinned value (`first_record`), not the environment's.
        self.batch_size = config.sink_batch_size
        self.sent = 0
        self.errors = 0  # failed tries of this invocation (retried, or the rejection)
        self.requests = (
            0  # acknowledged POSTs of this invocation (records in record mode, batches in batch mode)
        )
        self.saved = -1
        self.last_save = clock()
        #: Stopped for `ops pause` (`_pause`): nothing more is sent.
        self.paused = False
        #: What `report` published so far (sent, errors, requests, connections opened, reconnects), and when.
        self.reported, self.reported_at = (0, 0, 0, 0, 0), clock()
        self.margin = min(DEADLINE_MARGIN_SECONDS, remaining_seconds() / 10)

    def check(self) -> None:
        if self.chunk_index < 0 or self.chunk_size < 1:
            raise ValueError(
                f"chunk_index {self.chunk_index} must be >= 0 and chunk_size {self.chunk_size} >= 1"
            )
        if not self.task["chunk_prefix"].startswith(work_prefix(self.config.tenant_id)):
            raise KeyOutsidePrefixError(
                f"chunk_prefix {self.task['chunk_prefix']!r} is outside tenant {self.config.tenant_id!r}'s work prefix"
            )
        if not self.task["key"].startswith(self.config.landing_prefix):
            raise KeyOutsidePrefixError(
                f"key {self.task['key']!r} is outside the landing prefix {self.config.landing_prefix!r}"
            )

    def first_record(self) -> int:
        """Where to start: past everything acknowledged; refuses a stale execution. Pins the
        file's chunk and batch sizes on its first invocation and sends with the pinned ones:
        the idempotency keys of a file never depend on settings that changed since it started."""
        position = self.ledger.read()
        execution = self.task["execution_name"]
        if position.execution == execution and position.status == PAUSED:
            self.paused = True  # a retry after this execution stopped for the pause
            return self._resume_at(position)
        if position.execution != execution or not position.running:
            raise StaleExecutionError(
                f"execution {execution} is not the tenant's current running execution "
                f"(current: {position.execution}, {position.status}); nothing was sent. "
                "A failed file continues with `ops resume`, never with a redrive"
            )
        if position.paused_at is not None and self._pause():
            return self._resume_at(position)
        if position.batch_size is None:
            try:
                position = self.ledger.pin_settings(execution, self.chunk_size, self.config.sink_batch_size)
            except LedgerConflict:
                raise StaleExecutionError(
                    f"execution {execution} lost its place before it sent anything; stopping"
                ) from None
        if position.chunk_size is not None and position.chunk_size != self.chunk_size:
            raise ValueError(
                f"the file was started with chunks of {position.chunk_size} records, this chunk index has "
                f"{self.chunk_size}; nothing was sent (delete the file's folder in the work bucket, then resume: "
                "Split writes the index again with the file's own chunk size)"
            )
        self.batch_size = position.batch_size or self.config.sink_batch_size
        return self._resume_at(position)

    def _resume_at(self, position: Position) -> int:
        """The task's first record not acknowledged yet: past its start, its chunk's start and
        the ledger's progress."""
        return max(int(self.task["start_record"]), self.chunk_start, position.next_record)

    def run(self, lines: Any, sink: SinkConnection) -> ChunkProgress:
        next_record = self.first_record()
        if self.paused:
            return self._progress(next_record, done=False, retry_after=0)
        requests = _ReadAhead(self._requests(lines, next_record))
        try:
            while (request := requests.take()) is not None:
                stop = self._send_request(request, sink, meanwhile=requests.fill)
                if stop is not None:
                    return stop
                next_record = request.first + request.count
                self._save(next_record)
                self.report(sink)
                if self.paused:
                    return self._progress(next_record, done=False, retry_after=0)  # type: ignore[unreachable]  # _save() may pause: mypy keeps the narrowing of self.paused from before the loop
            return self._progress(next_record, done=True, retry_after=0)
        finally:
            self._save(next_record, force=True)

    def _requests(self, lines: Any, first: int) -> Iterator[_Request]:
        """The chunk's requests from file position `first` on, in order: in record mode one per
        record, in batch mode one per batch cut on the chunk's grid (the last may be short)."""
        index = self.chunk_start  # file position of the line at hand
        batch: list[bytes] = []
        for _, line in lines:
            record = line.rstrip(b"\r\n")
            if not record:
                continue
            if index - self.chunk_start >= self.chunk_size:
                # More records than chunk_size would reuse the next chunk's idempotency keys.
                raise ValueError(
                    f"chunk {self.chunk_index} holds more than chunk_size={self.chunk_size} records"
                )
            if index >= first:
                batch.append(record)
                if batch_ends_after(index - self.chunk_start, self.batch_size):
                    yield self._request(batch, index + 1 - len(batch))
                    batch = []
            index += 1
        if batch:  # the chunk's last batch, short of the grid
            yield self._request(batch, index - len(batch))

    def _send_request(
        self, request: _Request, sink: SinkConnection, *, meanwhile: Callable[[], None]
    ) -> ChunkProgress | None:
        """Send one request (a record, or a batch); None once acknowledged, else the progress to
        return now. `meanwhile` reads the next request while the core system answers."""
        if self.sent and self.remaining() < self.config.sink_timeout_seconds + self.margin:
            # The next request might not finish before the deadline: continue in a new invocation.
            return self._progress(request.first, done=False, retry_after=0)
        retry_after = self._send(request, sink, meanwhile)
        if retry_after is not None:
            return self._progress(request.first, done=False, retry_after=retry_after)
        return None

    def _request(self, records: list[bytes], first: int) -> _Request:
        """The request of `records` from file position `first` on: body, idempotency key and the
        words naming it in errors and logs."""
        bucket, key, version_id = self.task["bucket"], self.task["key"], self.task["version_id"]
        offset = first - self.chunk_start
        if self.batch_size == 1:
            where = f"chunk {self.chunk_index} record {offset} (file record {first})"
            return _Request(first, 1, records[0], idempotency_key(bucket, key, version_id, first), where)
        last = first + len(records) - 1
        where = f"chunk {self.chunk_index} batch of records {offset}-{offset + len(records) - 1} (file records {first}-{last})"
        return _Request(
            first,
            len(records),
            batch_body(records),
            batch_idempotency_key(bucket, key, version_id, first, len(records)),
            where,
        )

    def _send(self, request: _Request, sink: SinkConnection, meanwhile: Callable[[], None]) -> int | None:
        """Send one request until acknowledged; None when it was, else seconds to wait first."""
        body, first, where = request.body, request.first, request.where
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": request.key,
            "X-Tenant-Id": self.config.tenant_id,
        }
        refreshed = False  # a 401 gets one fresh credential per request
        backoffs = iter((*RETRY_BACKOFF_SECONDS, None))
        backoff = next(backoffs)
        while True:
            timeout = max(0.1, min(self.config.sink_timeout_seconds, self.remaining() - self.margin))
            try:
                status, answer = sink.post(
                    body, {**headers, **self.auth.headers(body, headers)}, timeout, meanwhile=meanwhile
                )
                problem = None if 200 <= status < 300 else f"HTTP {status}"
            except (OSError, http.client.HTTPException) as error:
                status, answer, problem = 0, b"", _transport_problem(error, timeout)
            except CredentialUnavailable as error:  # nothing was sent: wait as for an outage
                status, answer, problem = 0, b"", str(error)
            if problem is not None:
                self.errors += 1
            if status == 401 and not refreshed and not isinstance(self.auth, NoAuth):
                try:
                    refreshed = self.auth.refresh()
                except CredentialUnavailable as error:  # the next try reads the secret again
                    refreshed, status, problem = True, 0, str(error)
                else:
                    if refreshed:
                        self.log.info(
                            "core system refused the credential; sending again with a fresh one",
                            extra={"status": status, "file_record": first},
                        )
                        continue
            if status in (401, 403) and not isinstance(self.auth, NoAuth):
                raise SinkAuthError(
                    f"{where}: the core system refused the credentials (HTTP {status}"
                    f"{' after reading the secret again' if refreshed else ''}) of {self.auth.description}; "
                    "fix or rotate the credential, then resume the file",
                    status=status,
                    credential=self.auth.description,
                )
            if problem is None:
                if self.fault_since is not None:
                    self.log.info(
                        "core system answers again",
                        extra={"outage_seconds": round(self.clock() - self.fault_since, 3)},
                    )
                self.fault_since = None
                self.sent += request.count
                self.requests += 1
                return None
            # Raising leaves `run`, whose `finally` records the progress up to this request.
            if status and status != 429 and status < 500:
                raise self._rejected(where, problem, status, first, request.count, answer)
            now = self.clock()
            if self.fault_since is None:
                self.fault_since = now
            outage = now - self.fault_since
            if outage >= self.config.sink_outage_budget_seconds:
                raise SinkUnavailableError(
                    f"{where}: core system unavailable for {outage:.0f} s, longer than the outage budget "
                    f"({self.config.sink_outage_budget_seconds:g} s); last answer: {problem}",
                    next_record=first,
                )
            if backoff is None or self.remaining() < backoff + timeout + self.margin:
                self.log.warning(
                    "core system unavailable; waiting before the next try",
                    extra={"problem": problem, "outage_seconds": round(outage, 3), "file_record": first},
                )
                return int(min(MAX_RETRY_AFTER_SECONDS, max(MIN_RETRY_AFTER_SECONDS, outage / 2)))
            self.sleep(backoff)
            backoff = next(backoffs)

    def _rejected(
        self, where: str, problem: str, status: int, first: int, count: int, answer: bytes
    ) -> SinkRejectedError:
        """The rejection of a request. A batch is rejected whole (the core system registered none
        of it); its answer may name the offending record (`rejected_index`), which the error names."""
        if self.batch_size == 1:
            return SinkRejectedError(
                f"{where}: {problem}", status=status, chunk_index=self.chunk_index, record_index=first
            )
        offset = rejected_offset(answer, count)
        named = "" if offset is None else f", the core system names file record {first + offset}"
        return SinkRejectedError(
            f"{where}: {problem}; the whole batch was rejected, none of it registered{named}",
            status=status,
            chunk_index=self.chunk_index,
            record_index=first if offset is None else first + offset,
        )

    def _save(self, next_record: int, *, force: bool = False) -> None:
        """Write progress to the ledger (at most every PROGRESS_EVERY_SECONDS unless forced)."""
        if (
            self.paused
            or next_record <= self.saved
            or (
                not force
                and PROGRESS_EVERY_SECONDS
                and self.clock() - self.last_save < PROGRESS_EVERY_SECONDS
            )
        ):
            return
        try:
            saved = self.ledger.record_progress(
                self.task["execution_name"],
                next_record,
                chunk_size=self.chunk_size,
                chunk_count=int(self.task["chunk_count"]),
                record_count=int(self.task["record_count"]),
            )
            if saved.paused_at is not None and not force:
                self._pause()
        except LedgerConflict:
            position = self.ledger.read()
            if position.execution != self.task["execution_name"] or not position.running:
                raise StaleExecutionError(
                    f"execution {self.task['execution_name']} lost its place (current: {position.execution}, "
                    f"{position.status}); stopping"
                ) from None
        self.saved, self.last_save = next_record, self.clock()

    def _pause(self) -> bool:
        """`ops pause` is set: stop here (the position becomes PAUSED at the first unacknowledged
        record; `self.paused`). False if it was lifted meanwhile (go on); `StaleExecutionError`
        if this execution lost its place."""
        execution = self.task["execution_name"]
        try:
            self.ledger.record_pause(execution)
        except LedgerConflict:
            position = self.ledger.read()
            if position.execution != execution or not position.running:
                raise StaleExecutionError(
                    f"execution {execution} lost its place (current: {position.execution}, "
                    f"{position.status}); stopping"
                ) from None
            return False  # unpaused before it stopped
        self.log.info("tenant paused (ops pause): stopping at the first unacknowledged record")
        self.paused = True
        return True

    def report(self, sink: SinkConnection, *, force: bool = False) -> None:
        """Publish what this invocation did since its last report, as one EMF record: at its end
        whatever the end (done, deadline, outage, rejection: `force`), and at most
        `METRICS_EVERY_SECONDS` apart while it sends. `RecordsSent`, `SinkErrors` and
        `SinkRequests` are always present, so a period with traffic has a point of each (the
        sink-errors alarm's rate and the dashboard divide errors by tries). In the namespace of
        the function's environment (the app's, qualified). The same record carries, as plain
        fields (no metric, no cost), the connections opened to the core system since the last
        report (`sink_connections`: 0 while the kept one stays open) and how many of them
        replaced a kept connection the far side had closed (`sink_reconnects`)."""
        now = self.clock()
        if not force and now - self.reported_at < METRICS_EVERY_SECONDS:
            return
        counts = (self.sent, self.errors, self.requests, sink.opened, sink.reconnects)
        sent, errors, requests, opened, reconnects = (
            count - before for count, before in zip(counts, self.reported)
        )
        emit_metrics(
            namespace=self.config.metric_namespace,
            tenant_id=self.config.tenant_id,
            now=now,
            metrics={RECORDS_SENT_METRIC: sent, SINK_ERRORS_METRIC: errors, SINK_REQUESTS_METRIC: requests},
            fields={"sink_connections": opened, "sink_reconnects": reconnects},
        )
        self.reported, self.reported_at = counts, now

    def _progress(self, next_record: int, *, done: bool, retry_after: int) -> ChunkProgress:
        task = {key: self.task[key] for key in keys_of(ChunkTask) if key in self.task}  # type: ignore[literal-required]  # keys_of(ChunkTask) yields ChunkTask's keys
        return ChunkProgress(
            **{**task, "start_record": next_record, "fault_since": self.fault_since},  # type: ignore[typeddict-item]  # self.task's ChunkTask keys, two of them set: a ChunkTask
            done=done,
            retry_after_seconds=retry_after,
            records_sent=self.sent,
            paused=self.paused,
        )


def register_chunk(
    task: ChunkTask,
    *,
    config: RegisterEnv,
    s3: Any,
    ledger: Ledger,
    log: BoundLogger,
    remaining_seconds: Callable[[], float],
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    auth: SinkAuth | None = None,
) -> ChunkProgress:
    """Send the task's records in order from its first unacknowledged one; see the module docstring.

    `s3` is a boto3 S3 client (the work bucket's manifest and chunk index, a ranged read of
    the landing object version); `ledger` the tenant's ledger;
    `remaining_seconds` how long the invocation may still run; `auth` the tenant's credential
    for the core system (default: from `config`, `sink_auth.sink_auth_for`).
    """
    register = Register(
        task,
        config=config,
        ledger=ledger,
        clock=clock,
        remaining_seconds=remaining_seconds,
        sleep=sleep,
        log=log,
        auth=auth if auth is not None else sink_auth_for(config),
    )
    register.check()
    records = read_chunk(s3, config, task)
    sink = SinkConnection(config.sink_url)  # the warm function's kept connection (sink_client.POOL)
    try:
        return register.run(records, sink)
    finally:
        records.close()
        register.report(sink, force=True)


class _WarmCache:
    """What a warm register function keeps between invocations: a file's manifest and blocks of
    its chunk index, so that a chunk costs one ranged GET of the landing object instead of
    three GETs. Both are immutable for a key: the work prefix is the file's event id, and a
    split of the same object version into chunks of the same size writes the same bytes (the
    keys hold the version and the chunk size). Bounded (least recently used out)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[tuple[str, ...], Any] = OrderedDict()

    def get(self, key: tuple[str, ...], load: Callable[[], Any]) -> Any:
        if key in self.items:
            self.items.move_to_end(key)
            return self.items[key]
        value = self.items[key] = load()
        if len(self.items) > self.size:
            self.items.popitem(last=False)
        return value

    def clear(self) -> None:
        self.items.clear()


_MANIFESTS = _WarmCache(size=4)
_INDEX_BLOCKS = _WarmCache(size=8)  # 8 KiB each


def read_manifest(s3: Any, config: RegisterEnv, task: ChunkTask) -> dict[str, Any]:
    """The file's manifest (format, CSV header, chunk size), checked against the task: the
    index it names must be of this very object version, split into chunks of this size."""
    manifest: dict[str, Any] = _MANIFESTS.get(
        (config.work_bucket, task["chunk_prefix"], task["version_id"], str(task["chunk_size"])),
        lambda: json.loads(
            s3.get_object(Bucket=config.work_bucket, Key=manifest_key(task["chunk_prefix"]))["Body"].read()
        ),
    )
    source = manifest.get("source", {})
    if (source.get("bucket"), source.get("key"), source.get("version_id")) != (
        task["bucket"],
        task["key"],
        task["version_id"],
    ):
        raise ValueError(
            f"the manifest under {task['chunk_prefix']!r} is of another object version; nothing was sent"
        )
    if manifest.get("chunk_index_key") != chunk_index_key(task["chunk_prefix"]):
        raise ValueError(f"the manifest under {task['chunk_prefix']!r} has no chunk index; nothing was sent")
    if int(manifest["chunk_size"]) != int(task["chunk_size"]):
        raise ValueError(
            f"the index has chunks of {manifest['chunk_size']} records, "
            f"the task {task['chunk_size']}; nothing was sent"
        )
    return manifest


def read_chunk(s3: Any, config: RegisterEnv, task: ChunkTask) -> Generator[tuple[int, bytes], None, None]:
    """The chunk's records, serialized, read lazily: nothing is read before the fence (the
    first record asked for), so a stale execution is refused as such. Closing it closes the body."""
    manifest = read_manifest(s3, config, task)
    body, start = open_chunk(s3, config, task, manifest)
    try:
        yield from chunk_records(body, manifest["format"], manifest.get("csv_header"), base=start)
    finally:
        body.close()


def open_chunk(s3: Any, config: RegisterEnv, task: ChunkTask, manifest: dict[str, Any]) -> tuple[Any, int]:
    """The chunk's bytes of the pinned landing object version (a streaming body) and where
    they start: its two index entries (out of a block of the index read by one ranged GET,
    kept while the function is warm), then one ranged GET of the object."""
    index = int(task["chunk_index"])
    if index >= int(manifest["chunk_count"]):
        raise ValueError(f"chunk {index} is past the file's {manifest['chunk_count']} chunks")
    index_key, block = chunk_index_key(task["chunk_prefix"]), index // INDEX_BLOCK_ENTRIES
    entries = chunk_entries_from_block(
        _INDEX_BLOCKS.get(
            (config.work_bucket, index_key, task["version_id"], str(task["chunk_size"]), str(block)),
            lambda: s3.get_object(Bucket=config.work_bucket, Key=index_key, Range=index_block_range(block))[
                "Body"
            ].read(),
        ),
        index,
    )
    start, end = chunk_byte_range(entries)
    body = s3.get_object(
        Bucket=task["bucket"], Key=task["key"], VersionId=task["version_id"], Range=f"bytes={start}-{end - 1}"
    )["Body"]
    return body, start


@lambda_handler(
    "register_chunk",
    RegisterEnv,
    log_fields=lambda event: pick(
        event, "execution_name", "key", "version_id", "chunk_index", "start_record"
    ),
    clients=("s3", "dynamodb"),
)
def handler(event: ChunkTask, config: RegisterEnv, log: BoundLogger, context: Any) -> ChunkProgress:
    """Step Functions task entry point (`ChunkTask` in, `ChunkProgress` out)."""
    result = register_chunk(
        event,
        config=config,
        s3=aws_client("s3"),
        ledger=Ledger(aws_client("dynamodb"), config.ledger_table_name, config.tenant_id),
        log=log,
        remaining_seconds=lambda: context.get_remaining_time_in_millis() / 1000,
    )
    log.info(
        "chunk progress", extra=pick(result, "records_sent", "start_record", "done", "retry_after_seconds")
    )
    return result
