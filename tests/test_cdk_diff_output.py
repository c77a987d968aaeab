"""The pull-request gate on destructive changes reads `cdk diff`'s own resource lines."""

from __future__ import annotations

from tools.cdk_diff_output import destructive, main, parse

#: What `cdk diff` prints for two stacks (colours as on a terminal in the first).
LOG = """\
Stack OrderedIngest-Shared
Resources
\x1b[33m[~]\x1b[39m \x1b[36mAWS::DynamoDB::Table\x1b[39m Shared/Ledger SharedLedger1234 \x1b[3m\x1b[1m\x1b[31mreplace\x1b[39m\x1b[22m\x1b[23m
 └─ [~] TableName (requires replacement)
[-] AWS::S3::Bucket Shared/WorkBucket SharedWorkBucketABCD destroy
[-] AWS::Logs::LogGroup Shared/Logs SharedLogs0000 orphan
[~] AWS::CloudWatch::Dashboard Dashboards/Dashboard DashboardsDashboard0712AF28

Stack OrderedIngest-Tenant-acme
Resources
[+] AWS::CloudWatch::Alarm Pipeline/SequenceGapAlarm PipelineSequenceGapAlarmCDC58933
[~] AWS::SQS::Queue Pipeline/Queue PipelineQueueC13966F5 may be replaced
 ├─ [-] FifoQueue (requires replacement)
[~] AWS::Lambda::EventSourceMapping Pipeline/Controller/SqsEventSource PipelineEsm717D6D55 replace

✨  Number of stacks with differences: 2
"""


def test_every_resource_line_is_read_with_its_stack_and_impact():
    changes = [(c.stack, c.change, c.resource_type, c.logical_id, c.impact) for c in parse(LOG)]
    assert changes == [
        ("OrderedIngest-Shared", "changed", "AWS::DynamoDB::Table", "SharedLedger1234", "replace"),
        ("OrderedIngest-Shared", "removed", "AWS::S3::Bucket", "SharedWorkBucketABCD", "destroy"),
        ("OrderedIngest-Shared", "removed", "AWS::Logs::LogGroup", "SharedLogs0000", "orphan"),
        ("OrderedIngest-Shared", "changed", "AWS::CloudWatch::Dashboard", "DashboardsDashboard0712AF28", ""),
        (
            "OrderedIngest-Tenant-acme",
            "added",
            "AWS::CloudWatch::Alarm",
            "PipelineSequenceGapAlarmCDC58933",
            "",
        ),
        (
            "OrderedIngest-Tenant-acme",
            "changed",
            "AWS::SQS::Queue",
            "PipelineQueueC13966F5",
            "may be replaced",
        ),
        (
            "OrderedIngest-Tenant-acme",
            "changed",
            "AWS::Lambda::EventSourceMapping",
            "PipelineEsm717D6D55",
            "replace",
        ),
    ]


def test_only_stateful_resources_that_are_replaced_or_destroyed_are_destructive():
    # A retained (orphaned) log group keeps its data; a replaced event source mapping holds none.
    assert [c.logical_id for c in destructive(parse(LOG))] == [
        "SharedLedger1234",
        "SharedWorkBucketABCD",
        "PipelineQueueC13966F5",
    ]


def test_fails_when_a_stateful_resource_is_replaced(tmp_path, capsys):
    (tmp_path / "cdk-diff.log").write_text(LOG)
    assert main([str(tmp_path / "cdk-diff.log")]) == 1
    out = capsys.readouterr().out
    assert out.startswith(
        "3 destructive change(s): the deployed resource and what it holds are lost.\n"
        "  OrderedIngest-Shared: AWS::DynamoDB::Table SharedLedger1234 (Shared/Ledger) replaced\n"
        "  OrderedIngest-Shared: AWS::S3::Bucket SharedWorkBucketABCD (Shared/WorkBucket) removed\n"
        "  OrderedIngest-Tenant-acme: AWS::SQS::Queue PipelineQueueC13966F5 (Pipeline/Queue) replaced\n"
    )
    assert "add the label allow-destructive-changes to the pull request" in out


def test_the_label_lets_destructive_changes_pass_and_still_lists_them(tmp_path, capsys):
    (tmp_path / "cdk-diff.log").write_text(LOG)
    assert main([str(tmp_path / "cdk-diff.log"), "--allow"]) == 0
    assert "Allowed by the pull request's label allow-destructive-changes." in capsys.readouterr().out


def test_a_diff_without_destructive_change_passes(tmp_path, capsys):
    (tmp_path / "cdk-diff.log").write_text(
        LOG.split("Stack OrderedIngest-Tenant-acme")[0]
        .replace("replace\x1b", "\x1b")
        .replace(" destroy", " orphan")
    )
    assert main([str(tmp_path / "cdk-diff.log")]) == 0
    assert capsys.readouterr().out.startswith("No destructive change")


def test_fails_when_the_log_is_missing(tmp_path, capsys):
    assert main([str(tmp_path / "absent.log")]) == 2
    assert capsys.readouterr().err.startswith(f"cannot read {tmp_path / 'absent.log'}:")
