"""Intake on the local runtime: files with odd names, and a poison message in the queue.

moto's S3 events carry keys URL-encoded as S3 writes them (local_runtime/moto_server.py), so a
controller that forgot to decode them would fail Split with NoSuchKey here as on AWS.
"""

from __future__ import annotations

import io
import json

import pytest

from lambdas import contract
from local_runtime import LocalPipeline
from ops.cli import EXIT_OK
from ops.cli import main as ops
from tests.e2e.pipeline_checks import (
    assert_files_in_order,
    assert_no_overlap,
    assert_records_in_file_order,
    csv_file,
    emf_values,
)

ODD_NAMES = [
    "red flower.csv",
    "c++ notes.csv",
    "year=2024.csv",
    "100% done.csv",
    "Köln € 日本.csv",
    "deep/er/folder name.csv",
]


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline([{"id": "keys"}, {"id": "poison"}], chunk_size=3)


def test_files_named_with_characters_s3_encodes_are_ingested_in_upload_order(pipe: LocalPipeline) -> None:
    """GIVEN files named with a space, '+', '=', '%', non-ASCII characters and nested folders
    WHEN they are uploaded in order (S3 URL-encodes each key in its event)
    THEN each is ingested under its real key, in upload order, with all its records."""
    uploads = [pipe.put_file("keys", name, csv_file(f"f{i}", 4)) for i, name in enumerate(ODD_NAMES)]

    pipe.wait_until_idle(timeout=90, tenants=["keys"])

    executions = pipe.executions("keys")
    assert [(e["key"], e["status"]) for e in executions] == [(key, "SUCCEEDED") for key, _ in uploads]
    assert [key for key, _ in uploads][1] == "keys/c++ notes.csv"
    assert_no_overlap(executions)
    assert_files_in_order(executions, [key for key, _ in uploads])
    assert_records_in_file_order(pipe.sink("keys").accepted, [(f"f{i}", 4) for i in range(len(ODD_NAMES))])


def test_a_poison_message_between_two_files_is_quarantined_and_the_files_go_on(pipe: LocalPipeline) -> None:
    """GIVEN a good file, then a hand-sent message that is not a file event, then a good file, in
    the tenant's queue
    WHEN they are processed
    THEN both files are ingested in order, the message is deleted from the queue and kept in the
    work bucket's quarantine with its reason, and `ops quarantine list` shows it (not its body)."""
    first = pipe.put_file("poison", "first.csv", csv_file("first", 4))
    poison_id = pipe.send_to_queue("poison", "TOPSECRET: not a file event")
    second = pipe.put_file("poison", "second.csv", csv_file("second", 5))

    pipe.wait_until_idle(timeout=90, tenants=["poison"])

    executions = pipe.executions("poison")
    assert [(e["key"], e["status"]) for e in executions] == [
        (first[0], "SUCCEEDED"),
        (second[0], "SUCCEEDED"),
    ]
    assert_files_in_order(executions, [first[0], second[0]])
    assert_records_in_file_order(pipe.sink("poison").accepted, [("first", 4), ("second", 5)])
    *starved, last = [d for d in pipe.deliveries("poison") if d.message_id == poison_id]
    assert last.outcome == "deleted"
    # On a starved machine the controller can outlive its scaled timeout (20 s x 0.03 = 1 s) and
    # Lambda times it out: the message comes back, as on AWS, and is quarantined again under the
    # same key. Any other failure is a bug.
    assert all((d.outcome, d.error_type) == ("failed", "Sandbox.Timedout") for d in starved), starved
    # What the quarantine alarm counts, for this tenant only: once per delivery that got so far.
    quarantined = emf_values(pipe, "poison", "controller", contract.QUARANTINED_MESSAGES_METRIC)
    assert quarantined == [1] * len(quarantined) and 1 <= len(quarantined) <= 1 + len(starved)
    assert emf_values(pipe, "keys", "controller", contract.QUARANTINED_MESSAGES_METRIC) == []

    s3 = pipe.client("s3")
    out = io.StringIO()
    assert ops(["--endpoint-url", pipe.endpoint_url, "quarantine", "list", "poison"], out=out) == EXIT_OK
    listing = out.getvalue()
    assert f"message {poison_id}" in listing and "why: SQS message body is not JSON" in listing
    assert "TOPSECRET" not in listing
    buckets = [
        b["Name"] for b in s3.list_buckets()["Buckets"] if b["Name"].startswith("ordered-ingest-work-")
    ]
    (stored,) = s3.list_objects_v2(Bucket=buckets[0], Prefix=contract.quarantine_prefix("poison"))["Contents"]
    body = json.loads(s3.get_object(Bucket=buckets[0], Key=stored["Key"])["Body"].read())
    assert (body["message_id"], body["body"]) == (poison_id, "TOPSECRET: not a file event")
    controller_log = pipe.logs("poison-controller")
    assert "unusable message quarantined" in controller_log and poison_id in controller_log
    assert "TOPSECRET" not in controller_log
