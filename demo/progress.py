"""The demo run while it goes: the live progress table, when the run has settled, and what the
operator does for a halted tenant (`python -m ops` against the local pipeline, as its hint says).
"""

from __future__ import annotations

import io
import shlex
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from demo.scenarios import Plan
from demo.verify import Upload
from lambdas import contract, hints, ledger


class ChunkProgress:
    """The latest chunk each tenant started, from the Lambda invocations."""

    def __init__(self, pipe) -> None:
        self.latest: dict[str, tuple[int, int | None]] = {}
        self._chunk_counts: dict[str, int] = {}  # chunk_prefix -> chunk_count
        pipe.add_invocation_listener(self._on_invocation)

    def _on_invocation(self, function, event, result) -> None:
        if function.kind == "register" and result is None:
            count = self._chunk_counts.get(event.get("chunk_prefix", ""))
            self.latest[function.tenant] = (event.get("chunk_index", -1), count)
        elif function.kind == "split" and result is not None and not result.errored:
            split = result.value if isinstance(result.value, dict) else {}
            if "chunk_prefix" in split:
                self._chunk_counts[split["chunk_prefix"]] = split.get("chunk_count")
                self.latest[function.tenant] = (-1, split.get("chunk_count"))

    def of(self, tenant: str) -> str:
        """ "2 of 10": the chunk being registered, numbered from 0 as everywhere; "- of 10" between
        the split and the first chunk."""
        index, count = self.latest.get(tenant, (-1, None))
        return f"{index if index >= 0 else '-'} of {count}" if count else "-"


def progress_table(
    pipe, plan: Plan, uploads: dict[str, list[Upload]], started: float, chunks: ChunkProgress
) -> Table:
    table = Table(title=f"ordered ingest, local run ({time.monotonic() - started:.0f} s)", expand=False)
    for column in (
        "tenant",
        "uploaded",
        "queued",
        "in progress",
        "chunk",
        "done",
        "failed",
        "records delivered",
    ):
        table.add_column(column, justify="left" if column in ("tenant", "in progress") else "right")
    for tenant, files in plan.files.items():
        executions = pipe.executions(tenant)
        running = [e for e in executions if e["status"] == "RUNNING"]
        done = sum(e["status"] == "SUCCEEDED" for e in executions)
        failed = sum(e["status"] in contract.FAILED_STATUSES for e in executions)
        expected = sum(f.records for f in files)
        delivered = len(pipe.sink(tenant).accepted)
        current = running[0]["input"]["key"].rsplit("/", 1)[-1] if running else "-"
        table.add_row(
            tenant,
            f"{len(uploads[tenant])}/{len(files)}",
            str(max(0, len(uploads[tenant]) - len({e["key"] for e in executions}))),
            current,
            chunks.of(tenant) if running else "-",
            str(done),
            str(failed),
            f"{delivered:,}/{expected:,}",
        )
    return table


def run_ops(pipe, console: Console, *args: str) -> int:
    """Run the operator's CLI against the local pipeline, showing the command and what it printed."""
    from ops.cli import main as ops_main

    argv = ["--endpoint-url", pipe.endpoint_url, *args]
    console.print(f"[bold]$ python -m ops {' '.join(shlex.quote(a) for a in argv)}[/bold]")
    out = io.StringIO()
    code = ops_main(argv, out=out)
    console.print(out.getvalue().rstrip(), markup=False, soft_wrap=True)
    return code


def halted_tenants(pipe, resources) -> dict[str, Any]:
    """Tenants halted after a failed file, with the hint for it (`lambdas/hints.py`), from their
    ledger position; ``resources``: what `ops.discovery.discover` found for the pipeline."""
    ddb = pipe.client("dynamodb")
    positions = {t: ledger.Ledger(ddb, resources[t].ledger_table, t).read() for t in pipe.tenant_ids}
    return {t: hints.hint_for(position) for t, position in positions.items() if position.halted}


def settled(pipe, resources) -> bool:
    """Nothing left to do but wait for an operator: every tenant idle, or halted with nothing running."""
    halted = set(halted_tenants(pipe, resources))
    running = [t for t in halted if any(e["status"] == "RUNNING" for e in pipe.executions(t))]
    others = [t for t in pipe.tenant_ids if t not in halted]
    return not running and (not others or pipe.is_idle(tenants=others))


def operate(pipe, resources, console: Console) -> bool:
    """What the on-call person does for the halted tenants, as the hint says; False if nothing."""
    halted = halted_tenants(pipe, resources)
    if not halted:
        return False
    console.print(f"\n[yellow]Halted: {', '.join(halted)}[/yellow]: later files wait in the queue, in order.")
    run_ops(pipe, console, "status")
    for tenant, hint in halted.items():
        console.print(
            f"The operator follows the hint for {tenant}: {hint.text}", markup=False, soft_wrap=True
        )
        if hint.action == "resume":
            console.print(
                "The cause is fixed (the core system accepts the record now); the operator resumes:"
            )
            pipe.sink(tenant).clear_faults()
            run_ops(pipe, console, "resume", tenant)
        else:
            console.print(
                "This scenario shows the way out when no correction comes: the file must not be ingested, "
                "so the operator skips it and the next file starts (--scenario correction shows ops replace "
                "with the tenant's corrected upload):",
                markup=False,
                soft_wrap=True,
            )
            run_ops(
                pipe, console, "skip", tenant, "--reason", "malformed file; the tenant will not re-send it"
            )
    return True
