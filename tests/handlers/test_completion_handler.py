"""The completion entry point (lambdas/completion.py) against a real callback task on moto.

The state machine is the workflow's own `WaitForCompletion` state (built by
`pipeline_constructs.definitions`, synthesized once), between a start and two ends, so the token
the handler answers is one Step Functions really waits on.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from lambdas import completion
from lambdas.contract import (
    COMPLETION_ANSWERED_AT_ATTRIBUTE,
    COMPLETION_REJECTED_ERROR,
    COMPLETION_SINCE_ATTRIBUTE,
    MAX_REJECT_REASON,
)
from lambdas.runtime import BoundLogger, get_logger
from tests.conftest import moto_executing_state_machines
from tests.handlers.support import LEDGER_TABLE, REGION, TENANT

EVENT_ID = "event-0001"
FILE_REF = {"event_id": EVENT_ID, "bucket": "landing", "key": "acme/a.csv", "version_id": "v1"}


def _definition() -> dict[str, Any]:
    """Start -> WaitForCompletion -> Confirmed; its catches -> CompletionTimedOut / RecordFailure
    (the workflow's own completion states, definitions.py)."""
    from pipeline_constructs.completion_states import CompletionWait, completion_states

    # Far longer than any test here takes, also on a starved machine (a 20 s heartbeat ran out
    # under load once: the execution failed with CompletionTimedOut before the test answered).
    # No test lets it run out: each ends the wait (an answer, or the fixture's task failure).
    wait = CompletionWait(timeout_seconds=900, heartbeat_seconds=600, ledger_table_name=LEDGER_TABLE)
    return {
        "StartAt": "Start",
        "States": {
            "Start": {"Type": "Pass", "Next": "WaitForCompletion"},
            **completion_states("aws", wait, next_state="Confirmed", record_failure="RecordFailure"),
            "Confirmed": {"Type": "Succeed"},
            "RecordFailure": {"Type": "Pass", "Next": "IngestFailed"},
            "IngestFailed": {"Type": "Fail", "ErrorPath": "$.error.Error"},
        },
    }


DEFINITION = _definition()


@pytest.fixture
def aws() -> Iterator[None]:
    """moto with executions that really run (the callback task waits for its token)."""
    with moto_executing_state_machines(REGION):
        yield


@pytest.fixture
def waiting(ledger_table: str, ddb: Any, sfn: Any) -> Iterator[dict[str, str]]:
    """A tenant whose current file (execution `EVENT_ID`) waits in WaitForCompletion."""
    ddb.put_item(
        TableName=ledger_table,
        Item={
            "tenant": {"S": TENANT},
            "entry": {"S": "position"},
            "seq": {"N": "1"},
            "execution": {"S": EVENT_ID},
            "status": {"S": "RUNNING"},
            "file_ref": {"S": json.dumps(FILE_REF)},
            "record_count": {"N": "7"},
        },
    )
    role = boto3.client("iam", region_name=REGION).create_role(RoleName="sfn", AssumeRolePolicyDocument="{}")
    machine = sfn.create_state_machine(
        name="acme-file-ingest-workflow", definition=json.dumps(DEFINITION), roleArn=role["Role"]["Arn"]
    )["stateMachineArn"]
    execution = sfn.start_execution(
        stateMachineArn=machine, name=EVENT_ID, input=json.dumps({"tenant": TENANT})
    )["executionArn"]
    token = wait_until(lambda: position(ddb).get("completion_token"), "the task token on the position")["S"]
    # moto arms the task's heartbeat only after the UpdateItem that wrote the token: an answer in
    # between is kept, but the wait then sleeps out the whole heartbeat (600 s), and the fixture's
    # end could not stop it (seen under load). A heartbeat is accepted once it is armed.
    wait_until(lambda: heartbeat_accepted(sfn, token), "the callback task to arm its heartbeat")
    yield {"execution_arn": execution}
    # moto's callback wait ignores StopExecution until its timeout: end the wait, so that the
    # execution's thread ends with the test.
    with contextlib.suppress(sfn.exceptions.ClientError):
        sfn.send_task_failure(taskToken=token, error="TestEnded")


def wait_until(predicate: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def heartbeat_accepted(sfn: Any, token: str) -> bool:
    try:
        sfn.send_task_heartbeat(taskToken=token)
    except sfn.exceptions.InvalidToken:
        return False
    return True


def position(ddb: Any) -> dict[str, Any]:
    return ddb.get_item(TableName=LEDGER_TABLE, Key={"tenant": {"S": TENANT}, "entry": {"S": "position"}})[
        "Item"
    ]


def closed(sfn: Any, execution_arn: str) -> dict[str, Any]:
    return wait_until(
        lambda: (d := sfn.describe_execution(executionArn=execution_arn))["status"] != "RUNNING" and d,
        "the execution to close",
    )


def call(request: Any, ddb: Any, sfn: Any) -> dict[str, Any]:
    return dict(
        completion.answer(
            request,
            tenant_id=TENANT,
            table=LEDGER_TABLE,
            ddb=ddb,
            sfn=sfn,
            now=1000.0,
            log=BoundLogger(get_logger("completion"), {"tenant": TENANT}),
        )
    )


def test_confirm_ends_the_wait_and_the_file_goes_on(waiting, ddb, sfn) -> None:
    """GIVEN a file waiting for the core system WHEN the core system confirms it by its id
    THEN the execution leaves the wait successfully and the ledger keeps the answer."""
    answer = call({"action": "confirm", "tenant": TENANT, "file": EVENT_ID}, ddb, sfn)

    assert answer == {"status": 200, "message": f"file {EVENT_ID} confirmed"}
    assert closed(sfn, waiting["execution_arn"])["status"] == "SUCCEEDED"
    assert position(ddb)["completion_answer"] == {"S": "confirmed"}


def test_reject_fails_the_file_with_the_reason(waiting, ddb, sfn) -> None:
    """GIVEN a waiting file WHEN the core system rejects it with a reason THEN the execution
    fails with CompletionRejected and the ledger keeps the reason (moto drops SendTaskFailure's
    cause; AWS keeps it in the execution too)."""
    answer = call(
        {"action": "reject", "tenant": TENANT, "file": EVENT_ID, "reason": "totals do not match"}, ddb, sfn
    )

    assert answer["status"] == 200
    assert closed(sfn, waiting["execution_arn"])["error"] == COMPLETION_REJECTED_ERROR
    assert position(ddb)["completion_reason"] == {"S": "totals do not match"}


def test_waiting_names_the_file_and_never_the_token(waiting, ddb, sfn) -> None:
    """GIVEN a waiting file WHEN the core system asks which file waits THEN it gets the file's
    id, key, version and record count, and nothing of the task token."""
    answer = call({"action": "waiting", "tenant": TENANT}, ddb, sfn)

    assert answer["status"] == 200
    assert {k: answer["file"][k] for k in ("file", "key", "version_id", "record_count")} == {
        "file": EVENT_ID,
        "key": "acme/a.csv",
        "version_id": "v1",
        "record_count": 7,
    }
    since = position(ddb)[COMPLETION_SINCE_ATTRIBUTE]["S"]
    assert since and answer["file"]["waiting_since"] == since  # when the wait began
    assert position(ddb)["completion_token"]["S"] not in json.dumps(answer)


def test_heartbeat_is_accepted_while_the_file_waits(waiting, ddb, sfn) -> None:
    answer = call({"action": "heartbeat", "tenant": TENANT, "file": EVENT_ID}, ddb, sfn)

    assert answer == {"status": 200, "message": f"heartbeat recorded for file {EVENT_ID}"}
    assert sfn.describe_execution(executionArn=waiting["execution_arn"])["status"] == "RUNNING"


def test_fails_when_the_tenant_is_another(waiting, ddb, sfn) -> None:
    answer = call({"action": "confirm", "tenant": "globex", "file": EVENT_ID}, ddb, sfn)

    assert answer == {
        "status": 403,
        "message": "this is tenant acme's completion entry point, not tenant 'globex''s",
    }
    assert sfn.describe_execution(executionArn=waiting["execution_arn"])["status"] == "RUNNING"


def test_fails_when_the_file_is_not_the_current_one(waiting, ddb, sfn) -> None:
    answer = call({"action": "confirm", "tenant": TENANT, "file": "event-0000"}, ddb, sfn)

    assert answer == {"status": 404, "message": "file 'event-0000' is not tenant acme's current file"}
    assert sfn.describe_execution(executionArn=waiting["execution_arn"])["status"] == "RUNNING"


def test_fails_when_the_file_was_already_answered(waiting, ddb, sfn) -> None:
    """GIVEN a confirmed file WHEN a rejection of it follows THEN it is refused: the first answer stands."""
    call({"action": "confirm", "tenant": TENANT, "file": EVENT_ID}, ddb, sfn)
    closed(sfn, waiting["execution_arn"])

    answer = call({"action": "reject", "tenant": TENANT, "file": EVENT_ID, "reason": "late"}, ddb, sfn)

    assert answer == {"status": 409, "message": f"file {EVENT_ID} was already confirmed"}
    assert sfn.describe_execution(executionArn=waiting["execution_arn"])["status"] == "SUCCEEDED"


def test_fails_when_the_token_belongs_to_an_earlier_attempt(waiting, ddb, sfn) -> None:
    """GIVEN the file was resumed (a new execution) and has not reached its wait yet WHEN the
    core system confirms THEN it is refused: the token on the position is the old attempt's."""
    ddb.update_item(
        TableName=LEDGER_TABLE,
        Key={"tenant": {"S": TENANT}, "entry": {"S": "position"}},
        UpdateExpression="SET execution = :e",
        ExpressionAttributeValues={":e": {"S": "resumed-1"}},
    )

    answer = call({"action": "confirm", "tenant": TENANT, "file": EVENT_ID}, ddb, sfn)

    assert answer == {
        "status": 409,
        "message": f"file {EVENT_ID} is not waiting for an answer yet (it is being sent again)",
    }


def test_fails_when_the_file_is_no_longer_running(waiting, ddb, sfn) -> None:
    ddb.update_item(
        TableName=LEDGER_TABLE,
        Key={"tenant": {"S": TENANT}, "entry": {"S": "position"}},
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":s": {"S": "FAILED"}},
    )

    answer = call({"action": "confirm", "tenant": TENANT, "file": EVENT_ID}, ddb, sfn)

    assert answer == {
        "status": 409,
        "message": f"file {EVENT_ID} is not waiting for an answer (its state: FAILED)",
    }


def test_fails_when_step_functions_no_longer_waits_on_the_token(waiting, ddb, sfn) -> None:
    """GIVEN the wait ended without the ledger knowing (here: the token answered behind the
    entry point's back; on AWS also a timeout) WHEN the core system confirms THEN Step
    Functions refuses the token, the answer says so and the ledger records no answer."""
    sfn.send_task_success(taskToken=position(ddb)["completion_token"]["S"], output="{}")
    closed(sfn, waiting["execution_arn"])

    answer = call({"action": "confirm", "tenant": TENANT, "file": EVENT_ID}, ddb, sfn)

    assert answer == {
        "status": 409,
        "message": "the file is no longer waiting for an answer (timed out or closed)",
    }
    assert "completion_answer" not in position(ddb)


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (
            {"action": "approve", "tenant": TENANT, "file": EVENT_ID},
            "action 'approve' is not one of waiting, confirm, reject, heartbeat",
        ),
        (
            {"action": "confirm", "tenant": TENANT},
            "'file' must be the waiting file's id (as 'waiting' returns it)",
        ),
        (
            {"action": "reject", "tenant": TENANT, "file": EVENT_ID},
            "a rejection needs a 'reason' (a short summary, no record content)",
        ),
        (
            {"action": "reject", "tenant": TENANT, "file": EVENT_ID, "reason": "x" * (MAX_REJECT_REASON + 1)},
            f"'reason' is {MAX_REJECT_REASON + 1} characters; at most {MAX_REJECT_REASON}",
        ),
        (
            {"action": "confirm", "tenant": TENANT, "file": EVENT_ID, "reason": "fine"},
            "'reason' goes with 'reject' only",
        ),
        ({"action": "confirm", "tenant": TENANT, "file": EVENT_ID, "token": "x"}, "unknown field(s) token"),
        (
            {"action": "confirm", "tenant": TENANT, "file": ""},
            "'file' must be the waiting file's id (as 'waiting' returns it)",
        ),
        (
            {"action": "confirm", "tenant": TENANT, "file": "x" * 257},
            "'file' must be the waiting file's id (as 'waiting' returns it)",
        ),
        ("confirm", "the request must be a JSON object with 'action' and 'tenant'"),
    ],
)
def test_fails_when_the_request_is_malformed(waiting, ddb, sfn, request_, message) -> None:
    answer = call(request_, ddb, sfn)

    assert answer == {"status": 400, "message": message}
    assert sfn.describe_execution(executionArn=waiting["execution_arn"])["status"] == "RUNNING"


def test_a_refusal_is_logged_as_a_warning_not_an_error(waiting, ddb, sfn, logs) -> None:
    """A caller's mistake must not page on-call (the ERROR-log alarm)."""
    call({"action": "confirm", "tenant": TENANT, "file": "nope"}, ddb, sfn)

    assert not logs.errors()
    assert any("refused" in message for message in logs.at(30))


class SpyStepFunctions:
    """The Step Functions client, keeping what each answer to a task token carried."""

    def __init__(self, sfn: Any) -> None:
        self._sfn, self.calls = sfn, []

    def send_task_success(self, **kwargs: Any) -> Any:
        self.calls.append(("send_task_success", kwargs))
        return self._sfn.send_task_success(**kwargs)

    def send_task_failure(self, **kwargs: Any) -> Any:
        self.calls.append(("send_task_failure", kwargs))
        return self._sfn.send_task_failure(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sfn, name)


def test_a_confirmation_tells_step_functions_confirmed_and_the_ledger_when(waiting, ddb, sfn) -> None:
    """GIVEN a waiting file WHEN confirmed THEN the task's output is {"completion": "confirmed"}
    (what the workflow reads) and the ledger keeps when the answer came."""
    spy = SpyStepFunctions(sfn)
    call({"action": "confirm", "tenant": TENANT, "file": EVENT_ID}, ddb, spy)
    ((operation, kwargs),) = spy.calls
    assert (operation, json.loads(kwargs["output"])) == ("send_task_success", {"completion": "confirmed"})
    assert position(ddb)[COMPLETION_ANSWERED_AT_ATTRIBUTE] == {"N": "1000.0"}
    assert position(ddb)["completion_reason"] == {"S": "-"}  # a confirmation has no reason


def test_a_rejection_gives_step_functions_its_reason_cleaned_of_control_characters(waiting, ddb, sfn) -> None:
    """GIVEN a reason of exactly MAX_REJECT_REASON characters holding a tab, a NUL and a C1
    control next to letters of other scripts WHEN the file is rejected THEN the failure's cause
    and the ledger hold it with each control character a space; U+00A0 and up are kept."""
    text = "totals\tdo\x00not\x85match:\x9fé\u00a0ü"
    reason = text + "." * (MAX_REJECT_REASON - len(text))
    spy = SpyStepFunctions(sfn)
    answer = call({"action": "reject", "tenant": TENANT, "file": EVENT_ID, "reason": reason}, ddb, spy)
    cleaned = ("totals do not match: é\u00a0ü" + "." * (MAX_REJECT_REASON - len(text))).strip()
    assert answer["status"] == 200
    ((operation, kwargs),) = spy.calls
    assert (operation, kwargs["error"], kwargs["cause"]) == (
        "send_task_failure",
        COMPLETION_REJECTED_ERROR,
        cleaned,
    )
    assert position(ddb)["completion_reason"] == {"S": cleaned}


def test_a_file_id_of_256_characters_is_looked_up(waiting, ddb, sfn) -> None:
    """The longest id accepted is 256 characters: it is looked up (not the current file here)."""
    answer = call({"action": "confirm", "tenant": TENANT, "file": "x" * 256}, ddb, sfn)
    assert answer["status"] == 404


def test_waiting_finds_no_file_once_it_was_answered_or_when_the_position_names_none(
    waiting, ddb, sfn
) -> None:
    """GIVEN the waiting file WHEN it was answered THEN `waiting` finds nothing; nor when the
    position holds a token but no current file."""
    call({"action": "confirm", "tenant": TENANT, "file": EVENT_ID}, ddb, sfn)
    assert call({"action": "waiting", "tenant": TENANT}, ddb, sfn)["status"] == 404
    ddb.update_item(
        TableName=LEDGER_TABLE,
        Key={"tenant": {"S": TENANT}, "entry": {"S": "position"}},
        UpdateExpression="REMOVE file_ref, completion_answer",
    )
    assert call({"action": "waiting", "tenant": TENANT}, ddb, sfn) == {
        "status": 404,
        "message": f"no file of tenant {TENANT} waits for an answer",
    }
