"""The functions' environment: one frozen dataclass per function, and its round trip.

The constructs render an instance into the function's environment variables (`environment()`);
the handler reads them back, typed and checked (`from_env()`), so that a deployment fault is a
`FunctionEnvironmentError` naming the variable, not a failure deep in a handler.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import typing
import urllib.parse
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from lambdas.contract.metrics import METRIC_NAMESPACE
from lambdas.contract.options import DuplicateFiles, FileFormat, OnFailure, Ordering, SinkAuthType

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


class FunctionEnvironmentError(RuntimeError):
    """The function's environment is incomplete or invalid (a deployment fault)."""


def env_name(field_name: str) -> str:
    """The environment variable that holds a config field: `tenant_id` -> `TENANT_ID`."""
    return field_name.upper()


# The variable of a field is its name in upper case. A field typed with a `Literal` of
# `lambdas.contract.options` takes one of its values (read in lower case). A field's metadata may
# hold `minimum` (numbers; `exclusive`: a strict bound) or `schemes` (URLs); `optional`: unset or
# `NONE` reads as ""; `implicit`: the variable is left out while the value is the field's
# default, and read as the default when absent (so that a new field changes no template of the
# app as shipped).

#: The value of an optional environment variable that is not set (Lambda keeps no empty ones).
NONE = "-"


@dataclasses.dataclass(frozen=True)
class ControllerEnv:
    """The controller's environment.

    `waiting_visibility_seconds`: how long a message that must wait stays invisible; the
    close of the file ahead makes it visible at once (fast hand-off), this is the fallback.
    """

    tenant_id: str
    state_machine_arn: str
    ledger_table_name: str
    queue_url: str
    metric_namespace: str
    on_failure: OnFailure
    waiting_visibility_seconds: int = dataclasses.field(metadata={"minimum": 1})
    #: Where an unusable message is quarantined (`quarantine_prefix`), and what a usable
    #: file event names: the landing bucket and the tenant's prefix.
    work_bucket: str
    landing_bucket: str
    landing_prefix: str
    ordering: Ordering = "arrival"
    #: `key_sequence` only: the regular expression that finds the sequence number in a key.
    sequence_pattern: str = dataclasses.field(default="", metadata={"optional": True})
    #: `key_sequence` only: the sequence number of the tenant's first file.
    first_sequence: int = dataclasses.field(default=1, metadata={"minimum": 0})


@dataclasses.dataclass(frozen=True)
class CloserEnv:
    """The environment of the function that records a closed execution (workflow end)."""

    tenant_id: str
    state_machine_arn: str
    ledger_table_name: str
    queue_url: str
    alarm_topic_arn: str
    on_failure: OnFailure


@dataclasses.dataclass(frozen=True)
class CompletionEnv:
    """The environment of the completion entry point (the core system confirms or rejects the
    tenant's waiting file; docs/core-system.md, "Completion callback")."""

    tenant_id: str
    ledger_table_name: str


@dataclasses.dataclass(frozen=True)
class SplitEnv:
    """The split function's environment.

    `ledger_table_name`: where split looks up a file's content (`duplicate_files: skip`)."""

    tenant_id: str
    format: FileFormat
    chunk_size: int = dataclasses.field(metadata={"minimum": 1})
    work_bucket: str
    landing_prefix: str
    ledger_table_name: str
    duplicate_files: DuplicateFiles
    #: The most chunks a file may have: the workflow runs at most this many (pages of chunks,
    #: each page a child execution), so that every execution's history stays bounded. Split
    #: refuses a bigger file before any record is sent (`FileTooLargeError`).
    max_chunks: int = dataclasses.field(metadata={"minimum": 1})


@dataclasses.dataclass(frozen=True)
class RegisterEnv:
    """The register-chunk function's environment."""

    tenant_id: str
    work_bucket: str
    ledger_table_name: str
    # urllib would also open file:// and ftp:// URLs; a sink is only ever HTTP(S).
    sink_url: str = dataclasses.field(metadata={"schemes": ("http", "https")})
    sink_timeout_seconds: float = dataclasses.field(metadata={"minimum": 0.0, "exclusive": True})
    #: How long the core system may stay unavailable (one fault episode) before the file fails.
    sink_outage_budget_seconds: float = dataclasses.field(metadata={"minimum": 0.0, "exclusive": True})
    #: Register reads its chunk from the landing object (ranged GET): only under this prefix.
    landing_prefix: str
    #: Records per POST: 1 is the seed's contract (one record per POST); more sends JSON arrays
    #: (the batch contract, `sink_client.py`).
    sink_batch_size: int = dataclasses.field(default=1, metadata={"minimum": 1})
    #: `sink.auth.type`. The environment names the secret, never holds its value.
    sink_auth: SinkAuthType = "none"
    #: bearer: the secret's name or ARN; its SecretString is the token itself, or JSON
    #: `{"token": "..."}` (`sink_auth.token_of`).
    sink_auth_secret: str = dataclasses.field(default="", metadata={"optional": True})
    #: bearer: how long a token read is used before the secret is read again (a 401 reads it
    #: again at once, once).
    sink_auth_cache_seconds: int = dataclasses.field(default=300, metadata={"minimum": 1})
    #: sigv4: the service (`SIGV4_SERVICES`) and the Region the signature is for; both "" for
    #: the other auth types (so `str`, not `Sigv4Service`; the tenants file's model checks it).
    sink_auth_service: str = dataclasses.field(default="", metadata={"optional": True})
    sink_auth_region: str = dataclasses.field(default="", metadata={"optional": True})
    #: Where the RecordsSent, SinkRequests and SinkErrors metrics go: the app's, qualified.
    metric_namespace: str = dataclasses.field(default=METRIC_NAMESPACE, metadata={"implicit": True})


#: A function's config: a dataclass (`from_env` reads its fields).
EnvT = TypeVar("EnvT", bound="DataclassInstance")


def environment(config: Any) -> dict[str, str]:
    """The environment variables of a config instance, for the function's `environment=`."""
    return {
        env_name(f.name): str(getattr(config, f.name)) or NONE
        for f in dataclasses.fields(config)
        if not (f.metadata.get("implicit") and getattr(config, f.name) == f.default)
    }


@functools.cache
def _field_types(config_type: type) -> dict[str, Any]:
    """The fields' types of `config_type`, resolved (its annotations are strings)."""
    return typing.get_type_hints(config_type)


def from_env(config_type: type[EnvT], source: typing.Mapping[str, str] | None = None) -> EnvT:
    """Read and check `config_type` from the environment; `FunctionEnvironmentError` names the variable."""
    source = os.environ if source is None else source
    types = _field_types(config_type)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(config_type):
        name = env_name(field.name)
        raw = source.get(name, "").strip()
        if field.metadata.get("optional") and raw in ("", NONE):
            values[field.name] = ""
            continue
        if field.metadata.get("implicit") and not raw:
            values[field.name] = field.default
            continue
        if not raw:
            raise FunctionEnvironmentError(
                f"environment variable {name} is not set; the function's deployment must set it"
            )
        values[field.name] = _convert(name, raw, types[field.name], field.metadata)
    return config_type(**values)


def _convert(name: str, raw: str, annotation: Any, rules: typing.Mapping[str, Any]) -> Any:
    value: Any = raw
    if annotation is int:
        try:
            value = int(raw)
        except ValueError:
            raise FunctionEnvironmentError(f"environment variable {name}={raw!r} is not an integer") from None
    elif annotation is float:
        try:
            value = float(raw)
        except ValueError:
            raise FunctionEnvironmentError(f"environment variable {name}={raw!r} is not a number") from None
    if "minimum" in rules:
        minimum = rules["minimum"]
        if rules.get("exclusive") and not value > minimum:
            raise FunctionEnvironmentError(
                f"environment variable {name}={value} must be greater than {minimum}"
            )
        if value < minimum:
            raise FunctionEnvironmentError(f"environment variable {name}={value} must be at least {minimum}")
    if typing.get_origin(annotation) is Literal:
        choices = typing.get_args(annotation)
        value = value.lower()
        if value not in choices:
            raise FunctionEnvironmentError(
                f"environment variable {name}={value!r} must be one of {', '.join(choices)}"
            )
    if "schemes" in rules and urllib.parse.urlsplit(value).scheme not in rules["schemes"]:
        schemes = " or ".join(f"{s}://" for s in rules["schemes"])
        raise FunctionEnvironmentError(f"environment variable {name}={value!r} must be an {schemes} URL")
    return value
