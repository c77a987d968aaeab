"""A malformed file fails its workflow, names the line, pages, and does not stop later files."""

from __future__ import annotations

import json

import pytest

from lambdas import contract
from local_runtime import LocalPipeline
from tests.e2e.pipeline_checks import (
    assert_files_in_order,
    assert_no_overlap,
    assert_records_in_file_order,
    csv_file,
)


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    # The seed's behaviour (on_failure: continue): a failed file does not stop later ones.
    return start_pipeline(
        [
            {"id": "acme", "on_failure": "continue"},
            {"id": "globex", "format": "jsonl", "on_failure": "continue"},
        ],
        chunk_size=3,
    )


def test_malformed_csv_fails_with_line_number_notifies_and_later_files_go_on(pipe: LocalPipeline) -> None:
    """GIVEN a good file, a CSV file whose line 4 has a missing field, then two good files
    WHEN they are processed
    THEN the bad file's execution fails with MalformedFileError naming line 4, a notification
    reaches the alarm topic naming the file and the line, none of its records is registered,
    and the files after it are processed, in order."""
    good0 = pipe.put_file("acme", "g0.csv", csv_file("g0", 4))
    bad = pipe.put_file("acme", "bad.csv", b"file,seq\nbad,0\nbad,1\nbad\nbad,3\n")
    good1 = pipe.put_file("acme", "g1.csv", csv_file("g1", 5))
    good2 = pipe.put_file("acme", "g2.csv", csv_file("g2", 2))

    pipe.wait_until_idle(timeout=60, tenants=["acme"])

    executions = pipe.executions("acme")
    assert [(e["key"], e["status"]) for e in executions] == [
        (good0[0], "SUCCEEDED"),
        (bad[0], "FAILED"),
        (good1[0], "SUCCEEDED"),
        (good2[0], "SUCCEEDED"),
    ]
    failed = executions[1]
    assert failed["error"] == contract.MalformedFileError.__name__
    assert json.loads(failed["cause"])["errorMessage"] == "line 4: expected 2 fields, found 1"
    assert_no_overlap(executions)
    assert_files_in_order(executions, [good0[0], bad[0], good1[0], good2[0]])
    assert_records_in_file_order(pipe.sink("acme").accepted, [("g0", 4), ("g1", 5), ("g2", 2)])

    notices = [n for n in pipe.notifications if (n.subject or "").startswith("[ordered-ingest] acme:")]
    assert len(notices) == 1
    text = notices[0].message
    assert f"s3://{pipe.landing_bucket}/{bad[0]} (version {bad[1]})" in text
    assert "Error:     MalformedFileError: line 4: expected 2 fields, found 1" in text
    assert "on_failure: continue" in text and "stackTrace" not in text


def test_malformed_jsonl_names_the_line(pipe: LocalPipeline) -> None:
    """GIVEN a JSON Lines tenant and a file whose third line is not JSON
    WHEN it is processed
    THEN the execution fails with MalformedFileError naming line 3, and nothing is registered."""
    key, _ = pipe.put_file("globex", "bad.jsonl", b'{"n": 1}\n{"n": 2}\n{"n": \n')

    pipe.wait_until_idle(timeout=60, tenants=["globex"])

    (execution,) = pipe.executions("globex")
    assert (execution["key"], execution["status"], execution["error"]) == (
        key,
        "FAILED",
        contract.MalformedFileError.__name__,
    )
    assert json.loads(execution["cause"])["errorMessage"].startswith("line 3: invalid JSON")
    assert pipe.sink("globex").requests == []


def test_quoted_newlines_across_chunk_starts_arrive_exactly_and_a_bad_last_line_sends_nothing(
    pipe: LocalPipeline,
) -> None:
    """GIVEN a CSV (BOM, CRLF, chunks of 3) whose records hold quoted newlines, so that a raw line
    start is rarely a record start, then a 60-record file whose last line is malformed
    WHEN they are processed
    THEN the first arrives record for record, in order, values exact (Register read each chunk
    by its byte range), and the second fails naming its last line with nothing of it sent."""
    records = [
        {"file": "q", "seq": str(n), "text": f'line {n}\nmore, "{n}"' if n % 2 else f"plain {n}"}
        for n in range(20)
    ]
    body = "\ufefffile,seq,text\r\n" + "".join(
        f'{r["file"]},{r["seq"]},"{r["text"].replace(chr(34), chr(34) * 2)}"\r\n' for r in records
    )
    pipe.put_file("acme", "quoted.csv", body.encode())
    bad = b"file,seq\n" + b"".join(b"last,%d\n" % n for n in range(60)) + b"last,60,extra\n"
    pipe.put_file("acme", "bad-last.csv", bad)

    pipe.wait_until_idle(timeout=120, tenants=["acme"])

    by_name = {e["key"].rsplit("/", 1)[-1]: e for e in pipe.executions("acme")}
    quoted, failed = by_name["quoted.csv"], by_name["bad-last.csv"]
    assert quoted["status"] == "SUCCEEDED"
    assert [r for r in pipe.sink("acme").accepted if r.get("file") == "q"] == records
    assert (failed["status"], failed["error"]) == ("FAILED", contract.MalformedFileError.__name__)
    assert json.loads(failed["cause"])["errorMessage"] == "line 62: expected 2 fields, found 3"
    assert not [
        r for r in pipe.sink("acme").requests if isinstance(r.body, dict) and r.body.get("file") == "last"
    ]
