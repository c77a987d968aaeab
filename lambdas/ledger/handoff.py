"""Starting the current file's execution, and handing the tenant on to the next message."""

from __future__ import annotations

import json
from typing import Any

from lambdas.contract import ExecutionInput
from lambdas.ledger.claims import ControllerLedger
from lambdas.ledger.position import Position
from lambdas.runtime import error_code


def start_execution(sfn: Any, state_machine_arn: str, position: Position) -> bool:
    """Start the execution the position names, on its file from its first unacknowledged
    record. Idempotent: False when it exists already (`ExecutionAlreadyExists`)."""
    assert position.file is not None and position.execution is not None
    execution_input = ExecutionInput(**position.file, start_record=position.next_record)
    try:
        sfn.start_execution(
            stateMachineArn=state_machine_arn,
            name=position.execution,
            input=json.dumps(execution_input, sort_keys=True),
        )
    except Exception as error:  # botocore ClientError
        if error_code(error) != "ExecutionAlreadyExists":
            raise
        return False
    return True


def hand_off(ledger: ControllerLedger, sqs: Any, queue_url: str, position: Position) -> bool:
    """Make the message noted as waiting visible now, if the tenant may go on (nothing runs,
    not halted), and forget the note. False if there is nothing to hand off, or the message is
    not in flight any more (received again meanwhile, with a new receipt handle, or deleted):
    then it is decided when next received, and the visibility timeout stays the fallback.
    Idempotent: run again after a failure, it makes visible what is still noted. A paused
    tenant hands off nothing: `ops unpause` does."""
    if position.halted or position.running or position.paused:
        return False
    handed_off = False
    if position.sequence is not None:
        # `key_sequence` ordering: the message of the next sequence number, if it waits.
        for sequence, receipt in ledger.waiting_sequences(after=position.sequence, limit=1):
            if sequence == position.sequence + 1:
                handed_off = _make_visible(sqs, queue_url, receipt)
                ledger.forget_waiting_sequence(sequence)
    if position.waiting_receipt and _make_visible(sqs, queue_url, position.waiting_receipt):
        ledger.clear_waiting(position.waiting_receipt)
        handed_off = True
    return handed_off


#: What SQS answers for a receipt handle whose message is not in flight any more (received again
#: meanwhile, or deleted); any other error (throttling, a fault) is raised, so the caller's retry
#: hands off again.
NOT_IN_FLIGHT_CODES = ("ReceiptHandleIsInvalid", "MessageNotInflight", "InvalidParameterValue")


def _make_visible(sqs: Any, queue_url: str, receipt: str) -> bool:
    try:
        sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=receipt, VisibilityTimeout=0)
    except Exception as error:  # botocore ClientError
        if not error_code(error).endswith(NOT_IN_FLIGHT_CODES):
            raise
        return False
    return True
