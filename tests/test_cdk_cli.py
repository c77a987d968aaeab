"""The CDK command line as CDK users run it: `cdk synth` from a shell without the
virtual environment, `cdk diff` without credentials, the feature flags `cdk init` records; and
`make help`.

The CLI runs are `cli` (slow): each synthesizes the tests' tenants file once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline_constructs.config import ALARMS_REACH_NOBODY
from tests.conftest import FIXTURE_TENANTS, ROOT
from tools.project_env import NO_CREDENTIALS, SETUP_HINT

CDK = ROOT / "node_modules" / ".bin" / "cdk"
VENV_BIN = Path(sys.executable).parent
STACKS = [
    "OrderedIngest-Shared",
    "OrderedIngest-Tenant-acme",
    "OrderedIngest-Tenant-globex",
    "OrderedIngest-Tenant-initech",
]


def machine_python(directory: Path) -> Path:
    """A `python3` as a shell without the venv finds one: the venv's base interpreter, without
    site-packages (`-S`), so it cannot import aws-cdk-lib whatever the machine has installed."""
    base = Path(getattr(sys, "_base_executable", "") or Path(sys.base_prefix) / "bin" / "python3")
    directory.mkdir(parents=True, exist_ok=True)
    wrapper = directory / "python3"
    wrapper.write_text(f'#!/bin/sh\nexec "{base}" -S "$@"\n')
    wrapper.chmod(0o755)
    probe = subprocess.run(
        [str(wrapper), "-c", "import aws_cdk"], capture_output=True, text=True, check=False
    )
    assert "No module named 'aws_cdk'" in probe.stderr, "the machine's Python must lack aws-cdk-lib here"
    return wrapper


def shell_env(tmp_path: Path) -> dict[str, str]:
    """A shell outside the venv, with no AWS credentials: `python3` is the machine's, the pinned
    CLI's Node first (as `npx cdk` puts node_modules/.bin first)."""
    python = machine_python(tmp_path / "bin")
    path = [p for p in os.environ["PATH"].split(os.pathsep) if Path(p).resolve() != VENV_BIN.resolve()]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_", "VIRTUAL_ENV"))}
    env.update(
        PATH=os.pathsep.join([str(CDK.parent), str(python.parent), *path]),
        CDK_DISABLE_CLI_TELEMETRY="true",
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


def cdk(
    command: str, tmp_path: Path, *options: str, tenants: Path = FIXTURE_TENANTS
) -> subprocess.CompletedProcess[str]:
    if not CDK.exists():
        pytest.fail("node_modules/.bin/cdk is missing: run `make setup` (every make target does)")
    return subprocess.run(
        [str(CDK), command, "-c", f"tenants={tenants}", "--output", str(tmp_path / "cdk.out"), *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=shell_env(tmp_path),
        timeout=600,
        check=False,
    )


@pytest.mark.cli
def test_cdk_synth_from_a_shell_without_the_venv_uses_the_projects_python_and_says_only_what_matters(
    tmp_path,
):
    # GIVEN a shell whose python3 lacks aws-cdk-lib and no AWS credentials
    # WHEN `cdk synth` runs cdk.json's `python3 app.py`
    result = cdk("synth", tmp_path, "--quiet")
    # THEN the app runs again with .venv's Python and synthesizes every stack, without credentials
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "cdk.out").glob("*.template.json")) == [
        f"{name}.template.json" for name in STACKS
    ]
    # AND the only thing the app says is where diff and deploy go without credentials: no
    # feature-flag notice (cdk.json records them), no deprecation warning, no Node banner
    assert result.stderr.splitlines().count(NO_CREDENTIALS) == 1
    # AND the tests' file subscribes nobody to the alarms: one warning, on the shared stack, not
    # one per stack; nothing else warns
    assert result.stderr.count(ALARMS_REACH_NOBODY) == 1, result.stderr[-3000:]
    others = [
        line for line in (result.stdout + result.stderr).splitlines() if ALARMS_REACH_NOBODY not in line
    ]
    assert not re.search(r"feature flags|WARNING|Traceback|ModuleNotFoundError|!!", "\n".join(others)), others


@pytest.mark.cli
def test_cdk_diff_without_credentials_points_at_make_diff_once(tmp_path):
    # GIVEN no AWS credentials (and one tenant: the synth before the account error is not the point)
    one_tenant = tmp_path / "tenants.yaml"
    one_tenant.write_text(
        "tenants:\n  - {id: acme, prefix: acme/, sink: {url: 'https://core.example.com/records', "
        "auth: {type: none}}}\n"
    )
    # WHEN `cdk diff` runs
    result = cdk("diff", tmp_path, tenants=one_tenant)
    # THEN the app says once where an offline diff is; the CLI also fails with its own account
    # error (which it prints twice, before or after the app's line as its lookups go: the app
    # cannot change that)
    lines = (result.stdout + result.stderr).splitlines()
    assert result.returncode != 0
    assert lines.count(NO_CREDENTIALS) == 1
    assert "make diff" in NO_CREDENTIALS
    assert (
        "Unable to resolve AWS account to use. It must be either configured when you define your CDK Stack, "
        "or through the environment"
    ) in lines


def test_without_a_venv_the_app_stops_with_one_line_saying_make_setup(tmp_path):
    # GIVEN a fresh clone without .venv (app.py and its launcher alone) and a python3 without
    # aws-cdk-lib
    for name in ("app.py", "tools/__init__.py", "tools/project_env.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    python = machine_python(tmp_path / "bin")
    # WHEN cdk.json's app command runs
    result = subprocess.run(
        [str(python), "app.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}"},
    )
    # THEN it exits 1 with one line: what is missing and the command that makes it
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("aws-cdk-lib is not installed for ") and line.endswith(SETUP_HINT)
    assert result.stdout == ""


@pytest.mark.cli
def test_cdk_json_records_the_feature_flags_cdk_init_records(tmp_path):
    # GIVEN a new Python app made by the pinned CLI's `cdk init`
    if not CDK.exists():
        pytest.fail("node_modules/.bin/cdk is missing: run `make setup` (every make target does)")
    project = tmp_path / "new-app"  # `cdk init` wants an empty directory
    project.mkdir()
    subprocess.run(
        [str(CDK), "init", "app", "--language", "python", "--generate-only"],
        cwd=project,
        env=shell_env(tmp_path),
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    recommended = json.loads((project / "cdk.json").read_text())["context"]
    # THEN cdk.json holds the same flags with the same values (a CLI and aws-cdk-lib upgrade
    # that brings new flags fails here: add them, and look at the snapshots' diff)
    assert json.loads((ROOT / "cdk.json").read_text())["context"] == recommended


def test_new_app_starts_from_the_feature_flags_of_cdk_json_and_the_callers_context_wins():
    from aws_cdk import FeatureFlags, Stack

    from pipeline_constructs.application import new_app

    flag = "@aws-cdk/aws-iam:minimizePolicies"
    assert json.loads((ROOT / "cdk.json").read_text())["context"][flag] is True
    assert FeatureFlags.of(Stack(new_app(), "S")).is_enabled(flag)
    assert not FeatureFlags.of(Stack(new_app(context={flag: False}), "S")).is_enabled(flag)


def test_make_help_lists_every_target_with_its_one_line_description_and_is_the_default():
    phony = re.search(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert phony is not None
    targets = phony[1].split()
    outputs = [
        subprocess.run(
            ["make", "--no-print-directory", *goal],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        for goal in (["help"], [])
    ]
    assert outputs[0] == outputs[1]  # `make` alone
    described = dict(re.findall(r"^  (\S+) +(\S.*)$", outputs[0], re.MULTILINE))
    assert sorted(described) == sorted(targets)
    assert (
        described["diff"]
        == "offline diff of BASE (default origin/main) and the working tree, no AWS credentials."
    )
