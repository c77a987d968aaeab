"""Benchmark of the register side, side by side in one run: a raw keep-alive client, the register
handler alone, and the whole local pipeline, in record mode and in batch mode, against the same
core-system stand-in; with each chunk's fixed cost broken down and projected onto AWS.

    .venv/bin/python bench/register.py [--records 1000000] [--runs 3] [--modes record batch]
                                       [--batch-size 100] [--sink-timeout 5] [--no-write]

Each mode's tenant leaves `chunk_size` out, so it runs at the chunk size a user gets by
default at `--sink-timeout` (`pace.default_chunk_size`; `--chunk-size` writes one), and the stand-in
(`local_runtime/sink.py`) runs in a process of its own, as a real core system does. The raw
client runs right before and right after the pipeline, which is compared with the mean of the
two, because the machine's own speed drifts while a run lasts. The pipeline's time ends at the
file's execution stop, not when the bench's idle checks notice it. Every record is checked to
be registered once, in order.

What each figure and each part of a chunk's fixed cost means, and the per-call latencies of
the AWS projection (`aws_projection`): docs/benchmarks.md, "Register throughput", where the
bench appends one row per mode (the median round), with the machine's load. This script runs the
rounds; bench/register_harness.py measures, bench/register_report.py writes the rows.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml

from bench.register_harness import (
    RegisterInvocations,
    SinkProcess,
    file_task,
    handler_alone,
    measure_handler_alone,
    measure_raw,
    pipeline_run,
    raw_client,
    register_function,
    sink_process,
)
from bench.register_report import append_rows, describe, load_average, table_row
from pipeline_constructs import pace

TENANTS = {"record": "rec", "batch": "bat"}


# --- one invocation of the bench -------------------------------------------------------------------


def tenants_file(
    directory: Path, modes: dict[str, tuple[int, int]], sink_timeout: int, *, written: bool
) -> Path:
    """One tenant per mode; ``written``: with its chunk_size in the file, else left to the default."""
    path = directory / "tenants.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "defaults": {
                    "format": "csv",
                    "sink": {"url": "http://127.0.0.1:9/unused", "timeout_seconds": sink_timeout},
                },
                "tenants": [
                    {
                        "id": TENANTS[mode],
                        "prefix": f"{TENANTS[mode]}/",
                        **({"chunk_size": chunk} if written else {}),
                        "sink": {"batch_size": batch, "auth": {"type": "none"}},
                    }
                    for mode, (chunk, batch) in modes.items()
                ],
            }
        )
    )
    return path


def run(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    from local_runtime import LocalPipeline
    from local_runtime.sink import point_register_at
    from pipeline_constructs.config import DEFAULT_OUTAGE_BUDGET_SECONDS

    def default(batch: int) -> int:  # what a tenant that leaves chunk_size out gets
        return pace.default_chunk_size(args.sink_timeout, DEFAULT_OUTAGE_BUDGET_SECONDS, batch)

    modes = {
        mode: (args.chunk_size or default(batch), batch)
        for mode, batch in (("record", 1), ("batch", args.batch_size))
        if mode in args.modes
    }
    results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-register-")))
        sink = stack.enter_context(SinkProcess())
        pipe = stack.enter_context(
            LocalPipeline(
                tenants_file(work, modes, args.sink_timeout, written=args.chunk_size is not None),
                time_scale=args.time_scale,
                function_environment=point_register_at({tenant: sink for tenant in TENANTS.values()}),
            )
        )
        calls = RegisterInvocations()
        pipe.add_invocation_listener(calls)
        region = pipe.client("s3").meta.region_name
        for round_number in range(1, args.runs + 1):
            for mode, (chunk, batch) in modes.items():
                tenant, name = TENANTS[mode], f"run{round_number}.csv"
                raw_records = min(args.records, args.raw_records or args.records)
                sink.reset()
                raw_before = measure_raw(sink.url, raw_records, batch)
                piped = pipeline_run(pipe, sink, calls, tenant, name, args.records, chunk)
                sink.reset()
                raw_after = measure_raw(sink.url, raw_records, batch)
                # The machine drifts while the pipeline runs (a tenth or more within minutes): the raw
                # client brackets the run and the pipeline is compared with the mean of the two.
                raw = (raw_before["rate"] + raw_after["rate"]) / 2
                sink.reset()
                function = register_function(pipe, tenant)
                memory = pipe.client("lambda").get_function_configuration(FunctionName=function.name)[
                    "MemorySize"
                ]
                alone = measure_handler_alone(
                    {
                        "environment": {
                            **function.environment,
                            "AWS_ENDPOINT_URL": pipe.endpoint_url,
                            "AWS_ACCESS_KEY_ID": "testing",
                            "AWS_SECRET_ACCESS_KEY": "testing",
                            "AWS_DEFAULT_REGION": region,
                            "AWS_REGION": region,
                        },
                        "ledger_tenant": f"alone-{tenant}-{round_number}",
                        "task": file_task(pipe, tenant, name),
                    }
                )
                chunks = piped["chunks"]
                # outside the chunk's POSTs: its GETs, the fence read and the last progress write (the
                # writes of each second of sending fall between its POSTs)
                index_read = alone["index_read"] / chunks
                progress = alone["fence"] / chunks + alone["writes"] / max(1, alone["write_calls"])
                result = {
                    "mode": mode,
                    "chunk": chunk,
                    "batch": batch,
                    "raw": raw,
                    "raw_bracket": (raw_before["rate"], raw_after["rate"]),
                    "pipeline": piped,
                    "alone": alone,
                    "raw_cpu": (raw_before["cpu_per_request"] + raw_after["cpu_per_request"]) / 2,
                    "memory_mb": memory,
                    "per_chunk_ms": {
                        "invocation": max(0.0, piped["in_invocation"] - index_read - progress) * 1000,
                        "index_read": index_read * 1000,
                        "progress_write": progress * 1000,
                        "state_transitions": piped["between"] * 1000,
                    },
                }
                results[mode].append(result)
                print(describe(result), flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", nargs="+", choices=("record", "batch"), default=["record", "batch"])
    parser.add_argument(
        "--batch-size", type=int, default=100, help="sink.batch_size of the batch mode tenant"
    )
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=None,
        help="chunk_size of both tenants (default: left out, so each gets the computed default)",
    )
    parser.add_argument(
        "--sink-timeout",
        type=int,
        default=10,
        help="sink.timeout_seconds (the default chunk size follows it)",
    )
    parser.add_argument("--time-scale", type=float, default=0.1)
    parser.add_argument(
        "--raw-records",
        type=int,
        default=None,
        help="records the raw client sends per run (default: --records)",
    )
    parser.add_argument(
        "--aws-request-ms",
        type=float,
        default=pace.ANSWER.seconds * 1000,
        help="a POST to the core system on AWS (default: the pace model's design point)",
    )
    parser.add_argument("--no-write", action="store_true", help="print the rows, do not append them")
    parser.add_argument("--raw-client", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--handler-alone", metavar="SPEC", help=argparse.SUPPRESS)
    parser.add_argument("--sink-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sink_process:
        sink_process()
        return 0
    if args.raw_client:
        print(json.dumps(raw_client(args.raw_client, args.records, args.batch_size)))
        return 0
    if args.handler_alone:
        print(json.dumps(handler_alone(json.loads(Path(args.handler_alone).read_text()))))
        return 0

    load_before = load_average()
    results = run(args)
    rows = [table_row(mode, runs, args, load_before) for mode, runs in results.items()]
    print("\n".join(rows))
    if not args.no_write:
        append_rows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
