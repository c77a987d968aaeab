"""Benchmark of the test suite as CI runs it: `make test` in a fresh clone of a commit, idle or
while other processes keep every core busy, several runs in a row. Writes a row per run to
docs/benchmarks.md ("Test suite").

    .venv/bin/python bench/suite.py [--rev HEAD] [--runs 3] [--burners 2] [--workers 2]

The clone shares nothing with this checkout but the pip and npm download caches (as CI on this
machine does), so a run includes the install. `--burners N` starts N processes spinning a core
each (`while True: pass`) for the whole run: the "busy machine" of docs/development.md.
Goal: `make test` at most 5 minutes idle on 2 cores; green every run under load.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.results import append_rows


def burn() -> None:
    while True:
        pass


def machine_speed() -> str:
    """This machine's speed right now: the best of three runs of a fixed pure-Python loop (20
    million additions: the interpreter alone) and of copying 256 MB into new memory (the page
    faults that new processes and growing heaps pay). Hosts of the same kind differ, and one
    host drifts within an hour, in either figure independently: a suite time is comparable
    with another only beside them."""

    def loop() -> float:
        started, total = time.perf_counter(), 0
        for number in range(20_000_000):
            total += number
        return time.perf_counter() - started

    block = bytearray(256 * 1024 * 1024)

    def copy() -> float:
        started = time.perf_counter()
        bytes(block)
        return time.perf_counter() - started

    seconds = min(loop() for _ in range(3))
    bandwidth = len(block) / min(copy() for _ in range(3)) / 1e9
    return f"loop {seconds:.1f} s, copy {bandwidth:.1f} GB/s"


def run_once(rev: str, workers: int, log: Path) -> tuple[float, float, str]:
    """Clone ``rev`` into a temporary directory and run `make setup`, then `make test`; return the
    install and test seconds and pytest's summary line."""
    with tempfile.TemporaryDirectory(prefix="suite-bench-") as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", rev], check=True)
        env = {**os.environ, "CI": "true", "CDK_DISABLE_CLI_TELEMETRY": "true"}
        env.pop("VIRTUAL_ENV", None)
        started = time.monotonic()
        with log.open("w") as out:
            subprocess.run(
                ["make", "setup"], cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT, check=True
            )
            installed = time.monotonic()
            result = subprocess.run(
                ["make", "test", f"WORKERS={workers}"],
                cwd=clone,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        finished = time.monotonic()
    summary = [line for line in log.read_text().splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    outcome = summary[-1].strip("= ") if summary else f"make test exited {result.returncode}"
    if result.returncode != 0 and "failed" not in outcome and "error" not in outcome:
        outcome += f" (make test exited {result.returncode})"
    return installed - started, finished - installed, outcome


def minutes(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


def record(rows: list[str]) -> None:
    append_rows("## Test suite", rows)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rev", default="HEAD", help="the commit to clone and test (default HEAD)")
    parser.add_argument("--runs", type=int, default=1, help="runs in a row (default 1)")
    parser.add_argument(
        "--burners", type=int, default=0, help="processes keeping a core busy each (default 0)"
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="make test WORKERS (default: the Makefile's)"
    )
    parser.add_argument("--no-write", action="store_true", help="print the rows, do not write benchmarks.md")
    args = parser.parse_args()
    if args.workers is None:  # the Makefile's default, as make test runs it
        args.workers = int(re.search(r"^WORKERS \?= (\d+)$", (ROOT / "Makefile").read_text(), re.M).group(1))

    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", args.rev], check=True, capture_output=True, text=True
    ).stdout.strip()
    speed = machine_speed()
    burners = [multiprocessing.Process(target=burn, daemon=True) for _ in range(args.burners)]
    for process in burners:
        process.start()
    load = f"{args.burners} burner{'s' if args.burners != 1 else ''}" if args.burners else "idle"
    rows = []
    green = True
    try:
        for run in range(1, args.runs + 1):
            log = Path(tempfile.gettempdir()) / f"suite-bench-{commit}-{run}.log"
            install, tests, outcome = run_once(commit, args.workers, log)
            green = green and "failed" not in outcome and "error" not in outcome and "exited" not in outcome
            row = (
                f"| {date.today().isoformat()} | `{commit}` | {load}, {os.cpu_count()} cores, WORKERS="
                f"{args.workers}, {speed} | {run}/{args.runs} | {minutes(install)} | {minutes(tests)} | {outcome} |"
            )
            print(row, f"(log: {log})", flush=True)
            rows.append(row)
    finally:
        for process in burners:
            process.kill()
    if not args.no_write:
        record(rows)
    print(f"{platform.machine()}, {os.cpu_count()} cores; {'all green' if green else 'NOT all green'}")
    return 0 if green else 1


if __name__ == "__main__":
    sys.exit(main())
