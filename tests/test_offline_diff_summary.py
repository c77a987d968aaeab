"""The offline diff's summary (`make diff`), without git or a synth: it lists every resource the
CLI's template diff lists, and `--summary` (`make diff SUMMARY=1`) prints it alone. The CLI's
own runs are in tests/test_offline_diff.py."""

from __future__ import annotations

from pathlib import Path

import tools.offline_diff as offline_diff
from tools.cdk_diff_output import parse
from tools.offline_diff import EXIT_SAME, Report, ResourceDelta, StackDiff, apply_cli_verdict, render_summary

#: `cdk diff --template` of a tenant stack whose queue is replaced (FIFO): the event source
#: mapping and the topic subscription that refer to the queue are replaced with it, though
#: their own templates (`!GetAtt Queue.Arn`) are unchanged.
CLI_OUTPUT = """\
Stack OrderedIngest-Tenant-zeta
Resources
[~] AWS::SQS::Queue Queue Queue4A7E3555 replace
 └─ [+] FifoQueue (requires replacement)
[~] AWS::SNS::Subscription Queue/Topic QueueTopic8F0AFB60 replace
 ├─ [~] Endpoint (requires replacement)
[~] AWS::Lambda::EventSourceMapping Controller/SqsEventSource:Queue ControllerSqsEventSourceC7198678 replace
 └─ [~] EventSourceArn (requires replacement)
[~] AWS::SQS::QueuePolicy Queue/Policy QueuePolicy25439813
 └─ [~] Queues
"""


def test_summary_lists_every_resource_the_cli_replaces_also_when_its_own_template_is_unchanged():
    # GIVEN a stack whose templates differ in the queue alone (FifoQueue)
    diff = StackDiff(
        name="OrderedIngest-Tenant-zeta",
        status="changed",
        sections=[],
        resources=[ResourceDelta("Queue4A7E3555", "AWS::SQS::Queue", "Queue", "changed")],
    )
    # WHEN the CLI's verdict is applied: it replaces the queue and what refers to it
    apply_cli_verdict(diff, parse(CLI_OUTPUT))
    # THEN the summary lists each resource the full diff lists, replaced or changed, as the CLI says
    assert [
        (r.change, r.resource_type, r.logical_id, r.construct_path, r.destructive) for r in diff.resources
    ] == [
        (
            "replaced",
            "AWS::Lambda::EventSourceMapping",
            "ControllerSqsEventSourceC7198678",
            "Controller/SqsEventSource:Queue",
            False,
        ),
        ("replaced", "AWS::SQS::Queue", "Queue4A7E3555", "Queue", True),
        ("changed", "AWS::SQS::QueuePolicy", "QueuePolicy25439813", "Queue/Policy", False),
        ("replaced", "AWS::SNS::Subscription", "QueueTopic8F0AFB60", "Queue/Topic", False),
    ]
    summary = render_summary(Report(stacks=[diff]))
    assert (
        "    replaced  AWS::Lambda::EventSourceMapping  ControllerSqsEventSourceC7198678  "
        "(Controller/SqsEventSource:Queue)\n" in summary
    )
    assert "    replaced  AWS::SNS::Subscription           QueueTopic8F0AFB60  (Queue/Topic)\n" in summary


def _tenants(path: Path, chunk_size: int) -> Path:
    path.write_text(f"""\
defaults:
  sink: {{url: https://core.example.com/api/records, auth: {{type: bearer, secret: core/token}}}}
tenants:
  - {{id: acme, prefix: acme/, chunk_size: {chunk_size}}}
""")
    return path


def test_summary_option_prints_the_summary_without_the_full_diffs(tmp_path, monkeypatch, capsys):
    # GIVEN two tenants files that differ in acme's chunk size, and a report of that change
    # (the synth and the CLI's diff are run in tests/test_offline_diff.py)
    full_diff = (
        "Stack OrderedIngest-Tenant-acme\nResources\n[~] AWS::Lambda::Function Pipeline/Split PipelineSplit"
    )
    report = Report(
        stacks=[
            StackDiff(
                name="OrderedIngest-Tenant-acme",
                status="changed",
                sections=[],
                cli_output=full_diff,
                resources=[
                    ResourceDelta(
                        "PipelineSplit0188130B", "AWS::Lambda::Function", "Pipeline/Split", "changed"
                    )
                ],
            )
        ]
    )
    monkeypatch.setattr(offline_diff, "synthesize", lambda runs: None)
    monkeypatch.setattr(offline_diff, "build_report", lambda base, head, scratch: report)
    args = [
        "--base-tenants",
        str(_tenants(tmp_path / "old.yaml", 100)),
        "--tenants",
        str(_tenants(tmp_path / "new.yaml", 50)),
        "--repo",
        str(tmp_path),
    ]

    # WHEN the diff runs with --summary THEN it prints the summary and the count, not the full diff
    assert offline_diff.main([*args, "--summary"]) == EXIT_SAME
    out = capsys.readouterr().out
    assert (
        "~ tenant acme (stack OrderedIngest-Tenant-acme, changed)\n"
        "    changed   AWS::Lambda::Function  PipelineSplit0188130B  (Pipeline/Split)\n" in out
    )
    assert out.endswith(
        "\nFull template diffs left out (--summary): 1 stack(s) differ; "
        "make diff without SUMMARY=1 prints them.\n"
    )
    assert full_diff not in out
    # Without it, the full diff follows the summary.
    assert offline_diff.main(args) == EXIT_SAME
    assert capsys.readouterr().out.endswith(f"{full_diff}\n\nNumber of stacks with differences: 1\n")
