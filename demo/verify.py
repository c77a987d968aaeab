"""Check the guarantees from what a run produced: uploads, executions and what the core
system registered. Used by the demo (exit code) and the end-to-end tests."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class Upload:
    """One file put into the landing bucket, in upload order."""

    key: str
    version_id: str
    file_no: int
    records: int
    expect_failure: bool = False


@dataclass
class TenantVerdict:
    tenant: str
    files_uploaded: int
    files_succeeded: int
    files_failed: int
    files_in_order: bool
    executions_overlap: bool
    records_expected: int
    records_delivered: int
    duplicates: int
    missing: int
    out_of_order: int
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
    """``executions``: dicts with ``input`` (key, version_id), ``status``, ``startDate``,
    ``stopDate``; ``accepted``: the record bodies the core system registered, in order."""
    problems: list[str] = []
    by_version = {(e["input"]["key"], e["input"]["version_id"]): e for e in executions}
    ordered = sorted(executions, key=lambda e: e["startDate"])

    # G3: every upload has exactly one execution (G2: not two).
    starts = Counter((e["input"]["key"], e["input"]["version_id"]) for e in executions)
    for upload in uploads:
        count = starts[(upload.key, upload.version_id)]
        if count != 1:
            problems.append(f"{upload.key}: {count} executions instead of 1")

    # G1: executions in upload order, never overlapping.
    upload_rank = {(u.key, u.version_id): i for i, u in enumerate(uploads)}
    ranks = [upload_rank.get((e["input"]["key"], e["input"]["version_id"]), -1) for e in ordered]
    files_in_order = ranks == sorted(ranks)
    if not files_in_order:
        problems.append(f"files started out of upload order: {ranks}")
    overlap = any(
        _stop(previous) is None or _stop(previous) > current["startDate"]
        for previous, current in zip(ordered, ordered[1:])
    )
    if overlap:
        problems.append("two executions of the tenant overlapped")
    gaps = [
        (current["startDate"] - _stop(previous)).total_seconds()
        for previous, current in zip(ordered, ordered[1:])
        if _stop(previous) is not None
    ]

    succeeded = [u for u in uploads if by_version.get((u.key, u.version_id), {}).get("status") == "SUCCEEDED"]
    failed = [u for u in uploads if by_version.get((u.key, u.version_id), {}).get("status") in ("FAILED", "TIMED_OUT", "ABORTED")]
    for upload in uploads:
        status = by_version.get((upload.key, upload.version_id), {}).get("status")
        if upload.expect_failure and status != "FAILED":
            problems.append(f"{upload.key}: expected to fail, ended {status}")
        if not upload.expect_failure and status != "SUCCEEDED":
            problems.append(f"{upload.key}: ended {status}")

    # Records: every record of every successful file, once, in file order then record order.
    expected = [(u.file_no, seq) for u in uploads if not u.expect_failure for seq in range(u.records)]
    delivered = [(int(r["file"]), int(r["seq"])) for r in accepted]
    counts = Counter(delivered)
    duplicates = sum(c - 1 for c in counts.values() if c > 1)
    missing = len(set(expected) - set(counts))
    file_rank = {u.file_no: i for i, u in enumerate(uploads)}
    positions = [(file_rank.get(f, len(uploads)), seq) for f, seq in delivered]
    out_of_order = sum(1 for a, b in zip(positions, positions[1:]) if a > b)
    if duplicates:
        problems.append(f"{duplicates} records registered twice")
    if missing:
        problems.append(f"{missing} records missing")
    if out_of_order:
        problems.append(f"{out_of_order} records out of order")

    return TenantVerdict(
        tenant=tenant,
        files_uploaded=len(uploads),
        files_succeeded=len(succeeded),
        files_failed=len(failed),
        files_in_order=files_in_order,
        executions_overlap=overlap,
        records_expected=len(expected),
        records_delivered=len(delivered),
        duplicates=duplicates,
        missing=missing,
        out_of_order=out_of_order,
        handoff_gaps=gaps,
        problems=problems,
    )


def _stop(execution: dict) -> datetime | None:
    return execution.get("stopDate")
