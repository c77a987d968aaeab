"""Cells: a tenants file synthesized as small units, each its own cloud assembly.

One run of the app synthesizes one cell (`cdk synth -c cell=<name>`), or, with no cell named,
every cell in one assembly. A cell is a deployment target, named after it (`app` without
targets); with `routing.shards` a target splits into a shared cell (`shared` or
`<target>-shared`: shared stack, dashboards) and a cell per shard (`shard-<n>` or
`<target>-shard-<n>`: its tenants' stacks).

Cells never refer to each other by CloudFormation export: a tenant stack finds the shared
resources by fixed names or by SSM parameters read at deploy time (`stacks.SHARED_PARAMETERS`),
so a cell synthesizes, diffs and deploys alone, and a change to one tenant touches one shard
cell. `fingerprints` digests each cell's inputs to tell which cells a change of the tenants
file touches; a change of the code touches every cell (`tools/offline_diff.py`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pipeline_constructs import routing
from pipeline_constructs.config import AppConfig, TenantConfig

#: The one cell of a tenants file without shards and targets.
APP_CELL = "app"
SHARED_CELL = "shared"
SHARD_CELL = "shard-{}"


class UnknownCell(ValueError):
    """`-c cell=<name>` names no cell of the tenants file; the message lists the cells."""


@dataclass(frozen=True)
class Cell:
    """One unit of synthesis and deployment."""

    name: str
    #: The deployment target (a CDK Stage of that name), None without `targets:`.
    target: str | None
    #: Whether the cell holds the target's shared stack and dashboards.
    shared: bool
    #: The tenants whose stacks the cell holds, in the file's order.
    tenant_ids: tuple[str, ...]
    #: The routing shard of those tenants (None: no shards, or the shared cell).
    shard: int | None = None


def _name(target: str | None, cell: str) -> str:
    return cell if target is None else f"{target}-{cell}"


def _targets(config: AppConfig) -> list[tuple[str | None, tuple[TenantConfig, ...]]]:
    if not config.targets:
        return [(None, config.tenants)]
    return [(name, tuple(t for t in config.tenants if t.target == name)) for name in config.targets]


def cells_of(config: AppConfig) -> tuple[Cell, ...]:
    """Every cell of the tenants file, shared cells before the shard cells of their target."""
    cells: list[Cell] = []
    for target, tenants in _targets(config):
        if not config.routing.shards:
            cells.append(Cell(target or APP_CELL, target, True, tuple(t.id for t in tenants)))
            continue
        cells.append(Cell(_name(target, SHARED_CELL), target, True, ()))
        for shard in routing.layout(tenants, config.routing.shards):
            if not shard.tenant_ids:
                continue  # nothing to synthesize or deploy
            cells.append(
                Cell(
                    _name(target, SHARD_CELL.format(shard.index)),
                    target,
                    False,
                    shard.tenant_ids,
                    shard=shard.index,
                )
            )
    return tuple(cells)


def cell_named(config: AppConfig, name: str) -> Cell:
    """The cell `name` of the tenants file; `UnknownCell` lists the cells there are."""
    cells = cells_of(config)
    for cell in cells:
        if cell.name == name:
            return cell
    raise UnknownCell(
        f"cell {name!r} is not a cell of this tenants file; its cells are: "
        f"{', '.join(c.name for c in cells)} (leave -c cell out to synthesize all of them)"
    )


def shared_inputs(config: AppConfig, tenants: Iterable[TenantConfig]) -> dict[str, Any]:
    """What a target's shared stack and dashboards read: the app-wide settings, and of each of
    the target's tenants its id, prefix, uploaders and stall threshold (the landing bucket
    policy, the catch-all of unmatched uploads, the shard layout, the dashboards)."""
    return {
        "app": _app_settings(config),
        "tenants": [
            {
                "id": t.id,
                "prefix": t.prefix,
                "uploaders": list(t.uploaders),
                "stall_after_seconds": t.alarms.stall_after_seconds,
            }
            for t in tenants
        ],
    }


def _app_settings(config: AppConfig) -> dict[str, Any]:
    """Every setting that is not a tenant's (`defaults` are already in each tenant)."""
    return config.model_dump(mode="json", exclude={"tenants"})


def fingerprints(config: AppConfig) -> dict[str, str]:
    """Each cell's name -> a digest of everything its synthesis reads from the tenants file: a
    cell whose digest did not change between two tenants files synthesizes the same (with the
    same code)."""
    by_id = {t.id: t for t in config.tenants}
    app = _app_settings(config)
    digests = {}
    for cell in cells_of(config):
        tenants = [by_id[tenant_id] for tenant_id in cell.tenant_ids]
        inputs: dict[str, Any] = {
            "cell": cell.name,
            "app": app,
            "tenants": [t.model_dump(mode="json") for t in tenants],
        }
        if cell.shared:
            target_tenants = [t for t in config.tenants if cell.target is None or t.target == cell.target]
            inputs["shared"] = shared_inputs(config, target_tenants)
        digests[cell.name] = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    return digests


def touched(base: AppConfig | None, head: AppConfig) -> list[str]:
    """The cells of `head` or `base` whose inputs differ between the two tenants files (base
    None: every cell of head), in head's order, then cells only base has."""
    after = fingerprints(head)
    before = fingerprints(base) if base is not None else {}
    changed = [name for name, digest in after.items() if before.get(name) != digest]
    return changed + [name for name in before if name not in after]
