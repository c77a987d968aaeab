"""The errors the workflow and the queue react to.

The Lambda runtime reports an unhandled exception with `errorType` = its class name, and the
workflow's Retry/Catch match that name. Each class says at which level the handler wrapper logs
it: intended control flow at INFO, transient faults at WARNING, the rest at ERROR (the level a
metric filter pages on).
"""

from __future__ import annotations

import logging
from typing import Any

#: The error a page (or section) execution's stop for `ops pause` goes up the Map states with;
#: caught, so no execution fails (definitions.py).
TENANT_PAUSED_ERROR = "TenantPaused"
#: How the cause of a file failed by a function's repeated crash begins ("register crashed 4
#: times ..."): the workflow's crash states write it, the closer reads from it which function
#: crashed.
CRASHED_CAUSE = "{} crashed"


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
