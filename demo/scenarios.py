"""What a demo run uploads and which fault it injects: the scenarios `--scenario` offers, the
plan of sample files per tenant, the faults set on the local pipeline, the uploads in parallel.
"""

from __future__ import annotations

import argparse
import threading
from dataclasses import dataclass

from demo.samples import SampleFile, malformed, sample_files
from demo.verify import Upload

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


def make_plan(config, args: argparse.Namespace) -> Plan:
    tenants = list(config.tenants)
    big_tenant = (
        max(tenants, key=lambda t: t.records_per_chunk).id if args.big_records and args.files else None
    )
    files = {
        t.id: sample_files(
            t.id,
            t.format,
            files=args.files,
            records=args.records,
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
        pipe.sink(first_tenant).reject(
            on_record=lambda body: (str(body.get("file")), str(body.get("seq"))) == ("1", "42")
        )


def upload_all(pipe, plan: Plan, uploads: dict[str, list[Upload]]) -> None:
    """Each tenant's files in a burst, tenants in parallel (as independent external systems)."""

    def burst(tenant: str, files: list[SampleFile]) -> None:
        for sample in files:
            key, version_id = pipe.put_file(tenant, sample.name, sample.body)
            uploads[tenant].append(
                Upload(
                    key=key,
                    version_id=version_id,
                    file_id=sample.file_no,
                    records=sample.records,
                    expect_failure=(tenant, sample.name) in plan.expect_failure,
                )
            )

    threads = [threading.Thread(target=burst, args=(t, f)) for t, f in plan.files.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
