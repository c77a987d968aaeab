"""What the demo prints after the run: the verification table, what the injected faults did,
when each tenant finished, and why a run that timed out verified nothing.
"""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.table import Table

from demo.scenarios import Plan
from demo.verify import TenantVerdict, Upload, attempts
from lambdas import contract


def verdict_table(verdicts: list[TenantVerdict]) -> Table:
    table = Table(title="verification")
    for column in (
        "tenant",
        "files ok/failed/all",
        "order",
        "records",
        "dup",
        "missing",
        "handoff gap",
        "result",
    ):
        table.add_column(column)
    for v in verdicts:
        order = (
            "ok"
            if v.files_in_order and not v.executions_overlap and not v.records.out_of_order
            else "[red]BROKEN[/red]"
        )
        table.add_row(
            v.tenant,
            f"{v.files_succeeded}/{v.files_failed}/{v.files_uploaded}",
            order,
            f"{v.records_delivered:,}/{v.records_expected:,}",
            str(len(v.records.duplicates)),
            str(len(v.records.missing)),
            v.gap_summary,
            "[green]ok[/green]" if v.ok else "[red]" + "; ".join(v.problems) + "[/red]",
        )
    return table


def report_faults(pipe, console: Console) -> None:
    """What the injected faults did, as the pipeline saw them."""
    for tenant in pipe.tenant_ids:
        refused = Counter(r.status for r in pipe.sink(tenant).requests if r.status >= 300)
        resent = sum(1 for r in pipe.sink(tenant).requests if r.status < 300 and not r.registered)
        if refused or resent:
            statuses = ", ".join(f"{n} x HTTP {status}" for status, n in sorted(refused.items()))
            console.print(
                f"{tenant}: core system answered {statuses or 'no error'}; "
                f"{resent} resent record(s) recognised by their idempotency key, not registered again"
            )
    kills = Counter((tenant, kind) for tenant, kind, _ in pipe.faults.kills)
    for (tenant, kind), times in kills.items():
        recovery = (
            "its message came back and no file was started twice"
            if kind == "controller"
            else "the workflow retried it and it went on where the ledger says"
        )
        console.print(f"{tenant}: {kind} killed {times} time(s) mid-run; {recovery}")
    for tenant, original, copy in pipe.faults.duplicates_sent:
        console.print(f"{tenant}: event delivered twice (message {original} and copy {copy}); one execution")
    for notification in pipe.notifications:
        console.print(f"alarm topic: {notification.subject}", markup=False)
        for line in notification.message.splitlines():
            if line.startswith(("File:", "Stopped:", "Error:", "Hint:")):
                console.print(f"  {line}", markup=False)


def timeout_report(pipe, plan: Plan, uploads: dict[str, list[Upload]], timeout: float) -> str:
    """What had not closed when the run gave up: a timeout, not a verdict on the guarantees."""
    parts = []
    for tenant, files in plan.files.items():
        executions = pipe.executions(tenant)
        # A file is closed when its last attempt is (a resumed file runs again).
        closed = {
            file
            for file, tried in attempts(executions).items()
            if tried[-1]["status"] in contract.CLOSED_STATUSES
        }
        running = sum(e["status"] == "RUNNING" for e in executions)
        open_files = sum((u.key, u.version_id) not in closed for u in uploads[tenant])
        not_uploaded = len(files) - len(uploads[tenant])
        if open_files or not_uploaded:
            parts.append(
                f"{tenant} {running} running, {open_files - running} queued, {not_uploaded} not uploaded yet "
                f"(of {len(files)} files)"
            )
    left = "; ".join(parts) or "every file closed, an operator's step was still due"
    return (
        f"timed out after {timeout:.0f} s before the run finished: {left}. Nothing was verified: "
        "raise --timeout, or run fewer or smaller files (--files, --records, --big-records)."
    )


def finish_times(pipe, tenants: list[str], run_started_at: float) -> str:
    """When each tenant's last file closed, in seconds from the first upload: a slow tenant's
    core system delays only that tenant (G4)."""
    parts = []
    for tenant in tenants:
        stops = [e["stopDate"].timestamp() for e in pipe.executions(tenant) if e.get("stopDate")]
        parts.append(f"{tenant} {max(stops) - run_started_at:.1f} s" if stops else f"{tenant} -")
    return "Each tenant's last file closed at (from the first upload): " + ", ".join(parts)
