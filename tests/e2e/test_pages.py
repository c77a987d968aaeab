"""Pages of chunks on the local runtime: a file runs as a parent execution whose Map
starts one child execution (`startExecution.sync:2`) per page; a file of more pages than one
section holds runs its pages in section executions (the parent's Map starts one section per
`pages_per_section` pages, each section's Map one page at a time). Pages are made small here
(`chunks_per_page: 2`, chunks of 3 records: 6 records a page; sections of 2 pages: 12
records) so that small files need several pages and sections.
"""

from __future__ import annotations

import json

import pytest

from lambdas import contract
from local_runtime import LocalPipeline
from ops.cli import EXIT_OK
from tests.e2e.pipeline_checks import (
    assert_files_in_order,
    assert_no_duplicates,
    assert_no_overlap,
    assert_records_in_file_order,
    csv_file,
    first_sends,
    halted,
    ops,
    status,
    wait_for,
)

RECORDS_PER_PAGE = 6  # chunks_per_page 2 x chunk_size 3


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline(
        [
            {"id": "paged", "chunks_per_page": 2},
            {"id": "pagefail", "chunks_per_page": 2},
            {"id": "lastpage", "chunks_per_page": 2},
            {"id": "sectioned", "chunks_per_page": 2, "pages_per_section": 2},
            {"id": "sectionfail", "chunks_per_page": 2, "pages_per_section": 2},
        ],
        chunk_size=3,
    )


def page_executions(pipe: LocalPipeline, tenant: str, kind: str = "page") -> list[str]:
    """Names of the tenant's page (or section) executions, oldest first."""
    sfn = pipe.client("stepfunctions")
    machine = next(
        m["stateMachineArn"]
        for m in sfn.list_state_machines()["stateMachines"]
        if m["name"] == f"{tenant}-file-ingest-{kind}"
    )
    listed = sfn.list_executions(stateMachineArn=machine)["executions"]
    return [e["name"] for e in sorted(listed, key=lambda e: e["startDate"])]


def test_a_file_of_several_pages_is_registered_in_order_one_page_execution_at_a_time(
    pipe: LocalPipeline,
) -> None:
    """GIVEN pages of 6 records WHEN a file of 20 records (7 chunks, 4 pages) and then a file of
    4 records arrive THEN every record is registered once, in file order, the first file's
    pages ran as 4 child executions named after it, and the second file started after it."""
    sink = pipe.sink("paged")
    uploads = [
        pipe.put_file("paged", "a.csv", csv_file("a", 20)),
        pipe.put_file("paged", "b.csv", csv_file("b", 4)),
    ]
    pipe.wait_until_idle(timeout=120, tenants=["paged"])

    executions = pipe.executions("paged")
    assert [e["status"] for e in executions] == ["SUCCEEDED", "SUCCEEDED"]
    assert_files_in_order(executions, [key for key, _ in uploads])
    assert_no_overlap(executions)
    assert_records_in_file_order(sink.accepted, [("a", 20), ("b", 4)])
    assert_no_duplicates(sink.accepted)
    first = executions[0]["name"]
    assert [n for n in page_executions(pipe, "paged") if n.startswith(first)] == [
        f"{first}-p0",
        f"{first}-p2",
        f"{first}-p4",
        f"{first}-p6",
    ]


def test_a_failure_in_page_2_halts_and_resume_continues_there_with_nothing_registered_twice(
    pipe: LocalPipeline,
) -> None:
    """GIVEN a core system that rejects record 8 (chunk 2: the second page) of a 20-record file
    WHEN it arrives THEN the file fails at record 8 with the core system's error (not the page
    execution's wrapper) and the tenant halts; WHEN the core system is fixed and the operator
    runs `ops resume` THEN the file continues at record 8: records 0-7 are never sent again,
    and the next file follows."""
    sink = pipe.sink("pagefail").reject(on_record={"file": "a", "seq": "8"}, status=400)
    uploads = [
        pipe.put_file("pagefail", "a.csv", csv_file("a", 20)),
        pipe.put_file("pagefail", "b.csv", csv_file("b", 4)),
    ]

    wait_for(lambda: halted(pipe, "pagefail"), timeout=90, what="the tenant to halt")
    state = status(pipe, "pagefail")
    assert state["current_file"]["key"] == uploads[0][0] and state["current_file"]["next_record"] == 8
    assert state["last_failure"]["error"] == contract.SinkRejectedError.__name__
    assert [e["key"] for e in pipe.executions("pagefail")] == [uploads[0][0]]

    sink.clear_faults()
    resumed_at = len(sink.requests)
    code, out = ops(pipe, "resume", "pagefail")
    assert code == EXIT_OK and "at record 8" in out
    pipe.wait_until_idle(timeout=120, tenants=["pagefail"])

    executions = pipe.executions("pagefail")
    assert [e["status"] for e in executions] == ["FAILED", "SUCCEEDED", "SUCCEEDED"]
    assert_no_overlap(executions)
    assert_records_in_file_order(sink.accepted, [("a", 20), ("b", 4)])
    after_resume = [
        int(r.body["seq"]) for r in first_sends(sink.requests[resumed_at:]) if r.body["file"] == "a"
    ]
    assert after_resume == list(range(8, 20))
    # The resumed execution's pages start at the chunk of record 8 (chunk 2).
    resumed = executions[1]["name"]
    assert [n for n in page_executions(pipe, "pagefail") if n.startswith(resumed)] == [
        f"{resumed}-p2",
        f"{resumed}-p4",
        f"{resumed}-p6",
    ]


def test_a_malformed_line_in_the_last_page_is_refused_before_any_record_is_sent(pipe: LocalPipeline) -> None:
    """GIVEN a 20-record file (4 pages) whose last line is malformed WHEN it arrives THEN the
    file fails (MalformedFileError, naming the line) and the core system received nothing."""
    bad = csv_file("a", 20) + b"a\n"  # line 22: one field instead of two
    pipe.put_file("lastpage", "a.csv", bad)
    wait_for(lambda: halted(pipe, "lastpage"), timeout=90, what="the tenant to halt")

    state = status(pipe, "lastpage")
    assert state["last_failure"]["error"] == contract.MalformedFileError.__name__
    assert "line 22" in json.dumps(state["last_failure"])
    assert pipe.sink("lastpage").requests == []
    assert page_executions(pipe, "lastpage") == []


def test_a_file_of_several_sections_runs_its_pages_section_by_section_in_order(pipe: LocalPipeline) -> None:
    """GIVEN sections of 2 pages of 2 chunks of 3 records WHEN a file of 40 records (14 chunks,
    7 pages, 4 sections) and then a file of 4 records arrive THEN every record is registered
    once, in file order; the first file ran 4 section executions and 7 page executions, named
    after it, each page once; the second file (one page) ran its chunks in its own execution."""
    sink = pipe.sink("sectioned")
    uploads = [
        pipe.put_file("sectioned", "a.csv", csv_file("a", 40)),
        pipe.put_file("sectioned", "b.csv", csv_file("b", 4)),
    ]
    pipe.wait_until_idle(timeout=180, tenants=["sectioned"])

    executions = pipe.executions("sectioned")
    assert [e["status"] for e in executions] == ["SUCCEEDED", "SUCCEEDED"]
    assert_files_in_order(executions, [key for key, _ in uploads])
    assert_records_in_file_order(sink.accepted, [("a", 40), ("b", 4)])
    assert_no_duplicates(sink.accepted)
    first, second = executions[0]["name"], executions[1]["name"]
    assert page_executions(pipe, "sectioned", "section") == [f"{first}-s{c}" for c in (0, 4, 8, 12)]
    assert [n for n in page_executions(pipe, "sectioned") if n.startswith(first)] == [
        f"{first}-p{c}" for c in (0, 2, 4, 6, 8, 10, 12)
    ]
    assert [n for n in page_executions(pipe, "sectioned") if n.startswith(second)] == []


def test_a_failure_in_section_2_halts_and_resume_continues_there_with_nothing_registered_twice(
    pipe: LocalPipeline,
) -> None:
    """GIVEN a core system that rejects record 15 (chunk 5: section 2, its first page's second
    chunk) of a 40-record file WHEN it arrives THEN the file fails at record 15 with the core
    system's error through both child levels, and the tenant halts; later sections never ran.
    WHEN the core system is fixed and the operator resumes THEN records 15-39 follow in order
    and records 0-14 are never sent again."""
    sink = pipe.sink("sectionfail").reject(on_record={"file": "a", "seq": "15"}, status=400)
    upload = pipe.put_file("sectionfail", "a.csv", csv_file("a", 40))

    wait_for(lambda: halted(pipe, "sectionfail"), timeout=120, what="the tenant to halt")
    state = status(pipe, "sectionfail")
    assert state["current_file"]["key"] == upload[0] and state["current_file"]["next_record"] == 15
    assert state["last_failure"]["error"] == contract.SinkRejectedError.__name__
    failed = pipe.executions("sectionfail")[0]["name"]
    assert page_executions(pipe, "sectionfail", "section") == [f"{failed}-s0", f"{failed}-s4"]

    sink.clear_faults()
    resumed_at = len(sink.requests)
    code, out = ops(pipe, "resume", "sectionfail")
    assert code == EXIT_OK and "at record 15" in out
    pipe.wait_until_idle(timeout=180, tenants=["sectionfail"])

    executions = pipe.executions("sectionfail")
    assert [e["status"] for e in executions] == ["FAILED", "SUCCEEDED"]
    assert_records_in_file_order(sink.accepted, [("a", 40)])
    assert_no_duplicates(sink.accepted)
    after_resume = [
        int(r.body["seq"]) for r in first_sends(sink.requests[resumed_at:]) if r.body["file"] == "a"
    ]
    assert after_resume == list(range(15, 40))
    resumed = executions[1]["name"]
    assert [n for n in page_executions(pipe, "sectionfail", "section") if n.startswith(resumed)] == [
        f"{resumed}-s{c}" for c in (5, 9, 13)
    ]
