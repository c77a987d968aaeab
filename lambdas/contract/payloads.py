"""The payloads that travel between the controller, the workflow's states and the functions.

Only S3 references and counts: the execution history never holds a record. The workflow builds
its JSONPath selectors from these key sets (`keys_of`, see `pipeline_constructs/definitions.py`),
so a payload field and its selector cannot drift apart.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict


class FileRef(TypedDict):
    """The execution input: the exact object version one "Object Created" event announced."""

    tenant: str
    event_id: str
    bucket: str
    key: str
    version_id: str
    size: int
    etag: str | None
    event_time: str


class ExecutionInput(FileRef):
    """The input of one execution: the file, and the first record to send (0, or where a
    resumed file continues)."""

    start_record: int


class SplitRequest(TypedDict):
    """What the Split state passes to the split function. Chunks are kept per file (`file_id`
    is the event id), so a resumed execution reuses them."""

    tenant: str
    bucket: str
    key: str
    version_id: str
    event_id: str
    start_record: int


class DuplicateOf(TypedDict):
    """The earlier object version (of the same tenant) whose bytes a file repeats."""

    key: str
    version_id: str
    event_id: str


class SplitResult(TypedDict):
    """What the split function returns (kept in the execution under `$.split`).

    `first_chunk`..`last_chunk` (inclusive): the chunk indexes still to register, from the
    chunk that holds `start_record`; `first_chunk > last_chunk` when there is nothing to send
    (a duplicate, an empty file). A range, not a list: nothing in the execution's state grows
    with the file. `content_sha256`: the SHA-256 of the object's bytes (None for chunks
    split before it was recorded). `duplicate_of`: with `duplicate_files: skip`, the processed
    file this one repeats byte for byte (then nothing is sent); else None."""

    manifest_key: str
    chunk_prefix: str
    chunk_size: int
    chunk_count: int
    record_count: int
    first_chunk: int
    last_chunk: int
    content_sha256: str | None
    duplicate_of: DuplicateOf | None


class ChunkTask(TypedDict):
    """One invocation of the register function: a chunk of a file version, from a record on.

    `start_record` is a position in the file (records before it are not sent again);
    `fault_since` is when the core system's current outage began (None: no outage), so the
    retry budget is spent per fault episode, not per chunk or per invocation.
    """

    tenant: str
    bucket: str
    key: str
    version_id: str
    execution_name: str
    chunk_prefix: str
    chunk_size: int
    chunk_count: int
    record_count: int
    chunk_index: int
    start_record: int
    fault_since: NotRequired[float | None]
    #: Register invocations of this chunk so far, counted by the workflow (the handler passes
    #: it back unchanged): a chunk that reaches its invocation budget fails, which bounds the
    #: page execution's history (`pipeline_constructs/budgets.py`).
    invocation: NotRequired[int]


class PageTask(TypedDict):
    """The input of one page execution (the child state machine): the chunks `first_chunk` to
    `min(first_chunk + chunks per page - 1, last_chunk)` of a file, in order.

    `execution_name` is the PARENT execution's name: the register function's fence checks it
    against the ledger's running execution (the page execution has its own name)."""

    tenant: str
    bucket: str
    key: str
    version_id: str
    execution_name: str
    chunk_prefix: str
    chunk_size: int
    chunk_count: int
    record_count: int
    start_record: int
    first_chunk: int
    last_chunk: int


#: The register function writes a chunk's progress to the ledger at least this often while
#: records flow, and exactly at every stop (done, deadline, outage, rejection); each write also
#: notices `ops pause`. After a hard crash (the process killed by a timeout) the retry continues
#: at the last progress written: at most this long of records is sent again, each with its
#: idempotency key, so the core system registers none twice. 0 writes after every record: exact
#: after a crash too, at the cost of one conditional DynamoDB write per record.
PROGRESS_EVERY_SECONDS = 1.0


class ChunkProgress(ChunkTask):
    """What the register function returns: the task to run next (same chunk, later record),
    whether the chunk is done, and how long to wait first (the core system is unavailable);
    `paused`: the tenant is paused (`ops pause`), the file stops here without failing."""

    done: bool
    retry_after_seconds: int
    records_sent: int
    paused: bool


class CloseEvent(TypedDict):
    """An execution closed: what the workflow's last state (or the status-change rule) says.

    A success carries Split's `content_sha256` and `duplicate_of` (the ledger remembers the
    content of a file that succeeded, and records a duplicate as such)."""

    execution_name: str
    status: str
    error: NotRequired[str | None]
    cause: NotRequired[str | None]
    content_sha256: NotRequired[str | None]
    duplicate_of: NotRequired[DuplicateOf | None]


class ControllerResult(TypedDict):
    """What the controller returns for one message (the event source reads `batchItemFailures`:
    a message listed there stays in the queue)."""

    batchItemFailures: list[dict[str, str]]
    outcome: str  # started | running | done | waiting | quarantined
    execution_name: str | None


def keys_of(payload_type: type) -> tuple[str, ...]:
    """The keys of a payload `TypedDict`, in declaration order."""
    return tuple(payload_type.__annotations__)


#: Where the workflow keeps Split's result in the execution's state.
SPLIT_RESULT_PATH = "$.split"
#: Where the workflow keeps a caught error (`Error`, `Cause`).
ERROR_RESULT_PATH = "$.error"
