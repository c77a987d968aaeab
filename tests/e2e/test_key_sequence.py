"""`ordering: key_sequence` on the local runtime: files go by the sequence number in their keys,
whatever order their events arrive in; a missing number holds the later files, raises the
gap metric and shows in `ops status`, until the file comes or `ops skip-gap` gives it up."""

from __future__ import annotations

import json

import pytest

from lambdas import contract
from local_runtime import LocalPipeline
from ops.cli import EXIT_OK
from tests.e2e.pipeline_checks import (
    assert_no_overlap,
    assert_records_in_file_order,
    csv_file,
    emf_values,
    ops,
    wait_for,
)

TENANT = "seqco"
RECORDS = 4


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline(
        [{"id": TENANT, "ordering": {"by": "key_sequence", "sequence_pattern": r"(?P<seq>\d+)\.csv$"}}],
        chunk_size=3,
    )


def upload(pipe: LocalPipeline, number: int) -> str:
    key, _ = pipe.put_file(TENANT, f"batch-{number:04d}.csv", csv_file(f"b{number}", RECORDS))
    return key


def waited(pipe: LocalPipeline, key: str) -> bool:
    """The controller has kept the message of `key` waiting at least once."""
    return any(
        d.outcome == "kept" and json.loads(d.body)["detail"]["object"]["key"] == key
        for d in pipe.deliveries(TENANT)
    )


def started_keys(pipe: LocalPipeline) -> list[str]:
    return [e["key"] for e in pipe.executions(TENANT)]  # oldest first


def test_files_whose_events_arrive_out_of_order_are_processed_by_their_sequence_numbers(
    pipe: LocalPipeline,
) -> None:
    """GIVEN a tenant ordered by key sequence WHEN files 3, 1 and 2 are uploaded in that order
    THEN they are processed 1, 2, 3, one at a time, their records in that order at the core system."""
    keys = {number: upload(pipe, number) for number in (3, 1, 2)}

    pipe.wait_until_idle(timeout=120, tenants=[TENANT])

    executions = pipe.executions(TENANT)
    assert [e["status"] for e in executions] == ["SUCCEEDED"] * 3
    assert started_keys(pipe) == [keys[1], keys[2], keys[3]]
    assert_no_overlap(executions)
    assert_records_in_file_order(pipe.sink(TENANT).accepted, [(f"b{n}", RECORDS) for n in (1, 2, 3)])
    assert waited(pipe, keys[3]), "file 3 should have waited for 1 and 2"


def test_a_missing_number_holds_the_later_file_until_it_arrives(pipe: LocalPipeline) -> None:
    """GIVEN files 1-3 done WHEN file 5 arrives without 4 THEN 5 waits, the gap metric is
    published and `ops status` names the missing number; WHEN 4 arrives THEN 4 then 5 run."""
    gaps_before = len(emf_values(pipe, TENANT, "controller", contract.SEQUENCE_GAP_METRIC))
    five = upload(pipe, 5)
    wait_for(lambda: waited(pipe, five), timeout=60, what="file 5 to wait for file 4")

    assert five not in started_keys(pipe)
    # What the sequence-gap alarm watches, published by the controller for this tenant.
    assert len(emf_values(pipe, TENANT, "controller", contract.SEQUENCE_GAP_METRIC)) > gaps_before
    code, out = ops(pipe, "status", TENANT)
    assert code == EXIT_OK
    assert f"{TENANT} waits for sequence number 4; files waiting: 5" in out

    four = upload(pipe, 4)
    pipe.wait_until_idle(timeout=120, tenants=[TENANT])

    assert started_keys(pipe)[-2:] == [four, five]
    assert [e["status"] for e in pipe.executions(TENANT)] == ["SUCCEEDED"] * 5
    assert_records_in_file_order(pipe.sink(TENANT).accepted, [(f"b{n}", RECORDS) for n in (1, 2, 3, 4, 5)])


def test_skip_gap_gives_up_a_number_that_never_comes(pipe: LocalPipeline) -> None:
    """GIVEN file 7 waiting for 6, which never comes WHEN the operator runs `ops skip-gap`
    THEN 7 is processed and the tenant's history records the given-up number with the reason."""
    seven = upload(pipe, 7)
    wait_for(lambda: waited(pipe, seven), timeout=60, what="file 7 to wait for file 6")

    code, out = ops(pipe, "skip-gap", TENANT, "--reason", "file 6 was never produced")

    assert code == EXIT_OK, out
    assert "gave up sequence number(s) 6" in out
    pipe.wait_until_idle(timeout=120, tenants=[TENANT])
    assert started_keys(pipe)[-1] == seven
    assert pipe.sink(TENANT).accepted[-RECORDS:] == [{"file": "b7", "seq": str(i)} for i in range(RECORDS)]
    code, out = ops(pipe, "status", TENANT, "--json")
    assert json.loads(out)[0]["sequence"] == {"next": 8, "waiting": [], "gap": False}
