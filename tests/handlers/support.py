"""Names and stand-ins the handler tests share (fixtures live in conftest.py)."""

from __future__ import annotations

import json
from typing import Any

REGION = "us-east-1"
LEDGER_TABLE = "ledger"
TENANT = "acme"


class Context:
    """The part of the Lambda context object the handlers use."""

    def __init__(self, seconds: float = 60) -> None:
        self.seconds = seconds

    def get_remaining_time_in_millis(self) -> int:
        return int(self.seconds * 1000)


def emf_records(stdout: str, emitter: str) -> list[dict[str, Any]]:
    """The EMF records a handler printed, each checked against the contract's one table
    (`EMF_METRICS`, which the alarms are checked against too): the one dimension set, with a
    value; every metric in the table, published by ``emitter`` (the handler module) with the
    table's unit and a number."""
    from lambdas.contract import EMF_DIMENSIONS, EMF_METRICS

    records = []
    for line in stdout.splitlines():
        record = json.loads(line) if line.startswith("{") else {}
        if "_aws" not in record:
            continue
        (directive,) = record["_aws"]["CloudWatchMetrics"]
        assert directive["Dimensions"] == [list(EMF_DIMENSIONS)], directive
        assert all(isinstance(record.get(name), str) and record[name] for name in EMF_DIMENSIONS), record
        for metric in directive["Metrics"]:
            name = metric["Name"]
            assert name in EMF_METRICS, f"{emitter} publishes {name}, which is not in contract.EMF_METRICS"
            assert (emitter, metric.get("Unit")) == (EMF_METRICS[name].emitter, EMF_METRICS[name].unit), (
                metric
            )
            assert isinstance(record.get(name), (int, float)) and not isinstance(record[name], bool), record
        records.append(record)
    return records


class VisibilityRecorder:
    """The SQS client, recording the visibility timeout of each ChangeMessageVisibility: how
    soon a waiting message comes back."""

    def __init__(self, sqs: Any) -> None:
        self._sqs, self.timeouts = sqs, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)

    def change_message_visibility(self, **kwargs: Any) -> Any:
        self.timeouts.append(kwargs["VisibilityTimeout"])
        return self._sqs.change_message_visibility(**kwargs)
