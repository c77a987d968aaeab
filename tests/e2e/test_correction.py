"""A bad file corrected in its place, and a planned pause, on the local runtime.

`ops replace` runs the corrected object version in the failed file's place, before the files
queued behind it; `ops pause` holds a tenant through a maintenance window of the core system
without failing, paging or losing anything; `ops status` counts files, not attempts.
"""

from __future__ import annotations

import pytest

from lambdas import contract
from local_runtime import LocalPipeline
from ops.cli import EXIT_NOTHING_TO_DO, EXIT_OK
from tests.e2e.pipeline_checks import (
    assert_no_duplicates,
    assert_no_overlap,
    assert_records_in_file_order,
    csv_file,
    emf_values,
    first_sends,
    halted,
    hold_at,
    ops,
    status,
    wait_for,
)

#: A CSV file whose second record has one field too few: Split fails it at line 3.
MALFORMED = b"file,seq\nc,0\nc\nc,2\n"


@pytest.fixture(scope="module")
def pipe(start_pipeline) -> LocalPipeline:
    return start_pipeline(
        [
            {"id": "fixes"},
            {"id": "early"},
            {"id": "partial"},
            {"id": "held"},
            {"id": "free"},
            {"id": "numbered", "ordering": {"by": "key_sequence", "sequence_pattern": r"(?P<seq>\d+)\.csv$"}},
        ],
        chunk_size=3,
    )


@pytest.fixture(scope="module")
def uploads(pipe: LocalPipeline) -> dict[str, list[tuple[str, str]]]:
    """Six files of `fixes`, the third malformed; `early`: a running file, a malformed one, one
    after it and the malformed one's correction, all uploaded before the halt (the first is
    held at its record 2 until the correction is in); `partial`: a file the core system rejects
    at record 6."""
    hold_at(pipe, "early", "a", 2)
    pipe.sink("partial").reject(on_record={"file": "p", "seq": "bad"}, status=400)
    files = {
        "fixes": [
            pipe.put_file("fixes", f"f{n}.csv", MALFORMED if n == 3 else csv_file(f"f{n}", 4))
            for n in range(1, 7)
        ],
        "early": [
            pipe.put_file("early", "a.csv", csv_file("a", 5)),
            pipe.put_file("early", "c.csv", MALFORMED),
            pipe.put_file("early", "d.csv", csv_file("d", 4)),
        ],
        "partial": [pipe.put_file("partial", "p.csv", partial_file("bad"))],
        "numbered": [
            pipe.put_file("numbered", "n1.csv", csv_file("n1", 3)),
            pipe.put_file("numbered", "n2.csv", MALFORMED),
            pipe.put_file("numbered", "n3.csv", csv_file("n3", 3)),
        ],
    }
    wait_for(lambda: pipe.executions("early"), timeout=60, what="early's first file to start")
    pipe.faults.duplicate_next_event("early")  # the correction's event reaches the queue twice
    files["early"].append(pipe.put_file("early", "c.csv", csv_file("c", 3)))
    pipe.sink("early").clear_faults()
    return files


def partial_file(sixth: str, *, second: str = "1") -> bytes:
    """Ten records of file `p`; record 6 is `sixth`, record 1 `second`."""
    seqs = ["0", second, "2", "3", "4", "5", sixth, "7", "8", "9"]
    return ("file,seq\n" + "".join(f"p,{seq}\n" for seq in seqs)).encode()


def test_a_corrected_file_runs_in_its_place_and_the_files_behind_it_follow_in_order(
    pipe: LocalPipeline, uploads: dict[str, list[tuple[str, str]]]
) -> None:
    """GIVEN six files, the third malformed WHEN it halts the tenant, the tenant uploads the
    correction under the same key and the operator runs `ops replace` THEN the core system gets
    files 1, 2, 3 (corrected), 4, 5, 6: each record once, in order; `ops status` counts six
    files done and one failed attempt, linked to its replacement."""
    wait_for(lambda: halted(pipe, "fixes"), timeout=120, what="the tenant to halt")
    state = status(pipe, "fixes")
    assert state["hint"]["action"] == "replace"
    key, _ = uploads["fixes"][2]
    assert ops(pipe, "replace", "fixes", "--key", "elsewhere/f3.csv")[0] == EXIT_NOTHING_TO_DO
    assert (
        ops(pipe, "replace", "fixes", "--key", key, "--version", "no-such-version")[0] == EXIT_NOTHING_TO_DO
    )
    assert (
        ops(pipe, "replace", "fixes", "--key", key)[0] == EXIT_NOTHING_TO_DO
    )  # the latest is the failed one
    assert status(pipe, "fixes")["state"] == "halted"  # the refusals changed nothing

    _, corrected = pipe.put_file("fixes", "f3.csv", csv_file("f3", 4))
    code, out = ops(pipe, "replace", "fixes", "--key", key, "--version", corrected)
    assert code == EXIT_OK, out
    pipe.wait_until_idle(timeout=120, tenants=["fixes"])

    files = [(f"f{n}", 4) for n in range(1, 7)]
    assert_records_in_file_order(pipe.sink("fixes").accepted, files)
    assert_no_duplicates(pipe.sink("fixes").accepted)
    executions = pipe.executions("fixes")
    assert_no_overlap(executions)
    assert [e["key"] for e in executions] == [k for k, _ in uploads["fixes"][:3]] + [key] + [
        k for k, _ in uploads["fixes"][3:]
    ]
    state = status(pipe, "fixes")
    assert state["state"] == "idle"
    assert state["last_24h"] == {"succeeded": 6, "failed": 0, "skipped": 0}
    assert state["attempts_24h"] == {"total": 7, "failed": 1, "paused": 0}
    (replaced,) = state["retried_24h"]
    assert replaced["key"] == key and replaced["outcome"] == "SUCCEEDED"
    assert [a["version_id"] for a in replaced["attempts"]] == [uploads["fixes"][2][1], corrected]


def test_a_correction_uploaded_before_the_halt_and_delivered_twice_runs_once(
    pipe: LocalPipeline, uploads: dict[str, list[tuple[str, str]]]
) -> None:
    """GIVEN a correction uploaded while the file ahead still ran, before its malformed file
    failed, and its event delivered twice WHEN the operator replaces the failed file with it
    THEN it runs once, before the file queued behind the failed one, and both of its events
    are let go."""
    wait_for(lambda: halted(pipe, "early"), timeout=120, what="the tenant to halt")
    (a, _), (c, failed), (d, _), (_, correction) = uploads["early"]
    code, out = ops(pipe, "replace", "early", "--key", c, "--version", correction)
    assert code == EXIT_OK, out
    assert ops(pipe, "replace", "early", "--key", c, "--version", correction)[0] == EXIT_NOTHING_TO_DO
    pipe.wait_until_idle(timeout=120, tenants=["early"])

    assert_records_in_file_order(pipe.sink("early").accepted, [("a", 5), ("c", 3), ("d", 4)])
    assert_no_duplicates(pipe.sink("early").accepted)
    assert [(e["key"], e["status"]) for e in pipe.executions("early")] == [
        (a, "SUCCEEDED"),
        (c, "FAILED"),
        (c, "SUCCEEDED"),
        (d, "SUCCEEDED"),
    ]
    assert failed != correction


def test_a_file_rejected_mid_way_is_replaced_from_the_first_unacknowledged_record(
    pipe: LocalPipeline, uploads: dict[str, list[tuple[str, str]]], capsys: pytest.CaptureFixture[str]
) -> None:
    """GIVEN a file the core system rejected at record 6 (records 0-5 acknowledged) WHEN the
    operator replaces it with a correction and `--from-record 6` THEN it runs from record 6:
    records 0-5 are not sent again, every record arrives once, in order; a `--from-record`
    past what was acknowledged is refused. (A correction whose first records differ is refused
    too: tests/handlers/test_operations.py; here its upload would be a file of its own.)"""
    wait_for(lambda: halted(pipe, "partial"), timeout=120, what="the tenant to halt")
    key, _ = uploads["partial"][0]
    _, fixed = pipe.put_file("partial", "p.csv", partial_file("6"))
    code, out = ops(pipe, "replace", "partial", "--key", key, "--from-record", "7")
    assert code == EXIT_NOTHING_TO_DO and "acknowledged only records 0 to 5" in capsys.readouterr().err

    sent_before = len(pipe.sink("partial").requests)
    code, out = ops(pipe, "replace", "partial", "--key", key, "--version", fixed, "--from-record", "6")
    assert code == EXIT_OK and "from record 6" in out, out
    pipe.wait_until_idle(timeout=120, tenants=["partial"])

    sink = pipe.sink("partial")
    assert_records_in_file_order(sink.accepted, [("p", 10)])
    assert_no_duplicates(sink.accepted)
    assert [r.body["seq"] for r in first_sends(sink.requests[sent_before:])] == ["6", "7", "8", "9"]


def test_a_pause_mid_file_through_a_deploy_loses_nothing_fails_nothing_and_holds_no_other_tenant(
    pipe: LocalPipeline,
) -> None:
    """GIVEN a burst of files, the second held mid-file by the core system WHEN the operator
    pauses the tenant THEN the file stops at a chunk boundary, no execution fails, nothing
    else starts, `ops status` says paused, since when and why, and another tenant's files run
    meanwhile; WHEN a deploy changes the functions and the operator unpauses THEN the file goes
    on at its first unacknowledged record and the burst completes: every record once, in order."""
    names = [f"h{n}" for n in range(4)]
    hold_at(pipe, "held", "h1", 4)
    for name in names:
        pipe.put_file("held", f"{name}.csv", csv_file(name, 6))
    wait_for(
        lambda: (
            pipe.sink("held").requests and any(r.body.get("file") == "h1" for r in pipe.sink("held").requests)
        ),
        timeout=60,
        what="h1 to be sent",
    )

    code, out = ops(pipe, "pause", "held", "--reason", "core system maintenance")
    assert code == EXIT_OK, out
    assert ops(pipe, "pause", "held", "--reason", "again")[0] == EXIT_NOTHING_TO_DO
    wait_for(
        lambda: (
            status(pipe, "held")["current_file"]["status"] == "PAUSED"
            and all(e["status"] != "RUNNING" for e in pipe.executions("held"))
        ),
        timeout=120,
        what="the running file to stop for the pause",
    )
    pipe.sink("held").clear_faults()
    state = status(pipe, "held")
    assert state["state"] == "paused" and state["paused"]["reason"] == "core system maintenance"
    # Stopped at the first unacknowledged record: the next invocation after the 503s saw the pause.
    assert (
        state["paused"]["since"]
        and state["paused"]["file_stopped"]
        and state["current_file"]["next_record"] == 4
    )

    for name in ("f0", "f1"):
        pipe.put_file("free", f"{name}.csv", csv_file(name, 3))
    pipe.wait_until_idle(timeout=120, tenants=["free"])
    assert_records_in_file_order(pipe.sink("free").accepted, [("f0", 3), ("f1", 3)])

    for kind in ("controller", "register"):  # a deploy while paused: the functions change
        name = pipe.tenants["held"].functions[kind]
        lambda_ = pipe.client("lambda")
        variables = lambda_.get_function_configuration(FunctionName=name)["Environment"]["Variables"]
        lambda_.update_function_configuration(
            FunctionName=name, Environment={"Variables": {**variables}}, Description="redeployed"
        )
    # The head message comes back while paused (its waiting visibility, then every 60 s, scaled):
    # the gate publishes how long the pause lasts (the paused alarm) and no head wait (the stall alarm).
    wait_for(
        lambda: emf_values(pipe, "held", "controller", contract.PAUSED_METRIC),
        timeout=60,
        what="the gate to publish the pause",
    )
    assert status(pipe, "held")["state"] == "paused"
    assert [e["key"].rsplit("/", 1)[1] for e in pipe.executions("held")] == ["h0.csv", "h1.csv"]

    code, out = ops(pipe, "unpause", "held")
    assert code == EXIT_OK and "runs on at record 4" in out, out
    pipe.wait_until_idle(timeout=120, tenants=["held"])

    sink = pipe.sink("held")
    assert_records_in_file_order(sink.accepted, [(name, 6) for name in names])
    assert_no_duplicates(sink.accepted)
    executions = pipe.executions("held")
    assert {e["status"] for e in executions} == {"SUCCEEDED"}  # the paused attempt too: no alarm
    assert_no_overlap(executions)
    assert max(emf_values(pipe, "held", "controller", contract.PAUSED_METRIC)) > 0
    state = status(pipe, "held")
    assert state["state"] == "idle" and state["last_24h"]["succeeded"] == 4
    assert state["attempts_24h"]["paused"] == 1
    assert ops(pipe, "unpause", "held")[0] == EXIT_NOTHING_TO_DO


def test_with_key_sequence_ordering_the_correction_takes_the_failed_files_number(
    pipe: LocalPipeline, uploads: dict[str, list[tuple[str, str]]], capsys: pytest.CaptureFixture[str]
) -> None:
    """GIVEN `ordering.by: key_sequence` and file 2 of 3 malformed WHEN a correction under a key
    with another number is offered THEN replace refuses it (the number would be taken twice);
    WHEN the correction is uploaded under the failed file's key and replaces it THEN files 1,
    2 (corrected), 3 reach the core system in order, and the correction's own event runs nothing."""
    wait_for(lambda: halted(pipe, "numbered"), timeout=120, what="the tenant to halt")
    key, _ = uploads["numbered"][1]
    _, elsewhere = pipe.put_file("numbered", "n7.csv", csv_file("n2", 3))
    code, _ = ops(pipe, "replace", "numbered", "--key", "numbered/n7.csv", "--version", elsewhere)
    assert code == EXIT_NOTHING_TO_DO and "sequence number 2" in capsys.readouterr().err

    _, corrected = pipe.put_file("numbered", "n2.csv", csv_file("n2", 3))
    code, out = ops(pipe, "replace", "numbered", "--key", key, "--version", corrected)
    assert code == EXIT_OK, out
    # n7.csv waits for numbers 4-6 (a gap): wait for file 3, not for an idle tenant.
    wait_for(
        lambda: status(pipe, "numbered")["last_24h"]["succeeded"] == 3,
        timeout=120,
        what="files 2 and 3 to run",
    )

    assert_records_in_file_order(pipe.sink("numbered").accepted, [("n1", 3), ("n2", 3), ("n3", 3)])
    assert_no_duplicates(pipe.sink("numbered").accepted)
