"""Record content reaches the core system and nothing else (docs/security.md, "What never
leaves the account"): not the functions' logs, not any execution's history, not the ledger,
not the work bucket, not the notifications; on the success path and on every failure path
that carries a message (a rejected record, a malformed line)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from local_runtime import LocalPipeline
from tests.e2e.pipeline_checks import wait_for

#: A value only the records hold: wherever it shows up, a record leaked.
CANARY = "canary-5e1f-record-content"


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline([{"id": "leaks", "on_failure": "continue", "chunks_per_page": 2}], chunk_size=3)


def canary_file(name: str, records: int) -> bytes:
    return ("file,secret\n" + "".join(f"{name},{CANARY}-{name}-{i}\n" for i in range(records))).encode()


def _histories(pipe: LocalPipeline, tenant: str) -> dict[str, str]:
    """Every event of every execution of the tenant's state machines (file, section, page), by
    state machine name."""
    sfn = pipe.client("stepfunctions")
    prefix = pipe.tenants[tenant].state_machine_arn.rsplit(":", 1)[0] + ":" + tenant + "-"
    texts: dict[str, str] = {}
    for machine in sfn.list_state_machines()["stateMachines"]:
        if not machine["stateMachineArn"].startswith(prefix):
            continue
        for execution in sfn.list_executions(stateMachineArn=machine["stateMachineArn"])["executions"]:
            events = sfn.get_execution_history(executionArn=execution["executionArn"], maxResults=1000)[
                "events"
            ]
            texts[machine["name"]] = texts.get(machine["name"], "") + json.dumps(events, default=str)
    return texts


def _ledger_text(pipe: LocalPipeline) -> str:
    table = pipe.deployment.stacks["OrderedIngest-Shared"].outputs["LedgerTableName"]
    return json.dumps(pipe.client("dynamodb").scan(TableName=table)["Items"])


def _work_bucket_bytes(pipe: LocalPipeline) -> list[tuple[str, bytes]]:
    s3 = pipe.client("s3")
    bucket = pipe.deployment.stacks["OrderedIngest-Shared"].outputs["WorkBucketName"]
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        for o in page.get("Contents", [])
    ]
    return [(key, s3.get_object(Bucket=bucket, Key=key)["Body"].read()) for key in keys]


def test_records_reach_the_core_system_and_nothing_else_holds_them(pipe: LocalPipeline) -> None:
    """GIVEN three files whose every record holds a canary value: one that succeeds (3 chunks:
    two page executions), one whose record 4 the core system rejects (a fatal 400; 2 chunks,
    run in the file's own execution), one whose line 3 is malformed (and holds the canary too)
    WHEN they are processed THEN the core system received the canary values of the records it
    was sent, and no function log line, no execution history event (file and page executions),
    no ledger item, no object of the work bucket (chunk indexes, manifests) and no notification
    holds any part of it."""
    sink = pipe.sink("leaks").reject(
        on_record={"file": "rejected", "secret": f"{CANARY}-rejected-4"}, status=400
    )
    pipe.put_file("leaks", "good.csv", canary_file("good", 7))
    pipe.put_file("leaks", "rejected.csv", canary_file("rejected", 5))
    pipe.put_file("leaks", "malformed.csv", f"file,secret\nm,{CANARY}-m-0\nm,{CANARY}-m-1,extra\n".encode())

    wait_for(lambda: len(pipe.executions("leaks")) == 3, timeout=60, what="three executions")
    pipe.wait_until_idle(timeout=60, tenants=["leaks"])

    executions = pipe.executions("leaks")
    assert [e["status"] for e in executions] == ["SUCCEEDED", "FAILED", "FAILED"]
    assert executions[1]["error"] == "SinkRejectedError"  # the chunk ran in the file's execution
    assert executions[2]["error"] == "MalformedFileError"
    sent = json.dumps([request.body for request in sink.requests])
    assert (
        f"{CANARY}-good-6" in sent and f"{CANARY}-rejected-4" in sent
    )  # the canary is visible where it belongs

    places: dict[str, Any] = {
        f"log of {function}": pipe.logs(function) for function in pipe.tenants["leaks"].functions.values()
    }
    histories = _histories(pipe, "leaks")
    places.update({f"history of {machine}": text for machine, text in histories.items()})
    places["ledger"] = _ledger_text(pipe)
    places["notifications"] = json.dumps([(n.subject, n.message) for n in pipe.notifications])
    for key, body in _work_bucket_bytes(pipe):
        places[f"work bucket {key}"] = body.decode("latin-1")

    # the places were looked at where the failures are told: the rejection in the file's history
    # and the register log, the malformed line in the split log; the good file's pages ran
    functions = pipe.tenants["leaks"].functions
    assert "SinkRejectedError" in histories["leaks-file-ingest-workflow"]
    assert "RegisterChunk" in histories["leaks-file-ingest-page"]
    assert "SinkRejectedError" in places[f"log of {functions['register']}"]
    assert "line 3" in places[f"log of {functions['split']}"]
    assert any(key.startswith("work bucket chunks/leaks/") for key in places)
    leaked = sorted(where for where, text in places.items() if CANARY in text)
    assert leaked == []
