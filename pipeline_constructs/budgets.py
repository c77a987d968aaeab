"""Time budgets derived from a tenant's settings (pure arithmetic: config validation and the
constructs both use it, without importing CDK).

The register function sends a chunk's records one request at a time: one record per POST, or
with `sink.batch_size` N one batch of up to N records per POST, so a chunk is
`ceil(chunk_size / N)` requests (batches are cut on the chunk's grid, a resumed chunk never
needs more). Its timeout is long enough for a whole chunk at the core system's slowest answer
(`requests x sink.timeout_seconds`) when that fits in Lambda's 15 minutes; a longer chunk continues over several invocations (the handler
returns its progress before its deadline). Each invocation adds a few events to the
execution's history (25,000 at most), so a chunk may take at most
`MAX_REGISTER_INVOCATIONS_PER_CHUNK` invocations at the worst case: synthesis refuses more.
"""

from __future__ import annotations

import math

REGISTER_MIN_TIMEOUT_SECONDS = 60
REGISTER_MAX_TIMEOUT_SECONDS = 900  # Lambda's limit
#: Kept in hand at the deadline (progress write, return) and for the invocation's start.
REGISTER_MARGIN_SECONDS = 30
MAX_REGISTER_INVOCATIONS_PER_CHUNK = 10


def requests_per_chunk(chunk_size: int, batch_size: int = 1) -> int:
    """POSTs that register one chunk: one per record, or one per batch of `batch_size`."""
    return math.ceil(chunk_size / batch_size)


def register_timeout_seconds(chunk_size: int, sink_timeout_seconds: int, batch_size: int = 1) -> int:
    """The register function's timeout for these settings."""
    worst_case = requests_per_chunk(chunk_size, batch_size) * sink_timeout_seconds + REGISTER_MARGIN_SECONDS
    return min(REGISTER_MAX_TIMEOUT_SECONDS, max(REGISTER_MIN_TIMEOUT_SECONDS, worst_case))


def requests_per_invocation(timeout_seconds: int, sink_timeout_seconds: int) -> int:
    """Whole requests an invocation of `timeout_seconds` sends when each takes the whole sink
    timeout: the handler starts a request only if it can finish before the deadline, so a
    fraction of a request is never counted (at least one: the first request always goes)."""
    return max(1, (timeout_seconds - REGISTER_MARGIN_SECONDS) // sink_timeout_seconds)


def register_invocations_per_chunk(chunk_size: int, sink_timeout_seconds: int, batch_size: int = 1) -> int:
    """Invocations one chunk needs when every request takes the whole sink timeout."""
    timeout = register_timeout_seconds(chunk_size, sink_timeout_seconds, batch_size)
    return math.ceil(requests_per_chunk(chunk_size, batch_size) / requests_per_invocation(timeout, sink_timeout_seconds))


def max_chunk_size(sink_timeout_seconds: int, batch_size: int = 1) -> int:
    """The largest chunk size the invocation budget allows at this sink timeout and batch size."""
    per_invocation = requests_per_invocation(REGISTER_MAX_TIMEOUT_SECONDS, sink_timeout_seconds)
    return MAX_REGISTER_INVOCATIONS_PER_CHUNK * per_invocation * batch_size


# --- a file's time limit (the workflow's TimeoutSeconds) ---------------------------------------

#: A file's ingest time on top of the outage budget, by default: far above a normal file
#: (minutes) so that only a stuck execution reaches it, while it still ends within the day.
FILE_TIME_LIMIT_MARGIN_SECONDS = 6 * 3600
#: Step Functions standard workflows run at most a year.
MAX_FILE_TIME_LIMIT_SECONDS = 365 * 24 * 3600


def default_file_time_limit_seconds(outage_budget_seconds: int) -> int:
    """How long one execution (one attempt at a file) may run by default: the core system's
    outage budget plus `FILE_TIME_LIMIT_MARGIN_SECONDS`, so a file that waits out a whole
    outage budget is never timed out by this limit first."""
    return outage_budget_seconds + FILE_TIME_LIMIT_MARGIN_SECONDS
