"""Keys never depend on settings that can change: a file halted part-way resumes after its
tenant's `chunk_size` and `sink.batch_size` changed and after its chunk index expired, and no
record the core system acknowledged is sent again under another key (docs/design.md 1, "What the core system must do")."""

from __future__ import annotations

import pytest

from lambdas import contract
from local_runtime import LocalPipeline
from ops.cli import EXIT_OK
from tests.e2e.pipeline_checks import (
    assert_no_duplicates,
    assert_one_key_per_record,
    assert_records_in_file_order,
    csv_file,
    halted,
    ops,
    wait_for,
)


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline([{"id": "records"}, {"id": "batches", "sink": {"batch_size": 4}}], chunk_size=8)


def set_environment(pipe: LocalPipeline, tenant: str, kind: str, **changes: str) -> None:
    """Deploy a changed setting: the function's environment, as `cdk deploy` would change it."""
    lambda_ = pipe.client("lambda")
    name = pipe.tenants[tenant].functions[kind]
    variables = lambda_.get_function_configuration(FunctionName=name)["Environment"]["Variables"]
    lambda_.update_function_configuration(
        FunctionName=name, Environment={"Variables": {**variables, **changes}}
    )


@pytest.mark.parametrize(("tenant", "new_batch_size"), [("records", "1"), ("batches", "3")])
def test_a_resume_after_the_settings_changed_sends_no_acknowledged_record_under_a_new_key(
    pipe: LocalPipeline, tenant: str, new_batch_size: str
) -> None:
    """GIVEN a file whose register crashes on every attempt right after the core system
    acknowledged its first request (so the ledger never heard of it) and the tenant halted
    WHEN chunk_size (8 -> 6) and sink.batch_size change, the file's chunk index expires, and the
    operator resumes THEN the file completes with every record registered once, and every
    record that was sent again went under the key it had."""
    sink = pipe.sink(tenant)
    pipe.faults.kill(tenant, "register", after="sink", count=1, times=100)
    pipe.put_file(tenant, "f.csv", csv_file("f", 20))
    wait_for(lambda: halted(pipe, tenant), timeout=120, what="the tenant to halt")
    pipe.faults.clear()
    assert [r for r in sink.requests if r.registered], "the core system acknowledged records before the halt"

    set_environment(pipe, tenant, "split", CHUNK_SIZE="6")
    set_environment(pipe, tenant, "register", SINK_BATCH_SIZE=new_batch_size)
    s3 = pipe.client("s3")
    work = pipe.deployment.stacks["OrderedIngest-Shared"].outputs["WorkBucketName"]
    expired = s3.list_objects_v2(Bucket=work, Prefix=contract.work_prefix(tenant)).get("Contents", [])
    assert expired, "the file's chunk index and manifest"
    for item in expired:
        s3.delete_object(Bucket=work, Key=item["Key"])

    code, out = ops(pipe, "resume", tenant)
    assert code == EXIT_OK, out
    pipe.wait_until_idle(timeout=120, tenants=[tenant])

    assert pipe.executions(tenant)[-1]["status"] == "SUCCEEDED"
    assert_one_key_per_record(sink.requests)
    assert_no_duplicates(sink.accepted)
    assert_records_in_file_order(sink.accepted, [("f", 20)])
