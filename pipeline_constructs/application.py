"""Build the whole CDK app from a tenants file; used by app.py, the tests and the local runtime."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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


def build_app(tenants_file: str | Path, *, app: App | None = None, nag: bool = True) -> IngestApp:
    """One shared stack and one stack per tenant; cdk-nag AwsSolutions runs on every synth."""
    config = load_config(tenants_file)
    app = app or App()
    shared = SharedStack(app, config)
    stacks = {t.id: TenantStack(app, t, shared) for t in config.tenants}
    dashboards = tuple(dashboard_stacks(app, config, shared))
    if nag:
        Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return IngestApp(app=app, config=config, shared=shared, tenants=stacks, dashboards=dashboards)
