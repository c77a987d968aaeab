"""The completion callback end to end on the local runtime: confirm, reject, time out.

Each tenant waits for the core system's confirmation after its last chunk (`completion.wait`).
The test plays the core system: it invokes the tenant's completion entry point through moto's
Lambda API (the real handler runs in its worker process), naming the file, never the token.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from lambdas import contract
from local_runtime import LocalPipeline
from ops.cli import EXIT_OK
from tests.e2e.pipeline_checks import (
    assert_files_in_order,
    assert_no_overlap,
    assert_records_in_file_order,
    csv_file,
    first_sends,
    halted,
    ops,
    status,
    wait_for,
)

CALLERS = ["arn:aws:iam::111111111111:role/core-system"]


def completion(timeout_seconds: int) -> dict[str, Any]:
    return {"wait": True, "timeout_seconds": timeout_seconds, "callers": CALLERS}


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline(
        [
            # 3,600 s is 108 s at the tests' time scale: long enough to answer, never reached.
            {"id": "confirms", "completion": completion(3600)},
            {"id": "rejects", "completion": completion(3600)},
            # 200 s is 6 s at the tests' time scale: after the resume, the test has that long to see
            # each file wait and confirm it (a few Lambda invokes, slow on a busy machine).
            {"id": "times-out", "completion": completion(200)},
        ],
        chunk_size=3,
    )


def core_system(pipe: LocalPipeline, tenant: str, action: str, **fields: str) -> dict[str, Any]:
    """The core system's call: Lambda Invoke of the tenant's completion entry point. A call the
    function timed out on is made again, as a core system retries a failed Invoke: the function's
    10 s are 1 s at this time scale, which a starved machine can take. The answer then has
    `"retried": True` (see `answered`)."""
    for attempt in range(3):
        response = pipe.client("lambda").invoke(
            FunctionName=f"{tenant}-completion",
            Payload=json.dumps({"action": action, "tenant": tenant, **fields}).encode(),
        )
        payload = json.loads(response["Payload"].read())
        if "FunctionError" not in response:
            return {**payload, "retried": True} if attempt else payload
        assert payload["errorType"] == "Sandbox.Timedout", payload
    raise AssertionError(f"the completion function timed out on every try: {payload}")


def answered(answer: dict[str, Any], file_id: str, outcome: str) -> bool:
    """``answer`` says the file was confirmed or rejected (``outcome``); for a call made again
    after a timeout, by this call or by the first try, which had gone through already (404 or
    409: no longer the current file, or already answered)."""
    if answer.get("retried") and answer["status"] in (404, 409):
        return True
    return {k: v for k, v in answer.items() if k != "retried"} == {
        "status": 200,
        "message": f"file {file_id} {outcome}",
    }


def waiting_file(pipe: LocalPipeline, tenant: str, key: str) -> str:
    """Poll `waiting` until the file with `key` waits for an answer; its id."""

    def asked() -> str | None:
        answer = core_system(pipe, tenant, "waiting")
        return answer["file"]["file"] if answer["status"] == 200 and answer["file"]["key"] == key else None

    return wait_for(asked, timeout=60, what=f"{key} to wait for the core system", interval=0.2)


def position_item(pipe: LocalPipeline, tenant: str) -> dict[str, Any]:
    variables = pipe.client("lambda").get_function_configuration(FunctionName=f"{tenant}-completion")
    table = variables["Environment"]["Variables"]["LEDGER_TABLE_NAME"]
    key = {"tenant": {"S": tenant}, "entry": {"S": "position"}}
    return pipe.client("dynamodb").get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]


def test_confirm_ingests_the_file_and_the_next_file_starts(pipe: LocalPipeline) -> None:
    """GIVEN two files of a tenant that waits for completion WHEN the first has sent every
    record THEN it waits and the second has not started; WHEN the core system confirms it THEN
    it succeeds and the second starts; confirmed too, both succeed in order, every record once."""
    uploads = [pipe.put_file("confirms", f"{name}.csv", csv_file(name, 4)) for name in ("a", "b")]

    first = waiting_file(pipe, "confirms", uploads[0][0])
    assert len(pipe.sink("confirms").accepted) == 4  # every record of a was acknowledged first
    assert [e["status"] for e in pipe.executions("confirms")] == ["RUNNING"]  # b waits behind a
    assert answered(core_system(pipe, "confirms", "confirm", file=first), first, "confirmed")

    second = waiting_file(pipe, "confirms", uploads[1][0])
    assert answered(core_system(pipe, "confirms", "confirm", file=second), second, "confirmed")
    pipe.wait_until_idle(timeout=60, tenants=["confirms"])

    executions = pipe.executions("confirms")
    assert [e["status"] for e in executions] == ["SUCCEEDED", "SUCCEEDED"]
    assert_no_overlap(executions)
    assert_files_in_order(executions, [key for key, _ in uploads])
    assert_records_in_file_order(pipe.sink("confirms").accepted, [("a", 4), ("b", 4)])
    # A late second answer about the first file is refused: it is no longer the current file.
    assert core_system(pipe, "confirms", "reject", file=first, reason="late")["status"] == 404


def test_reject_fails_the_file_with_the_reason_and_halts_the_tenant(pipe: LocalPipeline) -> None:
    """GIVEN a waiting file and a second one behind it WHEN the core system rejects the first
    with a reason THEN the file fails with CompletionRejected, the ledger keeps the reason, the
    tenant halts (on_failure: halt) and the second file does not start."""
    uploads = [pipe.put_file("rejects", f"{name}.csv", csv_file(name, 4)) for name in ("a", "b")]
    first = waiting_file(pipe, "rejects", uploads[0][0])

    answer = core_system(pipe, "rejects", "reject", file=first, reason="record count 4, expected 5")

    assert answered(answer, first, "rejected"), answer
    wait_for(lambda: halted(pipe, "rejects"), timeout=60, what="the tenant to halt")
    assert status(pipe, "rejects")["last_failure"]["error"] == contract.COMPLETION_REJECTED_ERROR
    if not answer.get("retried"):  # a try killed after Step Functions took it has not recorded it
        assert position_item(pipe, "rejects")["completion_reason"] == {"S": "record count 4, expected 5"}
    assert [e["key"] for e in pipe.executions("rejects")] == [uploads[0][0]]


def test_a_completion_that_times_out_halts_and_resume_waits_for_it_again(pipe: LocalPipeline) -> None:
    """GIVEN a file the core system never answers WHEN its completion timeout passes THEN it
    fails with CompletionTimedOut and the tenant halts, the next file queued; WHEN the operator
    resumes it THEN nothing is sent again, the file waits for the confirmation again, and once
    confirmed the next file follows."""
    # a: 6 records, two whole chunks: the resumed attempt has no chunk left to send
    # (ResumedAfterLastRecord); b: 4 records.
    uploads = [
        pipe.put_file("times-out", f"{name}.csv", csv_file(name, count))
        for name, count in (("a", 6), ("b", 4))
    ]

    wait_for(lambda: halted(pipe, "times-out"), timeout=60, what="the completion to time out")
    assert status(pipe, "times-out")["last_failure"]["error"] == contract.COMPLETION_TIMED_OUT_ERROR
    assert [e["key"] for e in pipe.executions("times-out")] == [uploads[0][0]]
    sent = len(pipe.sink("times-out").requests)

    code, out = ops(pipe, "resume", "times-out")
    assert code == EXIT_OK, out
    first = waiting_file(pipe, "times-out", uploads[0][0])
    assert answered(core_system(pipe, "times-out", "confirm", file=first), first, "confirmed")
    second = waiting_file(pipe, "times-out", uploads[1][0])
    assert answered(core_system(pipe, "times-out", "confirm", file=second), second, "confirmed")
    pipe.wait_until_idle(timeout=60, tenants=["times-out"])

    assert [e["status"] for e in pipe.executions("times-out")] == ["FAILED", "SUCCEEDED", "SUCCEEDED"]
    # The resumed attempt sent nothing of a again: its records were all acknowledged.
    assert [r.body["file"] for r in first_sends(pipe.sink("times-out").requests[sent:])] == ["b"] * 4
