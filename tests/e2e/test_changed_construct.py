"""The local run follows the constructs: change the workflow, and the guarantee checks fail.

The runtime deploys the state machine definition from the synthesized template, so building
the app with the workflow's Maps at MaxConcurrency 2 must show up as a chunk sent while
the one before it waits, caught by the same checks that pass on the real construct (G1 tests).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from local_runtime import LocalPipeline
from pipeline_constructs import definitions
from tests.e2e.pipeline_checks import (
    assert_records_in_file_order,
    assert_requests_in_order,
    csv_file,
    hold_at,
    wait_for,
)


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> Iterator[LocalPipeline]:
    """The app built with every Map of the workflow at MaxConcurrency 2 (synthesis happens here)."""
    original = definitions._in_order

    def in_order_two_at_a_time(**kwargs):
        return {**original(**kwargs), "MaxConcurrency": 2}

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(definitions, "_in_order", in_order_two_at_a_time)
        pipe = start_pipeline([{"id": "acme"}], chunk_size=3)
    yield pipe


def test_the_deployed_definition_is_the_changed_one(pipe: LocalPipeline) -> None:
    """GIVEN the app synthesized with the changed Map
    THEN the state machine running on moto has MaxConcurrency 2 (taken from the template)."""
    definition = json.loads(
        pipe.client("stepfunctions").describe_state_machine(
            stateMachineArn=pipe.tenants["acme"].state_machine_arn
        )["definition"]
    )
    assert definition["States"]["PagesInOrder"]["MaxConcurrency"] == 2  # and the page machine's ChunksInOrder


def test_map_concurrency_two_breaks_record_order_and_the_checks_catch_it(pipe: LocalPipeline) -> None:
    """GIVEN the changed workflow and a core system that holds the file's first record
    WHEN a file of 8 chunks is processed
    THEN the second chunk is sent while the first waits, and the G1 record-order checks fail."""
    sink = hold_at(pipe, "acme", "f", 0)  # chunk 0 waits at its first record until clear_faults()
    pipe.put_file("acme", "f.csv", csv_file("f", 24))

    # One chunk at a time (the real construct) never sends record 3 while record 0 waits: the
    # wait would time out. Two at a time sends it whatever the machine's speed.
    wait_for(
        lambda: {"file": "f", "seq": "3"} in sink.accepted,
        timeout=60,
        what="chunk 1's first record registered while chunk 0 waits",
    )
    sink.clear_faults()
    pipe.wait_until_idle(timeout=60, tenants=["acme"])

    # Two chunks at once: records arrive out of order, or some never arrive (chunk 1's progress
    # moved the file past chunk 0 before it was sent); either way the G1 check catches it.
    with pytest.raises(AssertionError, match="out of order|missing"):
        assert_records_in_file_order(sink.accepted, [("f", 24)])
    with pytest.raises(AssertionError, match="was sent before"):
        assert_requests_in_order(sink.requests)
