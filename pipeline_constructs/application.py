"""Build the whole CDK app from a tenants file; used by app.py, the tests and the local runtime."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aws_cdk import App, Environment, Stage, Validations
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from pipeline_constructs.config import AppConfig, load_config
from pipeline_constructs.parallel_synth import Part
from pipeline_constructs.stacks import DashboardStack, SharedStack, TenantStack, dashboard_stacks


@dataclass(frozen=True)
class TargetStage:
    """One deployment target: a CDK Stage (`cdk deploy '<name>/*'`) with its own shared stack
    and its tenants' stacks, bound to the target's account and Region."""

    stage: Stage
    shared: SharedStack
    tenants: dict[str, TenantStack]
    #: The second and later dashboards (none up to `dashboard.TENANTS_PER_DASHBOARD` tenants).
    dashboards: tuple[DashboardStack, ...] = ()


def new_app(**props: Any) -> App:
    """An `App` (``props``: its options, such as ``outdir``) without CDK's built-in CloudFormation
    validation. That plugin runs a WASM validator over every template on every synth and only
    warns (its findings fail nothing unless `@aws-cdk/core:validateAgainstDefaultRules` is
    set); it was about 70 % of the synth phase here (0.1 s a template, plus 4 s to load it),
    growing with the tenants. The templates are checked by cfn-lint instead, errors failing
    (`tests/test_app.py`, `bench/synth_scale.py`). cdk-nag is not affected."""
    return App(builtin_cloud_formation_validation=False, **props)


@dataclass(frozen=True)
class IngestApp:
    app: App
    config: AppConfig
    #: Without `targets:`, the one shared stack; with targets, the first target's (see `stages`).
    shared: SharedStack
    #: Every tenant's stack, whatever its target.
    tenants: dict[str, TenantStack]
    #: With `targets:`, one Stage per target by name; empty without.
    stages: dict[str, TargetStage] = field(default_factory=dict)
    #: The second and later dashboards' stacks (of every target).
    dashboards: tuple[DashboardStack, ...] = ()


def build_app(tenants_file: str | Path, *, app: App | None = None, nag: bool = True,
              part: Part | None = None, config: AppConfig | None = None) -> IngestApp:
    """One shared stack and one stack per tenant; cdk-nag AwsSolutions runs on every synth.

    With `targets:` in the tenants file, the same layout once per target, each in a Stage of
    its own; without, the stacks sit at the top of the app, environment-agnostic.

    With `part` (a worker of `parallel_synth`), only that part's tenant stacks (and the extra
    dashboards only in the part that builds them); the shared stacks are always built.

    `config`: the tenants file already loaded (`load_config(tenants_file)`), not read again."""
    config = config if config is not None else load_config(tenants_file)
    app = app or new_app()
    positions = {tenant.id: position for position, tenant in enumerate(config.tenants)}
    own = part.slice(len(config.tenants)) if part else range(len(config.tenants))
    builds = _Builds(tenants=frozenset(t.id for t in config.tenants if positions[t.id] in own),
                     dashboards=part is None or part.builds_dashboards)
    if not config.targets:
        shared, stacks, dashboards = _stacks(app, config, builds)
        stages: dict[str, TargetStage] = {}
    else:
        stages = {name: _stage(app, name, config, builds) for name in config.targets}
        shared = next(iter(stages.values())).shared
        stacks = {tenant: stack for stage in stages.values() for tenant, stack in stage.tenants.items()}
        dashboards = tuple(d for stage in stages.values() for d in stage.dashboards)
    if nag:
        Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return IngestApp(app=app, config=config, shared=shared, tenants=stacks, stages=stages, dashboards=dashboards)


@dataclass(frozen=True)
class _Builds:
    """Which of the optional stacks this process builds (all of them but in a synth worker)."""

    tenants: frozenset[str]
    dashboards: bool


def _stacks(scope: Construct, config: AppConfig,
            builds: _Builds) -> tuple[SharedStack, dict[str, TenantStack], tuple[DashboardStack, ...]]:
    shared = SharedStack(scope, config)
    tenants = {t.id: TenantStack(scope, t, shared) for t in config.tenants if t.id in builds.tenants}
    return shared, tenants, tuple(dashboard_stacks(scope, config, shared) if builds.dashboards else ())


def _stage(app: App, name: str, config: AppConfig, builds: _Builds) -> TargetStage:
    """The target's Stage: explicit account and Region (no lookup: synth needs no credentials)."""
    target = config.targets[name]
    stage = Stage(app, name, env=Environment(account=target.account, region=target.region))
    # The shared stack of a target knows its tenants only (catch-all prefixes, dashboards).
    own = config.model_copy(update={"tenants": tuple(t for t in config.tenants if t.target == name)})
    shared, stacks, dashboards = _stacks(stage, own, builds)
    return TargetStage(stage=stage, shared=shared, tenants=stacks, dashboards=dashboards)
