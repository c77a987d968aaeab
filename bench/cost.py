"""The cost model of docs/cost.md: monthly AWS cost of one tenant processing F files of R
records a day, with the counts taken from the synthesized templates so that the doc cannot drift.

    .venv/bin/python bench/cost.py            # print the tables docs/cost.md embeds
    .venv/bin/python bench/cost.py --write    # replace them in docs/cost.md

What comes from the templates (one tenant per (chunk_size, sink.batch_size) of the scenarios,
synthesized in a temporary directory): the state transitions of a file, walked state by state
through the parent and page definitions on the success path; the chunks per page; the largest
file Split accepts (`MAX_CHUNKS`); each function's memory; the number of alarms and the metrics
they watch. What comes from the code (counted by hand, named in `PER_FILE` and `PER_CHUNK`):
the AWS requests of each handler on the success path. What is assumed (durations, sizes,
pollers) is in `ASSUMPTIONS`, and docs/cost.md says where each figure comes from.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import results

DOC = ROOT / "docs" / "cost.md"
BEGIN, END = "<!-- bench/cost.py: begin -->", "<!-- bench/cost.py: end -->"
DAYS_PER_MONTH = 30
HOURS_PER_MONTH = 730

#: us-east-1 list prices (docs/cost.md cites each page and its date).
PRICES = {
    "sfn_transition": 0.025 / 1000,
    "lambda_request": 0.20 / 1e6,
    "lambda_gb_second_arm": 0.0000133334,
    "sqs_fifo_request": 0.50 / 1e6,
    "ddb_wru": 0.625 / 1e6,
    "ddb_rru": 0.125 / 1e6,
    "s3_put": 0.005 / 1000,
    "s3_get": 0.0004 / 1000,
    "s3_gb_month": 0.023,
    "cw_alarm_metric": 0.10,
    "cw_custom_metric": 0.30,
    "cw_log_gb": 0.50,
}

#: Assumptions, each stated in docs/cost.md with its source.
ASSUMPTIONS = {
    # Lambda polls an SQS queue with five long-polling (20 s) pollers while it is idle.
    "idle_pollers": 5,
    "long_poll_seconds": 20,
    # docs/benchmarks.md: register-only rates on this machine against the local core system.
    "record_seconds": 1 / 2307,  # record mode, 1M records: one POST per record
    "batch_request_seconds": 100 / 32510,  # batch mode, 100 records per POST
    "chunk_overhead_seconds": 0.05,  # the chunk's S3 GETs, fence read and last progress write
    # docs/benchmarks.md, Split: 1.3 s of CPU per 1M records locally, x 1769 / 512 MB, plus
    # 95 MB at 50 MB/s.
    "split_seconds_per_record": (1.3 * 1769 / 512 + 95 / 50) / 1e6,
    "split_overhead_seconds": 0.2,
    "controller_seconds": 0.1,
    "closer_seconds": 0.1,
    "bytes_per_record": 100,
    "log_bytes_per_invocation": 1500,  # START/END/REPORT as JSON plus a few structured lines
}

#: AWS requests per file on the success path, counted in lambdas/ (files spaced: none waits).
PER_FILE = {
    # EventBridge's SendMessage, the event source mapping's ReceiveMessage that returns it, its DeleteMessage.
    "sqs_requests": 3,
    # controller: position read (ledger.read); closer: read on the RUNNING status event, read after
    # the backstop's refused close (LedgerConflict) on the SUCCEEDED one. (`duplicate_files: skip`
    # adds Split's processed_content.)
    "ddb_rru": 3,
    # controller: the claim's TransactWriteItems of 3 items (2 WRU each); closer: record_close's
    # update, its file# history item and the content# item; the backstop's refused conditional update.
    "ddb_wru": 6 + 3 + 1,
    # the upload itself, Split's chunk index and manifest.
    "s3_put": 3,
    # Split: the pinned version, and the manifest it would reuse (absent on a first attempt).
    "s3_get": 2,
    # controller 1 (a waiting file: +1), split 1, closer 3 (the RecordSuccess task and the status
    # rule's RUNNING and SUCCEEDED events).
    "controller_invocations": 1,
    "split_invocations": 1,
    "closer_invocations": 3,
}
#: Per chunk (one register invocation: the chunk ends within the function's timeout).
PER_CHUNK = {
    "ddb_rru": 1,  # the fence: ledger.read
    "ddb_wru_fixed": 1,  # the forced progress write when the chunk stops; plus one per second sending
    "s3_get": 3,  # manifest, two index entries (ranged), the chunk's bytes of the pinned version (ranged)
}
#: EMF metrics with the tenant dimension an active tenant publishes (HeadMessageWaitSeconds from
#: the controller; RecordsSent, SinkErrors, SinkRequests from register).
EMF_METRICS = 4

#: The seed design for the same load (/work/shared/seeds/000_*.txt): Split writes one object per
#: 100-record chunk, a Map (MaxConcurrency 1) invokes the register Lambda per chunk; the controller
#: calls ListExecutions and StartExecution, and a waiting file's message comes back every 30 s.
SEED = {
    "chunk_size": 100,
    "transitions_fixed": 2,  # Split, the Map
    "transitions_per_chunk": 1,  # InvokeRegisterApi
    "visibility_seconds": 30,
    "alarms": 3,  # ERROR logs (metric filter), ApproximateAgeOfOldestMessage, ExecutionsFailed
}


@dataclass(frozen=True)
class Scenario:
    name: str
    files_per_day: int
    records_per_file: int
    chunk_size: int
    batch_size: int

    @property
    def tenant_id(self) -> str:
        return f"c{self.chunk_size}b{self.batch_size}"


#: A and B at the chunk sizes the pace model computes for the default sink settings (record
#: mode) and for `sink.batch_size` 100 (tests/test_cost_model.py checks them); B3 and B4 with
#: small chunks written in the tenants file.
SCENARIOS = (
    Scenario("A1", 24, 10_000, 20_000, 1),
    Scenario("A2", 24, 10_000, 100_000, 100),
    Scenario("B1", 1, 1_000_000, 20_000, 1),
    Scenario("B2", 1, 1_000_000, 100_000, 100),
    Scenario("B3", 1, 1_000_000, 100, 1),
    Scenario("B4", 1, 1_000_000, 1000, 100),
)
#: The core system's answer time for the sensitivity line (the local figures are a loopback server's).
SLOW_ANSWER_SECONDS = 0.020


@dataclass(frozen=True)
class TenantFacts:
    """What the cost depends on, read from one tenant's synthesized template."""

    parent: dict[str, Any]
    section: dict[str, Any]
    page: dict[str, Any]
    chunks_per_page: int
    pages_per_section: int
    max_chunks: int
    memory_mb: dict[str, int]
    inline_chunks: int
    alarms: int
    alarm_metrics: int
    log_groups: int


def definition(machine: dict[str, Any]) -> dict[str, Any]:
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    return json.loads("".join(p if isinstance(p, str) else "<ref>" for p in parts))


def tenant_facts(template: Mapping[str, Any], tenant_id: str) -> TenantFacts:
    resources = template["Resources"]
    machines = {lid: r for lid, r in resources.items() if r["Type"] == "AWS::StepFunctions::StateMachine"}
    (page_id,) = [lid for lid in machines if lid.startswith("PipelinePageWorkflow")]
    (section_id,) = [lid for lid in machines if lid.startswith("PipelineSectionWorkflow")]
    (parent_id,) = [lid for lid in machines if lid not in (page_id, section_id)]
    parent, section, page = (definition(machines[i]) for i in (parent_id, section_id, page_id))
    step = re.search(r"States\.ArrayRange\([^)]*, (\d+)\)", json.dumps(parent["States"]["Pages"]))
    assert step, "the Pages state no longer steps by chunks_per_page"
    span = re.search(
        r"States\.MathAdd\(\$\.first_chunk, (\d+)\)", json.dumps(section["States"]["SectionEnd"])
    )
    assert span, "the SectionEnd state no longer spans chunks_per_page x pages_per_section"
    memory, max_chunks = {}, 0
    for resource in resources.values():
        if resource["Type"] != "AWS::Lambda::Function":
            continue
        props = resource["Properties"]
        kind = props["FunctionName"].removeprefix(f"{tenant_id}-")
        memory[kind] = int(props["MemorySize"])
        max_chunks = max(
            max_chunks, int(props.get("Environment", {}).get("Variables", {}).get("MAX_CHUNKS", 0))
        )
    alarms = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    alarm_metrics = sum(
        sum(1 for m in a["Metrics"] if "MetricStat" in m) if "Metrics" in a else 1 for a in alarms
    )
    log_groups = sum(1 for r in resources.values() if r["Type"] == "AWS::Logs::LogGroup")
    chunks_per_page = int(step.group(1))
    inline = parent["States"].get("InlineEnd")
    inline_span = re.search(r"States\.MathAdd\([^,]*, (\d+)\)", json.dumps(inline)) if inline else None
    return TenantFacts(
        parent=parent,
        section=section,
        page=page,
        chunks_per_page=chunks_per_page,
        pages_per_section=(int(span.group(1)) + 1) // chunks_per_page,
        max_chunks=max_chunks,
        memory_mb=memory,
        inline_chunks=int(inline_span.group(1)) + 1 if inline_span else 0,
        alarms=len(alarms),
        alarm_metrics=alarm_metrics,
        log_groups=log_groups,
    )


# -- state transitions: the success path walked through the definitions ---------------------------

#: How each Choice goes on the success path, by state name. A Choice not named here fails the
#: walk: a changed workflow must be looked at, not priced silently.
Decide = Callable[[dict[str, int]], str]
CHOICES: dict[str, Decide] = {
    "AnyChunks": lambda ctx: "Sections" if ctx["chunks"] > 0 else "RecordSuccess",
    "OneSection": lambda ctx: (
        ("InlineEnd" if ctx["inline_chunks"] else "Pages") if ctx["sections"] == 1 else "SectionsInOrder"
    ),
    "FitsInline": lambda ctx: "FileChunks" if ctx["chunks"] <= ctx["inline_chunks"] else "Pages",
    "LastSection": lambda ctx: (
        "ClampSection" if ctx["section_pages"] < ctx["pages_per_section"] else "SectionPages"
    ),
    "LastPage": lambda ctx: "ClampToFile" if ctx["page_chunks"] < ctx["chunks_per_page"] else "PageChunks",
    "ChunkDone": lambda ctx: "ChunkRegistered",
    "RunPageOutcome": lambda ctx: "RunPageDone",  # paused: RunPagePaused, not the success path
    "RunSectionOutcome": lambda ctx: "RunSectionDone",
}


def walk(
    machine: dict[str, Any],
    ctx: dict[str, int],
    map_items: Callable[[str, dict[str, int]], list[dict[str, int]]],
) -> int:
    """Transitions of one run of ``machine`` (a definition or an item processor): one per state
    entered (Task, Pass, Choice, Map, Succeed, Fail), a Map's processor once per item."""
    count, name = 0, machine["StartAt"]
    while name is not None:
        state = machine["States"][name]
        count += 1
        kind = state["Type"]
        if kind == "Map":
            processor = state.get("ItemProcessor") or state["Iterator"]
            count += sum(walk(processor, item, map_items) for item in map_items(name, ctx))
        if kind == "Choice":
            if name not in CHOICES:
                raise KeyError(f"Choice state {name!r} has no success-path rule in bench/cost.py CHOICES")
            name = CHOICES[name](ctx)
            continue
        name = None if state.get("End") or kind in ("Succeed", "Fail") else state["Next"]
    return count


def pages_of(chunks: int, per_page: int) -> list[int]:
    """The chunk count of each page."""
    return [min(per_page, chunks - first) for first in range(0, chunks, per_page)]


def transitions(facts: TenantFacts, chunks: int) -> tuple[int, int]:
    """(the file's execution, all its child executions: sections and pages) on the success path."""
    pages = pages_of(chunks, facts.chunks_per_page)
    sections = pages_of(len(pages), facts.pages_per_section)  # pages per section
    inline = 0 < chunks <= facts.inline_chunks  # the parent runs the chunks itself: no page execution

    def parent_items(name: str, ctx: dict[str, int]) -> list[dict[str, int]]:
        if name == "ChunksInOrder":
            return [ctx] * chunks
        # RunPage or RunSection: one task per child; the child runs as its own execution
        return [ctx for _ in (sections if name == "SectionsInOrder" else pages)]

    def section_items(_: str, ctx: dict[str, int]) -> list[dict[str, int]]:
        return [ctx] * ctx["section_pages"]

    def page_items(_: str, ctx: dict[str, int]) -> list[dict[str, int]]:
        return [ctx] * ctx["page_chunks"]

    parent = walk(
        facts.parent,
        {"chunks": chunks, "sections": len(sections), "inline_chunks": facts.inline_chunks},
        parent_items,
    )
    section = (
        sum(
            walk(
                facts.section,
                {"section_pages": n, "pages_per_section": facts.pages_per_section},
                section_items,
            )
            for n in sections
        )
        if len(sections) > 1
        else 0
    )
    page = sum(
        walk(facts.page, {"page_chunks": n, "chunks_per_page": facts.chunks_per_page}, page_items)
        for n in ([] if inline else pages)
    )
    return parent, section + page


# -- one tenant's month ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileCost:
    chunks: int
    pages: int
    parent_transitions: int
    page_transitions: int
    invocations: int
    gb_seconds: float
    register_seconds: float
    sqs_requests: int
    ddb_rru: int
    ddb_wru: int
    s3_put: int
    s3_get: int
    log_bytes: int

    @property
    def transitions(self) -> int:
        return self.parent_transitions + self.page_transitions


def file_cost(facts: TenantFacts, scenario: Scenario, answer_seconds: float | None = None) -> FileCost:
    """One file's counts; ``answer_seconds`` replaces the local per-request time (sensitivity)."""
    a = ASSUMPTIONS
    chunks = math.ceil(scenario.records_per_file / scenario.chunk_size)
    parent, page = transitions(facts, chunks)
    requests = math.ceil(scenario.records_per_file / scenario.batch_size)
    if answer_seconds is not None:
        sending = requests * answer_seconds
    elif scenario.batch_size == 1:
        sending = requests * a["record_seconds"]
    else:
        sending = requests * a["batch_request_seconds"]
    register_seconds = chunks * a["chunk_overhead_seconds"] + sending
    split_seconds = a["split_overhead_seconds"] + scenario.records_per_file * a["split_seconds_per_record"]
    mem = {kind: mb / 1024 for kind, mb in facts.memory_mb.items()}
    gb_seconds = (
        PER_FILE["controller_invocations"] * a["controller_seconds"] * mem["controller"]
        + split_seconds * mem["split"]
        + register_seconds * mem["register-chunk"]
        + PER_FILE["closer_invocations"] * a["closer_seconds"] * mem["close-file"]
    )
    invocations = (
        PER_FILE["controller_invocations"]
        + PER_FILE["split_invocations"]
        + chunks
        + PER_FILE["closer_invocations"]
    )
    progress_writes = chunks * PER_CHUNK["ddb_wru_fixed"] + math.floor(sending)
    return FileCost(
        chunks=chunks,
        pages=0 if 0 < chunks <= facts.inline_chunks else len(pages_of(chunks, facts.chunks_per_page)),
        parent_transitions=parent,
        page_transitions=page,
        invocations=invocations,
        gb_seconds=gb_seconds,
        register_seconds=register_seconds,
        sqs_requests=PER_FILE["sqs_requests"],
        ddb_rru=PER_FILE["ddb_rru"] + chunks * PER_CHUNK["ddb_rru"],
        ddb_wru=PER_FILE["ddb_wru"] + progress_writes,
        s3_put=PER_FILE["s3_put"],
        s3_get=PER_FILE["s3_get"] + chunks * PER_CHUNK["s3_get"],
        log_bytes=invocations * a["log_bytes_per_invocation"],
    )


def idle_sqs_requests_per_month() -> int:
    """The event source mapping's empty receives: every poller long-polls for 20 s, all month."""
    a = ASSUMPTIONS
    return a["idle_pollers"] * DAYS_PER_MONTH * 86400 // a["long_poll_seconds"]


def monthly(facts: TenantFacts, scenario: Scenario, cost: FileCost) -> dict[str, float]:
    """Dollars per month of one tenant, per service (no free tier: it is per account)."""
    p, files = PRICES, scenario.files_per_day * DAYS_PER_MONTH
    active_hours_per_day = min(24, scenario.files_per_day * max(1, math.ceil(cost.register_seconds / 3600)))
    landing_gb = files * scenario.records_per_file * ASSUMPTIONS["bytes_per_record"] / 1e9
    return {
        "Step Functions": files * cost.transitions * p["sfn_transition"],
        "Lambda": files
        * (cost.invocations * p["lambda_request"] + cost.gb_seconds * p["lambda_gb_second_arm"]),
        "SQS": (files * cost.sqs_requests + idle_sqs_requests_per_month()) * p["sqs_fifo_request"],
        "EventBridge": 0.0,
        "DynamoDB": files * (cost.ddb_rru * p["ddb_rru"] + cost.ddb_wru * p["ddb_wru"]),
        "S3 requests": files * (cost.s3_put * p["s3_put"] + cost.s3_get * p["s3_get"]),
        "S3 storage (one month of files)": landing_gb * p["s3_gb_month"],
        "CloudWatch alarms": facts.alarm_metrics * p["cw_alarm_metric"],
        "CloudWatch metrics (EMF)": EMF_METRICS
        * p["cw_custom_metric"]
        * active_hours_per_day
        * 30
        / HOURS_PER_MONTH,
        "CloudWatch logs": files * cost.log_bytes / 1e9 * p["cw_log_gb"],
    }


def seed_monthly(scenario: Scenario) -> dict[str, float]:
    """The seed for the same files, spaced so that none waits (its 30 s waits: `seed_burst`)."""
    p, files = PRICES, scenario.files_per_day * DAYS_PER_MONTH
    chunks = math.ceil(scenario.records_per_file / SEED["chunk_size"])
    transitions = SEED["transitions_fixed"] + chunks * SEED["transitions_per_chunk"]
    return {
        "Step Functions": files * transitions * p["sfn_transition"],
        "S3 requests": files * ((1 + chunks) * p["s3_put"] + (1 + chunks) * p["s3_get"]),
        "CloudWatch alarms": SEED["alarms"] * p["cw_alarm_metric"],
        "SQS": (files * 3 + idle_sqs_requests_per_month()) * p["sqs_fifo_request"],
    }


def seed_burst(files: int, file_seconds: float) -> tuple[int, int]:
    """Controller invocations for a burst of ``files`` arriving together, each running
    ``file_seconds``: the seed's waiting messages come back every 30 s (each a ListExecutions);
    here a waiting file is delivered once and handed off (at most 2 per file, docs/benchmarks.md)."""
    waits = sum(math.ceil(k * file_seconds / SEED["visibility_seconds"]) for k in range(files))
    return files + waits, 2 * files - 1


# -- tables ------------------------------------------------------------------------------------------


def synthesize(scenarios: Sequence[Scenario]) -> dict[str, TenantFacts]:
    from pipeline_constructs.application import build_app, new_app

    configs = sorted({(s.chunk_size, s.batch_size) for s in scenarios})
    document = {
        "defaults": {"sink": {"url": "https://core.example.com/records"}},
        "tenants": [
            {
                "id": f"c{c}b{b}",
                "prefix": f"c{c}b{b}/",
                "chunk_size": c,
                "sink": {"batch_size": b, "auth": {"type": "none"}},
            }
            for c, b in configs
        ],
    }
    with tempfile.TemporaryDirectory(prefix="cost-") as scratch:
        tenants = Path(scratch) / "tenants.yaml"
        tenants.write_text(yaml.safe_dump(document), encoding="utf-8")
        assembly = build_app(tenants, app=new_app(outdir=str(Path(scratch) / "out")), nag=False).app.synth()
        templates = {stack.stack_name: stack.template for stack in assembly.stacks}
    return {
        f"c{c}b{b}": tenant_facts(templates[f"OrderedIngest-Tenant-c{c}b{b}"], f"c{c}b{b}")
        for c, b in configs
    }


def money(value: float) -> str:
    return f"${value:,.2f}" if value >= 0.01 or value == 0 else f"${value:.4f}"


def tables(facts: Mapping[str, TenantFacts], scenarios: Sequence[Scenario] = SCENARIOS) -> str:
    out = [
        "Per file (success path; files spaced so that none waits):",
        "",
        (
            "| scenario | F/day | R/file | chunk | batch | chunks | pages | transitions (file + pages) | "
            "Lambda invocations | Lambda GB-s | SQS requests | DynamoDB RRU / WRU | S3 PUT / GET |"
        ),
        "|" + " --- |" * 13,
    ]
    priced: list[tuple[Scenario, dict[str, float]]] = []
    for s in scenarios:
        f = facts[s.tenant_id]
        cost = file_cost(f, s)
        head = f"| {s.name} | {s.files_per_day} | {s.records_per_file:,} | {s.chunk_size} | {s.batch_size} | {cost.chunks:,} "
        if cost.chunks > f.max_chunks:
            out.append(
                head
                + f'| refused by Split: more than {f.max_chunks:,} chunks (docs/scaling.md, "Largest file") '
                + "| - " * 7
                + "|"
            )
            continue
        out.append(
            head + f"| {cost.pages:,} | {cost.transitions:,} ({cost.parent_transitions:,} + "
            f"{cost.page_transitions:,}) | {cost.invocations:,} | {cost.gb_seconds:,.1f} | {cost.sqs_requests} "
            f"| {cost.ddb_rru:,} / {cost.ddb_wru:,} | {cost.s3_put} / {cost.s3_get:,} |"
        )
        priced.append((s, monthly(f, s, cost)))
    services = list(priced[0][1])
    out += [
        "",
        "Per tenant and month (30 days, us-east-1, no free tier):",
        "",
        "| service | " + " | ".join(s.name for s, _ in priced) + " | idle tenant |",
        "|" + " --- |" * (len(priced) + 2),
    ]
    idle = monthly(
        facts[priced[0][0].tenant_id],
        Scenario("idle", 0, 0, 100, 1),
        file_cost(facts[priced[0][0].tenant_id], Scenario("idle", 0, 0, 100, 1)),
    )
    for service in services:
        out.append(
            f"| {service} | "
            + " | ".join(money(m[service]) for _, m in priced)
            + f" | {money(idle[service])} |"
        )
    slow = [
        monthly(facts[s.tenant_id], s, file_cost(facts[s.tenant_id], s, SLOW_ANSWER_SECONDS))["Lambda"]
        for s, _ in priced
    ]
    out.append(
        f"| Lambda if the core system answers in {SLOW_ANSWER_SECONDS * 1000:.0f} ms (instead of the total's "
        "local figures) | " + " | ".join(money(v) for v in slow) + " | - |"
    )
    out.append(
        "| **total** | "
        + " | ".join(f"**{money(sum(m.values()))}**" for _, m in priced)
        + f" | **{money(sum(idle.values()))}** |"
    )
    out += [
        "",
        "The article's design for the same files (only the services where it differs):",
        "",
        "| service | " + " | ".join(s.name for s, _ in priced) + " |",
        "|" + " --- |" * (len(priced) + 1),
    ]
    seeds = [seed_monthly(s) for s, _ in priced]
    for service in seeds[0]:
        out.append(
            f"| {service} | "
            + " | ".join(
                f"{money(seed[service])} (here {money(m[service])})" for seed, (_, m) in zip(seeds, priced)
            )
            + " |"
        )
    seed_calls, own_calls = seed_burst(10, 600)
    out += [
        "",
        (
            f"A burst of 10 files of 10 minutes each: the article's controller runs {seed_calls:,} times "
            f"(each a ListExecutions), this one at most {own_calls}."
        ),
    ]
    return "\n".join(out)


def facts_line(facts: Mapping[str, TenantFacts]) -> str:
    f = facts[SCENARIOS[0].tenant_id]
    memory = ", ".join(f"{kind} {mb} MB" for kind, mb in sorted(f.memory_mb.items()))
    return (
        f"From the templates: {f.alarms} alarms per tenant watching {f.alarm_metrics} metrics; {f.log_groups} log "
        f"groups; memory {memory}; chunks per page {', '.join(f'{k}: {v.chunks_per_page}' for k, v in sorted(facts.items()))}; "
        f"largest file {', '.join(f'{k}: {v.max_chunks:,} chunks' for k, v in sorted(facts.items()))}."
    )


def render(facts: Mapping[str, TenantFacts]) -> str:
    return f"{BEGIN}\n{facts_line(facts)}\n\n{tables(facts)}\n{END}"


def embedded(text: str) -> str:
    return results.embedded(text, BEGIN, END)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="replace the tables in docs/cost.md")
    args = parser.parse_args(argv)
    block = render(synthesize(SCENARIOS))
    print(block)
    if args.write:
        results.replace_embedded(DOC, BEGIN, END, block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
