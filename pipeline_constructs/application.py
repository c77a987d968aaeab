"""Build the whole CDK app from a tenants file; used by app.py, the tests and the local runtime."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import App, Validations
from cdk_nag import AwsSolutionsChecks

from pipeline_constructs.config import AppConfig, load_config
from pipeline_constructs.stacks import DashboardStack, SharedStack, TenantStack, dashboard_stacks


@dataclass(frozen=True)
class IngestApp:
    app: App
    config: AppConfig
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


def build_app(tenants_file: str | Path, *, app: App | None = None, nag: bool = True) -> IngestApp:
    """One shared stack and one stack per tenant; cdk-nag AwsSolutions runs on every synth."""
    config = load_config(tenants_file)
    app = app or new_app()
    shared = SharedStack(app, config)
    stacks = {t.id: TenantStack(app, t, shared) for t in config.tenants}
    dashboards = tuple(dashboard_stacks(app, config, shared))
    if nag:
        Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return IngestApp(app=app, config=config, shared=shared, tenants=stacks, dashboards=dashboards)
