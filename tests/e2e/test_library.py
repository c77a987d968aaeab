"""The project as a library: the wheel built and checked as PyPI would, installed into a fresh
environment outside the repository, where a team's own app (examples/embedded) synthesizes,
cdk-nag clean; that app run on the local runtime, operated by the installed `ops`."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_runtime import LocalPipeline
from tests.conftest import ROOT
from tests.e2e.pipeline_checks import E2E_TIME_SCALE

EXAMPLE = ROOT / "examples" / "embedded"
#: What the package is made of (pyproject.toml); the build reads nothing else.
PACKAGED = ("pyproject.toml", "README.md", "LICENSE", "lambdas", "ops", "pipeline_constructs")
NODE_PATH = f"{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}"


def run(
    *command: str | Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, (
        f"{command}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done


def outside_env(**extra: str) -> dict[str, str]:
    """An environment that knows nothing of the repository: no PYTHONPATH, Node on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {
        **env,
        "PATH": NODE_PATH,
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
        **extra,
    }


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel (built from the sdist), from a copy of what the package holds."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("dist")
    for name in PACKAGED:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(
            ROOT / name,
            source / name,
            **({"ignore": shutil.ignore_patterns("__pycache__")} if (ROOT / name).is_dir() else {}),
        )
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, source, cwd=source)
    return out


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh environment with only the wheel and what it requires, at the lock's versions."""
    where = tmp_path_factory.mktemp("team")
    locked = [
        line.split(" ")[0]
        for line in (ROOT / "requirements-lock.txt").read_text().splitlines()
        if "==" in line and not line.startswith((" ", "#"))
    ]
    (where / "constraints.txt").write_text("\n".join(locked) + "\n")
    uv = Path(sys.executable).with_name("uv")
    run(uv, "venv", "--quiet", "--python", sys.executable, where / "venv", cwd=where)
    (wheel,) = dist.glob("*.whl")
    run(
        uv,
        "pip",
        "install",
        "--quiet",
        "--python",
        where / "venv" / "bin" / "python",
        wheel,
        "-c",
        where / "constraints.txt",
        cwd=where,
    )
    return where / "venv"


def test_the_sdist_and_wheel_pass_twine_check_and_the_wheel_holds_the_code_and_the_ops_script(dist: Path):
    run(sys.executable, "-m", "twine", "check", "--strict", *sorted(dist.iterdir()), cwd=dist)
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(n).decode() for n in names if n.endswith("entry_points.txt"))
        metadata = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    lambdas = {p.relative_to(ROOT / "lambdas").as_posix() for p in (ROOT / "lambdas").rglob("*.py")}
    assert {
        n.removeprefix("lambdas/") for n in names if n.startswith("lambdas/")
    } == lambdas  # lambdas/contract/ too
    assert {
        "ops/cli.py",
        "pipeline_constructs/tenant_pipeline.py",
        "pipeline_constructs/deploy_limits/checks.py",
    } <= names
    assert not any(n.startswith(("tests/", "local_runtime/", "demo/", "tools/")) for n in names)
    assert "ops = ops.cli:main" in entry_points
    requires = [
        line.removeprefix("Requires-Dist: ")
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:")
    ]
    assert "aws-cdk-lib<3,>=2.275.0" in requires and "constructs<11,>=10.4" in requires


def test_a_team_app_synthesizes_from_the_installed_wheel_outside_the_repository_cdk_nag_clean(venv: Path):
    """GIVEN the wheel in a fresh environment and the example app copied outside the repository
    WHEN the app synthesizes THEN the constructs and the Lambda code come from site-packages,
    the team's stack holds its two pipelines (each registered for ops) under its own name, and
    cdk-nag and the deploy-time limits report nothing."""
    team = venv.parent / "app"
    shutil.copytree(EXAMPLE, team)
    script = (
        "import json, app, pipeline_constructs, lambdas; app.build('cdk.out').synth(); "
        "print(json.dumps([pipeline_constructs.__file__, lambdas.__file__]))"
    )
    done = run(venv / "bin" / "python", "-c", script, cwd=team, env=outside_env())
    for file in json.loads(done.stdout.splitlines()[-1]):
        assert Path(file).is_relative_to(venv) and not Path(file).is_relative_to(ROOT)
    template = json.loads((team / "cdk.out" / "Payments-Ingest.template.json").read_text())
    registry = sorted(
        r["Properties"]["Name"] for r in template["Resources"].values() if r["Type"] == "AWS::SSM::Parameter"
    )
    assert registry == ["/ordered-ingest/pipelines/cards", "/ordered-ingest/pipelines/refunds"]
    report = json.loads((team / "cdk.out" / "validation-report.json").read_text())
    assert [(p["pluginName"], p["conclusion"], p["violations"]) for p in report["pluginReports"]] == [
        ("AwsSolutions", "success", [])
    ]
    run(venv / "bin" / "ops", "--help", cwd=team, env=outside_env())


def _example_build():
    spec = importlib.util.spec_from_file_location("embedded_example_app", EXAMPLE / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build


@pytest.fixture(scope="module")
def pipe() -> Iterator[LocalPipeline]:
    with LocalPipeline(_example_build(), time_scale=E2E_TIME_SCALE) as running:
        yield running


def test_the_team_app_runs_on_the_local_runtime_and_the_installed_ops_finds_and_reports_its_tenants(
    pipe, venv
):
    """GIVEN the example app on the local runtime WHEN each tenant gets a file THEN the core
    system receives each in order, and the installed `ops status` finds both tenants by their
    registry (no app stack exists) with their file ingested, and pauses and unpauses one."""
    assert sorted(pipe.tenant_ids) == ["cards", "refunds"]
    assert set(pipe.deployment.stacks) == {"Payments-Ingest"}
    pipe.put_file("cards", "day-1.csv", "id,amount\n1,10\n2,20\n")
    pipe.put_file("refunds", "day-1.jsonl", '{"id": 1}\n{"id": 2}\n{"id": 3}\n')
    pipe.wait_until_idle(timeout=120)
    assert [r["id"] for r in pipe.sink("cards").accepted] == ["1", "2"]
    assert [r["id"] for r in pipe.sink("refunds").accepted] == [1, 2, 3]

    env = outside_env(
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1"
    )
    done = run(
        venv / "bin" / "ops",
        "--endpoint-url",
        pipe.endpoint_url,
        "status",
        "--json",
        cwd=venv.parent,
        env=env,
    )
    statuses = {s["tenant"]: s for s in json.loads(done.stdout)}
    assert set(statuses) == {"cards", "refunds"}
    assert all(s["state"] == "idle" and s["last_24h"]["succeeded"] == 1 for s in statuses.values()), statuses

    # Operated, not only read: a pause and its end, through the installed command.
    ops = (venv / "bin" / "ops", "--endpoint-url", pipe.endpoint_url)
    run(*ops, "pause", "cards", "--reason", "core maintenance", cwd=venv.parent, env=env)
    paused = {
        s["tenant"]: s for s in json.loads(run(*ops, "status", "--json", cwd=venv.parent, env=env).stdout)
    }
    assert (paused["cards"]["state"], paused["refunds"]["state"]) == ("paused", "idle")
    run(*ops, "unpause", "cards", cwd=venv.parent, env=env)
    pipe.put_file("cards", "day-2.csv", "id,amount\n3,30\n")
    pipe.wait_until_idle(timeout=120)
    assert [r["id"] for r in pipe.sink("cards").accepted] == ["1", "2", "3"]
