"""The metrics the functions publish and the log fields their alarms match.

Metric names, the one dimension set, every EMF metric with its unit and the handler that
publishes it (`EMF_METRICS`), and the metric filter pattern of a function's error lines: the
handlers publish from these, and the alarms and the dashboard watch the same names.
"""

from __future__ import annotations

import dataclasses

#: The app's CloudWatch namespace as shipped; a qualified app's is `metric_namespace()`.
METRIC_NAMESPACE = "OrderedIngest"
#: Published by the controller (EMF) for every message it handles, after reading the ledger:
#: 0 while a file of the tenant runs, else now - max(SentTimestamp, the last close). It is the
#: time the head message waited while nothing ran (a stall), not its time in the queue.
HEAD_WAIT_METRIC = "HeadMessageWaitSeconds"
#: Published by the controller (EMF, Maximum) while `ops pause` holds the tenant: how long it has
#: been paused (the `paused` alarm; the queue-age alarm reads 0 while it is there).
PAUSED_METRIC = "PausedSeconds"
TENANT_DIMENSION = "Tenant"
#: Published by the controller (EMF) for each message it quarantined (`UnusableMessageError`).
QUARANTINED_MESSAGES_METRIC = "QuarantinedMessages"
#: Metric filters cannot set constant dimensions, so tenant and function go in the name.
ERROR_LOG_METRIC = "ErrorLogLines"

#: The JSON log field a metric filter matches ERROR lines on (Lambda's JSON log format).
LOG_LEVEL_FIELD = "level"

#: Uploads to the landing bucket outside every tenant prefix (the shared stack's metric filter
#: on the unmatched-uploads log group counts one per event; no dimensions).
UNMATCHED_UPLOADS_METRIC = "UnmatchedUploads"

#: Published by the controller when a file event arrives older (by event time) than the last
#: file started: S3 does not order notifications across keys (docs/design.md §4.8).
LATE_ARRIVAL_METRIC = "LateArrivals"
#: Published by the controller (`key_sequence` ordering) while the next sequence number is
#: missing and a later file waits: seconds since the tenant could have gone on.
SEQUENCE_GAP_METRIC = "SequenceGapSeconds"
#: Published by the register function (EMF) at the end of every invocation and at least once a
#: minute while it sends (`register_chunk.METRICS_EVERY_SECONDS`), both every time: records the
#: core system acknowledged, and failed tries (a 429/5xx/timeout/connection failure retried,
#: or the rejection that fails the file). The sink-errors alarm and the dashboard use them.
RECORDS_SENT_METRIC = "RecordsSent"
SINK_ERRORS_METRIC = "SinkErrors"
#: Published with them: POSTs the core system acknowledged (= RecordsSent in record mode, one
#: per batch in batch mode). The failed share of tries is SinkErrors / (SinkErrors +
#: SinkRequests): dividing by records would hide a batch core system that fails half its tries.
SINK_REQUESTS_METRIC = "SinkRequests"


@dataclasses.dataclass(frozen=True)
class EmfMetric:
    """A metric a handler publishes in CloudWatch's embedded metric format: its CloudWatch
    unit, and the handler module that publishes it (its function's `Handler` is
    `lambdas.<emitter>.handler`)."""

    unit: str
    emitter: str


#: The one dimension set of every EMF metric (a metric is the name plus all its dimensions:
#: an alarm on another set watches a metric nobody publishes).
EMF_DIMENSIONS = (TENANT_DIMENSION,)
#: Every EMF metric by name: the handlers publish from this table (`runtime.emf_line` takes
#: the unit here), and tests/test_alarm_sources.py checks each alarm's metric against it.
EMF_METRICS = {
    HEAD_WAIT_METRIC: EmfMetric("Seconds", "controller"),
    PAUSED_METRIC: EmfMetric("Seconds", "controller"),
    QUARANTINED_MESSAGES_METRIC: EmfMetric("Count", "controller"),
    LATE_ARRIVAL_METRIC: EmfMetric("Count", "controller"),
    SEQUENCE_GAP_METRIC: EmfMetric("Seconds", "controller"),
    RECORDS_SENT_METRIC: EmfMetric("Count", "register_chunk"),
    SINK_ERRORS_METRIC: EmfMetric("Count", "register_chunk"),
    SINK_REQUESTS_METRIC: EmfMetric("Count", "register_chunk"),
}

#: The field the Lambda runtime itself writes in JSON log format for its own records (an
#: unhandled exception outside the handler's wrapper, an import error): not `level`.
RUNTIME_LOG_LEVEL_FIELD = "log_level"
#: Statuses of Lambda's platform records in JSON log format (`{"type": "platform.report",
#: "record": {"status": ...}}`, also `platform.runtimeDone`, and `platform.initReport` for the
#: init) that mean the invocation or the init failed: `timeout` (the function ran out of time),
#: `error` and `failure` (a crash, an init failure); the Telemetry API schema's statuses are
#: success, failure, error and timeout
#: (https://docs.aws.amazon.com/lambda/latest/dg/telemetry-schema-reference.html).
#: A platform record has no level field. AWS assigns it a level only to filter system logs:
#: WARN for a `platform.report` or `platform.runtimeDone` whose status is not `success`
#: (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-log-level.html,
#: "Event mapping for system log level"), never ERROR: the filter matches the status.
PLATFORM_FAILURE_STATUSES = ("timeout", "error", "failure")


def error_log_filter_pattern() -> str:
    """The metric filter pattern of a function's error lines (one JSON pattern, ORed terms):
    the handlers' ERROR lines (`level`), the runtime's own error records (`log_level`), and
    the platform records of a timeout or a crash (`record.status`). Plain-text lines (a
    traceback the runtime prints before it switches to JSON) are not JSON and never match;
    the platform record of the same failure does."""
    terms = [f'$.{LOG_LEVEL_FIELD} = "ERROR"', f'$.{RUNTIME_LOG_LEVEL_FIELD} = "ERROR"']
    terms += [f'$.record.status = "{status}"' for status in PLATFORM_FAILURE_STATUSES]
    return "{ " + " || ".join(f"({term})" for term in terms) + " }"
