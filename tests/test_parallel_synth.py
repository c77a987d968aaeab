"""`cdk synth` in several processes (`pipeline_constructs/parallel_synth.py`): the merged cloud
assembly must be the one a single process writes, byte for byte, with and without deployment
targets; a failing worker or two workers that disagree fail the synth, saying why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline_constructs import jsii_channel, parallel_synth
from pipeline_constructs.parallel_synth import ParallelSynthError, Part, merge_assemblies, workers_for
from tests.conftest import FIXTURE_TENANTS, ROOT
from tests.test_targets import TWO_TARGETS

def run_app(tenants: Path, outdir: Path, workers: int | str, channel: str = "direct") -> subprocess.CompletedProcess:
    """`app.py` as the CDK CLI runs it: output directory and context in the environment. The
    one-process references use jsii's own relay (`channel`), the workers the direct channel
    (`pipeline_constructs/jsii_channel.py`): the comparison covers both."""
    env = {**os.environ, "CDK_OUTDIR": str(outdir), jsii_channel.CHANNEL_ENV: channel,
           "CDK_CONTEXT_JSON": json.dumps({"tenants": str(tenants), "synth_workers": workers})}
    return subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True)


def files_of(outdir: Path) -> dict[str, bytes]:
    return {str(path.relative_to(outdir)): path.read_bytes() for path in sorted(outdir.rglob("*")) if path.is_file()}


def assert_same_assembly(serial: Path, parallel: Path) -> None:
    """Every file byte for byte, but the validation report: the same findings, whose order
    across deployment targets may differ (CDK groups them by rule in an order of its own)."""
    expected, actual = files_of(serial), files_of(parallel)
    assert sorted(actual) == sorted(expected)
    different = [name for name in expected if actual[name] != expected[name] and name != "validation-report.json"]
    assert different == []
    assert findings(actual["validation-report.json"]) == findings(expected["validation-report.json"])


def findings(report: bytes) -> list:
    plugins = json.loads(report)["pluginReports"]
    return sorted(
        (plugin["pluginName"], plugin["conclusion"], kind, json.dumps(finding, sort_keys=True))
        for plugin in plugins for kind in ("violations", "suppressedViolations") for finding in plugin[kind]
    )


@pytest.mark.parametrize("workers", [2, 3])
def test_the_merged_assembly_is_the_one_process_assembly_byte_for_byte(tmp_path, workers):
    # GIVEN the fixture's tenants (three tenant stacks, the shared stack, cdk-nag on)
    serial = run_app(FIXTURE_TENANTS, tmp_path / "serial", 1, channel="relay")
    assert serial.returncode == 0, serial.stderr
    # WHEN several workers each build a slice and the parent merges their assemblies
    parallel = run_app(FIXTURE_TENANTS, tmp_path / "parallel", workers)
    # THEN every file is the same: templates, asset manifests, metadata, manifest, tree, report
    assert parallel.returncode == 0, parallel.stderr
    assert_same_assembly(tmp_path / "serial", tmp_path / "parallel")
    manifest = json.loads((tmp_path / "parallel" / "manifest.json").read_text())
    stacks = [name for name, artifact in manifest["artifacts"].items() if artifact["type"] == "aws:cloudformation:stack"]
    assert stacks == ["OrderedIngest-Shared", "OrderedIngest-Tenant-acme", "OrderedIngest-Tenant-globex",
                      "OrderedIngest-Tenant-initech"]
    assert not any(path.name.startswith(".synth-parts-") for path in tmp_path.iterdir())


def test_deployment_targets_merge_stage_by_stage(tmp_path):
    # GIVEN two targets, each a Stage with its own nested assembly and shared stack
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(TWO_TARGETS)
    assert run_app(tenants, tmp_path / "serial", 1, channel="relay").returncode == 0
    # WHEN two workers build it (acme in one; globex and initech in the other: the first has no
    # tenant of the dr target, whose shared stack it still builds)
    parallel = run_app(tenants, tmp_path / "parallel", 2)
    # THEN each Stage's assembly is the serial one
    assert parallel.returncode == 0, parallel.stderr
    assert_same_assembly(tmp_path / "serial", tmp_path / "parallel")
    nested = json.loads((tmp_path / "parallel" / "assembly-prod" / "manifest.json").read_text())
    stacks = [artifact["displayName"] for artifact in nested["artifacts"].values()
              if artifact["type"] == "aws:cloudformation:stack"]
    assert stacks == ["prod/OrderedIngest-Shared", "prod/OrderedIngest-Tenant-acme", "prod/OrderedIngest-Tenant-globex"]


def test_the_cli_reads_the_merged_assembly(tmp_path):
    # GIVEN the pinned CLI running the app with two workers
    outdir = tmp_path / "cdk.out"
    env = {**os.environ, "CDK_DISABLE_CLI_TELEMETRY": "true"}
    synth = subprocess.run(
        ["cdk", "synth", "--quiet", "-o", str(outdir), "-c", f"tenants={FIXTURE_TENANTS}", "-c", "synth_workers=2"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )
    assert synth.returncode == 0, synth.stderr
    # WHEN it lists the stacks of that assembly
    listed = subprocess.run(["cdk", "ls", "--app", str(outdir)], cwd=ROOT, env=env, capture_output=True, text=True)
    # THEN it finds every stack
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["OrderedIngest-Shared", "OrderedIngest-Tenant-acme", "OrderedIngest-Tenant-globex",
                                     "OrderedIngest-Tenant-initech"]


def test_fails_when_a_worker_fails_with_its_output(tmp_path):
    # GIVEN a tenants file that breaks once the parent has decided (as a construct error would)
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text("tenants: [{id: acme}]\n")
    # WHEN two workers synthesize it
    with pytest.raises(ParallelSynthError) as raised:
        parallel_synth.synthesize(tenants, tmp_path / "cdk.out", 2)
    # THEN the error names each failing worker and carries what it printed
    message = str(raised.value)
    assert "synth worker 0/2 failed:" in message and "synth worker 1/2 failed:" in message
    assert "tenant 'acme'" in message and "prefix" in message


def test_fails_when_two_workers_write_different_contents_for_one_file(tmp_path):
    # GIVEN two parts whose shared template differs (a tenant referencing an export the other lacks)
    for index, body in enumerate(['{"Outputs": {}}', '{"Outputs": {"ExportsOutputRefX": {}}}']):
        part = tmp_path / f"part-{index}"
        part.mkdir()
        (part / "OrderedIngest-Shared.template.json").write_text(body)
    # WHEN they are merged
    with pytest.raises(ParallelSynthError) as raised:
        merge_assemblies([tmp_path / "part-0", tmp_path / "part-1"], tmp_path / "out")
    # THEN the merge stops and names the file and the way out
    assert str(raised.value) == (
        "synth workers wrote different contents for OrderedIngest-Shared.template.json; synthesize in one "
        "process (-c synth_workers=1) and report this"
    )


def test_fails_when_synth_workers_is_not_a_number(tmp_path):
    result = run_app(FIXTURE_TENANTS, tmp_path / "out", "many")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "context synth_workers='many' is not valid; give a whole number of processes (1: synthesize in this "
        "process) or 'auto'"
    )


@pytest.mark.parametrize(
    ("tenants", "requested", "cores", "workers"),
    [
        (3, "auto", 8, 1),        # few tenants: one process (a worker's start costs more than it saves)
        (199, "auto", 8, 1),
        (200, "auto", 8, 2),      # at least MIN_TENANTS_PER_WORKER tenants each
        (1000, "auto", 2, 2),     # never more workers than cores
        (1000, "auto", 16, 10),
        (1000, None, 2, 2),
        (3, 8, 2, 3),             # as asked, but never more workers than tenants
        (1000, 1, 8, 1),
    ],
)
def test_workers_for(tenants, requested, cores, workers):
    assert workers_for(tenants, requested, cores=cores) == workers


@pytest.mark.parametrize("total", [1, 2, 3, 10, 1001])
@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_parts_slice_the_tenants_in_order_once_each(total, count):
    slices = [Part(index, count).slice(total) for index in range(count)]
    assert [tenant for part in slices for tenant in part] == list(range(total))
    assert [Part(index, count).builds_dashboards for index in range(count)] == [False] * (count - 1) + [True]


def test_the_part_that_builds_the_dashboards_builds_fewer_tenants():
    # 1,000 tenants in two parts: the dashboards are worth about 55 tenants of work
    assert [len(Part(index, 2).slice(1000)) for index in range(2)] == [528, 472]
    assert [len(Part(index, 3).slice(1000)) for index in range(3)] == [352, 351, 297]
    assert [len(Part(index, 2).slice(3)) for index in range(2)] == [2, 1]
