"""Benchmark of many small files through one tenant at the default settings: files per minute,
and the time from one file's close to the next file's first record at the core system.

    .venv/bin/python bench/small_files.py [--files 200] [--records 10] [--no-write]

All files are uploaded at once (a backlog), so the pace is the pipeline's own per-file cost:
the close and hand-off, the controller's claim and StartExecution, Split, the workflow's states
(a file of one page runs its chunks without a page execution), the register invocation up to
its first POST. The AWS projection adds up that path from the pace model's per-step latencies
(`pipeline_constructs/pace.py`, `CLOSE_TO_NEXT`: each an assumption or a cited figure) instead
of the local runtime's. Writes a row to docs/benchmarks.md, "Small files".
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml

from bench.results import append_rows
from local_runtime import LocalPipeline
from pipeline_constructs import pace

SECTION = "## Small files"
HEADER = (
    "| date | machine | files x records | files per minute | close to next first record p50 | p95 "
    "| AWS projection of it |\n| --- | --- | --- | --- | --- | --- | --- |"
)


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


def measure(files: int, records: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-small-files-"))
    try:
        with LocalPipeline(tenants_file(work)) as pipe:
            names = [f"f{index:04d}" for index in range(files)]
            started = time.time()
            for name in names:
                body = "file,seq\n" + "".join(f"{name},{i}\n" for i in range(records))
                pipe.put_file("bench", f"{name}.csv", body)
            pipe.wait_until_idle(timeout=max(600, files * 10), tenants=["bench"])
            executions = sorted(pipe.executions("bench"), key=lambda e: e["startDate"])
            requests = pipe.sink("bench").requests
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
    return {"per_minute": files / elapsed * 60, "p50": statistics.median(gaps), "p95": percentile(gaps, 0.95)}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--records", type=int, default=10)
    parser.add_argument("--no-write", action="store_true", help="print the row only")
    args = parser.parse_args()
    figures = measure(args.files, args.records)
    row = (
        f"| {date.today()} | {platform.machine()}, {os.cpu_count()} cores | {args.files} x {args.records} | "
        f"{figures['per_minute']:.0f} | {figures['p50']:.2f} s | {figures['p95']:.2f} s | "
        f"{pace.close_to_next_seconds():.2f} s (`pace.CLOSE_TO_NEXT`) |"
    )
    print(row, flush=True)
    if not args.no_write:
        append_rows(SECTION, [row], header=HEADER)
    return 0


if __name__ == "__main__":
    sys.exit(main())
