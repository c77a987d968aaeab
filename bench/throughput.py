"""Benchmark of the local runtime: records per second through one tenant's pipeline, and the
handoff gap between consecutive files. Writes its figures to docs/benchmarks.md.

    .venv/bin/python bench/throughput.py [--records 50000] [--files 5] [--time-scale 0.1]

Figures are from the local runtime (moto, worker processes, a local core system): they show
the overhead of the pipeline's own code and catch its regressions, not what AWS will do.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results import append_rows
from demo.samples import sample_files
from local_runtime import LocalPipeline


def measure(records: int, files: int, time_scale: float) -> dict[str, float]:
    tenant = "initech"  # the default file's tenant with the biggest chunks (250)
    big = sample_files(tenant, "csv", files=1, records=1, big_records=records)[0]
    small = sample_files(tenant, "csv", files=files, records=20)
    with LocalPipeline(ROOT / "tenants.yaml", time_scale=time_scale) as pipe:
        started = time.monotonic()
        pipe.put_file(tenant, big.name, big.body)
        pipe.wait_until_idle(timeout=1800, tenants=[tenant])
        big_seconds = time.monotonic() - started
        assert len(pipe.sink(tenant).accepted) == records

        for sample in small:
            pipe.put_file(tenant, f"small-{sample.name}", sample.body)
        pipe.wait_until_idle(timeout=600, tenants=[tenant])
        executions = sorted(pipe.executions(tenant), key=lambda e: e["startDate"])[1:]
        gaps = [(b["startDate"] - a["stopDate"]).total_seconds() for a, b in zip(executions, executions[1:])]
    return {
        "records": records,
        "seconds": big_seconds,
        "records_per_second": records / big_seconds,
        "gap_median": statistics.median(gaps),
        "gap_max": max(gaps),
        "visibility_timeout": 30 * time_scale,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--files", type=int, default=5)
    parser.add_argument("--time-scale", type=float, default=0.1)
    args = parser.parse_args()
    figures = measure(args.records, args.files, args.time_scale)
    row = (
        f"| {date.today()} | {platform.machine()}, {__import__('os').cpu_count()} cores | {figures['records']:,} | "
        f"{figures['seconds']:.1f} s | {figures['records_per_second']:,.0f} | "
        f"{figures['gap_median']:.2f} s / {figures['gap_max']:.2f} s (VT {figures['visibility_timeout']:g} s) |"
    )
    print(row)
    append_rows("## End to end", [row])
    return 0


if __name__ == "__main__":
    sys.exit(main())
