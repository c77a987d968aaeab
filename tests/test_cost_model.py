"""docs/cost.md: its tables are what bench/cost.py computes from the synthesized templates."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.conftest import ROOT


def load_cost_module():
    spec = importlib.util.spec_from_file_location("bench_cost", ROOT / "bench" / "cost.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_cost"] = module
    spec.loader.exec_module(module)
    return module


cost = load_cost_module()


@pytest.fixture(scope="module")
def facts():
    return cost.synthesize(cost.SCENARIOS)


def test_the_docs_tables_are_what_the_script_computes_from_the_templates(facts):
    """GIVEN the templates of today's code WHEN bench/cost.py prices the scenarios THEN
    docs/cost.md shows exactly those figures (run `bench/cost.py --write` after a change)."""
    assert cost.embedded(cost.DOC.read_text()) == cost.render(facts)


def test_the_a_and_b_scenarios_use_the_computed_default_chunk_sizes():
    """GIVEN scenarios A1, A2, B1, B2 WHEN priced THEN at the chunk sizes a tenant that leaves
    chunk_size out gets, in record mode and with sink.batch_size 100."""
    from pipeline_constructs import pace
    from pipeline_constructs.config.sink import DEFAULT_OUTAGE_BUDGET_SECONDS

    defaults = {b: pace.default_chunk_size(10, DEFAULT_OUTAGE_BUDGET_SECONDS, b) for b in (1, 100)}
    for scenario in cost.SCENARIOS:
        if scenario.name in ("A1", "A2", "B1", "B2"):
            assert scenario.chunk_size == defaults[scenario.batch_size], scenario.name


def test_one_chunk_walks_every_state_of_the_success_path_once(facts):
    """GIVEN a one-chunk file WHEN its transitions are walked through the definitions THEN the
    file's execution enters its 13 states once (Split, AnyChunks, Sections, OneSection,
    InlineEnd, FitsInline, FileChunks, ChunksInOrder, RegisterChunk, ChunkDone, ChunkRegistered,
    RecordSuccess, FileIngested) and no page execution runs."""
    assert cost.transitions(facts["c100b1"], chunks=1) == (13, 0)


def test_a_file_of_one_chunk_more_than_the_parent_runs_itself_runs_pages(facts):
    """GIVEN a file of one chunk more than the parent runs itself WHEN walked THEN the file's
    execution leaves FitsInline for Pages, PagesInOrder and two RunPage, RunPageOutcome,
    RunPageDone; the full page enters its 4 own states and 3 per chunk, the short page also
    ClampToFile."""
    f = facts["c100b1"]
    assert f.inline_chunks == f.chunks_per_page
    parent, pages = cost.transitions(f, chunks=f.chunks_per_page + 1)
    assert parent == 6 + 2 + 2 * 3 + 2
    assert pages == (4 + 3 * f.chunks_per_page) + (5 + 3)


def test_a_file_of_two_sections_runs_them_as_section_executions(facts):
    """GIVEN a file of one page more than a section holds WHEN walked THEN the file's execution
    takes the sections path (SectionsInOrder, RunSection with its outcome twice), and the
    children's transitions are the pages' plus two sections' own states (SectionEnd,
    LastSection, ClampSection on the short one, SectionPages, PagesInOrder, and a RunPage,
    RunPageOutcome, RunPageDone per page)."""
    f = facts["c100b1"]
    per_section = f.chunks_per_page * f.pages_per_section
    parent, children = cost.transitions(f, chunks=per_section + f.chunks_per_page)
    full_page = 4 + 3 * f.chunks_per_page
    pages_only = cost.transitions(f, chunks=per_section)[1] + full_page
    # Split, AnyChunks, Sections, OneSection, SectionsInOrder, RecordSuccess, FileIngested
    assert parent == 7 + 2 * 3
    assert children == pages_only + (4 + 3 * f.pages_per_section) + (5 + 3)


def test_transitions_grow_by_three_a_chunk_and_seven_a_page(facts):
    """GIVEN files of two and three full pages WHEN walked THEN a chunk adds RegisterChunk,
    ChunkDone and ChunkRegistered, and a page adds its RunPage, RunPageOutcome and RunPageDone
    in the file's execution and its 4 own states (no clamp on a full page)."""
    per_page = facts["c100b1"].chunks_per_page
    two_parent, two_page = cost.transitions(facts["c100b1"], chunks=2 * per_page)
    three_parent, three_page = cost.transitions(facts["c100b1"], chunks=3 * per_page)
    assert (three_parent - two_parent, three_page - two_page) == (3, 4 + 3 * per_page)


def test_fails_when_a_choice_state_has_no_success_path_rule(facts):
    """GIVEN a workflow with a Choice the model does not know WHEN it is walked THEN the walk
    fails and names it, rather than pricing a path nobody checked."""
    parent = facts["c100b1"].parent
    changed = {**parent, "States": {**parent["States"], "AnyChunks": {**parent["States"]["AnyChunks"]}}}
    changed["States"]["Renamed"] = changed["States"].pop("AnyChunks")
    changed["States"]["Split"] = {**changed["States"]["Split"], "Next": "Renamed"}
    with pytest.raises(
        KeyError, match="Choice state 'Renamed' has no success-path rule in bench/cost.py CHOICES"
    ):
        cost.walk(changed, {"chunks": 1}, lambda _name, ctx: [ctx])


def test_an_idle_tenant_pays_for_its_alarms_and_the_queue_s_long_polling(facts):
    """GIVEN no file in a month THEN the only costs are the alarms (every metric they read) and
    Lambda's empty receives: 5 pollers x 3 a minute x 30 days."""
    idle = cost.Scenario("idle", 0, 0, 100, 1)
    month = cost.monthly(facts["c100b1"], idle, cost.file_cost(facts["c100b1"], idle))
    assert cost.idle_sqs_requests_per_month() == 648_000
    assert {k: round(v, 4) for k, v in month.items() if v} == {
        "SQS": 0.324,
        "CloudWatch alarms": round(facts["c100b1"].alarm_metrics * 0.10, 4),
    }
