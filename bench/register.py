"""Benchmark of the register side, side by side in one run: a raw keep-alive client, the register
handler alone, and the whole local pipeline, in record mode and in batch mode, against the same
core-system stand-in; with each chunk's fixed cost broken down and projected onto AWS.

    .venv/bin/python bench/register.py [--records 1000000] [--runs 3] [--modes record batch]
                                       [--batch-size 100] [--sink-timeout 5] [--no-write]

Each mode's tenant takes the largest `chunk_size` the register budget allows at
`--sink-timeout` (`budgets.max_chunk_size`; `--chunk-size` overrides), and the stand-in
(`local_runtime/sink.py`) runs in a process of its own, as a real core system does. The raw
client runs right before and right after the pipeline, which is compared with the mean of the
two, because the machine's own speed drifts while a run lasts. The pipeline's time ends at the
file's execution stop, not when the bench's idle checks notice it. Every record is checked to
be registered once, in order.

What each figure and each part of a chunk's fixed cost means, and the per-call latencies of
the AWS projection (`aws_projection`): docs/benchmarks.md, "Register throughput", where the
bench appends one row per mode (the median round), with the machine's load.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import http.client
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from datetime import date
from pathlib import Path
from typing import Any, Self

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml

from pipeline_constructs import budgets

RESULTS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Register throughput"
TENANTS = {"record": "rec", "batch": "bat"}


def records_of(count: int) -> list[bytes]:
    """The records of the benchmark file as the register function sends them (compact JSON)."""
    return [json.dumps({"file": "f", "seq": str(seq)}).encode() for seq in range(count)]


def csv_file(count: int) -> bytes:
    return ("file,seq\n" + "".join(f"f,{seq}\n" for seq in range(count))).encode()


# --- raw keep-alive client -------------------------------------------------------------------------


def raw_client(url: str, count: int, batch: int) -> dict[str, float]:
    """Records/s of a plain keep-alive client (runs in its own process), and its CPU seconds per
    request."""
    from lambdas.chunk_format import idempotency_key
    from lambdas.sink_client import batch_body, batch_idempotency_key

    records = records_of(count)
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    started, cpu = time.perf_counter(), time.process_time()
    for first in range(0, count, batch):
        if batch == 1:
            body, key = records[first], idempotency_key("raw", "f.csv", "v", first)
        else:
            chunk = records[first:first + batch]
            body, key = batch_body(chunk), batch_idempotency_key("raw", "f.csv", "v", first, len(chunk))
        connection.request("POST", parts.path, body=body,
                           headers={"Content-Type": "application/json", "Idempotency-Key": key, "X-Tenant-Id": "raw"})
        response = connection.getresponse()
        response.read()
        assert 200 <= response.status < 300, response.status
    return {"rate": count / (time.perf_counter() - started),
            "cpu_per_request": (time.process_time() - cpu) / budgets.requests_per_chunk(count, batch)}


def measure_raw(url: str, count: int, batch: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--raw-client", url, "--records", str(count),
                          "--batch-size", str(batch)], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# --- the register handler alone --------------------------------------------------------------------


def handler_alone(spec: dict[str, Any]) -> dict[str, Any]:
    """`--handler-alone`: every chunk of the spec's file through `register_chunk.register_chunk`,
    one after the other, in this process (a warm function); returns rates and phase times."""
    os.environ.update(spec["environment"])
    import boto3
    from lambdas import contract
    from lambdas import register_chunk
    from lambdas.ledger import Ledger
    from lambdas.runtime import BoundLogger, get_logger

    phases = {"index_read": 0.0, "fence": 0.0, "writes": 0.0, "s3_gets": 0, "fence_calls": 0, "write_calls": 0}

    def timed(phase: str, count: str, call: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                phases[phase] += time.perf_counter() - started
                phases[count] += 1
        return wrapper

    class TimedS3:
        def __init__(self, client: Any) -> None:
            self.client, self.get_object = client, timed("index_read", "s3_gets", client.get_object)

    class TimedLedger(Ledger):
        read = timed("fence", "fence_calls", Ledger.read)
        pin_settings = timed("fence", "fence_calls", Ledger.pin_settings)
        record_progress = timed("writes", "write_calls", Ledger.record_progress)

    config = contract.from_env(contract.RegisterEnv)
    s3 = TimedS3(boto3.client("s3"))
    ledger = TimedLedger(boto3.client("dynamodb"), config.ledger_table_name, spec["ledger_tenant"])
    task = spec["task"]
    file = {key: task[key] for key in ("tenant", "bucket", "key", "version_id")}
    ledger.claim(ledger.read(), {**file, "event_id": task["execution_name"], "size": 0, "etag": None,  # type: ignore[typeddict-item]
                                 "event_time": ""}, task["execution_name"], time.time())
    phases.update({name: type(value)() for name, value in phases.items()})
    log = BoundLogger(get_logger("register_chunk"), {})
    started, cpu = time.perf_counter(), time.process_time()
    for index in range(task["chunk_count"]):
        progress: dict[str, Any] = {**task, "chunk_index": index, "start_record": index * task["chunk_size"]}
        while not progress.get("done"):
            progress = register_chunk.register_chunk(progress, config=config, s3=s3, ledger=ledger,  # type: ignore[arg-type]
                                                      log=log, remaining_seconds=lambda: 900.0)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    size = task["chunk_size"]
    requests = sum(budgets.requests_per_chunk(min(size, task["record_count"] - index * size), config.sink_batch_size)
                   for index in range(task["chunk_count"]))
    return {"rate": task["record_count"] / seconds, "seconds": seconds, "cpu_per_request": cpu / requests, **phases}


def measure_handler_alone(spec: dict[str, Any]) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
        json.dump(spec, file)
    try:
        out = subprocess.run([sys.executable, __file__, "--handler-alone", file.name], check=True,
                             capture_output=True, text=True).stdout
    finally:
        os.unlink(file.name)
    return json.loads(out.strip().splitlines()[-1])


# --- the core-system stand-in in a process of its own ----------------------------------------------


class SinkProcess:
    """The core-system stand-in in a process of its own, driven over its stdin/stdout."""

    def __enter__(self) -> Self:
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
        """{"posts", "connections", "requests": [(time, body)], "accepted": [record]} since the last reset."""
        with tempfile.NamedTemporaryFile(suffix=".json") as dump:
            self._command(f"dump {dump.name}")
            return json.loads(Path(dump.name).read_text())

    def __exit__(self, *_: object) -> None:
        self._command("stop")
        self.process.wait(timeout=30)


def _freeze_every_second() -> None:
    while True:
        gc.freeze()
        time.sleep(1)


def sink_process() -> None:
    """`--sink-process`: serve a SinkServer until told to stop (commands on stdin)."""
    from local_runtime.sink import SinkServer

    sink = SinkServer("bench")
    sink.start()
    # What the stand-in keeps of every request would make each of the collector's full passes
    # longer as the run goes: a stall of the core system that a real one does not have, which a
    # short sink timeout turns into client timeouts. Moving what is alive to the permanent
    # generation every second keeps every pass short.
    threading.Thread(target=_freeze_every_second, daemon=True).start()
    print(sink.url, flush=True)
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "reset":
            sink.reset()
        elif command == "dump":
            Path(argument).write_text(json.dumps({
                "posts": sink.posts, "connections": sink.connections, "accepted": sink.accepted,
                "requests": [(r.time, r.body) for r in sink.requests],
            }))
        elif command == "stop":
            print("ok", flush=True)
            break
        print("ok", flush=True)
    sink.stop()


# --- the whole local pipeline ----------------------------------------------------------------------


class RegisterInvocations:
    """Start and end of every register invocation (the local runtime's invocation listener)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, float, float | None]] = []  # tenant, start, end
        self._open: dict[str, int] = {}

    def __call__(self, function: Any, event: Any, result: Any) -> None:
        if function.kind != "register":
            return
        now = time.time()
        with self.lock:
            if result is None:
                self._open[function.tenant] = len(self.calls)
                self.calls.append((function.tenant, now, None))
            else:
                at = self._open.pop(function.tenant)
                self.calls[at] = (function.tenant, self.calls[at][1], now)

    def take(self, tenant: str) -> list[tuple[float, float]]:
        with self.lock:
            mine = [(start, end) for who, start, end in self.calls if who == tenant and end is not None]
            self.calls = [call for call in self.calls if call[0] != tenant]
        return mine


def tenants_file(directory: Path, modes: dict[str, tuple[int, int]], sink_timeout: int) -> Path:
    path = directory / "tenants.yaml"
    path.write_text(yaml.safe_dump({
        "defaults": {"format": "csv", "sink": {"url": "http://127.0.0.1:9/unused", "timeout_seconds": sink_timeout}},
        "tenants": [{"id": TENANTS[mode], "prefix": f"{TENANTS[mode]}/", "chunk_size": chunk,
                     "sink": {"batch_size": batch, "auth": {"type": "none"}}} for mode, (chunk, batch) in modes.items()],
    }))
    return path


def chunk_breakdown(first_of_chunk: dict[int, tuple[float, float]],
                    invocations: list[tuple[float, float]]) -> dict[str, float]:
    """Mean seconds per chunk: from an invocation's start to its chunk's first POST plus from its
    last POST to its end (`in_invocation`), and from one invocation's end to the next one's start
    (`between`). Invocations are matched to chunks in order (one per chunk unless a deadline split one)."""
    chunks = sorted(first_of_chunk.values())
    ins = []
    for (first, last), (start, end) in zip(chunks, invocations, strict=False):
        ins.append(max(0.0, first - start) + max(0.0, end - last))
    between = [invocations[i + 1][0] - invocations[i][1] for i in range(len(invocations) - 1)]
    return {"in_invocation": statistics.fmean(ins) if ins else 0.0,
            "between": statistics.fmean(between) if between else 0.0,
            "chunks": len(chunks), "invocations": len(invocations)}


def pipeline_run(pipe: Any, sink: SinkProcess, calls: RegisterInvocations, tenant: str, name: str, count: int,
                 chunk_size: int) -> dict[str, Any]:
    from demo import verify

    sink.reset()
    body = csv_file(count)  # made before the clock starts, as the raw client's records are
    started = time.time()
    pipe.put_file(tenant, name, body)
    uploaded = time.time()
    pipe.wait_until_idle(timeout=7200, tenants=[tenant])
    received = sink.received()
    problems = verify.check_records(received["accepted"], [("f", count)]).problems
    assert not problems, problems[:3]
    execution = pipe.executions(tenant)[-1]
    assert execution["status"] == "SUCCEEDED", execution
    # Until the file closed (its execution ended: every record registered, the ledger says so),
    # not until `wait_until_idle` noticed: its checks, 0.2 s apart, are the bench's, not the pipeline's.
    seconds = execution["stopDate"].timestamp() - started
    chunks: dict[int, tuple[float, float]] = {}
    for when, record in received["requests"]:
        records = record if isinstance(record, list) else [record]
        index = int(records[0]["seq"]) // chunk_size
        first, last = chunks.get(index, (when, when))
        chunks[index] = (min(first, when), max(last, when))
    times = [when for when, _ in received["requests"]]
    sending = sum(last - first for first, last in chunks.values())
    return {"seconds": seconds, "rate": count / seconds, "register_rate": count / (times[-1] - times[0]),
            "first_post": times[0] - started, "upload": uploaded - started,
            "sending_rate": count / sending if sending > 0 else 0.0,
            "posts": received["posts"], "connections": received["connections"],
            **chunk_breakdown(chunks, calls.take(tenant))}


def register_function(pipe: Any, tenant: str) -> Any:
    return next(f for f in pipe.deployment.functions.values() if f.tenant == tenant and f.kind == "register")


def file_task(pipe: Any, tenant: str, name: str) -> dict[str, Any]:
    """The register task of `name`'s last split (its manifest in the work bucket), chunk 0."""
    from lambdas import contract

    s3 = pipe.client("s3")
    bucket = register_function(pipe, tenant).environment[contract.env_name("work_bucket")]
    manifests = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=contract.work_prefix(tenant)):
        for item in page.get("Contents", []):
            if item["Key"].endswith("manifest.json"):
                manifest = json.loads(s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read())
                if manifest["source"]["key"].endswith(name):
                    manifests.append((item["LastModified"], item["Key"], manifest))
    _, key, manifest = max(manifests, key=lambda found: found[0])
    source = manifest["source"]
    return {"tenant": tenant, "bucket": source["bucket"], "key": source["key"], "version_id": source["version_id"],
            "execution_name": f"alone-{name.removesuffix('.csv')}", "chunk_prefix": key.removesuffix("manifest.json"),
            "chunk_size": int(manifest["chunk_size"]), "chunk_count": int(manifest["chunk_count"]),
            "record_count": int(manifest["record_count"]), "fault_since": None}


# --- the AWS projection ----------------------------------------------------------------------------


#: Lambda gives a function one vCPU at 1,769 MB of memory, and CPU in proportion below it.
VCPU_MEMORY_MB = 1769


def aws_projection(chunk: int, batch: int, args: argparse.Namespace, *, raw_cpu: float, handler_cpu: float,
                   memory_mb: int) -> dict[str, float]:
    """Records/s on AWS of the raw client and of the pipeline, from the stated per-call latencies
    and the CPU seconds per request measured here (one local core taken as one Lambda vCPU, as
    bench/split.py does).

    A request costs the raw client the core system's answer (`--aws-request-ms`) plus its own
    CPU. It costs the register function the answer plus its CPU, or its CPU at its share of a
    vCPU (`memory_mb` / 1,769) when that is longer: below `cpu_bound_ms` of answer time the
    function's memory, not the core system, sets the pace. A chunk adds the Lambda task
    (`--aws-task-ms`), the fence read and the final progress write (DynamoDB), the landing
    object's ranged GET (S3; the index block is kept warm), and a progress write per second of
    sending."""
    answer = args.aws_request_ms / 1000
    share = min(1.0, memory_mb / VCPU_MEMORY_MB)
    requests = budgets.requests_per_chunk(chunk, batch)
    sending = requests * max(answer + handler_cpu, handler_cpu / share)
    fixed = (args.aws_task_ms + args.aws_s3_ms + 2 * args.aws_ddb_ms) / 1000
    writes = int(sending) * args.aws_ddb_ms / 1000
    raw = batch / (answer + raw_cpu)
    pipeline = chunk / (sending + fixed + writes)
    return {"raw": raw, "pipeline": pipeline, "fixed_ms": (fixed + writes) * 1000,
            "cpu_bound_ms": handler_cpu * (1 / share - 1) * 1000}


# --- one invocation of the bench -------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    from local_runtime import LocalPipeline
    from local_runtime.sink import point_register_at
    from pipeline_constructs.config import DEFAULT_OUTAGE_BUDGET_SECONDS, MAX_CHUNK_SIZE

    def largest(batch: int) -> int:  # the tenants keep the default outage budget
        return min(MAX_CHUNK_SIZE, budgets.max_chunk_size(args.sink_timeout, DEFAULT_OUTAGE_BUDGET_SECONDS, batch))

    modes = {mode: (args.chunk_size or largest(batch), batch)
             for mode, batch in (("record", 1), ("batch", args.batch_size)) if mode in args.modes}
    results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-register-")))
        sink = stack.enter_context(SinkProcess())
        pipe = stack.enter_context(LocalPipeline(
            tenants_file(work, modes, args.sink_timeout), time_scale=args.time_scale,
            function_environment=point_register_at({tenant: sink for tenant in TENANTS.values()})))
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
                memory = pipe.client("lambda").get_function_configuration(FunctionName=function.name)["MemorySize"]
                alone = measure_handler_alone({
                    "environment": {**function.environment, "AWS_ENDPOINT_URL": pipe.endpoint_url,
                                    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                                    "AWS_DEFAULT_REGION": region, "AWS_REGION": region},
                    "ledger_tenant": f"alone-{tenant}-{round_number}", "task": file_task(pipe, tenant, name),
                })
                chunks = piped["chunks"]
                # outside the chunk's POSTs: its GETs, the fence read and the last progress write (the
                # writes of each second of sending fall between its POSTs)
                index_read = alone["index_read"] / chunks
                progress = alone["fence"] / chunks + alone["writes"] / max(1, alone["write_calls"])
                result = {"mode": mode, "chunk": chunk, "batch": batch, "raw": raw,
                          "raw_bracket": (raw_before["rate"], raw_after["rate"]), "pipeline": piped, "alone": alone,
                          "raw_cpu": (raw_before["cpu_per_request"] + raw_after["cpu_per_request"]) / 2,
                          "memory_mb": memory,
                          "per_chunk_ms": {
                              "invocation": max(0.0, piped["in_invocation"] - index_read - progress) * 1000,
                              "index_read": index_read * 1000, "progress_write": progress * 1000,
                              "state_transitions": piped["between"] * 1000}}
                results[mode].append(result)
                print(describe(result), flush=True)
    return results


def describe(result: dict[str, Any]) -> str:
    raw, piped, alone, cost = result["raw"], result["pipeline"], result["alone"], result["per_chunk_ms"]
    before, after = result["raw_bracket"]
    return (f"{result['mode']:6} chunk {result['chunk']:>5} x{result['batch']:<3} raw {raw:>9,.0f}/s "
            f"({before:,.0f} before, {after:,.0f} after) | "
            f"handler alone {alone['rate']:>9,.0f}/s ({alone['rate'] / raw:.2f}) | pipeline {piped['rate']:>9,.0f}/s "
            f"({piped['rate'] / raw:.3f}; register span {piped['register_rate'] / raw:.2f}, sending "
            f"{piped['sending_rate'] / raw:.2f}, first POST at {piped['first_post']:.2f} s, upload {piped['upload']:.2f} s) | "
            f"CPU a request: handler {alone['cpu_per_request'] * 1e6:.0f} us, raw {result['raw_cpu'] * 1e6:.0f} us | per chunk: invocation "
            f"{cost['invocation']:.0f} ms, index read {cost['index_read']:.1f} ms, progress write "
            f"{cost['progress_write']:.1f} ms, state transitions {cost['state_transitions']:.0f} ms | "
            f"{piped['connections']} connection(s) for {piped['chunks']} chunks")


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run whose pipeline/raw fraction is the median."""
    ordered = sorted(runs, key=lambda r: r["pipeline"]["rate"] / r["raw"])
    return ordered[len(ordered) // 2]


def load_average() -> str:
    return " / ".join(f"{value:.1f}" for value in os.getloadavg())


def append_rows(rows: list[str]) -> None:
    """Insert `rows` after the last row of the section's first table."""
    lines = RESULTS.read_text().splitlines()
    start = lines.index(SECTION)
    end = start + 1
    while end < len(lines) and not lines[end].startswith("## "):
        end += 1
    table = [i for i in range(start, end) if lines[i].startswith("|")]
    last = table[0]
    while last + 1 < end and lines[last + 1].startswith("|"):
        last += 1
    lines[last + 1:last + 1] = rows
    RESULTS.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", nargs="+", choices=("record", "batch"), default=["record", "batch"])
    parser.add_argument("--batch-size", type=int, default=100, help="sink.batch_size of the batch mode tenant")
    parser.add_argument("--chunk-size", type=int, default=None,
                        help="chunk_size of both tenants (default: the largest the register budget allows)")
    parser.add_argument("--sink-timeout", type=int, default=5, help="sink.timeout_seconds (bounds the chunk size)")
    parser.add_argument("--time-scale", type=float, default=0.1)
    parser.add_argument("--raw-records", type=int, default=None,
                        help="records the raw client sends per run (default: --records)")
    parser.add_argument("--aws-request-ms", type=float, default=10.0, help="a POST to the core system on AWS")
    parser.add_argument("--aws-task-ms", type=float, default=60.0, help="Step Functions' Lambda task, per chunk")
    parser.add_argument("--aws-s3-ms", type=float, default=30.0, help="an S3 ranged GET")
    parser.add_argument("--aws-ddb-ms", type=float, default=6.0, help="a DynamoDB read or write")
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
    rows = []
    for mode, runs in results.items():
        chosen = median_run(runs)
        raw, piped, alone, cost = chosen["raw"], chosen["pipeline"], chosen["alone"], chosen["per_chunk_ms"]
        before, after = chosen["raw_bracket"]
        fractions = ", ".join(f"{r['pipeline']['rate'] / r['raw']:.3f}" for r in runs)
        aws = aws_projection(chosen["chunk"], chosen["batch"], args, raw_cpu=chosen["raw_cpu"],
                             handler_cpu=alone["cpu_per_request"], memory_mb=chosen["memory_mb"])
        rows.append(
            f"| {date.today()} | {platform.machine()}, {os.cpu_count()} cores, load {load_before} | {args.records:,} | "
            f"{mode} ({chosen['batch']} per POST) | {chosen['chunk']} | {raw:,.0f} ({before:,.0f} / {after:,.0f}) | "
            f"{alone['rate']:,.0f} "
            f"({alone['rate'] / raw:.2f}) | {piped['rate']:,.0f} ({piped['rate'] / raw:.3f}; runs {fractions}; "
            f"sending {piped['sending_rate'] / raw:.2f}; first POST at {piped['first_post']:.2f} s, upload "
            f"{piped['upload']:.2f} s) | "
            f"{cost['invocation']:.0f} / {cost['index_read']:.1f} / {cost['progress_write']:.1f} / "
            f"{cost['state_transitions']:.0f} ms | {piped['connections']} for {piped['chunks']} chunks | "
            f"{aws['pipeline'] / aws['raw']:.3f} ({aws['fixed_ms']:.0f} ms a chunk; CPU {alone['cpu_per_request'] * 1e6:.0f} "
            f"us a request, the pace below {aws['cpu_bound_ms']:.1f} ms answers at {chosen['memory_mb']} MB) |")
    print("\n".join(rows))
    if not args.no_write:
        append_rows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
