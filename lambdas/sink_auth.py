"""The register function's credentials for the core system (`sink.auth`), one header set per request.

`none`: no header. `bearer`: `Authorization: Bearer <token>`, the SecretString of a Secrets
Manager secret (the token, or JSON `{"token": "..."}`), cached for `sink_auth_cache_seconds` so
warm invocations reuse it. A 401 reads it again, once per request, so a rotation does not fail
a chunk; a read that fails for a reason that passes is `CredentialUnavailable`, waited out like
an outage of the core system, and only `FATAL_SECRET_ERRORS` fail the file at once. `sigv4`:
each request signed (botocore's `SigV4Auth`) with the function's own credentials.

No credential ever leaves this module except in the header it returns: errors and logs name
the secret (its id) and the HTTP status, never a token.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from lambdas.contract import RegisterEnv, SinkAuthError
from lambdas.runtime import aws_client, error_code

#: Secrets Manager errors that reading again cannot fix (the file fails, naming the secret).
#: Any other error of the AWS SDK (throttling, a service fault, no connection) may pass:
#: `CredentialUnavailable`.
FATAL_SECRET_ERRORS = frozenset(
    {
        "ResourceNotFoundException",
        "AccessDeniedException",
        "AccessDenied",
        "DecryptionFailure",
        "InvalidRequestException",
        "InvalidParameterException",
        "UnrecognizedClientException",
    }
)


class CredentialUnavailable(Exception):
    """The credential could not be read for now (its message names the secret and the AWS
    error code, never a value): register treats it as the core system being unavailable."""


class SinkAuth(Protocol):
    """What register needs of a credential: the headers of one request, and a second chance."""

    #: Names the credential in errors and logs (never its value).
    description: str

    def headers(self, body: bytes, headers: Mapping[str, str]) -> dict[str, str]:
        """The headers to add to a request with this body and these headers."""

    def refresh(self) -> bool:
        """Get a fresh credential after a 401; False if there is none to get."""


class NoAuth:
    """`sink.auth: {type: none}`."""

    description = "no credentials (sink.auth type none)"

    def headers(self, body: bytes, headers: Mapping[str, str]) -> dict[str, str]:
        return {}

    def refresh(self) -> bool:
        return False


class TokenCache:
    """Tokens by secret id with the time they were read; survives warm invocations."""

    def __init__(self) -> None:
        self._tokens: dict[str, tuple[str, float]] = {}

    def get(self, secret_id: str, max_age: float, now: float) -> str | None:
        cached = self._tokens.get(secret_id)
        if cached is None or now - cached[1] >= max_age:
            return None
        return cached[0]

    def put(self, secret_id: str, token: str, now: float) -> None:
        self._tokens[secret_id] = (token, now)

    def drop(self, secret_id: str) -> None:
        self._tokens.pop(secret_id, None)

    def clear(self) -> None:
        self._tokens.clear()


_TOKENS = TokenCache()


def token_of(secret_id: str, value: Mapping[str, Any]) -> str:
    """The token in a `GetSecretValue` answer: the SecretString, or its JSON `token` field."""
    text = value.get("SecretString")
    if not isinstance(text, str):
        raise SinkAuthError(
            f"the core system's token secret {secret_id!r} has no SecretString (a binary secret); "
            "store the token as text",
            status=None,
            credential=f"secret {secret_id!r}",
        )
    token: str | None  # None: a JSON secret without a "token" field (refused just below)
    token = text.strip()
    if token.startswith("{"):
        try:
            token = json.loads(token).get("token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str):
            raise SinkAuthError(
                f"the core system's token secret {secret_id!r} is JSON without a text field 'token'; "
                'store the token itself or {"token": "..."}',
                status=None,
                credential=f"secret {secret_id!r}",
            )
        token = token.strip()
    if not token:
        raise SinkAuthError(
            f"the core system's token secret {secret_id!r} is empty",
            status=None,
            credential=f"secret {secret_id!r}",
        )
    return token


class BearerToken:
    """`sink.auth: {type: bearer, secret: ...}`: see the module docstring."""

    def __init__(
        self,
        secret_id: str,
        cache_seconds: float,
        *,
        secrets: Callable[[], Any],
        clock: Callable[[], float] = time.monotonic,
        cache: TokenCache = _TOKENS,
    ) -> None:
        self.secret_id, self.cache_seconds = secret_id, cache_seconds
        self.secrets, self.clock, self.cache = secrets, clock, cache
        self.description = f"secret {secret_id!r}"
        #: Secrets Manager reads made by this instance (tests and logs count them).
        self.reads = 0

    def headers(self, body: bytes, headers: Mapping[str, str]) -> dict[str, str]:
        token = self.cache.get(self.secret_id, self.cache_seconds, self.clock())
        if token is None:
            token = self._read()
        return {"Authorization": f"Bearer {token}"}

    def refresh(self) -> bool:
        # The refused token is forgotten first: if this read fails, the next request reads again.
        self.cache.drop(self.secret_id)
        self._read()
        return True

    def _read(self) -> str:
        from botocore.exceptions import BotoCoreError, ClientError  # deferred, as boto3 is

        try:
            value = self.secrets().get_secret_value(SecretId=self.secret_id)
        except (ClientError, BotoCoreError) as error:
            code = error_code(error)
            if code in FATAL_SECRET_ERRORS:
                raise SinkAuthError(
                    f"the core system's token secret {self.secret_id!r} cannot be read ({code}); check that it exists "
                    "in this account and Region and that its KMS key lets the register function decrypt it",
                    status=None,
                    credential=self.description,
                ) from None
            raise CredentialUnavailable(
                f"the core system's token secret {self.secret_id!r} cannot be read for now "
                f"({code or type(error).__name__})"
            ) from None
        self.reads += 1
        token = token_of(self.secret_id, value)
        self.cache.put(self.secret_id, token, self.clock())
        return token


class SigV4Signer:
    """`sink.auth: {type: sigv4, ...}`: see the module docstring. `credentials` is botocore's
    credential object (refreshed as botocore refreshes it); frozen once per request."""

    def __init__(self, url: str, service: str, region: str, *, credentials: Any) -> None:
        from botocore.auth import SigV4Auth  # deferred: only sigv4 tenants pay the import

        self.url, self.service, self.region, self.credentials = url, service, region, credentials
        self._auth_class = SigV4Auth
        self.description = f"the function's own IAM credentials (sigv4 for {service} in {region})"

    def headers(self, body: bytes, headers: Mapping[str, str]) -> dict[str, str]:
        from botocore.awsrequest import AWSRequest

        request = AWSRequest(method="POST", url=self.url, data=body, headers=dict(headers))
        self._auth_class(self.credentials.get_frozen_credentials(), self.service, self.region).add_auth(
            request
        )
        return {
            name: request.headers[name]
            for name in ("Authorization", "X-Amz-Date", "X-Amz-Security-Token")
            if name in request.headers
        }

    def refresh(self) -> bool:
        return False


@functools.cache
def function_credentials() -> Any:
    """The function's own credentials (botocore's object: it refreshes them when they expire),
    found once per execution environment."""
    import boto3  # deferred: importing this module must stay cheap

    return boto3.Session().get_credentials()


def sink_auth_for(
    config: RegisterEnv,
    *,
    secrets: Callable[[], Any] | None = None,
    credentials: Any = None,
    clock: Callable[[], float] = time.monotonic,
) -> SinkAuth:
    """The credential of a register function's configuration (its AWS clients made on first use)."""
    if config.sink_auth == "bearer":
        return BearerToken(
            config.sink_auth_secret,
            config.sink_auth_cache_seconds,
            secrets=secrets or (lambda: aws_client("secretsmanager")),
            clock=clock,
        )
    if config.sink_auth == "sigv4":
        return SigV4Signer(
            config.sink_url,
            config.sink_auth_service,
            config.sink_auth_region,
            credentials=credentials if credentials is not None else function_credentials(),
        )
    return NoAuth()
