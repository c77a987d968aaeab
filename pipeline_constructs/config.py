"""The model of ``tenants.yaml`` and its loader.

Validation is done by pydantic (strict, unknown keys forbidden) on each tenant merged with the
``defaults:`` block, then by cross-tenant checks (duplicate ids, overlapping prefixes). Every
problem is collected and reported in one :class:`ConfigError`; each line names the tenant, the
field, the bad value and the fix.
"""

from __future__ import annotations

import difflib
import ipaddress
import itertools
import re
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from lambdas import contract
from pipeline_constructs import budgets, capacity, deploy_limits, names
from pipeline_constructs import routing as routing_rules

TENANT_ID_PATTERN = r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$"
#: The largest `sink.batch_size` (records per POST, one JSON array): a batch never spans chunks.
MAX_SINK_BATCH_SIZE = 1000
#: The largest chunk in any mode. Below it, the register budget (`budgets.max_chunk_size`: a
#: chunk's invocations at the slowest answer, with a whole outage, within one page's history)
#: bounds it: a chunk's fixed cost (a workflow iteration, an invocation, its reads and ledger
#: writes, about 50 ms locally) is amortised over as many records as the budget allows
#: (docs/benchmarks.md, "Register throughput"). In batch mode that takes about 100,000 records
#: (1,000 POSTs of 100): with 10,000 the fixed cost outweighed the POSTs. The register function streams its chunk, so a
#: chunk's size costs no memory; a restart inside one re-reads the records before its progress.
MAX_CHUNK_SIZE = 100_000
#: `sink.outage_budget_seconds` by default: one hour.
DEFAULT_OUTAGE_BUDGET_SECONDS = 3600
EMAIL_PATTERN = r"^[^@\s]+@[^@\s]+\.[^@\s]+$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


#: A Secrets Manager secret name (letters, digits and /_+=.@-, e.g. a path `core/acme/token`).
SECRET_NAME_PATTERN = r"^[A-Za-z0-9/_+=.@-]{1,512}$"
#: A full Secrets Manager secret ARN: the name and the 6 characters Secrets Manager appends.
SECRET_ARN_PATTERN = (r"^arn:aws[a-z-]*:secretsmanager:[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]+:[0-9]{12}:"
                      r"secret:[A-Za-z0-9/_+=.@-]+-[A-Za-z0-9]{6}$")
#: What a sigv4 sink's `invoke_arn` names, per `service`: an API Gateway method ARN
#: (`arn:aws:execute-api:<region>:<account>:<api id>/<stage>/<METHOD>/<path>`) or a function ARN.
INVOKE_ARN_PATTERNS = {
    "execute-api": r"^arn:aws[a-z-]*:execute-api:(?P<region>[a-z0-9-]+):[0-9]{12}:[A-Za-z0-9]+/[^/\s]+/[A-Z]+/\S*$",
    "lambda": r"^arn:aws[a-z-]*:lambda:(?P<region>[a-z0-9-]+):[0-9]{12}:function:[A-Za-z0-9_-]+(:[A-Za-z0-9$_-]+)?$",
}
#: The longest `sink.auth.invoke_arn`: it is a resource of the register role's policy, which IAM
#: keeps within 10,240 characters with the role's other statements (`deploy_limits`).
MAX_INVOKE_ARN_CHARS = 1024
#: The longest a register function keeps a bearer token before it reads the secret again.
MAX_AUTH_CACHE_SECONDS = 3600


class NoAuth(_Strict):
    """`sink.auth: {type: none}`: no credentials. In `defaults` only as `{type: none, inherited: true}`
    (`_check_default_auth`): a tenant that leaves `auth` out runs without credentials only because
    the file says so, never by accident."""

    type: Literal["none"] = Field(description=(
        "`none`: the register function sends no credentials. In the tenant's own `sink`, or in `defaults` with "
        "`inherited: true`."))
    # Not dumped: where a tenant's `none` was written changes nothing the register function gets.
    inherited: bool = Field(default=False, exclude=True, description=(
        "`true`, in `defaults` only: every tenant that leaves its `auth` out inherits `{type: none}` and runs "
        "without credentials, on purpose (`AppConfig.tenants_without_credentials` lists them, own or inherited). "
        "Without it `{type: none}` is refused in `defaults`; in a tenant's own `sink` it is refused."))


class BearerAuth(_Strict):
    """`sink.auth: {type: bearer, secret: ...}`: `Authorization: Bearer <token>`, the token read
    from a Secrets Manager secret (its name, or its full ARN) and kept `cache_seconds`; a 401
    reads it again once (a rotation does not fail a chunk)."""

    type: Literal["bearer"] = Field(description="`bearer`: `Authorization: Bearer <token>`.")
    secret: str = Field(description=(
        "The Secrets Manager secret that holds the token: its name (e.g. `core/acme/token`, in the stack's "
        "account and Region) or its full ARN (with the 6 characters Secrets Manager appends). Its `SecretString` "
        'is the token itself, or JSON `{"token": "..."}`. Only the register function may read it.'))
    cache_seconds: int = Field(default=300, ge=1, le=MAX_AUTH_CACHE_SECONDS, description=(
        "Seconds a token read is used before the secret is read again. A 401 reads it again at once (once "
        "per request), so a rotation fails nothing."))

    @field_validator("secret")
    @classmethod
    def _name_or_arn(cls, secret: str) -> str:
        if secret.startswith("arn:"):
            if not re.match(SECRET_ARN_PATTERN, secret):
                raise ValueError("is an ARN, but not the full ARN of a Secrets Manager secret")
            return secret
        if not re.match(SECRET_NAME_PATTERN, secret):
            raise ValueError("is not a Secrets Manager secret name")
        return secret


class SigV4Auth(_Strict):
    """`sink.auth: {type: sigv4, ...}`: each request signed (AWS Signature Version 4) with the
    register function's own credentials, for a core system behind an IAM-authorized API
    Gateway (`execute-api`) or Lambda function URL (`lambda`). `invoke_arn` is what the
    function is allowed to invoke (`execute-api:Invoke`, `lambda:InvokeFunctionUrl`), exactly."""

    type: Literal["sigv4"] = Field(description=(
        "`sigv4`: each request signed with AWS Signature Version 4 by the register function's own role."))
    service: Literal["execute-api", "lambda"] = Field(description=(
        "`execute-api`: an API Gateway API with IAM authorization; `lambda`: a Lambda function URL with "
        "`AWS_IAM` auth."))
    region: str = Field(description="The core system's Region code, e.g. `eu-west-1`.")
    invoke_arn: str = Field(validate_default=True, max_length=MAX_INVOKE_ARN_CHARS, description=(
        "Exactly what the register function may invoke, in `region`, without wildcards: the API method's ARN "
        "(`arn:aws:execute-api:<region>:<account>:<api id>/<stage>/<METHOD>/<path>`) or the function's ARN "
        f"(`arn:aws:lambda:<region>:<account>:function:<name>`). At most {MAX_INVOKE_ARN_CHARS:,} characters."))

    @field_validator("region")
    @classmethod
    def _region(cls, region: str) -> str:
        return _matching(region, REGION_PATTERN, "is not an AWS Region code")

    @field_validator("invoke_arn")
    @classmethod
    def _invoke_arn(cls, arn: str, info: ValidationInfo) -> str:
        service = info.data.get("service")
        if "*" in arn or "?" in arn:
            raise ValueError("has a wildcard: the register function is granted exactly this ARN")
        match = re.match(INVOKE_ARN_PATTERNS.get(service or "", "$^"), arn)
        if service is not None and match is None:
            raise ValueError(f"is not an ARN that service '{service}' invokes")
        region = info.data.get("region")
        if match is not None and region is not None and match.group("region") != region:
            raise ValueError(f"is in Region '{match.group('region')}', not sink.auth.region '{region}'")
        return arn


#: The sink's authentication: which model is chosen by `type`.
SinkAuth = Annotated[NoAuth | BearerAuth | SigV4Auth, Field(discriminator="type")]
AUTH_TYPES = ("none", "bearer", "sigv4")


#: The longest sink URL and sequence pattern: each travels in a function's environment, whose
#: variables together must stay within Lambda's 4 KB (`deploy_limits`), beside the prefix and
#: the secret at their own longest.
MAX_SINK_URL_CHARS = 2048
MAX_SEQUENCE_PATTERN_CHARS = 1024


class SinkConfig(_Strict):
    """The tenant's record sink: the core system endpoint that receives its records, in order.
    Required, in the tenant or in `defaults` (merged key by key)."""

    url: str = Field(max_length=MAX_SINK_URL_CHARS, description=(
        "The core system's endpoint: one POST per record (or per batch, `batch_size`). `https://`; plain "
        f"`http://` only for `localhost` and loopback addresses. At most {MAX_SINK_URL_CHARS} characters."))
    auth: SinkAuth = Field(description=(
        "How the register function authenticates to the core system, chosen by `type`. Required, so that no "
        "tenant runs without credentials by accident: a `bearer` or `sigv4` auth may sit in `defaults` and is "
        "inherited (a tenant's own `auth` replaces it as a whole); `{type: none}` in the tenant's own `sink`, "
        "or in `defaults` only as `{type: none, inherited: true}`."))
    timeout_seconds: int = Field(default=10, ge=1, le=60, description=(
        "Seconds one POST may take. The register function's timeout is the chunk's requests (`chunk_size`, "
        "or `ceil(chunk_size / batch_size)` in batch mode) x this + 30 s, between 1 and 15 minutes. A chunk "
        "whose invocations at the slowest answer, with a whole outage, would not fit one page execution's "
        "history is refused: at the default outage budget at most "
        f"{budgets.max_chunk_size(10, DEFAULT_OUTAGE_BUDGET_SECONDS)} records per chunk at 10 s, "
        f"{budgets.max_chunk_size(60, DEFAULT_OUTAGE_BUDGET_SECONDS)} at 60 s (and `chunk_size`'s own limit)."))
    outage_budget_seconds: int = Field(default=DEFAULT_OUTAGE_BUDGET_SECONDS, ge=1, le=86400, description=(
        "Seconds the core system may stay unavailable (one outage) before the file fails, and with "
        "`on_failure: halt` halts the tenant. More than about 12 hours is refused: a chunk could not wait it "
        "out within one page execution's history."))
    batch_size: int = Field(default=1, ge=1, le=MAX_SINK_BATCH_SIZE, description=(
        "Records per POST, at most `chunk_size`. `1`: one record per POST (the original article's contract). More: each "
        "POST carries a JSON array of up to this many records with one idempotency key, for a core system that "
        'implements the batch contract (docs/core-system.md, "The contract"). Change it while the '
        "tenant is idle."))

    @field_validator("url")
    @classmethod
    def _https_or_loopback(cls, url: str) -> str:
        if not url.isascii():
            # Counted in bytes in the register function's environment; a URL carries other
            # characters percent-encoded (and an international host name as its xn-- form).
            raise ValueError("has characters other than ASCII: percent-encode them (and give an international host "
                             "name in its xn-- form)")
        parts = urlsplit(url)
        if parts.scheme == "https" and parts.hostname:
            return url
        if parts.scheme == "http" and _is_loopback(parts.hostname):
            return url
        raise ValueError("must be an https:// URL (plain http:// only for localhost)")


class AlarmConfig(_Strict):
    """When the tenant's alarms page (merged key by key with `defaults`). Each alarm's
    description names what to run first (docs/operations.md)."""

    queue_age_seconds: int = Field(default=21600, ge=60, description=(
        "Seconds the oldest message of the tenant's queue may wait before the `queue-age` alarm fires: a "
        "backlog (files arriving faster than they are ingested for hours, or a controller that never runs), "
        "not a stall. 6 hours by default: a burst of files queued behind each other is normal and must not page."))
    stall_after_seconds: int = Field(default=1800, ge=60, description=(
        "Seconds the next file may wait while no file of the tenant runs before the `stall` alarm fires (a "
        "halted or stuck tenant)."))
    error_logs_threshold: int = Field(default=1, ge=1, description=(
        "ERROR log lines per 5 minutes, per function, that page."))
    evaluation_periods: int = Field(default=1, ge=1, le=24, description=(
        "Periods of 5 minutes an alarm must breach before it fires."))
    paused_alarm_after_seconds: int = Field(default=14400, ge=300, description=(
        "Seconds a tenant may stay paused (`ops pause`) before the `paused` alarm fires, so a pause nobody "
        "ended is not forgotten; while paused the stall and queue-age alarms stay quiet and no execution "
        "fails. 4 hours by default: a maintenance window of the core system."))
    sink_errors_threshold: int = Field(default=10, ge=1, description=(
        "Failed tries of the core system per 5 minutes that page (`sink-errors`), when they are also at least "
        "half of all tries (a blip retried in place makes at most 5)."))


class OrderingConfig(_Strict):
    """How the tenant's files are put in order (docs/design.md §4.8)."""

    by: Literal["arrival", "key_sequence"] = Field(default="arrival", description=(
        "`arrival`: the order the files' events reach the tenant's FIFO queue (S3 does not order its "
        "notifications across keys: a late one is logged and counted). `key_sequence`: strictly by the "
        "sequence number `sequence_pattern` finds in each key, from `first_sequence`; a file waits while an "
        "earlier number is missing. The queue is then a standard queue: changing `by` replaces the queue, so "
        "drain the tenant first."))
    sequence_pattern: str = Field(default="", validate_default=True, max_length=MAX_SEQUENCE_PATTERN_CHARS,
                                  description=(
        "With `key_sequence`, required: a Python regular expression searched in the object key; its group "
        r"`seq` (or its only group, or the whole match) is the number, ASCII digits, e.g. `(?P<seq>\d+)\.csv$`. "
        f"At most {MAX_SEQUENCE_PATTERN_CHARS} characters. Otherwise leave it out."))
    first_sequence: int = Field(default=1, ge=0, description="The sequence number of the tenant's first file.")
    gap_alarm_after_seconds: int = Field(default=900, ge=60, description=(
        "With `key_sequence`: seconds a later file may wait for a missing number before the `sequence-gap` "
        "alarm fires."))

    @field_validator("sequence_pattern")
    @classmethod
    def _pattern_finds_a_number(cls, pattern: str, info: ValidationInfo) -> str:
        if info.data.get("by") != "key_sequence":
            if pattern:
                raise ValueError("is set, but ordering.by is not 'key_sequence'")
            return pattern
        if not pattern:
            raise ValueError("is required when ordering.by is 'key_sequence'")
        if len(pattern.encode()) > MAX_SEQUENCE_PATTERN_CHARS:
            raise ValueError(f"is {len(pattern.encode())} bytes in UTF-8 (at most {MAX_SEQUENCE_PATTERN_CHARS})")
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"is not a valid regular expression ({exc})") from None
        if "seq" not in compiled.groupindex and compiled.groups > 1:
            raise ValueError("has several groups and none is named 'seq'")
        return pattern


#: An IAM principal ARN allowed to answer a tenant's completion callback: a role or a user of
#: an account, or an account root (`arn:aws:iam::111111111111:root`: the account decides).
CALLER_ARN_PATTERN = r"^arn:aws[a-z-]*:iam::\d{12}:(root|role/[\w+=,.@/-]+|user/[\w+=,.@/-]+)$"
#: Step Functions' own ceiling of a task's TimeoutSeconds is a year; a file waits at most a
#: week for its confirmation (the tenant waits behind it).
MAX_COMPLETION_TIMEOUT_SECONDS = 7 * 24 * 3600


class CompletionConfig(_Strict):
    """The core system's completion callback (docs/core-system.md, "Completion callback"). Absent
    or `wait: false`: a file is ingested once its last record is acknowledged."""

    wait: bool = Field(default=False, description=(
        "`true`: after its last record is acknowledged a file waits until the core system confirms or rejects "
        "it through the tenant's completion entry point; the next file starts only then. `false`: the workflow "
        "is exactly as without the feature."))
    timeout_seconds: int = Field(default=3600, ge=1, le=MAX_COMPLETION_TIMEOUT_SECONDS, description=(
        "Seconds a file waits for the answer, shorter than its time limit (`file_time_limit_seconds`); then it "
        "fails with `CompletionTimedOut` and `on_failure` applies."))
    heartbeat_seconds: int | None = Field(default=None, ge=1, le=MAX_COMPLETION_TIMEOUT_SECONDS, description=(
        "Seconds, shorter than `timeout_seconds`: while it checks a file the core system must send a heartbeat "
        "at least this often, or the file fails with `CompletionTimedOut` early. Default (null): no heartbeat "
        "needed."))
    callers: list[str] = Field(default_factory=list, description=(
        "With `wait: true`, required: the IAM role, user or account-root ARNs "
        "(`arn:aws:iam::<12 digits>:role/...`) allowed to invoke the tenant's entry point; each becomes a "
        "statement of the function's resource policy."))

    @field_validator("callers")
    @classmethod
    def _principal_arns(cls, callers: list[str]) -> list[str]:
        return _ids(callers, CALLER_ARN_PATTERN, "an IAM role, user or account root ARN", item="a principal")


#: EC2 ids as the console shows them: a prefix, a hyphen and 8 or 17 hexadecimal digits.
VPC_ID_PATTERN = r"^vpc-[0-9a-f]{8}([0-9a-f]{9})?$"
SUBNET_ID_PATTERN = r"^subnet-[0-9a-f]{8}([0-9a-f]{9})?$"
SECURITY_GROUP_ID_PATTERN = r"^sg-[0-9a-f]{8}([0-9a-f]{9})?$"


class NetworkConfig(_Strict):
    """The VPC the register function runs in, for a core system reachable only from inside it
    (docs/core-system.md, "Private core systems"). Only the register function gets it: split, the controller
    and the closer talk to AWS APIs only. Ids, not lookups: synthesis needs no credentials."""

    vpc_id: str = Field(description="The VPC of the subnets (`vpc-` and 8 or 17 hexadecimal digits).")
    subnet_ids: list[str] = Field(min_length=1, max_length=16, description=(
        "Subnet ids (`subnet-...`) of that VPC, at most 16 (Lambda's limit); give two in different Availability "
        "Zones."))
    security_group_ids: list[str] = Field(min_length=1, max_length=5, description=(
        "Security group ids (`sg-...`), at most 5 (Lambda's limit), whose outbound rules reach the core system and "
        "the VPC endpoints."))

    @field_validator("vpc_id")
    @classmethod
    def _vpc_id(cls, vpc_id: str) -> str:
        return _matching(vpc_id, VPC_ID_PATTERN, "is not a VPC id (vpc- and 8 or 17 hexadecimal digits)")

    @field_validator("subnet_ids")
    @classmethod
    def _subnet_ids(cls, subnet_ids: list[str]) -> list[str]:
        return _ids(subnet_ids, SUBNET_ID_PATTERN, "a subnet id (subnet- and 8 or 17 hexadecimal digits)")

    @field_validator("security_group_ids")
    @classmethod
    def _security_group_ids(cls, group_ids: list[str]) -> list[str]:
        return _ids(group_ids, SECURITY_GROUP_ID_PATTERN, "a security group id (sg- and 8 or 17 hexadecimal digits)")


def _ids(ids: list[str], pattern: str, what: str, *, item: str = "an id") -> list[str]:
    """`ids` if each matches `pattern` and none is listed twice; else the first problem."""
    wrong = [i for i in ids if not re.match(pattern, i)]
    if wrong:
        raise ValueError(f"{wrong[0]!r} is not {what}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"lists {item} twice")
    return ids


def _matching(value: str, pattern: str, problem: str) -> str:
    """`value` if it matches `pattern`, else the validation error `problem`."""
    if not re.match(pattern, value):
        raise ValueError(problem)
    return value


#: An uploader: an IAM role or user ARN, or an account root ARN (another account decides
#: which of its principals may upload: cross-account).
UPLOADER_ARN_PATTERN = CALLER_ARN_PATTERN
#: A KMS key ARN (not an alias: IAM policies and key grants name the key itself); `mrk-` ids
#: are multi-Region keys.
KMS_KEY_ARN_PATTERN = r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/(mrk-[0-9a-f]{32}|[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12})$"


class EncryptionConfig(_Strict):
    """Customer-managed KMS encryption (docs/security.md, "Customer-managed keys"): what it encrypts depends on where
    it is written (top level: the shared resources; `defaults` or a tenant: the tenant's)."""

    kms_key: str = Field(description=(
        "`create`: the app makes a key (rotation on, kept when its stack is deleted); or the ARN of an "
        "existing symmetric key in the deployment's Region (`arn:aws:kms:<region>:<account>:key/<id>`, not an "
        "alias), used as given: its policy must allow what the app's own keys allow."))

    @field_validator("kms_key")
    @classmethod
    def _create_or_key_arn(cls, kms_key: str) -> str:
        if kms_key == "create" or re.match(KMS_KEY_ARN_PATTERN, kms_key):
            return kms_key
        if re.match(r"^arn:aws[a-z-]*:kms:[^:]*:[^:]*:alias/", kms_key) or kms_key.startswith("alias/"):
            raise ValueError("is an alias, not a key: key policies and IAM statements need the key's own ARN")
        raise ValueError("is neither 'create' nor a KMS key ARN")


class TenantConfig(_Strict):
    """One tenant, with the defaults already applied. Every tenant gets its own stack
    (`OrderedIngest-Tenant-<id>`): EventBridge rules, queue, controller, workflow and alarms."""

    id: str = Field(pattern=TENANT_ID_PATTERN, description=(
        "The tenant's name, unique: it names its stack and every resource of its pipeline. Lowercase letters, "
        f"digits and single hyphens, starting with a letter, at most {names.MAX_TENANT_ID_LENGTH} characters so "
        "that every derived name fits (`<id>-register-chunk` is a 64-character Lambda function name)."))
    prefix: str = Field(min_length=1, max_length=512, description=(
        "Key prefix of the tenant's files in the landing bucket: ends with `/`, does not start with `/`, is "
        "not inside another tenant's prefix. Only letters, digits, `/`, `.`, `_` and `-`: S3 URL-encodes every "
        "other character in the keys of its events, so the tenant's rule would never match. Required, in the "
        "tenant or in `defaults` as a pattern with `{id}` (e.g. `'{id}/'`, `'incoming/{id}/'`): the prefixes "
        "a pattern makes never overlap each other."))
    format: Literal["csv", "jsonl"] = Field(default="csv", description=(
        "`csv`: comma-separated values, the first row is the header; `jsonl`: one JSON object per line."))
    chunk_size: int = Field(default=100, ge=1, le=MAX_CHUNK_SIZE, description=(
        "Records per chunk, the unit the register function sends and the ledger records; a failing chunk stops "
        f"every later one. At most {MAX_CHUNK_SIZE}, and at most what the register function's budget allows for "
        "`sink.timeout_seconds`, `sink.batch_size` and `sink.outage_budget_seconds` (a chunk's invocations at the "
        "slowest answer, with a whole outage, fit one page execution's history): with one record per POST and the "
        f"default 1 h outage budget {budgets.max_chunk_size(60, DEFAULT_OUTAGE_BUDGET_SECONDS)} at 60 s, "
        f"{budgets.max_chunk_size(10, DEFAULT_OUTAGE_BUDGET_SECONDS)} at the default 10 s. Larger chunks amortise "
        "each chunk's fixed cost (an invocation, its reads and ledger writes, the workflow's state transitions) "
        "over more records, and pages hold fewer but larger chunks: in batch mode it takes about 100,000 records "
        "to make that cost small, in record mode a few thousand."))
    sink: SinkConfig = Field(description="Where the tenant's records go (required, in the tenant or in `defaults`).")
    alarms: AlarmConfig = Field(default=AlarmConfig(), description="When the tenant's alarms page.")
    on_failure: Literal["halt", "continue"] = Field(default="halt", description=(
        "`halt`: after a failed, timed-out or aborted file nothing of the tenant starts until "
        "`python -m ops resume` or `ops skip`; `continue`: the next file starts (the original article's behaviour)."))
    ordering: OrderingConfig = Field(default=OrderingConfig(), description="How the tenant's files are put in order.")
    file_time_limit_seconds: int | None = Field(
        default=None, ge=60, le=budgets.MAX_FILE_TIME_LIMIT_SECONDS, description=(
            "Seconds one execution (one attempt at a file) may run: the workflow's `TimeoutSeconds`. A longer "
            "one times out and halts the tenant like a failure (`ops resume` gives the file a fresh limit). More "
            "than `sink.outage_budget_seconds`, at most a year. Default (null): `sink.outage_budget_seconds` "
            "plus 6 hours."))
    tracing: bool = Field(default=False, description=(
        "`true`: X-Ray tracing of the tenant's state machines and functions, e.g. while "
        "investigating latency. Off by default: X-Ray charges per trace recorded (a file of 10,000 chunks "
        'records about 10,000), and the execution history, the ledger and `ops status` '
        "already show where a file is."))
    duplicate_files: Literal["process", "skip"] = Field(default="process", description=(
        "`process`: a byte-identical re-upload is processed again (its idempotency keys are new); `skip`: "
        "split hashes the bytes (SHA-256) as it streams them, and a file with the bytes of a file of the tenant "
        "that succeeded is sent nowhere and closes as `DUPLICATE` of it."))
    chunks_per_page: int | None = Field(default=None, ge=1, le=budgets.MAX_ARRAY_RANGE_ITEMS, description=(
        "Chunks per page execution (the child workflow that registers a page of a file's chunks). Default "
        "(null): the most that keep a page's history within budget "
        f"({budgets.max_chunks_per_page(100, 10, DEFAULT_OUTAGE_BUDGET_SECONDS)} at the default sink settings); "
        "more is refused. "
        "Smaller values only make more, shorter pages (the tests use 2)."))
    shard: int | None = Field(default=None, ge=0, lt=routing_rules.MAX_SHARDS, description=(
        "With `routing.shards` only, not in `defaults`: the shard whose event bus holds the tenant's rules, "
        "from 0 to `routing.shards` - 1 (a pin: set it to move a tenant out of a full shard). Default (null): "
        "sha256 of `id` modulo `routing.shards`."))
    target: str | None = Field(default=None, description=(
        "The deployment target (a name under `targets:`) the tenant is deployed to: required, in the tenant or "
        "in `defaults`, when targets are declared; not allowed without."))
    pages_per_section: int | None = Field(default=None, ge=1, le=budgets.max_pages_per_section(), description=(
        "Pages per section execution (a file of more pages runs them in sections). Default (null): the most a "
        f"section's history holds ({budgets.max_pages_per_section()}); smaller values only make more, shorter "
        "sections."))
    completion: CompletionConfig = Field(default=CompletionConfig(), description=(
        "The core system's completion callback."))
    network: NetworkConfig | None = Field(default=None, description=(
        'The VPC the register function runs in, for a core system reachable only from inside it (docs/core-system.md, '
        '"Private core systems"). Default (null): no VPC; `network: null` in a tenant turns off a `network` '
        "of `defaults`."))
    uploaders: list[str] = Field(default_factory=list, description=(
        "Per tenant only (not in `defaults`): IAM role or user ARNs, or an account root ARN "
        "(`arn:aws:iam::<12 digits>:root`: another account, which then decides which of its principals may "
        "upload), that may put files under this tenant's prefix and nowhere else, through the tenant's own S3 "
        "access point (docs/security.md, Uploaders). "
        "A role or user uploads for one tenant; the root of the tenant's own target account is refused."))
    encryption: EncryptionConfig | None = Field(default=None, description=(
        "The tenant's customer-managed key: its queue and intake dead-letter queue, its log groups and its "
        "functions' environment variables; `create` makes it in the tenant's stack "
        "(alias `alias/ordered-ingest/<id>`). Default (null): SQS-managed queues, CloudWatch Logs' own "
        "encryption, Lambda's AWS managed key; `encryption: null` in a tenant turns off a key of `defaults`."))

    @property
    def file_time_limit(self) -> int:
        """`file_time_limit_seconds`, or its default derived from the outage budget."""
        if self.file_time_limit_seconds is not None:
            return self.file_time_limit_seconds
        return budgets.default_file_time_limit_seconds(self.sink.outage_budget_seconds)

    @field_validator("uploaders")
    @classmethod
    def _uploader_arns(cls, uploaders: list[str]) -> list[str]:
        return _ids(uploaders, UPLOADER_ARN_PATTERN, "an IAM role, user or account root ARN", item="a principal")

    @field_validator("id")
    @classmethod
    def _id_fits_every_derived_name(cls, tenant_id: str) -> str:
        if names.RESERVED_ID_PART in f"-{tenant_id}-":
            # 'a' would own the IAM wildcard `execution:a-file-ingest-page*`, which names the
            # executions of tenant 'a-file-ingest-page-b' too.
            raise ValueError(f"contains '{names.RESERVED_ID_PART.strip('-')}', the part every tenant's state "
                             "machine names share (another tenant's permissions could then cover this one's)")
        broken = names.tightest_broken(tenant_id)
        if broken is not None:
            derived = broken.longest(tenant_id, qualifier="")
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


#: An SQS queue ARN and a Lambda function ARN (optionally with a version or alias), as SNS subscribes them.
SQS_QUEUE_ARN_PATTERN = r"^arn:aws[a-z-]*:sqs:(?P<region>[a-z0-9-]+):(?P<account>[0-9]{12}):[A-Za-z0-9_-]{1,80}(\.fifo)?$"
LAMBDA_FUNCTION_ARN_PATTERN = (r"^arn:aws[a-z-]*:lambda:(?P<region>[a-z0-9-]+):(?P<account>[0-9]{12}):function:"
                               r"[A-Za-z0-9_-]{1,64}(:[A-Za-z0-9$_-]+)?$")
SNS_TOPIC_ARN_PATTERN = r"^arn:aws[a-z-]*:sns:(?P<region>[a-z0-9-]+):(?P<account>[0-9]{12}):[A-Za-z0-9_-]{1,256}$"


class SubscriptionConfig(_Strict):
    """One subscription of the alarm topic (docs/operations.md, "Who gets the alarms")."""

    protocol: Literal["email", "https", "sqs", "lambda"] = Field(description=(
        "`email`: an address, which must confirm (SNS e-mails a link). `https`: a URL that receives each "
        "notification as a POST (it must confirm the subscription by fetching the `SubscribeURL` of the first "
        "one; PagerDuty, Opsgenie and similar do). `sqs`: a standard queue's ARN; its queue policy, which "
        "belongs to the queue's owner, must allow `sns.amazonaws.com` `sqs:SendMessage` with `aws:SourceArn` "
        "the alarm topic's ARN (and its KMS key, if any, allow SNS); a queue of another account must also "
        "confirm the subscription. `lambda`: a function's ARN; in the deploying account the app grants SNS "
        "the invoke, a function of another account needs that grant (`aws lambda add-permission`) from its owner."))
    endpoint: str = Field(validate_default=True, description=(
        "Where notifications go: the address (`email`), the `https://` URL (`https`), the queue's ARN "
        "(`arn:aws:sqs:<region>:<account>:<name>`) or the function's ARN "
        "(`arn:aws:lambda:<region>:<account>:function:<name>`)."))

    @field_validator("endpoint")
    @classmethod
    def _endpoint_of_protocol(cls, endpoint: str, info: ValidationInfo) -> str:
        protocol = info.data.get("protocol")
        if protocol == "email":
            return _matching(endpoint, EMAIL_PATTERN, "is not an email address")
        if protocol == "https":
            parts = urlsplit(endpoint)
            if parts.scheme != "https" or not parts.hostname:
                raise ValueError("is not an https:// URL (SNS would send the alarms unencrypted over http://)")
            return endpoint
        if protocol == "sqs":
            _matching(endpoint, SQS_QUEUE_ARN_PATTERN, "is not an SQS queue ARN")
            if endpoint.endswith(".fifo"):
                raise ValueError("is a FIFO queue: the alarm topic is a standard topic, which cannot deliver to it")
            return endpoint
        if protocol == "lambda":
            return _matching(endpoint, LAMBDA_FUNCTION_ARN_PATTERN, "is not a Lambda function ARN")
        return endpoint


class NotificationsConfig(_Strict):
    """Who is told when an alarm fires or a file fails: the subscriptions of the shared alarm
    topic, or a topic of your own. With none of them, alarms reach nobody (`cdk synth` warns)."""

    emails: list[str] = Field(default=[], description=(
        "Email addresses subscribed to the alarm topic (each confirms its subscription): the short form of "
        "`subscriptions` with `protocol: email`."))
    subscriptions: list[SubscriptionConfig] = Field(default=[], description=(
        "Subscriptions of the alarm topic of any protocol: `email`, `https`, `sqs`, `lambda`. The topic's ARN is "
        "the shared stack's output `AlarmTopicArn` (`python -m ops status` shows it)."))
    topic_arn: str | None = Field(default=None, description=(
        "An existing SNS topic that gets every alarm and notification instead of the app's own topic (then not "
        "created; `emails` and `subscriptions` are refused: subscribe where that topic is managed). In the "
        "Region of the deployment (CloudWatch alarms publish to their own Region only); its topic policy must "
        "allow `cloudwatch.amazonaws.com` `sns:Publish` (and, from another account, the tenants' closer roles); "
        "if it is encrypted, `topic_kms_key` names its key."))
    topic_kms_key: str | None = Field(default=None, description=(
        "With `topic_arn`: the ARN of the customer-managed KMS key that encrypts that topic (the tenants' closers "
        "are granted `kms:GenerateDataKey` and `kms:Decrypt` on it; its key policy must allow "
        "`cloudwatch.amazonaws.com` the same). Default (null): the topic is not encrypted."))

    @field_validator("emails")
    @classmethod
    def _emails(cls, emails: list[str]) -> list[str]:
        bad = [e for e in emails if not re.match(EMAIL_PATTERN, e)]
        if bad:
            raise ValueError(f"not an email address: {', '.join(bad)}")
        return emails

    @field_validator("topic_arn")
    @classmethod
    def _topic_arn(cls, topic_arn: str | None) -> str | None:
        if topic_arn is None:
            return None
        if topic_arn.endswith(".fifo"):
            raise ValueError("is a FIFO topic: CloudWatch alarms publish to standard topics only")
        return _matching(topic_arn, SNS_TOPIC_ARN_PATTERN, "is not an SNS topic ARN")

    @field_validator("topic_kms_key")
    @classmethod
    def _topic_kms_key(cls, key: str | None, info: ValidationInfo) -> str | None:
        if key is None:
            return None
        if "topic_arn" in info.data and info.data["topic_arn"] is None:
            raise ValueError("is set, but topic_arn is not (the app's own topic has its own key)")
        return _matching(key, KMS_KEY_ARN_PATTERN, "is not a KMS key ARN (an alias will not do: IAM names the key)")

    @property
    def endpoints(self) -> tuple[tuple[str, str], ...]:
        """Every subscription as (protocol, endpoint): `emails` first, then `subscriptions`."""
        return (*(("email", e) for e in self.emails), *((s.protocol, s.endpoint) for s in self.subscriptions))

    @property
    def reach_nobody(self) -> bool:
        """No subscription and no topic of one's own: every alarm would reach nobody."""
        return self.topic_arn is None and not self.endpoints


#: The warning of a tenants file whose alarms would reach nobody (`AppConfig.notifications.reach_nobody`).
ALARMS_REACH_NOBODY_ID = "ordered-ingest:alarms-reach-nobody"
ALARMS_REACH_NOBODY = (
    "tenants.yaml: no notifications.emails, notifications.subscriptions or notifications.topic_arn: every alarm "
    "and failed-file notification would reach nobody; add an on-call address under notifications.emails, or "
    "see docs/operations.md#who-gets-the-alarms"
)


class RoutingConfig(_Strict):
    """Where the tenants' EventBridge rules live (docs/scaling.md, "Sharded routing")."""

    shards: int = Field(default=0, ge=0, le=routing_rules.MAX_SHARDS, description=(
        "`0`: every tenant's two rules on the account's default event bus (at most 149 tenants under the "
        "default quota of 300 rules per bus). N: on N shard event buses of the shared stack; the default bus "
        "then holds two forwarding rules per shard. Choose it once: changing it moves most tenants between buses."))
    rules_per_bus: int = Field(default=routing_rules.RULES_PER_BUS, ge=2, description=(
        "The account's \"Rules per event bus\" quota, for the shard buses: a shard bus that would need more "
        "(2 per tenant) is refused."))
    event_pattern_chars: int = Field(default=routing_rules.MAX_EVENT_PATTERN_CHARS, ge=256, description=(
        "The account's \"Event pattern size\" quota, in characters: a forwarding or catch-all pattern above it "
        "is refused."))


class AccountLimits(_Strict):
    """The account quotas synthesis checks the tenants against (it has no credentials: these
    are declared, AWS's defaults unless raised; declare the raised value after a quota increase;
    `python -m ops preflight` reads the real ones). Sources of the defaults: docs/scaling.md, "Account quotas"."""

    eventbridge_rules_per_bus: int | None = Field(default=None, ge=1, description=(
        "EventBridge rules per event bus. Default (null): AWS's 300, 100 in af-south-1 and eu-south-1."))
    lambda_concurrent_executions: int = Field(default=1000, ge=1, description=(
        "Lambda concurrent executions of the account in the Region (new accounts may have less)."))
    iam_roles: int = Field(default=1000, ge=1, description=(
        "IAM roles of the account (4 per tenant; global to the account: every target in it shares them)."))
    cloudformation_stacks: int = Field(default=2000, ge=1, description=(
        "CloudFormation stacks of the account in the Region."))
    state_machines: int = Field(default=100_000, ge=1, description=(
        "Step Functions state machines of the account in the Region."))
    s3_access_points: int = Field(default=10_000, ge=1, description=(
        "S3 access points of the account in the Region (1 per tenant with `uploaders`)."))


ACCOUNT_ID_PATTERN = r"^[0-9]{12}$"
REGION_PATTERN = r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]+$"
TARGET_NAME_PATTERN = r"^[a-zA-Z][a-zA-Z0-9-]*$"


class TargetConfig(_Strict):
    """A deployment target: one account and Region, a CDK Stage of its own (docs/scaling.md, "Deployment targets")."""

    account: str = Field(description="The 12-digit account id, quoted (`'111111111111'`).")
    region: str = Field(description="The Region code, e.g. `eu-west-1`.")
    account_limits: AccountLimits = Field(default=AccountLimits(), description=(
        "Overrides of the top-level `account_limits` for this target, key by key."))

    @field_validator("account")
    @classmethod
    def _account_id(cls, account: str) -> str:
        return _matching(account, ACCOUNT_ID_PATTERN, "is not a 12-digit AWS account id")

    @field_validator("region")
    @classmethod
    def _region(cls, region: str) -> str:
        return _matching(region, REGION_PATTERN, "is not an AWS Region code")


class AppConfig(_Strict):
    """The whole tenants file, validated: the tenants with `defaults:` applied."""

    notifications: NotificationsConfig = Field(default=NotificationsConfig(), description=(
        "Who is told when an alarm fires."))
    tenants: tuple[TenantConfig, ...] = Field(min_length=1, description=(
        "The tenants, one entry each; `defaults:` applies under each entry's own keys."))
    routing: RoutingConfig = Field(default=RoutingConfig(), description="Where the tenants' EventBridge rules live.")
    account_limits: AccountLimits = Field(default=AccountLimits(), description=(
        "The account quotas `cdk synth` checks the tenants against."))
    targets: dict[str, TargetConfig] = Field(default_factory=dict, description=(
        "Deployment targets by name (letters, digits and hyphens, starting with a letter), each one account and "
        "Region and a CDK Stage of its own; every tenant then names its `target`. Two targets in the same "
        "account and Region, or a target without tenants, are refused. Default (none): one deployment to the "
        "account and Region of `cdk deploy`."))
    encryption: EncryptionConfig | None = Field(default=None, description=(
        "The shared resources' customer-managed key: the landing and work buckets (SSE-KMS, bucket keys on), "
        "the ledger table, the unmatched-uploads log group and the shared stack's dead-letter queues; `create` "
        "makes it in the shared stack (alias `alias/ordered-ingest`). Default (null): S3-managed keys for the "
        "buckets, the AWS managed key for the ledger table, CloudWatch Logs' own encryption."))
    qualifier: str | None = Field(default=None, pattern=contract.QUALIFIER_PATTERN, min_length=1,
                                  max_length=contract.MAX_QUALIFIER_LENGTH, description=(
        "A name that starts every name the app gives what is fixed per account and Region (stacks, buckets, "
        "queues, functions, state machines, rules, event buses, alarms, SSM parameters, KMS aliases, log groups, "
        "access points, the dashboards, the metric namespace): `<qualifier>-OrderedIngest-Shared`, "
        "`<qualifier>-acme-controller`, `alias/<qualifier>-ordered-ingest`, `/<qualifier>-ordered-ingest/...`, so "
        "that a second copy of the app (a staging copy, the cloud test's) deploys beside the first in the same "
        "account and Region. Lowercase letters and digits, starting with a letter, at most "
        f"{contract.MAX_QUALIFIER_LENGTH} characters (the landing bucket's name is the longest); each tenant id "
        "then has the qualifier's length plus one fewer characters. `python -m ops --qualifier <qualifier>` works "
        "on that copy. (Tenant `acme` of the copy and a tenant `<qualifier>-acme` of an unqualified deployment "
        "would share their names: do not give both.) Default (null): no qualifier, the names as documented."))

    @property
    def tenants_without_credentials(self) -> tuple[str, ...]:
        """The ids of the tenants whose register function sends no credentials (`sink.auth` of type
        `none`, their own or inherited from `defaults`), in file order, for a summary to show."""
        return tuple(tenant.id for tenant in self.tenants if tenant.sink.auth.type == "none")

    def limits_of(self, target: str) -> AccountLimits:
        """The top-level limits with the target's own overrides."""
        own = self.targets[target].account_limits
        return self.account_limits.model_copy(update=own.model_dump(exclude_unset=True))


# Per field: what a valid value looks like. Used as the "fix" of a message.
FIXES: dict[str, str] = {
    "id": (
        "use lowercase letters, digits and single hyphens, starting with a letter "
        f"(at most {names.MAX_TENANT_ID_LENGTH} characters)"
    ),
    "prefix": "use a key prefix such as 'acme/' that ends with '/'",
    "format": "use 'csv' (with a header row) or 'jsonl'",
    "chunk_size": f"use a whole number from 1 to {MAX_CHUNK_SIZE}, within the register budget of sink.timeout_seconds",
    "url": "use the core system's https:// endpoint",
    "timeout_seconds": "use a whole number of seconds from 1 to 60",
    "outage_budget_seconds": "use a whole number of seconds from 1 to 86400 (default 3600: one hour)",
    "batch_size": f"use a whole number from 1 (one record per POST, the default) to {MAX_SINK_BATCH_SIZE} (a JSON "
    "array per POST: only for a core system that implements the batch contract)",
    "on_failure": "use 'halt' (a failed file stops the tenant until `ops resume` or `ops skip`) or 'continue'",
    "duplicate_files": "use 'process' (a byte-identical re-upload is processed again) or 'skip' (recorded as a duplicate)",
    "queue_age_seconds": "use a whole number of seconds, at least 60",
    "stall_after_seconds": "use a whole number of seconds, at least 60",
    "error_logs_threshold": "use a whole number, at least 1",
    "evaluation_periods": "use a whole number from 1 to 24",
    "sink_errors_threshold": "use a whole number, at least 1",
    "file_time_limit_seconds": "use a whole number of seconds, longer than sink.outage_budget_seconds "
    "(default: the outage budget plus 6 hours)",
    "emails": "list email addresses such as 'oncall@example.com'",
    "protocol": "use 'email', 'https', 'sqs' or 'lambda'",
    "endpoint": "give the address (email), the https:// URL (https), the standard queue's ARN "
    "'arn:aws:sqs:<region>:<account>:<name>' (sqs) or the function's ARN "
    "'arn:aws:lambda:<region>:<account>:function:<name>' (lambda)",
    "topic_arn": "use the ARN of a standard SNS topic, 'arn:aws:sns:<region>:<account>:<name>', or leave it out "
    "(the app's own alarm topic)",
    "topic_kms_key": "use the ARN of the key that encrypts topic_arn, 'arn:aws:kms:<region>:<account>:key/<id>', "
    "or leave it out (an unencrypted topic)",
    "sink": "set sink.url and sink.auth in the tenant or in defaults ('auth: {type: none}' only in the tenant)",
    "sink.auth": "add 'auth: {type: bearer, secret: <Secrets Manager secret name or ARN>}' to the tenant's sink "
    "or to defaults (or 'type: sigv4', docs/configuration.md); 'auth: {type: none}' only to the tenant's own sink, "
    "if its core system takes no credentials",
    "sink.auth.type": "use 'none', 'bearer' or 'sigv4'",
    "sink.auth.secret": "use the secret's name (e.g. 'core/acme/token') or its full ARN "
    "('arn:aws:secretsmanager:<region>:<account>:secret:<name>-AbCdEf')",
    "sink.auth.cache_seconds": f"use a whole number of seconds from 1 to {MAX_AUTH_CACHE_SECONDS} (default 300)",
    "sink.auth.service": "use 'execute-api' (API Gateway) or 'lambda' (a Lambda function URL)",
    "sink.auth.region": "use the core system's Region code, such as 'eu-west-1'",
    "sink.auth.invoke_arn": "use the API's method ARN 'arn:aws:execute-api:<region>:<account>:<api id>/<stage>/"
    "<METHOD>/<path>' (service execute-api) or the function's ARN 'arn:aws:lambda:<region>:<account>:function:"
    "<name>' (service lambda), without wildcards",
    "by": "use 'arrival' (the default) or 'key_sequence' (order by a sequence number in the key names)",
    "sequence_pattern": (
        "with ordering.by 'key_sequence', give a regular expression whose group 'seq' matches the "
        r"zero-padded counter in the key, e.g. '(?P<seq>\d+)\.csv$'; otherwise remove it"
    ),
    "first_sequence": "use the sequence number of the tenant's first file (a whole number, 0 or more; default 1)",
    "gap_alarm_after_seconds": "use a whole number of seconds, at least 60 (default 900)",
    "chunks_per_page": "leave it out (the default is the most a page's history allows), "
    "or use a smaller whole number",
    "shard": f"use a shard number from 0 to routing.shards - 1 (at most {routing_rules.MAX_SHARDS - 1}), "
    "or leave it out (sha256 of the id picks one)",
    "shards": f"use 0 (every rule on the default bus) or a number of shard event buses up to {routing_rules.MAX_SHARDS}",
    "rules_per_bus": "use the account's 'Rules per event bus' quota (default 300)",
    "event_pattern_chars": "use the account's 'Event pattern size' quota in characters (default 2048)",
    "target": "use the name of a target declared under 'targets:'",
    "qualifier": "use a short name of lowercase letters and digits that starts with a letter, e.g. 'staging' or "
    f"'ct1a2b3c' (at most {contract.MAX_QUALIFIER_LENGTH} characters), or leave it out (no qualifier)",
    "account": "quote the 12-digit account id, e.g. account: '111111111111'",
    "region": "use a Region code such as 'eu-west-1'",
    "eventbridge_rules_per_bus": "use the account's quota (Service Quotas: EventBridge, rules per event bus), "
    "or leave it out (default 300; 100 in af-south-1 and eu-south-1)",
    "lambda_concurrent_executions": "use the account's quota (Lambda, concurrent executions), or leave it out "
    "(default 1000)",
    "iam_roles": "use the account's quota (IAM, roles per account), or leave it out (default 1000)",
    "cloudformation_stacks": "use the account's quota (CloudFormation, stack count), or leave it out (default 2000)",
    "state_machines": "use the account's quota (Step Functions, state machines), or leave it out (default 100000)",
    "tracing": "use true (X-Ray traces of the state machines and functions) or false (the default)",
    "pages_per_section": "leave it out (the default is the most a section's history allows), "
    f"or use a whole number from 1 to {budgets.max_pages_per_section()}",
    # completion callback (full paths: `timeout_seconds` alone is the sink's)
    "completion.wait": "use true (each file waits for the core system's confirmation) or false (the default)",
    "completion.timeout_seconds": f"use a whole number of seconds from 1 to {MAX_COMPLETION_TIMEOUT_SECONDS} "
    "(default 3600), shorter than the file's file_time_limit_seconds",
    "completion.heartbeat_seconds": "use a whole number of seconds shorter than completion.timeout_seconds, "
    "or leave it out (no heartbeat needed)",
    "kms_key": "use 'create' (the app makes a key) or the ARN of a symmetric key in the same account and Region, "
    "e.g. 'arn:aws:kms:eu-west-1:111111111111:key/1234abcd-12ab-34cd-56ef-1234567890ab'",
    "encryption": "write 'encryption: {kms_key: create}' or 'encryption: {kms_key: <key ARN>}', or leave it out "
    "(AWS-managed encryption)",
    "completion.callers": "list the IAM role ARNs of the core system, e.g. "
    "'arn:aws:iam::111111111111:role/core-system'",
    "network": "give network: {vpc_id: vpc-..., subnet_ids: [subnet-...], security_group_ids: [sg-...]}, "
    "or leave it out (no VPC)",
    "vpc_id": "use the id of the VPC of the subnets, e.g. 'vpc-0123456789abcdef0'",
    "subnet_ids": "list at least one subnet id of that VPC, e.g. ['subnet-0123456789abcdef0'] (two, in "
    "different Availability Zones, for availability)",
    "security_group_ids": "list at least one security group id that lets the function reach the core system, "
    "e.g. ['sg-0123456789abcdef0']",
    "uploaders": "list the IAM role or user ARNs of the tenant's uploading system, e.g. "
    "['arn:aws:iam::111111111111:role/acme-uploader'], or an account root ARN "
    "'arn:aws:iam::222222222222:root' for another account",
}

# Plain-words replacements of pydantic messages that would otherwise show a regex.
PROBLEMS: dict[str, str] = {
    "string_pattern_mismatch": "has characters other than lowercase letters, digits and single hyphens, "
    "or does not start with a letter",
}

TENANT_KEYS = tuple(TenantConfig.model_fields)
#: `uploaders` are per tenant: a role or user is the uploader of one tenant (`_check_uploaders`).
DEFAULTS_KEYS = tuple(k for k in TENANT_KEYS if k not in ("id", "shard", "uploaders"))
TOP_LEVEL_KEYS = ("defaults", "notifications", "tenants", "account_limits", "targets", "routing", "encryption",
                  "qualifier")
#: The options in which `{id}` stands for the tenant's id (`_with_id`): the texts that name
#: something of the tenant's own. Not the choices (`format`, ...), nor ids AWS makes up (`vpc_id`,
#: `kms_key`); `ordering.sequence_pattern`'s braces are its regular expression's.
PATTERN_FIELDS = ("prefix", "sink.url", "sink.auth.secret", "sink.auth.invoke_arn")
ID_PLACEHOLDER = "{id}"
_PLACEHOLDER = re.compile(r"\{[^{}]*\}")
_LITERAL_BRACES = ("ordering.sequence_pattern",)
#: The `defaults:` block (`_merge`), as the schema and the reference describe it.
DEFAULTS_DESCRIPTION = (
    "Tenant options applied to every tenant; a tenant's own value wins. A block (`sink`, `alarms`, `ordering`, "
    "`completion`, `network`, `encryption`) merges key by key, `sink.auth` is replaced as a whole and is "
    "`{type: none}` here only as `{type: none, inherited: true}`: the tenants that leave their `auth` out then "
    "run without credentials on purpose, never by accident; "
    "`network: null` or `encryption: null` in a tenant turns that block of `defaults` off. Every tenant option "
    "but " + ", ".join(f"`{key}`" for key in TENANT_KEYS if key not in DEFAULTS_KEYS) + ". "
    "**Patterns:** in " + ", ".join(f"`{field}`" for field in PATTERN_FIELDS[:-1]) + f" and `{PATTERN_FIELDS[-1]}`, "
    "`{id}` stands for the "
    "tenant's id (quote the value: YAML reads a bare `{` as a mapping), e.g. `prefix: '{id}/'`, "
    "`secret: 'ordered-ingest/{id}/core-token'`; a `prefix` here must have it (a fixed one would be every "
    "tenant's). `{id}` works in a tenant's own value too, where a YAML anchor shares one value between tenants. "
    "Each value is checked as the tenant gets it; any other `{...}`, and braces in any other option but "
    "`ordering.sequence_pattern` (a regular expression), are refused. 50 tenants written this way, 30 of them "
    "without credentials: [examples/many-tenants.yaml](../examples/many-tenants.yaml)."
)
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

    def add(self, where: str, field: str, value: Any, problem: str, fix: str, *, source: str = "") -> None:
        """`source`: where a value made by a pattern came from, shown beside it."""
        shown = "(missing)" if value is _MISSING else _shown(value)
        if source:
            shown += f" ({source})"
        line = f"{where}: field '{field}' = {shown}: {problem}; {fix}"
        if line not in self.lines:  # a bad default is reported once, not once per tenant
            self.lines.append(line)


def _shown(value: Any, width: int = 120) -> str:
    """A value as a problem shows it: its repr, cut in the middle past ``width`` characters."""
    text = repr(value)
    if len(text) <= width:
        return text
    size = f"{len(value)} entries" if isinstance(value, list) else f"{len(str(value))} characters"
    return f"{text[:width // 2]}...{text[-20:]} ({size})"


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
    problems = _Problems([])
    if not isinstance(raw, dict):
        problems.add("file", "(top level)", raw, "must be a mapping with 'defaults' and 'tenants'", "start the file with 'tenants:'")
        raise ConfigError(source, problems.lines)
    _check_unknown(raw, TOP_LEVEL_KEYS, "file", problems)

    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict):
        problems.add("defaults", "defaults", defaults, "must be a mapping", "write 'defaults:' followed by indented keys")
        defaults = {}
    if "uploaders" in defaults:
        problems.add("defaults", "uploaders", defaults["uploaders"],
                     "is per tenant: each tenant lists the principals that upload its files",
                     "move it into the tenant whose files it uploads")
    _check_unknown({k: v for k, v in defaults.items() if k != "uploaders"}, DEFAULTS_KEYS, "defaults", problems)
    defaults = {k: v for k, v in defaults.items() if k in DEFAULTS_KEYS}
    _check_default_auth(defaults, raw.get("tenants"), problems)
    _check_placeholders(defaults, "defaults", problems)
    if isinstance(defaults.get("prefix"), str) and ID_PLACEHOLDER not in defaults["prefix"]:
        problems.add("defaults", "prefix", defaults["prefix"],
                     "has no '{id}': every tenant that leaves its prefix out would get this same prefix",
                     "write a pattern with '{id}', e.g. '{id}/' or 'incoming/{id}/', or give each tenant its own "
                     "prefix")

    notifications = _validate(NotificationsConfig, raw.get("notifications") or {}, "notifications", problems)
    routing = _validate(RoutingConfig, raw.get("routing") or {}, "routing", problems)
    account_limits = _validate(AccountLimits, raw.get("account_limits") or {}, "account_limits", problems)
    targets = _validate_targets(raw.get("targets"), problems)
    encryption = (_validate(EncryptionConfig, raw["encryption"], "encryption", problems)
                  if raw.get("encryption") is not None else None)
    qualifier = _check_qualifier(raw.get("qualifier"), problems)

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
        _check_placeholders({k: v for k, v in entry.items() if k in TENANT_KEYS}, where, problems)
        merged = _merge(defaults, entry)
        tenant_id = entry.get("id")
        tenant = _validate(TenantConfig, _with_id(merged, tenant_id) if isinstance(tenant_id, str) else merged,
                           where, problems, own=entry, written=merged)
        if tenant is not None and not _brace_problems(merged):  # reported: its checks would repeat them
            tenants.append(tenant)

    # Cross-tenant checks run on every entry with a usable id and prefix, valid or not, so
    # that one run reports everything.
    prefixes = [_prefix_of(entry, defaults) for entry in tenants_raw]
    declared = [(entry["id"], prefix) for entry, (prefix, _) in zip(tenants_raw, prefixes) if prefix is not None]
    sources = [source for prefix, source in prefixes if prefix is not None]
    _check_unique_ids(declared, problems)
    _check_prefix_overlaps(declared, problems, sources)
    _check_prefix_characters(declared, problems, sources)
    _check_uploaders(tenants, targets or {}, problems)
    _check_qualified_ids(tenants, qualifier, problems)
    for tenant in tenants:
        _check_batch_size(tenant, problems)
        _check_register_budget(tenant, problems)
        _check_file_time_limit(tenant, problems)
        _check_page_budget(tenant, problems)
        _check_completion(tenant, problems)

    _check_tenant_targets(tenants, targets, problems, every_tenant_valid=len(tenants) == len(tenants_raw))
    if notifications is not None:
        _check_notifications(notifications, targets or {}, problems)
    if routing is not None and not problems.lines:
        _check_routing(tenants, routing, problems)

    if problems.lines:
        raise ConfigError(source, problems.lines)
    assert notifications is not None and account_limits is not None and targets is not None
    assert routing is not None
    config = AppConfig(notifications=notifications, tenants=tuple(tenants), account_limits=account_limits,
                       targets=targets, routing=routing, encryption=encryption, qualifier=qualifier)
    # Capacity last, on a file otherwise valid: the counts need every tenant and its target.
    over = capacity.problems(config) if check_capacity else []
    if over:
        raise ConfigError(source, over)
    return config


def _validate(model: type[BaseModel], data: Any, where: str, problems: _Problems, own: dict | None = None,
              written: dict | None = None):
    """Validate ``data``; a bad value that a tenant inherits (not in ``own``) is blamed on defaults.
    ``written`` is ``data`` before `{id}` was replaced: a bad value that a pattern made is the
    tenant's, shown with its pattern; one whose braces `_check_placeholders` refused is not reported again."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        for error in map(_untagged, exc.errors()):
            inherited = (own is not None and error["type"] != "missing" and _lookup(own, error["loc"]) is _MISSING
                         and _lookup(data, error["loc"]) is not _MISSING)
            pattern = _MISSING if written is None else _lookup(written, error["loc"])
            option = ".".join(str(part) for part in error["loc"] if not isinstance(part, int))
            texts = pattern if isinstance(pattern, list) else [pattern]
            if any(_placeholder_problem(option, text) for text in texts):
                continue  # reported by `_check_placeholders`
            if isinstance(pattern, str) and pattern != _lookup(data, error["loc"]):
                source = f"from the {'defaults ' if inherited else ''}pattern {_shown(pattern)}"
                _report(error, model, data, where, problems, source=source)
            else:
                _report(error, model, data, "defaults" if inherited else where, problems)
        return None


def _untagged(error: Any) -> dict:
    """A pydantic error with the tag of a discriminated union (`sink.auth`'s `type`) out of its
    location, so that it reads `sink.auth.secret` and looks up the YAML as written; the tagged
    location is kept for the keys a union member accepts."""
    loc, tagged = list(error["loc"]), tuple(error["loc"])
    for index in range(len(loc) - 1, 0, -1):
        if loc[index - 1] == "auth" and loc[index] in AUTH_TYPES:
            del loc[index]
    return {**error, "loc": tuple(loc), "tagged_loc": tagged}


def _report(error: dict, model: type[BaseModel], data: Any, where: str, problems: _Problems, source: str = "") -> None:
    loc = [str(part) for part in error["loc"]]
    field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]).lstrip(".")
    leaf = loc[-1] if loc else "(entry)"
    value = _lookup(data, error["loc"])
    kind = error["type"]
    if kind == "extra_forbidden":
        tagged = error.get("tagged_loc", error["loc"])
        problems.add(where, field, value, "unknown key", _unknown_key_fix(leaf, _valid_keys_at(model, tagged[:-1])))
        return
    if kind == "missing":
        problems.add(where, field, _MISSING, "is required", FIXES.get(field) or FIXES.get(leaf, f"add '{leaf}'"))
        return
    if kind == "union_tag_not_found":
        problems.add(where, f"{field}.type", _MISSING, "is required", FIXES[f"{field}.type"])
        return
    if kind == "union_tag_invalid":
        problems.add(where, f"{field}.type", _lookup(data, (*error["loc"], "type")),
                     f"is not one of {', '.join(repr(t) for t in AUTH_TYPES)}", FIXES[f"{field}.type"])
        return
    fix = FIXES.get(field) or FIXES.get(leaf, "see the option in docs/configuration.md")
    problems.add(where, field, value, _plain_words(error), fix, source=source)


#: pydantic's error types in the project's own words (the fix says what a valid value is).
_BOUNDS = {"greater_than_equal": "is less than {ge}", "less_than_equal": "is more than {le}",
           "greater_than": "must be more than {gt}", "less_than": "must be less than {lt}",
           "string_too_short": "is too short (at least {min_length} characters)",
           "string_too_long": "is too long (at most {max_length} characters)",
           "too_short": "has too few entries (at least {min_length})",
           "too_long": "has too many entries (at most {max_length})"}
_TYPES = {"int_type": "is not a whole number", "int_parsing": "is not a whole number",
          "int_from_float": "is not a whole number", "float_type": "is not a number",
          "string_type": "is not text (quote it)", "bool_type": "is not true or false",
          "bool_parsing": "is not true or false", "dict_type": "is not a mapping",
          "model_type": "is not a mapping", "model_attributes_type": "is not a mapping",
          "list_type": "is not a list", "none_required": "must be left out"}


def _plain_words(error: dict) -> str:
    """One problem in the tenant/field/value/fix form's words: never pydantic's own wording
    ("Input should be ..."). Our validators' messages (value errors) are kept as they are."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind in PROBLEMS:
        return PROBLEMS[kind]
    if kind in _BOUNDS:
        return _BOUNDS[kind].format(**ctx)
    if kind in _TYPES:
        return _TYPES[kind]
    if kind == "literal_error":
        return f"is not one of {ctx.get('expected', 'the allowed values')}"
    if kind in ("value_error", "assertion_error"):
        return str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return "is not a valid value here"


def _valid_keys_at(model: type[BaseModel], loc: tuple) -> tuple[str, ...]:
    """The keys the (nested) model at ``loc`` accepts."""
    parts = list(loc)
    while parts:
        annotation = model.model_fields[parts.pop(0)].annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            members = [m for m in typing.get_args(annotation) if isinstance(m, type) and issubclass(m, BaseModel)]
            if len(members) == 1:  # `NetworkConfig | None`: the model of an optional block
                annotation = members[0]
            else:  # A discriminated union (`sink.auth`): the next part is the tag, the member's `type`.
                tag = parts.pop(0)
                annotation = next(m for m in members if typing.get_args(m.model_fields["type"].annotation) == (tag,))
        model = annotation
    return tuple(model.model_fields)


def _unknown_key_fix(key: str, valid: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    hint = f"did you mean '{close[0]}'?" if close else f"valid keys here: {', '.join(valid)}"
    return f"remove it or fix its spelling ({hint})"


def _check_unknown(data: dict, valid: tuple[str, ...], where: str, problems: _Problems) -> None:
    for key in data:
        if key not in valid:
            problems.add(where, str(key), data[key], "unknown key", _unknown_key_fix(str(key), valid))


def _check_notifications(notifications: NotificationsConfig, targets: dict[str, TargetConfig],
                         problems: _Problems) -> None:
    """A subscription once; an existing topic instead of subscriptions, in the Region of every target."""
    seen: set[tuple[str, str]] = set()
    listed = [*((f"emails[{i}]", "email", e) for i, e in enumerate(notifications.emails)),
              *((f"subscriptions[{i}].endpoint", s.protocol, s.endpoint) for i, s in enumerate(notifications.subscriptions))]
    for field, protocol, endpoint in listed:
        if (protocol, endpoint) in seen:
            problems.add("notifications", field, endpoint, f"subscribes this {protocol} endpoint a second time",
                         "list each endpoint once (emails is the short form of subscriptions with protocol email)")
        seen.add((protocol, endpoint))
    topic = notifications.topic_arn
    if topic is None:
        return
    if notifications.endpoints:
        problems.add(
            "notifications", "topic_arn", topic,
            "replaces the app's alarm topic, so emails and subscriptions would subscribe to nothing",
            "subscribe those endpoints to that topic where it is managed and remove emails and subscriptions, or "
            "remove topic_arn to subscribe them to the app's own topic",
        )
    region = re.match(SNS_TOPIC_ARN_PATTERN, topic).group("region")  # type: ignore[union-attr]
    for name, target in targets.items():
        if target.region != region:
            problems.add(
                "notifications", "topic_arn", topic,
                f"is in Region {region}, but target '{name}' deploys to {target.region}: CloudWatch alarms publish "
                "only to a topic of their own Region",
                "use a topic in the targets' Region, or leave topic_arn out (each target then has its own topic)",
            )


#: How many tenants a problem names before it says "and N more".
NAMED_TENANTS = 5


def _check_default_auth(defaults: dict, tenants_raw: Any, problems: _Problems) -> None:
    """`sink.auth: {type: none}` is inherited only as `{type: none, inherited: true}`: without the
    key, a tenant that leaves its `auth` out would run without credentials by accident. Reported
    once, on defaults, naming the tenants that would have inherited it; they are still validated
    with it, so that one run lists their other problems too. A tenant's own auth is nobody's to
    inherit: `inherited` there is refused."""
    for index, entry in enumerate(tenants_raw if isinstance(tenants_raw, list) else []):
        own = _lookup(entry, ("sink", "auth"))
        if isinstance(own, dict) and own.get("type") == "none" and "inherited" in own:
            problems.add(_tenant_label(entry, index), "sink.auth.inherited", own["inherited"],
                         "is for defaults only: it lets the tenants that leave their auth out inherit "
                         "{type: none}, and this auth is the tenant's own",
                         "remove it ('auth: {type: none}' in the tenant's sink says all)")
    sink = defaults.get("sink")
    auth = sink.get("auth") if isinstance(sink, dict) else None
    if not (isinstance(auth, dict) and auth.get("type") == "none") or auth.get("inherited") is True:
        return
    inheriting = [
        entry["id"] for entry in (tenants_raw if isinstance(tenants_raw, list) else [])
        if isinstance(entry, dict) and isinstance(entry.get("id"), str)
        and not (isinstance(entry.get("sink"), dict) and "auth" in entry["sink"])
    ]
    named = ", ".join(f"'{t}'" for t in inheriting[:NAMED_TENANTS])
    more = f" and {len(inheriting) - NAMED_TENANTS} more" if len(inheriting) > NAMED_TENANTS else ""
    who = (f" (tenant{'s' if len(inheriting) > 1 else ''} {named}{more} would inherit it)" if inheriting else "")
    problems.add(
        "defaults", "sink.auth", auth,
        "is never inherited: a tenant that leaves its auth out would run without credentials by accident" + who,
        "write 'auth: {type: none}' in the sink of each tenant whose core system takes no credentials, and remove "
        "it from defaults (a bearer or sigv4 auth may stay there); or, to let every tenant that leaves its auth "
        "out run without credentials on purpose, write 'auth: {type: none, inherited: true}' in defaults",
    )


def _check_placeholders(options: dict, where: str, problems: _Problems) -> None:
    """Braces in a tenant's options (of `defaults` or of one tenant, as written): `{id}` in a
    pattern option (`PATTERN_FIELDS`), nothing else anywhere."""
    for field, text, (problem, fix) in _brace_problems(options):
        problems.add(where, field, text, problem, fix)


def _brace_problems(options: dict) -> list[tuple[str, str, tuple[str, str]]]:
    """(field, text, (problem, fix)) of each string of ``options`` whose braces are refused."""
    found = []
    for loc, text in _strings(options):
        problem = _placeholder_problem(".".join(str(part) for part in loc if not isinstance(part, int)), text)
        if problem is not None:
            found.append(("".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip("."),
                          text, problem))
    return found


def _placeholder_problem(option: str, text: Any) -> tuple[str, str] | None:
    """(problem, fix) of the braces in ``text``, the value of ``option`` (dotted, no list
    indices), or None when they are a pattern's `{id}` or there are none."""
    found = _PLACEHOLDER.findall(text) if isinstance(text, str) and option not in _LITERAL_BRACES else []
    if found and option not in PATTERN_FIELDS:
        return (f"is not a pattern option: '{ID_PLACEHOLDER}' stands for the tenant's id only in "
                + ", ".join(PATTERN_FIELDS[:-1]) + f" and {PATTERN_FIELDS[-1]}", "write the value itself")
    unknown = [placeholder for placeholder in found if placeholder != ID_PLACEHOLDER]
    if unknown:
        return (f"has the placeholder '{unknown[0]}', but the only one is '{ID_PLACEHOLDER}', the tenant's id",
                f"write '{ID_PLACEHOLDER}' where the tenant's id goes, or the text itself")
    return None


def _strings(data: Any, loc: tuple = ()) -> Iterator[tuple[tuple, str]]:
    """(location, text) of every string in a YAML value."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _strings(value, (*loc, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _strings(value, (*loc, index))
    elif isinstance(data, str):
        yield loc, data


def _with_id(data: Any, tenant_id: str, option: str = "") -> Any:
    """A tenant's merged options with `{id}` replaced by its id in the pattern options (a copy:
    YAML anchors share their values between tenants)."""
    if isinstance(data, dict):
        return {key: _with_id(value, tenant_id, f"{option}.{key}".lstrip(".")) for key, value in data.items()}
    if isinstance(data, list):
        return [_with_id(value, tenant_id, option) for value in data]
    if isinstance(data, str) and option in PATTERN_FIELDS:
        return data.replace(ID_PLACEHOLDER, tenant_id)
    return data


def _prefix_of(entry: Any, defaults: dict) -> tuple[str | None, str]:
    """The prefix a tenant entry gets for the cross-tenant checks, and its source (a pattern, or
    ""); no prefix without a usable id and prefix, or for one reported already (braces; a fixed
    prefix of defaults, reported once rather than as every tenant's overlap)."""
    if not (isinstance(entry, dict) and isinstance(entry.get("id"), str)):
        return None, ""
    own = "prefix" in entry
    written = entry["prefix"] if own else defaults.get("prefix")
    if (not isinstance(written, str) or _placeholder_problem("prefix", written) is not None
            or (not own and ID_PLACEHOLDER not in written)):
        return None, ""
    if ID_PLACEHOLDER not in written:
        return written, ""
    source = f"from the {'' if own else 'defaults '}pattern {_shown(written)}"
    return written.replace(ID_PLACEHOLDER, entry["id"]), source


def _check_unique_ids(declared: list[tuple[str, str]], problems: _Problems) -> None:
    seen: set[str] = set()
    for tenant_id, _ in declared:
        if tenant_id in seen:
            problems.add(
                f"tenant '{tenant_id}'", "id", tenant_id, "is declared more than once",
                "give every tenant a unique id (it names the tenant's queue, workflow and stack)",
            )
        seen.add(tenant_id)


def _check_prefix_overlaps(declared: list[tuple[str, str]], problems: _Problems, sources: list[str]) -> None:
    """Every pair of tenants where one prefix starts with the other, reported on the later one,
    in declaration order. In sorted order the prefixes that start with a prefix follow it
    directly, so this is O(n log n) plus the overlaps, not O(n^2): 10,000 tenants took 10 s."""
    ordered = sorted(range(len(declared)), key=lambda index: declared[index][1])
    pairs: list[tuple[int, int]] = []
    for position, index in enumerate(ordered):
        prefix = declared[index][1]
        for other in ordered[position + 1:]:
            if not declared[other][1].startswith(prefix):
                break
            pairs.append((min(index, other), max(index, other)))
    for i, j in sorted(pairs):
        (a_id, a_prefix), (b_id, b_prefix) = declared[i], declared[j]
        if a_id != b_id:
            problems.add(
                f"tenant '{b_id}'", "prefix", b_prefix,
                f"overlaps tenant '{a_id}' prefix '{a_prefix}'" + (f" ({sources[i]})" if sources[i] else ""),
                "give each tenant a prefix that is not inside another's", source=sources[j],
            )


def _check_prefix_characters(declared: list[tuple[str, str]], problems: _Problems, sources: list[str]) -> None:
    """A prefix only of characters S3 never URL-encodes in event keys (`contract.s3_key_from_event`):
    the tenant's rule filters on the encoded key, so 'Acme Corp/' would never match 'Acme+Corp/f.csv'."""
    for (tenant_id, prefix), source in zip(declared, sources):
        bad = list(dict.fromkeys(c for c in prefix if c not in contract.S3_EVENT_KEY_SAFE_CHARACTERS))
        if not bad:
            continue
        shown = " and ".join(_character(c) for c in bad)
        suggestion = "".join(c if c in contract.S3_EVENT_KEY_SAFE_CHARACTERS else "-" for c in prefix)
        problems.add(
            f"tenant '{tenant_id}'", "prefix", prefix,
            f"has the character{'s' if len(bad) > 1 else ''} {shown}, which S3 URL-encodes in its event "
            "notifications, so the tenant's rule would never match its files",
            f"use only letters, digits, '/', '.', '_' and '-', e.g. '{suggestion}'", source=source,
        )


def _character(c: str) -> str:
    names = {" ": "' ' (space)", "\t": "'\\t' (tab)"}
    return names.get(c, f"'{c}'" if c.isprintable() else f"U+{ord(c):04X}")


def _check_uploaders(tenants: list[TenantConfig], targets: dict[str, TargetConfig], problems: _Problems) -> None:
    """A principal uploads for one tenant only: listed by two tenants, one tenant's system could
    put under the other's prefix. An account root ARN stands for another account: the root of
    the tenant's own target account would name every principal of it, which no Deny can
    confine (`uploaders.py`)."""
    owner: dict[str, str] = {}
    for tenant in tenants:
        target = targets.get(tenant.target or "")
        for arn in tenant.uploaders:
            if target is not None and arn.endswith(f"::{target.account}:root"):
                problems.add(
                    f"tenant '{tenant.id}'", "uploaders", arn,
                    f"is the root of account {target.account}, where target '{tenant.target}' deploys the bucket: "
                    "it would let every principal of that account whose own policy allows it put under the prefix, "
                    "and no Deny can confine them",
                    "list the uploading system's own role or user ARN instead",
                )
            if arn in owner and not arn.endswith(":root"):  # another account may upload for several tenants
                problems.add(
                    f"tenant '{tenant.id}'", "uploaders", arn,
                    f"is also an uploader of tenant '{owner[arn]}': a role or user uploads for one tenant, so "
                    "that one tenant's system can never put under another tenant's prefix",
                    "give each tenant's uploading system a principal (role or user) of its own",
                )
            else:
                owner[arn] = tenant.id


def _check_batch_size(tenant: TenantConfig, problems: _Problems) -> None:
    """A batch is cut inside one chunk: a batch_size above chunk_size would never fill."""
    if tenant.sink.batch_size > tenant.chunk_size:
        problems.add(
            f"tenant '{tenant.id}'", "sink.batch_size", tenant.sink.batch_size,
            f"is larger than chunk_size {tenant.chunk_size}: a batch never spans two chunks",
            f"use a sink.batch_size of at most {tenant.chunk_size}, or a chunk_size of at least "
            f"{tenant.sink.batch_size}",
        )


def _check_register_budget(tenant: TenantConfig, problems: _Problems) -> None:
    """A chunk's invocations at the slowest answer (`ceil(chunk_size / sink.batch_size)` requests
    x `sink.timeout_seconds`), with a whole outage, must fit one page execution's history (an
    outage budget that alone does not fit is `_check_page_budget`'s)."""
    size, timeout, batch = tenant.chunk_size, tenant.sink.timeout_seconds, tenant.sink.batch_size
    outage = tenant.sink.outage_budget_seconds
    most = budgets.max_register_invocations_per_chunk(outage)
    invocations = budgets.register_invocations_per_chunk(size, timeout, batch)
    if 1 <= most < invocations:
        requests = budgets.requests_per_chunk(size, batch)
        per = "" if batch == 1 else f"in {requests} batches of sink.batch_size {batch} "
        problems.add(
            f"tenant '{tenant.id}'", "chunk_size", size,
            f"{per}x sink.timeout_seconds {timeout} = {requests * timeout} s for a chunk at the slowest answer, "
            f"{invocations} invocations of the register function's {budgets.REGISTER_MAX_TIMEOUT_SECONDS} s "
            f"limit: with a whole outage of sink.outage_budget_seconds {outage}, a page execution's history "
            f"holds at most {most} for one chunk",
            f"use a chunk_size of at most {budgets.max_chunk_size(timeout, outage, batch)} at these settings, or a "
            "lower sink.timeout_seconds" + ("" if batch == 1 else ", or a larger sink.batch_size"),
        )


def _check_file_time_limit(tenant: TenantConfig, problems: _Problems) -> None:
    """A file must be allowed to wait out a whole core-system outage before it times out."""
    limit, budget = tenant.file_time_limit_seconds, tenant.sink.outage_budget_seconds
    if limit is not None and limit <= budget:
        problems.add(
            f"tenant '{tenant.id}'", "file_time_limit_seconds", limit,
            f"is not longer than sink.outage_budget_seconds {budget}: an outage would time the file out "
            "before its budget ends",
            f"use more than {budget} seconds, or leave it out (default: the outage budget plus 6 hours)",
        )


def _check_page_budget(tenant: TenantConfig, problems: _Problems) -> None:
    """A page execution must hold at least one chunk (and `chunks_per_page` at most what fits)
    within the history budget: a chunk may wait out one whole outage in its page."""
    size, timeout, outage = tenant.chunk_size, tenant.sink.timeout_seconds, tenant.sink.outage_budget_seconds
    most = budgets.max_chunks_per_page(size, timeout, outage, tenant.sink.batch_size)
    if budgets.max_register_invocations_per_chunk(outage) < 1:
        problems.add(
            f"tenant '{tenant.id}'", "outage_budget_seconds", outage,
            "is too long for one page execution's history: waiting out such an outage in one chunk "
            f"could take more than {budgets.HISTORY_EVENT_BUDGET} history events",
            "use a shorter sink.outage_budget_seconds (about 12 hours at most)",
        )
    elif most >= 1 and tenant.chunks_per_page is not None and tenant.chunks_per_page > most:
        problems.add(
            f"tenant '{tenant.id}'", "chunks_per_page", tenant.chunks_per_page,
            f"is more than the {most} chunks a page's history holds at these settings",
            f"use at most {most}, or leave it out",
        )


def _check_routing(tenants: list[TenantConfig], routing: RoutingConfig, problems: _Problems) -> None:
    """Shard pins within routing.shards; every routing pattern and shard bus within its quota."""
    pinned = [t for t in tenants if t.shard is not None]
    if not routing.shards and pinned:
        for tenant in pinned:
            problems.add(
                f"tenant '{tenant.id}'", "shard", tenant.shard, "is set, but routing.shards is 0 (no shard buses)",
                "remove it, or set routing.shards",
            )
        return
    for tenant in pinned:
        if tenant.shard >= routing.shards:
            problems.add(
                f"tenant '{tenant.id}'", "shard", tenant.shard,
                f"is not a shard of routing.shards {routing.shards}", FIXES["shard"],
            )
    if problems.lines:
        return
    # Each deployment target has its own shared stack, shard buses and catch-all.
    by_target: dict[str | None, list[TenantConfig]] = {}
    for tenant in tenants:
        by_target.setdefault(tenant.target, []).append(tenant)
    for target, own in by_target.items():
        for where, field, value, problem, fix in routing_rules.problems(
            own, routing.shards, rules_per_bus=routing.rules_per_bus, pattern_limit=routing.event_pattern_chars
        ):
            problems.add(where if target is None else f"target '{target}' {where}", field, value, problem, fix)


def _check_completion(tenant: TenantConfig, problems: _Problems) -> None:
    """A completion wait must fit in the file's time limit, a heartbeat inside the wait (Step
    Functions refuses HeartbeatSeconds not below TimeoutSeconds), and someone must be able to
    answer it."""
    completion, where = tenant.completion, f"tenant '{tenant.id}'"
    if not completion.wait:
        return
    if completion.timeout_seconds >= tenant.file_time_limit:
        problems.add(where, "completion.timeout_seconds", completion.timeout_seconds,
                     f"is not shorter than the file's time limit ({tenant.file_time_limit} s): the execution "
                     "would time out before the completion wait does",
                     "use a shorter completion.timeout_seconds, or a longer file_time_limit_seconds")
    if completion.heartbeat_seconds is not None and completion.heartbeat_seconds >= completion.timeout_seconds:
        problems.add(where, "completion.heartbeat_seconds", completion.heartbeat_seconds,
                     f"is not shorter than completion.timeout_seconds ({completion.timeout_seconds})",
                     FIXES["completion.heartbeat_seconds"])
    if not completion.callers:
        problems.add(where, "completion.callers", [], "is empty: nobody could confirm a file, so every file "
                     "would time out", FIXES["completion.callers"])
    _check_completion_policy(tenant, problems)


def _check_completion_policy(tenant: TenantConfig, problems: _Problems) -> None:
    """Each caller is a statement of the completion function's resource policy, which Lambda
    keeps within 20 KB (`deploy_limits`)."""
    callers = tenant.completion.callers
    budget = deploy_limits.LIMITS["lambda-resource-policy"].value - deploy_limits.POLICY_ENVELOPE_BYTES
    totals = list(itertools.accumulate(deploy_limits.permission_statement_bytes(arn) for arn in callers))
    if not totals or totals[-1] <= budget:
        return
    fitting = sum(total <= budget for total in totals)
    problems.add(f"tenant '{tenant.id}'", "completion.callers", callers,
                 f"makes the completion function's resource policy {totals[-1] + deploy_limits.POLICY_ENVELOPE_BYTES:,} "
                 f"bytes, over Lambda's {deploy_limits.LIMITS['lambda-resource-policy'].value:,} (one statement per "
                 f"principal: the first {fitting} fit)",
                 "list fewer principals: one role that the core system's callers assume, or the account root "
                 "'arn:aws:iam::<account>:root' of the core system's account, which then decides who may call")


def _validate_targets(raw: Any, problems: _Problems) -> dict[str, TargetConfig] | None:
    """`targets:` (name -> account, region, account_limits); None when one is invalid."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.add("targets", "targets", raw, "must be a mapping of target names",
                     "write 'targets:' followed by 'NAME: {account: ..., region: ...}' lines")
        return None
    targets: dict[str, TargetConfig] = {}
    valid = True
    for name, entry in raw.items():
        where = f"target '{name}'"
        if not isinstance(name, str) or not re.match(TARGET_NAME_PATTERN, name):
            problems.add(where, "(name)", name, "is not a usable target name (it names a CDK Stage)",
                         "use letters, digits and hyphens, starting with a letter, e.g. 'prod-eu'")
            valid = False
            continue
        if not isinstance(entry, dict):
            problems.add(where, "(entry)", entry, "must be a mapping",
                         f"write '{name}: {{account: \'111111111111\', region: eu-west-1}}'")
            valid = False
            continue
        target = _validate(TargetConfig, entry, where, problems)
        if target is None:
            valid = False
            continue
        for other_name, other in targets.items():
            if (other.account, other.region) == (target.account, target.region):
                problems.add(
                    where, "region", target.region,
                    f"is in the same account and Region as target '{other_name}' ({other.account}/{other.region}): "
                    "both would deploy the same stacks there",
                    "give each target its own account or Region, or assign its tenants to one target",
                )
        targets[name] = target
    return targets if valid else None


def _check_tenant_targets(tenants: list[TenantConfig], targets: dict[str, TargetConfig] | None,
                          problems: _Problems, *, every_tenant_valid: bool) -> None:
    """With `targets:`, every tenant names a declared one (in itself or in defaults); without,
    none does. Every target gets at least one tenant."""
    if targets is None:
        return
    declared = ", ".join(targets)
    before = len(problems.lines)
    for tenant in tenants:
        where = f"tenant '{tenant.id}'"
        if not targets and tenant.target is not None:
            problems.add(where, "target", tenant.target, "is set, but no targets are declared",
                         "declare it under 'targets:' (account and region), or remove it")
        elif targets and tenant.target is None:
            problems.add(where, "target", _MISSING, "is required when targets are declared",
                         f"set 'target:' in the tenant or in defaults (declared: {declared})")
        elif targets and tenant.target not in targets:
            close = difflib.get_close_matches(tenant.target or "", list(targets), n=1, cutoff=0.5)
            hint = f"did you mean '{close[0]}'? " if close else ""
            problems.add(where, "target", tenant.target, "is not a declared target",
                         f"{hint}use one of: {declared}")
    used = {tenant.target for tenant in tenants}
    if every_tenant_valid and len(problems.lines) == before:  # else some tenant's target is unknown
        for name in targets:
            if name not in used:
                problems.add(f"target '{name}'", "tenants", _MISSING, "has no tenant",
                             f"set 'target: {name}' on its tenants, or remove the target")


def _merge(defaults: dict, entry: dict) -> dict:
    """Tenant values over defaults; a block (a mapping in both) merges key by key, one level deep."""
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


def _check_qualifier(value: Any, problems: _Problems) -> str | None:
    """The top-level `qualifier`, or None (absent, or reported)."""
    if value is None:
        return None
    if not isinstance(value, str) or not re.match(contract.QUALIFIER_PATTERN, value):
        problems.add("file", "qualifier", value, "has characters other than lowercase letters and digits, or does "
                     "not start with a letter (it starts every resource name)", FIXES["qualifier"])
        return None
    broken = contract.qualifier_broken(value)
    if broken is not None:
        derived = broken.longest(qualifier=value)
        problems.add("file", "qualifier", value, f"is {len(value)} characters, so the derived {broken.kind} "
                     f"'{derived}' is {len(derived)} characters (limit {broken.limit})", FIXES["qualifier"])
        return None
    return value


def _check_qualified_ids(tenants: list[TenantConfig], qualifier: str | None, problems: _Problems) -> None:
    """Each tenant id fits every name it derives with the qualifier in front."""
    for tenant in tenants if qualifier else ():
        broken = names.tightest_broken(tenant.id, qualifier or "")
        if broken is not None:
            derived = broken.longest(tenant.id, qualifier=qualifier)
            problems.add(f"tenant '{tenant.id}'", "id", tenant.id,
                         f"is {len(tenant.id)} characters, so with qualifier '{qualifier}' the derived {broken.kind} "
                         f"'{derived}' is {len(derived)} characters (limit {broken.limit})",
                         f"use an id of at most {broken.max_id_length(qualifier or '')} characters, or a shorter "
                         "qualifier")


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
