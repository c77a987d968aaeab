"""Register chunk: POST one chunk's records, in order, to the core system (the sink).

Each record carries an `Idempotency-Key` derived from the object version and the record's
position in the file, so resending a record after a crash registers nothing twice. The first
record that is not acknowledged stops the chunk: later records are never sent before it.

The function works within its budget (docs/design.md §4.7):

* it is fenced by the ledger: only the tenant's current, running execution may send (a
  hand-made redrive is refused before it sends anything);
* it starts at the first record not acknowledged yet (the ledger's `next_record`, the task's
  `start_record`) and writes its progress to the ledger every second and at every stop;
* it stops before the function's deadline and returns the task to continue with;
* a record the core system cannot take now (429, 5xx, timeout, connection) is retried in
  place with a short backoff; if the fault lasts, the function returns and the workflow waits
  `retry_after_seconds` before the next try. The retry budget is spent per fault episode
  (`fault_since`, carried from try to try, reset by the next acknowledged record): records
  that each fail once cost nothing, and only an outage longer than
  `sink_outage_budget_seconds` fails the file (`SinkUnavailableError`), which halts it;
* any other answer (4xx, 3xx) is `SinkRejectedError`: the same record cannot succeed.

Its records come straight from the landing object: the chunk's two entries of Split's chunk
index give its byte range, one ranged GET of the pinned version reads exactly those bytes, and
the parser Split validated them with turns them into records (`chunk_format`).
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from collections.abc import Callable, Generator
from typing import Any

from chunk_format import chunk_byte_range, chunk_records, idempotency_key, index_entries_range
from contract import (
    METRIC_NAMESPACE,
    RECORDS_SENT_METRIC,
    SINK_ERRORS_METRIC,
    ChunkProgress,
    ChunkTask,
    KeyOutsidePrefixError,
    RegisterEnv,
    SinkRejectedError,
    SinkUnavailableError,
    StaleExecutionError,
    chunk_index_key,
    keys_of,
    manifest_key,
    work_prefix,
)
from ledger import Ledger, LedgerConflict
from runtime import BoundLogger, aws_client, emit_metrics, lambda_handler, pick

#: Time kept in hand at the deadline for the last progress write and the return: this much,
#: or a tenth of the invocation's time if that is less.
DEADLINE_MARGIN_SECONDS = 3.0
#: In-place retries of one record: waits before each (then the function returns and waits in the workflow).
RETRY_BACKOFF_SECONDS = (0.2, 0.5, 1.0, 2.0)
#: Bounds of the workflow's wait between tries while the core system is unavailable.
MIN_RETRY_AFTER_SECONDS, MAX_RETRY_AFTER_SECONDS = 1, 60
#: Progress is written to the ledger at least this often while records flow, and exactly at
#: every stop (done, deadline, outage, rejection). After a hard crash (the process killed by a
#: timeout) the retry continues at the last progress written: at most this long of records is
#: sent again, each with its idempotency key, so the core system registers none twice. 0 writes
#: after every record: exact after a crash too, at one conditional DynamoDB write per record
#: (measured on the local runtime: throughput fell from about 1,200 to 55 records/s).
PROGRESS_EVERY_SECONDS = 1.0


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

    def post(self, body: bytes, headers: dict[str, str], timeout: float) -> int:
        """POST and return the HTTP status; transport failures raise (OSError, HTTPException)."""
        self._connection.timeout = timeout
        if self._connection.sock is not None:
            self._connection.sock.settimeout(timeout)
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
    ) -> None:
        self.task, self.config, self.ledger = task, config, ledger
        self.clock, self.remaining, self.sleep, self.log = clock, remaining_seconds, sleep, log
        self.chunk_index, self.chunk_size = int(task["chunk_index"]), int(task["chunk_size"])
        self.chunk_start = self.chunk_index * self.chunk_size
        self.fault_since: float | None = task.get("fault_since")
        self.sent = 0
        self.errors = 0  # failed tries of this invocation (retried, or the rejection)
        self.saved = -1
        self.last_save = clock()
        self.margin = min(DEADLINE_MARGIN_SECONDS, remaining_seconds() / 10)

    def check(self) -> None:
        if self.chunk_index < 0 or self.chunk_size < 1:
            raise ValueError(f"chunk_index {self.chunk_index} must be >= 0 and chunk_size {self.chunk_size} >= 1")
        if not self.task["chunk_prefix"].startswith(work_prefix(self.config.tenant_id)):
            raise KeyOutsidePrefixError(
                f"chunk_prefix {self.task['chunk_prefix']!r} is outside tenant {self.config.tenant_id!r}'s work prefix"
            )
        if not self.task["key"].startswith(self.config.landing_prefix):
            raise KeyOutsidePrefixError(
                f"key {self.task['key']!r} is outside the landing prefix {self.config.landing_prefix!r}"
            )

    def first_record(self) -> int:
        """Where to start: past everything acknowledged; refuses a stale execution."""
        position = self.ledger.read()
        execution = self.task["execution_name"]
        if position.execution != execution or not position.running:
            raise StaleExecutionError(
                f"execution {execution} is not the tenant's current running execution "
                f"(current: {position.execution}, {position.status}); nothing was sent. "
                "A failed file continues with `ops resume`, never with a redrive"
            )
        return max(int(self.task["start_record"]), self.chunk_start, position.next_record)

    def run(self, lines: Any, sink: _SinkConnection) -> ChunkProgress:
        next_record = self.first_record()
        index = self.chunk_start  # file position of the line at hand
        try:
            for _, line in lines:
                record = line.rstrip(b"\r\n")
                if not record:
                    continue
                if index - self.chunk_start >= self.chunk_size:
                    # More records than chunk_size would reuse the next chunk's idempotency keys.
                    raise ValueError(f"chunk {self.chunk_index} holds more than chunk_size={self.chunk_size} records")
                if index >= next_record:
                    if self.sent and self.remaining() < self.config.sink_timeout_seconds + self.margin:
                        # The next record might not finish before the deadline: continue in a new invocation.
                        return self._progress(next_record, done=False, retry_after=0)
                    retry_after = self._send(record, index, sink)
                    if retry_after is not None:
                        return self._progress(next_record, done=False, retry_after=retry_after)
                    next_record = index + 1
                    self._save(next_record)
                index += 1
            next_record = max(next_record, index)
            return self._progress(next_record, done=True, retry_after=0)
        finally:
            self._save(next_record, force=True)

    def _send(self, record: bytes, index: int, sink: _SinkConnection) -> int | None:
        """Send one record until acknowledged; None when it was, else seconds to wait first."""
        where = f"chunk {self.chunk_index} record {index - self.chunk_start} (file record {index})"
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": idempotency_key(self.task["bucket"], self.task["key"], self.task["version_id"], index),
            "X-Tenant-Id": self.config.tenant_id,
        }
        for backoff in (*RETRY_BACKOFF_SECONDS, None):
            timeout = max(0.1, min(self.config.sink_timeout_seconds, self.remaining() - self.margin))
            try:
                status = sink.post(record, headers, timeout)
                problem = None if 200 <= status < 300 else f"HTTP {status}"
            except (OSError, http.client.HTTPException) as error:
                status, problem = 0, _transport_problem(error, timeout)
            if problem is not None:
                self.errors += 1
            if problem is None:
                if self.fault_since is not None:
                    self.log.info("core system answers again", extra={"outage_seconds": round(self.clock() - self.fault_since, 3)})
                self.fault_since = None
                self.sent += 1
                return None
            # Raising leaves `run`, whose `finally` records the progress up to this record.
            if status and status != 429 and status < 500:
                raise SinkRejectedError(
                    f"{where}: {problem}", status=status, chunk_index=self.chunk_index, record_index=index
                )
            now = self.clock()
            if self.fault_since is None:
                self.fault_since = now
            outage = now - self.fault_since
            if outage >= self.config.sink_outage_budget_seconds:
                raise SinkUnavailableError(
                    f"{where}: core system unavailable for {outage:.0f} s, longer than the outage budget "
                    f"({self.config.sink_outage_budget_seconds:g} s); last answer: {problem}",
                    next_record=index,
                )
            if backoff is None or self.remaining() < backoff + timeout + self.margin:
                self.log.warning("core system unavailable; waiting before the next try",
                                 extra={"problem": problem, "outage_seconds": round(outage, 3), "file_record": index})
                return int(min(MAX_RETRY_AFTER_SECONDS, max(MIN_RETRY_AFTER_SECONDS, outage / 2)))
            self.sleep(backoff)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _save(self, next_record: int, *, force: bool = False) -> None:
        """Write progress to the ledger (at most every PROGRESS_EVERY_SECONDS unless forced)."""
        if next_record <= self.saved or (
            not force and PROGRESS_EVERY_SECONDS and self.clock() - self.last_save < PROGRESS_EVERY_SECONDS
        ):
            return
        try:
            self.ledger.record_progress(
                self.task["execution_name"],
                next_record,
                chunk_size=self.chunk_size,
                chunk_count=int(self.task["chunk_count"]),
                record_count=int(self.task["record_count"]),
            )
        except LedgerConflict:
            position = self.ledger.read()
            if position.execution != self.task["execution_name"] or not position.running:
                raise StaleExecutionError(
                    f"execution {self.task['execution_name']} lost its place (current: {position.execution}, "
                    f"{position.status}); stopping"
                ) from None
        self.saved, self.last_save = next_record, self.clock()

    def _progress(self, next_record: int, *, done: bool, retry_after: int) -> ChunkProgress:
        task = {key: self.task[key] for key in keys_of(ChunkTask) if key in self.task}  # type: ignore[literal-required]
        return ChunkProgress(  # type: ignore[typeddict-item]
            **{**task, "start_record": next_record, "fault_since": self.fault_since},
            done=done,
            retry_after_seconds=retry_after,
            records_sent=self.sent,
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
) -> ChunkProgress:
    """Send the task's records in order from its first unacknowledged one; see the module docstring.

    `s3` is a boto3 S3 client (the work bucket's manifest and chunk index, a ranged read of
    the landing object version); `ledger` the tenant's ledger;
    `remaining_seconds` how long the invocation may still run.
    """
    register = Register(task, config=config, ledger=ledger, clock=clock, remaining_seconds=remaining_seconds,
                        sleep=sleep, log=log)
    register.check()
    records = read_chunk(s3, config, task)
    sink = _SinkConnection(config.sink_url, config.sink_timeout_seconds)
    try:
        return register.run(records, sink)
    finally:
        sink.close()
        records.close()
        publish_metrics(register, config.tenant_id, clock())


def read_manifest(s3: Any, config: RegisterEnv, task: ChunkTask) -> dict[str, Any]:
    """The file's manifest (format, CSV header, chunk size), checked against the task: the
    index it names must be of this very object version, split into chunks of this size."""
    manifest: dict[str, Any] = json.loads(
        s3.get_object(Bucket=config.work_bucket, Key=manifest_key(task["chunk_prefix"]))["Body"].read()
    )
    source = manifest.get("source", {})
    if (source.get("bucket"), source.get("key"), source.get("version_id")) != (
        task["bucket"], task["key"], task["version_id"]
    ):
        raise ValueError(
            f"the manifest under {task['chunk_prefix']!r} is of another object version; nothing was sent"
        )
    if manifest.get("chunk_index_key") != chunk_index_key(task["chunk_prefix"]):
        raise ValueError(f"the manifest under {task['chunk_prefix']!r} has no chunk index; nothing was sent")
    if int(manifest["chunk_size"]) != int(task["chunk_size"]):
        raise ValueError(f"the index has chunks of {manifest['chunk_size']} records, "
                         f"the task {task['chunk_size']}; nothing was sent")
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
    they start: two index entries by one ranged GET, then one ranged GET of the object."""
    index = int(task["chunk_index"])
    if index >= int(manifest["chunk_count"]):
        raise ValueError(f"chunk {index} is past the file's {manifest['chunk_count']} chunks")
    entries = s3.get_object(
        Bucket=config.work_bucket, Key=chunk_index_key(task["chunk_prefix"]), Range=index_entries_range(index)
    )["Body"].read()
    start, end = chunk_byte_range(entries)
    body = s3.get_object(
        Bucket=task["bucket"], Key=task["key"], VersionId=task["version_id"], Range=f"bytes={start}-{end - 1}"
    )["Body"]
    return body, start


def publish_metrics(register: Register, tenant_id: str, now: float) -> None:
    """One EMF record per invocation, whatever its end (done, deadline, outage, rejection):
    `RecordsSent` and `SinkErrors`, both always present, so a period with traffic has a
    point of each (the sink-errors alarm's rate and the dashboard divide one by the other)."""
    emit_metrics(namespace=METRIC_NAMESPACE, tenant_id=tenant_id, now=now,
                 metrics={RECORDS_SENT_METRIC: (register.sent, "Count"),
                          SINK_ERRORS_METRIC: (register.errors, "Count")})


@lambda_handler(
    "register_chunk",
    RegisterEnv,
    log_fields=lambda event: pick(event, "execution_name", "key", "version_id", "chunk_index", "start_record"),
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
    log.info("chunk progress", extra=pick(result, "records_sent", "start_record", "done", "retry_after_seconds"))
    return result
