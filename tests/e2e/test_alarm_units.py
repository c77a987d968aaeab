"""Unit tests of the local alarm evaluator (`local_runtime/alarms.py`) and of the error-log
filter pattern against the log lines Lambda writes: no moto, no synthesis."""

from __future__ import annotations

import io
import json
import logging
import time
from contextlib import redirect_stderr
from typing import Any

import pytest

from lambdas import contract
from local_runtime import worker_process
from local_runtime.alarms import FilterPattern, FilterPatternError, LocalAlarms, evaluate_expression
from local_runtime.worker_process import LambdaJsonFormatter

ERROR_FILTER = FilterPattern(contract.error_log_filter_pattern())


def handler_line(level: int, message: str, **extra: Any) -> str:
    """A line as the Python runtime writes a handler's log record in JSON log format."""
    record = logging.LogRecord("controller", level, __file__, 1, message, None, None)
    record.__dict__.update(extra)
    return LambdaJsonFormatter().format(record)


def runtime_unhandled_line() -> str:
    """The runtime's own record of an unhandled exception (outside the handler's wrapper)."""
    stderr = io.StringIO()
    with redirect_stderr(stderr):
        worker_process._log_unhandled(
            {"errorMessage": "boom", "errorType": "KeyError", "requestId": "r-1", "stackTrace": []}, "JSON"
        )
    return stderr.getvalue().strip()


# --- the error-log filter ----------------------------------------------------------------------


def test_error_filter_matches_a_handler_error_line():
    assert ERROR_FILTER.matches(handler_line(logging.ERROR, "sink rejected a record", status=400))


def test_error_filter_matches_the_runtimes_own_error_record_which_says_log_level():
    """GIVEN an exception outside the handler wrapper (the runtime logs it with `log_level`) THEN it
    counts; the former `$.level = "ERROR"` pattern did not."""
    line = runtime_unhandled_line()
    assert json.loads(line)["log_level"] == "ERROR" and "level" not in json.loads(line)
    assert ERROR_FILTER.matches(line)
    assert not FilterPattern('{ $.level = "ERROR" }').matches(line)


def test_error_filter_matches_an_import_error_record():
    line = json.dumps({"timestamp": "2026-11-30T11:00:00Z", "log_level": "ERROR", "errorMessage":
                       "Unable to import module 'controller': No module named 'x'",
                       "errorType": "Runtime.ImportModuleError", "requestId": "r", "stackTrace": []})
    assert ERROR_FILTER.matches(line)


@pytest.mark.parametrize("kind", ["platform.report", "platform.runtimeDone", "platform.initReport"])
@pytest.mark.parametrize("status", ["timeout", "error", "failure"])
def test_error_filter_matches_platform_records_of_a_timeout_or_crash(kind, status):
    line = json.dumps({"time": "2026-11-30T11:00:00.000Z", "type": kind,
                       "record": {"requestId": "r", "status": status, "metrics": {"durationMs": 20000.0}}})
    assert ERROR_FILTER.matches(line)


@pytest.mark.parametrize(
    "line",
    [
        handler_line(logging.INFO, "gate busy; the message waits in the queue"),
        handler_line(logging.WARNING, "core system unavailable; waiting before the next try"),
        json.dumps({"time": "2026-11-30T11:00:00.000Z", "type": "platform.report",
                    "record": {"requestId": "r", "status": "success"}}),
        '{"_aws": {"Timestamp": 1}, "Tenant": "acme", "SinkErrors": 3}',
        "ERROR but not JSON",
    ],
)
def test_error_filter_ignores_normal_lines(line):
    assert not ERROR_FILTER.matches(line)


# --- filter patterns -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "line", "expected"),
    [
        ('{ $.a = "x*" && $.n > 2 }', '{"a": "xyz", "n": 3}', True),
        ('{ $.a = "x*" && $.n > 2 }', '{"a": "xyz", "n": 2}', False),
        ('{ $.a != "x" }', '{"a": "y"}', True),
        ('{ $.b NOT EXISTS }', '{"a": 1}', True),
        ('{ $.d.e[0] = 5 }', '{"d": {"e": [5]}}', True),
        ('"Task timed out"', "2026 r-1 Task timed out after 3.00 seconds", True),
        ("?ERROR ?WARN", "a WARN line", True),
        ("ERROR -ignored", "ERROR ignored", False),
        ("", "anything", True),
    ],
)
def test_filter_patterns_match_as_cloudwatch_logs_does(pattern, line, expected):
    assert FilterPattern(pattern).matches(line) is expected


def test_fails_when_a_filter_pattern_is_space_delimited():
    with pytest.raises(FilterPatternError):
        FilterPattern("[ip, user, status=500]")


# --- metric math ---------------------------------------------------------------------------------


def test_metric_math_if_gives_the_failed_share_past_a_count_and_no_data_without_points():
    expression = "IF(errors >= 10, errors / (errors + sent), 0)"
    assert evaluate_expression(expression, {"errors": 12, "sent": 4}) == 0.75
    assert evaluate_expression(expression, {"errors": 5, "sent": 0}) == 0
    assert evaluate_expression(expression, {"errors": None, "sent": 4}) is None
    assert evaluate_expression("FILL(errors, 0) + 1", {"errors": None}) == 1


# --- alarm evaluation ----------------------------------------------------------------------------

STACK = "OrderedIngest-Tenant-acme"


def alarm(name: str, **props: Any) -> dict[str, Any]:
    return {"Type": "AWS::CloudWatch::Alarm", "Properties": {
        "AlarmName": name, "ComparisonOperator": "GreaterThanOrEqualToThreshold", "EvaluationPeriods": 1,
        "TreatMissingData": "notBreaching", **props}}


def evaluator(resources: dict[str, Any], logs: dict[str, str], clock: list[float], *, time_scale: float = 0.1,
              executions: list[dict[str, Any]] | None = None) -> LocalAlarms:
    return LocalAlarms(
        {STACK: {"Resources": resources}},
        {STACK: {"Workflow": ("AWS::StepFunctions::StateMachine", "arn:sm"),
                 "Logs": ("AWS::Logs::LogGroup", "/aws/lambda/acme-controller"),
                 "Queue": ("AWS::SQS::Queue", "https://sqs/123/acme-event-queue.fifo")}},
        time_scale=time_scale,
        function_names=list(logs),
        logs=lambda name: logs[name],
        state_machines={"acme": "arn:sm"},
        executions=lambda tenant: executions or [],
        clock=lambda: clock[0],
    )


def emf(when: float, **metrics: float) -> str:
    return json.dumps({"_aws": {"Timestamp": int(when * 1000), "CloudWatchMetrics": [{
        "Namespace": "OrderedIngest", "Dimensions": [["Tenant"]],
        "Metrics": [{"Name": n, "Unit": "Seconds" if n.endswith("Seconds") else "Count"} for n in metrics]}]},
        "Tenant": "acme", **metrics}) + "\n"


STALL = alarm("acme-stall", Namespace="OrderedIngest", MetricName="HeadMessageWaitSeconds",
              Dimensions=[{"Name": "Tenant", "Value": "acme"}], Statistic="Maximum", Period=300, Threshold=1800)


def test_a_duration_threshold_and_the_period_are_scaled_by_the_time_scale():
    """GIVEN the stall alarm (1800 s over 300 s) at time scale 0.1 THEN 180 s of head wait breaches
    and 170 s does not, and a point older than the scaled period (30 s) no longer counts."""
    clock = [1000.0]
    logs = {"acme-controller": emf(995, HeadMessageWaitSeconds=170)}
    alarms = evaluator({"Stall": STALL}, logs, clock)
    assert alarms.in_alarm() == set()

    logs["acme-controller"] += emf(999, HeadMessageWaitSeconds=180)
    assert alarms.in_alarm() == {"acme-stall"}
    assert alarms.states()["acme-stall"].threshold == 180

    clock[0] = 1030.0
    assert alarms.in_alarm() == set()
    assert alarms.fired() == {"acme-stall"}


def test_a_metric_filter_counts_matching_lines_of_its_log_group():
    """The lines carry their own (real) time, so the clock is real here."""
    clock = [time.time() + 1]
    resources = {
        "Filter": {"Type": "AWS::Logs::MetricFilter", "Properties": {
            "LogGroupName": {"Ref": "Logs"}, "FilterPattern": contract.error_log_filter_pattern(),
            "MetricTransformations": [{"MetricNamespace": "OrderedIngest", "MetricName": "Errors-acme",
                                       "MetricValue": "1"}]}},
        "ErrorLogs": alarm("acme-controller-error-logs", Namespace="OrderedIngest", MetricName="Errors-acme",
                           Statistic="Sum", Period=300, Threshold=1),
    }
    logs = {"acme-controller": handler_line(logging.INFO, "started") + "\n"}
    alarms = evaluator(resources, logs, clock)
    assert alarms.in_alarm() == set()

    logs["acme-controller"] += runtime_unhandled_line() + "\n"
    assert alarms.in_alarm() == {"acme-controller-error-logs"}


def test_a_math_alarm_reads_its_metric_stats_and_an_execution_alarm_reads_the_executions():
    import datetime as dt

    clock = [1000.0]
    stat = {"Metric": {"Namespace": "OrderedIngest", "Dimensions": [{"Name": "Tenant", "Value": "acme"}]},
            "Period": 300, "Stat": "Sum"}
    resources = {
        "SinkErrors": alarm("acme-sink-errors", Threshold=0.5, Metrics=[
            {"Id": "expr", "Expression": "IF(errors >= 10, errors / (errors + sent), 0)"},
            {"Id": "errors", "ReturnData": False,
             "MetricStat": {**stat, "Metric": {**stat["Metric"], "MetricName": "SinkErrors"}}},
            {"Id": "sent", "ReturnData": False,
             "MetricStat": {**stat, "Metric": {**stat["Metric"], "MetricName": "RecordsSent"}}},
        ]),
        "Failed": alarm("acme-workflow-failed", Namespace="AWS/States", MetricName="ExecutionsFailed",
                        Dimensions=[{"Name": "StateMachineArn", "Value": {"Ref": "Workflow"}}],
                        Statistic="Sum", Period=300, Threshold=1),
        "Throttled": alarm("acme-rule-failed", Namespace="AWS/Events", MetricName="FailedInvocations",
                           Dimensions=[{"Name": "RuleName", "Value": "acme-object-created"}],
                           Statistic="Sum", Period=300, Threshold=1),
    }
    logs = {"acme-register": emf(990, RecordsSent=0, SinkErrors=5) + emf(995, RecordsSent=1, SinkErrors=5)}
    failed = [{"status": "FAILED", "startDate": dt.datetime.fromtimestamp(990, dt.timezone.utc),
               "stopDate": dt.datetime.fromtimestamp(999, dt.timezone.utc)}]

    alarms = evaluator(resources, logs, clock, executions=failed)

    assert alarms.in_alarm() == {"acme-sink-errors", "acme-workflow-failed"}
    assert alarms.states()["acme-sink-errors"].values == (10 / 11,)
    assert alarms.unobserved() == {"acme-rule-failed"}


def test_other_engineers_alarms_work_unchanged_dlq_depth_emf_count_and_a_rule_log_filter():
    """GIVEN alarms of kinds this module was not written for (a dead-letter queue's depth, an EMF
    count, a metric filter on an EventBridge rule's log group) THEN each is evaluated from its
    generic source: sampled queues, EMF records, the log group's events."""
    clock = [1000.0]
    resources = {
        "Dlq": alarm("acme-intake-dlq", Namespace="AWS/SQS", MetricName="ApproximateNumberOfMessagesVisible",
                     Dimensions=[{"Name": "QueueName", "Value": "acme-intake-dlq"}], Statistic="Maximum",
                     Period=300, Threshold=1),
        "Quarantine": alarm("acme-quarantine", Namespace="OrderedIngest", MetricName="QuarantinedMessages",
                            Dimensions=[{"Name": "Tenant", "Value": "acme"}], Statistic="Sum", Period=300,
                            Threshold=1),
        "UnmatchedFilter": {"Type": "AWS::Logs::MetricFilter", "Properties": {
            "LogGroupName": "/aws/events/unmatched", "FilterPattern": '{ $.source = "aws.s3" }',
            "MetricTransformations": [{"MetricNamespace": "OrderedIngest", "MetricName": "UnmatchedUploads",
                                       "MetricValue": "1"}]}},
        "Unmatched": alarm("unmatched-uploads", Namespace="OrderedIngest", MetricName="UnmatchedUploads",
                           Statistic="Sum", Period=300, Threshold=1),
    }
    logs = {"acme-controller": emf(999, QuarantinedMessages=1)}
    alarms = LocalAlarms(
        {STACK: {"Resources": resources}}, {STACK: {}}, time_scale=0.1, function_names=list(logs),
        logs=lambda name: logs[name], state_machines={}, executions=lambda tenant: [],
        queue_stats=lambda: {"acme-intake-dlq": {"ApproximateNumberOfMessagesVisible": 2.0}},
        log_events=lambda group: [("e1", 998.0, '{"source": "aws.s3"}')] if group == "/aws/events/unmatched" else [],
        clock=lambda: clock[0],
    )
    alarms.sample()

    assert alarms.in_alarm() == {"acme-intake-dlq", "acme-quarantine", "unmatched-uploads"}
