"""`duplicate_files` on the local runtime: a byte-identical re-upload of a processed file is
recorded as a duplicate and sent nowhere with `skip`, and processed again with `process`."""

from __future__ import annotations

import pytest

from local_runtime import LocalPipeline
from tests.e2e.pipeline_checks import assert_no_overlap, assert_records_in_file_order, csv_file, status


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline([{"id": "skips", "duplicate_files": "skip"}, {"id": "sends"}], chunk_size=3)


def test_with_skip_the_same_bytes_are_delivered_once_and_the_copies_recorded_as_duplicates(
    pipe: LocalPipeline,
) -> None:
    """GIVEN duplicate_files: skip WHEN the same bytes arrive as a.csv, then as b.csv, then as
    a.csv again (a new version), with a different file between
    THEN the core system gets a.csv's records and the different file's, once each; both copies
    succeed with nothing sent, and `ops status` shows them as duplicates of a.csv's version."""
    content = csv_file("a", 5)
    a_key, a_version = pipe.put_file("skips", "a.csv", content)
    pipe.put_file("skips", "c.csv", csv_file("c", 4))
    b_key, b_version = pipe.put_file("skips", "b.csv", content)
    _, a2_version = pipe.put_file("skips", "a.csv", content)
    pipe.wait_until_idle(timeout=120, tenants=["skips"])

    assert_records_in_file_order(pipe.sink("skips").accepted, [("a", 5), ("c", 4)])
    executions = pipe.executions("skips")
    assert [e["status"] for e in executions] == ["SUCCEEDED"] * 4
    assert_no_overlap(executions)
    duplicates = status(pipe, "skips")["duplicates_24h"]
    assert sorted((d["key"], d["version_id"]) for d in duplicates) == sorted(
        [(b_key, b_version), (a_key, a2_version)]
    )
    assert {(d["duplicate_of"]["key"], d["duplicate_of"]["version_id"]) for d in duplicates} == {
        (a_key, a_version)
    }


def test_with_process_the_same_bytes_are_delivered_again(pipe: LocalPipeline) -> None:
    """GIVEN duplicate_files: process (the default) WHEN the same bytes arrive under two keys
    THEN the core system gets them twice, in upload order, and nothing is a duplicate."""
    content = csv_file("a", 5)
    pipe.put_file("sends", "a.csv", content)
    pipe.put_file("sends", "b.csv", content)
    pipe.wait_until_idle(timeout=120, tenants=["sends"])

    assert pipe.sink("sends").accepted == [{"file": "a", "seq": str(i)} for i in range(5)] * 2
    assert status(pipe, "sends")["duplicates_24h"] == []
