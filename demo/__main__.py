"""Run the pipeline of a tenants file locally, end to end, and verify the guarantees.

    python -m demo                       # default tenants.yaml, sample files, live progress
    python -m demo --scenario malformed  # inject a fault (see --help)
    python -m demo --scenario halt-resume  # a failed file halts its tenant; ops resume continues it
    python -m demo --scenario correction   # ops replace puts a corrected file in a bad one's place; ops pause, unpause
    python -m demo --serve               # keep the local pipeline up for your own files

Records and chunks are numbered from 0 in everything it prints (as the ledger, `ops` and the
failure notification number them), lines of a file from 1.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from demo.samples import SampleFile, malformed, sample_files
from demo.verify import TenantVerdict, Upload, attempts, verify_tenant
from lambdas import closer, contract, hints, ledger
from pipeline_constructs.config import ConfigError, load_config

EXIT_HELD, EXIT_VIOLATED, EXIT_USAGE, EXIT_TIMED_OUT, EXIT_STOPPED = 0, 1, 2, 3, 130
EXIT_CODES = (
    "exit status: 0 every guarantee held; 1 a guarantee was violated (the verification table says which); "
    "2 bad usage or tenants file; 3 the run timed out before every file closed (--timeout): nothing was verified; "
    "130 stopped (Ctrl-C, SIGTERM or its output closed) before the verification: nothing was verified. "
    "--serve runs until Ctrl-C, SIGTERM or its output closes, then exits with the status of the verification "
    "before it (0 with --files 0: there is none)"
)
#: The records of the one big file when no scenario runs (a scenario makes its point without it).
BIG_RECORDS = 100_000

SCENARIOS = {
    "none": "no fault",
    "core-errors": "the core system answers 503 and 429 to some records (retried, never registered twice)",
    "malformed": "the first tenant's second file has a broken line: the tenant halts (on_failure: halt) with "
    "its later files queued; no correction comes, so the operator skips the file with `ops skip` and the later "
    "files go on, in order (`correction` shows the order-keeping way, `ops replace`)",
    "halt-resume": "the core system rejects a record of the first tenant's second file: the tenant halts with its "
    "later files queued; the core system is fixed and the operator runs `ops resume`: the file continues at that "
    "record, then the later files, every record once and in order",
    "crash": "the first tenant's controller is killed (SIGKILL) right after StartExecution once (the redelivery "
             "starts nothing new), its split and register processes mid-file and mid-chunk (retried, nothing lost "
             "or registered twice)",
    "duplicate-event": "the first tenant's first event is delivered twice (one execution only)",
    "slow-tenant": "the first tenant's core system is slow (other tenants are not delayed)",
    "correction": "the first CSV tenant (on_failure: halt) gets 6 files, the third with a row missing a field: it halts; the tenant "
                  "uploads the corrected file under the same key and the operator runs `ops replace`: the core system "
                  "gets files 1, 2, 3 (corrected), 4, 5, 6, every record once, in order; then a planned maintenance: "
                  "`ops pause` stops a file mid-way without failing, `ops unpause` runs it on (its own 9 files, "
                  "--files does not apply; demo/correction.py)",
}


@dataclass
class Plan:
    files: dict[str, list[SampleFile]]
    expect_failure: set[tuple[str, str]]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__.split("\n\n")[0], epilog=EXIT_CODES)
    parser.add_argument("--tenants", default="tenants.yaml", type=Path, help="tenants file (default: tenants.yaml)")
    parser.add_argument("--files", type=int, default=5, help="files per tenant (default: 5)")
    parser.add_argument("--records", type=int, default=300, help="typical records per file (default: 300)")
    parser.add_argument(
        "--big-records", type=int,
        help=f"records of the one big file, given to the tenant with the largest chunk_size (default: {BIG_RECORDS} "
        "without --scenario, 0 with one, so that the scenario shows its point within a minute; 0: none)",
    )
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="none",
                        help="fault to inject: " + "; ".join(f"{k}: {v}" for k, v in SCENARIOS.items()))
    parser.add_argument("--time-scale", type=float, default=0.1,
                        help="factor applied to visibility timeouts and retry waits (default: 0.1)")
    parser.add_argument("--timeout", type=float, default=600, help="give up after this many seconds (default: 600)")
    parser.add_argument("--serve", action="store_true",
                        help="print the pipeline's endpoint and an upload command first; after the demo files "
                        "(use --files 0 to skip them), keep the pipeline running for your own files, uploaded "
                        "with the AWS CLI, until Ctrl-C")
    parser.add_argument("--timeline", type=Path, metavar="FILE.png",
                        help="at the end, draw what happened into this file (.png, .svg or .pdf): a lane per "
                        "tenant, a bar per execution coloured by outcome, halts, resumes and hand-offs marked")
    args = parser.parse_args(argv)
    if args.big_records is None:
        args.big_records = BIG_RECORDS if args.scenario == "none" else 0
    if args.timeline and args.scenario == "correction":
        parser.error("--timeline does not draw `ops replace` and `ops pause` (it would show them as halts and "
                     "resumes): run --scenario correction without it")
    if args.timeline:
        from demo.timeline import SUFFIXES  # matplotlib: only when asked for

        if args.timeline.suffix.lower() not in SUFFIXES or not args.timeline.resolve().parent.is_dir():
            parser.error(f"--timeline {args.timeline}: give a {' or '.join(SUFFIXES)} file in an existing directory")
    if args.files < 0 or args.records < 1 or args.big_records < 0:
        parser.error("--files must be >= 0, --records >= 1, --big-records >= 0")
    return args


def make_plan(config, args: argparse.Namespace) -> Plan:
    tenants = list(config.tenants)
    big_tenant = max(tenants, key=lambda t: t.chunk_size).id if args.big_records and args.files else None
    files = {
        t.id: sample_files(
            t.id, t.format, files=args.files, records=args.records,
            big_records=args.big_records if t.id == big_tenant else 0,
        )
        for t in tenants
    }
    expect_failure: set[tuple[str, str]] = set()
    first = tenants[0]
    if args.scenario == "malformed" and args.files:
        bad = malformed(first.id, first.format, file_no=900, records=50, bad_line=7)
        files[first.id].insert(min(1, len(files[first.id])), bad)
        expect_failure.add((first.id, bad.name))
    return Plan(files=files, expect_failure=expect_failure)


def inject(pipe, scenario: str, first_tenant: str) -> None:
    if scenario == "core-errors":
        for tenant in pipe.tenant_ids:
            pipe.sink(tenant).fail_with(status=503, times=3, on_record=7)
            pipe.sink(tenant).fail_with(status=429, times=2, on_record=42)
    elif scenario == "crash":
        pipe.faults.kill(first_tenant, "controller", after="sfn.StartExecution")
        pipe.faults.kill(first_tenant, "split", after="s3.PutObject", times=1)
        pipe.faults.kill(first_tenant, "register", after="sink", count=3, times=2)
    elif scenario == "duplicate-event":
        pipe.faults.duplicate_next_event(first_tenant)
    elif scenario == "slow-tenant":
        pipe.sink(first_tenant).latency(0.05)
    elif scenario == "halt-resume":
        pipe.sink(first_tenant).reject(on_record=lambda body: (str(body.get("file")), str(body.get("seq"))) == ("1", "42"))


def upload_all(pipe, plan: Plan, uploads: dict[str, list[Upload]]) -> None:
    """Each tenant's files in a burst, tenants in parallel (as independent external systems)."""

    def burst(tenant: str, files: list[SampleFile]) -> None:
        for sample in files:
            key, version_id = pipe.put_file(tenant, sample.name, sample.body)
            uploads[tenant].append(
                Upload(key=key, version_id=version_id, file_id=sample.file_no, records=sample.records,
                       expect_failure=(tenant, sample.name) in plan.expect_failure)
            )

    threads = [threading.Thread(target=burst, args=(t, f)) for t, f in plan.files.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


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
        """"2 of 10": the chunk being registered, numbered from 0 as everywhere; "- of 10" between
        the split and the first chunk."""
        index, count = self.latest.get(tenant, (-1, None))
        return f"{index if index >= 0 else '-'} of {count}" if count else "-"


def progress_table(pipe, plan: Plan, uploads: dict[str, list[Upload]], started: float, chunks: ChunkProgress) -> Table:
    table = Table(title=f"ordered ingest, local run ({time.monotonic() - started:.0f} s)", expand=False)
    for column in ("tenant", "uploaded", "queued", "in progress", "chunk", "done", "failed", "records delivered"):
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
            tenant, f"{len(uploads[tenant])}/{len(files)}",
            str(max(0, len(uploads[tenant]) - len({e["key"] for e in executions}))), current,
            chunks.of(tenant) if running else "-", str(done), str(failed),
            f"{delivered:,}/{expected:,}",
        )
    return table


def verdict_table(verdicts: list[TenantVerdict]) -> Table:
    table = Table(title="verification")
    for column in ("tenant", "files ok/failed/all", "order", "records", "dup", "missing", "handoff gap", "result"):
        table.add_column(column)
    for v in verdicts:
        order = "ok" if v.files_in_order and not v.executions_overlap and not v.records.out_of_order else "[red]BROKEN[/red]"
        table.add_row(
            v.tenant,
            f"{v.files_succeeded}/{v.files_failed}/{v.files_uploaded}",
            order,
            f"{v.records_delivered:,}/{v.records_expected:,}",
            str(len(v.records.duplicates)), str(len(v.records.missing)), v.gap_summary,
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
            console.print(f"{tenant}: core system answered {statuses or 'no error'}; "
                          f"{resent} resent record(s) recognised by their idempotency key, not registered again")
    kills = Counter((tenant, kind) for tenant, kind, _ in pipe.faults.kills)
    for (tenant, kind), times in kills.items():
        recovery = ("its message came back and no file was started twice" if kind == "controller"
                    else "the workflow retried it and it went on where the ledger says")
        console.print(f"{tenant}: {kind} killed {times} time(s) mid-run; {recovery}")
    for tenant, original, copy in pipe.faults.duplicates_sent:
        console.print(f"{tenant}: event delivered twice (message {original} and copy {copy}); one execution")
    for notification in pipe.notifications:
        console.print(f"alarm topic: {notification.subject}", markup=False)
        for line in notification.message.splitlines():
            if line.startswith(("File:", "Stopped:", "Error:", "Hint:")):
                console.print(f"  {line}", markup=False)


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
        console.print(f"The operator follows the hint for {tenant}: {hint.text}", markup=False, soft_wrap=True)
        if hint.action == "resume":
            console.print("The cause is fixed (the core system accepts the record now); the operator resumes:")
            pipe.sink(tenant).clear_faults()
            run_ops(pipe, console, "resume", tenant)
        else:
            console.print("This scenario shows the way out when no correction comes: the file must not be ingested, "
                          "so the operator skips it and the next file starts (--scenario correction shows ops replace "
                          "with the tenant's corrected upload):", markup=False, soft_wrap=True)
            run_ops(pipe, console, "skip", tenant, "--reason", "malformed file; the tenant will not re-send it")
    return True


class DemoConsole(Console):
    """A console that stops the run, as Ctrl-C does, when the reader of its output goes away
    (`python -m demo --serve | head -5`): rich's own answer is exit status 1, which here says a
    guarantee was violated, and a Live table's refresh thread cannot exit the process."""

    def on_broken_pipe(self) -> None:
        self.quiet = True  # nobody reads what is left to print
        if self.file is sys.stdout:  # Python's own flush of stdout at exit must not fail again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        if threading.current_thread() is threading.main_thread():
            raise KeyboardInterrupt
        signal.raise_signal(signal.SIGINT)  # from a Live table's refresh thread: to the main thread


def quiet_broken_pipes_at_exit() -> None:
    """After Ctrl-C, hide the BrokenPipeError of the CDK's exit hook: Ctrl-C reaches every process
    of the terminal's foreground group, also the node process (jsii) the app was synthesized with,
    and jsii's exit hook then writes to it ("Exception ignored in atexit callback"); it says
    nothing about the run. Any other exception at exit is shown as before."""
    shown = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, BrokenPipeError):
            shown(unraisable)

    sys.unraisablehook = hook


def serve_banner(pipe, console: Console, *, demo_files: bool) -> None:
    """What `--serve` prints first, before any table: the endpoint and an upload command."""
    prefixes = ", ".join(f"{t}: {pipe.tenants[t].prefix}" for t in pipe.tenant_ids)
    first = pipe.tenants[pipe.tenant_ids[0]].prefix
    then = "After the demo's files (--files 0 skips them), executions" if demo_files else "Executions"
    console.print(
        f"\nThe local pipeline is running. Endpoint: [bold]{pipe.endpoint_url}[/bold] "
        f"(any access key; region us-east-1). Tenant prefixes: {prefixes}\n"
        f"Upload a file:\n"
        f"  AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test aws --endpoint-url {pipe.endpoint_url} "
        f"--region us-east-1 s3 cp my.csv s3://{pipe.landing_bucket}/{first}my.csv\n"
        f"{then} and the records the core system registered are printed below, and so is every "
        "upload outside the tenant prefixes (no tenant ingests it). Ctrl-C stops.",
        soft_wrap=True,
    )


def serve(pipe, console: Console, resources, *, banner: bool = False) -> None:
    """Print each file that closes and each upload outside every tenant prefix until Ctrl-C,
    SIGTERM or the output closes; ``banner``: print `serve_banner` first (when no demo file ran:
    else it came before the demo's tables, and one line points back to it)."""
    shown: set[str] = set()
    looks: Counter[str] = Counter()  # of a failed execution whose close the ledger does not hold yet
    stray = StrayUploads(pipe)

    def new_lines() -> list[str]:
        lines = stray.new()
        for tenant in pipe.tenant_ids:
            for execution in newly_closed(pipe, tenant, shown):
                name = execution["name"]
                closed = None if execution["status"] == "SUCCEEDED" else closed_attempt(pipe, resources[tenant], name)
                if closed is None and execution["status"] != "SUCCEEDED" and looks[name] < 3:
                    looks[name] += 1  # the closer records it, then its invocation ends: look again then
                    continue
                shown.add(name)
                lines.append(file_outcome(tenant, execution, closed))
        return lines

    # A file closes, and its close reaches the ledger, in a Lambda invocation (the closer): wait
    # for one to end instead of polling; uploads outside every prefix run no function: look for
    # them every SERVE_LOOK_SECONDS.
    activity = threading.Event()
    pipe.add_invocation_listener(lambda _function, _event, result: result is not None and activity.set())

    def wait() -> None:
        activity.wait(SERVE_LOOK_SECONDS)
        activity.clear()

    def first() -> None:
        if banner:
            serve_banner(pipe, console, demo_files=False)
        else:
            console.print(f"\nServing {pipe.endpoint_url} for your own files (the upload command is above). "
                          "Ctrl-C stops.", markup=False, soft_wrap=True)

    print_until_stopped(console, new_lines, wait, first=first)


def print_until_stopped(console: Console, new_lines: Callable[[], list[str]], wait: Callable[[], None], *,
                        first: Callable[[], None] = lambda: None) -> None:
    """Print `first`, then what `new_lines` finds, then `wait`, again and again, until Ctrl-C
    (SIGTERM and a closed output arrive as it: `_stop_on_sigterm`, `DemoConsole`)."""
    try:
        first()
        while True:
            for line in new_lines():
                console.print(line, markup=False, soft_wrap=True)
            wait()
    except KeyboardInterrupt:
        quiet_broken_pipes_at_exit()
        with contextlib.suppress(KeyboardInterrupt):  # the output closed too (Ctrl-C of `| head`)
            console.print("stopping")


#: How often an idle `--serve` looks for uploads outside every tenant prefix (and, as a safety
#: net, for closed files).
SERVE_LOOK_SECONDS = 3.0


def newly_closed(pipe, tenant: str, shown: set[str]) -> list[dict[str, Any]]:
    """The tenant's closed executions not in ``shown``, described (`input`, `output` parsed): one
    ListExecutions, and a DescribeExecution only for those (not every execution, every time)."""
    from local_runtime.observation import list_executions

    sfn = pipe.client("stepfunctions")
    closed = [e for e in list_executions(sfn, pipe.tenants[tenant].state_machine_arn)
              if e["status"] in contract.CLOSED_STATUSES and e["name"] not in shown]
    described = []
    for execution in sorted(closed, key=lambda e: e["startDate"]):
        detail = sfn.describe_execution(executionArn=execution["executionArn"])
        described.append({**detail, "input": json.loads(detail.get("input") or "{}"),
                          "output": json.loads(detail.get("output") or "null")})
    return described


def closed_attempt(pipe, resources, execution: str) -> dict[str, Any] | None:
    """The ledger's record of a closed execution (its history item), if the closer wrote it."""
    records = ledger.Ledger(pipe.client("dynamodb"), resources.ledger_table, resources.tenant_id)
    return next((e for e in records.history(limit=20) if e["execution"] == execution), None)


def file_outcome(tenant: str, execution: dict, closed: dict[str, Any] | None = None) -> str:
    """One line per closed file for `--serve`: its records, or why it failed: the error type, its
    message and where the file stopped (``closed``: the ledger's history item of the execution),
    then the hint (`lambdas/hints.py`); never a stack trace or a record's content."""
    where = f"{tenant}: s3://.../{execution['input'].get('key')}"
    if execution["status"] == "SUCCEEDED":
        split = (execution.get("output") or {}).get("split") or {}
        start, total = int(execution["input"].get("start_record") or 0), split.get("record_count")
        if split.get("duplicate_of"):
            return f"{where} SUCCEEDED: a duplicate of {split['duplicate_of'].get('key')}, nothing sent"
        if total is None:
            return f"{where} SUCCEEDED"
        sent = f"records {start:,} to {total - 1:,}" if start else f"{total:,} records"
        return f"{where} SUCCEEDED: {sent} registered" if total else f"{where} SUCCEEDED: no records"
    error, message = closer.error_summary(execution.get("error"), execution.get("cause"))
    if closed and closed.get("error"):  # the closer's summary of the same failure
        error, message = closed["error"], closed.get("cause") or message
    message = " ".join(message.split()) or "no message given"
    line = f"{where} {execution['status']}: {error}: {message if len(message) <= 300 else message[:297] + '...'}"
    if closed is None:
        return line
    size, count = closed.get("chunk_size"), closed.get("record_count")
    chunks = -(-count // size) if size and count is not None else None
    found = hints.hint(closed.get("error"), closed_as=closed.get("closed_as"), failed_in=closed.get("failed_in"),
                       chunk=closed["next_record"] // size if size else None)
    return f"{line}\n  stopped at {hints.stopped_at(closed['next_record'], count, size, chunks)}\n  hint: {found.text}"


def timeout_report(pipe, plan: Plan, uploads: dict[str, list[Upload]], timeout: float) -> str:
    """What had not closed when the run gave up: a timeout, not a verdict on the guarantees."""
    parts = []
    for tenant, files in plan.files.items():
        executions = pipe.executions(tenant)
        # A file is closed when its last attempt is (a resumed file runs again).
        closed = {file for file, tried in attempts(executions).items() if tried[-1]["status"] in contract.CLOSED_STATUSES}
        running = sum(e["status"] == "RUNNING" for e in executions)
        open_files = sum((u.key, u.version_id) not in closed for u in uploads[tenant])
        not_uploaded = len(files) - len(uploads[tenant])
        if open_files or not_uploaded:
            parts.append(f"{tenant} {running} running, {open_files - running} queued, {not_uploaded} not uploaded yet "
                         f"(of {len(files)} files)")
    left = "; ".join(parts) or "every file closed, an operator's step was still due"
    return (f"timed out after {timeout:.0f} s before the run finished: {left}. Nothing was verified: "
            "raise --timeout, or run fewer or smaller files (--files, --records, --big-records).")


def finish_times(pipe, tenants: list[str], run_started_at: float) -> str:
    """When each tenant's last file closed, in seconds from the first upload: a slow tenant's
    core system delays only that tenant (G4)."""
    parts = []
    for tenant in tenants:
        stops = [e["stopDate"].timestamp() for e in pipe.executions(tenant) if e.get("stopDate")]
        parts.append(f"{tenant} {max(stops) - run_started_at:.1f} s" if stops else f"{tenant} -")
    return "Each tenant's last file closed at (from the first upload): " + ", ".join(parts)


class StrayUploads:
    """Uploads outside every tenant prefix that `--serve` has not shown yet (from the log group
    the shared stack writes them to, as `ops status` reads it)."""

    def __init__(self, pipe) -> None:
        from ops import unmatched

        self._pipe, self._unmatched = pipe, unmatched
        self._group = unmatched.log_group_name(pipe.client("cloudformation"))
        self._shown: set[tuple[str, str]] = set()

    def new(self) -> list[str]:
        if not self._group:
            return []
        lines = []
        for upload in reversed(self._unmatched.recent(self._pipe.client("logs"), self._group, now=time.time())):
            if (upload["key"], upload["time"]) not in self._shown:
                self._shown.add((upload["key"], upload["time"]))
                lines.append(f"no tenant: s3://{upload['bucket']}/{upload['key']} matches no tenant prefix; "
                             "not ingested (move it under a tenant's prefix)")
        return lines


def _stop_on_sigterm(*_: object) -> None:
    raise KeyboardInterrupt  # unwinds through LocalPipeline.close(): no process or temp dir left


#: The local runtime runs one deployment (the layout without `targets:`), like one target.
TARGETS_NOT_LOCAL = (
    "{file} declares deployment targets: the local runtime runs the single-deployment layout only; "
    "run the demo on a tenants file without 'targets:' (and without 'target:' on the tenants)"
)


def run_correction(pipe, console: Console, args: argparse.Namespace, tenant, other) -> int:
    """`--scenario correction` (demo/correction.py): its own files and steps on one tenant, then
    --serve as after any run."""
    from demo import correction
    from ops.discovery import discover

    code = correction.run(pipe, console, tenant, other, records=args.records, timeout=args.timeout)
    if args.serve:
        serve(pipe, console, discover(pipe.client))
    return code


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    console = DemoConsole(width=None if sys.stdout.isatty() else 120)
    try:
        config = load_config(args.tenants)
    except ConfigError as error:
        console.print(str(error), markup=False)
        return EXIT_USAGE
    if config.targets:
        console.print(TARGETS_NOT_LOCAL.format(file=args.tenants), markup=False)
        return EXIT_USAGE
    plan = make_plan(config, args)
    correction_tenants = None
    if args.scenario == "correction":
        from demo import correction

        try:
            correction_tenants = correction.choose_tenants(config)
        except correction.Unsuitable as error:
            console.print(f"{args.tenants}: {error}", markup=False)
            return EXIT_USAGE

    from local_runtime import LocalPipeline  # heavy import (moto, jsii): after argument checks

    started = time.monotonic()
    console.print(f"Synthesizing {args.tenants} and deploying it on a local moto server...")
    with LocalPipeline(args.tenants, time_scale=args.time_scale) as pipe:
        console.print(f"Local pipeline up in {time.monotonic() - started:.1f} s: {pipe.endpoint_url}")
        demo_files = any(plan.files.values()) or correction_tenants is not None
        if args.serve and demo_files:
            serve_banner(pipe, console, demo_files=True)  # before the demo's tables
        console.print(f"Scenario: {args.scenario} ({SCENARIOS[args.scenario]})")
        for tenant in config.tenants:
            if tenant.sink.auth.type == "bearer":  # the token itself is never shown
                console.print(f"{tenant.id}: the core system demands a bearer token; the local runtime made one "
                              f"and stored it in secret {pipe.sink(tenant.id).auth.secret}", markup=False)
        if correction_tenants is not None:
            return run_correction(pipe, console, args, *correction_tenants)
        inject(pipe, args.scenario, config.tenants[0].id)
        if args.serve and not demo_files:  # nothing to upload, wait for or verify: no tables
            from ops.discovery import discover

            serve(pipe, console, discover(pipe.client), banner=True)
            return EXIT_HELD
        uploads: dict[str, list[Upload]] = {t.id: [] for t in config.tenants}
        chunks = ChunkProgress(pipe)
        run_started, run_started_wall = time.monotonic(), time.time()
        uploader = threading.Thread(target=upload_all, args=(pipe, plan, uploads))
        uploader.start()
        from ops.discovery import discover

        resources = discover(pipe.client)  # once: the stacks do not change
        timed_out = False
        while not timed_out:
            with Live(progress_table(pipe, plan, uploads, run_started, chunks), console=console, refresh_per_second=2) as live:
                while True:
                    live.update(progress_table(pipe, plan, uploads, run_started, chunks))
                    if not uploader.is_alive() and settled(pipe, resources):
                        break
                    if time.monotonic() - run_started > args.timeout:
                        timed_out = True
                        break
                    time.sleep(0.5)
                live.update(progress_table(pipe, plan, uploads, run_started, chunks))
            if timed_out or not operate(pipe, resources, console):
                break
        console.print()
        uploader.join()
        elapsed = time.monotonic() - run_started
        if timed_out:
            console.print(timeout_report(pipe, plan, uploads, args.timeout), markup=False, style="red", soft_wrap=True)
            if args.serve:
                serve(pipe, console, resources)
            return EXIT_TIMED_OUT

        verdicts = [
            verify_tenant(t, uploads[t], pipe.executions(t), pipe.sink(t).accepted) for t in plan.files
        ]
        console.print(verdict_table(verdicts))
        console.print(finish_times(pipe, list(plan.files), run_started_wall), markup=False)
        if args.scenario == "slow-tenant":
            console.print(f"({config.tenants[0].id}'s core system was slow; the other tenants did not wait for it)",
                          markup=False)
        report_faults(pipe, console)
        if args.timeline:
            from demo import timeline

            timeline.write(pipe, resources, args.timeline, origin=run_started_wall, end=time.time(),
                           title=f"ordered ingest, {args.tenants.name}, scenario {args.scenario}")
            console.print(f"timeline of the run: {args.timeline}", markup=False, soft_wrap=True)
        total = sum(v.records_delivered for v in verdicts)
        console.print(f"{total:,} records delivered in {elapsed:.1f} s; total run {time.monotonic() - started:.1f} s")
        ok = all(v.ok for v in verdicts)
        console.print("[green]every guarantee held[/green]" if ok else "[red]a guarantee was violated[/red]")
        if args.serve:
            serve(pipe, console, resources)
    return EXIT_HELD if ok else EXIT_VIOLATED


def run(argv: list[str] | None = None) -> int:
    """`python -m demo`: `main`, and Ctrl-C, SIGTERM or a closed output before the verification
    is exit status 130 without a traceback (the local pipeline closed on the way out)."""
    try:
        return main(argv)
    except KeyboardInterrupt:
        quiet_broken_pipes_at_exit()
        print("stopped before the verification: nothing was verified", file=sys.stderr)
        return EXIT_STOPPED


if __name__ == "__main__":
    sys.exit(run())
