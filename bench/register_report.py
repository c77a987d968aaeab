"""What bench/register.py reports: a line per round, the AWS projection of a mode's median round,
and its row in docs/benchmarks.md ("Register throughput").
"""

from __future__ import annotations

import argparse
import os
import platform
from datetime import date
from pathlib import Path
from typing import Any

from bench import results
from pipeline_constructs import budgets, pace
from pipeline_constructs.config.sink import DEFAULT_OUTAGE_BUDGET_SECONDS

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Register throughput"


#: Lambda gives a function one vCPU at 1,769 MB of memory, and CPU in proportion below it.
VCPU_MEMORY_MB = 1769


def aws_projection(
    chunk: int, batch: int, args: argparse.Namespace, *, raw_cpu: float, handler_cpu: float, memory_mb: int
) -> dict[str, float]:
    """Records/s on AWS of the raw client and of the pipeline, from the pace model's latencies
    (`pipeline_constructs/pace.py`) and the CPU seconds per request measured here (one local
    core taken as one Lambda vCPU, as bench/split.py does).

    A request costs the raw client the core system's answer (`--aws-request-ms`) plus its own
    CPU. It costs the register function the answer plus its CPU, or its CPU at its share of a
    vCPU (`memory_mb` / 1,769) when that is longer: below `cpu_bound_ms` of answer time the
    function's memory, not the core system, sets the pace. A chunk adds its fixed costs
    (`pace.chunk_seconds`), its share of its page's (`pace.page_seconds` over the chunks a page
    holds at `--sink-timeout`) and the progress writes while it sends."""
    answer = args.aws_request_ms / 1000
    share = min(1.0, memory_mb / VCPU_MEMORY_MB)
    requests = budgets.requests_per_chunk(chunk, batch)
    sending = requests * max(answer + handler_cpu, handler_cpu / share)
    per_page = max(
        1, budgets.max_chunks_per_page(chunk, args.sink_timeout, DEFAULT_OUTAGE_BUDGET_SECONDS, batch)
    )
    fixed = pace.chunk_seconds() + pace.page_seconds() / per_page + pace.progress_seconds(sending)
    raw = batch / (answer + raw_cpu)
    pipeline = chunk / (sending + fixed)
    return {
        "raw": raw,
        "pipeline": pipeline,
        "fixed_ms": fixed * 1000,
        "cpu_bound_ms": handler_cpu * (1 / share - 1) * 1000,
    }


def describe(result: dict[str, Any]) -> str:
    raw, piped, alone, cost = result["raw"], result["pipeline"], result["alone"], result["per_chunk_ms"]
    before, after = result["raw_bracket"]
    return (
        f"{result['mode']:6} chunk {result['chunk']:>5} x{result['batch']:<3} raw {raw:>9,.0f}/s "
        f"({before:,.0f} before, {after:,.0f} after) | "
        f"handler alone {alone['rate']:>9,.0f}/s ({alone['rate'] / raw:.2f}) | pipeline {piped['rate']:>9,.0f}/s "
        f"({piped['rate'] / raw:.3f}; register span {piped['register_rate'] / raw:.2f}, sending "
        f"{piped['sending_rate'] / raw:.2f}, first POST at {piped['first_post']:.2f} s, upload {piped['upload']:.2f} s) | "
        f"CPU a request: handler {alone['cpu_per_request'] * 1e6:.0f} us, raw {result['raw_cpu'] * 1e6:.0f} us | per chunk: invocation "
        f"{cost['invocation']:.0f} ms, index read {cost['index_read']:.1f} ms, progress write "
        f"{cost['progress_write']:.1f} ms, state transitions {cost['state_transitions']:.0f} ms | "
        f"{piped['connections']} connection(s) for {piped['chunks']} chunks"
    )


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run whose pipeline/raw fraction is the median."""
    ordered = sorted(runs, key=lambda r: r["pipeline"]["rate"] / r["raw"])
    return ordered[len(ordered) // 2]


def load_average() -> str:
    return " / ".join(f"{value:.1f}" for value in os.getloadavg())


def table_row(mode: str, runs: list[dict[str, Any]], args: argparse.Namespace, load: str) -> str:
    """The mode's row in docs/benchmarks.md: its median round, the pipeline/raw fraction of every
    round and the AWS projection; ``load``: the machine's load average before the run."""
    chosen = median_run(runs)
    raw, piped, alone, cost = chosen["raw"], chosen["pipeline"], chosen["alone"], chosen["per_chunk_ms"]
    before, after = chosen["raw_bracket"]
    fractions = ", ".join(f"{r['pipeline']['rate'] / r['raw']:.3f}" for r in runs)
    aws = aws_projection(
        chosen["chunk"],
        chosen["batch"],
        args,
        raw_cpu=chosen["raw_cpu"],
        handler_cpu=alone["cpu_per_request"],
        memory_mb=chosen["memory_mb"],
    )
    return (
        f"| {date.today()} | {platform.machine()}, {os.cpu_count()} cores, load {load} | {args.records:,} | "
        f"{mode} ({chosen['batch']} per POST) | {chosen['chunk']} | {raw:,.0f} ({before:,.0f} / {after:,.0f}) | "
        f"{alone['rate']:,.0f} "
        f"({alone['rate'] / raw:.2f}) | {piped['rate']:,.0f} ({piped['rate'] / raw:.3f}; runs {fractions}; "
        f"sending {piped['sending_rate'] / raw:.2f}; first POST at {piped['first_post']:.2f} s, upload "
        f"{piped['upload']:.2f} s) | "
        f"{cost['invocation']:.0f} / {cost['index_read']:.1f} / {cost['progress_write']:.1f} / "
        f"{cost['state_transitions']:.0f} ms | {piped['connections']} for {piped['chunks']} chunks | "
        f"{aws['pipeline'] / aws['raw']:.3f} ({aws['fixed_ms']:.0f} ms a chunk; CPU {alone['cpu_per_request'] * 1e6:.0f} "
        f"us a request, the pace below {aws['cpu_bound_ms']:.1f} ms answers at {chosen['memory_mb']} MB) |"
    )


def append_rows(rows: list[str]) -> None:
    """Rows at the end of the register throughput table."""
    results.append_rows(SECTION, rows)
