"""Helpers of the end-to-end tests: test files, tenants files, and the guarantee checks.

The checks are those of `demo.verify` (one implementation), raising AssertionError with the
problems found, so that a test can also show that they fire on a pipeline that breaks a
guarantee (test_changed_construct.py, test_changed_controller.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from demo import verify
from lambdas import contract

#: Every duration of the templates is multiplied by this (visibility timeout 30 s -> 1 s).
E2E_TIME_SCALE = 0.03
#: The runtime points every register function at its tenant's local sink; this is never called.
UNUSED_SINK = "http://127.0.0.1:9/unused"


def write_tenants(
    directory: Path,
    tenants: Sequence[dict[str, Any]],
    *,
    chunk_size: int = 3,
    routing: dict[str, Any] | None = None,
) -> Path:
    """A small tenants file; each tenant dict needs at least ``id`` (prefix defaults to ``<id>/``);
    ``routing``: the file's ``routing:`` block (e.g. ``{"shards": 2}``)."""
    document: dict[str, Any] = {
        "defaults": {"format": "csv", "chunk_size": chunk_size, "sink": {"url": UNUSED_SINK}},
        # `auth: {type: none}` on each tenant (defaults may not give it), unless the tenant says otherwise.
        "tenants": [
            {"prefix": f"{t['id']}/", **t, "sink": {"auth": {"type": "none"}, **t.get("sink", {})}}
            for t in tenants
        ],
    }
    if routing is not None:
        document["routing"] = routing
    path = directory / "tenants.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def csv_file(file_id: str, records: int) -> bytes:
    """A CSV file whose records name their file and position: ``file,seq``."""
    return ("file,seq\n" + "".join(f"{file_id},{seq}\n" for seq in range(records))).encode()


def hold_at(pipe: Any, tenant: str, file_id: str, seq: int) -> Any:
    """Keep file `file_id` (made by `csv_file`) running at record `seq` until the test calls the
    sink's `clear_faults()`: the core system answers 503 to that record, so the workflow waits for
    it (up to the outage budget, 108 s at the tests' time scale), not for a guessed time."""
    return pipe.sink(tenant).fail_with(503, times=None, on_record={"file": file_id, "seq": str(seq)})


def records_of(file_id: str, records: int) -> list[dict[str, str]]:
    """The records `csv_file` holds, as the core system receives them."""
    return [{"file": file_id, "seq": str(seq)} for seq in range(records)]


def ops(pipe: Any, *args: str) -> tuple[int, str]:
    """Run `python -m ops` against the pipeline's endpoint, as an operator would: (exit code, output)."""
    import io

    from ops.cli import main as ops_main

    out = io.StringIO()
    code = ops_main(["--endpoint-url", pipe.endpoint_url, *args], out=out)
    return code, out.getvalue()


def status(pipe: Any, tenant: str) -> dict[str, Any]:
    """`ops status TENANT --json` (it must succeed: exit 0, or 9 exactly when the tenant is halted)."""
    from ops.cli import EXIT_HALTED, EXIT_OK

    code, out = ops(pipe, "status", tenant, "--json")
    assert code in (EXIT_OK, EXIT_HALTED), out
    (found,) = json.loads(out)
    assert (code == EXIT_HALTED) == (found["state"] == "halted"), (code, found["state"])
    return found


def halted(pipe: Any, tenant: str) -> bool:
    """The tenant is halted and none of its executions runs any more."""
    return status(pipe, tenant)["state"] == "halted" and not any(
        e["status"] == "RUNNING" for e in pipe.executions(tenant)
    )


def log_lines(pipe: Any, tenant: str, kind: str) -> list[dict[str, Any]]:
    """The JSON records of the tenant's ``kind`` function's log, oldest first."""
    text = pipe.logs(pipe.tenants[tenant].functions[kind])
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def timeouts(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The invocations that timed out among a function's log records (`log_lines`): Lambda's
    `platform.report` with status "timeout"."""
    return [
        line
        for line in lines
        if line.get("type") == "platform.report" and line["record"]["status"] == "timeout"
    ]


def emf_records(pipe: Any, tenant: str, kind: str, metric: str) -> list[dict[str, Any]]:
    """The EMF records with ``metric`` that the tenant's ``kind`` function printed (its log,
    oldest first), each checked to be published under the tenant's dimension."""
    records = []
    for record in log_lines(pipe, tenant, kind):
        names = {m["Name"] for d in record.get("_aws", {}).get("CloudWatchMetrics", []) for m in d["Metrics"]}
        if metric in names:
            assert record[contract.TENANT_DIMENSION] == tenant, record
            records.append(record)
    return records


def emf_values(pipe: Any, tenant: str, kind: str, metric: str) -> list[float]:
    """The values of ``metric`` in the tenant's ``kind`` function's EMF records, oldest first."""
    return [record[metric] for record in emf_records(pipe, tenant, kind, metric)]


def wait_for(predicate: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll until ``predicate()`` is truthy (never a fixed sleep); return its value. The pause
    grows from ``interval`` to 0.5 s: a predicate may cost moto dozens of calls (`ops status`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
        interval = min(interval * 1.5, 0.5)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


# --- the guarantee checks ------------------------------------------------------------------


def _hold(problems: list[str]) -> None:
    assert not problems, "; ".join(problems)


def assert_no_overlap(executions: Sequence[dict[str, Any]]) -> None:
    """G1: at most one file in progress: each execution started after the previous one stopped."""
    _hold(verify.overlap_problems(executions))


def assert_files_in_order(executions: Sequence[dict[str, Any]], keys: Sequence[str]) -> None:
    """G1: one execution per file, started and finished in upload order."""
    _hold(verify.file_order_problems(executions, keys))


def assert_records_in_file_order(received: Sequence[Any], files: Iterable[tuple[str, int]]) -> None:
    """G1 + G2 + G3: exactly the files' records, each once, files in order and records in file order."""
    _hold(verify.check_records(received, list(files)).problems)


def assert_no_duplicates(received: Sequence[Any]) -> None:
    """G2: no record registered twice."""
    _hold(verify.duplicate_problems(received))


def assert_requests_in_order(requests: Sequence[Any]) -> None:
    """G1: the core system never saw a record before an earlier one of the same file was registered."""
    _hold(verify.request_order_problems(requests))


def first_sends(requests: Sequence[Any]) -> list[Any]:
    """The requests without the repeats of a key already sent: the register function sends a
    request again, under its key, when the answer did not come within the sink timeout (0.3 s at
    the tests' time scale, which a starved machine can miss). What a test counts is what was sent
    for the first time."""
    seen: set[Any] = set()
    firsts = []
    for request in requests:
        mark = (request.idempotency_key, request.batch_offset)
        if mark not in seen:
            seen.add(mark)
            firsts.append(request)
    return firsts


def assert_one_key_per_record(requests: Sequence[Any]) -> None:
    """G2: every record the core system saw came under one idempotency key, however often it
    was sent (a record sent again after a crash, a retry or a resume carries the key it had)."""
    keys: dict[tuple[Any, Any], set[str | None]] = {}
    for request in requests:
        keys.setdefault((request.body["file"], request.body["seq"]), set()).add(request.idempotency_key)
    _hold([f"record {record} was sent under {len(k)} keys" for record, k in keys.items() if len(k) > 1])
