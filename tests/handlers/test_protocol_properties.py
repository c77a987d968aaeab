"""A stateful property test of the gate and ledger protocol (hypothesis `RuleBasedStateMachine`).

It runs the real controller (`Gate`), the real closer and the real operator actions against
moto's DynamoDB, SQS and Step Functions, and interleaves what can happen to a tenant: files
arriving, deliveries and redeliveries, controller crashes between any two of its calls,
executions closing (the close reported, or lost), Step Functions forgetting closed executions,
time passing, a hand-made redrive, resume and skip, a correction replacing a failed file (its
own S3 event delivered before or after, once or twice), a pause (the running file stopping for
it, its execution's end reported to the closer or not) and an unpause.

Invariants, after every step:
* never two executions of the tenant running that the gate or an operator started (a hand-made
  redrive is not one of them: it can never become the ledger's running execution, and the
  register function refuses any other);
* files start in queue order, each at most once, and none while the tenant is halted;
* a replayed event (a new event id for an object version already queued, as `ops reconcile`
  or a DLQ replay sends it) never starts an execution: the version marker lets it go;
* no message is let go without its file having been made current (nothing lost), and no file
  is given up without an operator's reason;
* a correction runs only in its failed file's place (never from its own S3 event), and a file
  stopped for a pause is never recorded as closed;
* nothing new starts while the tenant is paused.

And at the end: once the faults stop, every queued file starts (nothing wedges).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from moto import mock_aws
from moto.stepfunctions.models import stepfunctions_backends

from lambdas import operations
from lambdas.closer import Closer
from lambdas.contract import CLOSED_STATUSES, CloserEnv, ControllerEnv, execution_arn
from lambdas.controller import process_message
from lambdas.ledger import PAUSED, SKIPPED, SUCCEEDED, Ledger, LedgerConflict, version_entry
from lambdas.runtime import BoundLogger, get_logger
from tests.conftest import share_service_models
from tests.handlers.support import REGION, TENANT

pytestmark = (
    pytest.mark.slow
)  # hundreds of protocol steps on moto: make test runs it, make test-fast does not

HOLD = json.dumps({"StartAt": "Hold", "States": {"Hold": {"Type": "Wait", "Seconds": 60, "End": True}}})


class Crash(Exception):
    """The controller's process died here."""


class CrashingClient:
    """A boto3 client that dies after `budget` more successful calls (shared across clients)."""

    def __init__(self, client: Any, fuse: list[int]) -> None:
        self._client, self._fuse = client, fuse

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if not callable(attribute) or name.startswith("_") or name in ("exceptions", "meta"):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._fuse and self._fuse[0] <= 0:
                raise Crash(name)
            result = attribute(*args, **kwargs)
            if self._fuse:
                self._fuse[0] -= 1
            return result

        return call


class LandingBucket:
    """What `ops replace` asks S3: every object version the rules uploaded exists."""

    def head_object(self, Bucket: str, Key: str, VersionId: str | None = None) -> dict[str, Any]:
        return {"VersionId": VersionId, "ContentLength": 1, "ETag": '"e"'}


class Protocol(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.mock = mock_aws()
        self.mock.start()
        share_service_models()
        self.ddb = boto3.client("dynamodb", region_name=REGION)
        self.sqs = boto3.client("sqs", region_name=REGION)
        self.sfn = boto3.client("stepfunctions", region_name=REGION)
        self.sns = boto3.client("sns", region_name=REGION)
        self.ddb.create_table(
            TableName="ledger",
            KeySchema=[
                {"AttributeName": "tenant", "KeyType": "HASH"},
                {"AttributeName": "entry", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "tenant", "AttributeType": "S"},
                {"AttributeName": "entry", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        self.queue = self.sqs.create_queue(
            QueueName="acme-event-queue.fifo",
            Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "30"},
        )["QueueUrl"]
        self.machine = self.sfn.create_state_machine(
            name="acme-file-ingest-workflow", definition=HOLD, roleArn="arn:aws:iam::123456789012:role/wf"
        )["stateMachineArn"]
        topic = self.sns.create_topic(Name="alarms")["TopicArn"]
        self.halt = True
        self.controller_env = ControllerEnv(
            tenant_id=TENANT,
            state_machine_arn=self.machine,
            ledger_table_name="ledger",
            queue_url=self.queue,
            metric_namespace="N",
            on_failure="halt",
            waiting_visibility_seconds=240,
            work_bucket="work",
            landing_bucket="landing",
            landing_prefix="acme/",
        )
        self.closer_env = CloserEnv(
            tenant_id=TENANT,
            state_machine_arn=self.machine,
            ledger_table_name="ledger",
            queue_url=self.queue,
            alarm_topic_arn=topic,
            on_failure="halt",
        )
        self.ledger = Ledger(self.ddb, "ledger", TENANT)
        self.now = 1_700_000_000.0
        self.sent: list[str] = []  # event ids, in queue order
        self.started: list[str] = []  # event ids, in the order their first execution started
        self.ours: set[str] = set()  # executions started by the gate or an operator
        self.hand_made: set[str] = set()
        self.in_flight: dict[str, str] = {}  # message id -> latest receipt handle
        self.let_go: dict[str, str] = {}  # event id -> why its message was deleted
        self.skip_reasons: dict[str, str] = {}
        self.forgotten: set[str] = set()
        self.replays: dict[str, str] = {}  # replayed event id -> the event id it replays
        self.corrections: dict[str, str] = {}  # a correction's execution -> the file it replaced
        self.correction_events: dict[str, tuple[str, str]] = {}  # its own S3 event id -> (key, version id)
        self.uploads = 0  # corrections uploaded
        self.paused_with: set[str] | None = None  # while paused: the executions there were at the pause

    def teardown(self) -> None:
        self.mock.stop()

    # -- helpers ---------------------------------------------------------------------------------

    def log(self) -> BoundLogger:
        return BoundLogger(get_logger("protocol"), {"tenant": TENANT})

    def executions(self) -> dict[str, str]:
        machine = stepfunctions_backends["123456789012"][REGION].describe_state_machine(self.machine)
        return {e.name: e.status for e in machine.executions}

    def set_status(self, name: str, status: str) -> None:
        backend = stepfunctions_backends["123456789012"][REGION]
        backend.describe_execution(execution_arn(self.machine, name)).status = status

    def note_starts(self) -> None:
        for name, _ in sorted(self.executions().items()):
            if name in self.hand_made:
                continue
            if self.paused_with is not None:
                assert name in self.paused_with, f"{name} started while the tenant was paused"
            self.ours.add(name)
            file_id = name.split("-r")[0]
            assert file_id not in self.correction_events, (
                f"the correction's own event {file_id} started it again"
            )
            if file_id in self.corrections:
                continue  # in its failed file's place
            assert file_id not in self.replays, (
                f"replay {file_id} of {self.replays.get(file_id)} started an execution"
            )
            if file_id not in self.started:
                self.started.append(file_id)

    def close(self, name: str, status: str, *, reported: bool) -> None:
        if reported:
            closer = Closer(
                config=self.closer_env,
                ledger=self.ledger,
                sqs=self.sqs,
                sns=self.sns,
                sfn=self.sfn,
                now=self.now,
                log=self.log(),
            )
            closer.handle({"execution_name": name, "status": status, "error": "E", "cause": "c"})
        self.set_status(name, status)

    def running_ours(self) -> list[str]:
        return [n for n, s in self.executions().items() if s == "RUNNING" and n in self.ours]

    # -- rules -------------------------------------------------------------------------------------

    @initialize()
    def two_files_are_queued(self) -> None:
        self.a_file_arrives()
        self.a_file_arrives()

    def send(self, event_id: str, key: str, version_id: str = "v1") -> None:
        body = json.dumps(
            {
                "id": event_id,
                "source": "aws.s3",
                "detail-type": "Object Created",
                "time": "2024-01-01T00:00:00Z",
                "detail": {
                    "bucket": {"name": "landing"},
                    "object": {"key": key, "size": 1, "version-id": version_id},
                },
            }
        )
        self.sqs.send_message(
            QueueUrl=self.queue, MessageBody=body, MessageGroupId=TENANT, MessageDeduplicationId=event_id
        )

    @rule()
    def a_file_arrives(self) -> None:
        event_id = f"evt{len(self.sent):03d}"
        self.send(event_id, f"acme/{event_id}.csv")
        self.sent.append(event_id)

    @rule(data=st.data())
    def an_operator_replays_a_queued_or_processed_file(self, data: st.DataObject) -> None:
        """`ops reconcile --replay` or a DLQ replay: the same object version, a new event id."""
        original = data.draw(st.sampled_from(self.sent))
        replay = f"rpl{len(self.replays):03d}"
        self.send(replay, f"acme/{original}.csv")
        self.replays[replay] = original

    @rule()
    def the_head_message_is_delivered(self) -> None:
        self.deliver(None)

    @rule(after_calls=st.integers(min_value=0, max_value=6))
    def the_controller_crashes_while_handling_the_head_message(self, after_calls: int) -> None:
        """The process dies after `after_calls` successful AWS calls: between any two steps."""
        self.deliver(after_calls)

    def deliver(self, crash_after: int | None) -> None:
        messages = self.sqs.receive_message(
            QueueUrl=self.queue, MaxNumberOfMessages=1, AttributeNames=["All"]
        ).get("Messages", [])
        if not messages:
            return
        (message,) = messages
        self.in_flight[message["MessageId"]] = message["ReceiptHandle"]
        record = {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": {"SentTimestamp": message["Attributes"]["SentTimestamp"]},
        }
        fuse = [crash_after] if crash_after is not None else []
        clients = {
            name: CrashingClient(c, fuse)
            for name, c in (("sfn", self.sfn), ("ddb", self.ddb), ("sqs", self.sqs))
        }
        try:
            result = process_message(
                record,
                config=self.controller_env,
                now=lambda: self.now,
                log=self.log(),
                sleep=lambda s: None,
                **clients,
            )
        except Crash:
            self.note_starts()
            return  # the message stays in flight until its visibility ends
        self.note_starts()
        if not result["batchItemFailures"]:
            event_id = json.loads(message["Body"])["id"]
            assert self.ledger_knows(event_id), f"{event_id} let go without ever being made current"
            self.let_go[event_id] = result["outcome"]
            self.sqs.delete_message(QueueUrl=self.queue, ReceiptHandle=message["ReceiptHandle"])
            self.in_flight.pop(message["MessageId"], None)

    def ledger_knows(self, event_id: str) -> bool:
        entry = f"event#{event_id}"
        if event_id in self.replays:  # a replay is let go because its version was made current
            entry = version_entry("landing", f"acme/{self.replays[event_id]}.csv", "v1")
        if event_id in self.correction_events:  # so is a correction's own event
            entry = version_entry("landing", *self.correction_events[event_id])
        item = self.ddb.get_item(TableName="ledger", Key={"tenant": {"S": TENANT}, "entry": {"S": entry}})
        return "Item" in item

    @rule(seconds=st.sampled_from([40, 1, 250, 400, 4000]))
    def time_passes(self, seconds: int) -> None:
        """Visibility timeouts end (a received message becomes visible again)."""
        self.now += seconds
        if seconds >= 30:
            for message_id, receipt in list(self.in_flight.items()):
                with contextlib.suppress(Exception):
                    self.sqs.change_message_visibility(
                        QueueUrl=self.queue, ReceiptHandle=receipt, VisibilityTimeout=0
                    )
                self.in_flight.pop(message_id, None)

    @rule(
        status=st.sampled_from(["SUCCEEDED", "SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"]),
        reported=st.booleans(),
    )
    def the_running_execution_closes(self, status: str, reported: bool) -> None:
        for name in self.running_ours()[:1]:
            self.close(name, status, reported=reported)

    @rule()
    def step_functions_forgets_closed_executions(self) -> None:
        backend = stepfunctions_backends["123456789012"][REGION]
        machine = backend.describe_state_machine(self.machine)
        self.forgotten |= {e.name for e in machine.executions if e.status in CLOSED_STATUSES}
        machine.executions = [e for e in machine.executions if e.status not in CLOSED_STATUSES]

    @rule(event_reaches_closer=st.booleans())
    def an_operator_redrives_a_failed_execution_by_hand(self, event_reaches_closer: bool) -> None:
        failed = [n for n, s in self.executions().items() if s in CLOSED_STATUSES and s != "SUCCEEDED"]
        if not failed:
            return
        name = failed[0]
        before = self.ledger.read()
        if before.execution == name and before.running:
            # Its failure was never recorded: to the ledger it still runs, and the redrive just
            # continues it (the one execution of the current file).
            self.set_status(name, "RUNNING")
            return
        self.hand_made.add(name)
        self.ours.discard(name)
        self.set_status(name, "RUNNING")
        if event_reaches_closer:
            Closer(
                config=self.closer_env,
                ledger=self.ledger,
                sqs=self.sqs,
                sns=self.sns,
                sfn=self.sfn,
                now=self.now,
                log=self.log(),
            ).handle({"execution_name": name, "status": "RUNNING"})
        position = self.ledger.read()
        assert not (position.execution == name and position.running), "a redrive became the current execution"

    @rule()
    def an_operator_resumes(self) -> None:
        try:
            operations.resume(self.ledger, self.sfn, self.machine, self.now)
        except (operations.NothingToDo, LedgerConflict):
            return
        self.note_starts()

    @rule(reason=st.sampled_from(["bad file, the tenant re-sends it", "agreed with the core system team"]))
    def an_operator_skips(self, reason: str) -> None:
        position = self.ledger.read()
        try:
            operations.skip(self.ledger, self.sqs, self.queue, reason, self.now)
        except (operations.NothingToDo, LedgerConflict):
            return
        self.skip_reasons[position.file_id] = reason

    @rule(events=st.integers(min_value=0, max_value=2), before=st.booleans())
    def a_correction_replaces_the_failed_file(self, events: int, before: bool) -> None:
        """The tenant uploads the corrected file (a new version of its key), its S3 event reaching
        the queue `events` times, before or after the operator's `ops replace`."""
        position = self.ledger.read()
        if position.file is None or not (position.status == "FAILED" and position.halted) or position.paused:
            return  # a tenant uploads a correction for a file that halted it
        self.uploads += 1
        key, version = position.file["key"], f"c{self.uploads:03d}"
        own_events = [f"cor{self.uploads:03d}{n}" for n in range(events)]
        for event_id in own_events:
            self.correction_events[event_id] = (key, version)
        if before:
            for event_id in own_events:
                self.send(event_id, key, version)
        # A halted tenant's failed file can always be replaced by a new version of it.
        outcome = operations.replace(
            self.ledger,
            self.sfn,
            LandingBucket(),
            self.machine,
            landing_prefix="acme/",
            key=key,
            version_id=version,
            now=self.now,
        )
        original = (position.replaces or {}).get("file_event") or position.file_id
        self.corrections[str(outcome.execution)] = str(original)
        self.note_starts()
        if not before:
            for event_id in own_events:
                self.send(event_id, key, version)

    @rule(reason=st.sampled_from(["core system maintenance", "planned outage"]))
    def an_operator_pauses(self, reason: str) -> None:
        try:
            operations.pause(self.ledger, reason, self.now)
        except (operations.NothingToDo, LedgerConflict):
            return
        self.paused_with = set(self.executions())

    @rule(reported=st.booleans())
    def the_running_file_stops_for_the_pause(self, reported: bool) -> None:
        """The register function sees the pause: the position becomes PAUSED, the execution ends
        SUCCEEDED at FilePaused without a close; the status rule may still report its end."""
        position = self.ledger.read()
        if not (
            position.paused_at is not None and position.running and position.execution in self.running_ours()
        ):
            return
        self.ledger.record_pause(position.execution)
        self.set_status(position.execution, "SUCCEEDED")
        if reported:
            Closer(
                config=self.closer_env,
                ledger=self.ledger,
                sqs=self.sqs,
                sns=self.sns,
                sfn=self.sfn,
                now=self.now,
                log=self.log(),
            ).handle({"execution_name": position.execution, "status": "SUCCEEDED"})
        after = self.ledger.read()
        assert (after.status, after.execution) == (PAUSED, position.execution), (
            "a paused file was recorded as closed"
        )

    @rule()
    def an_operator_unpauses(self) -> None:
        try:
            operations.unpause(self.ledger, self.sfn, self.sqs, self.machine, self.queue, self.now)
        except (operations.NothingToDo, LedgerConflict):
            return
        self.paused_with = None
        self.note_starts()

    # -- invariants ----------------------------------------------------------------------------------

    @invariant()
    def never_two_of_our_executions_run_at_once(self) -> None:
        running = self.running_ours()
        assert len(running) <= 1, f"two executions of the tenant running: {running}"

    @invariant()
    def files_start_in_queue_order_each_once(self) -> None:
        assert self.started == self.sent[: len(self.started)], (self.started, self.sent)

    @invariant()
    def the_position_keeps_the_protocols_rules(self) -> None:
        """One read of the position after every step (a read per rule cost a third of this test)."""
        position = self.ledger.read()
        # Nothing starts after a file that halted the tenant.
        if position.halted:
            assert self.started and self.started[-1] == position.file_id, (
                f"{self.started[-1]} started after {position.file_id} halted the tenant"
            )
        # Nothing is given up without an operator's reason.
        if position.status == SKIPPED:
            assert self.skip_reasons.get(position.file_id) == position.skip_reason, (
                f"{position.file_id} skipped without the operator's reason"
            )
        # A file stopped for a pause stays stopped until unpause; nothing succeeds on its own.
        if position.status == PAUSED:
            assert position.paused_at is not None, "PAUSED without the pause"
        if position.status == SUCCEEDED and position.execution in self.corrections:
            assert self.corrections[position.execution] in self.started, (
                "a correction ran for a file never started"
            )
        # A redrive is never the running execution.
        assert not (position.running and position.execution in self.hand_made), (
            f"the hand-made redrive {position.execution} became the running execution"
        )

    # -- liveness ------------------------------------------------------------------------------------

    def drain(self) -> None:
        """No more faults: deliver, finish, resume; every queued file must start."""
        for _ in range(20 * (len(self.sent) + 2)):
            if set(self.sent) <= set(self.started) and not self.running_ours():
                break
            for name in self.running_ours():
                self.close(name, "SUCCEEDED", reported=True)
            for name in [n for n, s in self.executions().items() if s == "RUNNING" and n in self.hand_made]:
                self.set_status(name, "ABORTED")  # the closer stopped it (or will, when its event arrives)
            position = self.ledger.read()
            if position.paused:
                self.paused_with = None
                operations.unpause(self.ledger, self.sfn, self.sqs, self.machine, self.queue, self.now)
                self.note_starts()
            elif position.halted:
                operations.resume(self.ledger, self.sfn, self.machine, self.now)
                self.note_starts()
            self.time_passes(400)
            self.deliver(None)
        assert set(self.sent) <= set(self.started), (
            f"never started: {sorted(set(self.sent) - set(self.started))}"
        )


def test_the_protocol_keeps_its_invariants_and_never_wedges(monkeypatch: pytest.MonkeyPatch) -> None:
    # The one place a file becomes current: it must never be on a halted tenant (the claim's
    # condition on `seq` makes the position it was decided on the position it writes over).
    claim = Ledger.claim

    def claim_unless_halted(self: Ledger, observed: Any, *args: Any, **kwargs: Any) -> Any:
        assert not observed.halted, f"file claimed while the tenant is halted on {observed.file_id}"
        assert not observed.paused, "file claimed while the tenant is paused"
        return claim(self, observed, *args, **kwargs)

    monkeypatch.setattr(Ledger, "claim", claim_unless_halted)

    class Drained(Protocol):
        def teardown(self) -> None:
            try:
                self.drain()
            finally:
                super().teardown()

    Drained.TestCase.settings = settings(
        max_examples=40,
        stateful_step_count=30,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    Drained.TestCase().runTest()
