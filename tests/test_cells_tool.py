"""`python -m tools.cells`: each cell synthesized by the pinned CLI into an assembly of its own,
deployed shared cells first, and the cells a change touches."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.test_cells import SHARDED, SHARDED_TARGETS
from tools import cells as tool


class FakeCli:
    """Records the CLI runs; every run succeeds."""

    def __init__(self) -> None:
        self.runs: list[list[str]] = []

    def __call__(self, argv) -> tuple[int, str]:
        self.runs.append([Path(argv[0]).name, *argv[1:]])
        return 0, ""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tenants.yaml"
    path.write_text(text)
    return path


def test_deploy_synthesizes_every_cell_then_deploys_the_shared_cell_before_the_shards(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tenants = write(tmp_path, SHARDED)
    cli = FakeCli()

    code = tool.main(["deploy", "--tenants", str(tenants), "--", "--require-approval", "never"], runner=cli)

    assert code == tool.EXIT_OK
    synths = [run for run in cli.runs if run[1] == "synth"]
    assert sorted(run[run.index("--output") + 1] for run in synths) == [
        "cells.out/shard-0",
        "cells.out/shard-1",
        "cells.out/shared",
    ]
    assert all(f"tenants={tenants}" in run for run in synths)
    deploys = [run for run in cli.runs if run[1] == "deploy"]
    assert deploys == [
        [
            "cdk",
            "deploy",
            "--app",
            f"cells.out/{cell}",
            "--no-notices",
            "--require-approval",
            "never",
            "--all",
        ]
        for cell in ("shared", "shard-0", "shard-1")
    ]


def test_a_targets_cells_deploy_its_stage_and_one_cell_can_be_chosen(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tenants = write(tmp_path, SHARDED_TARGETS)
    cli = FakeCli()

    assert (
        tool.main(["deploy", "--tenants", str(tenants), "--cell", "dr-shard-1"], runner=cli) == tool.EXIT_OK
    )

    assert [run for run in cli.runs if run[1] == "deploy"] == [
        ["cdk", "deploy", "--app", "cells.out/dr-shard-1", "--no-notices", "dr/*"]
    ]


def test_diff_compares_every_stack_of_each_cell_with_the_deployed_templates(tmp_path):
    """`--method template`: the read-only lookup role suffices (a pull request never holds the
    deploy role); '**': the stacks inside Stages too; `--fail`: the exit code says differences."""
    cli = FakeCli()
    chosen = tool.selected(tool.load_config(write(tmp_path, SHARDED_TARGETS)), ["prod-shard-0", "dr-shared"])
    assert tool.diff(chosen, runner=cli, out=lambda _: None) is False
    assert cli.runs == [
        ["cdk", "diff", "--app", f"cells.out/{cell}", "--no-notices", "--fail", "--method", "template", "**"]
        for cell in ("prod-shard-0", "dr-shared")
    ]


def test_fails_with_the_cells_there_are_when_a_cell_is_unknown(tmp_path, capsys):
    code = tool.main(
        ["synth", "--tenants", str(write(tmp_path, SHARDED)), "--cell", "shard-9"], runner=FakeCli()
    )
    assert code == tool.EXIT_ERROR
    assert "its cells are: shared, shard-0, shard-1" in capsys.readouterr().err


def test_list_names_each_cell_and_what_it_holds(tmp_path, capsys):
    assert tool.main(["list", "--tenants", str(write(tmp_path, SHARDED))]) == tool.EXIT_OK
    assert capsys.readouterr().out.splitlines() == [
        "shared: the shared stack and dashboards, 0 tenant stack(s)",
        "shard-0: 1 tenant stack(s)",
        "shard-1: 2 tenant stack(s)",
    ]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def test_touched_is_the_changed_tenants_cell_or_every_cell_when_anything_else_changed(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    tenants = write(repo, SHARDED)
    (repo / "app.py").write_text("# the code\n")
    _git(repo, "init", "--quiet")
    _git(repo, "add", "-A")
    _git(repo, "commit", "--quiet", "-m", "base")

    tenants.write_text(
        SHARDED.replace("{id: acme, prefix: acme/}", "{id: acme, prefix: acme/, chunk_size: 7}")
    )
    assert tool.touched_cells(repo, "HEAD", tenants) == (["shard-0"], "the tenants file changed")

    (repo / "new_module.py").write_text("x = 1\n")  # untracked code counts too
    names, why = tool.touched_cells(repo, "HEAD", tenants)
    assert names == ["shared", "shard-0", "shard-1"] and why.startswith("the code changed (new_module.py)")


def test_a_tenants_file_outside_the_repository_touches_every_cell(tmp_path):
    """The base revision has no copy of a file kept outside the repository: compared with itself
    it would touch no cell, whatever it changes; every cell is diffed instead."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("# the code\n")
    _git(repo, "init", "--quiet")
    _git(repo, "add", "-A")
    _git(repo, "commit", "--quiet", "-m", "base")
    outside = write(tmp_path, SHARDED)
    assert tool.base_config(repo, "HEAD", outside) is None
    assert tool.touched_cells(repo, "HEAD", outside) == (
        ["shared", "shard-0", "shard-1"],
        "HEAD has no copy of a tenants file outside the repository: every cell",
    )


@pytest.mark.cli
def test_synth_writes_one_assembly_per_cell_holding_exactly_its_stacks(tmp_path, monkeypatch):
    """GIVEN the sharded file WHEN `python -m tools.cells synth` runs the pinned CLI THEN each cell
    has its own assembly with its own stacks: the shared stack alone, then each shard's tenants."""
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    outdir = tmp_path / "cells.out"
    built = tool.synth(
        write(tmp_path, SHARDED),
        tool.selected(tool.load_config(tmp_path / "tenants.yaml"), []),
        outdir=outdir,
    )

    stacks = {
        name: sorted(
            a
            for a, artifact in json.loads((path / "manifest.json").read_text())["artifacts"].items()
            if artifact["type"] == "aws:cloudformation:stack"
        )
        for name, path in built.items()
    }
    assert stacks == {
        "shared": ["OrderedIngest-Shared"],
        "shard-0": ["OrderedIngest-Tenant-acme"],
        "shard-1": ["OrderedIngest-Tenant-globex", "OrderedIngest-Tenant-initech"],
    }


def test_synth_warns_once_when_alarms_reach_nobody_not_once_per_cell(tmp_path, monkeypatch, capsys):
    """GIVEN a file with three cells and nobody subscribed WHEN `make synth` synthesizes them in
    parallel (each cell's CLI output is not shown) THEN one warning line on stderr, with the fix;
    none with an address subscribed."""
    from pipeline_constructs.config import ALARMS_REACH_NOBODY

    monkeypatch.setattr(tool, "cdk", lambda: "cdk")
    cli = FakeCli()
    assert tool.main(["synth", "--tenants", str(write(tmp_path, SHARDED))], runner=cli) == tool.EXIT_OK
    assert len(cli.runs) == 3
    assert capsys.readouterr().err == f"warning: {ALARMS_REACH_NOBODY}\n"
    subscribed = write(tmp_path, "notifications: {emails: [oncall@example.com]}\n" + SHARDED)
    assert tool.main(["synth", "--tenants", str(subscribed)], runner=FakeCli()) == tool.EXIT_OK
    assert capsys.readouterr().err == ""


def test_synth_lists_the_tenants_that_run_without_credentials(tmp_path, monkeypatch, capsys):
    """GIVEN a file whose defaults let tenants run without credentials on purpose, and one bearer
    tenant WHEN `make synth` runs THEN its summary names the tenants without credentials."""
    monkeypatch.setattr(tool, "cdk", lambda: "cdk")
    text = (
        "defaults:\n  prefix: '{id}/'\n  sink: {url: 'https://core.example.com', auth: {type: none, inherited: true}}\n"
        "tenants:\n  - id: shop-a\n  - id: bank\n    sink: {auth: {type: bearer, secret: 'bank/token'}}\n"
        "  - id: shop-b\n"
    )
    assert tool.main(["synth", "--tenants", str(write(tmp_path, text))], runner=FakeCli()) == tool.EXIT_OK
    assert (
        "without credentials (2 tenant(s), sink.auth type none): shop-a, shop-b\n" in capsys.readouterr().out
    )


def test_fails_when_the_cells_together_break_a_deploy_time_limit(tmp_path):
    """GIVEN two cells, each within every limit alone, whose shared stacks deploy to one account
    in two Regions with one dashboard name WHEN `make synth` checks the cells together THEN it
    fails naming both (dashboard names are unique per account in every Region)."""
    import json

    from pipeline_constructs.config import parse_config
    from tools.cells import CellsError, _check_across_cells

    def cell(name: str, region: str) -> Path:
        directory = tmp_path / name
        directory.mkdir()
        template = {
            "Resources": {
                "Dashboard": {
                    "Type": "AWS::CloudWatch::Dashboard",
                    "Properties": {"DashboardName": "OrderedIngest"},
                }
            }
        }
        (directory / "Shared.template.json").write_text(json.dumps(template))
        (directory / "manifest.json").write_text(
            json.dumps(
                {
                    "artifacts": {
                        "Shared": {
                            "type": "aws:cloudformation:stack",
                            "environment": f"aws://111111111111/{region}",
                            "properties": {
                                "templateFile": "Shared.template.json",
                                "stackName": "OrderedIngest-Shared",
                            },
                        }
                    }
                }
            )
        )
        return directory

    config = parse_config(
        "tenants:\n  - {id: acme, prefix: acme/, sink: {url: 'https://x.example.com', auth: {type: none}}}\n"
    )
    with pytest.raises(CellsError) as caught:
        _check_across_cells(config, [cell("eu-shared", "eu-west-1"), cell("us-shared", "us-east-1")])
    assert "the cells together break AWS's deploy-time limits" in str(caught.value)
    assert "CloudWatch::Dashboard 'OrderedIngest'" in str(caught.value)
    assert "deployed to 111111111111/us-east-1" in str(caught.value)


def test_synth_shows_the_chunk_sizes_the_pace_model_chose(tmp_path, monkeypatch, capsys):
    """GIVEN tenants that leave chunk_size out in record mode, in batch mode and with a 60 s sink
    timeout, and one that writes its own WHEN `make synth` runs THEN its summary shows each
    computed size with its tenants, and counts the one written in the file (which wins)."""
    monkeypatch.setattr(tool, "cdk", lambda: "cdk")
    text = (
        "defaults:\n  prefix: '{id}/'\n  sink: {url: 'https://core.example.com', auth: {type: none, inherited: true}}\n"
        "tenants:\n  - id: rec-a\n  - id: rec-b\n  - id: bat\n    sink: {batch_size: 100}\n"
        "  - id: slow\n    sink: {timeout_seconds: 60}\n  - id: own\n    chunk_size: 250\n"
    )
    assert tool.main(["synth", "--tenants", str(write(tmp_path, text))], runner=FakeCli()) == tool.EXIT_OK
    assert (
        "chunk_size computed from the sink settings: 9,198 (slow); 20,000 (rec-a, rec-b); 100,000 (bat); "
        "written in the tenants file: 1 tenant(s)\n"
    ) in capsys.readouterr().out
