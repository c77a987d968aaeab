"""The demo's verdicts: each guarantee violation is reported, a clean run is not."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from demo.samples import malformed, sample_files
from demo.verify import Upload, check_records, request_order_problems, verify_tenant
from lambdas.contract import execution_name

T0 = datetime(2026, 1, 1, tzinfo=UTC)
UPLOADS = [Upload("t/a.csv", "v1", 0, 2), Upload("t/b.csv", "v2", 1, 1)]


def execution(key, version, start, stop, status="SUCCEEDED"):
    """An execution as `LocalPipeline.executions` describes it (the fields the checks read)."""
    return {
        "key": key,
        "version_id": version,
        "status": status,
        "startDate": T0 + timedelta(seconds=start),
        "stopDate": T0 + timedelta(seconds=stop),
    }


def records(*pairs):
    return [{"file": f, "seq": s} for f, s in pairs]


GOOD_EXECUTIONS = [execution("t/a.csv", "v1", 0, 1), execution("t/b.csv", "v2", 3, 4)]


def test_a_clean_run_has_no_problem_and_measures_the_handoff_gap():
    verdict = verify_tenant("t", UPLOADS, GOOD_EXECUTIONS, records((0, 0), (0, 1), (1, 0)))
    assert verdict.ok, verdict.problems
    assert verdict.handoff_gaps == [2.0]
    assert verdict.records_delivered == verdict.records_expected == 3


def test_duplicates_missing_and_out_of_order_records_are_reported():
    verdict = verify_tenant("t", UPLOADS, GOOD_EXECUTIONS, records((0, 1), (0, 0), (0, 0)))
    assert verdict.problems == [
        "1 records registered twice (first 0#0)",
        "1 records missing (never registered) (first 1#0)",
        "1 records out of order (first at position 1)",
    ]


def test_overlapping_and_reordered_executions_are_reported():
    overlapping = [execution("t/b.csv", "v2", 0, 5), execution("t/a.csv", "v1", 1, 2)]
    verdict = verify_tenant("t", UPLOADS, overlapping, records((0, 0), (0, 1), (1, 0)))
    assert "files started out of upload order: ['t/b.csv', 't/a.csv']" in verdict.problems
    assert any(p.startswith("executions overlap: t/a.csv started at") for p in verdict.problems)


def test_a_file_without_execution_or_with_two_is_reported():
    verdict = verify_tenant("t", UPLOADS, GOOD_EXECUTIONS[:1] * 2, records((0, 0), (0, 1)))
    assert "t/a.csv: 2 executions instead of 1" in verdict.problems
    assert "t/b.csv: 0 executions instead of 1" in verdict.problems


def test_a_resumed_file_counts_once_whatever_its_event_id() -> None:
    """GIVEN a file whose event id is too long to name its executions itself (a hashed name),
    resumed once WHEN the executions are counted THEN its resume is not a second execution."""
    event_id = "e" * 100
    first = {
        **execution("t/a.csv", "v1", 0, 1, "FAILED"),
        "name": execution_name(event_id),
        "input": {"event_id": event_id},
    }
    resumed = {
        **execution("t/a.csv", "v1", 2, 3),
        "name": execution_name(event_id, 1),
        "input": {"event_id": event_id},
    }
    verdict = verify_tenant(
        "t", UPLOADS, [first, resumed, execution("t/b.csv", "v2", 4, 5)], records((0, 0), (0, 1), (1, 0))
    )
    assert verdict.ok, verdict.problems


def test_a_correction_under_its_failed_files_key_run_in_its_place_is_in_order_and_after_a_later_file_is_not():
    """GIVEN a failed file, its correction uploaded under the same key (a new version) and run
    in its place (`ops replace`), then the file behind it THEN the run is in order; run after
    the file behind it, the correction is out of order."""
    uploads = [
        Upload("t/a.csv", "v1", 0, 0, expect_failure=True),
        Upload("t/a.csv", "v3", 0, 1),
        Upload("t/b.csv", "v2", 1, 1),
    ]
    in_place = [
        execution("t/a.csv", "v1", 0, 1, "FAILED"),
        execution("t/a.csv", "v3", 2, 3),
        execution("t/b.csv", "v2", 4, 5),
    ]
    verdict = verify_tenant("t", uploads, in_place, records((0, 0), (1, 0)))
    assert verdict.ok, verdict.problems
    assert (verdict.files_uploaded, verdict.files_succeeded, verdict.files_failed) == (3, 2, 1)

    late = [in_place[0], execution("t/b.csv", "v2", 2, 3), execution("t/a.csv", "v3", 4, 5)]
    verdict = verify_tenant("t", uploads, late, records((1, 0), (0, 0)))
    assert "files finished out of upload order: ['t/b.csv', 't/a.csv']" in verdict.problems
    assert "1 records out of order (first at position 1)" in verdict.problems


def test_sample_files_carry_their_position_and_the_big_file_has_the_asked_size():
    files = sample_files("acme", "csv", files=3, records=10, big_records=1000)
    assert [f.records for f in files] == [5, 10, 1000]
    assert files[0].body.startswith(b"file,seq,customer,amount,note\r\n0,0,")
    assert b'"line one\nline two"' in files[1].body  # a quoted newline inside a field
    jsonl = sample_files("globex", "jsonl", files=1, records=4)[0]
    assert jsonl.body.count(b"\n") == jsonl.records == 2


def test_the_malformed_sample_breaks_exactly_the_line_asked_for():
    bad = malformed("acme", "csv", file_no=9, records=10, bad_line=7)
    lines = bad.body.decode().splitlines()
    assert lines[6] == "this,line,is,broken"
    assert all(line.count(",") >= 4 for i, line in enumerate(lines) if i != 6)


def test_a_record_from_no_expected_file_and_a_record_sent_early_are_reported():
    """GIVEN the inputs the end-to-end tests give the same checks (file ids, the core system's
    requests) THEN a record of no expected file is reported, a resent chunk is not, and a
    record sent before the one before it was registered is."""
    check = check_records(records(("a", 0), ("x", 0)), [("a", 1)])
    assert check.problems == ["1 records registered from no expected file (first x#0)"]

    class Request:
        def __init__(self, seq, registered):
            self.body, self.registered = {"file": "a", "seq": str(seq)}, registered

    assert request_order_problems([Request(0, True), Request(0, False), Request(1, True)]) == []
    assert request_order_problems([Request(1, True)]) == ["record a#1 was sent before a#0 was registered"]


def test_serve_prints_each_files_records_or_its_failure_cause():
    """`--serve` says, per closed file, how many records it registered (or which, for a resumed
    file, numbered from 0), or why it failed: error type and message on one line, without a
    stack trace, escaped JSON or record content."""
    from demo.__main__ import file_outcome

    done = {
        "status": "SUCCEEDED",
        "input": {"key": "acme/a.csv"},
        "output": {"split": {"record_count": 1200}},
    }
    assert file_outcome("acme", done) == "acme: s3://.../acme/a.csv SUCCEEDED: 1,200 records registered"
    resumed = {**done, "input": {"key": "acme/a.csv", "start_record": 42}}
    assert (
        file_outcome("acme", resumed) == "acme: s3://.../acme/a.csv SUCCEEDED: records 42 to 1,199 registered"
    )
    lambda_cause = json.dumps(
        {
            "errorType": "MalformedFileError",
            "errorMessage": "line 7:\n has 3 fields, the header 2 " + "x" * 400,
            "stackTrace": ['  File "/var/task/split.py", line 88, in run\n'],
        }
    )
    failed = {
        "status": "FAILED",
        "input": {"key": "acme/b.csv"},
        "error": "MalformedFileError",
        "cause": lambda_cause,
    }
    line = file_outcome("acme", failed)
    assert line.startswith(
        "acme: s3://.../acme/b.csv FAILED: MalformedFileError: line 7: has 3 fields, the header 2 x"
    )
    assert "\n" not in line and line.endswith("...") and len(line) < 400
    assert "stackTrace" not in line and "split.py" not in line and "{" not in line


def test_serve_says_where_a_failed_file_stopped_and_what_to_do_from_the_ledger():
    """GIVEN a file failed in a page execution (the parent's cause: the child's description
    holding the Lambda runtime's JSON) and the closer's ledger record of it THEN `--serve`
    prints the error type and message, where it stopped (chunk and record numbered from 0, as
    `ops status` and the notification say it) and the hint of lambdas/hints.py."""
    from demo.__main__ import file_outcome

    runtime = json.dumps(
        {
            "errorType": "SinkRejectedError",
            "errorMessage": "chunk 2 record 50 (file record 250): HTTP 400",
            "stackTrace": ['  File "/var/task/register_chunk.py", line 291\n'],
        }
    )
    page = json.dumps(
        {
            "executionArn": "arn:aws:states:us-east-1:1:execution:p:evt-p2",
            "status": "FAILED",
            "error": "SinkRejectedError",
            "cause": runtime,
        }
    )
    failed = {"status": "FAILED", "input": {"key": "acme/f.csv"}, "error": "States.TaskFailed", "cause": page}
    closed = {
        "execution": "evt",
        "error": "SinkRejectedError",
        "cause": "chunk 2 record 50 (file record 250): HTTP 400",
        "closed_as": "FAILED",
        "failed_in": None,
        "next_record": 250,
        "record_count": 1000,
        "chunk_size": 100,
    }

    assert file_outcome("acme", failed) == (
        "acme: s3://.../acme/f.csv FAILED: SinkRejectedError: chunk 2 record 50 (file record 250): HTTP 400"
    )
    assert file_outcome("acme", failed, closed).splitlines() == [
        "acme: s3://.../acme/f.csv FAILED: SinkRejectedError: chunk 2 record 50 (file record 250): HTTP 400",
        "  stopped at chunk 2 of 10, record 250 of 1,000 (records 0-249 reached the core system)",
        "  hint: fix the record's problem in the core system, then resume; if the record itself is wrong, replace "
        "the file with a corrected one from the rejected record on",
    ]


def test_a_scenario_runs_without_the_big_file_unless_asked_and_the_default_run_keeps_it():
    from demo.__main__ import BIG_RECORDS, parse_args

    assert parse_args([]).big_records == BIG_RECORDS == 100_000
    assert parse_args(["--scenario", "halt-resume"]).big_records == 0
    assert parse_args(["--scenario", "crash", "--big-records", "5000"]).big_records == 5000
    assert parse_args(["--big-records", "0"]).big_records == 0


def test_help_documents_the_exit_codes(capsys):
    from demo.__main__ import EXIT_TIMED_OUT, EXIT_VIOLATED, parse_args

    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "exit status: 0 every guarantee held; 1 a guarantee was violated" in text
    assert "3 the run timed out before every file closed (--timeout): nothing was verified" in text
    assert (EXIT_VIOLATED, EXIT_TIMED_OUT) == (1, 3)


def test_a_timed_out_run_says_what_had_not_closed_and_that_nothing_was_verified():
    """GIVEN a run that gave up with a file running, one queued and one not uploaded yet THEN the
    report is a timeout naming them, not a violated guarantee."""
    from demo.__main__ import Plan, timeout_report

    at = T0
    uploads = {
        "acme": [Upload(f"acme/{n}.csv", "v", n, 1) for n in range(3)],
        "beta": [Upload("beta/0.csv", "v", 0, 1)],
    }
    executions = {
        "acme": [
            {"key": "acme/0.csv", "version_id": "v", "status": "SUCCEEDED", "startDate": at},
            {"key": "acme/1.csv", "version_id": "v", "status": "RUNNING", "startDate": at},
        ],
        "beta": [{"key": "beta/0.csv", "version_id": "v", "status": "SUCCEEDED", "startDate": at}],
    }

    class Pipe:
        def executions(self, tenant):
            return executions[tenant]

    plan = Plan(
        files={
            "acme": sample_files("acme", "csv", files=4, records=1),
            "beta": sample_files("beta", "csv", files=1, records=1),
        },
        expect_failure=set(),
    )
    report = timeout_report(Pipe(), plan, uploads, 600)
    assert report == (
        "timed out after 600 s before the run finished: acme 1 running, 1 queued, 1 not uploaded yet "
        "(of 4 files). Nothing was verified: raise --timeout, or run fewer or smaller files "
        "(--files, --records, --big-records)."
    )
    assert "violated" not in report


def test_finish_times_name_every_tenant_from_the_first_upload():
    from datetime import datetime, timezone

    from demo.__main__ import finish_times

    class Pipe:
        def executions(self, tenant):
            stops = {"slow": [130.0, 160.5], "fast": [104.2], "idle": []}[tenant]
            return [{"stopDate": datetime.fromtimestamp(t, tz=UTC)} for t in stops]

    assert finish_times(Pipe(), ["slow", "fast", "idle"], 100.0) == (
        "Each tenant's last file closed at (from the first upload): slow 60.5 s, fast 4.2 s, idle -"
    )


class _Function:
    def __init__(self, kind: str) -> None:
        self.kind, self.tenant = kind, "acme"


class _Result:
    def __init__(self, value: object, errored: bool = False) -> None:
        self.value, self.errored = value, errored


def test_the_chunk_column_follows_the_invocations_numbered_from_0_without_subscribing_to_progress_events():
    """The live table's chunk comes from the split's result and the register invocations (a
    subscriber to the progress events would make the runtime poll the executions: an idle
    `--serve` would pay for it)."""
    from demo.__main__ import ChunkProgress

    class Pipe:
        def __init__(self) -> None:
            self.listeners: list = []

        def add_invocation_listener(self, listener):
            self.listeners.append(listener)

        @property
        def events(self):
            raise AssertionError("the demo does not subscribe to the progress events")

    pipe = Pipe()
    chunks = ChunkProgress(pipe)
    (listener,) = pipe.listeners
    assert chunks.of("acme") == "-"
    listener(_Function("split"), {"key": "acme/a.csv"}, _Result({"chunk_prefix": "p/", "chunk_count": 3}))
    assert chunks.of("acme") == "- of 3"
    listener(_Function("register"), {"chunk_prefix": "p/", "chunk_index": 0}, None)
    listener(_Function("register"), {"chunk_prefix": "p/", "chunk_index": 0}, _Result({}))
    assert chunks.of("acme") == "0 of 3"
    listener(_Function("register"), {"chunk_prefix": "p/", "chunk_index": 2}, None)
    assert chunks.of("acme") == "2 of 3"


def test_serve_describes_only_the_executions_it_has_not_shown():
    """An idle `--serve` lists each tenant's executions once a look and describes only the closed
    ones it has not printed yet (describing every execution every second kept moto busy)."""
    from demo.__main__ import newly_closed

    listed = [
        {
            "executionArn": f"arn:{name}",
            "name": name,
            "status": status,
            "startDate": T0 + timedelta(seconds=n),
        }
        for n, (name, status) in enumerate([("a", "SUCCEEDED"), ("b", "FAILED"), ("c", "RUNNING")])
    ]
    described: list[str] = []

    class StepFunctions:
        def get_paginator(self, _name):
            return type("P", (), {"paginate": lambda self, **_: [{"executions": listed}]})()

        def describe_execution(self, executionArn):
            described.append(executionArn)
            return {
                "name": executionArn[4:],
                "status": "FAILED",
                "input": '{"key": "acme/b.csv"}',
                "cause": "x",
            }

    class Pipe:
        def __init__(self) -> None:
            self.tenants = {"acme": type("T", (), {"state_machine_arn": "arn:sm"})()}

        def client(self, _service):
            return StepFunctions()

    (execution,) = newly_closed(Pipe(), "acme", shown={"a"})
    assert described == ["arn:b"]
    assert (execution["name"], execution["input"], execution["output"]) == ("b", {"key": "acme/b.csv"}, None)
