"""The guarantees, checked from what a run produced: the uploads, the executions and what the
core system received. The one implementation of the checks: the demo turns the problems into
its verdict table, the end-to-end tests (`tests/e2e/pipeline_checks.py`) into assertion
failures. A check returns the problems it found; none means the guarantee held.

Records name their file and position (``{"file": ..., "seq": ...}``, see `demo.samples`).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from lambdas import contract

RecordId = tuple[str, int]  # (file, seq)
_NEVER = datetime.max.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Upload:
    """One file put into the landing bucket, in upload order."""

    key: str
    version_id: str
    file_id: Any  # what its records hold in "file"
    records: int
    expect_failure: bool = False


def record_id(record: Any) -> RecordId:
    return str(record["file"]), int(record["seq"])


def _start(execution: dict[str, Any]) -> datetime:
    return execution["startDate"]


def _stop(execution: dict[str, Any]) -> datetime:
    return execution.get("stopDate") or _NEVER


def is_resume(execution: dict[str, Any]) -> bool:
    """A file's first execution is named after its event id; `ops resume` runs it again under
    the next attempt's name (`contract.execution_name`), never the first's."""
    event_id = (execution.get("input") or {}).get("event_id")
    return event_id is not None and execution.get("name") != contract.execution_name(event_id)


def attempts(executions: Sequence[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Each file version's executions, first attempt first."""
    by_file: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for execution in sorted(executions, key=_start):
        by_file.setdefault((execution["key"], execution["version_id"]), []).append(execution)
    return by_file


# --- G1: one file at a time, in upload order -------------------------------------------------


def overlap_problems(executions: Sequence[dict[str, Any]]) -> list[str]:
    """Each execution started after the previous one stopped."""
    ordered = sorted(executions, key=_start)
    problems = []
    for before, after in zip(ordered, ordered[1:]):
        if after["startDate"] < _stop(before):
            ran_until = before.get("stopDate") or "now (still running)"
            problems.append(
                f"executions overlap: {after['key']} started at {after['startDate']} while {before['key']} ran until {ran_until}"
            )
    return problems


def file_order_problems(executions: Sequence[dict[str, Any]], keys: Sequence[str]) -> list[str]:
    """Files started (first attempt) and finished (last attempt) in upload order (``keys``: the
    uploads' keys, in order). A resumed file's attempts all come before the next file's."""
    by_start = list(dict.fromkeys(e["key"] for e in sorted(executions, key=_start)))
    by_stop = list(reversed(dict.fromkeys(e["key"] for e in sorted(executions, key=_stop, reverse=True))))
    problems = []
    if by_start != list(keys):
        problems.append(f"files started out of upload order: {by_start}")
    if by_stop != list(keys):
        problems.append(f"files finished out of upload order: {by_stop}")
    return problems


def request_order_problems(requests: Iterable[Any]) -> list[str]:
    """The core system never received a record before an earlier one of its file was
    registered. A retried chunk is resent from its start, so positions may step back. In batch
    mode a batch's first record must be due; the rest of the batch follows it (`batch_offset`)."""
    registered: dict[str, int] = {}  # file -> records registered so far
    for request in requests:
        file_id, seq = record_id(request.body)
        done = registered.get(file_id, 0)
        if seq - getattr(request, "batch_offset", 0) > done:
            return [f"record {file_id}#{seq} was sent before {file_id}#{done} was registered"]
        if request.registered:
            registered[file_id] = done + 1
    return []


# --- G2 and G3: every file once, every record once --------------------------------------------


def execution_count_problems(executions: Sequence[dict[str, Any]], uploads: Sequence[Upload]) -> list[str]:
    """Exactly one execution per uploaded version, not counting an operator's resumes of it:
    none missing (G3), none doubled (G2)."""
    counts = Counter((e["key"], e["version_id"]) for e in executions if not is_resume(e))
    return [
        f"{u.key}: {n} executions instead of 1" for u in uploads if (n := counts[(u.key, u.version_id)]) != 1
    ]


@dataclass(frozen=True)
class RecordCheck:
    """What the core system registered compared with the records of the files."""

    duplicates: list[RecordId]  # G2
    missing: list[RecordId]  # G3
    unexpected: list[RecordId]  # from no expected file
    out_of_order: list[int]  # G1: positions of records received after a later one

    @property
    def problems(self) -> list[str]:
        return [
            problem
            for problem in (
                _some(self.duplicates, "registered twice"),
                _some(self.missing, "missing (never registered)"),
                _some(self.unexpected, "registered from no expected file"),
                _some(self.out_of_order, "out of order", "first at position"),
            )
            if problem
        ]


def check_records(received: Sequence[Any], files: Sequence[tuple[Any, int]]) -> RecordCheck:
    """``files``: (file id, record count) of each file whose records must be registered, in
    upload order. Every record once, files in that order, records in file order."""
    rank = {str(file_id): index for index, (file_id, _) in enumerate(files)}
    expected = [(str(file_id), seq) for file_id, count in files for seq in range(count)]
    ids = [record_id(r) for r in received]
    counts = Counter(ids)
    positions = [(rank[f], seq, index) for index, (f, seq) in enumerate(ids) if f in rank]
    return RecordCheck(
        duplicates=[i for i, n in counts.items() if n > 1],
        missing=[i for i in expected if i not in counts],
        unexpected=[i for i in counts if i[0] not in rank],
        out_of_order=[b[2] for a, b in zip(positions, positions[1:]) if b[:2] < a[:2]],
    )


def duplicate_problems(received: Sequence[Any]) -> list[str]:
    """G2 alone: no record registered twice."""
    return replace(check_records(received, []), unexpected=[]).problems


def _some(items: list[Any], what: str, first: str = "first") -> str | None:
    if not items:
        return None
    shown = ", ".join(f"{i[0]}#{i[1]}" if isinstance(i, tuple) else str(i) for i in items[:3])
    return f"{len(items)} records {what} ({first} {shown})"


# --- the demo's verdict ------------------------------------------------------------------------


@dataclass
class TenantVerdict:
    tenant: str
    files_uploaded: int
    files_succeeded: int
    files_failed: int
    files_in_order: bool
    executions_overlap: bool
    records: RecordCheck
    records_expected: int
    records_delivered: int
    handoff_gaps: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def gap_summary(self) -> str:
        if not self.handoff_gaps:
            return "-"
        return f"median {statistics.median(self.handoff_gaps):.1f}s, max {max(self.handoff_gaps):.1f}s"


def verify_tenant(
    tenant: str, uploads: list[Upload], executions: list[dict], accepted: list[dict]
) -> TenantVerdict:
    """``executions`` as `LocalPipeline.executions` describes them; ``accepted``: the record
    bodies the core system registered, in order. ``uploads`` in the order their records are due:
    a correction that replaced a failed file (``expect_failure``) right after it."""
    # A file's outcome is its last attempt's (a failed file an operator resumed can succeed).
    status = {file: tried[-1]["status"] for file, tried in attempts(executions).items()}
    outcomes = []
    for upload in uploads:
        ended = status.get((upload.key, upload.version_id))
        wanted = "FAILED" if upload.expect_failure else "SUCCEEDED"
        if ended != wanted:
            outcomes.append(
                f"{upload.key}: ended {ended}" + (", expected to fail" if upload.expect_failure else "")
            )
    overlap = overlap_problems(executions)
    # A correction uploaded under its failed file's key and run in its place (`ops replace`) is
    # one more version of that key, not a file of its own: list each key once, in order.
    order = file_order_problems(executions, list(dict.fromkeys(u.key for u in uploads)))
    records = check_records(accepted, [(u.file_id, u.records) for u in uploads if not u.expect_failure])
    ordered = sorted(executions, key=_start)
    return TenantVerdict(
        tenant=tenant,
        files_uploaded=len(uploads),
        files_succeeded=sum(status.get((u.key, u.version_id)) == "SUCCEEDED" for u in uploads),
        files_failed=sum(status.get((u.key, u.version_id)) in contract.FAILED_STATUSES for u in uploads),
        files_in_order=not order,
        executions_overlap=bool(overlap),
        records=records,
        records_expected=sum(u.records for u in uploads if not u.expect_failure),
        records_delivered=len(accepted),
        handoff_gaps=[
            (after["startDate"] - before["stopDate"]).total_seconds()
            for before, after in zip(ordered, ordered[1:])
            if before.get("stopDate")
        ],
        problems=[
            *execution_count_problems(executions, uploads),
            *outcomes,
            *order,
            *overlap,
            *records.problems,
        ],
    )
