"""What an operator does about a failed file, by its error: the one table.

The closer's failure notification, `ops status` and the demo say what `hint` returns, and the
runbook (docs/operations.md, "workflow-failed") names each hint word for word (a test keeps it
so). A hint says what to fix first and which command continues, the order-keeping one first:
`resume` (the file continues at its first unacknowledged record: a cause outside the file was
fixed), `replace` (the file itself is wrong: its correction runs in its place, before the files
queued behind it; `skip` is the way only when it must not be ingested at all) or nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lambdas.ledger import Position

RESUME = "resume"
REPLACE = "replace"
SKIP = "skip"
NOTHING = "nothing"


@dataclass(frozen=True)
class Hint:
    action: str  # RESUME, REPLACE, SKIP or NOTHING: the command that continues the tenant
    text: str


#: A file that cannot be processed as it is: nothing of it was sent.
BAD_FILE = Hint(
    REPLACE,
    "have the tenant upload a corrected file, then replace the failed one with it: it runs in "
    "the failed file's place, before the files already queued",
)

#: The file's landing object version is gone (deleted, or expired after it was superseded).
LOST = Hint(
    REPLACE,
    "the file's landing version is gone: have the tenant upload it again, then replace the failed "
    "file with the upload (it runs in its place, before the files already queued)",
)

#: Error type (the exception class a function raised, or the workflow's error name) -> hint.
BY_ERROR: dict[str, Hint] = {
    "MalformedFileError": BAD_FILE,
    "FileTooLargeError": BAD_FILE,
    "SplitTimeLimitError": BAD_FILE,
    "KeyOutsidePrefixError": BAD_FILE,
    "SinkRejectedError": Hint(
        RESUME,
        "fix the record's problem in the core system, then resume; if the record "
        "itself is wrong, replace the file with a corrected one from the rejected "
        "record on",
    ),
    "SinkAuthError": Hint(RESUME, "fix or rotate the credential the error names, then resume"),
    "SinkUnavailableError": Hint(RESUME, "wait until the core system answers again, then resume"),
    "ChunkInvocationBudgetExhausted": Hint(
        RESUME, "find out why the core system kept failing within one chunk, then resume"
    ),
    "CompletionTimedOut": Hint(
        RESUME,
        "ask the core system's owners why it did not answer, then resume (nothing is sent again) "
        "or skip it if it must not count",
    ),
    "CompletionRejected": Hint(
        RESUME,
        "agree with the core system's owners what is wrong, then resume (nothing is sent again) or skip it",
    ),
    "NoSuchKey": LOST,
    "NoSuchVersion": LOST,
    "StaleExecutionError": Hint(
        NOTHING, "an execution started by hand was refused before it sent anything: nothing to do"
    ),
}

#: A Lambda function that crashed (killed, out of memory, timed out) more often than the
#: workflow retries it. Through a page (child) execution it is the register function, in
#: the file's own execution the split function.
CRASH_ERRORS = frozenset(
    {
        "Runtime.ExitError",
        "Runtime.OutOfMemory",
        "Sandbox.Timedout",
        "Lambda.Unknown",
        "Lambda.ClientExecutionTimeoutException",
    }
)
CRASH = "{function} crashed repeatedly ({error}){where}: check its memory and timeout, then resume"

#: By how the execution closed, when the error says nothing more.
TIMED_OUT = Hint(
    RESUME,
    "find out what was slow (the register function's log group); if files this size take "
    "longer, raise file_time_limit_seconds first; then resume",
)
ABORTED = Hint(RESUME, "find out who stopped the execution and why, then resume")
OTHER = Hint(RESUME, "find the cause in the execution's history and the functions' log groups, then resume")


def hint(
    error: str | None, *, closed_as: str | None = None, failed_in: str | None = None, chunk: int | None = None
) -> Hint:
    """The hint for a file that closed as `closed_as` (FAILED, TIMED_OUT, ABORTED) with
    `error`; `failed_in` (the crashed function) and `chunk` (numbered from 0, see `stopped_at`)
    say where a crash was."""
    if closed_as == "TIMED_OUT":
        return TIMED_OUT
    if error in BY_ERROR:
        return BY_ERROR[error]
    if error in CRASH_ERRORS:
        where = f" in chunk {chunk}" if chunk is not None and failed_in == "register" else ""
        return Hint(RESUME, CRASH.format(function=failed_in or "a function", error=error, where=where))
    return ABORTED if closed_as == "ABORTED" else OTHER


def hint_for(closed: Position) -> Hint:
    """The hint for a closed attempt: the ledger's position of a failed file, or a history item."""
    chunk = closed.next_record // closed.chunk_size if closed.chunk_size else None
    return hint(closed.error, closed_as=closed.closed_as, failed_in=closed.failed_in, chunk=chunk)


def stopped_at(
    next_record: int,
    record_count: int | None = None,
    chunk_size: int | None = None,
    chunk_count: int | None = None,
) -> str:
    """Where a file stopped, in the words the notification, `ops status` and the demo use.

    Records and chunks are numbered from 0 everywhere a person reads them, as the ledger
    stores them and the core system's idempotency keys carry them: "chunk 2 of 10, record 250
    of 1,000" is the chunk holding records 200-299 (chunk_size 100) and the record after the
    first 250. Lines of a file are numbered from 1, as editors count them (`MalformedFileError`).
    """
    if record_count is not None and next_record >= record_count:
        return f"after the last record (all {record_count:,} reached the core system)"
    where = f"record {next_record:,}" + (f" of {record_count:,}" if record_count is not None else "")
    if chunk_size and chunk_count:
        where = f"chunk {min(next_record // chunk_size, chunk_count - 1)} of {chunk_count}, {where}"
    reached = {0: "nothing", 1: "record 0"}.get(
        next_record, f"records 0-{next_record - 1:,}"
    ) + " reached the core system"
    return f"{where} ({reached})"


def commands(
    found: Hint, tenant: str, *, key: str | None = None, next_record: int | None = None
) -> list[str]:
    """What to run after the hint's fix, as lines for a person (the notification, `ops status`),
    the order-keeping command first; `key`: the failed file's, `next_record`: where it stopped."""
    skip = f'python -m ops skip {tenant} --reason "..."'
    replace = f"python -m ops replace {tenant} --key {key or 'KEY'} --version VERSION_ID"
    if found.action in (SKIP, REPLACE):
        lines = (
            [
                "Once the corrected file is uploaded (its key, or another under the tenant's prefix), run it in the "
                "failed file's place, before the files queued behind it:",
                f"  {replace}",
            ]
            if found.action == REPLACE
            else []
        )
        return [
            *lines,
            "Only if the file must not be ingested at all, give it up (a correction uploaded later runs "
            "after the files already queued):",
            f"  {skip}",
        ]
    if found.action == NOTHING:
        return ["Check the tenant:", f"  python -m ops status {tenant}"]
    lines = ["Continue this file where it stopped:", f"  python -m ops resume {tenant}"]
    if found == BY_ERROR["SinkRejectedError"]:
        lines += [
            "or, if the record itself is wrong, upload a corrected file whose earlier records are unchanged and "
            "continue with it at the rejected record:",
            f"  {replace} --from-record {next_record if next_record is not None else 'N'}",
        ]
    return [*lines, "or give it up and start the next file:", f"  {skip}"]
