"""`python -m ops` on moto: discovery from stack outputs, status, resume, skip and the exit codes."""

from __future__ import annotations

import datetime as dt
import io
import json
from typing import Any

import boto3
import pytest

from lambdas import contract
from lambdas.contract import (
    MAX_CHUNK_INDEX,
    MAX_EXECUTION_NAME,
    PAGE_EXECUTION_NAME_FORMAT,
    SECTION_EXECUTION_NAME_FORMAT,
    FileRef,
    execution_arn,
    execution_name,
)
from lambdas.ledger import Ledger
from ops.cli import (
    EXIT_CONFLICT,
    EXIT_HALTED,
    EXIT_NOT_FOUND,
    EXIT_NOTHING_TO_DO,
    EXIT_OK,
    EXIT_USAGE,
    main,
)
from ops.discovery import discover
from ops.reconcile import ObjectVersion, replay_event_id
from tests.conftest import create_ledger_table

REGION = "us-east-1"
NOW = 1_700_000_000.0
HOLD = json.dumps({"StartAt": "Hold", "States": {"Hold": {"Type": "Wait", "Seconds": 60, "End": True}}})


def stack(outputs: dict[str, str]) -> str:
    """A template with just outputs, keyed like CDK keys them (construct path + name + hash)."""
    return json.dumps(
        {
            "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
            "Outputs": {f"Pipeline{name}0A1B2C3D": {"Value": value} for name, value in outputs.items()},
        }
    )


class Deployment:
    """What ops finds in an account: the shared stack, one tenant stack, its queue, machine and
    ledger; with a `qualifier`, named as the app names them with `qualifier:` in its tenants file."""

    def __init__(self, qualifier: str = "") -> None:
        self.clients = lambda service: boto3.client(service, region_name=REGION)
        ddb, sqs, sfn, cfn = (self.clients(s) for s in ("dynamodb", "sqs", "stepfunctions", "cloudformation"))

        def named(name: str) -> str:
            return f"{qualifier}-{name}" if qualifier else name

        self.ledger_table = create_ledger_table(ddb, named("ledger"))
        self.queue_url = sqs.create_queue(
            QueueName=named("acme-event-queue.fifo"),
            Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
        )["QueueUrl"]
        self.machine = sfn.create_state_machine(
            name=named("acme-file-ingest-workflow"),
            definition=HOLD,
            roleArn="arn:aws:iam::123456789012:role/wf",
        )["stateMachineArn"]
        cfn.create_stack(
            StackName=named("OrderedIngest-Shared"),
            TemplateBody=json.dumps(
                {
                    "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
                    "Outputs": {"LedgerTableName": {"Value": self.ledger_table}},
                }
            ),
        )
        cfn.create_stack(
            StackName=named("OrderedIngest-Tenant-acme"),
            TemplateBody=stack(
                {
                    "TenantId": "acme",
                    "QueueUrl": self.queue_url,
                    "StateMachineArn": self.machine,
                    "LandingPrefix": "acme/",
                    "OnFailure": "halt",
                }
            ),
        )
        self.ledger = Ledger(ddb, self.ledger_table, "acme")
        self.sfn, self.sqs = sfn, sqs

    def ops(self, *argv: str) -> tuple[int, str]:
        out = io.StringIO()
        code = main(list(argv), clients=self.clients, out=out, now=NOW)
        return code, out.getvalue()

    def failed_file(
        self,
        next_record: int = 250,
        error: str = "SinkRejectedError",
        cause: str = "chunk 2 record 50 (file record 250): HTTP 400",
    ) -> None:
        """acme's file f.csv failed at record 250 of 1,000 and halted the tenant; a next file waits."""
        file = FileRef(
            tenant="acme",
            event_id="evt-a",
            bucket="landing",
            key="acme/f.csv",
            version_id="v1",
            size=1,
            etag=None,
            event_time="",
        )
        self.ledger.claim(self.ledger.read(), file, "evt-a", NOW - 600)
        self.ledger.record_progress("evt-a", next_record, chunk_size=100, chunk_count=10, record_count=1000)
        self.ledger.record_close(
            "evt-a", "FAILED", halt_on_failure=True, now=NOW - 60, error=error, cause=cause
        )
        self.sqs.send_message(
            QueueUrl=self.queue_url, MessageBody="{}", MessageGroupId="acme", MessageDeduplicationId="n"
        )
        (message,) = self.sqs.receive_message(QueueUrl=self.queue_url, VisibilityTimeout=240)["Messages"]
        self.ledger.record_waiting(
            self.ledger.read(), message["MessageId"], message["ReceiptHandle"], NOW - 50, NOW - 90
        )


@pytest.fixture
def deployment(moto_account: None) -> Any:
    return Deployment()


def test_status_of_an_idle_tenant(deployment):
    code, out = deployment.ops("status")
    assert code == EXIT_OK
    assert "acme" in out and "idle" in out


def test_status_json_names_the_halted_file_where_it_stopped_and_why(deployment):
    deployment.failed_file()
    code, out = deployment.ops("status", "acme", "--json")
    assert code == EXIT_HALTED
    (status,) = json.loads(out)
    assert status["state"] == "halted"
    assert status["current_file"]["key"] == "acme/f.csv"
    assert status["current_file"]["next_record"] == 250 and status["current_file"]["record_count"] == 1000
    assert status["current_file"]["chunk"] == {"index": 2, "count": 10}
    assert status["last_failure"]["error"] == "SinkRejectedError"
    assert status["head_wait_seconds"] == 90.0
    assert status["queue"] == {"visible": 0, "in_flight": 1}
    assert status["last_24h"] == {"succeeded": 0, "failed": 1, "skipped": 0}


def write_history(ddb: Any, closes: list[tuple[float, str]]) -> None:
    """History items as the ledger writes them (`file#<started ms>#<execution>`), written directly
    and in batches: one per (started at, status). Each holds about 1 KB (a long key), so a
    thousand of them take more than DynamoDB's 1 MB page."""
    items = []
    for n, (started, status) in enumerate(closes):
        execution = f"evt-{n}"
        file = {
            "tenant": "acme",
            "event_id": execution,
            "bucket": "landing",
            "key": f"acme/{n:04d}-" + "k" * 900,
            "version_id": "v",
            "size": 1,
            "etag": None,
            "event_time": "",
        }
        items.append(
            {
                "tenant": {"S": "acme"},
                "entry": {"S": f"file#{int(started * 1000):013d}#{execution}"},
                "execution": {"S": execution},
                "file_ref": {"S": json.dumps(file)},
                "status": {"S": status},
                "attempt": {"N": "0"},
                "next_record": {"N": "0"},
                "started_at": {"N": str(started)},
                "closed_at": {"N": str(started + 1)},
                "error": {"S": f"Error{n}"},
            }
        )
    for start in range(0, len(items), 25):
        ddb.batch_write_item(
            RequestItems={"ledger": [{"PutRequest": {"Item": item}} for item in items[start : start + 25]]}
        )


def test_status_counts_every_close_of_the_last_24_hours_however_many_pages_they_fill(deployment):
    """GIVEN 1,200 closes in the last 24 hours (more than one 1 MB page of the ledger, and more
    than the 100 one page of the history held) and older ones WHEN ops status runs THEN its
    24-hour counts are exact."""
    closes = [(NOW - 3600 - n, "SUCCEEDED") for n in range(1000)]
    closes += [(NOW - 7200 - n, "FAILED") for n in range(150)] + [
        (NOW - 9000 - n, "SKIPPED") for n in range(50)
    ]
    closes += [(NOW - 2 * 86400 - n, "SUCCEEDED") for n in range(30)]  # older than the window
    write_history(deployment.clients("dynamodb"), closes)

    code, out = deployment.ops("status", "acme", "--json")

    assert code == EXIT_OK
    (status,) = json.loads(out)
    assert status["last_24h"] == {"succeeded": 1000, "failed": 150, "skipped": 50}


def test_status_finds_the_last_failure_behind_more_than_a_page_of_later_successes(deployment):
    """GIVEN a failure, then 1,100 files that succeeded WHEN ops status runs THEN the last
    failure column still names it (it looked at the newest 50 attempts before)."""
    closes = [(NOW - 86400 * 3, "FAILED")] + [(NOW - 86400 * 2 + n, "SUCCEEDED") for n in range(1100)]
    write_history(deployment.clients("dynamodb"), closes)

    code, out = deployment.ops("status", "acme", "--json")

    assert code == EXIT_OK
    (status,) = json.loads(out)
    assert (status["last_failure"]["execution"], status["last_failure"]["error"]) == ("evt-0", "Error0")


def test_status_table_tells_the_halted_tenant_what_to_run(deployment):
    deployment.failed_file()
    code, out = deployment.ops("status")
    assert code == EXIT_HALTED
    assert "chunk 2 of 10, records 250/1,000" in out
    assert "hint: fix the record's problem in the core system, then resume" in out
    assert "python -m ops resume acme" in out and "python -m ops skip acme" in out


def test_status_tells_to_replace_a_malformed_file_with_its_correction_not_to_resume_it(deployment):
    """GIVEN a tenant halted on a malformed file (a resume would fail the same way) THEN status
    gives the notification's hint: the correction replaces it in its place (the command names
    the failed file's key), skip only as the way out that breaks the order."""
    deployment.failed_file(
        next_record=0, error="MalformedFileError", cause="line 4: expected 2 fields, found 1"
    )

    code, out = deployment.ops("status")
    _, as_json = deployment.ops("status", "acme", "--json")

    assert code == EXIT_HALTED
    assert "hint: have the tenant upload a corrected file, then replace the failed one with it" in out
    key = json.loads(as_json)[0]["current_file"]["key"]
    assert out.index(f"python -m ops replace acme --key {key} --version VERSION_ID") < out.index(
        "python -m ops skip acme"
    )
    assert "python -m ops resume" not in out
    assert json.loads(as_json)[0]["hint"]["action"] == "replace"


def test_status_says_which_function_crashed_and_in_which_chunk(deployment):
    """GIVEN a file failed by the register function crashing past the workflow's retries in
    chunk 2 (the closer recorded where) THEN status says so, and to resume after the fix."""
    file = FileRef(
        tenant="acme",
        event_id="evt-c",
        bucket="landing",
        key="acme/c.csv",
        version_id="v1",
        size=1,
        etag=None,
        event_time="",
    )
    deployment.ledger.claim(deployment.ledger.read(), file, "evt-c", NOW - 600)
    deployment.ledger.record_progress("evt-c", 250, chunk_size=100, chunk_count=10, record_count=1000)
    deployment.ledger.record_close(
        "evt-c",
        "FAILED",
        halt_on_failure=True,
        now=NOW - 60,
        error="Runtime.OutOfMemory",
        failed_in="register",
    )

    _, out = deployment.ops("status", "acme", "--json")

    assert json.loads(out)[0]["hint"] == {
        "action": "resume",
        "text": "register crashed repeatedly (Runtime.OutOfMemory) in chunk 2: check its memory and timeout, then resume",
    }


def test_resume_continues_the_failed_file_at_its_first_unacknowledged_record(deployment):
    deployment.failed_file(next_record=250)
    code, out = deployment.ops("resume", "acme")
    assert code == EXIT_OK
    assert "at record 250 as execution evt-a-r1" in out
    described = deployment.sfn.describe_execution(executionArn=execution_arn(deployment.machine, "evt-a-r1"))
    assert json.loads(described["input"])["start_record"] == 250
    position = deployment.ledger.read()
    assert (position.status, position.halted, position.execution) == ("RUNNING", False, "evt-a-r1")


def test_resume_of_a_replayed_file_resumed_999_times_starts_a_name_its_pages_fit(deployment):
    """GIVEN a file `ops reconcile --replay` sent, at its 999th resume, failed and halted WHEN the
    operator resumes it THEN its 1000th attempt runs under a name that leaves room for the page
    and section suffixes at the largest chunk (74 + `-r<n>` + `-p<chunk>` did not)."""
    version = ObjectVersion(
        bucket="landing",
        key="acme/" + "k" * 1000,
        version_id="v" * 32,
        last_modified=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        size=1,
        etag=None,
    )
    event_id = replay_event_id(version)
    file = FileRef(
        tenant="acme",
        event_id=event_id,
        bucket="landing",
        key=version.key,
        version_id=version.version_id,
        size=1,
        etag=None,
        event_time="",
    )
    deployment.ledger.claim(deployment.ledger.read(), file, execution_name(event_id), NOW - 600)
    deployment.clients("dynamodb").update_item(  # 999 resumes happened before this one
        TableName="ledger",
        Key={"tenant": {"S": "acme"}, "entry": {"S": "position"}},
        UpdateExpression="SET attempt = :n, execution = :e",
        ExpressionAttributeValues={":n": {"N": "999"}, ":e": {"S": execution_name(event_id, 999)}},
    )
    deployment.ledger.record_close(
        execution_name(event_id, 999), "FAILED", halt_on_failure=True, now=NOW - 60
    )

    code, _ = deployment.ops("resume", "acme")

    assert code == EXIT_OK
    name = deployment.ledger.read().execution
    assert name == execution_name(event_id, 1000) == f"{event_id}-r1000"
    deployment.sfn.describe_execution(executionArn=execution_arn(deployment.machine, name))
    assert len(PAGE_EXECUTION_NAME_FORMAT.format(name, MAX_CHUNK_INDEX)) <= MAX_EXECUTION_NAME
    assert len(SECTION_EXECUTION_NAME_FORMAT.format(name, MAX_CHUNK_INDEX)) <= MAX_EXECUTION_NAME


def test_resume_starts_the_resumed_file_through_the_live_alias_the_stack_outputs(deployment, monkeypatch):
    """GIVEN a tenant stack that outputs its workflow's `live` alias WHEN the operator resumes
    THEN the resumed execution is started through the alias (the version it points at now, as
    the controller starts files), and ops finds it by the state machine's execution ARN."""
    alias = f"{deployment.machine}:live"
    deployment.clients("cloudformation").update_stack(
        StackName="OrderedIngest-Tenant-acme",
        TemplateBody=stack(
            {
                "TenantId": "acme",
                "QueueUrl": deployment.queue_url,
                "StateMachineArn": deployment.machine,
                "LandingPrefix": "acme/",
                "OnFailure": "halt",
                "StateMachineAliasArn": alias,
            }
        ),
    )
    deployment.failed_file(next_record=250)
    started: list[str] = []
    sfn, real_start = deployment.sfn, deployment.sfn.start_execution

    def start_execution(**kwargs: Any) -> Any:  # moto's mock cannot start through an alias
        started.append(kwargs["stateMachineArn"])
        return real_start(**{**kwargs, "stateMachineArn": deployment.machine})

    monkeypatch.setattr(sfn, "start_execution", start_execution)
    clients = deployment.clients
    monkeypatch.setattr(
        deployment, "clients", lambda service: sfn if service == "stepfunctions" else clients(service)
    )

    code, out = deployment.ops("resume", "acme")

    assert code == EXIT_OK, out
    assert started == [alias]
    assert deployment.ops("status", "acme", "--json")[0] == EXIT_OK


def test_resume_and_skip_refuse_when_there_is_nothing_to_do(deployment):
    assert deployment.ops("resume", "acme")[0] == EXIT_NOTHING_TO_DO
    assert deployment.ops("skip", "acme", "--reason", "x")[0] == EXIT_NOTHING_TO_DO
    deployment.failed_file()
    assert deployment.ops("resume", "acme")[0] == EXIT_OK
    assert deployment.ops("resume", "acme")[0] == EXIT_NOTHING_TO_DO  # running now


def test_skip_needs_a_reason_and_hands_off_to_the_next_file(deployment):
    deployment.failed_file()
    assert deployment.ops("skip", "acme")[0] == EXIT_USAGE
    assert deployment.ops("skip", "acme", "--reason", "  ")[0] == EXIT_USAGE
    code, out = deployment.ops("skip", "acme", "--reason", "tenant re-sends a corrected file")
    assert code == EXIT_OK and "the next file starts now" in out
    position = deployment.ledger.read()
    assert (position.status, position.skip_reason, position.halted) == (
        "SKIPPED",
        "tenant re-sends a corrected file",
        False,
    )
    visible = deployment.sqs.get_queue_attributes(QueueUrl=deployment.queue_url, AttributeNames=["All"])[
        "Attributes"
    ]
    assert visible["ApproximateNumberOfMessages"] == "1"


def test_the_qualifier_finds_the_qualified_copy_of_the_app_and_not_the_app_as_shipped(deployment):
    """GIVEN the app as shipped (acme halted) and a copy deployed with `qualifier: q1` (acme idle)
    in the same account and Region."""
    deployment.failed_file()
    copy = Deployment(qualifier="q1")
    # WHEN ops looks with --qualifier q1, THEN it finds the copy's tenant, queue, machine and ledger
    with contract.qualified("q1"):
        (found,) = discover(copy.clients).values()
    assert (found.stack, found.queue_url, found.state_machine_arn, found.ledger_table) == (
        "q1-OrderedIngest-Tenant-acme",
        copy.queue_url,
        copy.machine,
        "q1-ledger",
    )
    code, out = copy.ops("--qualifier", "q1", "status", "--json")
    assert (code, json.loads(out)[0]["state"]) == (EXIT_OK, "idle")
    # and without it, the app as shipped only
    (plain,) = discover(deployment.clients).values()
    assert (plain.stack, plain.ledger_table) == ("OrderedIngest-Tenant-acme", "ledger")
    assert deployment.ops("status")[0] == EXIT_HALTED


def test_fails_when_the_qualifier_is_not_one(deployment, capsys):
    assert deployment.ops("--qualifier", "Q-1", "status")[0] == EXIT_USAGE
    assert (
        "argument --qualifier: 'Q-1' is not a qualifier: lowercase letters and digits, starting with a letter, "
        "at most 12 characters"
    ) in capsys.readouterr().err


def test_an_unknown_tenant_or_an_empty_account_is_not_found(deployment, monkeypatch):
    assert deployment.ops("status", "nobody")[0] == EXIT_NOT_FOUND
    boto3.client("cloudformation", region_name=REGION).delete_stack(StackName="OrderedIngest-Shared")
    assert deployment.ops("status")[0] == EXIT_NOT_FOUND


def test_a_resume_racing_another_writer_asks_to_run_again(deployment, monkeypatch):
    deployment.failed_file()
    from lambdas import operations

    real_read = Ledger.read
    raced: list[bool] = []

    def stale_read(self: Ledger):  # the operator read, then someone else skipped the file
        position = real_read(self)
        if position.halted and not raced:
            raced.append(True)
            operations.skip(
                Ledger(self.ddb, self.table, self.tenant), deployment.sqs, deployment.queue_url, "other", NOW
            )
        return position

    monkeypatch.setattr(Ledger, "read", stale_read)
    assert deployment.ops("resume", "acme")[0] == EXIT_CONFLICT


def test_status_shows_the_files_recorded_as_duplicates(deployment):
    """GIVEN a file closed as a duplicate of an earlier one (duplicate_files: skip)
    THEN `ops status` names it and the file whose bytes it has, in JSON and in the table."""
    file = FileRef(
        tenant="acme",
        event_id="evt-b",
        bucket="landing",
        key="acme/b.csv",
        version_id="v2",
        size=1,
        etag=None,
        event_time="",
    )
    deployment.ledger.claim(deployment.ledger.read(), file, "evt-b", NOW - 60)
    earlier = {"key": "acme/a.csv", "version_id": "v1", "event_id": "evt-a"}
    deployment.ledger.record_close(
        "evt-b", "SUCCEEDED", halt_on_failure=True, now=NOW - 50, duplicate_of=earlier
    )
    code, out = deployment.ops("status", "acme", "--json")
    (status,) = json.loads(out)
    assert code == EXIT_OK
    assert [(d["key"], d["version_id"], d["duplicate_of"]) for d in status["duplicates_24h"]] == [
        ("acme/b.csv", "v2", earlier)
    ]
    code, out = deployment.ops("status")
    assert (
        "acme: 1 duplicate file(s) in 24 h" in out
        and "acme/b.csv has the bytes of acme/a.csv (version v1)" in out
    )


def test_status_exits_9_while_a_tenant_is_halted_and_0_once_it_goes_on(deployment):
    """GIVEN a tenant halted on a failed file THEN `status` (all tenants, the tenant, --json) exits
    9, a code no other outcome of ops uses; after `resume` the tenant runs and `status` exits 0."""
    assert EXIT_HALTED not in {
        EXIT_OK,
        EXIT_USAGE,
        EXIT_CONFLICT,
        EXIT_NOT_FOUND,
        EXIT_NOTHING_TO_DO,
        1,
        6,
        7,
        8,
    }
    assert deployment.ops("status")[0] == EXIT_OK
    deployment.failed_file()

    for argv in (["status"], ["status", "acme"], ["status", "acme", "--json"]):
        assert deployment.ops(*argv)[0] == EXIT_HALTED, argv

    assert deployment.ops("resume", "acme")[0] == EXIT_OK
    code, out = deployment.ops("status", "acme")
    assert (code, "running" in out) == (EXIT_OK, True)


@pytest.fixture
def html_server() -> Any:
    """A plain web server on a free local port that answers every request with an HTML 404 page."""
    import http.server
    import threading

    class NotFound(http.server.BaseHTTPRequestHandler):
        def _not_found(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_error(404)

        do_GET = do_POST = _not_found

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.parametrize(
    ("command", "what"),
    [
        (["status"], "not an AWS endpoint or no ordered-ingest stacks there"),
        (["resume", "acme"], "not an AWS endpoint or no ordered-ingest stacks there"),
        (
            ["preflight", "--tenants", "tenants.yaml"],
            "not an AWS endpoint, or one without the account APIs preflight reads (a local run has no quotas)",
        ),
    ],
)
def test_an_endpoint_that_is_not_aws_is_named_in_one_line(html_server, command, what, capsys, monkeypatch):
    """GIVEN --endpoint-url of a web server that answers HTML 404 pages (as moto does for an API
    it does not serve) WHEN ops runs THEN it says in one line that this is not an AWS endpoint
    (or holds no pipeline, or lacks the account APIs preflight reads), exit 5: no HTML, no traceback."""
    from tests.conftest import ROOT

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    code = main(["--endpoint-url", html_server, *command])
    err = capsys.readouterr().err
    assert code == EXIT_NOT_FOUND, err
    assert (
        err
        == f"ops: {html_server}: {what}; its answer is not an AWS API response (check --endpoint-url or --region)\n"
    )


def test_an_endpoint_where_nothing_listens_is_named_in_one_line(capsys, monkeypatch):
    import socket

    with socket.socket() as probe:  # a port that was free a moment ago, closed again: nothing listens
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    code = main(["--endpoint-url", url, "status"])
    err = capsys.readouterr().err
    assert code == EXIT_NOT_FOUND
    assert err.startswith(f"ops: {url}: nothing answers there") and err.count("\n") == 1


def test_pause_and_unpause_all_tenants_show_in_status_and_refuse_what_does_not_apply(deployment):
    """GIVEN a deployed tenant WHEN the operator pauses --all with a reason THEN status says
    paused, since when and why (exit 0: a pause is not a halt); a second pause, a resume and an
    unpause of a tenant not paused are refused (exit 3, nothing changed); naming tenants and
    --all together, or neither, is a usage error; unpause --all ends it."""
    assert deployment.ops("pause", "--reason", "core system maintenance")[0] == EXIT_USAGE  # neither
    assert deployment.ops("pause", "acme", "--all", "--reason", "x")[0] == EXIT_USAGE  # both
    assert deployment.ops("unpause", "acme")[0] == EXIT_NOTHING_TO_DO

    code, out = deployment.ops("pause", "--all", "--reason", "core system maintenance")
    assert code == EXIT_OK and out.startswith("acme: paused (reason: core system maintenance)")
    code, out = deployment.ops("status", "acme", "--json")
    (state,) = json.loads(out)
    assert code == EXIT_OK and state["state"] == "paused"
    assert state["paused"] == {"since": NOW, "reason": "core system maintenance", "file_stopped": False}
    _, table = deployment.ops("status", "acme")
    assert "acme is paused since" in table and "python -m ops unpause acme" in table
    assert deployment.ops("pause", "acme", "--reason", "again")[0] == EXIT_NOTHING_TO_DO
    before = deployment.ledger.read()
    assert deployment.ops("resume", "acme")[0] == EXIT_NOTHING_TO_DO
    assert deployment.ledger.read() == before

    code, out = deployment.ops("unpause", "--all")
    assert code == EXIT_OK and "acme: unpaused" in out
    assert json.loads(deployment.ops("status", "acme", "--json")[1])[0]["state"] == "idle"
