"""The model of ``tenants.yaml`` and its loader.

Each option is declared once, on its model's field (`options.option`): type, bounds, default,
description and fix. pydantic validates each tenant merged with ``defaults:`` (strict, unknown
keys refused), then the checks across tenants run; every problem is reported in one
:class:`ConfigError`, each line naming the tenant, the field, the bad value and the fix.

    options.py       how an option is declared; the fix derived from its constraints
    sink.py          `sink` and `sink.auth`
    blocks.py        `alarms`, `ordering`, `completion`, `network`, `encryption`
    tenant.py        `TenantConfig`, and the rules between a tenant's options
    tenants_file.py  the top-level blocks and `AppConfig`
    patterns.py      `{id}` in the pattern options
    problems.py      `ConfigError`; pydantic's errors in the project's words
    checks.py        the checks across tenants and of the top-level blocks
    loader.py        `load_config`, `parse_config`
"""

from pipeline_constructs.budgets import MAX_CHUNK_SIZE
from pipeline_constructs.config.blocks import (
    MAX_COMPLETION_TIMEOUT_SECONDS,
    MAX_SEQUENCE_PATTERN_CHARS,
    AlarmConfig,
    CompletionConfig,
    EncryptionConfig,
    NetworkConfig,
    OrderingConfig,
)
from pipeline_constructs.config.loader import (
    DEFAULTS_DESCRIPTION,
    DEFAULTS_KEYS,
    TENANT_KEYS,
    TOP_LEVEL_KEYS,
    load_config,
    parse_config,
)
from pipeline_constructs.config.options import fix_for, fix_of
from pipeline_constructs.config.patterns import PATTERN_FIELDS
from pipeline_constructs.config.problems import ConfigError
from pipeline_constructs.config.sink import (
    DEFAULT_OUTAGE_BUDGET_SECONDS,
    MAX_AUTH_CACHE_SECONDS,
    MAX_INVOKE_ARN_CHARS,
    MAX_SINK_BATCH_SIZE,
    MAX_SINK_URL_CHARS,
    BearerAuth,
    NoAuth,
    SigV4Auth,
    SinkAuth,
    SinkConfig,
)
from pipeline_constructs.config.tenant import TenantConfig
from pipeline_constructs.config.tenants_file import (
    ALARMS_REACH_NOBODY,
    ALARMS_REACH_NOBODY_ID,
    AccountLimits,
    AppConfig,
    NotificationsConfig,
    RoutingConfig,
    SubscriptionConfig,
    TargetConfig,
)

__all__ = [
    "ALARMS_REACH_NOBODY",
    "ALARMS_REACH_NOBODY_ID",
    "DEFAULTS_DESCRIPTION",
    "DEFAULTS_KEYS",
    "DEFAULT_OUTAGE_BUDGET_SECONDS",
    "MAX_AUTH_CACHE_SECONDS",
    "MAX_CHUNK_SIZE",
    "MAX_COMPLETION_TIMEOUT_SECONDS",
    "MAX_INVOKE_ARN_CHARS",
    "MAX_SEQUENCE_PATTERN_CHARS",
    "MAX_SINK_BATCH_SIZE",
    "MAX_SINK_URL_CHARS",
    "PATTERN_FIELDS",
    "TENANT_KEYS",
    "TOP_LEVEL_KEYS",
    "AccountLimits",
    "AlarmConfig",
    "AppConfig",
    "BearerAuth",
    "CompletionConfig",
    "ConfigError",
    "EncryptionConfig",
    "NetworkConfig",
    "NoAuth",
    "NotificationsConfig",
    "OrderingConfig",
    "RoutingConfig",
    "SigV4Auth",
    "SinkAuth",
    "SinkConfig",
    "SubscriptionConfig",
    "TargetConfig",
    "TenantConfig",
    "fix_for",
    "fix_of",
    "load_config",
    "parse_config",
]
