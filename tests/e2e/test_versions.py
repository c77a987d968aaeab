"""Versions, the `live` alias and a rollback, on the local runtime (moto runs the version the
alias points at; docs/operations.md, "Versions, aliases and rollback")."""

from __future__ import annotations

import json

import pytest

from local_runtime import LocalPipeline
from ops.cli import EXIT_OK
from tests.e2e.pipeline_checks import assert_records_in_file_order, csv_file, halted, ops, wait_for


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline(
        [
            {"id": "pinned", "chunks_per_page": 1},  # 2 chunks -> 2 page executions
            {"id": "rollback"},
        ],
        chunk_size=3,
    )


def _alias_arn(pipe: LocalPipeline, tenant: str) -> str:
    return f"{pipe.tenants[tenant].state_machine_arn}:live"


def _machine_arn(pipe: LocalPipeline, name: str) -> str:
    sfn = pipe.client("stepfunctions")
    return next(m["stateMachineArn"] for m in sfn.list_state_machines()["stateMachines"] if m["name"] == name)


def test_files_start_through_the_alias_and_their_pages_run_on_the_pinned_page_version(
    pipe: LocalPipeline,
) -> None:
    """GIVEN a deployed tenant (version 1 of its three state machines, `live` on the file's)
    WHEN a file of two pages arrives THEN its execution was started through `live` on version 1,
    is listed and named under the state machine itself, and its pages ran on page version 1."""
    sfn = pipe.client("stepfunctions")
    alias = sfn.describe_state_machine_alias(stateMachineAliasArn=_alias_arn(pipe, "pinned"))
    machine = pipe.tenants["pinned"].state_machine_arn
    assert alias["routingConfiguration"] == [{"stateMachineVersionArn": f"{machine}:1", "weight": 100}]

    pipe.put_file("pinned", "a.csv", csv_file("a", 6))
    pipe.wait_until_idle(timeout=60, tenants=["pinned"])

    (execution,) = pipe.executions("pinned")  # ListExecutions on the unqualified ARN lists it
    assert execution["status"] == "SUCCEEDED"
    assert (
        execution["executionArn"]
        == machine.replace(":stateMachine:", ":execution:") + f":{execution['name']}"
    )
    assert (execution["stateMachineAliasArn"], execution["stateMachineVersionArn"]) == (
        f"{machine}:live",
        f"{machine}:1",
    )
    page_machine = _machine_arn(pipe, "pinned-file-ingest-page")
    pages = sfn.list_executions(stateMachineArn=page_machine)["executions"]
    assert len(pages) == 2
    for page in pages:
        described = sfn.describe_execution(executionArn=page["executionArn"])
        assert described["stateMachineVersionArn"] == f"{page_machine}:1"
        assert "stateMachineAliasArn" not in described  # started by version, as the parent names it
    assert_records_in_file_order(pipe.sink("pinned").accepted, [("a", 6)])


def test_a_bad_deploy_is_rolled_back_by_pointing_the_alias_at_the_previous_version(
    pipe: LocalPipeline,
) -> None:
    """GIVEN version 2 of the file workflow, broken (it fails every file), and `live` moved to it
    WHEN a file arrives THEN it fails on version 2 and the tenant halts; WHEN the operator points
    `live` back at version 1 (update-state-machine-alias) and runs `ops resume` THEN the resumed
    execution starts through `live` on version 1 and the file is registered, once, in order."""
    sfn = pipe.client("stepfunctions")
    machine, alias = pipe.tenants["rollback"].state_machine_arn, _alias_arn(pipe, "rollback")
    good = json.loads(sfn.describe_state_machine(stateMachineArn=f"{machine}:1")["definition"])
    # fails every file through the workflow's own failure path (the closer records it and halts)
    failing = {
        "Type": "Pass",
        "Result": {"Error": "BrokenDeploy", "Cause": "version 2 fails every file"},
        "ResultPath": "$.error",
        "Next": "RecordFailure",
    }
    broken = {**good, "StartAt": "BrokenDeploy", "States": {**good["States"], "BrokenDeploy": failing}}
    published = sfn.update_state_machine(stateMachineArn=machine, definition=json.dumps(broken), publish=True)
    assert published["stateMachineVersionArn"] == f"{machine}:2"
    sfn.update_state_machine_alias(
        stateMachineAliasArn=alias,
        routingConfiguration=[{"stateMachineVersionArn": f"{machine}:2", "weight": 100}],
    )

    pipe.put_file("rollback", "b.csv", csv_file("b", 5))
    wait_for(lambda: halted(pipe, "rollback"), timeout=60, what="the tenant to halt on the broken version")
    (failed,) = pipe.executions("rollback")
    assert (failed["status"], failed["error"], failed["stateMachineVersionArn"]) == (
        "FAILED",
        "BrokenDeploy",
        f"{machine}:2",
    )
    assert pipe.sink("rollback").accepted == []

    # the rollback: the same call as `aws stepfunctions update-state-machine-alias` in docs/operations.md
    sfn.update_state_machine_alias(
        stateMachineAliasArn=alias,
        routingConfiguration=[{"stateMachineVersionArn": f"{machine}:1", "weight": 100}],
    )
    code, out = ops(pipe, "resume", "rollback")
    assert code == EXIT_OK, out
    pipe.wait_until_idle(timeout=60, tenants=["rollback"])

    failed, resumed = pipe.executions("rollback")
    assert resumed["status"] == "SUCCEEDED" and resumed["name"] == f"{failed['name']}-r1"
    assert (resumed["stateMachineAliasArn"], resumed["stateMachineVersionArn"]) == (alias, f"{machine}:1")
    assert_records_in_file_order(pipe.sink("rollback").accepted, [("b", 5)])
