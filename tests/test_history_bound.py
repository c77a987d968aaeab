"""Every execution's history has a bound that does not grow with the file.

The bound is recounted here from the SYNTHESIZED state machine definitions, state by state,
independently of the arithmetic in `pipeline_constructs/budgets.py`: each state's events per
entry (with every retry its Retry allows), how often a state may be entered (once; a Map's
processor once per item, the items bounded by the `States.ArrayRange` that makes them; a loop
only if the workflow counts it and leaves it at a budget), summed over EVERY state (both the
success and the failure path: an upper bound of any one path). Nothing in it depends on the
file's size: a bigger file needs more pages, and Split refuses more than `MAX_CHUNKS` chunks.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aws_cdk.assertions import Template

from lambdas import contract
from pipeline_constructs import budgets

LIMIT = 25_000
#: The bound must stay this far below Step Functions' limit.
MARGIN = 0.2

TASK_EVENTS = 5  # TaskStateEntered, TaskScheduled, TaskStarted, TaskSucceeded|Failed, TaskStateExited
SYNC_EXTRA = 1  # TaskSubmitted (a .sync task), on the first attempt and on every retry
RETRY_EVENTS = 3  # TaskScheduled, TaskStarted, TaskFailed of a retried attempt
SIMPLE_EVENTS = 2  # entered + exited (Pass, Choice, Wait, Succeed; Fail has one: counted as 2)
MAP_EVENTS = 4  # MapStateEntered, MapStateStarted, MapStateSucceeded|Failed, MapStateExited
ITERATION_EVENTS = 2  # MapIterationStarted, MapIterationSucceeded|Failed
EXECUTION_EVENTS = 2  # ExecutionStarted, ExecutionSucceeded|Failed|TimedOut|Aborted


def machines(template: Template) -> dict[str, dict[str, Any]]:
    """{"parent": ..., "section": ..., "page": definition} with intrinsics replaced by placeholders."""
    found = {}
    kinds = {
        "PipelinePageWorkflow": "page",
        "PipelineSectionWorkflow": "section",
        "PipelineWorkflow": "parent",
    }
    for logical_id, machine in template.find_resources("AWS::StepFunctions::StateMachine").items():
        parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
        definition = json.loads("".join(p if isinstance(p, str) else "<ref>" for p in parts))
        found[next(kind for prefix, kind in kinds.items() if logical_id.startswith(prefix))] = definition
    assert set(found) == {"parent", "section", "page"}
    return found


def split_max_chunks(template: Template) -> int:
    for function in template.find_resources("AWS::Lambda::Function").values():
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        if "MAX_CHUNKS" in variables:
            return int(variables["MAX_CHUNKS"])
    raise AssertionError("the split function has no MAX_CHUNKS")


def task_events(state: dict[str, Any]) -> int:
    """One entry into a Task, with every retry its Retry allows."""
    # .sync and .waitForTaskToken tasks both log TaskSubmitted (a callback's heartbeats log nothing)
    sync = SYNC_EXTRA if re.search(r"\.(sync(:2)?|waitForTaskToken)$", state["Resource"]) else 0
    retries = sum(retrier.get("MaxAttempts", 3) for retrier in state.get("Retry", []))
    return TASK_EVENTS + sync + retries * (RETRY_EVENTS + sync)


def successors(state: dict[str, Any]) -> set[str]:
    nexts = {state["Next"]} if "Next" in state else set()
    nexts |= {choice["Next"] for choice in state.get("Choices", [])}
    nexts |= {state["Default"]} if "Default" in state else set()
    nexts |= {catch["Next"] for catch in state.get("Catch", [])}
    return nexts


def reachable(states: dict[str, dict[str, Any]], start: str) -> set[str]:
    """The states a path from `start` may enter after it."""
    seen: set[str] = set()
    todo = list(successors(states[start]))
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(successors(states[name]))
    return seen


def cycles(states: dict[str, dict[str, Any]]) -> list[set[str]]:
    """The strongly connected components with a cycle (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for nxt in successors(states[name]):
            if nxt not in index:
                visit(nxt)
                low[name] = min(low[name], low[nxt])
            elif nxt in stack:
                low[name] = min(low[name], index[nxt])
        if low[name] == index[name]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == name:
                    break
            if len(component) > 1 or name in successors(states[name]):
                found.append(component)

    for name in states:
        if name not in index:
            visit(name)
    return found


def loop_budget(states: dict[str, dict[str, Any]], loop: set[str], item_selector: dict[str, Any]) -> int:
    """How often a loop may run: the workflow must count it (a task's ResultSelector adds 1 to
    `invocation`, which the Map starts at 0) and leave it (a Choice in the loop goes out of it
    once `invocation` reaches a constant). Anything else is an unbounded loop: the test fails."""
    counted = [
        n
        for n in loop
        if states[n].get("ResultSelector", {}).get("invocation.$")
        == "States.MathAdd($.Payload.invocation, 1)"
    ]
    assert len(counted) == 1, f"loop {sorted(loop)} is not counted"
    assert item_selector.get("invocation") == 0, "the count must start at 0 for each item"
    exits = [
        rule["NumericGreaterThanEquals"]
        for n in loop
        if states[n]["Type"] == "Choice"
        for rule in states[n]["Choices"]
        if rule.get("Variable") == "$.invocation"
        and "NumericGreaterThanEquals" in rule
        and rule["Next"] not in loop
    ]
    assert exits, f"loop {sorted(loop)} has no exit at a budget"
    # every way round the loop passes the counted task: without it, no cycle is left
    rest = {n: s for n, s in states.items() if n != counted[0]}
    rest = {
        n: {**s, "Next": s["Next"]} if s.get("Next") in rest else {k: v for k, v in s.items() if k != "Next"}
        for n, s in rest.items()
    }
    for state in rest.values():
        if "Choices" in state:
            state["Choices"] = [c for c in state["Choices"] if c["Next"] in rest]
        if state.get("Default") not in rest:
            state.pop("Default", None)
        state["Catch"] = [c for c in state.get("Catch", []) if c["Next"] in rest]
    assert not cycles(rest), f"loop {sorted(loop)} has a way round that does not pass {counted[0]}"
    return min(exits)


def array_range(expression: str) -> tuple[str, str, str]:
    match = re.fullmatch(r"States\.ArrayRange\(([^,]+), ([^,]+), ([^)]+)\)", expression)
    assert match, f"not an ArrayRange: {expression}"
    return match.group(1), match.group(2), match.group(3)


def items_of_page_map(page: dict[str, Any]) -> int:
    """A page's chunks: ArrayRange(first_chunk, page end, 1), the end at most first_chunk + K."""
    states = page["States"]
    first, end, step = array_range(states["PageChunks"]["Parameters"]["chunks.$"])
    assert (first, end, step) == ("$.first_chunk", "$.page.last", "1")
    match = re.fullmatch(
        r"States\.MathAdd\(\$\.first_chunk, (\d+)\)", states["PageEnd"]["Parameters"]["last.$"]
    )
    assert match, "the page's end must be first_chunk + a constant"
    # ClampToFile may only lower it (to the file's last chunk, taken when that is smaller)
    assert states["LastPage"]["Choices"] == [
        {"Variable": "$.page.last", "NumericGreaterThanPath": "$.last_chunk", "Next": "ClampToFile"}
    ]
    return int(match.group(1)) + 1


def items_of_inline_map(parent: dict[str, Any]) -> int:
    """The chunks a parent runs itself (0: none): ArrayRange(first_chunk, last_chunk, 1) only
    when last_chunk is at most first_chunk + K (FitsInline), so at most K + 1 of them."""
    states = parent["States"]
    if "ChunksInOrder" not in states:
        return 0
    assert states["OneSection"]["Default"] == "InlineEnd" and states["InlineEnd"]["Next"] == "FitsInline"
    match = re.fullmatch(
        r"States\.MathAdd\(\$\.split\.first_chunk, (\d+)\)", states["InlineEnd"]["Parameters"]["last.$"]
    )
    assert match, "the inline end must be first_chunk + a constant"
    assert states["FitsInline"]["Choices"] == [
        {
            "Variable": "$.inline.last",
            "NumericGreaterThanEqualsPath": "$.split.last_chunk",
            "Next": "FileChunks",
        }
    ]
    assert states["FitsInline"]["Default"] == "Pages"
    first, last, step = array_range(states["FileChunks"]["Parameters"]["chunks.$"])
    assert (first, last, step) == ("$.split.first_chunk", "$.split.last_chunk", "1")
    assert states["FileChunks"]["Next"] == "ChunksInOrder"
    assert not {"Pages", "PagesInOrder", "Sections", "SectionsInOrder"} & reachable(
        states, "ChunksInOrder"
    ), "the inline path runs pages"
    return int(match.group(1)) + 1


def items_of_parent_map(parent: dict[str, Any], max_chunks: int) -> tuple[int, int, int]:
    """(sections, pages of a one-section file, chunks per page): the parent's two Maps. Sections
    are ArrayRange(first_chunk, last_chunk, S) over at most max_chunks; the parent runs pages
    itself (ArrayRange(first_chunk, last_chunk, P)) only when there is no second section, so
    at most S / P of them."""
    states = parent["States"]
    first, last, per_section = array_range(states["Sections"]["Parameters"]["first_chunks.$"])
    assert (first, last) == ("$.split.first_chunk", "$.split.last_chunk")
    first, last, per_page = array_range(states["Pages"]["Parameters"]["first_chunks.$"])
    assert (first, last) == ("$.split.first_chunk", "$.split.last_chunk")
    assert states["Sections"]["Next"] == "OneSection"
    assert states["OneSection"]["Choices"] == [
        {"Variable": "$.sections.first_chunks[1]", "IsPresent": True, "Next": "SectionsInOrder"}
    ]
    assert (
        states["OneSection"]["Default"] in ("Pages", "InlineEnd")
        and states["Pages"]["Next"] == "PagesInOrder"
    )
    assert int(per_section) % int(per_page) == 0, "a section must start on a page boundary"
    assert not {"Pages", "PagesInOrder"} & reachable(states, "SectionsInOrder"), (
        "the sections path runs pages"
    )
    assert not {"Sections", "SectionsInOrder"} & reachable(states, "PagesInOrder"), (
        "the pages path runs sections"
    )
    return -(-max_chunks // int(per_section)), int(per_section) // int(per_page), int(per_page)


def items_of_section_map(section: dict[str, Any]) -> tuple[int, int]:
    """(pages per section, chunks per page): ArrayRange(first_chunk, section end, P), the end at
    most first_chunk + S - 1."""
    states = section["States"]
    first, end, per_page = array_range(states["SectionPages"]["Parameters"]["first_chunks.$"])
    assert (first, end) == ("$.first_chunk", "$.section.last")
    match = re.fullmatch(
        r"States\.MathAdd\(\$\.first_chunk, (\d+)\)", states["SectionEnd"]["Parameters"]["last.$"]
    )
    assert match, "the section's end must be first_chunk + a constant"
    assert states["LastSection"]["Choices"] == [
        {"Variable": "$.section.last", "NumericGreaterThanPath": "$.last_chunk", "Next": "ClampSection"}
    ]
    return -(-(int(match.group(1)) + 1) // int(per_page)), int(per_page)


def bound(
    states: dict[str, dict[str, Any]], items: dict[str, int], item_selector: dict[str, Any] | None = None
) -> int:
    """Events of every state of `states` entered as often as it may be (see the module docstring)."""
    entries = dict.fromkeys(states, 1)
    for loop in cycles(states):
        assert item_selector is not None, f"a loop outside a Map's processor: {sorted(loop)}"
        times = loop_budget(states, loop, item_selector)
        entries.update(dict.fromkeys(loop, times))
    total = 0
    for name, state in states.items():
        kind = state["Type"]
        if kind == "Task":
            events = task_events(state)
        elif kind == "Map":
            processor = state["ItemProcessor"]
            assert processor["ProcessorConfig"]["Mode"] == "INLINE" and state["MaxConcurrency"] == 1
            per_item = ITERATION_EVENTS + bound(processor["States"], items, state.get("ItemSelector", {}))
            events = MAP_EVENTS + items[name] * per_item
        else:
            assert kind in ("Pass", "Choice", "Wait", "Succeed", "Fail"), kind
            events = SIMPLE_EVENTS
        total += entries[name] * events
    return total


def bounds(template: Template) -> dict[str, int]:
    found = machines(template)
    max_chunks = split_max_chunks(template)
    sections, parent_pages, per_page = items_of_parent_map(found["parent"], max_chunks)
    pages, section_per_page = items_of_section_map(found["section"])
    assert section_per_page == per_page and parent_pages == pages, (
        "the parent and the section must agree on pages"
    )
    assert items_of_page_map(found["page"]) == per_page, "the pages and the page's chunks must agree"
    inline = items_of_inline_map(found["parent"])
    assert inline <= per_page, "a parent runs at most one page's chunks itself"
    assert max(sections, pages, per_page) <= budgets.MAX_ARRAY_RANGE_ITEMS, (
        "States.ArrayRange makes at most 1,000 items"
    )
    return {
        # OneSection and FitsInline take one of the three Maps, and none leads to another: the worst
        "parent": EXECUTION_EVENTS
        + max(
            bound(
                found["parent"]["States"], {"PagesInOrder": pages, "SectionsInOrder": 0, "ChunksInOrder": 0}
            ),
            bound(
                found["parent"]["States"],
                {"PagesInOrder": 0, "SectionsInOrder": sections, "ChunksInOrder": 0},
            ),
            bound(
                found["parent"]["States"], {"PagesInOrder": 0, "SectionsInOrder": 0, "ChunksInOrder": inline}
            ),
        ),
        "section": EXECUTION_EVENTS + bound(found["section"]["States"], {"PagesInOrder": pages}),
        "page": EXECUTION_EVENTS + bound(found["page"]["States"], {"ChunksInOrder": per_page}),
        "sections": sections,
        "pages_per_section": pages,
        "chunks_per_page": per_page,
        "inline_chunks": inline,
        "max_chunks": max_chunks,
    }


@pytest.mark.parametrize("tenant", ["acme", "globex", "initech"])
def test_every_execution_has_a_history_bound_far_below_the_limit_whatever_the_file_size(synthesized, tenant):
    """GIVEN the synthesized definitions of a tenant WHEN the worst case of each execution is
    counted (every retry, every loop at its budget, both paths, the most pages Split lets
    through) THEN the parent's, a section's and a page's history stay below 25,000 events with a
    20 % margin; a file with more chunks is refused by Split, so no file size exceeds it."""
    found = bounds(synthesized.template(f"OrderedIngest-Tenant-{tenant}"))
    for execution in ("parent", "section", "page"):
        assert found[execution] <= LIMIT * (1 - MARGIN), (execution, found)
    assert found["max_chunks"] == found["sections"] * found["pages_per_section"] * found["chunks_per_page"]


def test_the_design_arithmetic_is_at_least_the_recount(synthesized):
    """budgets.py sizes the pages; the recount from the definitions must not exceed its budget."""
    found = bounds(synthesized.template("OrderedIngest-Tenant-acme"))
    assert max(found["page"], found["section"], found["parent"]) <= budgets.HISTORY_EVENT_BUDGET
    assert found["chunks_per_page"] == budgets.max_chunks_per_page(100, 10, 3600)
    assert found["pages_per_section"] == budgets.max_pages_per_section()
    assert found["sections"] == budgets.max_sections()
    assert found["max_chunks"] == budgets.max_file_chunks(found["chunks_per_page"])


def test_a_pages_arithmetic_is_exactly_the_recount(synthesized):
    """GIVEN the synthesized page definition WHEN its bound is recounted for one chunk and for two
    THEN budgets.py's events per chunk and a page's fixed events are exactly the recount: not
    fewer (a page could outgrow its history) and not more (a page would hold fewer chunks than
    its history allows)."""
    page = machines(synthesized.template("OrderedIngest-Tenant-acme"))["page"]
    one, two = (bound(page["States"], {"ChunksInOrder": chunks}) for chunks in (1, 2))
    invocations = budgets.register_invocation_budget(100, 10, 3600)
    assert two - one == budgets.page_events_per_chunk(invocations)
    assert EXECUTION_EVENTS + one - (two - one) == budgets.PAGE_FIXED_EVENTS


def test_fails_when_a_loop_is_not_counted(synthesized):
    """GIVEN the page definition with the invocation count removed WHEN bounded THEN refused:
    the recount does not take a loop for bounded unless the workflow itself bounds it."""
    page = machines(synthesized.template("OrderedIngest-Tenant-acme"))["page"]
    processor = page["States"]["ChunksInOrder"]["ItemProcessor"]["States"]
    processor["RegisterChunk"]["ResultSelector"]["invocation.$"] = "$.Payload.invocation"
    with pytest.raises(AssertionError, match="is not counted"):
        bound(page["States"], {"ChunksInOrder": 1})


def test_fails_when_a_loop_has_no_exit_at_its_budget(synthesized):
    page = machines(synthesized.template("OrderedIngest-Tenant-acme"))["page"]
    choice = page["States"]["ChunksInOrder"]["ItemProcessor"]["States"]["ChunkDone"]
    choice["Choices"] = [c for c in choice["Choices"] if c.get("Variable") != "$.invocation"]
    with pytest.raises(AssertionError, match="has no exit at a budget"):
        bound(page["States"], {"ChunksInOrder": 1})


def test_no_state_input_or_output_holds_a_list_that_grows_with_the_file(synthesized):
    """The payloads are counts, names and ranges; the only lists are the ArrayRanges checked
    above (at most max_pages page starts, at most chunks_per_page chunk indexes)."""
    for payload in (
        contract.SplitResult,
        contract.PageTask,
        contract.ChunkTask,
        contract.ChunkProgress,
        contract.ExecutionInput,
        contract.CloseEvent,
    ):
        annotations = {key: str(value) for key, value in payload.__annotations__.items()}
        assert not [key for key, kind in annotations.items() if "list" in kind], (
            payload.__name__,
            annotations,
        )
    found = machines(synthesized.template("OrderedIngest-Tenant-acme"))
    assert found["parent"]["States"]["PagesInOrder"]["ResultPath"] is None
    assert found["parent"]["States"]["SectionsInOrder"]["ResultPath"] is None
    assert found["section"]["States"]["PagesInOrder"]["ResultPath"] is None
    assert found["page"]["States"]["ChunksInOrder"]["ResultPath"] is None


def test_largest_file_per_chunk_size_at_the_default_sink_settings():
    """What the table of docs/scaling.md, "Largest file", states (sink timeout 10 s, outage budget 1 h)."""
    largest = {
        size: budgets.max_file_chunks(budgets.max_chunks_per_page(size, 10, 3600)) * size
        for size in (1, 100, 250, 870)
    }
    assert largest == {1: 4_669_568, 100: 466_956_800, 250: 1_167_392_000, 870: 4_062_524_160}


def test_ten_million_records_fit_at_the_default_chunk_size_even_with_a_long_outage_budget():
    """GIVEN chunk_size 100 in record mode WHEN the core system's outage budget is the default
    hour, or 6 hours (one chunk per page) THEN a 10M-record file (100,000 chunks) still fits:
    sections multiply what one parent's history holds by about a thousand."""
    for outage in (3600, 6 * 3600):
        per_page = budgets.max_chunks_per_page(100, 10, outage)
        assert per_page >= 1 and budgets.max_file_chunks(per_page) >= 100_000, outage


def test_batch_mode_pages_are_budgeted_by_requests_not_records():
    """GIVEN chunks of 10,000 records sent in batches of 1,000 (10 requests a chunk) WHEN the page
    budget is computed THEN it counts the batch requests: pages hold as many chunks as record mode
    at chunk size 10 does, so a 10M-record file fits; counting records would fit far fewer."""
    assert budgets.register_invocation_budget(10_000, 10, 3600, 1000) == budgets.register_invocation_budget(
        10, 10, 3600
    )
    per_page = budgets.max_chunks_per_page(10_000, 10, 3600, 1000)
    assert per_page >= 1 and budgets.max_file_chunks(per_page) * 10_000 >= 10_000_000
    assert budgets.max_chunks_per_page(10_000, 10, 3600) < per_page


#: The largest chunk synthesis allows at the default sink settings (10 s, an hour's outage budget).
LARGEST_CHUNK = budgets.max_chunk_size(10, 3600)


@pytest.fixture(scope="module")
def with_completion(tmp_path_factory) -> Any:
    """A tenant that waits for the core system's confirmation (`completion.wait`), one that does not,
    and one with the largest chunk the register budget allows."""
    from tests.conftest import synthesize
    from tests.test_completion import TENANTS

    directory = tmp_path_factory.mktemp("completion-bound")
    largest = f"  - id: largest\n    prefix: largest/\n    chunk_size: {LARGEST_CHUNK}\n"
    (directory / "tenants.yaml").write_text(TENANTS + largest, encoding="utf-8")
    return synthesize(directory / "tenants.yaml", directory / "cdk.out")


def test_the_largest_chunk_allowed_fits_one_page_with_a_whole_outage(with_completion):
    """GIVEN a tenant at the largest chunk_size the register budget allows (57,159 records at 10 s:
    657 invocations at the slowest answer) WHEN its definitions are recounted THEN a page holds one
    such chunk, every retry, continuation and a whole outage counted, within the history budget."""
    found = bounds(with_completion.template("OrderedIngest-Tenant-largest"))
    assert LARGEST_CHUNK == 57_159
    assert found["chunks_per_page"] == 1
    assert max(found["page"], found["section"], found["parent"]) <= budgets.HISTORY_EVENT_BUDGET
    assert found["page"] > 0.99 * budgets.HISTORY_EVENT_BUDGET  # the budget is used, not a smaller one


def test_the_completion_wait_is_counted_and_the_bound_holds(with_completion):
    """GIVEN a tenant with completion.wait WHEN its parent is recounted THEN the callback task
    (entered once: no Retry, no loop) and its states add at most what budgets.py reserves for
    them (PARENT_COMPLETION_EVENTS, in every tenant's page sizing), and every bound holds."""
    waits = bounds(with_completion.template("OrderedIngest-Tenant-waits"))
    plain = bounds(with_completion.template("OrderedIngest-Tenant-plain"))

    assert 0 < waits["parent"] - plain["parent"] <= budgets.PARENT_COMPLETION_EVENTS
    assert max(waits["page"], waits["section"], waits["parent"]) <= budgets.HISTORY_EVENT_BUDGET
    assert (waits["sections"], waits["pages_per_section"]) == (plain["sections"], plain["pages_per_section"])
