"""Read a tenants file: YAML, `defaults` merged into each tenant, every model validated, then
the checks across tenants; every problem of the file reported at once (`ConfigError`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from pipeline_constructs import capacity
from pipeline_constructs.config import checks
from pipeline_constructs.config.blocks import EncryptionConfig
from pipeline_constructs.config.patterns import (
    ID_PLACEHOLDER,
    PATTERN_FIELDS,
    brace_problems,
    check_placeholders,
    placeholder_problem,
    prefix_of,
    with_id,
)
from pipeline_constructs.config.problems import (
    MISSING,
    ConfigError,
    Problems,
    check_unknown,
    lookup,
    report_one,
    shown,
    untagged,
)
from pipeline_constructs.config.tenant import Rule, TenantConfig
from pipeline_constructs.config.tenants_file import (
    TARGET_NAME_PATTERN,
    AccountLimits,
    AppConfig,
    NotificationsConfig,
    RoutingConfig,
    TargetConfig,
)

TENANT_KEYS = tuple(TenantConfig.model_fields)
#: `uploaders` are per tenant: a role or user is the uploader of one tenant (`checks.check_uploaders`).
DEFAULTS_KEYS = tuple(k for k in TENANT_KEYS if k not in ("id", "shard", "uploaders"))
TOP_LEVEL_KEYS = (
    "defaults",
    "notifications",
    "tenants",
    "account_limits",
    "targets",
    "routing",
    "encryption",
    "qualifier",
)
#: The `defaults:` block (`merge`), as the schema and the reference describe it.
DEFAULTS_DESCRIPTION = (
    "Tenant options applied to every tenant; a tenant's own value wins. A block (`sink`, `alarms`, `ordering`, "
    "`completion`, `network`, `encryption`) merges key by key, `sink.auth` is replaced as a whole and is "
    "`{type: none}` here only as `{type: none, inherited: true}`: the tenants that leave their `auth` out then "
    "run without credentials on purpose, never by accident; "
    "`network: null` or `encryption: null` in a tenant turns that block of `defaults` off. Every tenant option "
    "but " + ", ".join(f"`{key}`" for key in TENANT_KEYS if key not in DEFAULTS_KEYS) + ". "
    "**Patterns:** in "
    + ", ".join(f"`{field}`" for field in PATTERN_FIELDS[:-1])
    + f" and `{PATTERN_FIELDS[-1]}`, "
    "`{id}` stands for the "
    "tenant's id (quote the value: YAML reads a bare `{` as a mapping), e.g. `prefix: '{id}/'`, "
    "`secret: 'ordered-ingest/{id}/core-token'`; a `prefix` here must have it (a fixed one would be every "
    "tenant's). `{id}` works in a tenant's own value too, where a YAML anchor shares one value between tenants. "
    "Each value is checked as the tenant gets it; any other `{...}`, and braces in any other option but "
    "`ordering.sequence_pattern` (a regular expression), are refused. 50 tenants written this way, 30 of them "
    "without credentials: [examples/many-tenants.yaml](../examples/many-tenants.yaml)."
)


def load_config(path: str | Path, *, check_capacity: bool = True) -> AppConfig:
    """Read and validate a tenants file, raising :class:`ConfigError` with every problem.

    ``check_capacity=False`` skips the declared account limits (`ops preflight` reads the real ones)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read the file: {exc.strerror}; check the path"]) from None
    return parse_config(text, source=path.name, check_capacity=check_capacity)


def parse_config(text: str, *, source: str = "tenants.yaml", check_capacity: bool = True) -> AppConfig:
    """Validate the YAML text of a tenants file."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(source, [_yaml_problem(exc)]) from None
    problems = Problems()
    if not isinstance(raw, dict):
        problems.add(
            "file",
            "(top level)",
            raw,
            "must be a mapping with 'defaults' and 'tenants'",
            "start the file with 'tenants:'",
        )
        raise ConfigError(source, problems.lines)
    check_unknown(raw, TOP_LEVEL_KEYS, "file", problems)
    defaults = _defaults(raw, problems)
    notifications = validate(NotificationsConfig, raw.get("notifications") or {}, "notifications", problems)
    routing = validate(RoutingConfig, raw.get("routing") or {}, "routing", problems)
    account_limits = validate(AccountLimits, raw.get("account_limits") or {}, "account_limits", problems)
    targets = _targets(raw.get("targets"), problems)
    encryption = (
        validate(EncryptionConfig, raw["encryption"], "encryption", problems)
        if raw.get("encryption") is not None
        else None
    )
    qualifier = checks.check_qualifier(raw.get("qualifier"), problems)

    entries = raw.get("tenants")
    if not isinstance(entries, list) or not entries:
        problems.add(
            "file",
            "tenants",
            entries if entries is not None else MISSING,
            "must be a non-empty list",
            "declare at least one tenant with '- id: ...' and 'prefix: ...'",
        )
        raise ConfigError(source, problems.lines)
    tenants = _tenants(entries, defaults, problems)
    _across_tenants(entries, defaults, tenants, problems)
    checks.check_uploaders(tenants, targets or {}, problems)
    checks.check_qualified_ids(tenants, qualifier, problems)
    checks.check_tenant_targets(tenants, targets, problems, every_tenant_valid=len(tenants) == len(entries))
    if notifications is not None:
        checks.check_notifications(notifications, targets or {}, problems)
    if routing is not None and not problems.lines:
        checks.check_routing(tenants, routing, problems)
    if problems.lines:
        raise ConfigError(source, problems.lines)
    assert (
        notifications is not None
        and account_limits is not None
        and targets is not None
        and routing is not None
    )
    config = AppConfig(
        notifications=notifications,
        tenants=tuple(tenants),
        account_limits=account_limits,
        targets=targets,
        routing=routing,
        encryption=encryption,
        qualifier=qualifier,
    )
    # Capacity last, on a file otherwise valid: the counts need every tenant and its target.
    over = capacity.problems(config) if check_capacity else []
    if over:
        raise ConfigError(source, over)
    return config


def _defaults(raw: dict[str, Any], problems: Problems) -> dict[str, Any]:
    """The `defaults:` block, its own problems reported; only the keys a tenant may inherit."""
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict):
        problems.add(
            "defaults",
            "defaults",
            defaults,
            "must be a mapping",
            "write 'defaults:' followed by indented keys",
        )
        return {}
    if "uploaders" in defaults:
        problems.add(
            "defaults",
            "uploaders",
            defaults["uploaders"],
            "is per tenant: each tenant lists the principals that upload its files",
            "move it into the tenant whose files it uploads",
        )
    check_unknown(
        {k: v for k, v in defaults.items() if k != "uploaders"}, DEFAULTS_KEYS, "defaults", problems
    )
    defaults = {k: v for k, v in defaults.items() if k in DEFAULTS_KEYS}
    checks.check_default_auth(defaults, raw.get("tenants"), problems)
    check_placeholders(defaults, "defaults", problems)
    if isinstance(defaults.get("prefix"), str) and ID_PLACEHOLDER not in defaults["prefix"]:
        problems.add(
            "defaults",
            "prefix",
            defaults["prefix"],
            "has no '{id}': every tenant that leaves its prefix out would get this same prefix",
            "write a pattern with '{id}', e.g. '{id}/' or 'incoming/{id}/', or give each tenant its own "
            "prefix",
        )
    return defaults


def _tenants(entries: list[Any], defaults: dict[str, Any], problems: Problems) -> list[TenantConfig]:
    """Each entry merged with the defaults and validated: the valid tenants."""
    tenants: list[TenantConfig] = []
    for index, entry in enumerate(entries):
        where = checks.tenant_label(entry, index)
        if not isinstance(entry, dict):
            problems.add(
                where,
                "(entry)",
                entry,
                "must be a mapping",
                "write each tenant as '- id: ...' with indented keys",
            )
            continue
        check_placeholders({k: v for k, v in entry.items() if k in TENANT_KEYS}, where, problems)
        merged = merge(defaults, entry)
        tenant_id = entry.get("id")
        tenant = validate(
            TenantConfig,
            with_id(merged, tenant_id) if isinstance(tenant_id, str) else merged,
            where,
            problems,
            own=entry,
            written=merged,
        )
        if tenant is not None and not brace_problems(merged):  # reported: its checks would repeat them
            tenants.append(tenant)
    return tenants


def _across_tenants(
    entries: list[Any], defaults: dict[str, Any], tenants: list[TenantConfig], problems: Problems
) -> None:
    """Ids and prefixes, on every entry with a usable id and prefix, valid or not, so that one
    run reports everything."""
    prefixes = [prefix_of(entry, defaults) for entry in entries]
    declared = [(entry["id"], prefix) for entry, (prefix, _) in zip(entries, prefixes) if prefix is not None]
    sources = [source for prefix, source in prefixes if prefix is not None]
    checks.check_unique_ids(declared, problems)
    checks.check_prefix_overlaps(declared, problems, sources)
    checks.check_prefix_characters(declared, problems, sources)


def validate(
    model: type[BaseModel],
    data: Any,
    where: str,
    problems: Problems,
    own: dict[str, Any] | None = None,
    written: dict[str, Any] | None = None,
) -> Any:
    """Validate ``data``; a bad value that a tenant inherits (not in ``own``) is blamed on defaults.
    ``written`` is ``data`` before `{id}` was replaced: a bad value that a pattern made is the
    tenant's, shown with its pattern; one whose braces `check_placeholders` refused is not reported again.
    The rules between a tenant's options (`TenantConfig`'s model validator) are reported on the tenant."""
    broken: list[Rule] = []
    try:
        validated = model.model_validate(data, context=broken)
    except ValidationError as exc:
        for error in exc.errors():
            _blame(error, model, data, where, problems, own, written)
        return None
    for rule in broken:
        problems.add(where, rule.field, rule.value, rule.problem, rule.fix)
    return validated


def _blame(
    error: Any,
    model: type[BaseModel],
    data: Any,
    where: str,
    problems: Problems,
    own: dict[str, Any] | None,
    written: dict[str, Any] | None,
) -> None:
    error = untagged(error)
    inherited = (
        own is not None
        and error["type"] != "missing"
        and lookup(own, error["loc"]) is MISSING
        and lookup(data, error["loc"]) is not MISSING
    )
    pattern = MISSING if written is None else lookup(written, error["loc"])
    option = ".".join(str(part) for part in error["loc"] if not isinstance(part, int))
    texts = pattern if isinstance(pattern, list) else [pattern]
    if any(placeholder_problem(option, text) for text in texts):
        return  # reported by `check_placeholders`
    if isinstance(pattern, str) and pattern != lookup(data, error["loc"]):
        source = f"from the {'defaults ' if inherited else ''}pattern {shown(pattern)}"
        report_one(error, model, data, where, problems, source=source)
    else:
        report_one(error, model, data, "defaults" if inherited else where, problems)


def _targets(raw: Any, problems: Problems) -> dict[str, TargetConfig] | None:
    """`targets:` (name -> account, region, account_limits); None when one is invalid."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.add(
            "targets",
            "targets",
            raw,
            "must be a mapping of target names",
            "write 'targets:' followed by 'NAME: {account: ..., region: ...}' lines",
        )
        return None
    targets: dict[str, TargetConfig] = {}
    valid = True
    for name, entry in raw.items():
        where = f"target '{name}'"
        if not isinstance(name, str) or not re.match(TARGET_NAME_PATTERN, name):
            problems.add(
                where,
                "(name)",
                name,
                "is not a usable target name (it names a CDK Stage)",
                "use letters, digits and hyphens, starting with a letter, e.g. 'prod-eu'",
            )
            valid = False
            continue
        if not isinstance(entry, dict):
            problems.add(
                where,
                "(entry)",
                entry,
                "must be a mapping",
                f"write '{name}: {{account: '111111111111', region: eu-west-1}}'",
            )
            valid = False
            continue
        target = validate(TargetConfig, entry, where, problems)
        if target is None:
            valid = False
            continue
        for other_name, other in targets.items():
            if (other.account, other.region) == (target.account, target.region):
                problems.add(
                    where,
                    "region",
                    target.region,
                    f"is in the same account and Region as target '{other_name}' ({other.account}/{other.region}): "
                    "both would deploy the same stacks there",
                    "give each target its own account or Region, or assign its tenants to one target",
                )
        targets[name] = target
    return targets if valid else None


def merge(defaults: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """Tenant values over defaults; a block (a mapping in both) merges key by key, one level deep."""
    merged = dict(defaults)
    for key, value in entry.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "somewhere"
    return f"YAML syntax error at {where}: {problem}; fix the indentation, a missing ':' or an unclosed quote there"
