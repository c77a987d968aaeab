"""Benchmark of Split alone: one CSV file of N records (about 100 bytes each) in the local moto
server's landing bucket, split by the real handler in a process of its own: its peak RSS, its
rate in MB/s, and the 10M-record time extrapolated to the Lambda's memory setting.

    .venv/bin/python bench/split.py [--records 1000000] [--chunk-size 100]

Peak RSS is the split process's own high-water mark, `VmHWM`, not `ru_maxrss`: Linux carries
the forking parent's mark (moto's copy of the file included) across exec. How the 10M-record
time is extrapolated: docs/benchmarks.md, "Split", whose table gets a row.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results import append_rows
from lambdas import contract
from local_runtime.moto_server import FAKE_CREDENTIALS, MotoServer

#: What `TenantPipeline` gives the split function (pipeline_constructs/data_plane.py).
SPLIT_MEMORY_MB = 512
SPLIT_TIMEOUT_SECONDS = 15 * 60
LAMBDA_FULL_VCPU_MB = 1769
S3_GET_MB_PER_SECOND = 50
TENANT, LANDING, WORK, KEY = "bench", "landing", "work", "bench/big.csv"

#: Runs in the split process: the handler as Lambda runs it, timed, with its own peak RSS.
CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from lambdas import split
event = json.loads(sys.argv[2])
started, cpu = time.monotonic(), time.process_time()
result = split.handler(event, None)
seconds, cpu = time.monotonic() - started, time.process_time() - cpu
hwm_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "chunk_count": result["chunk_count"],
                  "record_count": result["record_count"], "peak_rss_mb": hwm_kb / 1024}))
"""


def csv_file(records: int) -> bytes:
    """About 100 bytes a record, every field different, one quoted field with a comma."""
    rows = (
        f'{i},customer-{i % 9973:05d},{i * 7 % 100000}.{i % 100:02d},EUR,"note {i}, ok",'
        f"2026-11-30T12:{i % 60:02d}:{i % 60:02d}Z,{'x' * 20}\n"
        for i in range(records)
    )
    return ("id,customer,amount,currency,note,created_at,padding\n" + "".join(rows)).encode()


def measure(records: int, chunk_size: int) -> dict[str, float]:
    server = MotoServer()
    server.start()
    try:
        s3 = server.client("s3", read_timeout=300)
        s3.create_bucket(Bucket=LANDING)
        s3.put_bucket_versioning(Bucket=LANDING, VersioningConfiguration={"Status": "Enabled"})
        s3.create_bucket(Bucket=WORK)
        body = csv_file(records)
        size = len(body)
        version_id = s3.put_object(Bucket=LANDING, Key=KEY, Body=body)["VersionId"]
        del body
        env = {
            **os.environ,
            **{contract.env_name(k): v for k, v in FAKE_CREDENTIALS.items()},
            "AWS_DEFAULT_REGION": server.region,
            "AWS_ENDPOINT_URL": server.endpoint_url,
            **contract.environment(
                contract.SplitEnv(
                    tenant_id=TENANT,
                    format="csv",
                    chunk_size=chunk_size,
                    work_bucket=WORK,
                    landing_prefix="bench/",
                    ledger_table_name="ledger",
                    duplicate_files="process",
                    # The bench measures Split's pass; the workflow's file-size limit (max_chunks,
                    # docs/scaling.md, "Largest file") is not what it measures, so it is lifted here.
                    max_chunks=10**9,
                )
            ),
        }
        event = {
            "tenant": TENANT,
            "event_id": f"bench-{int(time.time())}",
            "bucket": LANDING,
            "key": KEY,
            "version_id": version_id,
            "start_record": 0,
        }
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(ROOT), json.dumps(event)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        figures = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        server.stop()
    assert figures["record_count"] == records, figures
    mb = size / 1e6
    lambda_cpu = figures["cpu_seconds"] * 10 * LAMBDA_FULL_VCPU_MB / SPLIT_MEMORY_MB
    estimate = lambda_cpu + 10 * mb / S3_GET_MB_PER_SECOND
    return {
        **figures,
        "records": records,
        "chunk_size": chunk_size,
        "mb": mb,
        "mb_per_second": mb / figures["seconds"],
        "estimate_10m": estimate,
        "margin": SPLIT_TIMEOUT_SECONDS / estimate,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--chunk-size", type=int, default=100)
    parser.add_argument("--print-only", action="store_true", help="print the row, do not record it")
    args = parser.parse_args()
    f = measure(args.records, args.chunk_size)
    row = (
        f"| {date.today()} | {platform.machine()}, {os.cpu_count()} cores | {f['records']:,} | {f['mb']:.0f} MB | "
        f"{f['chunk_size']} | {f['chunk_count']:,} | {f['seconds']:.1f} s (CPU {f['cpu_seconds']:.1f} s) | "
        f"{f['mb_per_second']:.0f} | {f['peak_rss_mb']:.0f} MB | "
        f"{f['estimate_10m']:.0f} s at {SPLIT_MEMORY_MB} MB ({f['margin']:.1f}x inside 15 min) |"
    )
    print(row)
    if args.print_only:
        return 0
    append_rows("## Split", [row])
    return 0


if __name__ == "__main__":
    sys.exit(main())
