"""Time budgets derived from a tenant's settings (pure arithmetic: config validation and the
constructs both use it, without importing CDK).

The register function sends a chunk's records one request at a time: one record per POST, or
with `sink.batch_size` N one batch of up to N records per POST, so a chunk is
`ceil(chunk_size / N)` requests (batches are cut on the chunk's grid, a resumed chunk never
needs more). Its timeout is long enough for a whole chunk at the core system's slowest answer
(`requests x sink.timeout_seconds`) when that fits in Lambda's 15 minutes; a longer chunk continues over several invocations (the handler
returns its progress before its deadline). Each invocation adds a few events to the page
execution's history (25,000 at most), so the chunk's invocations at the worst case (every
request taking the whole sink timeout, and a whole outage waited out) must fit one page:
`max_register_invocations_per_chunk`, `max_chunk_size`; synthesis refuses more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lambdas import contract

if TYPE_CHECKING:
    from pipeline_constructs.config import TenantConfig

#: The largest chunk in any mode; below it the register budget (`budgets.max_chunk_size`: a
#: chunk's invocations at the slowest answer, with a whole outage, within one page's history)
#: bounds it. A chunk's fixed cost (a workflow iteration, an invocation, its reads and ledger
#: writes) is amortised over its records; the register function streams its chunk, so a chunk's
#: size costs no memory (docs/benchmarks.md, "Cost model").
MAX_CHUNK_SIZE = 100_000
REGISTER_MIN_TIMEOUT_SECONDS = 60
REGISTER_MAX_TIMEOUT_SECONDS = 900  # Lambda's limit
#: Kept in hand at the deadline (progress write, return) and for the invocation's start.
REGISTER_MARGIN_SECONDS = 30


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
    return math.ceil(
        requests_per_chunk(chunk_size, batch_size) / requests_per_invocation(timeout, sink_timeout_seconds)
    )


def max_chunk_size(sink_timeout_seconds: int, outage_budget_seconds: int, batch_size: int = 1) -> int:
    """The largest chunk size whose invocations at the slowest answer fit one page's history at
    these settings (0: the outage budget alone does not fit)."""
    per_invocation = requests_per_invocation(REGISTER_MAX_TIMEOUT_SECONDS, sink_timeout_seconds)
    return max(0, max_register_invocations_per_chunk(outage_budget_seconds)) * per_invocation * batch_size


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


# --- execution history: sections of pages of chunks ----------------------------------------------
#
# Step Functions fails an execution at 25,000 history events. A file runs in up to three
# levels of executions, each a Map (MaxConcurrency 1) over the level below:
#
# * a PAGE execution (`<id>-file-ingest-page`) registers at most `chunks_per_page` chunks;
#   per chunk, at most `register_invocation_budget` rounds of the register loop (the workflow
#   counts them and fails the chunk past the budget), each with its retries;
# * a SECTION execution (`<id>-file-ingest-section`) runs at most `pages_per_section` pages,
#   each one `.sync` task (with its retries) starting a page execution;
# * the file's PARENT execution runs the pages itself when the file fits one section, and
#   otherwise at most `max_sections()` sections, each one `.sync` task starting a section.
#
# Each execution's history then has a bound that does not depend on the file's size, and a
# file holds at most `chunks_per_page x pages_per_section x max_sections()` chunks (Split
# refuses a bigger file before anything is sent). At the default settings a page holds 8
# chunks, a section 994 pages, a file 994 sections: about 7.9M chunks (790M records at the
# default chunk_size 100). The numbers below are the design's; `tests/test_history_bound.py`
# recounts the bound from the synthesized definitions, state by state.

HISTORY_EVENT_LIMIT = 25_000
#: What one execution may use by design: a fifth of the limit is kept as margin.
HISTORY_EVENT_BUDGET = 20_000
#: `States.ArrayRange` makes at most 1,000 items: the sections of a file, the pages of a
#: section, and a page's chunks (the contract's name table counts on it: `MAX_CHUNK_INDEX`).
MAX_ARRAY_RANGE_ITEMS = contract.MAX_ARRAY_RANGE_ITEMS

#: History events of one entry into a state (entered + exited, and what happens in between).
TASK_EVENTS = 5  # TaskStateEntered, TaskScheduled, TaskStarted, TaskSucceeded|TaskFailed, TaskStateExited
SYNC_TASK_EVENTS = 6  # ... plus TaskSubmitted
RETRY_EVENTS = 3  # TaskScheduled, TaskStarted, TaskFailed of each retried attempt
STATE_EVENTS = 2  # Pass, Choice, Wait, Succeed, Fail: entered + exited
MAP_EVENTS = 4  # MapStateEntered, MapStateStarted, MapStateSucceeded|Failed, MapStateExited
MAP_ITERATION_EVENTS = 2  # MapIterationStarted, MapIterationSucceeded|Failed
EXECUTION_EVENTS = 2  # ExecutionStarted, ExecutionSucceeded|Failed

#: The register function's waits while the core system is unavailable (its
#: `MIN_RETRY_AFTER_SECONDS`, `MAX_RETRY_AFTER_SECONDS`; a test keeps them equal): each wait is
#: half the outage so far, within these bounds.
REGISTER_MIN_RETRY_AFTER_SECONDS, REGISTER_MAX_RETRY_AFTER_SECONDS = 1, 60
#: Invocations a chunk may use beyond one whole outage and its deadline continuations: room
#: for a core system that fails now and then (each fault episode costs at least one).
REGISTER_SPARE_INVOCATIONS = 10
#: Retries of a crashed Lambda runtime (killed, out of memory, timed out) in every Lambda task
#: of the workflows, before the file fails saying what crashed (`asl.crash_retry`).
CRASH_RETRIES = 3
#: Retries of one register invocation the workflow may make (two retriers: the seed's 3 on
#: Lambda service errors, `CRASH_RETRIES` on crashes); `asl.lambda_retry`.
REGISTER_RETRIES_PER_INVOCATION = 3 + CRASH_RETRIES


def outage_waits(outage_budget_seconds: int) -> int:
    """How many times the register loop waits in the workflow during one outage as long as the
    budget (counted without the time the function itself spends: an upper bound)."""
    outage, waits = 0.0, 0
    while outage < outage_budget_seconds:
        outage += min(REGISTER_MAX_RETRY_AFTER_SECONDS, max(REGISTER_MIN_RETRY_AFTER_SECONDS, outage / 2))
        waits += 1
    return waits


def outage_invocations(outage_budget_seconds: int) -> int:
    """Register invocations a chunk may use besides its deadline continuations: one whole outage
    (a wait each, and the one that gives up), and the spare ones."""
    return outage_waits(outage_budget_seconds) + 1 + REGISTER_SPARE_INVOCATIONS


def register_invocation_budget(
    chunk_size: int, sink_timeout_seconds: int, outage_budget_seconds: int, batch_size: int = 1
) -> int:
    """The most register invocations the workflow runs for one chunk before it fails the file
    (which halts the tenant; `ops resume` continues at the first unacknowledged record): the
    deadline continuations at the slowest answer, one whole outage, and spare ones."""
    return register_invocations_per_chunk(chunk_size, sink_timeout_seconds, batch_size) + outage_invocations(
        outage_budget_seconds
    )


def page_events_per_chunk(invocation_budget: int) -> int:
    """History events one chunk may add to its page execution: the Map iteration, then per
    invocation the task (with every retry), the ChunkDone choice and a wait; the end (counted
    for every end, ChunkRegistered, ChunkPaused, ChunkOverBudget, and ChunkCrashed with
    RegisterCrashed: an upper bound)."""
    per_invocation = TASK_EVENTS + REGISTER_RETRIES_PER_INVOCATION * RETRY_EVENTS + 2 * STATE_EVENTS
    return MAP_ITERATION_EVENTS + invocation_budget * per_invocation + 5 * STATE_EVENTS


#: A page execution's events besides its chunks: the execution, the page range (PageEnd,
#: LastPage, ClampToFile, PageChunks), the Map, PagePaused.
PAGE_FIXED_EVENTS = EXECUTION_EVENTS + 5 * STATE_EVENTS + MAP_EVENTS
#: Retries of a `.sync` task that starts a child execution (a page or a section):
#: StartExecution's throttling and service errors.
CHILD_TASK_RETRIES = 3
#: History events one child (a page, or a section) adds to the execution that runs it: the
#: Map iteration, the `.sync` task (each attempt of a `.sync` task also has a TaskSubmitted
#: event), and its outcome (the choice, then Done or Paused: both counted, an upper bound).
EVENTS_PER_CHILD = (
    MAP_ITERATION_EVENTS + SYNC_TASK_EVENTS + CHILD_TASK_RETRIES * (RETRY_EVENTS + 1) + 3 * STATE_EVENTS
)
#: A section execution's events besides its pages: the execution, the section range
#: (SectionEnd, LastSection, ClampSection, SectionPages), the Map, SectionPaused.
SECTION_FIXED_EVENTS = EXECUTION_EVENTS + 5 * STATE_EVENTS + MAP_EVENTS
#: Retries of each Lambda task of the parent (Split, RecordSuccess, RecordFailure): the seed's
#: 3 on Lambda service errors, `CRASH_RETRIES` on crashes (`asl.lambda_retry`).
PARENT_TASK_RETRIES = 3 + CRASH_RETRIES
#: `completion.wait`: the parent's callback task (WaitForCompletion: a task with TaskSubmitted,
#: no Retry; heartbeats add no history events), then CompletionTimedOut or nothing, and
#: ResumedAfterLastRecord. Counted for every tenant: it leaves `max_pages_per_section` as it is.
PARENT_COMPLETION_EVENTS = SYNC_TASK_EVENTS + 2 * STATE_EVENTS
#: The parent's states that run a file of one page itself, without a page execution:
#: InlineEnd, FitsInline, FileChunks and their Map (`ChunksInOrder`).
PARENT_INLINE_EVENTS = 3 * STATE_EVENTS + MAP_EVENTS
#: The parent's events besides its pages, sections or chunks, every path counted (an upper
#: bound of any one): the execution, Split, AnyChunks, Sections, OneSection, Pages, both Maps,
#: RecordSuccess and RecordFailure, FileIngested, IngestFailed and FilePaused, SplitCrashed,
#: and the states of a file it runs itself.
PARENT_FIXED_EVENTS = (
    EXECUTION_EVENTS
    + 3 * (TASK_EVENTS + PARENT_TASK_RETRIES * RETRY_EVENTS)
    + 4 * STATE_EVENTS
    + 2 * MAP_EVENTS
    + 4 * STATE_EVENTS
    + PARENT_COMPLETION_EVENTS
    + PARENT_INLINE_EVENTS
)


def max_register_invocations_per_chunk(outage_budget_seconds: int) -> int:
    """The most invocations a chunk may need at the slowest answer so that one chunk (with a
    whole outage and the spare invocations) fits a page execution's history (below 1: the
    outage budget alone does not fit)."""
    per_invocation = page_events_per_chunk(1) - page_events_per_chunk(0)
    budget = (HISTORY_EVENT_BUDGET - PAGE_FIXED_EVENTS - page_events_per_chunk(0)) // per_invocation
    return budget - outage_invocations(outage_budget_seconds)


def max_chunks_per_page(
    chunk_size: int, sink_timeout_seconds: int, outage_budget_seconds: int, batch_size: int = 1
) -> int:
    """The most chunks a page may have so its execution stays within `HISTORY_EVENT_BUDGET`
    (0: not even one chunk fits; config validation refuses such settings)."""
    budget = register_invocation_budget(chunk_size, sink_timeout_seconds, outage_budget_seconds, batch_size)
    fits = (HISTORY_EVENT_BUDGET - PAGE_FIXED_EVENTS) // page_events_per_chunk(budget)
    return max(0, min(MAX_ARRAY_RANGE_ITEMS, fits))


def max_inline_chunks(invocation_budget: int, chunks_per_page: int) -> int:
    """The most chunks of a file the parent runs itself, without a page execution: what its
    history holds besides its own states, at most a page (0: a file always runs in pages)."""
    fits = (HISTORY_EVENT_BUDGET - PARENT_FIXED_EVENTS) // page_events_per_chunk(invocation_budget)
    return max(0, min(chunks_per_page, fits))


def max_pages_per_section() -> int:
    """The most pages a section (or a parent that runs its pages itself) may run: its history
    budget, and `States.ArrayRange`'s limit."""
    fixed = max(SECTION_FIXED_EVENTS, PARENT_FIXED_EVENTS)
    return min(MAX_ARRAY_RANGE_ITEMS, (HISTORY_EVENT_BUDGET - fixed) // EVENTS_PER_CHILD)


def max_sections() -> int:
    """The most sections of one file: the parent's history budget, and `States.ArrayRange`'s limit."""
    return min(MAX_ARRAY_RANGE_ITEMS, (HISTORY_EVENT_BUDGET - PARENT_FIXED_EVENTS) // EVENTS_PER_CHILD)


def max_file_chunks(chunks_per_page: int, pages_per_section: int | None = None) -> int:
    """The most chunks of one file (Split refuses more)."""
    pages = max_pages_per_section() if pages_per_section is None else pages_per_section
    return chunks_per_page * pages * max_sections()


@dataclass(frozen=True)
class PageBudget:
    """What bounds a tenant's execution histories: chunks per page, pages per section, and
    register invocations per chunk (`page_budget`)."""

    chunks_per_page: int
    pages_per_section: int
    invocation_budget: int

    @property
    def inline_chunks(self) -> int:
        """The most chunks of a file the parent runs itself (`max_inline_chunks`)."""
        return max_inline_chunks(self.invocation_budget, self.chunks_per_page)

    @property
    def max_file_chunks(self) -> int:
        return max_file_chunks(self.chunks_per_page, self.pages_per_section)


def page_budget(tenant: TenantConfig) -> PageBudget:
    """The tenant's `chunks_per_page` and `pages_per_section` (default: the most the history
    budget allows) and its register invocations per chunk. `parse_config` refuses a tenant
    these do not fit; a `TenantConfig` made otherwise is refused here."""
    size, timeout, outage, batch = (
        tenant.records_per_chunk,
        tenant.sink.timeout_seconds,
        tenant.sink.outage_budget_seconds,
        tenant.sink.batch_size,
    )
    most = max_chunks_per_page(size, timeout, outage, batch)
    if most < 1:
        raise ValueError(
            f"tenant {tenant.id}: not one chunk of {size} records fits a page's history budget with a "
            f"{timeout} s sink timeout and a {outage} s outage budget; use at most "
            f"{max_chunk_size(timeout, outage, batch)} records a chunk, or a shorter outage budget"
        )
    chunks = most if tenant.chunks_per_page is None else tenant.chunks_per_page
    if not 1 <= chunks <= most:
        raise ValueError(f"tenant {tenant.id}: chunks_per_page {chunks} must be from 1 to {most}")
    most_pages = max_pages_per_section()
    pages = most_pages if tenant.pages_per_section is None else tenant.pages_per_section
    if not 1 <= pages <= most_pages:
        raise ValueError(f"tenant {tenant.id}: pages_per_section {pages} must be from 1 to {most_pages}")
    return PageBudget(chunks, pages, register_invocation_budget(size, timeout, outage, batch))
