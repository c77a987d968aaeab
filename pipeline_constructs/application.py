"""Build the CDK app of a tenants file, whole or one cell of it (`cell_plan.py`); used by app.py,
the tests, the tools and the local runtime."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import (
    App,
    Environment,
    IPolicyValidationContext,
    IPolicyValidationPlugin,
    PolicyValidationPluginReport,
    PolicyViolatingResource,
    PolicyViolation,
    Stage,
    Validations,
)
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from lambdas import contract
from pipeline_constructs import capacity, cell_plan, deploy_limits
from pipeline_constructs.config import AppConfig, load_config
from pipeline_constructs.stacks import DashboardStack, SharedStack, TenantStack, dashboard_stacks

#: The context key that names the cell to synthesize (`cdk synth -c cell=shard-3`).
CELL_CONTEXT = "cell"
#: The project's cdk.json: its `context` holds the feature flags, as `cdk init` records them
#: (absent where the package is installed: an app of a team's own has its own cdk.json).
CDK_JSON = Path(__file__).resolve().parent.parent / "cdk.json"


@dataclass(frozen=True)
class TargetStage:
    """One deployment target: a CDK Stage (`cdk deploy '<name>/*'`) with its own shared stack
    and its tenants' stacks, bound to the target's account and Region (those of one cell)."""

    stage: Stage
    shared: SharedStack | None
    tenants: dict[str, TenantStack]
    #: The second and later dashboards (none up to `dashboard.TENANTS_PER_DASHBOARD` tenants).
    dashboards: tuple[DashboardStack, ...] = ()


def new_app(**props: Any) -> App:
    """An `App` (``props``: its options, such as ``outdir``) without CDK's built-in CloudFormation
    validation. That plugin runs a WASM validator over every template on every synth and only
    warns (its findings fail nothing unless `@aws-cdk/core:validateAgainstDefaultRules` is
    set), and its cost grows with the tenants. The templates are checked by cfn-lint instead,
    errors failing (`tests/test_app.py`, `bench/synth_scale.py`). cdk-nag is not affected.

    The app starts with cdk.json's context (the feature flags): the CLI passes it to app.py,
    and an app built in-process (the tests, the local runtime, the tools) must synthesize the
    same templates. The CLI's own context (`-c key=value`) still wins, and so does `context`."""
    flags = (
        json.loads(CDK_JSON.read_text()).get("context", {}) if CDK_JSON.is_file() else {}
    )  # installed: none
    context = {**flags, **props.pop("context", {})}
    return App(builtin_cloud_formation_validation=False, context=context, **props)


@dataclass(frozen=True)
class IngestApp:
    app: App
    config: AppConfig
    #: Without `targets:`, the shared stack; with targets, the first target's (see `stages`).
    #: None when the cell synthesized holds no shared stack (a shard cell).
    shared: SharedStack | None
    #: Every tenant's stack built, whatever its target.
    tenants: dict[str, TenantStack]
    #: With `targets:`, one Stage per target built, by name; empty without.
    stages: dict[str, TargetStage] = field(default_factory=dict)
    #: The second and later dashboards' stacks (of every target).
    dashboards: tuple[DashboardStack, ...] = ()
    #: The cells built: every cell of the file, or the one named.
    cells: tuple[cell_plan.Cell, ...] = ()


def build_app(
    tenants_file: str | Path,
    *,
    app: App | None = None,
    nag: bool = True,
    config: AppConfig | None = None,
    cell: str | None = None,
) -> IngestApp:
    """The stacks of every cell (`cell` None), or of the cell named `cell` (`cell_plan.UnknownCell`
    if the file has none of that name); cdk-nag AwsSolutions runs on every synth.

    With `targets:` in the tenants file, each target's stacks sit in a Stage of its own;
    without, at the top of the app, environment-agnostic. A tenant stack depends on its shared
    stack (deploy order) when both are built; it refers to it only by names.

    `config`: the tenants file already loaded (`load_config(tenants_file)`), not read again.
    Every name is rendered with the file's `qualifier` (`contract.qualified`)."""
    config = config if config is not None else load_config(tenants_file)
    with contract.qualified(config.qualifier):
        return _build(app or new_app(), config, nag, cell)


def _build(app: App, config: AppConfig, nag: bool, cell: str | None) -> IngestApp:
    built = cell_plan.cells_of(config) if cell is None else (cell_plan.cell_named(config, cell),)
    scopes: dict[str | None, Construct] = {}
    stages: dict[str, TargetStage] = {}
    shared_of: dict[str | None, SharedStack] = {}
    tenants: dict[str, TenantStack] = {}
    dashboards: list[DashboardStack] = []
    by_id = {t.id: t for t in config.tenants}
    for unit in built:
        if unit.target not in scopes:
            scopes[unit.target] = _scope(app, config, unit.target)
        scope = scopes[unit.target]
        if unit.shared:
            own = _of_target(config, unit.target)
            shared_of[unit.target] = SharedStack(scope, own)
            dashboards += dashboard_stacks(scope, own, shared_of[unit.target])
        for tenant_id in unit.tenant_ids:
            stack = tenants[tenant_id] = TenantStack(
                scope,
                by_id[tenant_id],
                shard=unit.shard,
                shared_kms_key=config.encryption.kms_key if config.encryption is not None else None,
            )
            if unit.target in shared_of:
                stack.add_stack_dependency(shared_of[unit.target])
    for target, scope in scopes.items():
        if target is not None:
            assert isinstance(scope, Stage)
            stages[target] = TargetStage(
                stage=scope,
                shared=shared_of.get(target),
                tenants={t: s for t, s in tenants.items() if by_id[t].target == target},
                dashboards=tuple(d for d in dashboards if d.node.scope is scope),
            )
    Validations.of(app).add_plugins(
        DeployLimits(capacity.declared_rules_per_bus(config)), *([AwsSolutionsChecks(app)] if nag else [])
    )
    first_shared = next(iter(shared_of.values()), None)
    return IngestApp(
        app=app,
        config=config,
        shared=first_shared,
        tenants=tenants,
        stages=stages,
        dashboards=tuple(dashboards),
        cells=built,
    )


def _scope(app: App, config: AppConfig, target: str | None) -> Construct:
    """Where a target's stacks go: its Stage, with an explicit account and Region (no lookup:
    synth needs no credentials); the app itself without targets."""
    if target is None:
        return app
    account, region = config.targets[target].account, config.targets[target].region
    return Stage(app, target, env=Environment(account=account, region=region))


def _of_target(config: AppConfig, target: str | None) -> AppConfig:
    """The config a target's shared stack is built from: the target's tenants only (catch-all
    prefixes, uploaders, dashboards)."""
    if target is None:
        return config
    return config.model_copy(update={"tenants": tuple(t for t in config.tenants if t.target == target)})


@jsii.implements(IPolicyValidationPlugin)
class DeployLimits:
    """The CDK validation plugin that holds every template of the assembly against AWS's
    deploy-time limits (`deploy_limits.check`) at each synth.
    `rules_per_bus`: as `check` takes it."""

    def __init__(self, rules_per_bus: deploy_limits.RulesPerBus | None = None) -> None:
        self._rules_per_bus = rules_per_bus

    @property
    def name(self) -> str:
        return "ordered-ingest deploy-time limits"

    @property
    def version(self) -> str | None:
        return None

    @property
    def rule_ids(self) -> list[str] | None:
        return sorted(deploy_limits.LIMITS)

    def validate(self, context: IPolicyValidationContext) -> PolicyValidationPluginReport:
        stacks = deploy_limits.assembly_stacks(context.template_paths)
        paths = {stack.name: stack.path for stack in stacks}
        violations = [
            PolicyViolation(
                rule_name=violation.limit.key,
                description=str(violation),
                fix=violation.fix or None,
                rule_metadata={"limit": str(violation.limit.value), "source": violation.limit.source},
                violating_resources=[
                    PolicyViolatingResource(
                        resource_logical_id=violation.resource,
                        template_path=paths.get(violation.stack, ""),
                        locations=[violation.resource],
                    )
                ],
            )
            for violation in deploy_limits.check(stacks, rules_per_bus=self._rules_per_bus)
        ]
        return PolicyValidationPluginReport(success=not violations, violations=violations)
