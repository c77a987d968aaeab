"""The model of ``tenants.yaml`` and its loader.

Validation is done by pydantic (strict, unknown keys forbidden) on each tenant merged with the
``defaults:`` block, then by cross-tenant checks (duplicate ids, overlapping prefixes). Every
problem is collected and reported in one :class:`ConfigError`; each line names the tenant, the
field, the bad value and the fix.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pipeline_constructs import budgets, names

TENANT_ID_PATTERN = r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$"
MAX_CHUNK_SIZE = 1000
EMAIL_PATTERN = r"^[^@\s]+@[^@\s]+\.[^@\s]+$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class SinkConfig(_Strict):
    """The tenant's record sink: the core system endpoint that receives one POST per record."""

    url: str
    timeout_seconds: int = Field(default=10, ge=1, le=60)
    #: How long the core system may stay unavailable before the file fails (and halts).
    outage_budget_seconds: int = Field(default=3600, ge=1, le=86400)

    @field_validator("url")
    @classmethod
    def _https_or_loopback(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme == "https" and parts.hostname:
            return url
        if parts.scheme == "http" and _is_loopback(parts.hostname):
            return url
        raise ValueError("must be an https:// URL (plain http:// only for localhost)")


class AlarmConfig(_Strict):
    """Alarm thresholds for one tenant."""

    queue_age_seconds: int = Field(default=900, ge=60)
    stall_after_seconds: int = Field(default=1800, ge=60)
    error_logs_threshold: int = Field(default=1, ge=1)
    evaluation_periods: int = Field(default=1, ge=1, le=24)


class TenantConfig(_Strict):
    """One tenant, with the defaults already applied."""

    id: str = Field(pattern=TENANT_ID_PATTERN)
    prefix: str = Field(min_length=1, max_length=512)
    format: Literal["csv", "jsonl"] = "csv"
    chunk_size: int = Field(default=100, ge=1, le=MAX_CHUNK_SIZE)
    sink: SinkConfig
    alarms: AlarmConfig = AlarmConfig()
    on_failure: Literal["halt", "continue"] = "halt"
    duplicate_files: Literal["process", "skip"] = "process"

    @field_validator("id")
    @classmethod
    def _id_fits_every_derived_name(cls, tenant_id: str) -> str:
        broken = names.tightest_broken(tenant_id)
        if broken is not None:
            derived = broken.render(tenant_id)
            raise ValueError(
                f"is {len(tenant_id)} characters, so the derived {broken.kind} '{derived}' is "
                f"{len(derived)} characters (limit {broken.limit})"
            )
        return tenant_id

    @field_validator("prefix")
    @classmethod
    def _prefix_is_a_folder(cls, prefix: str) -> str:
        if prefix.startswith("/") or not prefix.endswith("/"):
            raise ValueError("must be a folder-like key prefix that ends with '/' and does not start with '/'")
        return prefix


class NotificationsConfig(_Strict):
    """Who is told when an alarm fires: email subscriptions of the shared alarm topic."""

    emails: list[str] = []

    @field_validator("emails")
    @classmethod
    def _emails(cls, emails: list[str]) -> list[str]:
        bad = [e for e in emails if not re.match(EMAIL_PATTERN, e)]
        if bad:
            raise ValueError(f"not an email address: {', '.join(bad)}")
        return emails


class AppConfig(_Strict):
    """The whole file: notifications and the validated tenants."""

    notifications: NotificationsConfig = NotificationsConfig()
    tenants: tuple[TenantConfig, ...]


# Per field: what a valid value looks like. Used as the "fix" of a message.
FIXES: dict[str, str] = {
    "id": (
        "use lowercase letters, digits and single hyphens, starting with a letter "
        f"(at most {names.MAX_TENANT_ID_LENGTH} characters)"
    ),
    "prefix": "use a key prefix such as 'acme/' that ends with '/'",
    "format": "use 'csv' (with a header row) or 'jsonl'",
    "chunk_size": f"use a whole number from 1 to {MAX_CHUNK_SIZE}",
    "url": "use the core system's https:// endpoint",
    "timeout_seconds": "use a whole number of seconds from 1 to 60",
    "outage_budget_seconds": "use a whole number of seconds from 1 to 86400 (default 3600: one hour)",
    "on_failure": "use 'halt' (a failed file stops the tenant until `ops resume` or `ops skip`) or 'continue'",
    "duplicate_files": "use 'process' (a byte-identical re-upload is processed again) or 'skip' (recorded as a duplicate)",
    "queue_age_seconds": "use a whole number of seconds, at least 60",
    "stall_after_seconds": "use a whole number of seconds, at least 60",
    "error_logs_threshold": "use a whole number, at least 1",
    "evaluation_periods": "use a whole number from 1 to 24",
    "emails": "list email addresses such as 'oncall@example.com'",
    "sink": "set sink.url in the tenant or in defaults",
}

# Plain-words replacements of pydantic messages that would otherwise show a regex.
PROBLEMS: dict[str, str] = {
    "string_pattern_mismatch": "has characters other than lowercase letters, digits and single hyphens, "
    "or does not start with a letter",
}

TENANT_KEYS = tuple(TenantConfig.model_fields)
DEFAULTS_KEYS = tuple(k for k in TENANT_KEYS if k not in ("id", "prefix"))
TOP_LEVEL_KEYS = ("defaults", "notifications", "tenants")
_MISSING = object()


class ConfigError(ValueError):
    """``tenants.yaml`` is invalid. ``problems`` holds one line per problem."""

    def __init__(self, source: str, problems: list[str]):
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source} is invalid ({len(problems)} problem{'s' if len(problems) > 1 else ''}):\n{lines}")


@dataclass
class _Problems:
    lines: list[str]

    def add(self, where: str, field: str, value: Any, problem: str, fix: str) -> None:
        shown = "(missing)" if value is _MISSING else repr(value)
        line = f"{where}: field '{field}' = {shown}: {problem}; {fix}"
        if line not in self.lines:  # a bad default is reported once, not once per tenant
            self.lines.append(line)


def load_config(path: str | Path) -> AppConfig:
    """Read and validate a tenants file, raising :class:`ConfigError` with every problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read the file: {exc.strerror}; check the path"]) from None
    return parse_config(text, source=path.name)


def parse_config(text: str, *, source: str = "tenants.yaml") -> AppConfig:
    """Validate the YAML text of a tenants file."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(source, [_yaml_problem(exc)]) from None
    problems = _Problems([])
    if not isinstance(raw, dict):
        problems.add("file", "(top level)", raw, "must be a mapping with 'defaults' and 'tenants'", "start the file with 'tenants:'")
        raise ConfigError(source, problems.lines)
    _check_unknown(raw, TOP_LEVEL_KEYS, "file", problems)

    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict):
        problems.add("defaults", "defaults", defaults, "must be a mapping", "write 'defaults:' followed by indented keys")
        defaults = {}
    _check_unknown(defaults, DEFAULTS_KEYS, "defaults", problems)
    defaults = {k: v for k, v in defaults.items() if k in DEFAULTS_KEYS}

    notifications = _validate(NotificationsConfig, raw.get("notifications") or {}, "notifications", problems)

    tenants_raw = raw.get("tenants")
    if not isinstance(tenants_raw, list) or not tenants_raw:
        problems.add(
            "file", "tenants", tenants_raw if tenants_raw is not None else _MISSING,
            "must be a non-empty list", "declare at least one tenant with '- id: ...' and 'prefix: ...'",
        )
        raise ConfigError(source, problems.lines)

    tenants: list[TenantConfig] = []
    for index, entry in enumerate(tenants_raw):
        where = _tenant_label(entry, index)
        if not isinstance(entry, dict):
            problems.add(where, "(entry)", entry, "must be a mapping", "write each tenant as '- id: ...' with indented keys")
            continue
        tenant = _validate(TenantConfig, _merge(defaults, entry), where, problems, own=entry)
        if tenant is not None:
            tenants.append(tenant)

    # Cross-tenant checks run on every entry with a usable id and prefix, valid or not, so
    # that one run reports everything.
    declared = [
        (e["id"], e["prefix"]) for e in tenants_raw
        if isinstance(e, dict) and isinstance(e.get("id"), str) and isinstance(e.get("prefix"), str)
    ]
    _check_unique_ids(declared, problems)
    _check_prefix_overlaps(declared, problems)
    for tenant in tenants:
        _check_register_budget(tenant, problems)

    if problems.lines:
        raise ConfigError(source, problems.lines)
    assert notifications is not None
    return AppConfig(notifications=notifications, tenants=tuple(tenants))


def _validate(model: type[BaseModel], data: Any, where: str, problems: _Problems, own: dict | None = None):
    """Validate ``data``; a bad value that a tenant inherits (not in ``own``) is blamed on defaults."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            inherited = own is not None and error["type"] != "missing" and _lookup(own, error["loc"]) is _MISSING
            _report(error, model, data, "defaults" if inherited else where, problems)
        return None


def _report(error: dict, model: type[BaseModel], data: Any, where: str, problems: _Problems) -> None:
    loc = [str(part) for part in error["loc"]]
    field = ".".join(loc)
    leaf = loc[-1] if loc else "(entry)"
    value = _lookup(data, error["loc"])
    kind = error["type"]
    if kind == "extra_forbidden":
        problems.add(where, field, value, "unknown key", _unknown_key_fix(leaf, _valid_keys_at(model, error["loc"][:-1])))
        return
    if kind == "missing":
        problems.add(where, field, _MISSING, "is required", FIXES.get(leaf, f"add '{leaf}'"))
        return
    message = PROBLEMS.get(kind) or error["msg"].removeprefix("Value error, ")
    problems.add(where, field, value, message, FIXES.get(leaf, "see the tenants.yaml reference in the README"))


def _valid_keys_at(model: type[BaseModel], loc: tuple) -> tuple[str, ...]:
    """The keys the (nested) model at ``loc`` accepts."""
    for part in loc:
        model = model.model_fields[part].annotation
    return tuple(model.model_fields)


def _unknown_key_fix(key: str, valid: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    hint = f"did you mean '{close[0]}'?" if close else f"valid keys here: {', '.join(valid)}"
    return f"remove it or fix its spelling ({hint})"


def _check_unknown(data: dict, valid: tuple[str, ...], where: str, problems: _Problems) -> None:
    for key in data:
        if key not in valid:
            problems.add(where, str(key), data[key], "unknown key", _unknown_key_fix(str(key), valid))


def _check_unique_ids(declared: list[tuple[str, str]], problems: _Problems) -> None:
    seen: set[str] = set()
    for tenant_id, _ in declared:
        if tenant_id in seen:
            problems.add(
                f"tenant '{tenant_id}'", "id", tenant_id, "is declared more than once",
                "give every tenant a unique id (it names the tenant's queue, workflow and stack)",
            )
        seen.add(tenant_id)


def _check_prefix_overlaps(declared: list[tuple[str, str]], problems: _Problems) -> None:
    for i, (a_id, a_prefix) in enumerate(declared):
        for b_id, b_prefix in declared[i + 1 :]:
            if a_id != b_id and (a_prefix.startswith(b_prefix) or b_prefix.startswith(a_prefix)):
                problems.add(
                    f"tenant '{b_id}'", "prefix", b_prefix,
                    f"overlaps tenant '{a_id}' prefix '{a_prefix}'",
                    "give each tenant a prefix that is not inside another's",
                )


def _check_register_budget(tenant: TenantConfig, problems: _Problems) -> None:
    """`chunk_size x sink.timeout_seconds` must fit the register function's invocations per chunk."""
    size, timeout = tenant.chunk_size, tenant.sink.timeout_seconds
    invocations = budgets.register_invocations_per_chunk(size, timeout)
    if invocations > budgets.MAX_REGISTER_INVOCATIONS_PER_CHUNK:
        problems.add(
            f"tenant '{tenant.id}'", "chunk_size", size,
            f"x sink.timeout_seconds {timeout} = {size * timeout} s for a chunk at the slowest answer, "
            f"{invocations} invocations of the register function's {budgets.REGISTER_MAX_TIMEOUT_SECONDS} s "
            f"limit (at most {budgets.MAX_REGISTER_INVOCATIONS_PER_CHUNK}: each one adds to the execution's history)",
            f"use a chunk_size of at most {budgets.max_chunk_size(timeout)} at this timeout, or a lower "
            "sink.timeout_seconds",
        )


def _merge(defaults: dict, entry: dict) -> dict:
    """Tenant values over defaults; the nested ``sink`` and ``alarms`` blocks merge key by key."""
    merged = dict(defaults)
    for key, value in entry.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def _lookup(data: Any, loc: tuple) -> Any:
    for part in loc:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, (list, tuple)) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return _MISSING
    return data


def _tenant_label(entry: Any, index: int) -> str:
    if isinstance(entry, dict) and isinstance(entry.get("id"), str) and entry["id"]:
        return f"tenant '{entry['id']}'"
    return f"tenant #{index + 1}"


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "somewhere"
    return f"YAML syntax error at {where}: {problem}; fix the indentation, a missing ':' or an unclosed quote there"


def _is_loopback(host: str | None) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False
