"""The tenant's `sink`: the core system's endpoint, how the register function authenticates
to it, and the pace and patience of its requests."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator

from lambdas import contract
from pipeline_constructs import budgets
from pipeline_constructs.config.options import REGION_PATTERN, Model, matching, option

#: The largest `sink.batch_size` (records per POST, one JSON array): a batch never spans chunks.
MAX_SINK_BATCH_SIZE = 1000
#: `sink.outage_budget_seconds` by default: one hour.
DEFAULT_OUTAGE_BUDGET_SECONDS = 3600
#: The longest sink URL: it travels in the register function's environment, whose variables
#: together must stay within Lambda's 4 KB (`deploy_limits`).
MAX_SINK_URL_CHARS = 2048
#: A Secrets Manager secret name (letters, digits and /_+=.@-, e.g. a path `core/acme/token`).
SECRET_NAME_PATTERN = r"^[A-Za-z0-9/_+=.@-]{1,512}$"
#: A full Secrets Manager secret ARN: the name and the 6 characters Secrets Manager appends.
SECRET_ARN_PATTERN = (
    r"^arn:aws[a-z-]*:secretsmanager:[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]+:[0-9]{12}:"
    r"secret:[A-Za-z0-9/_+=.@-]+-[A-Za-z0-9]{6}$"
)
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
#: What the schema accepts of a secret as written: a name or a full ARN, `{id}` allowed (a pattern).
_WRITTEN_SECRET = (
    r"^(arn:aws[a-z-]*:secretsmanager:[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]+:[0-9]{12}:"
    r"secret:[A-Za-z0-9/_+=.@{}-]+-[A-Za-z0-9]{6}|[A-Za-z0-9/_+=.@{}-]{1,512})$"
)
#: What the schema accepts of a URL as written: https, or plain http to a loopback host; ASCII.
_WRITTEN_URL = r"^(https://[^/?#\s]|http://(localhost|127\.[0-9.]+|\[::1\])([:/?#]|$))[\x21-\x7e]*$"


class NoAuth(Model):
    """`sink.auth: {type: none}`: no credentials. In `defaults` only as `{type: none, inherited: true}`
    (`checks.default_auth`): a tenant that leaves `auth` out runs without credentials only because
    the file says so, never by accident."""

    type: Literal["none"] = option(
        description=(
            "`none`: the register function sends no credentials. In the tenant's own `sink`, or in `defaults` with "
            "`inherited: true`."
        )
    )
    # Not dumped: where a tenant's `none` was written changes nothing the register function gets.
    inherited: bool = option(
        False,
        exclude=True,
        notes={True: "every tenant that leaves its auth out has none"},
        description=(
            "`true`, in `defaults` only: every tenant that leaves its `auth` out inherits `{type: none}` and runs "
            "without credentials, on purpose (`AppConfig.tenants_without_credentials` lists them, own or inherited). "
            "Without it `{type: none}` is refused in `defaults`; in a tenant's own `sink` it is refused."
        ),
    )


class BearerAuth(Model):
    """`sink.auth: {type: bearer, secret: ...}`: `Authorization: Bearer <token>`, the token read
    from a Secrets Manager secret (its name, or its full ARN) and kept `cache_seconds`; a 401
    reads it again once (a rotation does not fail a chunk)."""

    type: Literal["bearer"] = option(description="`bearer`: `Authorization: Bearer <token>`.")
    secret: str = option(
        schema={"pattern": _WRITTEN_SECRET},
        fix=(
            "use the secret's name (e.g. 'core/acme/token') or its full ARN "
            "('arn:aws:secretsmanager:<region>:<account>:secret:<name>-AbCdEf')"
        ),
        description=(
            "The Secrets Manager secret that holds the token: its name (e.g. `core/acme/token`, in the stack's "
            "account and Region) or its full ARN (with the 6 characters Secrets Manager appends). Its `SecretString` "
            'is the token itself, or JSON `{"token": "..."}`. Only the register function may read it.'
        ),
    )
    cache_seconds: int = option(
        300,
        ge=1,
        le=MAX_AUTH_CACHE_SECONDS,
        description=(
            "Seconds a token read is used before the secret is read again. A 401 reads it again at once (once "
            "per request), so a rotation fails nothing."
        ),
    )

    @field_validator("secret")
    @classmethod
    def _name_or_arn(cls, secret: str) -> str:
        if secret.startswith("arn:"):
            return matching(
                secret, SECRET_ARN_PATTERN, "is an ARN, but not the full ARN of a Secrets Manager secret"
            )
        return matching(secret, SECRET_NAME_PATTERN, "is not a Secrets Manager secret name")


class SigV4Auth(Model):
    """`sink.auth: {type: sigv4, ...}`: each request signed (AWS Signature Version 4) with the
    register function's own credentials, for a core system behind an IAM-authorized API
    Gateway (`execute-api`) or Lambda function URL (`lambda`). `invoke_arn` is what the
    function is allowed to invoke (`execute-api:Invoke`, `lambda:InvokeFunctionUrl`), exactly."""

    type: Literal["sigv4"] = option(
        description=(
            "`sigv4`: each request signed with AWS Signature Version 4 by the register function's own role."
        )
    )
    service: contract.Sigv4Service = option(
        notes={"execute-api": "API Gateway", "lambda": "a Lambda function URL"},
        description=(
            "`execute-api`: an API Gateway API with IAM authorization; `lambda`: a Lambda function URL with "
            "`AWS_IAM` auth."
        ),
    )
    region: str = option(
        pattern=REGION_PATTERN,
        mismatch="is not an AWS Region code",
        fix="use the core system's Region code, such as 'eu-west-1'",
        description="The core system's Region code, e.g. `eu-west-1`.",
    )
    invoke_arn: str = option(
        validate_default=True,
        max_length=MAX_INVOKE_ARN_CHARS,
        schema={"pattern": r"^[^*?]*$"},
        fix=(
            "use the API's method ARN 'arn:aws:execute-api:<region>:<account>:<api id>/<stage>/<METHOD>/<path>' "
            "(service execute-api) or the function's ARN 'arn:aws:lambda:<region>:<account>:function:<name>' "
            "(service lambda), without wildcards"
        ),
        description=(
            "Exactly what the register function may invoke, in `region`, without wildcards: the API method's ARN "
            "(`arn:aws:execute-api:<region>:<account>:<api id>/<stage>/<METHOD>/<path>`) or the function's ARN "
            f"(`arn:aws:lambda:<region>:<account>:function:<name>`). At most {MAX_INVOKE_ARN_CHARS:,} characters."
        ),
    )

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


class SinkConfig(Model):
    """The tenant's record sink: the core system endpoint that receives its records, in order.
    Required, in the tenant or in `defaults` (merged key by key)."""

    url: str = option(
        max_length=MAX_SINK_URL_CHARS,
        schema={"pattern": _WRITTEN_URL},
        fix="use the core system's https:// endpoint",
        description=(
            "The core system's endpoint: one POST per record (or per batch, `batch_size`). `https://`; plain "
            f"`http://` only for `localhost` and loopback addresses. At most {MAX_SINK_URL_CHARS} characters."
        ),
    )
    auth: SinkAuth = option(
        fix=(
            "add 'auth: {type: bearer, secret: <Secrets Manager secret name or ARN>}' to the tenant's sink "
            "or to defaults (or 'type: sigv4', docs/configuration.md); 'auth: {type: none}' only to the tenant's own sink, "
            "if its core system takes no credentials"
        ),
        description=(
            "How the register function authenticates to the core system, chosen by `type`. Required, so that no "
            "tenant runs without credentials by accident: a `bearer` or `sigv4` auth may sit in `defaults` and is "
            "inherited (a tenant's own `auth` replaces it as a whole); `{type: none}` in the tenant's own `sink`, "
            "or in `defaults` only as `{type: none, inherited: true}`."
        ),
    )
    timeout_seconds: int = option(
        10,
        ge=1,
        le=60,
        description=(
            "Seconds one POST may take. The register function's timeout is the chunk's requests (`chunk_size`, "
            "or `ceil(chunk_size / batch_size)` in batch mode) x this + 30 s, between 1 and 15 minutes. A chunk "
            "whose invocations at the slowest answer, with a whole outage, would not fit one page execution's "
            "history is refused: at the default outage budget at most "
            f"{budgets.max_chunk_size(10, DEFAULT_OUTAGE_BUDGET_SECONDS)} records per chunk at 10 s, "
            f"{budgets.max_chunk_size(60, DEFAULT_OUTAGE_BUDGET_SECONDS)} at 60 s (and `chunk_size`'s own limit)."
        ),
    )
    outage_budget_seconds: int = option(
        DEFAULT_OUTAGE_BUDGET_SECONDS,
        ge=1,
        le=86400,
        description=(
            "Seconds the core system may stay unavailable (one outage) before the file fails, and with "
            "`on_failure: halt` halts the tenant. More than about 12 hours is refused: a chunk could not wait it "
            "out within one page execution's history."
        ),
    )
    batch_size: int = option(
        1,
        ge=1,
        le=MAX_SINK_BATCH_SIZE,
        hint=(
            ": 1 sends one record per POST, more a JSON array per POST, only for a core system that implements the "
            "batch contract"
        ),
        description=(
            "Records per POST, at most `chunk_size`. `1`: one record per POST (the original article's contract). More: "
            "each POST carries a JSON array of up to this many records with one idempotency key, for a core system that "
            'implements the batch contract (docs/core-system.md, "The contract"). Change it while the '
            "tenant is idle."
        ),
    )

    @field_validator("url")
    @classmethod
    def _https_or_loopback(cls, url: str) -> str:
        if not url.isascii():
            # Counted in bytes in the register function's environment; a URL carries other
            # characters percent-encoded (and an international host name as its xn-- form).
            raise ValueError(
                "has characters other than ASCII: percent-encode them (and give an international host "
                "name in its xn-- form)"
            )
        parts = urlsplit(url)
        if parts.scheme == "https" and parts.hostname:
            return url
        if parts.scheme == "http" and _is_loopback(parts.hostname):
            return url
        raise ValueError("must be an https:// URL (plain http:// only for localhost)")


def _is_loopback(host: str | None) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False
