"""Cells: a tenants file synthesized as small units (`pipeline_constructs/cell_plan.py`), each its
own assembly, joined by names and SSM parameters, never by export."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from aws_cdk import App

from pipeline_constructs import cell_plan
from pipeline_constructs.application import build_app
from pipeline_constructs.config import parse_config
from pipeline_constructs.stacks import shared_parameter
from tests.conftest import FIXTURE_TENANTS, ssm_parameter_ref
from tests.test_sharded_stacks import SHARD_OF, SHARDED
from tests.test_targets import TWO_TARGETS

SHARDED_TARGETS = textwrap.dedent(
    """
    routing: {shards: 2}
    targets:
      prod: {account: '111111111111', region: eu-west-1}
      dr: {account: '222222222222', region: us-east-1}
    defaults:
      sink: {url: https://core.example.com/records, auth: {type: bearer, secret: core/token}}
      target: prod
    tenants:
      - {id: acme, prefix: acme/}
      - {id: globex, prefix: globex/}
      - {id: initech, prefix: initech/, target: dr}
    """
)


def names_of(text: str) -> list[str]:
    return [cell.name for cell in cell_plan.cells_of(parse_config(text))]


def test_a_file_without_shards_and_targets_is_one_cell_of_everything():
    (cell,) = cell_plan.cells_of(parse_config(Path(FIXTURE_TENANTS).read_text()))
    assert cell == cell_plan.Cell("app", None, True, ("acme", "globex", "initech"))


def test_shards_make_a_shared_cell_and_a_cell_per_shard_each_tenant_in_its_shards():
    config = parse_config(SHARDED)
    assert names_of(SHARDED) == ["shared", "shard-0", "shard-1"]
    by_name = {cell.name: cell for cell in cell_plan.cells_of(config)}
    assert by_name["shared"].tenant_ids == () and by_name["shared"].shared
    for tenant, shard in SHARD_OF.items():
        assert tenant in by_name[f"shard-{shard}"].tenant_ids
        assert not by_name[f"shard-{shard}"].shared and by_name[f"shard-{shard}"].shard == shard


def test_targets_make_a_cell_each_or_with_shards_a_shared_and_shard_cells_each():
    assert names_of(TWO_TARGETS) == ["prod", "dr"]
    assert names_of(SHARDED_TARGETS) == [
        "prod-shared",
        "prod-shard-0",
        "prod-shard-1",
        "dr-shared",
        "dr-shard-1",
    ]


def test_fails_when_the_cell_is_not_one_of_the_files():
    with pytest.raises(cell_plan.UnknownCell) as caught:
        cell_plan.cell_named(parse_config(SHARDED), "shard-7")
    assert str(caught.value) == (
        "cell 'shard-7' is not a cell of this tenants file; its cells are: shared, shard-0, "
        "shard-1 (leave -c cell out to synthesize all of them)"
    )


@pytest.fixture(scope="module")
def sharded_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cells") / "tenants.yaml"
    path.write_text(SHARDED)
    return path


def synth(tenants_file: Path, outdir: Path, cell: str | None) -> dict[str, dict]:
    built = build_app(tenants_file, app=App(outdir=str(outdir)), nag=False, cell=cell)
    return {stack.stack_name: stack.template for stack in built.app.synth().stacks}


@pytest.fixture(scope="module")
def whole(sharded_file, tmp_path_factory) -> dict[str, dict]:
    return synth(sharded_file, tmp_path_factory.mktemp("whole"), None)


@pytest.mark.slow  # cfn-lint or synthesis over whole apps: make test (make test-fast runs tests/test_user_tenants.py)
def test_a_shard_cell_synthesizes_its_tenants_stacks_alone_exactly_as_the_whole_app_does(
    sharded_file, whole, tmp_path
):
    """GIVEN the sharded file WHEN shard 1 is synthesized alone THEN its assembly holds the stacks of
    globex and initech only, byte for byte the templates the whole app has for them; the shared
    cell holds the shared stack alone."""
    shard = synth(sharded_file, tmp_path / "shard", "shard-1")
    assert sorted(shard) == ["OrderedIngest-Tenant-globex", "OrderedIngest-Tenant-initech"]
    assert all(shard[name] == whole[name] for name in shard)
    shared = synth(sharded_file, tmp_path / "shared", "shared")
    assert (
        sorted(shared) == ["OrderedIngest-Shared"]
        and shared["OrderedIngest-Shared"] == whole["OrderedIngest-Shared"]
    )


def test_tenant_stacks_import_nothing_and_read_the_shared_resources_from_its_ssm_parameters(whole):
    """No `Fn::ImportValue` in a tenant template (an export in use can never change); the shared
    stack writes the parameters the tenants read, and keeps its exports for one release."""
    shared = whole["OrderedIngest-Shared"]
    written = {
        r["Properties"]["Name"]: r["Properties"]["Value"]
        for r in shared["Resources"].values()
        if r["Type"] == "AWS::SSM::Parameter"
    }
    assert set(written) == {
        shared_parameter(name) for name in ("ledger-table-name", "alarm-topic-arn", "alarm-topic-key-arn")
    }
    assert len([o for o in shared["Outputs"].values() if "Export" in o]) == 4
    for name, template in whole.items():
        if name.startswith("OrderedIngest-Tenant-"):
            assert "Fn::ImportValue" not in json.dumps(template), name
            for parameter in written:
                assert ssm_parameter_ref(template, parameter), (name, parameter)


def touched(before: str, after: str) -> list[str]:
    return cell_plan.touched(parse_config(before), parse_config(after))


def test_a_change_of_one_tenant_touches_its_shard_cell_only():
    changed = SHARDED.replace(
        "{id: initech, prefix: initech/incoming/}", "{id: initech, prefix: initech/incoming/, chunk_size: 50}"
    )
    assert touched(SHARDED, changed) == ["shard-1"]


def test_a_change_the_shared_stack_reads_touches_the_shared_cell_too():
    moved = SHARDED.replace("{id: initech, prefix: initech/incoming/}", "{id: initech, prefix: initech/in/}")
    assert touched(SHARDED, moved) == ["shared", "shard-1"]
    added = SHARDED + "  - {id: hooli, prefix: hooli/}\n"
    assert touched(SHARDED, added)[0] == "shared" and len(touched(SHARDED, added)) == 2


def test_a_change_of_defaults_touches_every_tenant_and_a_shared_setting_every_cell():
    assert touched(SHARDED, SHARDED.replace("core/token}}", "core/token}, timeout_seconds: 5}")) == [
        "shard-0",
        "shard-1",
    ]
    assert touched(SHARDED, "notifications: {emails: [ops@example.com]}\n" + SHARDED) == [
        "shared",
        "shard-0",
        "shard-1",
    ]
    assert touched(SHARDED, SHARDED) == []


#: Every tenant setting the shared stack does not read, changed for every tenant.
ELSEWHERE = SHARDED.replace(
    "sink: {url: https://core.example.com/records, auth: {type: bearer, secret: core/token}}",
    "sink: {url: https://other.example.com/in, auth: {type: bearer, secret: core-token}, timeout_seconds: 5,\n"
    "         batch_size: 10, outage_budget_seconds: 600}\n"
    "  format: jsonl\n  chunk_size: 50\n  on_failure: continue\n  duplicate_files: skip\n"
    "  alarms: {queue_age_seconds: 600, error_logs_threshold: 3}\n"
    "  completion: {wait: true, timeout_seconds: 3600, callers: ['arn:aws:iam::111111111111:role/core']}",
)


def test_the_shared_cell_reads_nothing_of_the_tenants_but_its_inputs(sharded_file, whole, tmp_path):
    """GIVEN a file that changes every tenant setting outside `shared_inputs` WHEN its shared cell is
    synthesized THEN the template is the same as before: the shared cell's digest may leave those
    settings out, and a diff that skips the shared cell for such a change misses nothing."""
    assert (
        cell_plan.fingerprints(parse_config(ELSEWHERE))["shared"]
        == cell_plan.fingerprints(parse_config(SHARDED))["shared"]
    )
    assert touched(SHARDED, ELSEWHERE) == ["shard-0", "shard-1"]
    elsewhere = tmp_path / "tenants.yaml"
    elsewhere.write_text(ELSEWHERE)
    assert synth(elsewhere, tmp_path / "out", "shared") == {
        "OrderedIngest-Shared": whole["OrderedIngest-Shared"]
    }
