"""Benchmark of the hand-off between files: a 20-file burst through one tenant, with and
without the fast hand-off. Writes its figures to docs/benchmarks.md.

    .venv/bin/python bench/handoff.py [--files 20] [--time-scale 0.1]

Measured per run: the gap from one execution's stop to the next one's start (p50 and p95,
also as a fraction of the queue's visibility timeout), and controller invocations per file.
"Without" is the seed's behaviour, built from the same code: the closer does not make the
waiting message visible, and a waiting message comes back after the queue's visibility
timeout (as with "fail = wait"). Goal: p95 <= 0.05 x VT and <= 2 controller invocations per
file with the fast hand-off.
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
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml

from bench.results import append_rows
from lambdas import contract
from local_runtime import LocalPipeline
from pipeline_constructs import functions

QUEUE_VISIBILITY_SECONDS = 30
HAND_OFF = "    def _hand_off(self, position: Position) -> bool:\n"


def tenants_file(directory: Path) -> Path:
    path = directory / "tenants.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "defaults": {"chunk_size": 10, "sink": {"url": "http://127.0.0.1:9/unused"}},
                "tenants": [{"id": "bench", "prefix": "bench/", "sink": {"auth": {"type": "none"}}}],
            }
        )
    )
    return path


def seed_code(directory: Path) -> Path:
    """The packaged code with the hand-off taken out of the closer."""
    code = directory / "lambdas"
    shutil.copytree(functions.LAMBDA_SOURCE_DIR, code, ignore=shutil.ignore_patterns("__pycache__"))
    closer = code / "closer.py"
    source = closer.read_text()
    assert HAND_OFF in source, "the closer changed: update the benchmark"
    closer.write_text(
        source.replace(HAND_OFF, HAND_OFF + "        return False  # benchmark: no fast hand-off\n")
    )
    return code


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1)]


def measure(files: int, time_scale: float, fast: bool) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-handoff-"))
    visibility = max(1, math.ceil(QUEUE_VISIBILITY_SECONDS * time_scale))
    waiting = contract.env_name("waiting_visibility_seconds")

    def seed_visibility(tenant: str, kind: str, variables: dict[str, Any]) -> dict[str, Any]:
        return {**variables, waiting: str(visibility)} if waiting in variables else variables

    hook = None if fast else seed_visibility

    original = functions.LAMBDA_SOURCE_DIR
    try:
        if not fast:
            functions.LAMBDA_SOURCE_DIR = seed_code(work)
        with LocalPipeline(tenants_file(work), time_scale=time_scale, function_environment=hook) as pipe:
            body = "file,seq\n" + "".join(f"x,{i}\n" for i in range(5))
            for index in range(files):
                pipe.put_file("bench", f"f{index:02d}.csv", body)
            pipe.wait_until_idle(timeout=600, tenants=["bench"])
            executions = sorted(pipe.executions("bench"), key=lambda e: e["startDate"])
            assert [e["status"] for e in executions] == ["SUCCEEDED"] * files
            invocations = len(pipe.deliveries("bench"))
    finally:
        functions.LAMBDA_SOURCE_DIR = original
        shutil.rmtree(work, ignore_errors=True)
    gaps = [(b["startDate"] - a["stopDate"]).total_seconds() for a, b in zip(executions, executions[1:])]
    return {
        "fast": fast,
        "visibility": visibility,
        "p50": statistics.median(gaps),
        "p95": percentile(gaps, 0.95),
        "per_file": invocations / files,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--time-scale", type=float, default=0.1)
    args = parser.parse_args()
    rows = []
    for fast in (True, False):
        f = measure(args.files, args.time_scale, fast)
        rows.append(
            f"| {date.today()} | {platform.machine()}, {os.cpu_count()} cores | {args.files} files | "
            f"{'fast hand-off' if fast else 'without (seed)'} | VT {f['visibility']} s | "
            f"{f['p50']:.2f} s ({f['p50'] / f['visibility']:.3f} VT) | {f['p95']:.2f} s ({f['p95'] / f['visibility']:.3f} VT) | "
            f"{f['per_file']:.2f} |"
        )
        print(rows[-1], flush=True)
    append_rows("## Hand-off between files", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
