"""The one contract between the infrastructure (`pipeline_constructs/`) and the handlers.

Everything that both sides must spell the same way is defined here, once: the functions'
environment, the payloads that travel between states (`FileRef`, `SplitRequest`,
`SplitResult`, `ChunkTask`), the error names the workflow retries or catches, the metric
names and dimensions, the closed execution statuses and the work-bucket key formats.

Standard library only: the constructs import this module at synth time (`from lambdas import
contract`), the handlers import it at run time (`import contract`, it is deployed with them),
the local runtime and the tests use it too.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import datetime as _dt
import hashlib
import json
import logging
import os
import re
import typing
import urllib.parse
from collections.abc import Iterator
from typing import Any, NotRequired, TypedDict, TypeVar

# --- the functions' environment ------------------------------------------------------------
#
# One frozen dataclass per function. The environment variable of a field is its name in
# upper case; `environment()` renders an instance for the construct, `from_env()` reads it
# back in the handler, typed and checked. A field's metadata may hold `minimum` (numbers),
# `choices` (strings) or `schemes` (URLs); `implicit`: the variable is left out while the value
# is the field's default, and read as the default when absent (so that a new field changes no
# template of the app as shipped).


class FunctionEnvironmentError(RuntimeError):
    """The function's environment is incomplete or invalid (a deployment fault)."""


def env_name(field_name: str) -> str:
    """The environment variable that holds a config field: `tenant_id` -> `TENANT_ID`."""
    return field_name.upper()


ON_FAILURE = ("halt", "continue")
#: The app's CloudWatch namespace as shipped; a qualified app's is `metric_namespace()`.
METRIC_NAMESPACE = "OrderedIngest"
#: The value of an optional environment variable that is not set (Lambda keeps no empty ones).
NONE = "-"
#: How a tenant's files are put in order: by their arrival in the FIFO queue, or by a sequence
#: number in their key names (the queue is then a standard queue; see `sequence_of`).
ORDERINGS = ("arrival", "key_sequence")


@dataclasses.dataclass(frozen=True)
class ControllerEnv:
    """The controller's environment.

    `waiting_visibility_seconds`: how long a message that must wait stays invisible; the
    close of the file ahead makes it visible at once (fast hand-off), this is the fallback.
    """

    tenant_id: str
    state_machine_arn: str
    ledger_table_name: str
    queue_url: str
    metric_namespace: str
    on_failure: str = dataclasses.field(metadata={"choices": ON_FAILURE})
    waiting_visibility_seconds: int = dataclasses.field(metadata={"minimum": 1})
    #: Where an unusable message is quarantined (`quarantine_prefix`), and what a usable
    #: file event names: the landing bucket and the tenant's prefix.
    work_bucket: str
    landing_bucket: str
    landing_prefix: str
    ordering: str = dataclasses.field(default="arrival", metadata={"choices": ORDERINGS})
    #: `key_sequence` only: the regular expression that finds the sequence number in a key.
    sequence_pattern: str = dataclasses.field(default="", metadata={"optional": True})
    #: `key_sequence` only: the sequence number of the tenant's first file.
    first_sequence: int = dataclasses.field(default=1, metadata={"minimum": 0})


@dataclasses.dataclass(frozen=True)
class CloserEnv:
    """The environment of the function that records a closed execution (workflow end)."""

    tenant_id: str
    state_machine_arn: str
    ledger_table_name: str
    queue_url: str
    alarm_topic_arn: str
    on_failure: str = dataclasses.field(metadata={"choices": ON_FAILURE})


@dataclasses.dataclass(frozen=True)
class CompletionEnv:
    """The environment of the completion entry point (the core system confirms or rejects the
    tenant's waiting file; docs/core-system.md, "Completion callback")."""

    tenant_id: str
    ledger_table_name: str


FORMATS = ("csv", "jsonl")
#: `process`: a byte-identical re-upload is processed again; `skip`: it is recorded as a
#: duplicate of the processed file, nothing sent (docs/design.md §4.5).
DUPLICATE_FILES = ("process", "skip")


@dataclasses.dataclass(frozen=True)
class SplitEnv:
    """The split function's environment.

    `ledger_table_name`: where split looks up a file's content (`duplicate_files: skip`)."""

    tenant_id: str
    format: str = dataclasses.field(metadata={"choices": FORMATS})
    chunk_size: int = dataclasses.field(metadata={"minimum": 1})
    work_bucket: str
    landing_prefix: str
    ledger_table_name: str
    duplicate_files: str = dataclasses.field(metadata={"choices": DUPLICATE_FILES})
    #: The most chunks a file may have: the workflow runs at most this many (pages of chunks,
    #: each page a child execution), so that every execution's history stays bounded. Split
    #: refuses a bigger file before any record is sent (`FileTooLargeError`).
    max_chunks: int = dataclasses.field(metadata={"minimum": 1})


#: How register authenticates to the core system (`sink.auth.type`): nothing, a bearer token
#: read from a Secrets Manager secret, or an AWS Signature Version 4 of each request.
SINK_AUTH_TYPES = ("none", "bearer", "sigv4")
#: The services a sigv4 sink is signed for: API Gateway (IAM authorization), a Lambda function URL.
SIGV4_SERVICES = ("execute-api", "lambda")


@dataclasses.dataclass(frozen=True)
class RegisterEnv:
    """The register-chunk function's environment."""

    tenant_id: str
    work_bucket: str
    ledger_table_name: str
    # urllib would also open file:// and ftp:// URLs; a sink is only ever HTTP(S).
    sink_url: str = dataclasses.field(metadata={"schemes": ("http", "https")})
    sink_timeout_seconds: float = dataclasses.field(metadata={"minimum": 0.0, "exclusive": True})
    #: How long the core system may stay unavailable (one fault episode) before the file fails.
    sink_outage_budget_seconds: float = dataclasses.field(metadata={"minimum": 0.0, "exclusive": True})
    #: Register reads its chunk from the landing object (ranged GET): only under this prefix.
    landing_prefix: str
    #: Records per POST: 1 is the seed's contract (one record per POST); more sends JSON arrays
    #: (the batch contract, `sink_client.py`).
    sink_batch_size: int = dataclasses.field(default=1, metadata={"minimum": 1})
    #: `sink.auth.type`. The environment names the secret, never holds its value.
    sink_auth: str = dataclasses.field(default="none", metadata={"choices": SINK_AUTH_TYPES})
    #: bearer: the secret's name or ARN; its SecretString is the token itself, or JSON
    #: `{"token": "..."}` (`sink_auth.token_of`).
    sink_auth_secret: str = dataclasses.field(default="", metadata={"optional": True})
    #: bearer: how long a token read is used before the secret is read again (a 401 reads it
    #: again at once, once).
    sink_auth_cache_seconds: int = dataclasses.field(default=300, metadata={"minimum": 1})
    #: sigv4: the service (`SIGV4_SERVICES`) and the Region the signature is for.
    sink_auth_service: str = dataclasses.field(default="", metadata={"optional": True})
    sink_auth_region: str = dataclasses.field(default="", metadata={"optional": True})
    #: Where the RecordsSent, SinkRequests and SinkErrors metrics go: the app's, qualified.
    metric_namespace: str = dataclasses.field(default=METRIC_NAMESPACE, metadata={"implicit": True})


EnvT = TypeVar("EnvT")


def environment(config: Any) -> dict[str, str]:
    """The environment variables of a config instance, for the function's `environment=`."""
    return {env_name(f.name): str(getattr(config, f.name)) or NONE for f in dataclasses.fields(config)
            if not (f.metadata.get("implicit") and getattr(config, f.name) == f.default)}


def from_env(config_type: type[EnvT], source: typing.Mapping[str, str] | None = None) -> EnvT:
    """Read and check `config_type` from the environment; `FunctionEnvironmentError` names the variable."""
    source = os.environ if source is None else source
    hints = typing.get_type_hints(config_type)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(config_type):  # type: ignore[arg-type]
        name = env_name(field.name)
        raw = source.get(name, "").strip()
        if field.metadata.get("optional") and raw in ("", NONE):
            values[field.name] = ""
            continue
        if field.metadata.get("implicit") and not raw:
            values[field.name] = field.default
            continue
        if not raw:
            raise FunctionEnvironmentError(
                f"environment variable {name} is not set; the function's deployment must set it")
        values[field.name] = _convert(name, raw, hints[field.name], field.metadata)
    return config_type(**values)


def _convert(name: str, raw: str, kind: type, rules: typing.Mapping[str, Any]) -> Any:
    value: Any = raw
    if kind is int:
        try:
            value = int(raw)
        except ValueError:
            raise FunctionEnvironmentError(f"environment variable {name}={raw!r} is not an integer") from None
    elif kind is float:
        try:
            value = float(raw)
        except ValueError:
            raise FunctionEnvironmentError(f"environment variable {name}={raw!r} is not a number") from None
    if "minimum" in rules:
        minimum = rules["minimum"]
        if rules.get("exclusive") and not value > minimum:
            raise FunctionEnvironmentError(
                f"environment variable {name}={value} must be greater than {minimum}")
        if value < minimum:
            raise FunctionEnvironmentError(f"environment variable {name}={value} must be at least {minimum}")
    if "choices" in rules:
        value = value.lower()
        if value not in rules["choices"]:
            raise FunctionEnvironmentError(
                f"environment variable {name}={value!r} must be one of {', '.join(rules['choices'])}")
    if "schemes" in rules and urllib.parse.urlsplit(value).scheme not in rules["schemes"]:
        schemes = " or ".join(f"{s}://" for s in rules["schemes"])
        raise FunctionEnvironmentError(f"environment variable {name}={value!r} must be an {schemes} URL")
    return value


# --- payloads ------------------------------------------------------------------------------
#
# What travels between the controller, the states of the workflow and the functions. Only S3
# references and counts: the execution history never holds a record. The workflow builds its
# JSONPath selectors from these key sets (see `pipeline_constructs/definitions.py`).


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


#: A page execution's name: `<parent execution name>-p<first chunk of the page>` (unique per
#: parent execution; a resumed file's parent has a new name, so its pages do too). Built by
#: the workflow (`States.Format`), so a parent's name leaves room for it (`execution_name`).
PAGE_EXECUTION_NAME_FORMAT = "{}-p{}"
#: A section execution's name (a file of more than one section): `<parent execution
#: name>-s<first chunk of the section>`. Its input is a `PageTask` whose `first_chunk` is the
#: section's first chunk.
SECTION_EXECUTION_NAME_FORMAT = "{}-s{}"


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


# --- errors the workflow and the queue react to ----------------------------------------------
#
# The Lambda runtime reports an unhandled exception with `errorType` = its class name, and the
# workflow's Retry/Catch match that name. Each class says at which level the handler wrapper
# logs it: intended control flow at INFO, transient faults at WARNING, the rest at ERROR (the
# level a metric filter pages on).


class PipelineError(Exception):
    """An expected failure with a known meaning; logged without a stack trace."""

    log_level = logging.ERROR
    #: What the handler's log line says before the error's own message.
    log_message = ""

    @property
    def log_fields(self) -> dict[str, Any]:
        """Structured fields added to the log line (never record content)."""
        return {}


class SinkRetryableError(PipelineError):
    """The sink is temporarily unavailable (429, 5xx, timeout, connection); retry the chunk."""

    log_level = logging.WARNING
    log_message = "sink unavailable, chunk will be retried"


class SinkRejectedError(PipelineError):
    """The sink refused a record (other 4xx, 3xx); retrying the same record cannot help."""

    log_message = "sink rejected a record"

    def __init__(self, message: str, *, status: int, chunk_index: int, record_index: int) -> None:
        super().__init__(message)
        self.status = status
        self.chunk_index = chunk_index
        self.record_index = record_index

    @property
    def log_fields(self) -> dict[str, Any]:
        return {"status": self.status, "chunk_index": self.chunk_index, "record_index": self.record_index}


class SinkAuthError(PipelineError):
    """The core system refused the register function's credentials (401 after the token was
    read again, or 403), or the bearer token's secret cannot be read. Retrying cannot help: the
    file fails and `on_failure` applies. The message names the secret and the HTTP status,
    never a credential (docs/operations.md, "The core system refuses the credentials")."""

    log_message = "core system refused the credentials"

    def __init__(self, message: str, *, status: int | None, credential: str) -> None:
        super().__init__(message)
        self.status = status
        #: What credential was refused: the secret's id, or sigv4's service and Region.
        self.credential = credential

    @property
    def log_fields(self) -> dict[str, Any]:
        return {"status": self.status, "credential": self.credential}


class MalformedFileError(PipelineError):
    """The file cannot be parsed; the message names the line, never its content."""

    log_message = "file is malformed"

    def __init__(self, line_number: int, problem: str) -> None:
        super().__init__(f"line {line_number}: {problem}")
        self.line_number = line_number

    @property
    def log_fields(self) -> dict[str, Any]:
        return {"line_number": self.line_number}


class FileTooLargeError(PipelineError):
    """The file has more chunks than the workflow may run with a bounded history; refused by
    Split before any record is sent. The message says the limit and what to change."""

    log_message = "file is too large"

    def __init__(self, message: str, *, chunk_count: int, max_chunks: int) -> None:
        super().__init__(message)
        self.chunk_count = chunk_count
        self.max_chunks = max_chunks

    @property
    def log_fields(self) -> dict[str, Any]:
        return {"chunk_count": self.chunk_count, "max_chunks": self.max_chunks}


class SplitTimeLimitError(PipelineError):
    """Validating the file would not finish within Split's time limit: refused before the
    deadline (rather than timed out by Lambda), before any record is sent, with how far the
    pass got. The message says what to change."""

    log_message = "file could not be validated within the time limit"

    def __init__(self, message: str, *, bytes_read: int, chunks_indexed: int) -> None:
        super().__init__(message)
        self.bytes_read = bytes_read
        self.chunks_indexed = chunks_indexed

    @property
    def log_fields(self) -> dict[str, Any]:
        return {"bytes_read": self.bytes_read, "chunks_indexed": self.chunks_indexed}


class KeyOutsidePrefixError(PipelineError, ValueError):
    """An input names an S3 key outside the tenant's own prefix; refused, never read."""


class SinkUnavailableError(PipelineError):
    """The core system stayed unavailable for the whole outage budget; the file fails (and
    halts the tenant) at the first record not acknowledged."""

    log_message = "core system unavailable for longer than the outage budget"

    def __init__(self, message: str, *, next_record: int) -> None:
        super().__init__(message)
        self.next_record = next_record

    @property
    def log_fields(self) -> dict[str, Any]:
        return {"next_record": self.next_record}


class UnusableMessageError(PipelineError):
    """A queue message that is not a usable file event of this tenant (not JSON, not an S3
    "Object Created" event, no version id, another bucket, a key outside the prefix, ...).

    Retrying cannot help, so the controller quarantines the message instead of blocking the
    tenant's queue on it. `reason` says what is wrong and never quotes the message's content.
    """

    log_message = "unusable message quarantined"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    @property
    def log_fields(self) -> dict[str, Any]:
        return {"reason": self.reason}


class StaleExecutionError(PipelineError):
    """This execution is not the tenant's current one (a hand-made redrive or start, or a
    superseded attempt): it is refused before it sends anything."""

    log_message = "execution refused: not the tenant's current execution"


# --- metrics -------------------------------------------------------------------------------

#: Published by the controller (EMF) for every message it handles, after reading the ledger:
#: 0 while a file of the tenant runs, else now - max(SentTimestamp, the last close). It is the
#: time the head message waited while nothing ran (a stall), not its time in the queue.
HEAD_WAIT_METRIC = "HeadMessageWaitSeconds"
#: Published by the controller (EMF, Maximum) while `ops pause` holds the tenant: how long it has
#: been paused (the `paused` alarm; the queue-age alarm reads 0 while it is there).
PAUSED_METRIC = "PausedSeconds"
#: The error a page (or section) execution's stop for `ops pause` goes up the Map states with;
#: caught, so no execution fails (definitions.py).
TENANT_PAUSED_ERROR = "TenantPaused"
TENANT_DIMENSION = "Tenant"
#: Published by the controller (EMF) for each message it quarantined (`UnusableMessageError`).
QUARANTINED_MESSAGES_METRIC = "QuarantinedMessages"
#: Metric filters cannot set constant dimensions, so tenant and function go in the name.
ERROR_LOG_METRIC = "ErrorLogLines"


def error_log_metric_name(tenant_id: str, role: str) -> str:
    """`ErrorLogLines-<tenant>-<role>`: ERROR lines a function of a tenant logged."""
    return ERROR_LOG_METRIC_NAME.render(tenant_id, role=role)


#: The JSON log field a metric filter matches ERROR lines on (Lambda's JSON log format).
LOG_LEVEL_FIELD = "level"

#: Uploads to the landing bucket outside every tenant prefix (the shared stack's metric filter
#: on the unmatched-uploads log group counts one per event; no dimensions).
UNMATCHED_UPLOADS_METRIC = "UnmatchedUploads"


#: Published by the controller when a file event arrives older (by event time) than the last
#: file started: S3 does not order notifications across keys (docs/design.md §4.8).
LATE_ARRIVAL_METRIC = "LateArrivals"
#: Published by the controller (`key_sequence` ordering) while the next sequence number is
#: missing and a later file waits: seconds since the tenant could have gone on.
SEQUENCE_GAP_METRIC = "SequenceGapSeconds"


def sequence_of(key: str, pattern: str) -> int | None:
    """The sequence number in an object key: the named group `seq` of `pattern` (or its only
    group, or the whole match) searched in the key. None if the key has none."""
    match = re.search(pattern, key)
    if match is None:
        return None
    groups = match.groupdict()
    text = groups["seq"] if "seq" in groups else (match.group(1) if match.re.groups else match.group(0))
    return int(text) if text and text.isascii() and text.isdigit() else None
#: Published by the register function (EMF) at the end of every invocation and at least once a
#: minute while it sends (`register_chunk.METRICS_EVERY_SECONDS`), both every time: records the
#: core system acknowledged, and failed tries (a 429/5xx/timeout/connection failure retried,
#: or the rejection that fails the file). The sink-errors alarm and the dashboard use them.
RECORDS_SENT_METRIC = "RecordsSent"
SINK_ERRORS_METRIC = "SinkErrors"
#: Published with them: POSTs the core system acknowledged (= RecordsSent in record mode, one
#: per batch in batch mode). The failed share of tries is SinkErrors / (SinkErrors +
#: SinkRequests): dividing by records would hide a batch core system that fails half its tries.
SINK_REQUESTS_METRIC = "SinkRequests"


@dataclasses.dataclass(frozen=True)
class EmfMetric:
    """A metric a handler publishes in CloudWatch's embedded metric format: its CloudWatch
    unit, and the handler module that publishes it (its function's `Handler` is
    `lambdas.<emitter>.handler`)."""

    unit: str
    emitter: str


#: The one dimension set of every EMF metric (a metric is the name plus all its dimensions:
#: an alarm on another set watches a metric nobody publishes).
EMF_DIMENSIONS = (TENANT_DIMENSION,)
#: Every EMF metric by name: the handlers publish from this table (`runtime.emf_line` takes
#: the unit here), and tests/test_alarm_sources.py checks each alarm's metric against it.
EMF_METRICS = {
    HEAD_WAIT_METRIC: EmfMetric("Seconds", "controller"),
    PAUSED_METRIC: EmfMetric("Seconds", "controller"),
    QUARANTINED_MESSAGES_METRIC: EmfMetric("Count", "controller"),
    LATE_ARRIVAL_METRIC: EmfMetric("Count", "controller"),
    SEQUENCE_GAP_METRIC: EmfMetric("Seconds", "controller"),
    RECORDS_SENT_METRIC: EmfMetric("Count", "register_chunk"),
    SINK_ERRORS_METRIC: EmfMetric("Count", "register_chunk"),
    SINK_REQUESTS_METRIC: EmfMetric("Count", "register_chunk"),
}

#: The field the Lambda runtime itself writes in JSON log format for its own records (an
#: unhandled exception outside the handler's wrapper, an import error): not `level`.
RUNTIME_LOG_LEVEL_FIELD = "log_level"
#: Statuses of Lambda's platform records in JSON log format (`{"type": "platform.report",
#: "record": {"status": ...}}`, also `platform.runtimeDone`, and `platform.initReport` for the
#: init) that mean the invocation or the init failed: `timeout` (the function ran out of time),
#: `error` and `failure` (a crash, an init failure); the Telemetry API schema's statuses are
#: success, failure, error and timeout
#: (https://docs.aws.amazon.com/lambda/latest/dg/telemetry-schema-reference.html).
#: A platform record has no level field. AWS assigns it a level only to filter system logs:
#: WARN for a `platform.report` or `platform.runtimeDone` whose status is not `success`
#: (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-log-level.html,
#: "Event mapping for system log level"), never ERROR: the filter matches the status.
PLATFORM_FAILURE_STATUSES = ("timeout", "error", "failure")


def error_log_filter_pattern() -> str:
    """The metric filter pattern of a function's error lines (one JSON pattern, ORed terms):
    the handlers' ERROR lines (`level`), the runtime's own error records (`log_level`), and
    the platform records of a timeout or a crash (`record.status`). Plain-text lines (a
    traceback the runtime prints before it switches to JSON) are not JSON and never match;
    the platform record of the same failure does."""
    terms = [f'$.{LOG_LEVEL_FIELD} = "ERROR"', f'$.{RUNTIME_LOG_LEVEL_FIELD} = "ERROR"']
    terms += [f'$.record.status = "{status}"' for status in PLATFORM_FAILURE_STATUSES]
    return "{ " + " || ".join(f"({term})" for term in terms) + " }"


# --- Step Functions ------------------------------------------------------------------------

CLOSED_STATUSES = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"})
FAILED_STATUSES = frozenset({"FAILED", "TIMED_OUT", "ABORTED"})


def execution_arn(state_machine_arn: str, execution_name: str) -> str:
    """`arn:P:states:R:A:stateMachine:NAME` -> `arn:P:states:R:A:execution:NAME:EXEC`.

    A version or alias ARN (`...:stateMachine:NAME:live`, `...:NAME:3`) gives the same: an
    execution started through one is named after the state machine, without the qualifier
    (docs/operations.md, "Versions, aliases and rollback")."""
    parts = state_machine_arn.split(":")
    if len(parts) not in (7, 8) or parts[5] != "stateMachine" or not all(parts[6:]):
        raise ValueError(f"not a state machine ARN: {state_machine_arn!r}")
    return ":".join([*parts[:5], "execution", parts[6], execution_name])


# --- names the project builds for AWS ------------------------------------------------------
#
# Every family of names the app gives AWS (resources, executions, replayed events), with the
# longest name AWS accepts, in one table: `NAME_FAMILIES`. Config validation tells a user which
# derived name a tenant id breaks (`tightest_broken`), the constructs (through
# `pipeline_constructs/names.py`), the handlers, `ops` and the local runtime build their names
# from it, and tests/test_names.py builds the longest instance of each family and checks it
# against its limit. Secrets are not in it: the app names none (`sink.auth.secret` is the
# user's own). A name that could outgrow its limit is shortened by a hash, never cut short
# (two names cut short can collide).

APP_NAME = "OrderedIngest"
#: What the shared resources' names start with.
SHARED_PREFIX = "ordered-ingest"
#: The roles of a tenant pipeline's functions (`{role}`): each names its log group, error
#: metric filter and error-log alarm.
FUNCTION_ROLES = ("controller", "split", "register", "closer", "completion")
#: The longest alarm key (`{alarm}`: `<tenant>-<key>`, `ordered-ingest-<key>`); the alarm
#: factory refuses a longer one.
MAX_ALARM_KEY = 40
#: `States.ArrayRange` makes at most 1,000 items, and a file runs in at most three levels of
#: Maps over it (sections of pages of chunks; pipeline_constructs/budgets.py): no file has
#: more than 1,000**3 chunks, so no chunk index is longer than `MAX_CHUNK_INDEX`.
MAX_ARRAY_RANGE_ITEMS = 1_000
MAX_CHUNK_INDEX = MAX_ARRAY_RANGE_ITEMS**3 - 1
#: Step Functions' limit on an execution name (StartExecution `name`).
MAX_EXECUTION_NAME = 80
#: The longest name of a file's execution (any attempt): room is left for the page or
#: section suffix the workflow appends (`-p<first chunk>`, `-s<first chunk>`) at the largest
#: chunk index.
MAX_FILE_EXECUTION_NAME = MAX_EXECUTION_NAME - max(
    len(form.format("", MAX_CHUNK_INDEX)) for form in (PAGE_EXECUTION_NAME_FORMAT, SECTION_EXECUTION_NAME_FORMAT)
)

#: The digest in a hashed execution name and in a replayed event id: 128 bits of a SHA-256.
NAME_DIGEST_CHARS = 32

#: The longest value of each placeholder but `{id}` (the tenant id: `MAX_TENANT_ID_LENGTH`).
#: `{index}`: a shard's or a catch-all bus's number (at most 99 event buses: routing.MAX_SHARDS);
#: `{number}`: a dashboard's (71 tenants each: a million tenants fit); `{function}`,
#: `{state_machine}`: another family's name at its limit; `{execution}`: a file's execution.
LONGEST_PARTS: dict[str, str] = {
    "index": "99",
    "number": "99999",
    "account": "123456789012",
    "region": "ap-southeast-5",
    "role": max(FUNCTION_ROLES, key=len),
    "alarm": "a" * MAX_ALARM_KEY,
    "function": "f" * 64,
    "state_machine": "s" * 80,
    "execution": "e" * MAX_FILE_EXECUTION_NAME,
    "chunk": str(MAX_CHUNK_INDEX),
    "digest": "0" * NAME_DIGEST_CHARS,
    "parameter": "alarm-topic-key-arn",  # the longest of `SHARED_PARAMETERS`
    "tenant": "t" * 42,  # `upload_access_point_name`'s tenant part: the id, or the id shortened by a hash
}


#: The qualifier in effect: "" (the app as shipped) or the tenants file's `qualifier`. Set for
#: the length of a synth (`application.build_app`) or of an `ops` command (`--qualifier`) by
#: `qualified()`. The handlers never read it: their environment holds qualified names.
_QUALIFIER: contextvars.ContextVar[str] = contextvars.ContextVar("qualifier", default="")
#: A qualifier: lowercase letters and digits, starting with a letter (no hyphen, so a qualified
#: name reads back to one qualifier); at most `MAX_QUALIFIER_LENGTH` characters.
QUALIFIER_PATTERN = r"^[a-z][a-z0-9]*$"


@contextlib.contextmanager
def qualified(qualifier: str | None) -> Iterator[None]:
    """Render every name fixed per account and Region with `qualifier` ("" or None: none) inside."""
    token = _QUALIFIER.set(qualifier or "")
    try:
        yield
    finally:
        _QUALIFIER.reset(token)


def current_qualifier() -> str:
    return _QUALIFIER.get()


def qualify(name: str, qualifier: str | None = None) -> str:
    """`name` with the qualifier (default: the one in effect) in front: `<q>-<name>`, after the
    leading `/` of a path (`/<q>-ordered-ingest/...`) and after `alias/` of a KMS alias."""
    qualifier = current_qualifier() if qualifier is None else qualifier
    if not qualifier:
        return name
    head = next((h for h in ("alias/", "/") if name.startswith(h)), "")
    return f"{head}{qualifier}-{name.removeprefix(head)}"


@dataclasses.dataclass(frozen=True)
class DerivedName:
    """A family of names: a template (placeholders `{id}`, the tenant id, and those of
    `LONGEST_PARTS`) and the longest name AWS accepts. `qualified`: the names are fixed per
    account and Region (or namespace), so the qualifier in effect starts them (`qualify`)."""

    kind: str
    template: str
    limit: int
    qualified: bool = True

    def render(self, tenant_id: str = "", *, qualifier: str | None = None, **parts: object) -> str:
        name = self.template.format(id=tenant_id, **parts)
        return qualify(name, qualifier) if self.qualified else name

    def longest(self, tenant_id: str | None = None, *, qualifier: str | None = None) -> str:
        """The longest name of the family (of `tenant_id`): every placeholder at its longest."""
        return self.render("a" * MAX_TENANT_ID_LENGTH if tenant_id is None else tenant_id, qualifier=qualifier,
                           **LONGEST_PARTS)

    def max_id_length(self, qualifier: str = "") -> int:
        """The longest tenant id this family's names accept (with `qualifier`)."""
        return self.limit - len(self.longest("", qualifier=qualifier))


_LAMBDA, _STATE_MACHINE, _RULE, _STACK = "Lambda function name", "state machine name", "EventBridge rule name", "stack name"
_LOG_GROUP, _ALARM, _BUS, _KMS_ALIAS = "log group name", "alarm name", "event bus name", "KMS alias name"

# Per tenant: the tenant id must be short enough for every one of them (`MAX_TENANT_ID_LENGTH`).
QUEUE = DerivedName("FIFO queue name", "{id}-event-queue.fifo", 80)
#: The queue of a tenant ordered by key sequence (a standard queue: the controller orders).
SEQUENCE_QUEUE = DerivedName("queue name", "{id}-event-queue", 80)
STATE_MACHINE = DerivedName(_STATE_MACHINE, "{id}-file-ingest-workflow", 80)
#: The child state machines that register one page of a file's chunks, or run one section of pages.
PAGE_STATE_MACHINE = DerivedName(_STATE_MACHINE, "{id}-file-ingest-page", 80)
SECTION_STATE_MACHINE = DerivedName(_STATE_MACHINE, "{id}-file-ingest-section", 80)
CONTROLLER_FUNCTION = DerivedName(_LAMBDA, "{id}-controller", 64)
SPLIT_FUNCTION = DerivedName(_LAMBDA, "{id}-split", 64)
REGISTER_FUNCTION = DerivedName(_LAMBDA, "{id}-register-chunk", 64)
CLOSER_FUNCTION = DerivedName(_LAMBDA, "{id}-close-file", 64)
#: The entry point the core system calls to confirm or reject a file (`completion.wait`).
COMPLETION_FUNCTION = DerivedName(_LAMBDA, "{id}-completion", 64)
TENANT_STACK = DerivedName(_STACK, APP_NAME + "-Tenant-{id}", 128)
RULE = DerivedName(_RULE, "{id}-object-created", 64)
STATUS_RULE = DerivedName(_RULE, "{id}-sfn-status", 64)
#: Standard, not FIFO: EventBridge refuses a FIFO queue as a target's dead-letter queue.
INTAKE_DLQ = DerivedName("SQS queue name", "{id}-intake-dlq", 80)
TENANT_ALARM = DerivedName(_ALARM, "{id}-{alarm}", 255)
ERROR_LOG_FILTER = DerivedName("metric filter name", "{id}-{role}-error-logs", 512)
#: In the app's metric namespace (`METRIC_NAMESPACES`, qualified), so not qualified itself.
ERROR_LOG_METRIC_NAME = DerivedName("metric name", ERROR_LOG_METRIC + "-{id}-{role}", 255, qualified=False)
TENANT_KEY_ALIAS = DerivedName(_KMS_ALIAS, "alias/" + SHARED_PREFIX + "/{id}", 256)
#: The S3 access point a tenant's `uploaders` put through (3 to 50 characters, unique per
#: account and Region): `{tenant}` is the tenant id, or, for an id longer than 42 characters,
#: its first letters and a digest (`upload_access_point_name`), so it limits no tenant id.
UPLOAD_ACCESS_POINT = DerivedName("S3 access point name", "{tenant}-uploads", 50)
#: What every tenant's state machine names share after the tenant id: a tenant id may not
#: contain it (IAM wildcards on one tenant's child executions would cover another's).
RESERVED_ID_PART = "-file-ingest-"

TENANT_NAMES: tuple[DerivedName, ...] = (
    QUEUE, SEQUENCE_QUEUE, STATE_MACHINE, PAGE_STATE_MACHINE, SECTION_STATE_MACHINE, CONTROLLER_FUNCTION,
    SPLIT_FUNCTION, REGISTER_FUNCTION, CLOSER_FUNCTION, COMPLETION_FUNCTION, TENANT_STACK, RULE, STATUS_RULE,
    INTAKE_DLQ, TENANT_ALARM, ERROR_LOG_FILTER, ERROR_LOG_METRIC_NAME, TENANT_KEY_ALIAS,
)
#: The longest tenant id every derived name accepts.
MAX_TENANT_ID_LENGTH = min(name.max_id_length() for name in TENANT_NAMES)

# Of functions and state machines, whoever's: their log groups (qualified by the function's or
# state machine's name); the alias every tenant's workflows are started through (one per state
# machine; docs/operations.md, "Versions, aliases and rollback").
FUNCTION_LOG_GROUP = DerivedName(_LOG_GROUP, "/aws/lambda/{function}", 512, qualified=False)
STATE_MACHINE_LOG_GROUP = DerivedName(_LOG_GROUP, "/aws/vendedlogs/states/{state_machine}", 512, qualified=False)
WORKFLOW_ALIAS = DerivedName("state machine alias name", "live", 80, qualified=False)

# Shared: fixed, or numbered per shard (`{index}`), per account and Region, per dashboard.
SHARED_STACK = DerivedName(_STACK, APP_NAME + "-Shared", 128)
#: The second and later dashboards, a stack each (the first is in the shared stack).
DASHBOARD_STACK = DerivedName(_STACK, APP_NAME + "-Dashboard-{number}", 128)
#: Dashboard names are unique per account in every Region: the Region is part of them.
FIRST_DASHBOARD = DerivedName("dashboard name", APP_NAME + "-{region}", 255)
DASHBOARD = DerivedName("dashboard name", APP_NAME + "-{region}-{number}", 255)
LANDING_BUCKET = DerivedName("S3 bucket name", SHARED_PREFIX + "-landing-{account}-{region}", 63)
WORK_BUCKET = DerivedName("S3 bucket name", SHARED_PREFIX + "-work-{account}-{region}", 63)
SHARED_ALARM = DerivedName(_ALARM, SHARED_PREFIX + "-{alarm}", 255)
SHARED_KEY_ALIAS = DerivedName(_KMS_ALIAS, "alias/" + SHARED_PREFIX, 256)
#: Where the shared stack publishes its key's ARN. SSM counts the parameter's whole ARN
#: against 1,011 characters: the longest ARN prefix (partition, Region, account) is kept out.
SHARED_KEY_PARAMETER = DerivedName(
    "SSM parameter name", f"/{SHARED_PREFIX}/encryption/shared-key-arn",
    1011 - len("arn:aws-iso-b:ssm:ap-southeast-5:123456789012:parameter"),
)
#: Where the shared stack publishes what tenant stacks need of it (the ledger table's name, the
#: alarm topic's and its key's ARN), read by each tenant stack at deploy time: cells refer to
#: each other by these, never by CloudFormation export (`pipeline_constructs/cell_plan.py`).
SHARED_PARAMETER = DerivedName(
    "SSM parameter name", f"/{SHARED_PREFIX}/shared/{{parameter}}",
    1011 - len("arn:aws-iso-b:ssm:ap-southeast-5:123456789012:parameter"),
)
#: Each pipeline's entry in the registry `ops` reads (`pipeline_constructs/registry.py`).
PIPELINE_PARAMETER = DerivedName(
    "SSM parameter name", f"/{SHARED_PREFIX}/pipelines/{{id}}",
    1011 - len("arn:aws-iso-b:ssm:ap-southeast-5:123456789012:parameter"),
)
#: The parameters of `SHARED_PARAMETER`: the ledger table's name, the alarm topic's ARN, its key's ARN.
SHARED_PARAMETERS = ("ledger-table-name", "alarm-topic-arn", "alarm-topic-key-arn")
#: The shared stack's catch-all for uploads outside every tenant prefix (rule, its metric
#: filter, log group, dead-letter queue), and, past one pattern's worth of prefixes, its
#: buses and their rules.
UNMATCHED_UPLOADS_RULE = DerivedName(_RULE, SHARED_PREFIX + "-unmatched-uploads", 64)
UNMATCHED_UPLOADS_FILTER = DerivedName("metric filter name", SHARED_PREFIX + "-unmatched-uploads", 512)
UNMATCHED_UPLOADS_LOG_GROUP = DerivedName(_LOG_GROUP, f"/{SHARED_PREFIX}/unmatched-uploads", 512)
UNMATCHED_UPLOADS_DLQ = DerivedName("SQS queue name", SHARED_PREFIX + "-unmatched-uploads-dlq", 80)
UNMATCHED_BUS = DerivedName(_BUS, SHARED_PREFIX + "-unmatched-{index}", 256)
UNMATCHED_FORWARD_RULE = DerivedName(_RULE, SHARED_PREFIX + "-unmatched-{index}-forward", 64)
UNMATCHED_UPLOADS_BUS_RULE = DerivedName(_RULE, SHARED_PREFIX + "-unmatched-uploads-{index}", 64)
#: Sharded routing: shard k's event bus, and the default bus's rules that forward to it.
SHARD_BUS = DerivedName(_BUS, SHARED_PREFIX + "-shard-{index}", 256)
SHARD_OBJECTS_RULE = DerivedName(_RULE, SHARED_PREFIX + "-shard-{index}-objects", 64)
SHARD_STATUS_RULE = DerivedName(_RULE, SHARED_PREFIX + "-shard-{index}-status", 64)
#: Where EventBridge puts an event it could not forward to a shard bus for a day.
ROUTING_DLQ = DerivedName("SQS queue name", SHARED_PREFIX + "-routing-dlq", 80)
#: The CloudWatch namespace of the app's metrics (`METRIC_NAMESPACE` unqualified): two copies of
#: the app with a tenant of the same id must not share its metrics (nor fire each other's alarms).
METRIC_NAMESPACES = DerivedName("metric namespace", METRIC_NAMESPACE, 255)

# Executions (`execution_name`) and the event ids `ops reconcile --replay` makes: per state
# machine, never qualified.
#: A file's execution, any attempt: at most `MAX_FILE_EXECUTION_NAME` by construction.
FILE_EXECUTION = DerivedName("execution name", "{execution}", MAX_EXECUTION_NAME, qualified=False)
PAGE_EXECUTION = DerivedName("execution name", PAGE_EXECUTION_NAME_FORMAT.format("{execution}", "{chunk}"),
                             MAX_EXECUTION_NAME, qualified=False)
SECTION_EXECUTION = DerivedName("execution name", SECTION_EXECUTION_NAME_FORMAT.format("{execution}", "{chunk}"),
                                MAX_EXECUTION_NAME, qualified=False)
#: `reconcile-<digest of the object version>`: short enough to be the name of its file's
#: executions itself (plus `-r<attempt>`), like an EventBridge event id (36 characters).
REPLAY_EVENT_ID = DerivedName("replayed event id", "reconcile-{digest}", 64, qualified=False)

NAME_FAMILIES: tuple[DerivedName, ...] = (
    *TENANT_NAMES, FUNCTION_LOG_GROUP, STATE_MACHINE_LOG_GROUP, WORKFLOW_ALIAS, SHARED_STACK, DASHBOARD_STACK,
    FIRST_DASHBOARD, DASHBOARD,
    UPLOAD_ACCESS_POINT, LANDING_BUCKET, WORK_BUCKET, SHARED_ALARM, SHARED_KEY_ALIAS, SHARED_KEY_PARAMETER, SHARED_PARAMETER,
    PIPELINE_PARAMETER, UNMATCHED_UPLOADS_RULE,
    UNMATCHED_UPLOADS_FILTER, UNMATCHED_UPLOADS_LOG_GROUP, UNMATCHED_UPLOADS_DLQ, UNMATCHED_BUS,
    UNMATCHED_FORWARD_RULE, UNMATCHED_UPLOADS_BUS_RULE, SHARD_BUS, SHARD_OBJECTS_RULE, SHARD_STATUS_RULE,
    ROUTING_DLQ, METRIC_NAMESPACES, FILE_EXECUTION, PAGE_EXECUTION, SECTION_EXECUTION, REPLAY_EVENT_ID,
)
#: The qualified families whose names hold no tenant id: the qualifier alone must fit them.
SHARED_NAMES = tuple(family for family in NAME_FAMILIES if family.qualified
                     and "{id}" not in family.template and "{tenant}" not in family.template)
#: The longest qualifier: every qualified name that holds no tenant id stays within its limit
#: (the landing bucket's 63 characters decide); a tenant id loses the qualifier's length and
#: one to the names it derives (`tightest_broken`).
MAX_QUALIFIER_LENGTH = min(family.limit - len(family.longest(qualifier="")) for family in SHARED_NAMES) - 1


def qualifier_broken(qualifier: str) -> DerivedName | None:
    """The name family with the smallest limit that ``qualifier`` makes too long, if any."""
    broken = [family for family in SHARED_NAMES if len(family.longest(qualifier=qualifier)) > family.limit]
    return min(broken, key=lambda family: family.limit - len(family.longest(qualifier=""))) if broken else None


def metric_namespace() -> str:
    """The app's metric namespace, qualified."""
    return METRIC_NAMESPACES.render()


#: How many hex digits of a digest shorten a long tenant id in its access point's name.
ACCESS_POINT_DIGEST_CHARS = 10


def upload_access_point_name(tenant_id: str) -> str:
    """The name of the tenant's upload access point (`UPLOAD_ACCESS_POINT`): `<id>-uploads`, or
    for an id too long for that, `<its first letters>-<digest of the id>-uploads`; a name is
    shortened by a hash, never cut short, so two tenants never share one."""
    room = UPLOAD_ACCESS_POINT.limit - len(UPLOAD_ACCESS_POINT.render(tenant=""))
    if len(tenant_id) <= room:
        return UPLOAD_ACCESS_POINT.render(tenant=tenant_id)
    readable = tenant_id[:room - 1 - ACCESS_POINT_DIGEST_CHARS].rstrip("-")
    digest = hashlib.sha256(tenant_id.encode()).hexdigest()[:ACCESS_POINT_DIGEST_CHARS]
    return UPLOAD_ACCESS_POINT.render(tenant=f"{readable}-{digest}")


def tightest_broken(tenant_id: str, qualifier: str = "") -> DerivedName | None:
    """The derived name with the smallest limit that ``tenant_id`` overflows (with
    ``qualifier``), if any."""
    broken = [name for name in TENANT_NAMES if len(name.longest(tenant_id, qualifier=qualifier)) > name.limit]
    return min(broken, key=lambda name: name.max_id_length(qualifier)) if broken else None


#: A plain execution name: what Step Functions accepts and CloudWatch Logs can log (letters,
#: digits, `-`; `_` too, kept for hashed names).
_PLAIN_NAME = re.compile(r"[0-9A-Za-z-]+")
_NOT_PLAIN = re.compile(r"[^0-9A-Za-z-]")
#: How a resumed attempt's name ends: `<first attempt's name>-r<attempt>`.
RESUME_SUFFIX = "-r{}"
_RESUMED = re.compile(r"-r[0-9]+$")


def execution_name(event_id: str, attempt: int = 0) -> str:
    """The name of a file's execution: attempt `attempt` (0 the first; `ops resume` makes the
    next) at the file of event `event_id`. At most `MAX_FILE_EXECUTION_NAME` characters, so
    its page and section executions' names fit too, whatever the attempt.

    The event id itself (`<event id>-r<attempt>` once resumed), as the seed design names
    executions, when that fits and the id is made of letters, digits and hyphens and does not
    end like a resume. Any other id (too long, or characters Step Functions refuses or cannot
    log) is named `<its first letters, digits and hyphens>_<digest of the id>`, then
    `-r<attempt>` (an attempt number too long even for that: a digest of id and attempt).

    Deterministic: the controller's StartExecution is idempotent on it, and the ledger claims
    the file by its event id. Different (event id, attempt) pairs never share a name: a plain
    name has no `_`, and parses back to one id and attempt; a hashed name's digest is of the id
    (or of id and attempt).
    """
    suffix = RESUME_SUFFIX.format(attempt) if attempt else ""
    if (len(event_id) + len(suffix) <= MAX_FILE_EXECUTION_NAME and _PLAIN_NAME.fullmatch(event_id)
            and not _RESUMED.search(event_id)):
        return event_id + suffix
    hashed: list[object] = [event_id]
    room = MAX_FILE_EXECUTION_NAME - len(suffix) - 1 - NAME_DIGEST_CHARS
    if room < 0:
        hashed, suffix, room = [event_id, attempt], "", MAX_FILE_EXECUTION_NAME - 1 - NAME_DIGEST_CHARS
    readable = _NOT_PLAIN.sub("", event_id)[:room]
    return f"{readable}_{name_digest(json.dumps(hashed))}{suffix}"


def name_digest(text: str) -> str:
    """The first `NAME_DIGEST_CHARS` hex digits of the SHA-256 of `text`."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:NAME_DIGEST_CHARS]


# --- the tenant's queue ------------------------------------------------------------------


def queue_message(queue_url: str, tenant_id: str, body: str, deduplication_id: str) -> dict[str, str]:
    """`SendMessage` arguments of a message for a tenant's queue: on a FIFO queue (ordering
    `arrival`) it joins the tenant's one message group under `deduplication_id`; a standard queue
    (ordering `key_sequence`) refuses both fields."""
    message = {"QueueUrl": queue_url, "MessageBody": body}
    if queue_url.endswith(".fifo"):
        message.update(MessageGroupId=tenant_id, MessageDeduplicationId=deduplication_id)
    return message


# --- work bucket layout --------------------------------------------------------------------


#: Each kind of object in the work bucket has its own top-level prefix, so that the bucket's
#: lifecycle keeps each kind as long as it must (chunks 14 days, quarantined messages 400).
CHUNKS_ROOT = "chunks/"
QUARANTINE_ROOT = "quarantine/"


def work_prefix(tenant_id: str) -> str:
    """A tenant's chunks and manifests live under this prefix (IAM scopes to it)."""
    return f"{CHUNKS_ROOT}{tenant_id}/"


def quarantine_prefix(tenant_id: str) -> str:
    """Where the controller keeps a tenant's unusable messages (IAM scopes to it)."""
    return f"{QUARANTINE_ROOT}{tenant_id}/"


def quarantine_key(tenant_id: str, when: float, message_id: str) -> str:
    """`quarantine/<tenant>/<UTC timestamp>-<message id>.json`: listed oldest first."""
    stamp = _dt.datetime.fromtimestamp(when, _dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    return f"{quarantine_prefix(tenant_id)}{stamp}-{message_id}.json"


def replayed_prefix(tenant_id: str) -> str:
    """Where `ops quarantine replay` moves a replayed message, so it is never replayed twice."""
    return f"{quarantine_prefix(tenant_id)}replayed/"


def chunk_prefix(tenant_id: str, file_name: str) -> str:
    """The folder of one file's chunk index and manifest (named by its first execution's name,
    `execution_name(event id)`)."""
    return f"{work_prefix(tenant_id)}{file_name}/"


def manifest_key(prefix: str) -> str:
    """Work-bucket key of one execution's manifest."""
    return f"{prefix}manifest.json"


def chunk_index_key(prefix: str) -> str:
    """Work-bucket key of one file's chunk index: where each chunk starts in the pinned object
    version (fixed-width entries, see `chunk_format`), so Register reads its chunk with a
    ranged GET of that version instead of a chunk file."""
    return f"{prefix}chunk-offsets.bin"


# --- object keys in S3 events ----------------------------------------------------------------

#: The characters S3 never encodes in the object key of an event notification (letters,
#: digits, `/`, `.`, `_`, `-`). A tenant prefix made of them reads the same encoded or not, so
#: the rule's prefix filter (matched on the encoded key) and IAM (on the real key) agree.
S3_EVENT_KEY_SAFE_CHARACTERS = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-"
)


def s3_key_from_event(raw: str) -> str:
    """The object key an S3 event announces: S3 URL-encodes it ("red flower.jpg" arrives as
    "red+flower.jpg", a literal "+" as "%2B", "=" as "%3D", UTF-8 bytes as %XX).

    The one decoder: the controller applies it once, when an event enters the system; every
    payload after that carries the real key. Same as powertools' `unquote_plus`.
    """
    return urllib.parse.unquote_plus(raw, encoding="utf-8", errors="strict")


# --- the completion callback (`completion.wait`) -------------------------------------------

#: The error of a file the core system rejected through the completion entry point.
COMPLETION_REJECTED_ERROR = "CompletionRejected"
#: The error of a file the core system neither confirmed nor rejected in time (or whose
#: heartbeats stopped): the workflow's `CompletionTimedOut` state sets it.
COMPLETION_TIMED_OUT_ERROR = "CompletionTimedOut"
#: The longest rejection reason kept (it reaches the execution history, the ledger and the
#: notification: a summary, never record content).
MAX_REJECT_REASON = 256
#: Where the workflow leaves the task token: attributes of the tenant's ledger position item
#: (partition `tenant`, sort key `entry = "position"`, the one item naming the current file),
#: written by the workflow's `WaitForCompletion` task only while that execution is the current one.
LEDGER_POSITION_ENTRY = "position"
COMPLETION_TOKEN_ATTRIBUTE = "completion_token"
COMPLETION_EXECUTION_ATTRIBUTE = "completion_execution"
COMPLETION_SINCE_ATTRIBUTE = "completion_since"
#: What the core system answered (`confirmed` or `rejected`), its reason and when: kept on the
#: position (`ops status`), and the answer is final (a second, different answer is refused).
COMPLETION_ANSWER_ATTRIBUTE = "completion_answer"
COMPLETION_REASON_ATTRIBUTE = "completion_reason"
COMPLETION_ANSWERED_AT_ATTRIBUTE = "completion_answered_at"
#: The actions of the completion entry point.
COMPLETION_ACTIONS = ("waiting", "confirm", "reject", "heartbeat")


class CompletionRequest(TypedDict):
    """What the core system sends to the completion entry point (a Lambda invoke under IAM).

    `tenant`: must be the entry point's own tenant. `file`: the file's id (the EventBridge
    event id, as `waiting` returns it); not needed for `waiting`. `reason`: `reject` only."""

    action: str
    tenant: str
    file: NotRequired[str]
    reason: NotRequired[str]


class CompletionAnswer(TypedDict):
    """The entry point's answer: `status` is HTTP-like (200 done, 400 bad request, 403 another
    tenant's entry point, 404 no such waiting file, 409 no longer waiting); `message` says why."""

    status: int
    message: str
    file: NotRequired[dict[str, Any]]
