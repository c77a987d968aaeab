"""The measurements of bench/register.py: a raw keep-alive client, the register handler alone
and the core-system stand-in, each in a process of its own (started through the script's hidden
options), and one file through the whole local pipeline, timed chunk by chunk.
"""

from __future__ import annotations

import gc
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Self

from pipeline_constructs import budgets

#: The bench script: its hidden options (--raw-client, --handler-alone, --sink-process) run the
#: raw client, the handler alone and the stand-in below in processes of their own.
SCRIPT = str(Path(__file__).with_name("register.py"))


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
            chunk = records[first : first + batch]
            body, key = batch_body(chunk), batch_idempotency_key("raw", "f.csv", "v", first, len(chunk))
        connection.request(
            "POST",
            parts.path,
            body=body,
            headers={"Content-Type": "application/json", "Idempotency-Key": key, "X-Tenant-Id": "raw"},
        )
        response = connection.getresponse()
        response.read()
        assert 200 <= response.status < 300, response.status
    return {
        "rate": count / (time.perf_counter() - started),
        "cpu_per_request": (time.process_time() - cpu) / budgets.requests_per_chunk(count, batch),
    }


def measure_raw(url: str, count: int, batch: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, SCRIPT, "--raw-client", url, "--records", str(count), "--batch-size", str(batch)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


# --- the register handler alone --------------------------------------------------------------------


def handler_alone(spec: dict[str, Any]) -> dict[str, Any]:
    """`--handler-alone`: every chunk of the spec's file through `register_chunk.register_chunk`,
    one after the other, in this process (a warm function); returns rates and phase times."""
    os.environ.update(spec["environment"])
    import boto3

    from lambdas import contract, register_chunk
    from lambdas.ledger import Ledger
    from lambdas.runtime import BoundLogger, get_logger

    phases = {
        "index_read": 0.0,
        "fence": 0.0,
        "writes": 0.0,
        "s3_gets": 0,
        "fence_calls": 0,
        "write_calls": 0,
    }

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
    ledger.claim(
        ledger.read(),
        {
            **file,
            "event_id": task["execution_name"],
            "size": 0,
            "etag": None,  # type: ignore[typeddict-item]  # the bench file has no ETag
            "event_time": "",
        },
        task["execution_name"],
        time.time(),
    )
    phases.update({name: type(value)() for name, value in phases.items()})
    log = BoundLogger(get_logger("register_chunk"), {})
    started, cpu = time.perf_counter(), time.process_time()
    for index in range(task["chunk_count"]):
        progress: dict[str, Any] = {**task, "chunk_index": index, "start_record": index * task["chunk_size"]}
        while not progress.get("done"):
            progress = register_chunk.register_chunk(
                progress,
                config=config,
                s3=s3,
                ledger=ledger,  # type: ignore[arg-type]  # a counting stand-in of Ledger
                log=log,
                remaining_seconds=lambda: 900.0,
            )
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    size = task["chunk_size"]
    requests = sum(
        budgets.requests_per_chunk(min(size, task["record_count"] - index * size), config.sink_batch_size)
        for index in range(task["chunk_count"])
    )
    return {
        "rate": task["record_count"] / seconds,
        "seconds": seconds,
        "cpu_per_request": cpu / requests,
        **phases,
    }


def measure_handler_alone(spec: dict[str, Any]) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
        json.dump(spec, file)
    try:
        out = subprocess.run(
            [sys.executable, SCRIPT, "--handler-alone", file.name],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        os.unlink(file.name)
    return json.loads(out.strip().splitlines()[-1])


# --- the core-system stand-in in a process of its own ----------------------------------------------


class SinkProcess:
    """The core-system stand-in in a process of its own, driven over its stdin/stdout."""

    def __enter__(self) -> Self:
        self.process = subprocess.Popen(
            [sys.executable, SCRIPT, "--sink-process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
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
            Path(argument).write_text(
                json.dumps(
                    {
                        "posts": sink.posts,
                        "connections": sink.connections,
                        "accepted": sink.accepted,
                        "requests": [(r.time, r.body) for r in sink.requests],
                    }
                )
            )
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


def chunk_breakdown(
    first_of_chunk: dict[int, tuple[float, float]], invocations: list[tuple[float, float]]
) -> dict[str, float]:
    """Mean seconds per chunk: from an invocation's start to its chunk's first POST plus from its
    last POST to its end (`in_invocation`), and from one invocation's end to the next one's start
    (`between`). Invocations are matched to chunks in order (one per chunk unless a deadline split one)."""
    chunks = sorted(first_of_chunk.values())
    ins = []
    for (first, last), (start, end) in zip(chunks, invocations, strict=False):
        ins.append(max(0.0, first - start) + max(0.0, end - last))
    between = [invocations[i + 1][0] - invocations[i][1] for i in range(len(invocations) - 1)]
    return {
        "in_invocation": statistics.fmean(ins) if ins else 0.0,
        "between": statistics.fmean(between) if between else 0.0,
        "chunks": len(chunks),
        "invocations": len(invocations),
    }


def pipeline_run(
    pipe: Any,
    sink: SinkProcess,
    calls: RegisterInvocations,
    tenant: str,
    name: str,
    count: int,
    chunk_size: int,
) -> dict[str, Any]:
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
    return {
        "seconds": seconds,
        "rate": count / seconds,
        "register_rate": count / (times[-1] - times[0]),
        "first_post": times[0] - started,
        "upload": uploaded - started,
        "sending_rate": count / sending if sending > 0 else 0.0,
        "posts": received["posts"],
        "connections": received["connections"],
        **chunk_breakdown(chunks, calls.take(tenant)),
    }


def register_function(pipe: Any, tenant: str) -> Any:
    return next(f for f in pipe.deployment.functions.values() if f.tenant == tenant and f.kind == "register")


def file_task(pipe: Any, tenant: str, name: str) -> dict[str, Any]:
    """The register task of `name`'s last split (its manifest in the work bucket), chunk 0."""
    from lambdas import contract

    s3 = pipe.client("s3")
    bucket = register_function(pipe, tenant).environment[contract.env_name("work_bucket")]
    manifests = []
    for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=contract.work_prefix(tenant)
    ):
        for item in page.get("Contents", []):
            if item["Key"].endswith("manifest.json"):
                manifest = json.loads(s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read())
                if manifest["source"]["key"].endswith(name):
                    manifests.append((item["LastModified"], item["Key"], manifest))
    _, key, manifest = max(manifests, key=lambda found: found[0])
    source = manifest["source"]
    return {
        "tenant": tenant,
        "bucket": source["bucket"],
        "key": source["key"],
        "version_id": source["version_id"],
        "execution_name": f"alone-{name.removesuffix('.csv')}",
        "chunk_prefix": key.removesuffix("manifest.json"),
        "chunk_size": int(manifest["chunk_size"]),
        "chunk_count": int(manifest["chunk_count"]),
        "record_count": int(manifest["record_count"]),
        "fault_since": None,
    }
