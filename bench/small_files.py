"""Benchmark of many small files through one tenant at the default settings: files per minute,
and the time from one file's close to the next file's first record at the core system.

    .venv/bin/python bench/small_files.py [--files 200] [--records 10] [--no-write]

All files are uploaded at once (a backlog), so the pace is the pipeline's own per-file cost:
the close and hand-off, the controller's claim and StartExecution, Split, the workflow's states
(a file of one page runs its chunks without a page execution), the register invocation up to
its first POST. The AWS projection adds up that path from the pace model's per-step latencies
(`pipeline_constructs/pace.py`, `CLOSE_TO_NEXT`: each an assumption or a cited figure) instead
of the local runtime's. Locally the pace is moto's: the row gives the CPU per file of this
process (moto's server and the local runtime) and of the functions' workers, how much of this
process's CPU moto's request handling and its workflow interpreter take (from the threads they
run in), and how long moto takes to parse the workflow definition, which it does at each
StartExecution. Writes a row to docs/benchmarks.md, "Small files".
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil
import yaml

from bench.results import append_rows
from local_runtime import LocalPipeline
from local_runtime.moto_patching import patched
from pipeline_constructs import pace

SECTION = "## Small files"
HEADER = (
    "| date | machine | files x records | files per minute | close to next first record p50 | p95 "
    "| AWS projection of it | CPU per file: moto and the runtime / the functions | of which moto's request handling / its "
    "workflow interpreter | moto's parse of the workflow definition |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)
#: What the threads of moto's share of this process run: werkzeug serves each request in a
#: thread of its own (it closes every connection after one answer); moto's Step Functions
#: interprets each execution, and each task state, in threads of its own. The sink (http.server)
#: and the local runtime's pollers and deliveries are neither.
MOTO_THREADS = {"requests": ("werkzeug.",), "interpreter": ("moto.stepfunctions.",)}


def tenants_file(directory: Path) -> Path:
    """One tenant at the default settings (the local core system takes no credentials)."""
    path = directory / "tenants.yaml"
    tenant = {
        "id": "bench",
        "prefix": "bench/",
        "sink": {"url": "http://127.0.0.1:9/unused", "auth": {"type": "none"}},
    }
    path.write_text(yaml.safe_dump({"tenants": [tenant]}))
    return path


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1)]


def descendants_cpu_seconds() -> float:
    """CPU time of this process's live descendants: the functions' workers and their fork
    server (read before the pipeline stops them)."""
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            times = child.cpu_times()
            total += times.user + times.system
    return total


def thread_role(target: Any) -> str | None:
    """Which part of moto a thread's ``target`` belongs to (a key of `MOTO_THREADS`), if any."""
    owner = getattr(target, "__self__", None)
    module = type(owner).__module__ if owner is not None else getattr(target, "__module__", "")
    return next(
        (role for role, prefixes in MOTO_THREADS.items() if module.startswith(prefixes)),
        None,
    )


@dataclass
class ThreadCpu:
    """By role (`MOTO_THREADS`): the CPU seconds its threads used, and how many ended."""

    seconds: Counter[str] = field(default_factory=Counter)
    threads: Counter[str] = field(default_factory=Counter)


@contextlib.contextmanager
def moto_thread_cpu() -> Iterator[ThreadCpu]:
    """The threads of moto's share (`MOTO_THREADS`) that start and end inside the block: each
    one's own CPU (`time.thread_time`), added up by role when it ends. Threads that were running
    before the block (the pollers, moto's accept loop) are not counted."""
    spent = ThreadCpu()
    lock = threading.Lock()
    run = threading.Thread.run

    def timed_run(thread: threading.Thread) -> None:
        role = thread_role(getattr(thread, "_target", None))
        started = time.thread_time()
        try:
            run(thread)
        finally:
            if role is not None:
                with lock:
                    spent.seconds[role] += time.thread_time() - started
                    spent.threads[role] += 1

    with patched(threading.Thread, "run", timed_run):
        yield spent


def parse_seconds(definition: str, repeat: int = 5) -> float:
    """How long moto's interpreter takes to parse `definition`, which it does at each
    StartExecution (its ANTLR parser of Amazon States Language)."""
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

    AmazonStateLanguageParser.parse(definition)
    started = time.perf_counter()
    for _ in range(repeat):
        AmazonStateLanguageParser.parse(definition)
    return (time.perf_counter() - started) / repeat


def measure(files: int, records: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-small-files-"))
    try:
        with LocalPipeline(tenants_file(work)) as pipe, moto_thread_cpu() as moto_cpu:
            # From here on, this process's CPU is moto's server and the local runtime's threads
            # (pollers, delivery, observation), and its descendants are the functions' workers.
            runtime_cpu, functions_cpu = time.process_time(), descendants_cpu_seconds()
            names = [f"f{index:04d}" for index in range(files)]
            started = time.time()
            for name in names:
                body = "file,seq\n" + "".join(f"{name},{i}\n" for i in range(records))
                pipe.put_file("bench", f"{name}.csv", body)
            pipe.wait_until_idle(timeout=max(600, files * 10), tenants=["bench"])
            runtime_cpu = time.process_time() - runtime_cpu
            functions_cpu = descendants_cpu_seconds() - functions_cpu
            # (the last execution's thread may still be ending: a share of one file's)
            moto_seconds, moto_requests = dict(moto_cpu.seconds), moto_cpu.threads["requests"]
            executions = sorted(pipe.executions("bench"), key=lambda e: e["startDate"])
            requests = pipe.sink("bench").requests
            definition = pipe.client("stepfunctions").describe_state_machine(
                stateMachineArn=pipe.tenants["bench"].state_machine_arn
            )["definition"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert [e["status"] for e in executions] == ["SUCCEEDED"] * files, "every file must succeed"
    first_record: dict[str, float] = {}
    for request in requests:
        name = request.body.get("file") if isinstance(request.body, dict) else None
        if name is not None and name not in first_record:
            first_record[name] = request.time
    assert sorted(first_record) == names, "every file must reach the core system"
    order = sorted(names, key=first_record.__getitem__)
    stops = [e["stopDate"].timestamp() for e in executions]
    gaps = [first_record[name] - stop for stop, name in zip(stops, order[1:])]
    elapsed = stops[-1] - started
    return {
        "per_minute": files / elapsed * 60,
        "p50": statistics.median(gaps),
        "p95": percentile(gaps, 0.95),
        "runtime_cpu": runtime_cpu / files,
        "functions_cpu": functions_cpu / files,
        "moto_requests": moto_requests / files,
        "moto_requests_cpu": moto_seconds.get("requests", 0.0) / files,
        "moto_interpreter_cpu": moto_seconds.get("interpreter", 0.0) / files,
        "parse": parse_seconds(definition),
        "definition_kb": len(definition) / 1000,
        "first_p50": statistics.median(gaps[:40]),
        "last_p50": statistics.median(gaps[-40:]),
    }


def table_row(files: int, records: int, figures: dict[str, Any]) -> str:
    """The row of `HEADER` for one run's `figures` (what `measure` returns)."""
    return (
        f"| {date.today()} | {platform.machine()}, {os.cpu_count()} cores | {files} x {records} | "
        f"{figures['per_minute']:.0f} | {figures['p50']:.2f} s | {figures['p95']:.2f} s | "
        f"{pace.close_to_next_seconds():.2f} s (`pace.CLOSE_TO_NEXT`) | "
        f"{figures['runtime_cpu']:.2f} s / {figures['functions_cpu']:.2f} s | "
        f"{figures['moto_requests_cpu']:.2f} s ({figures['moto_requests']:.1f} requests) / "
        f"{figures['moto_interpreter_cpu']:.2f} s | "
        f"{figures['parse'] * 1000:.0f} ms ({figures['definition_kb']:.1f} KB) |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--records", type=int, default=10)
    parser.add_argument("--no-write", action="store_true", help="print the row only")
    args = parser.parse_args()
    figures = measure(args.files, args.records)
    row = table_row(args.files, args.records, figures)
    print(row, flush=True)
    print(
        f"close to next first record p50 over the first 40 files {figures['first_p50']:.2f} s, "
        f"over the last 40 {figures['last_p50']:.2f} s"
    )
    if not args.no_write:
        append_rows(SECTION, [row], header=HEADER)
    return 0


if __name__ == "__main__":
    sys.exit(main())
