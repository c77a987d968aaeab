"""`python -m demo --scenario correction`: a malformed file corrected in its place, then a planned
pause of the core system, on one tenant of the tenants file, with the operator's commands.

1. Six CSV files in a burst, the third malformed: Split refuses it, the tenant halts with the
   files behind it queued in order, and `ops status` hints at a corrected upload.
2. The corrected file goes up under the same key and `ops replace` puts it in the bad one's
   place: the core system gets files 1 to 6, every record once, in order.
3. A planned maintenance of the core system (a 503 mid-file): `ops pause` stops the file at
   its first unacknowledged record without failing anything, another tenant's file runs
   meanwhile, and `ops unpause` runs it on.

Each step checks what it shows (`demo.verify`, `ops status --json`); the first check that fails
ends the run with its message (exit 1). tests/e2e/test_correction.py tests the same behaviour.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console

from demo.samples import SampleFile, missing_field, sample_files
from demo.verify import Upload, check_records, is_resume, request_order_problems, verify_tenant

#: Files of the first burst; the one at BAD (0-based: the third) has a row with a missing field.
BURST, BAD = 6, 2
#: Files uploaded for the pause; the one at HELD (0-based: the second) is sent when it starts.
PAUSE_BURST, HELD = 3, 1
#: The record (0-based) of the malformed file whose last field is left out.
BAD_RECORD = 7
MAINTENANCE = "core system maintenance"
#: `ops` exit codes the scenario expects (ops/cli.py).
OPS_OK, OPS_HALTED = 0, 9
#: The demo's exit statuses (demo/__main__.py, which imports this module only for the scenario).
EXIT_HELD, EXIT_VIOLATED, EXIT_TIMED_OUT = 0, 1, 3


class Unsuitable(Exception):
    """The tenants file has no tenant the scenario can run on; the message says what it needs."""


class CheckFailed(Exception):
    """What the scenario shows did not happen; the message says what was expected and found."""


class TimedOut(Exception):
    """The run's time (--timeout) ran out while waiting; the message says for what."""


def suitable(tenant: Any) -> bool:
    """A tenant whose files the scenario can make: CSV, halting on a failed file, in arrival
    order, ingested without waiting for a completion callback."""
    return (
        tenant.format == "csv"
        and tenant.on_failure == "halt"
        and tenant.ordering.by == "arrival"
        and not tenant.completion.wait
    )


def choose_tenants(config: Any) -> tuple[Any, Any | None]:
    """The tenant the scenario runs on (the first suitable one) and another one that keeps
    running while the first is paused (None if the file has no other tenant in arrival order)."""
    tenant = next((t for t in config.tenants if suitable(t)), None)
    if tenant is None:
        raise Unsuitable(
            "--scenario correction needs a tenant with format: csv, on_failure: halt, ordering by "
            "arrival and no completion wait; the tenants file has none"
        )
    other = next(
        (
            t
            for t in config.tenants
            if t.id != tenant.id and t.ordering.by == "arrival" and not t.completion.wait
        ),
        None,
    )
    return tenant, other


def expect(problems: list[str], what: str) -> None:
    """Raise `CheckFailed` naming `what` was checked unless ``problems`` is empty."""
    if problems:
        raise CheckFailed(f"{what}: " + "; ".join(problems))


def status_problems(
    state: dict[str, Any], *, done: int, attempts: int, paused: int, failed: Upload, corrected: Upload
) -> list[str]:
    """What `ops status TENANT --json` must say once the tenant is idle again: ``done`` files
    done, none failed, ``attempts`` attempts of which one failed and ``paused`` paused, and
    the failed attempt linked to the replacement that made its file succeed."""
    problems = []
    if state["state"] != "idle":
        problems.append(f"state is {state['state']}, not idle")
    if state["last_24h"] != {"succeeded": done, "failed": 0, "skipped": 0}:
        problems.append(f"last_24h is {state['last_24h']}, expected {done} succeeded, 0 failed, 0 skipped")
    if state["attempts_24h"] != {"total": attempts, "failed": 1, "paused": paused}:
        problems.append(
            f"attempts_24h is {state['attempts_24h']}, expected {attempts} in all, 1 failed, {paused} paused"
        )
    replaced = [f for f in state["retried_24h"] if f["key"] == failed.key]
    if len(replaced) != 1:
        problems.append(f"retried_24h holds {len(replaced)} entries for {failed.key}, expected 1")
        return problems
    (entry,) = replaced
    versions = [a["version_id"] for a in entry["attempts"]]
    first = entry["attempts"][0]
    if entry["outcome"] != "SUCCEEDED" or versions != [failed.version_id, corrected.version_id]:
        problems.append(
            f"{failed.key}: outcome {entry['outcome']} with attempts of versions {versions}, expected "
            f"SUCCEEDED with {failed.version_id} then {corrected.version_id}"
        )
    elif (
        first["status"] != "FAILED" or (first["replaced_by"] or {}).get("version_id") != corrected.version_id
    ):
        problems.append(
            f"{failed.key}: the failed attempt is {first['status']}, replaced by {first['replaced_by']}, "
            f"expected FAILED, replaced by version {corrected.version_id}"
        )
    return problems


def arrivals(accepted: list[dict[str, Any]], names: dict[str, str]) -> list[str]:
    """What the core system registered, in arrival order, a line per run of one file's records
    (``names``: file id -> file name)."""
    runs: list[list[Any]] = []  # [file id, first seq, last seq, count]
    for record in accepted:
        file_id, seq = str(record["file"]), int(record["seq"])
        if runs and runs[-1][0] == file_id:
            runs[-1][2:] = [seq, runs[-1][3] + 1]
        else:
            runs.append([file_id, seq, seq, 1])
    return [f"{names.get(f, f)}: records {first:,} to {last:,} ({count:,})" for f, first, last, count in runs]


class Scenario:
    """The four steps on a running `LocalPipeline`; `run()` returns the demo's exit status."""

    def __init__(
        self, pipe: Any, console: Console, tenant: Any, other: Any | None, *, records: int, timeout: float
    ) -> None:
        self.pipe, self.console, self.tenant, self.other = pipe, console, tenant.id, other
        self.records = records
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        #: The tenant's uploads in the order their records are due (a correction after its failed file).
        self.uploads: list[Upload] = []
        files = sample_files(tenant.id, "csv", files=BURST + PAUSE_BURST, records=records)
        self.burst, self.pause_burst = files[:BURST], files[BURST:]
        self.names = {str(f.file_no): f.name for f in files}

    # -- running and printing --------------------------------------------------------------

    def say(self, text: str) -> None:
        self.console.print(text, markup=False, soft_wrap=True)

    def step(self, number: int, title: str) -> None:
        self.console.print()
        self.console.rule(f"[bold]Step {number} of 4: {title}[/bold]", align="left")

    def ok(self, text: str) -> None:
        self.console.print(f"[green]ok[/green] {text}", soft_wrap=True, highlight=False)

    def ops(self, *args: str, show: bool = True, expect_codes: tuple[int, ...] = (OPS_OK,)) -> str:
        """`python -m ops --endpoint-url URL ARGS...` as the operator runs it: the command and what
        it printed (``show``), its output returned; `CheckFailed` on an exit code not expected."""
        from ops.cli import main as ops_main

        argv = ["--endpoint-url", self.pipe.endpoint_url, *args]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err):
            code = ops_main(argv, out=out)
        if show:
            self.console.print(
                f"[bold]$ python -m ops {' '.join(shlex.quote(a) for a in argv)}[/bold]",
                soft_wrap=True,
                highlight=False,
            )
            self.say((out.getvalue() + err.getvalue()).rstrip())
        if code not in expect_codes:
            said = " ".join((err.getvalue() or out.getvalue()).split())
            raise CheckFailed(
                f"python -m ops {' '.join(args)} exited {code}, expected "
                f"{' or '.join(map(str, expect_codes))}: {said[:500]}"
            )
        return out.getvalue()

    def status(self) -> dict[str, Any]:
        """`ops status TENANT --json` (not shown)."""
        (state,) = json.loads(
            self.ops("status", self.tenant, "--json", show=False, expect_codes=(OPS_OK, OPS_HALTED))
        )
        return state

    def wait(self, predicate: Callable[[], Any], what: str) -> Any:
        """Poll until ``predicate()`` is truthy, within the run's time; `TimedOut` naming ``what``."""
        pause = 0.1
        while time.monotonic() < self.deadline:
            value = predicate()
            if value:
                return value
            time.sleep(pause)
            pause = min(pause * 1.5, 0.5)
        raise TimedOut(f"waiting for {what}")

    def wait_idle(self, tenant: str, what: str) -> None:
        try:
            self.pipe.wait_until_idle(timeout=max(0.0, self.deadline - time.monotonic()), tenants=[tenant])
        except TimeoutError as error:
            raise TimedOut(f"waiting for {what} ({error})") from None

    def upload(self, sample: SampleFile, *, expect_failure: bool = False) -> Upload:
        key, version_id = self.pipe.put_file(self.tenant, sample.name, sample.body)
        return Upload(
            key=key,
            version_id=version_id,
            file_id=sample.file_no,
            records=sample.records,
            expect_failure=expect_failure,
        )

    def executions(self) -> list[dict[str, Any]]:
        return self.pipe.executions(self.tenant)

    def nothing_running(self) -> bool:
        return not any(e["status"] == "RUNNING" for e in self.executions())

    def show_arrivals(self, since: int = 0) -> None:
        self.say(f"What {self.tenant}'s core system registered, in arrival order:")
        for line in arrivals(self.pipe.sink(self.tenant).accepted[since:], self.names):
            self.say(f"  {line}")

    def verify(self, what: str) -> None:
        """The demo's guarantee checks (`demo.verify`) over every upload so far."""
        sink = self.pipe.sink(self.tenant)
        verdict = verify_tenant(self.tenant, self.uploads, self.executions(), sink.accepted)
        expect(verdict.problems + request_order_problems(sink.requests), what)
        self.ok(
            f"{what}: {verdict.files_succeeded} files succeeded, {verdict.records_delivered:,} records "
            f"registered once each, in file order and in order within each file; one file ran at a time"
        )

    # -- the steps -------------------------------------------------------------------------

    def malformed_file_halts(self) -> tuple[Upload, int]:
        self.step(1, "a malformed file halts the tenant")
        broken = min(BAD_RECORD, self.burst[BAD].records - 1)
        bad = missing_field(self.burst[BAD], broken)
        names = ", ".join(f.name for f in self.burst)
        self.say(
            f"{self.tenant}'s system uploads {BURST} CSV files in a burst: {names}. The third, {bad.name}, "
            f"has a row with a missing field (record {broken} lacks its last field)."
        )
        for index, sample in enumerate(self.burst):
            self.uploads.append(self.upload(bad if index == BAD else sample, expect_failure=index == BAD))
        failed = self.uploads[BAD]
        self.wait(
            lambda: self.status()["state"] == "halted" and self.nothing_running(),
            f"{self.tenant} to halt on {bad.name}",
        )
        self.say(
            f"The first two files went through. Split read {bad.name}, found the broken row and failed it "
            "before sending any of its records; the tenant halted (on_failure: halt), so the three files "
            "behind it wait in the queue, in order, instead of overtaking it. The operator looks:"
        )
        self.ops("status", self.tenant, expect_codes=(OPS_HALTED,))
        state = self.status()
        if not state["hint"] or state["hint"]["action"] != "replace":
            raise CheckFailed(f"ops status gives the hint {state['hint']}, expected one to replace the file")
        if state["queue"]["visible"] + state["queue"]["in_flight"] != BURST - BAD - 1:
            raise CheckFailed(f"the queue holds {state['queue']}, expected the {BURST - BAD - 1} later files")
        sink = self.pipe.sink(self.tenant)
        expect(
            check_records(sink.accepted, [(u.file_id, u.records) for u in self.uploads[:BAD]]).problems,
            "before the halt, the core system got the first two files and nothing of the malformed one",
        )
        self.ok(
            f"halted on {failed.key} (ops status exits 9 while a tenant is halted), the hint says to replace it; "
            f"{BURST - BAD - 1} files queued behind it; nothing of it reached the core system"
        )
        return failed, len(sink.accepted)

    def correction_replaces_it(self, failed: Upload) -> Upload:
        self.step(2, "the corrected file replaces it, in its place")
        good = self.burst[BAD]
        corrected = self.upload(good)
        self.say(
            f"The tenant fixes the row and uploads {good.name} again under the same key. The landing bucket "
            f"keeps both versions: {failed.version_id} (malformed) and {corrected.version_id} (corrected). "
            "Its upload event joins the queue behind the three waiting files, so the operator does not wait "
            "for it: ops replace runs that version in the failed file's place now, before the files queued "
            "behind it (the event is let go when it comes up)."
        )
        out = self.ops("replace", self.tenant, "--key", failed.key, "--version", corrected.version_id)
        if corrected.version_id not in out:
            raise CheckFailed(
                f"ops replace did not say it runs version {corrected.version_id}: {out.strip()}"
            )
        self.uploads.insert(BAD + 1, corrected)  # its records are due right after the failed file's place
        return corrected

    def files_arrive_in_order(self, failed: Upload, corrected: Upload) -> None:
        self.step(3, "files 1, 2, 3 (corrected), 4, 5, 6 reach the core system in order")
        self.wait_idle(self.tenant, f"{self.tenant}'s files to finish after the replace")
        self.show_arrivals()
        self.verify("the core system's records")
        ran = [(e["key"], e["version_id"], e["status"]) for e in self.executions() if not is_resume(e)]
        wanted = [(u.key, u.version_id, "FAILED" if u.expect_failure else "SUCCEEDED") for u in self.uploads]
        if ran != wanted:
            raise CheckFailed(f"the executions ran as {ran}, expected {wanted}")
        self.ok(
            f"the corrected version ran right after the failed one, before {self.burst[BAD + 1].name}; its own "
            "upload event started nothing (a version runs once)"
        )
        self.say(
            "ops status counts files, not attempts: six files done, and the failed attempt is linked to "
            "its replacement:"
        )
        self.ops("status", self.tenant)
        state = self.status()
        expect(
            status_problems(
                state, done=BURST, attempts=BURST + 1, paused=0, failed=failed, corrected=corrected
            ),
            "ops status --json",
        )
        self.ok(
            f"ops status --json: last_24h {state['last_24h']}, attempts_24h {state['attempts_24h']}, "
            f"retried_24h: {failed.key} {failed.version_id} FAILED, replaced by {corrected.version_id}, SUCCEEDED"
        )

    def planned_pause(self, failed: Upload, corrected: Upload) -> None:
        self.step(4, "a planned pause for the core system's maintenance")
        held = self.pause_burst[HELD]
        seq = held.records // 2
        sink = self.pipe.sink(self.tenant)

        def is_held(body: Any) -> bool:
            return isinstance(body, dict) and (str(body.get("file")), str(body.get("seq"))) == (
                str(held.file_no),
                str(seq),
            )

        self.say(
            f"The core system's owners announce a maintenance window. {self.tenant} uploads "
            f"{PAUSE_BURST} more files: {', '.join(f.name for f in self.pause_burst)}. So that the pause "
            f"catches a file mid-way, the core-system stand-in answers 503 (unavailable) to record {seq} of "
            f"{held.name} until the maintenance is over: the register function keeps retrying it."
        )
        sink.fail_with(503, times=None, on_record=is_held)
        before = len(self.uploads)
        for sample in self.pause_burst:
            self.uploads.append(self.upload(sample))
        self.wait(
            lambda: any(is_held(r.body) and r.status == 503 for r in sink.requests),
            f"record {seq} of {held.name} to be sent",
        )
        self.say(
            f"{held.name} is being sent (records 0 to {seq - 1:,} registered, record {seq} refused for now). "
            "The operator pauses the tenant:"
        )
        self.ops("pause", self.tenant, "--reason", MAINTENANCE)

        def stopped() -> bool:
            state = self.status()
            return (
                state["state"] == "paused"
                and (state["current_file"] or {}).get("status") == "PAUSED"
                and self.nothing_running()
            )

        self.wait(stopped, f"{held.name} to stop for the pause")
        sink.clear_faults()
        self.say(
            f"At its next step the register function saw the pause and stopped {held.name} at its first "
            f"unacknowledged record, {seq}; its execution ended without failing (nothing pages) and no file "
            f"starts until the pause ends. The maintenance is over (the stand-in accepts record {seq} again), "
            "but the tenant stays paused until the operator says so:"
        )
        self.ops("status", self.tenant)
        state = self.status()
        problems = []
        if (state["paused"] or {}).get("reason") != MAINTENANCE:
            problems.append(f"paused {state['paused']}, expected the reason {MAINTENANCE!r}")
        if state["current_file"]["next_record"] != seq:
            problems.append(
                f"{held.name} stopped at record {state['current_file']['next_record']}, expected {seq}"
            )
        new = {(u.key, u.version_id) for u in self.uploads[before:]}
        started = list(
            dict.fromkeys(e["key"] for e in self.executions() if (e["key"], e["version_id"]) in new)
        )
        if started != [u.key for u in self.uploads[before : before + HELD + 1]]:
            problems.append(f"of the new files, {started} started, expected those up to {held.name} only")
        expect(problems, "the pause")
        self.ok(
            f"paused ({MAINTENANCE}), {held.name} stopped at record {seq}, no execution running, "
            f"{PAUSE_BURST - HELD - 1} file waiting"
        )
        if self.other is not None:
            self.other_tenant_runs()
        self.say("The operator ends the pause; the stopped file runs on where it stopped:")
        out = self.ops("unpause", self.tenant)
        if f"at record {seq:,}" not in out:
            raise CheckFailed(f"ops unpause did not say the file runs on at record {seq}: {out.strip()}")
        self.wait_idle(self.tenant, f"{self.tenant}'s files to finish after the unpause")
        self.show_arrivals(since=sum(u.records for u in self.uploads[:before] if not u.expect_failure))
        self.verify("every file of the run")
        failed_runs = [e["key"] for e in self.executions() if e["status"] != "SUCCEEDED"]
        if failed_runs != [failed.key]:
            raise CheckFailed(
                f"executions not SUCCEEDED: {failed_runs}, expected only the malformed {failed.key}"
            )
        self.ok(
            "no execution failed but the malformed file's: the paused attempt ended SUCCEEDED, nothing paged"
        )
        self.ops("status", self.tenant)
        expect(
            status_problems(
                self.status(),
                done=BURST + PAUSE_BURST,
                attempts=BURST + 1 + PAUSE_BURST + 1,
                paused=1,
                failed=failed,
                corrected=corrected,
            ),
            "ops status --json",
        )
        self.ok(
            f"ops status --json: {BURST + PAUSE_BURST} files done, the paused attempt counted as an attempt"
        )

    def other_tenant_runs(self) -> None:
        other = self.other
        sample = sample_files(other.id, other.format, files=1, records=self.records, seed=11)[0]
        self.say(f"A pause holds only its tenant: {other.id} uploads {sample.name} meanwhile.")
        key, version_id = self.pipe.put_file(other.id, sample.name, sample.body)
        self.wait_idle(other.id, f"{other.id}'s file")
        verdict = verify_tenant(
            other.id,
            [Upload(key, version_id, sample.file_no, sample.records)],
            self.pipe.executions(other.id),
            self.pipe.sink(other.id).accepted,
        )
        expect(verdict.problems, f"{other.id}'s file during the pause")
        if self.status()["state"] != "paused":
            raise CheckFailed(f"{self.tenant} is no longer paused")
        self.ok(
            f"{other.id}: {sample.name} done ({sample.records:,} records) while {self.tenant} stayed paused"
        )

    def run(self) -> int:
        started = time.monotonic()
        try:
            failed, _ = self.malformed_file_halts()
            corrected = self.correction_replaces_it(failed)
            self.files_arrive_in_order(failed, corrected)
            self.planned_pause(failed, corrected)
        except CheckFailed as error:
            self.console.print()
            self.console.print(f"[red]check failed:[/red] {error}", soft_wrap=True, highlight=False)
            self.console.print("[red]a guarantee was violated[/red] (or the scenario did not go as shown)")
            return EXIT_VIOLATED
        except TimedOut as error:
            self.console.print()
            self.console.print(
                f"[red]timed out after {self.timeout:.0f} s {error}[/red]; nothing more was "
                "verified: raise --timeout, or run smaller files (--records)",
                soft_wrap=True,
            )
            return EXIT_TIMED_OUT
        self.console.print()
        self.console.print(
            f"{self.tenant}: {len(self.uploads)} uploads, {BURST + PAUSE_BURST} files, one corrected in "
            f"place and one paused mid-file, in {time.monotonic() - started:.1f} s",
            highlight=False,
        )
        self.console.print("[green]every guarantee held[/green]")
        return EXIT_HELD


def run(pipe: Any, console: Console, tenant: Any, other: Any | None, *, records: int, timeout: float) -> int:
    """Run the scenario; the demo's exit status: 0 held, 1 a check failed, 3 timed out."""
    return Scenario(pipe, console, tenant, other, records=records, timeout=timeout).run()
