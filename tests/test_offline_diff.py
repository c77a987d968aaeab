"""The offline diff (`make diff`): two revisions that differ by one tenant and by one queue
setting (acme's `ordering`, which replaces its FIFO queue by a standard one).

The fast path synthesizes two tenants files in-process once for the module; one test runs the
git-revision path end to end on a throwaway repository of two commits.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from aws_cdk import App, Stack, Stage
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs

from tests.conftest import ROOT, synthesize
from tools.offline_diff import (
    EXIT_DIFFERENT,
    EXIT_ERROR,
    EXIT_SAME,
    TENANT_STACK,
    DiffError,
    StackTemplate,
    base_tenants_file,
    build_report,
    compare_stacks,
    main,
    read_assembly,
    render_full,
    render_summary,
)

pytestmark = pytest.mark.slow  # git revisions and CDK CLI diffs: make test runs it, make test-fast does not

BASE_TENANTS = """\
defaults:
  sink:
    url: https://core.example.com/api/records
    auth: {type: bearer, secret: core/token}
tenants:
  - id: acme
    prefix: acme/
"""

#: One tenant more (beta) and acme ordered by key sequence: its FIFO queue is replaced.
HEAD_TENANTS = """\
defaults:
  sink:
    url: https://core.example.com/api/records
    auth: {type: bearer, secret: core/token}
tenants:
  - id: acme
    prefix: acme/
    ordering:
      by: key_sequence
      sequence_pattern: '(?P<seq>[0-9]+)'
  - id: beta
    prefix: beta/
"""


@pytest.fixture(scope="module")
def assemblies(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("offline-diff")
    (root / "base.yaml").write_text(BASE_TENANTS)
    (root / "head.yaml").write_text(HEAD_TENANTS)
    synthesize(root / "base.yaml", root / "base.out")
    synthesize(root / "head.yaml", root / "head.out")
    return root / "base.out", root / "head.out"


@pytest.fixture(scope="module")
def report(assemblies, tmp_path_factory):
    base, head = assemblies
    return build_report([base], [head], tmp_path_factory.mktemp("scratch"))


def test_summary_lists_the_added_tenant_and_the_changed_one(report):
    # GIVEN a head revision with one tenant more and acme ordered by key sequence
    # WHEN the summary is rendered
    summary = render_summary(report)
    # THEN the tenants are named by what happened to them, before any stack detail
    assert "Tenants\n  added:    beta\n  removed:  -\n  changed:  acme\n" in summary
    assert "+ tenant beta (stack OrderedIngest-Tenant-beta, added)" in summary
    assert "~ tenant acme (stack OrderedIngest-Tenant-acme, changed)" in summary


def test_summary_marks_the_replaced_queue_as_destructive(report):
    (acme,) = [stack for stack in report.stacks if stack.tenant == "acme"]
    changes = {r.logical_id: (r.resource_type, r.change, r.destructive) for r in acme.resources}
    # The CLI's verdict: FifoQueue and QueueName change, the queue is replaced.
    assert changes["PipelineQueueC13966F5"] == ("AWS::SQS::Queue", "replaced", True)
    # The key-sequence gap alarm is new, the controller only changes (no replacement).
    assert changes["PipelineSequenceGapAlarmCDC58933"] == ("AWS::CloudWatch::Alarm", "added", False)
    assert changes["PipelineController2FC8D912"] == ("AWS::Lambda::Function", "changed", False)
    # Its event source mapping is replaced with it (`EventSourceArn: !GetAtt Queue.Arn`), though
    # its own template is the same: the full diff says so, and so does the summary.
    assert changes[
        "PipelineControllerSqsEventSourceOrderedIngestTenantacmePipelineQueue862B8852717D6D55"
    ] == ("AWS::Lambda::EventSourceMapping", "replaced", False)
    summary = render_summary(report)
    assert (
        "Destructive changes (a queue, table, bucket, key or log group replaced or removed): 1\n"
        "  OrderedIngest-Tenant-acme: AWS::SQS::Queue PipelineQueueC13966F5 replaced" in summary
    )


def test_summary_lists_the_shared_stack_under_other_stacks(report):
    summary = render_summary(report)
    # The catch-all rule excludes the new tenant's prefix; the dashboard gains its row.
    other = summary.split("Other stacks\n", 1)[1]
    assert other.startswith("~ stack OrderedIngest-Shared (changed)")
    assert "AWS::Events::Rule           UnmatchedUploadsRuleB6721D96" in other
    assert "AWS::CloudWatch::Dashboard  DashboardsDashboard0712AF28" in other


def test_full_diff_is_the_cli_template_diff_of_each_changed_stack(report):
    full = render_full(report)
    assert "Stack OrderedIngest-Tenant-acme" in full
    assert "[~] AWS::SQS::Queue Pipeline/Queue PipelineQueueC13966F5 replace" in full
    assert "(requires replacement)" in full
    # An added stack is diffed against an empty template: all of it is new.
    assert "Stack OrderedIngest-Tenant-beta" in full
    assert "[+] AWS::SQS::Queue Pipeline/Queue PipelineQueueC13966F5" in full
    # The CLI counts each run's stack; the diff counts them once, all of them, at the end.
    assert full.count("Number of stacks with differences") == 1
    assert full.endswith("\n\nNumber of stacks with differences: 3")  # acme, beta and the shared stack


def test_swapped_revisions_report_the_tenant_as_removed(assemblies, tmp_path):
    base, head = assemblies
    report = build_report([head], [base], tmp_path)
    assert "Tenants\n  added:    -\n  removed:  beta\n  changed:  acme\n" in render_summary(report)
    # cdk deploy leaves a stack that left the app in place: the full diff says so.
    assert (
        "Stack OrderedIngest-Tenant-beta\n(removed: not in the head revision; `cdk deploy` does "
        "not delete it, `cdk destroy OrderedIngest-Tenant-beta` does)" in render_full(report)
    )


def test_identical_revisions_report_no_difference(assemblies, tmp_path):
    base, _ = assemblies
    report = build_report([base], [base], tmp_path)
    assert not report.different
    assert (
        render_summary(report) == "No difference: every stack's template is identical (CDK metadata aside)."
    )


def test_a_qualified_tenant_stack_is_named_by_its_tenant():
    """A copy of the app with `qualifier: q1`: its tenant stacks are found as the app's are."""
    assert [
        TENANT_STACK.match(name)["tenant"]
        for name in (
            "q1-OrderedIngest-Tenant-acme",
            "prod/q1-OrderedIngest-Tenant-a-b",
            "OrderedIngest-Tenant-q1-acme",
        )
    ] == ["acme", "a-b", "q1-acme"]
    assert TENANT_STACK.match("q1-OrderedIngest-Shared") is None


def test_stacks_inside_stages_are_named_by_stage_and_diffed(tmp_path):
    # GIVEN an app that puts a tenant stack in a Stage (a deployment target), twice, with the
    # queue turned into a FIFO queue in the second
    def stage_app(outdir: Path, fifo: bool) -> Path:
        app = App(outdir=str(outdir))
        stack = Stack(Stage(app, "prod"), "OrderedIngest-Tenant-zeta")
        sqs.Queue(stack, "Queue", fifo=fifo or None, enforce_ssl=True)
        app.synth()
        return outdir

    base, head = stage_app(tmp_path / "base", False), stage_app(tmp_path / "head", True)
    # WHEN the two nested assemblies are compared
    assert list(read_assembly(head)) == ["prod/OrderedIngest-Tenant-zeta"]
    report = build_report([base], [head], tmp_path)
    # THEN the tenant is named with its stage and the CLI selected the stack inside it
    assert "changed:  zeta (stage prod)" in render_summary(report)
    (stack,) = report.stacks
    assert [(r.resource_type, r.change) for r in stack.resources] == [("AWS::SQS::Queue", "replaced")]


def test_summary_lists_what_the_cli_replaces_through_a_reference_to_a_replaced_resource(tmp_path):
    """GIVEN a queue made FIFO (replaced) and, unchanged in the template, the event source
    mapping and the topic subscription that refer to it (`!GetAtt Queue.Arn`) WHEN the two
    assemblies are diffed THEN the CLI replaces them too, and so does the summary."""

    def cascade_app(outdir: Path, fifo: bool) -> Path:
        app = App(outdir=str(outdir))
        stack = Stack(app, "OrderedIngest-Tenant-zeta")
        queue = sqs.Queue(stack, "Queue", fifo=fifo or None, enforce_ssl=True)
        controller = lambda_.Function(
            stack,
            "Controller",
            runtime=lambda_.Runtime.PYTHON_3_12,
            handler="index.handler",
            code=lambda_.Code.from_inline("def handler(e, c): pass"),
        )
        controller.add_event_source(event_sources.SqsEventSource(queue, batch_size=1))
        sns.Topic(stack, "Topic", fifo=fifo or None).add_subscription(subscriptions.SqsSubscription(queue))
        app.synth()
        return outdir

    report = build_report(
        [cascade_app(tmp_path / "base", False)], [cascade_app(tmp_path / "head", True)], tmp_path
    )
    (stack,) = report.stacks
    assert sorted((r.resource_type, r.change) for r in stack.resources) == [
        ("AWS::Lambda::EventSourceMapping", "replaced"),
        ("AWS::SNS::Subscription", "replaced"),
        ("AWS::SNS::Topic", "replaced"),
        ("AWS::SQS::Queue", "replaced"),
    ]
    summary, full = render_summary(report), render_full(report)
    for resource_type in ("AWS::Lambda::EventSourceMapping", "AWS::SNS::Subscription"):
        assert re.search(rf"^\[~\] {resource_type} .* replace$", full, re.MULTILINE)
        assert re.search(rf"^    replaced  {resource_type} ", summary, re.MULTILINE)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def _main_with_a_code_change(repo: Path, argv: list[str]) -> int:
    """`main(argv)` with app.py changed in the working tree of ``repo`` (restored after)."""
    (repo / "app.py").write_text((repo / "app.py").read_text() + "\n")
    try:
        return main(argv)
    finally:
        _git(repo, "checkout", "--quiet", "--", "app.py")


@pytest.fixture(scope="module")
def throwaway_repo(tmp_path_factory) -> Path:
    """The app's code in a new repository: commit 1 has BASE_TENANTS, commit 2 HEAD_TENANTS."""
    repo = tmp_path_factory.mktemp("repo") / "app"
    # The whole working tree but what is installed, generated or git's own.
    shutil.copytree(
        ROOT,
        repo,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            "node_modules",
            "cdk.out",
            "__pycache__",
            ".pytest_cache",
            ".hypothesis",
            "mutants",
            ".local",
            "run",
            "tests",
            "bench",
            "docs",
            "tenants.yaml",
        ),
    )
    _git(repo, "init", "--quiet", "--initial-branch=main")
    (repo / "tenants.yaml").write_text(BASE_TENANTS)
    _git(repo, "add", "-A")
    _git(repo, "commit", "--quiet", "-m", "one tenant")
    (repo / "tenants.yaml").write_text(HEAD_TENANTS)
    _git(repo, "commit", "--quiet", "-am", "beta, and acme by key sequence")
    return repo


def test_git_revision_path_synthesizes_both_revisions(throwaway_repo, capsys):
    # GIVEN a repository whose last commit adds beta and changes acme's ordering
    # WHEN the previous commit is diffed against the working tree (the last commit)
    code = main(["--base", "HEAD~1", "--repo", str(throwaway_repo)])
    out = capsys.readouterr().out
    # THEN the base is the previous commit's own tenants.yaml and the diff, printed, exits 0
    assert code == EXIT_SAME, out
    assert "base: HEAD~1 (" in out and "tenants tenants.yaml" in out
    assert "Only the tenants file changed: 1 cell(s) touched (app)." in out
    assert "Tenants\n  added:    beta\n  removed:  -\n  changed:  acme\n" in out
    assert "[~] AWS::SQS::Queue Pipeline/Queue PipelineQueueC13966F5 replace" in out
    # The CLI's synth adds path metadata: the summary names the construct as the CLI does.
    assert re.search(
        r"replaced +AWS::SQS::Queue +PipelineQueueC13966F5  \(Pipeline/Queue\)  DESTRUCTIVE\n", out
    )
    assert re.search(
        r"replaced +AWS::Lambda::EventSourceMapping +PipelineControllerSqsEventSource\S+  "
        r"\(Pipeline/Controller/SqsEventSource:\S+\)\n",
        out,
    )


def test_fails_when_the_base_revision_does_not_exist(throwaway_repo, capsys):
    code = main(["--base", "origin/main", "--repo", str(throwaway_repo)])
    assert code == EXIT_ERROR
    assert capsys.readouterr().err == (
        f"offline diff: base revision 'origin/main' not found in {throwaway_repo}; fetch it first "
        "(e.g. `git fetch origin main`) or pass BASE=<branch, tag or commit>\n"
    )


def test_the_base_uses_its_own_copy_of_a_tenants_file_in_the_repository(tmp_path):
    repo, base = tmp_path / "repo", tmp_path / "base"
    for root in (repo, base):
        (root / "config").mkdir(parents=True)
        (root / "config" / "tenants.yaml").write_text(root.name)
    # In the repository: the base revision's version of the same path.
    assert (
        base_tenants_file(repo, base, repo / "config" / "tenants.yaml", "v1")
        == base / "config" / "tenants.yaml"
    )


def test_fails_when_the_base_has_no_copy_of_the_tenants_file(tmp_path):
    """A file outside the repository, or new since the base, compared with itself would show no
    difference whatever it holds: the diff refuses and says how to name the base's file."""
    repo, base = tmp_path / "repo", tmp_path / "base"
    repo.mkdir()
    base.mkdir()
    (repo / "new.yaml").write_text("new")
    outside = tmp_path / "mine.yaml"
    with pytest.raises(DiffError) as error:
        base_tenants_file(repo, base, outside, "origin/main")
    assert str(error.value) == (
        f"tenants file {outside} is outside the repository {repo}, so origin/main has no copy of it to compare "
        "it with; name the base's tenants file (--base-tenants FILE):\n"
        "  BASE_TENANTS=path/to/the/version/deployed/now  compares the two files, on the working tree's code\n"
        f"  BASE_TENANTS={outside}  the same file: what the code change since origin/main does to it"
    )
    with pytest.raises(
        DiffError,
        match=r"^tenants file new.yaml is not in v1 \(a new file\), so v1 has no copy "
        r"of it to compare it with; name the base's tenants file",
    ):
        base_tenants_file(repo, base, repo / "new.yaml", "v1")


def test_a_tenants_file_outside_the_repository_is_refused_without_base_tenants(
    throwaway_repo, tmp_path, capsys
):
    # GIVEN a tenants file outside the repository, the same as the committed one
    outside = tmp_path / "tenants.yaml"
    outside.write_text(HEAD_TENANTS)
    # WHEN it is diffed against a revision THEN nothing is synthesized: exit 2, with the way out
    code = main(["--base", "HEAD", "--repo", str(throwaway_repo), "--tenants", str(outside)])
    captured = capsys.readouterr()
    assert code == EXIT_ERROR
    assert captured.err.startswith(f"offline diff: tenants file {outside} is outside the repository")
    assert (
        f"\n  BASE_TENANTS={outside}  the same file: what the code change since HEAD does to it\n"
        in captured.err
    )
    assert "No cell is touched" not in captured.out and "No difference" not in captured.out


def test_base_tenants_compares_two_files_outside_the_repository_on_todays_code(
    throwaway_repo, tmp_path, capsys, monkeypatch
):
    """Another file as BASE_TENANTS: no base revision is read (none exists here), the cells the
    change touches are synthesized on each side with the working tree's code."""
    import tools.offline_diff as offline_diff

    runs = []
    monkeypatch.setattr(offline_diff, "synthesize", runs.extend)
    monkeypatch.setattr(offline_diff, "build_report", lambda base, head, scratch: offline_diff.Report())
    (tmp_path / "old.yaml").write_text(BASE_TENANTS)
    (tmp_path / "new.yaml").write_text(HEAD_TENANTS)
    code = main(
        [
            "--base",
            "origin/main",
            "--repo",
            str(throwaway_repo),
            "--tenants",
            str(tmp_path / "new.yaml"),
            "--base-tenants",
            str(tmp_path / "old.yaml"),
        ]
    )
    out = capsys.readouterr().out
    assert code == EXIT_SAME, out
    assert f"base: working tree, tenants {tmp_path / 'old.yaml'}" in out
    assert [(run.source, run.tenants, run.cell) for run in runs] == [
        (throwaway_repo, tmp_path / "old.yaml", "app"),
        (throwaway_repo, tmp_path / "new.yaml", "app"),
    ]


def test_the_same_file_as_base_tenants_shows_what_the_code_change_does_to_it(
    throwaway_repo, tmp_path, capsys, monkeypatch
):
    """GIVEN a tenants file outside the repository and a code change in the working tree WHEN it
    is its own BASE_TENANTS THEN the base revision's code and the working tree's synthesize it."""
    import tools.offline_diff as offline_diff

    runs = []
    monkeypatch.setattr(offline_diff, "synthesize", runs.extend)
    monkeypatch.setattr(offline_diff, "build_report", lambda base, head, scratch: offline_diff.Report())
    outside = tmp_path / "tenants.yaml"
    outside.write_text(HEAD_TENANTS)
    code = _main_with_a_code_change(
        throwaway_repo,
        [
            "--base",
            "HEAD",
            "--repo",
            str(throwaway_repo),
            "--tenants",
            str(outside),
            "--base-tenants",
            str(outside),
        ],
    )
    out = capsys.readouterr().out
    assert code == EXIT_SAME, out
    assert "The code changed: every stack of both revisions is synthesized." in out
    base, head = runs
    assert base.source != throwaway_repo and (base.tenants, base.cell) == (outside, None)
    assert (head.source, head.tenants, head.cell) == (throwaway_repo, outside, None)


SHARDED_BASE = """\
defaults:
  sink: {url: https://core.example.com/api/records, auth: {type: bearer, secret: core/token}}
routing: {shards: 2}
tenants:
  - {id: acme, prefix: acme/}
  - {id: globex, prefix: globex/}
  - {id: initech, prefix: initech/incoming/}
"""


def test_a_change_of_one_tenant_synthesizes_and_diffs_its_cell_only(throwaway_repo, capsys, monkeypatch):
    """GIVEN a sharded tenants file committed (acme on shard 0, globex and initech on shard 1)
    WHEN the working tree changes initech's chunk size THEN only shard 1's cell is synthesized,
    on each side, and the diff names initech's stack only. Each planned synth runs in this
    process (the CLI's synth of a revision is run end to end by the tests above); the diffs
    are the CLI's."""
    import tools.offline_diff as offline_diff

    runs = []

    def synthesize_in_process(planned):
        for run in planned:
            runs.append(run)
            synthesize(run.tenants, run.outdir, cell=run.cell)

    monkeypatch.setattr(offline_diff, "synthesize", synthesize_in_process)
    (throwaway_repo / "tenants.yaml").write_text(SHARDED_BASE)
    _git(throwaway_repo, "commit", "--quiet", "-am", "sharded")
    try:
        (throwaway_repo / "tenants.yaml").write_text(
            SHARDED_BASE.replace("prefix: initech/incoming/}", "prefix: initech/incoming/, chunk_size: 50}")
        )
        code = main(["--base", "HEAD", "--repo", str(throwaway_repo), "--strict"])
        out = capsys.readouterr().out
        assert code == EXIT_DIFFERENT, out  # --strict (CI): differences fail
        assert "Only the tenants file changed: 1 cell(s) touched (shard-1)." in out
        assert "Tenants\n  added:    -\n  removed:  -\n  changed:  initech\n" in out
        assert "OrderedIngest-Shared" not in out and "OrderedIngest-Tenant-globex" not in out
        # One synth a side, of shard 1 alone: the base from the committed file, the head from the working tree.
        assert [(run.cell, run.source) for run in runs] == [("shard-1", throwaway_repo)] * 2
        assert runs[1].tenants == throwaway_repo / "tenants.yaml" and runs[0].tenants != runs[1].tenants
    finally:
        _git(throwaway_repo, "checkout", "--quiet", "--", "tenants.yaml")
        _git(throwaway_repo, "reset", "--quiet", "--hard", "HEAD~1")


def test_a_change_of_the_code_synthesizes_both_whole_revisions(
    throwaway_repo, assemblies, capsys, monkeypatch
):
    """GIVEN the last commit's tenants change and a code change in the working tree WHEN the
    previous commit is diffed THEN each side is one synth of its whole revision (the base from
    its own exported source, the head from the working tree), and the report compares them.
    The synths are the module's in-process assemblies of the same two tenants files: the CLI's
    synth of a revision is run end to end by the tests above."""
    import tools.offline_diff as offline_diff

    runs = []

    def synthesize_from_the_module(planned):
        for run, assembly in zip(planned, assemblies, strict=True):
            runs.append(run)
            shutil.copytree(assembly, run.outdir)

    monkeypatch.setattr(offline_diff, "synthesize", synthesize_from_the_module)
    code = _main_with_a_code_change(throwaway_repo, ["--base", "HEAD~1", "--repo", str(throwaway_repo)])
    out = capsys.readouterr().out
    assert code == EXIT_SAME, out
    assert "The code changed: every stack of both revisions is synthesized." in out
    base, head = runs
    assert (base.cell, head.cell) == (None, None)
    assert base.source != throwaway_repo and base.tenants == base.source / "tenants.yaml"
    assert (head.source, head.tenants) == (throwaway_repo, throwaway_repo / "tenants.yaml")
    assert "Tenants\n  added:    beta\n  removed:  -\n  changed:  acme\n" in out


def test_make_diff_passes_strict_only_when_asked():
    """`make diff` exits 0 once the diff is printed; `make diff STRICT=1` (CI) adds --strict."""

    def command(*variables: str) -> str:
        dry_run = subprocess.run(
            ["make", "--no-print-directory", "-n", "diff", "BASE=v1", *variables],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return dry_run.stdout.strip().splitlines()[-1]

    assert command() == "python -m tools.offline_diff --base v1 --tenants tenants.yaml"
    assert command("STRICT=1") == "python -m tools.offline_diff --base v1 --tenants tenants.yaml --strict"
    assert command("SUMMARY=1") == "python -m tools.offline_diff --base v1 --tenants tenants.yaml --summary"
    assert command("TENANTS=/srv/t.yaml", "BASE_TENANTS=/srv/old.yaml") == (
        "python -m tools.offline_diff --base v1 --tenants /srv/t.yaml --base-tenants /srv/old.yaml"
    )


def test_a_change_of_the_cdk_metadata_alone_is_no_difference(tmp_path):
    """The CLI's `AWS::CDK::Metadata` resource records the CDK version and feature flags in use:
    `cdk diff` hides its changes, and so does the offline diff (a CDK upgrade is no news)."""

    def stack(analytics: str, queue: dict) -> dict[str, StackTemplate]:
        template = {
            "Resources": {
                "CDKMetadata": {"Type": "AWS::CDK::Metadata", "Properties": {"Analytics": analytics}},
                "Queue": {"Type": "AWS::SQS::Queue", "Properties": queue},
            }
        }
        return {"S": StackTemplate("S", tmp_path / "S.template.json", template)}

    assert compare_stacks(stack("v2:a", {}), stack("v2:b", {})) == []
    (diff,) = compare_stacks(stack("v2:a", {}), stack("v2:b", {"DelaySeconds": 1}))
    assert [(r.logical_id, r.change) for r in diff.resources] == [("Queue", "changed")]
