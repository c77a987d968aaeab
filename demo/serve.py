"""`python -m demo --serve`: the endpoint and an upload command, then each file that closes and
each upload outside every tenant prefix, until Ctrl-C, SIGTERM or a closed output; and the
console and exit hook that make those three stop the demo alike, without a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from rich.console import Console

from lambdas import closer, contract, hints, ledger


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
                closed = (
                    None
                    if execution["status"] == "SUCCEEDED"
                    else closed_attempt(pipe, resources[tenant], name)
                )
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
            console.print(
                f"\nServing {pipe.endpoint_url} for your own files (the upload command is above). "
                "Ctrl-C stops.",
                markup=False,
                soft_wrap=True,
            )

    print_until_stopped(console, new_lines, wait, first=first)


def print_until_stopped(
    console: Console,
    new_lines: Callable[[], list[str]],
    wait: Callable[[], None],
    *,
    first: Callable[[], None] = lambda: None,
) -> None:
    """Print `first`, then what `new_lines` finds, then `wait`, again and again, until Ctrl-C
    (SIGTERM and a closed output arrive as it: `_stop_on_sigterm` of demo/__main__.py,
    `DemoConsole`)."""
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
    closed = [
        e
        for e in list_executions(sfn, pipe.tenants[tenant].state_machine_arn)
        if e["status"] in contract.CLOSED_STATUSES and e["name"] not in shown
    ]
    described = []
    for execution in sorted(closed, key=lambda e: e["startDate"]):
        detail = sfn.describe_execution(executionArn=execution["executionArn"])
        described.append(
            {
                **detail,
                "input": json.loads(detail.get("input") or "{}"),
                "output": json.loads(detail.get("output") or "null"),
            }
        )
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
    line = (
        f"{where} {execution['status']}: {error}: {message if len(message) <= 300 else message[:297] + '...'}"
    )
    if closed is None:
        return line
    size, count = closed.get("chunk_size"), closed.get("record_count")
    chunks = -(-count // size) if size and count is not None else None
    found = hints.hint(
        closed.get("error"),
        closed_as=closed.get("closed_as"),
        failed_in=closed.get("failed_in"),
        chunk=closed["next_record"] // size if size else None,
    )
    return f"{line}\n  stopped at {hints.stopped_at(closed['next_record'], count, size, chunks)}\n  hint: {found.text}"


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
        for upload in reversed(
            self._unmatched.recent(self._pipe.client("logs"), self._group, now=time.time())
        ):
            if (upload["key"], upload["time"]) not in self._shown:
                self._shown.add((upload["key"], upload["time"]))
                lines.append(
                    f"no tenant: s3://{upload['bucket']}/{upload['key']} matches no tenant prefix; "
                    "not ingested (move it under a tenant's prefix)"
                )
        return lines
