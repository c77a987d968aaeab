"""The pace model's figures in docs/benchmarks.md ("Cost model"), computed from
`pipeline_constructs/pace.py`: every latency with its source, what a chunk, a page, a section
and a file cost on AWS by them, and the chunk size a tenant gets for its sink settings.

    .venv/bin/python bench/pace_model.py            # print the tables
    .venv/bin/python bench/pace_model.py --write    # and replace them in docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import results
from pipeline_constructs import budgets, pace
from pipeline_constructs.config.sink import DEFAULT_OUTAGE_BUDGET_SECONDS

BEGIN, END = "<!-- bench/pace_model.py: begin -->", "<!-- bench/pace_model.py: end -->"
LATENCIES = {
    "a Lambda task (`LAMBDA_TASK`)": pace.LAMBDA_TASK,
    "an S3 request (`S3_REQUEST`)": pace.S3_REQUEST,
    "a DynamoDB request (`DYNAMODB_REQUEST`)": pace.DYNAMODB_REQUEST,
    "a Pass, Choice or Map state (`STATE_TRANSITION`)": pace.STATE_TRANSITION,
    "a child execution, `.sync:2` (`CHILD_EXECUTION`)": pace.CHILD_EXECUTION,
    "a Step Functions API request (`SFN_REQUEST`)": pace.SFN_REQUEST,
    "a message made visible reaches the controller (`QUEUE_DELIVERY`)": pace.QUEUE_DELIVERY,
    "the core system's answer to one POST (`ANSWER`)": pace.ANSWER,
}
#: Sink settings shown with the chunk size they get: (timeout, batch size).
SETTINGS = ((10, 1), (60, 1), (1, 1), (10, 10), (10, 100))


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def render() -> str:
    lines = [BEGIN, "| step | on AWS | source |", "| --- | --- | --- |"]
    lines += [
        f"| {step} | {_ms(latency.seconds)} | {latency.source} |" for step, latency in LATENCIES.items()
    ]
    lines += [
        "",
        "| unit | fixed cost on AWS | what it is |",
        "| --- | --- | --- |",
        f"| a chunk | {_ms(pace.chunk_seconds())} | `chunk_seconds`: its register task, the ranged GET of its "
        "records, the fence read and the last progress write, ChunkDone and ChunkRegistered |",
        f"| a second of sending | {_ms(pace.progress_seconds(1.0))} | `progress_seconds`: a progress write "
        "a second (it also notices `ops pause`) |",
        f"| a page | {_ms(pace.page_seconds())} | `page_seconds`: the child execution and its states; none "
        "for a file of at most a page of chunks |",
        f"| a section | {_ms(pace.section_seconds())} | `section_seconds`: only past 764 pages |",
        f"| a file | {_ms(pace.close_to_next_seconds())} | `CLOSE_TO_NEXT`: from a file's close to the next "
        "file's first POST, where a tenant with a backlog pays it |",
        "",
        "| sink.timeout_seconds | sink.batch_size | computed chunk_size | chunks a page | fixed share at 5 ms "
        "answers | at 20 ms |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for timeout, batch in SETTINGS:
        size = pace.default_chunk_size(timeout, DEFAULT_OUTAGE_BUDGET_SECONDS, batch)
        per_page = budgets.max_chunks_per_page(size, timeout, DEFAULT_OUTAGE_BUDGET_SECONDS, batch)
        shares = [pace.fixed_share(size, batch, per_page, answer_seconds=s) for s in (0.005, 0.020)]
        lines.append(f"| {timeout} | {batch} | {size:,} | {per_page} | {shares[0]:.2%} | {shares[1]:.2%} |")
    return "\n".join([*lines, END])


def embedded(text: str) -> str:
    return results.embedded(text, BEGIN, END)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="replace the tables in docs/benchmarks.md")
    args = parser.parse_args()
    tables = render()
    print(tables)
    if args.write:
        results.replace_embedded(results.RESULTS, BEGIN, END, tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
