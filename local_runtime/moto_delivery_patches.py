"""The patches of how moto delivers work in the local run: Lambda invocations go to the worker
processes, S3 events get fresh ids and keys encoded as S3 writes them, EventBridge targets
deliver as on AWS, and a FIFO group waits while a message of it is in flight. Each closes a gap
of moto 5.2.5 (README row, canary in tests/test_moto_gaps.py); `moto_patches()` in
moto_server.py applies them.
"""

from __future__ import annotations

import copy
import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

from lambdas import contract
from local_runtime.lambda_pool import InvocationResult
from local_runtime.moto_patching import patched

#: Runs one Lambda invocation: (function name, its environment variables in moto, event) -> result.
LambdaInvoker = Callable[[str, dict[str, str], Any], InvocationResult]


def _lambda_runs_local_workers(invoker: LambdaInvoker) -> Any:
    """Every invocation runs in a worker process (`lambda_pool.py`), not in moto's Docker."""
    from moto.awslambda.models import LambdaFunction

    def _invoke_lambda(self: Any, event: Any = None) -> tuple[str, bool, str]:
        if event is None or isinstance(event, (str, bytes)):  # Invoke's body; a rule target's event
            event = json.loads(event or "{}")
        result = invoker(self.function_name, dict(self.environment_vars or {}), event)
        return result.payload, result.errored, ""  # what moto expects: (payload, errored, logs)

    return patched(LambdaFunction, "_invoke_lambda", _invoke_lambda)


class _FreshIdEvent(dict):  # type: ignore[type-arg]  # moto's message is an untyped dict
    """moto's EventBridge base message, of which each deep copy gets a new id."""

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        event = {key: copy.deepcopy(value, memo) for key, value in self.items()}
        event["id"] = str(uuid.uuid4())
        return event


def _s3_events_get_fresh_ids() -> Any:
    """Each S3 EventBridge event gets its own id (moto deep-copies one constant for all)."""
    import moto.events.utils as events_utils

    # moto.s3.notifications imports the constant on every event; moto.events.models bound it
    # at import, so only S3-originated events are affected.
    return patched(events_utils, "_BASE_EVENT_MESSAGE", _FreshIdEvent(events_utils._BASE_EVENT_MESSAGE))


def s3_event_key(key: str) -> str:
    """A key as S3 writes it into an event: a space as "+", every character but letters, digits
    and `/ . _ -` as %XX of its UTF-8 bytes. The handlers decode it (`contract.s3_key_from_event`)."""
    safe = contract.S3_EVENT_KEY_SAFE_CHARACTERS
    return "".join(
        c if c in safe else "+" if c == " " else "".join(f"%{byte:02X}" for byte in c.encode("utf-8"))
        for c in key
    )


class _EventKey:
    """A moto S3 key whose `name` reads as S3 writes it into an event; the rest is the key's."""

    def __init__(self, key: Any) -> None:
        self._key = key

    @property
    def name(self) -> str:
        return s3_event_key(self._key.name)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._key, attribute)


def _s3_event_keys_encoded() -> Any:
    """S3 EventBridge events carry the key URL-encoded, as S3 writes it (moto: the raw key)."""
    from moto.s3 import notifications

    original = notifications._send_event_bridge_message

    def send(account_id: str, bucket: Any, event_name: str, key: Any) -> None:
        original(account_id, bucket, event_name, _EventKey(key))

    # `send_event` looks the function up in its module on every event.
    return patched(notifications, "_send_event_bridge_message", send)


_forwarding = threading.local()  # `active` while `_forward` hands an event to another bus


def _event_bus_targets_forward_the_event() -> Any:
    """Rules deliver as EventBridge does: an AWS service's event reaches the default bus's rules
    only; an event-bus target passes the event itself (a fresh id) to the receiving bus's rules,
    and never on to a third bus; a Lambda target is invoked asynchronously. Other targets: moto."""
    from moto.events import models
    from moto.utilities.arns import parse_arn

    original = models.Rule.send_to_targets

    def ours(target: dict[str, Any]) -> bool:
        return ":event-bus/" in target["Arn"] or ":lambda:" in target["Arn"]

    def send_to_targets(self: Any, original_event: Any, transform_input: bool = True) -> None:
        forwarded = getattr(_forwarding, "active", False)
        if (
            str(original_event.get("source")).startswith("aws.")
            and self.event_bus_name != "default"
            and not forwarded
        ):
            return None  # moto's S3 sends its events to every bus
        handled = [t for t in self.targets if ours(t)]
        if not handled:
            return original(self, original_event, transform_input)
        if not self.event_pattern.matches_event(original_event):
            return None
        others = copy.copy(self)
        others.targets = [t for t in self.targets if not ours(t)]
        if others.targets:
            original(others, original_event, transform_input)
        for target in handled:
            if ":lambda:" in target["Arn"]:
                _invoke_async(target["Arn"], copy.deepcopy(dict(original_event)))
            elif not forwarded:
                _forward(models, parse_arn(target["Arn"]), original_event)
        return None

    return patched(models.Rule, "send_to_targets", send_to_targets)


def _forward(models: Any, bus_arn: Any, original_event: Any) -> None:
    bus = models.events_backends[bus_arn.account][bus_arn.region].describe_event_bus(bus_arn.resource_id)
    event = {**copy.deepcopy(dict(original_event)), "id": str(uuid.uuid4())}
    _forwarding.active = True
    try:
        for rule in list(bus.rules.values()):
            rule.send_to_targets(copy.deepcopy(event), transform_input=False)
    finally:
        _forwarding.active = False


def _invoke_async(function_arn: str, event: dict[str, Any]) -> None:
    """Through the workers (`_lambda_runs_local_workers`); the caller never waits for it."""
    from moto.awslambda.models import lambda_backends
    from moto.utilities.arns import parse_arn

    arn = parse_arn(function_arn)
    function = lambda_backends[arn.account][arn.region].get_function(arn.resource_id.split(":")[0])
    threading.Thread(
        target=function._invoke_lambda,
        args=(event,),
        daemon=True,
        name=f"eventbridge-{function.function_name}",
    ).start()


def _fifo_groups_wait_for_messages_in_flight() -> Any:
    """A FIFO queue delivers no message of a group while an earlier one of it is in flight
    (received, not deleted, its visibility not over), and then the group's oldest first, as SQS
    does. moto keeps "in flight" in a set of its own: a ChangeMessageVisibility to 0 (a close's
    hand-off) takes the message out of it, and a later one with its receipt handle (a controller
    still deciding on that message waits: moto accepts it, SQS answers MessageNotInflight) hides
    it again without putting it back, so the group's next file went out while the one before
    it was in flight; and a receive skips a group's visible oldest message while a later one
    whose visibility ended is still in the set. Before each receive of a FIFO queue, the set
    holds exactly the received messages that are not visible."""
    from moto.sqs.models import SQSBackend

    receive = SQSBackend.receive_message

    def receive_message(self: Any, queue_name: str, *args: Any, **kwargs: Any) -> Any:
        queue = self.get_queue(queue_name)
        if queue.fifo_queue:
            in_flight = {m for m in list(queue._messages) if m.approximate_receive_count and not m.visible}
            queue.pending_messages.intersection_update(in_flight)
            queue.pending_messages.update(in_flight)
        return receive(self, queue_name, *args, **kwargs)

    return patched(SQSBackend, "receive_message", receive_message)
