"""Strictly ordered, per-tenant file ingestion pipelines, as CDK constructs.

To build your own stacks::

    from pipeline_constructs import SharedResources, SharedResourcesProps, TenantPipeline, load_config

    config = load_config("tenants.yaml")
    shared = SharedResources(stack, "Ingest", SharedResourcesProps())
    for tenant in config.tenants:
        TenantPipeline(stack, tenant.id, tenant=tenant, shared=shared.refs())

docs/library.md shows a whole app. The names below are imported when first used, so that
importing the config model (as `ops` does) does not start the CDK's Node process.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: The public API: name -> the module that defines it (each with its own docstring).
_EXPORTS = {
    "TenantPipeline": "pipeline_constructs.tenant_pipeline",
    "SharedResources": "pipeline_constructs.shared",
    "SharedResourcesProps": "pipeline_constructs.shared",
    "SharedRefs": "pipeline_constructs.shared",
    "load_config": "pipeline_constructs.config",
    "parse_config": "pipeline_constructs.config",
    "AppConfig": "pipeline_constructs.config",
    "TenantConfig": "pipeline_constructs.config",
    "ConfigError": "pipeline_constructs.config",
    "DeployLimits": "pipeline_constructs.application",
    "TenantResources": "pipeline_constructs.registry",
    "qualified": "lambdas.contract",
}
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from lambdas.contract import qualified
    from pipeline_constructs.application import DeployLimits
    from pipeline_constructs.config import AppConfig, ConfigError, TenantConfig, load_config, parse_config
    from pipeline_constructs.registry import TenantResources
    from pipeline_constructs.shared import SharedRefs, SharedResources, SharedResourcesProps
    from pipeline_constructs.tenant_pipeline import TenantPipeline


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pipeline_constructs' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
