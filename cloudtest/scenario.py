"""The cloud test's scenario, the same whatever it runs on: two tenants, three small files each,
uploaded through S3, the second file of the first tenant refused by the core system; checked
from what the core-system stand-in recorded and what Step Functions and `ops` report, through
boto3 and `python -m ops` with the target's region or endpoint URL. A `Target` says where the
pipeline runs (`cloudtest.targets`: an AWS account, or the local runtime).
"""

from __future__ import annotations

import io
import itertools
import json
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cloudtest import pace_figures
from demo import verify
from lambdas import contract
from ops.cli import main as ops_main
from ops.discovery import TenantResources, discover

#: Records per file, in two chunks; the file of the first tenant, and its record, that the
#: stand-in refuses: in the second chunk, after an acknowledged one and record.
RECORDS_PER_FILE, CHUNK_SIZE = 6, 3
FILES_PER_TENANT = 3
HALTING_FILE, REJECTED_SEQ = 2, 4


@dataclass(frozen=True)
class Received:
    """One request the core-system stand-in received, in arrival order."""

    idempotency_key: str | None
    body: Any
    status: int
    time: float  # epoch seconds
    registered: bool
    batch_offset: int = 0


class CoreStandIn(Protocol):
    def received(self, tenant: str) -> list[Received]: ...
    def reject(self, tenant: str, record: dict[str, str]) -> None: ...
    def accept_all(self, tenant: str) -> None: ...


class Target(Protocol):
    """Where the pipeline runs: its two tenants deployed, the stand-in, and how to reach them."""

    tenant_ids: tuple[str, str]
    #: The tenants file's `qualifier`: what `python -m ops` is given as `--qualifier`.
    qualifier: str
    core: CoreStandIn
    #: `--region R` or `--endpoint-url URL`: what `python -m ops` is given.
    ops_args: list[str]
    #: How long a step may take here, and the longest pause between two looks.
    timeout: float
    poll_seconds: float

    def client(self, service: str) -> Any: ...


def file_body(file_id: str, records: int = RECORDS_PER_FILE) -> bytes:
    """A CSV file whose records name their file and position (`demo.verify.record_id`)."""
    return ("file,seq\n" + "".join(f"{file_id},{seq}\n" for seq in range(records))).encode()


def tenants_document(
    qualifier: str, tenant_ids: Sequence[str], prefixes: Sequence[str], sink: dict[str, Any]
) -> dict[str, Any]:
    """The tenants file of a run: its qualifier, two chunks a file, a halt on failure (the default)."""
    return {
        "qualifier": qualifier,
        "defaults": {"format": "csv", "chunk_size": CHUNK_SIZE, "on_failure": "halt"},
        "tenants": [{"id": t, "prefix": p, "sink": sink} for t, p in zip(tenant_ids, prefixes)],
    }


@dataclass
class Figures:
    tenant: str
    records: int
    handoff_gaps: list[float]
    busy_seconds: float

    @property
    def records_per_second(self) -> float:
        return self.records / self.busy_seconds if self.busy_seconds else 0.0

    def line(self) -> str:
        gaps = (
            f"hand-off gap median {statistics.median(self.handoff_gaps):.2f} s, max {max(self.handoff_gaps):.2f} s"
            if self.handoff_gaps
            else "no hand-off"
        )
        return (
            f"{self.tenant}: {self.records} records, {gaps}, "
            f"{self.records_per_second:.1f} records/s while a file ran ({self.busy_seconds:.1f} s)"
        )


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    figures: list[Figures] = field(default_factory=list)
    pace: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class Scenario:
    """Runs the steps against `target`; `say` prints progress (one line a step)."""

    def __init__(self, target: Target, say: Callable[[str], None] = print) -> None:
        self.target, self.say = target, say
        self.report = Report()
        self.uploads: dict[str, list[verify.Upload]] = {t: [] for t in target.tenant_ids}
        self._resources: dict[str, TenantResources] | None = None

    # -- helpers ----------------------------------------------------------------------------

    def ops(self, *args: str) -> tuple[int, str]:
        out = io.StringIO()
        code = ops_main([*self.target.ops_args, "--qualifier", self.target.qualifier, *args], out=out)
        return code, out.getvalue()

    def status(self, tenant: str) -> dict[str, Any]:
        """`ops status TENANT --json` (its exit code may say halted: the JSON is what counts)."""
        code, out = self.ops("status", tenant, "--json")
        try:
            return json.loads(out)[0]
        except ValueError:
            raise RuntimeError(f"ops status {tenant} failed (exit {code}): {out.strip()}") from None

    def resources(self) -> dict[str, TenantResources]:
        """The tenants' resources from the stacks' outputs (read once: they do not change)."""
        if self._resources is None:
            with contract.qualified(self.target.qualifier):
                self._resources = discover(self.target.client)
        return self._resources

    def executions(self, tenant: str) -> list[dict[str, Any]]:
        """The tenant's file executions with their file (input `key`, `version_id`), oldest first."""
        sfn = self.target.client("stepfunctions")
        arn = self.resources()[tenant].state_machine_arn
        found = []
        for page in sfn.get_paginator("list_executions").paginate(stateMachineArn=arn):
            for item in page["executions"]:
                described = sfn.describe_execution(executionArn=item["executionArn"])
                given = json.loads(described.get("input") or "{}")
                found.append(
                    {
                        **described,
                        "input": given,
                        "key": given.get("key"),
                        "version_id": given.get("version_id"),
                    }
                )
        return sorted(found, key=lambda e: (e["startDate"], e["name"]))

    def wait(self, what: str, predicate: Callable[[], Any]) -> Any:
        deadline, pause = time.monotonic() + self.target.timeout, 0.1
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(pause)
            pause = min(pause * 1.5, self.target.poll_seconds)
        raise TimeoutError(f"timed out after {self.target.timeout:g} s waiting for {what}")

    def done(self, tenant: str) -> bool:
        """Idle, nothing queued, and every uploaded file's last attempt succeeded."""
        status = self.status(tenant)
        if status["state"] != "idle" or status["queue"]["visible"] or status["queue"]["in_flight"]:
            return False
        last = {(e["key"], e["version_id"]): e["status"] for e in self.executions(tenant)}
        return all(last.get((u.key, u.version_id)) == "SUCCEEDED" for u in self.uploads[tenant])

    def upload(self, tenant: str, file_no: int) -> None:
        where = self.resources()[tenant]
        key = f"{where.landing_prefix}file-{file_no}.csv"
        version = self.target.client("s3").put_object(
            Bucket=where.landing_bucket, Key=key, Body=file_body(self.file_id(tenant, file_no))
        )["VersionId"]
        self.uploads[tenant].append(
            verify.Upload(
                key=key, version_id=version, file_id=self.file_id(tenant, file_no), records=RECORDS_PER_FILE
            )
        )

    @staticmethod
    def file_id(tenant: str, file_no: int) -> str:
        return f"{tenant}-{file_no}"

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> Report:
        halting, steady = self.target.tenant_ids
        rejected = {"file": self.file_id(halting, HALTING_FILE), "seq": str(REJECTED_SEQ)}
        self.target.core.reject(halting, rejected)
        self.say(f"the core system refuses record {REJECTED_SEQ} of {halting}'s file {HALTING_FILE}")
        for file_no in range(1, FILES_PER_TENANT + 1):
            for tenant in (halting, steady):
                self.upload(tenant, file_no)
        self.say(
            f"uploaded {FILES_PER_TENANT} files of {RECORDS_PER_FILE} records for each of {halting}, {steady}"
        )

        self.wait(f"{steady} to finish its files", lambda: self.done(steady))
        self.say(f"{steady}: every file done")
        stopped = self.wait(
            f"{halting} to halt", lambda: (s := self.status(halting))["state"] == "halted" and s
        )
        self.check_halt(halting, stopped)
        self.target.core.accept_all(halting)
        code, out = self.ops("resume", halting)
        self.say(f"the core system accepts it now; ops resume {halting}: exit {code}")
        if code != 0:
            self.report.problems.append(f"ops resume {halting} exited {code}: {out.strip()}")
            return self.report
        self.wait(f"{halting} to finish after the resume", lambda: self.done(halting))
        self.say(f"{halting}: every file done after the resume")
        for tenant in (halting, steady):
            self.check_tenant(tenant)
        self.check_resume(halting, rejected)
        return self.report

    # -- the checks -------------------------------------------------------------------------

    def check_halt(self, tenant: str, status: dict[str, Any]) -> None:
        """Halted on the refused file, and nothing of the file after it reached the core system."""
        failed = (status.get("last_failure") or {}).get("key")
        wanted = self.uploads[tenant][HALTING_FILE - 1].key
        if failed != wanted:
            self.report.problems.append(f"{tenant} halted on {failed}, expected {wanted}")
        later = self.file_id(tenant, HALTING_FILE + 1)
        early = [r for r in self.target.core.received(tenant) if r.body.get("file") == later]
        if early:
            self.report.problems.append(
                f"{tenant}: {len(early)} records of {later} reached the core system while halted"
            )
        self.say(
            f"{tenant} halted on {wanted.rsplit('/', 1)[-1]} (ops status: {status['state']}); "
            f"no record of the next file was sent"
        )

    def check_tenant(self, tenant: str) -> None:
        """Order (files and records), exactly once (keys and records), and the figures."""
        uploads, executions = self.uploads[tenant], self.executions(tenant)
        received = self.target.core.received(tenant)
        registered = [r for r in received if r.registered]
        verdict = verify.verify_tenant(tenant, uploads, executions, [r.body for r in registered])
        # every file must end SUCCEEDED: the refused one too, once resumed (its last attempt counts)
        problems = [f"{tenant}: {p}" for p in verdict.problems]
        problems += [f"{tenant}: {p}" for p in verify.request_order_problems(received)]
        keys = Counter(r.idempotency_key for r in registered)
        problems += [
            f"{tenant}: idempotency key {k[:12]}... registered {n} times" for k, n in keys.items() if n > 1
        ]
        self.report.problems += problems
        resent = len(received) - len(registered) - sum(r.status >= 300 for r in received)
        self.say(
            f"{tenant}: {len(registered)} records registered once each, in order; {resent} resent and "
            f"recognised by their key; {len(executions)} executions, none overlapping"
            + ("" if not problems else f"; PROBLEMS: {'; '.join(problems)}")
        )
        self.report.figures.append(figures(tenant, executions, len(registered)))
        sfn = self.target.client("stepfunctions")
        histories = [
            sfn.get_execution_history(executionArn=e["executionArn"], maxResults=1000)["events"]
            for e in executions
        ]
        measured = pace_figures.measure(executions, histories, [r.time for r in received])
        self.report.pace.append(measured.line(tenant))

    def check_resume(self, tenant: str, rejected: dict[str, str]) -> None:
        """The resumed file went on at the refused record: nothing before it was sent again."""
        received = self.target.core.received(tenant)
        refusal = next((i for i, r in enumerate(received) if r.status >= 400), None)
        if refusal is None:
            self.report.problems.append(f"{tenant}: the core system never refused {rejected}")
            return
        after = [r.body for r in received[refusal + 1 :] if r.body.get("file") == rejected["file"]]
        if not after or after[0] != rejected:
            self.report.problems.append(
                f"{tenant}: the resumed file restarted at {after[:1]}, not at {rejected}"
            )
        else:
            self.say(f"{tenant}: the resumed file went on at record {rejected['seq']}, the one refused")


def figures(tenant: str, executions: list[dict[str, Any]], records: int) -> Figures:
    """Hand-off gaps (a file's stop to the next file's start, after a success: a halt waits for an
    operator) and the time files ran."""
    ordered = sorted(executions, key=lambda e: e["startDate"])
    gaps = [
        (after["startDate"] - before["stopDate"]).total_seconds()
        for before, after in itertools.pairwise(ordered)
        if before.get("stopDate") and before["status"] == "SUCCEEDED"
    ]
    busy = sum(((e.get("stopDate") or e["startDate"]) - e["startDate"]).total_seconds() for e in ordered)
    return Figures(tenant=tenant, records=records, handoff_gaps=gaps, busy_seconds=busy)
