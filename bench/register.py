"""Benchmark of the register side: records/s of one file end to end on the local runtime, as
a fraction of what a raw keep-alive client reaches against the same local core system.

    .venv/bin/python bench/register.py [--records 200000] [--chunk-size 1000] [--batch 1] [--time-scale 0.1]
                                       [--auth none|bearer]

Two figures per run, both against the same core-system stand-in (`local_runtime/sink.py`'s
`SinkServer`), run in a process of its own as a real core system is (`--sink-in-process` runs
it in the pipeline's process instead, where it shares the interpreter with the moto server and
the Step Functions interpreter's threads: the figures of the first rows of the table):

* raw: a plain `http.client` keep-alive client in a separate process (as a register worker is)
  POSTs the same records, one per POST (or `--batch` per POST as JSON arrays, with a key per
  batch), nothing else, while the pipeline idles, before and after the file (the mean of the
  two runs): the physical limit of this contract against this core system;
* pipeline: one file of `--records` records uploaded to a one-tenant pipeline (chunk size
  `--chunk-size`, `sink.batch_size` `--batch`), from the upload to the last record registered
  (Split, the workflow, the ledger, the controller: everything), and the register span alone
  (first to last request at the core system).

Appends a row to the "Register throughput" table of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.parse
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "lambdas"))

import yaml  # noqa: E402

RESULTS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Register throughput"
TENANT = "bench"


def records_of(count: int) -> list[bytes]:
    """The records of the benchmark file as the register function sends them (compact JSON)."""
    return [json.dumps({"file": "f", "seq": str(seq)}).encode() for seq in range(count)]


def csv_file(count: int) -> bytes:
    return ("file,seq\n" + "".join(f"f,{seq}\n" for seq in range(count))).encode()


def raw_client(url: str, count: int, batch: int) -> float:
    """Records/s of a plain keep-alive client (runs in its own process)."""
    from chunk_format import idempotency_key
    from sink_client import batch_body, batch_idempotency_key

    records = records_of(count)
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    started = time.perf_counter()
    for first in range(0, count, batch):
        if batch == 1:
            body, key = records[first], idempotency_key("raw", "f.csv", "v", first)
        else:
            chunk = records[first:first + batch]
            body, key = batch_body(chunk), batch_idempotency_key("raw", "f.csv", "v", first, len(chunk))
        connection.request("POST", parts.path, body=body,
                           headers={"Content-Type": "application/json", "Idempotency-Key": key, "X-Tenant-Id": TENANT})
        response = connection.getresponse()
        response.read()
        assert 200 <= response.status < 300, response.status
    return count / (time.perf_counter() - started)


def measure_raw(url: str, count: int, batch: int) -> float:
    """Records/s of `raw_client` in its own process (as a register worker is) against `url`."""
    out = subprocess.run(
        [sys.executable, __file__, "--raw-client", url, "--records", str(count), "--batch", str(batch)],
        check=True, capture_output=True, text=True,
    ).stdout
    return float(out.strip().splitlines()[-1])


#: `--auth`: the tenant's `sink.auth` (bearer: the local runtime creates the secret; the stand-in
#: outside the pipeline's process does not check the token, the register side's cost is measured).
AUTH = {"none": {"type": "none"}, "bearer": {"type": "bearer", "secret": "bench/core-token"}}


def tenants_file(directory: Path, chunk_size: int, batch: int, sink_timeout: int, auth: str = "none") -> Path:
    path = directory / "tenants.yaml"
    path.write_text(yaml.safe_dump({
        "defaults": {"format": "csv", "chunk_size": chunk_size,
                     "sink": {"url": "http://127.0.0.1:9/unused", "timeout_seconds": sink_timeout, "batch_size": batch}},
        "tenants": [{"id": TENANT, "prefix": f"{TENANT}/", "sink": {"auth": AUTH[auth]}}],
    }))
    return path


class SinkProcess:
    """The core-system stand-in in a process of its own, driven over its stdin/stdout."""

    def __enter__(self) -> "SinkProcess":
        self.process = subprocess.Popen([sys.executable, __file__, "--sink-process"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        self.url = self._read()
        if not self.url.startswith("http"):
            self.process.kill()
            raise RuntimeError(f"the core-system stand-in did not start (it said {self.url!r})")
        return self

    def _read(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def _command(self, line: str) -> str:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        return self._read()

    def reset(self) -> None:
        self._command("reset")

    def received(self) -> dict[str, Any]:
        """{"posts": N, "requests": [(time, body)], "accepted": [record]} since the last reset."""
        with tempfile.NamedTemporaryFile(suffix=".json") as dump:
            self._command(f"dump {dump.name}")
            return json.loads(Path(dump.name).read_text())

    def __exit__(self, *_: Any) -> None:
        self._command("stop")
        self.process.wait(timeout=30)


def sink_process() -> None:
    """`--sink-process`: serve a SinkServer until told to stop (commands on stdin)."""
    from local_runtime.sink import SinkServer

    sink = SinkServer(TENANT)
    sink.start()
    print(sink.url, flush=True)
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "reset":
            sink.reset()
        elif command == "dump":
            Path(argument).write_text(json.dumps({
                "posts": sink.posts, "accepted": sink.accepted,
                "requests": [(r.time, r.body) for r in sink.requests],
            }))
        elif command == "stop":
            print("ok", flush=True)
            break
        print("ok", flush=True)
    sink.stop()


def chained(*hooks: Any) -> Any:
    def hook(tenant: str, role: str, variables: dict[str, Any]) -> dict[str, Any]:
        for one in hooks:
            variables = one(tenant, role, variables)
        return variables

    return hook


def split_chunk_size(size: int | None) -> Any:
    """A `function_environment` hook that gives the split function another chunk size than the
    tenants file allows (an experiment beyond the config's cap, never a deployment)."""
    from lambdas import contract

    variable = contract.env_name("chunk_size")

    def hook(tenant: str, role: str, variables: dict[str, Any]) -> dict[str, Any]:
        return {**variables, variable: str(size)} if size and variable in variables else variables

    return hook


def measure(count: int, chunk_size: int, batch: int, sink_timeout: int, time_scale: float, raw_count: int,
            split_chunk: int | None = None, sink_in_process: bool = False, auth: str = "none") -> dict[str, Any]:
    """The raw client against the core-system stand-in while the pipeline idles (before and
    after the file: the machine is shared, so both are kept), then the file."""
    from demo import verify
    from local_runtime import LocalPipeline
    from local_runtime.sink import point_register_at

    body = csv_file(count)
    with contextlib.ExitStack() as stack:
        work = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-register-"))
        outside = None if sink_in_process else stack.enter_context(SinkProcess())
        # the local runtime's own hook, pointed at the stand-in outside (anything with a `url`)
        hooks = [split_chunk_size(split_chunk)] + ([point_register_at({TENANT: outside})] if outside else [])
        pipe = stack.enter_context(LocalPipeline(tenants_file(Path(work), chunk_size, batch, sink_timeout, auth),
                                                 time_scale=time_scale, function_environment=chained(*hooks)))
        sink = outside or pipe.sink(TENANT)
        raw = [measure_raw(sink.url, raw_count, batch)]
        sink.reset()
        started = time.time()
        pipe.put_file(TENANT, "big.csv", body)
        pipe.wait_until_idle(timeout=7200, tenants=[TENANT])
        seconds = time.time() - started
        if outside:
            received = outside.received()
            requests = [(when, record) for when, record in received["requests"]]
            posts, accepted = received["posts"], received["accepted"]
        else:
            requests = [(r.time, r.body) for r in sink.requests]
            posts, accepted = sink.posts, sink.accepted
        problems = verify.check_records(accepted, [("f", count)]).problems
        assert not problems, problems[:3]
        (execution,) = pipe.executions(TENANT)
        assert execution["status"] == "SUCCEEDED", execution
        sink.reset()
        raw.append(measure_raw(sink.url, raw_count, batch))
    span = requests[-1][0] - requests[0][0]
    size = split_chunk or chunk_size
    chunks: dict[int, list[float]] = {}
    for when, record in requests:
        chunks.setdefault(int(record["seq"]) // size, []).append(when)
    inside = sum(max(times) - min(times) for times in chunks.values())
    return {"raw": sum(raw) / len(raw), "raw_runs": raw, "seconds": seconds, "rate": count / seconds,
            "register_rate": count / span, "posts": posts, "first_record_after": requests[0][0] - started,
            "inside_chunks": inside, "between_chunks": (span - inside) / max(1, len(chunks) - 1)}


def append_row(row: str) -> None:
    """Insert `row` after the last row of the section's table."""
    lines = RESULTS.read_text().splitlines()
    start = lines.index(SECTION)
    end = start + 1
    while end < len(lines) and not lines[end].startswith("## "):
        end += 1
    last_row = max(i for i in range(start, end) if lines[i].startswith("|"))
    lines.insert(last_row + 1, row)
    RESULTS.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--chunk-size", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=1, help="sink.batch_size: records per POST (1: record mode)")
    parser.add_argument("--sink-timeout", type=int, default=5, help="sink.timeout_seconds (bounds the chunk size)")
    parser.add_argument("--time-scale", type=float, default=0.1)
    parser.add_argument("--raw-records", type=int, default=50_000, help="records the raw client sends per run")
    parser.add_argument("--split-chunk-size", type=int, default=None,
                        help="experiment: the split function's chunk size, above the config's cap of 1000")
    parser.add_argument("--sink-in-process", action="store_true",
                        help="run the core-system stand-in in the pipeline's process (the earlier rows)")
    parser.add_argument("--raw-client", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--sink-process", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-write", action="store_true", help="print the row, do not append it")
    parser.add_argument("--auth", choices=sorted(AUTH), default="none", help="the tenant's sink.auth type")
    args = parser.parse_args()
    if args.sink_process:
        sink_process()
        return 0
    if args.raw_client:
        print(raw_client(args.raw_client, args.records, args.batch))
        return 0

    figures = measure(args.records, args.chunk_size, args.batch, args.sink_timeout, args.time_scale,
                      min(args.records, args.raw_records), args.split_chunk_size, args.sink_in_process, args.auth)
    raw, rate, register_rate = figures["raw"], figures["rate"], figures["register_rate"]
    print(f"raw client runs: {', '.join(f'{r:,.0f}' for r in figures['raw_runs'])} records/s; "
          f"first record {figures['first_record_after']:.1f} s after the upload; "
          f"inside chunks {args.records / figures['inside_chunks']:,.0f} records/s "
          f"({args.records / figures['inside_chunks'] / raw:.2f} of raw); "
          f"{figures['between_chunks'] * 1000:.0f} ms between chunks")
    mode = "record (1 per POST)" if args.batch == 1 else f"batch ({args.batch} per POST)"
    row = (
        f"| {date.today()} | {platform.machine()}, {os.cpu_count()} cores | {args.records:,} | "
        f"{f'{args.split_chunk_size} (experiment)' if args.split_chunk_size else args.chunk_size} | "
        f"{mode}{', sink in process' if args.sink_in_process else ''}{', bearer auth' if args.auth == 'bearer' else ''} | {raw:,.0f} | {figures['seconds']:.1f} s | {rate:,.0f} ({rate / raw:.2f}) | "
        f"{register_rate:,.0f} ({register_rate / raw:.2f}) | {figures['posts']:,} |"
    )
    print(row)
    if not args.no_write:
        append_row(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
