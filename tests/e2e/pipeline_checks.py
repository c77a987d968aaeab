"""Helpers of the end-to-end tests: test files, tenants files, and the guarantee checks.

The checks are plain functions raising AssertionError so that a test can also show that
they fire on a pipeline that breaks a guarantee (test_changed_construct.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

#: Every duration of the templates is multiplied by this (visibility timeout 30 s -> 1 s).
E2E_TIME_SCALE = 0.03
#: The runtime points every register function at its tenant's local sink; this is never called.
UNUSED_SINK = "http://127.0.0.1:9/unused"


def write_tenants(directory: Path, tenants: Sequence[dict[str, Any]], *, chunk_size: int = 3) -> Path:
    """A small tenants file; each tenant dict needs at least ``id`` (prefix defaults to ``<id>/``)."""
    document = {
        "defaults": {"format": "csv", "chunk_size": chunk_size, "sink": {"url": UNUSED_SINK}},
        "tenants": [{"prefix": f"{t['id']}/", **t} for t in tenants],
    }
    path = directory / "tenants.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def csv_file(file_id: str, records: int) -> bytes:
    """A CSV file whose records name their file and position: ``file,seq``."""
    return ("file,seq\n" + "".join(f"{file_id},{seq}\n" for seq in range(records))).encode()


def records_of(file_id: str, records: int) -> list[dict[str, str]]:
    """The records `csv_file` holds, as the core system receives them."""
    return [{"file": file_id, "seq": str(seq)} for seq in range(records)]


def wait_for(predicate: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll until ``predicate()`` is truthy (never a fixed sleep); return its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


# --- the guarantee checks ------------------------------------------------------------------


def assert_no_overlap(executions: Sequence[dict[str, Any]]) -> None:
    """G1: at most one file in progress: each execution started after the previous one stopped."""
    ordered = sorted(executions, key=lambda e: e["startDate"])
    for before, after in zip(ordered, ordered[1:]):
        assert before["stopDate"] is not None, f"{before['key']} never stopped"
        assert after["startDate"] >= before["stopDate"], (
            f"executions overlap: {after['key']} started at {after['startDate']} while "
            f"{before['key']} ran until {before['stopDate']}"
        )


def assert_files_in_order(executions: Sequence[dict[str, Any]], keys: Sequence[str]) -> None:
    """G1: one execution per file, started and finished in upload order."""
    by_start = [e["key"] for e in sorted(executions, key=lambda e: e["startDate"])]
    by_stop = [e["key"] for e in sorted(executions, key=lambda e: e["stopDate"])]
    assert by_start == list(keys), f"files started out of upload order: {by_start}"
    assert by_stop == list(keys), f"files finished out of upload order: {by_stop}"


def assert_records_in_file_order(received: Sequence[Any], files: Iterable[tuple[str, int]]) -> None:
    """G1 + G3: exactly the files' records, each once, files in order and records in file order."""
    expected = [record for file_id, count in files for record in records_of(file_id, count)]
    assert_no_duplicates(received)
    missing = [r for r in expected if r not in received]
    assert not missing, f"{len(missing)} records never registered, first {missing[:3]}"
    assert list(received) == expected, (
        "records reached the core system out of order; first difference at position "
        f"{next(i for i, (a, b) in enumerate(zip(received, expected)) if a != b)}"
    )


def assert_no_duplicates(received: Sequence[Any]) -> None:
    """G2: no record registered twice."""
    seen: set[str] = set()
    duplicates = []
    for record in received:
        text = json.dumps(record, sort_keys=True)
        if text in seen:
            duplicates.append(record)
        seen.add(text)
    assert not duplicates, f"{len(duplicates)} records registered twice, first {duplicates[:3]}"


def assert_requests_in_order(requests: Sequence[Any]) -> None:
    """G1: the core system never saw a record before an earlier one of the same file.

    Retries resend a chunk from its start, so positions may step back; what must never happen
    is a request for a record beyond the first one not yet registered.
    """
    registered: dict[str, int] = {}  # file -> records registered so far
    for request in requests:
        file_id, seq = request.body["file"], int(request.body["seq"])
        done = registered.get(file_id, 0)
        assert seq <= done, f"record {file_id}#{seq} was sent before {file_id}#{done} was registered"
        if request.registered:
            registered[file_id] = done + 1
