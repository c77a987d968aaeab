"""The pace model: what the pipeline spends on AWS besides sending records, per chunk, page,
section and file, and the default `chunk_size` it implies (pure arithmetic, like `budgets`).

Every latency is a `Latency` that cites its source or says it is an assumption. The benches
project their AWS figures with these (bench/register.py, bench/small_files.py), the cloud test
measures the same steps on a real account, and docs/benchmarks.md ("Cost model") says how to
put its figures here in place of the assumptions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lambdas.contract import PROGRESS_EVERY_SECONDS
from pipeline_constructs import budgets

S3_LATENCY_DOC = (
    "https://docs.aws.amazon.com/whitepapers/latest/s3-optimizing-performance-best-practices/"
    "timeouts-and-retries-for-latency-sensitive-applications.html"
)
DYNAMODB_LATENCY_DOC = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Introduction.html"


@dataclass(frozen=True)
class Latency:
    """One step's time on AWS, and where the figure comes from."""

    seconds: float
    source: str


LAMBDA_TASK = Latency(0.060, "assumption: Step Functions schedules a Lambda task and invokes a warm function")
S3_REQUEST = Latency(0.030, S3_LATENCY_DOC)
DYNAMODB_REQUEST = Latency(0.006, f"{DYNAMODB_LATENCY_DOC} (single-digit milliseconds)")
STATE_TRANSITION = Latency(0.020, "assumption: a Pass, Choice or Map state")
CHILD_EXECUTION = Latency(
    0.200, "assumption: a .sync:2 child execution's start, and the parent noticing its end"
)
SFN_REQUEST = Latency(0.050, "assumption: a Step Functions API request (StartExecution, DescribeExecution)")
QUEUE_DELIVERY = Latency(
    0.100, "assumption: the event source mapping's long poll returns a message made visible"
)
#: The fastest answer of one POST the computed default keeps pace with: a design point, not a
#: measurement (a slower core system only makes the fixed costs a smaller share).
ANSWER = Latency(0.005, "design point: the fastest core system the defaults are sized for")
#: The share of a chunk's sending time its fixed costs (its own, its page's share, the progress
#: writes) may take at `ANSWER`; the computed default is the smallest round size within it.
FIXED_COST_SHARE = 0.01
#: Round chunk sizes the default is chosen from (1-2-5 steps up to `budgets.MAX_CHUNK_SIZE`).
ROUND_SIZES: tuple[int, ...] = (100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000)


def chunk_seconds() -> float:
    """A chunk's own fixed cost: its register task, the ranged GET of its records (the index
    block is read with them), the fence read and the last progress write, and its ChunkDone and
    ChunkRegistered states."""
    return (
        LAMBDA_TASK.seconds + S3_REQUEST.seconds + 2 * DYNAMODB_REQUEST.seconds + 2 * STATE_TRANSITION.seconds
    )


def page_seconds() -> float:
    """A page's fixed cost: its child execution, its 4 states (PageEnd, LastPage, PageChunks,
    ChunksInOrder) and the parent's RunPageOutcome and RunPageDone. A file of at most
    `budgets.PageBudget.inline_chunks` chunks runs none."""
    return CHILD_EXECUTION.seconds + 6 * STATE_TRANSITION.seconds


def section_seconds() -> float:
    """A section's fixed cost: its child execution, its 5 states and the parent's 2."""
    return CHILD_EXECUTION.seconds + 7 * STATE_TRANSITION.seconds


def progress_seconds(sending_seconds: float) -> float:
    """The progress writes while a chunk sends: one DynamoDB write every
    `PROGRESS_EVERY_SECONDS` (they also notice `ops pause`)."""
    return math.floor(sending_seconds / PROGRESS_EVERY_SECONDS) * DYNAMODB_REQUEST.seconds


#: The path from one file's close to the next file's first POST: (step, seconds, source).
CLOSE_TO_NEXT: tuple[tuple[str, float, str], ...] = (
    (
        "closer: the close's transaction, the position read after it, ChangeMessageVisibility (taken as "
        "fast as a DynamoDB request)",
        3 * DYNAMODB_REQUEST.seconds,
        DYNAMODB_REQUEST.source,
    ),
    (
        "the event source mapping receives the message made visible",
        QUEUE_DELIVERY.seconds,
        QUEUE_DELIVERY.source,
    ),
    (
        "controller: invoke, read the position, claim (a transaction)",
        LAMBDA_TASK.seconds + 2 * DYNAMODB_REQUEST.seconds,
        LAMBDA_TASK.source,
    ),
    (
        "controller: DescribeExecution of the file before (closed, not still finishing), StartExecution",
        2 * SFN_REQUEST.seconds,
        SFN_REQUEST.source,
    ),
    (
        "Split task: look for a manifest, GET the object, PUT its chunk index and the manifest; the position read",
        LAMBDA_TASK.seconds + 4 * S3_REQUEST.seconds + DYNAMODB_REQUEST.seconds,
        S3_REQUEST.source,
    ),
    (
        "AnyChunks, Sections, OneSection, InlineEnd, FitsInline, FileChunks, ChunksInOrder",
        7 * STATE_TRANSITION.seconds,
        STATE_TRANSITION.source,
    ),
    (
        "register task up to its first POST: the fence read and the settings pin, GET of the manifest, the "
        "index block and the records",
        LAMBDA_TASK.seconds + 2 * DYNAMODB_REQUEST.seconds + 3 * S3_REQUEST.seconds,
        LAMBDA_TASK.source,
    ),
)


def close_to_next_seconds() -> float:
    """A file's own fixed cost, where a tenant with a backlog pays it: `CLOSE_TO_NEXT`."""
    return sum(seconds for _, seconds, _ in CLOSE_TO_NEXT)


def fixed_share(
    chunk_size: int, batch_size: int, chunks_per_page: int, *, answer_seconds: float = ANSWER.seconds
) -> float:
    """A chunk's fixed costs (its own, its share of its page's and section's, its progress
    writes) over its sending time, when every POST is answered in ``answer_seconds``."""
    sending = budgets.requests_per_chunk(chunk_size, batch_size) * answer_seconds
    shared = page_seconds() / chunks_per_page + section_seconds() / (
        chunks_per_page * budgets.max_pages_per_section()
    )
    return (chunk_seconds() + shared + progress_seconds(sending)) / sending


def default_chunk_size(
    sink_timeout_seconds: int,
    outage_budget_seconds: int,
    batch_size: int,
    chunks_per_page: int | None = None,
) -> int:
    """The chunk size a tenant gets when its file leaves `chunk_size` out: the smallest of
    `ROUND_SIZES` (a whole number of batches) whose fixed costs stay within `FIXED_COST_SHARE`
    of its sending at `ANSWER`. Never more than the history budget allows (or
    `budgets.MAX_CHUNK_SIZE`), nor so large that a page no longer holds the tenant's own
    ``chunks_per_page``: then the largest size that does."""
    limit = min(
        budgets.MAX_CHUNK_SIZE,
        budgets.max_chunk_size(sink_timeout_seconds, outage_budget_seconds, batch_size),
    )
    rounded = sorted({math.ceil(size / batch_size) * batch_size for size in ROUND_SIZES})
    candidates = [size for size in rounded if size < limit] + [max(1, limit)]
    chosen = candidates[0]
    for size in candidates:
        per_page = budgets.max_chunks_per_page(size, sink_timeout_seconds, outage_budget_seconds, batch_size)
        if per_page < max(1, chunks_per_page or 1):
            break
        chosen = size
        if fixed_share(size, batch_size, chunks_per_page or per_page) <= FIXED_COST_SHARE:
            break
    return chosen
