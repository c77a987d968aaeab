"""The local run follows the constructs: change the workflow, and the guarantee checks fail.

The runtime deploys the state machine definition from the synthesized template, so building
the app with the workflow's Maps at MaxConcurrency 2 must show up as chunks overlapping at
the core system, caught by the same checks that pass on the real construct (G1 tests).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from local_runtime import LocalPipeline
from pipeline_constructs import workflow
from tests.e2e.pipeline_checks import assert_records_in_file_order, assert_requests_in_order, csv_file


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> Iterator[LocalPipeline]:
    """The app built with every Map of the workflow at MaxConcurrency 2 (synthesis happens here)."""
    original = workflow._in_order

    def in_order_two_at_a_time(**kwargs):
        return {**original(**kwargs), "MaxConcurrency": 2}

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(workflow, "_in_order", in_order_two_at_a_time)
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
    """GIVEN the changed workflow and a slow core system
    WHEN a file of 8 chunks is processed
    THEN two chunks were sent at the same time and the G1 record-order checks fail."""
    # 0.6 s per chunk (the most the scaled sink timeout allows), 8 chunks: even when the second
    # register environment's start (slow on a busy machine) outlasts the first pair, later pairs
    # overlap.
    sink = pipe.sink("acme").latency(0.2)
    pipe.put_file("acme", "f.csv", csv_file("f", 24))

    pipe.wait_until_idle(timeout=60, tenants=["acme"])

    assert sink.max_in_flight == 2
    # Two chunks at once: records arrive out of order, or some never arrive (seen once with two
    # burners: "2 records missing"); either way the G1 check catches the broken workflow.
    with pytest.raises(AssertionError, match="out of order|missing"):
        assert_records_in_file_order(sink.accepted, [("f", 24)])
    with pytest.raises(AssertionError, match="was sent before"):
        assert_requests_in_order(sink.requests)
