"""Register's credentials for the core system (`sink_auth.py`): the bearer token from Secrets
Manager (moto) through a TTL cache, one refresh on a 401, fatal refusals naming the secret and
never the token; sigv4 signatures the local core system can verify."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from lambdas import contract, register_chunk, sink_auth
from lambdas.contract import SinkAuthError, SinkUnavailableError
from local_runtime.core_auth import SigV4Key, sigv4_problem
from tests.handlers.support import REGION, Context
from tests.handlers.test_register_chunk_handler import (
    LANDED,
    Clock,
    cold_function,
    config,
    connection_fields,
    expected_key,
    ledger,
    put_chunk,
    register,
    register_chunks,
    sink,
    task,
    work,
)

SECRET = "ordered-ingest/acme/core-token"
TOKEN = "tok-FIRST-5f1e8c"
NEW_TOKEN = "tok-SECOND-a94b21"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def empty_token_cache() -> Iterator[None]:
    """Each test starts as a cold function: no token kept from another test."""
    sink_auth._TOKENS.clear()
    yield
    sink_auth._TOKENS.clear()


@pytest.fixture
def secrets(aws: None) -> Any:
    client = boto3.client("secretsmanager", region_name=REGION)
    client.create_secret(Name=SECRET, SecretString=TOKEN)
    return client


class CountingSecrets:
    """The Secrets Manager client, counting GetSecretValue calls."""

    def __init__(self, client: Any) -> None:
        self.client, self.reads = client, 0

    def get_secret_value(self, **kwargs: Any) -> Any:
        self.reads += 1
        return self.client.get_secret_value(**kwargs)


def bearer(sink_url_config: contract.RegisterEnv, **changes: Any) -> contract.RegisterEnv:
    return dataclasses.replace(
        sink_url_config, **{"sink_auth": "bearer", "sink_auth_secret": SECRET, **changes}
    )


def accepts(*tokens: str):
    """A core system that answers 201 to a request bearing one of `tokens`, else 401."""

    def respond(sink: Any):
        def answer(n: int) -> int:
            sent = sink.requests[n]["headers"].get("Authorization")
            return 201 if sent in {f"Bearer {t}" for t in tokens} else 401

        return answer

    return respond


def test_the_token_is_read_once_per_ttl_across_warm_invocations(secrets):
    """GIVEN a 300 s cache WHEN three requests are made within it, then one after it THEN the
    secret is read once, then once more."""
    counting, clock = CountingSecrets(secrets), FakeClock()
    token = sink_auth.BearerToken(SECRET, 300, secrets=lambda: counting, clock=clock)
    assert token.headers(b"{}", {}) == {"Authorization": f"Bearer {TOKEN}"}
    clock.now += 299
    # a new instance, as a warm invocation makes: the module-level cache is what survives
    again = sink_auth.BearerToken(SECRET, 300, secrets=lambda: counting, clock=clock)
    again.headers(b"{}", {}), again.headers(b"{}", {})
    assert counting.reads == 1
    clock.now += 1
    secrets.put_secret_value(SecretId=SECRET, SecretString=NEW_TOKEN)
    assert again.headers(b"{}", {}) == {"Authorization": f"Bearer {NEW_TOKEN}"}
    assert counting.reads == 2


def test_a_json_secret_gives_its_token_field(secrets):
    secrets.put_secret_value(
        SecretId=SECRET, SecretString=json.dumps({"token": NEW_TOKEN, "note": "rotated"})
    )
    assert sink_auth.BearerToken(SECRET, 300, secrets=lambda: secrets).headers(b"", {}) == {
        "Authorization": f"Bearer {NEW_TOKEN}"
    }


def test_fails_when_the_json_secret_has_no_token_naming_the_secret_not_its_value(secrets):
    secrets.put_secret_value(SecretId=SECRET, SecretString=json.dumps({"password": TOKEN}))
    with pytest.raises(SinkAuthError) as caught:
        sink_auth.BearerToken(SECRET, 300, secrets=lambda: secrets).headers(b"", {})
    assert str(caught.value) == (
        f"the core system's token secret '{SECRET}' is JSON without a text field 'token'; "
        'store the token itself or {"token": "..."}'
    )


def test_a_rotation_costs_one_refresh_and_no_record(work, sink, ledger, secrets, logs):
    """GIVEN a cached token that the core system no longer accepts (rotated: the secret holds the
    new one) WHEN a chunk of 3 is registered THEN the first request's 401 reads the secret again,
    the request is sent again with the new token, and every record is registered once."""
    sink_auth.BearerToken(SECRET, 300, secrets=lambda: secrets).headers(b"", {})  # cached: TOKEN
    secrets.put_secret_value(SecretId=SECRET, SecretString=NEW_TOKEN)
    sink.respond = accepts(NEW_TOKEN)(sink)
    put_chunk(work, 0, [{"id": i} for i in range(3)])

    result = register(work, ledger, task(0), bearer(config(sink)))

    assert (result["done"], result["records_sent"]) == (True, 3)
    sent = [r["headers"]["Authorization"] for r in sink.requests]
    assert sent == [f"Bearer {TOKEN}", f"Bearer {NEW_TOKEN}", f"Bearer {NEW_TOKEN}", f"Bearer {NEW_TOKEN}"]
    assert [r["body"] for r in sink.requests[1:]] == [json.dumps({"id": i}).encode() for i in range(3)]
    assert TOKEN not in logs.text() and NEW_TOKEN not in logs.text()


def test_fails_when_the_core_system_refuses_the_token_after_a_refresh(work, sink, ledger, secrets, logs):
    """GIVEN a core system that accepts neither the cached nor the re-read token WHEN registered
    THEN SinkAuthError names the secret and HTTP 401, after exactly one refresh; nothing was
    registered and no token is in the error or any log line."""
    sink.respond = lambda n: 401
    put_chunk(work, 0, [{"id": 0}])

    with pytest.raises(SinkAuthError) as caught:
        register(work, ledger, task(0), bearer(config(sink)))

    assert str(caught.value) == (
        f"chunk 0 record 0 (file record 0): the core system refused the credentials (HTTP 401 after reading the "
        f"secret again) of secret '{SECRET}'; fix or rotate the credential, then resume the file"
    )
    assert len(sink.requests) == 2
    assert TOKEN not in logs.text() and TOKEN not in repr(caught.value.log_fields)


def test_fails_at_once_when_the_core_system_forbids(work, sink, ledger, secrets):
    """GIVEN a 403 WHEN registered THEN SinkAuthError at once: reading the secret again cannot help."""
    sink.respond = lambda n: 403
    put_chunk(work, 0, [{"id": 0}])
    with pytest.raises(SinkAuthError, match=r"\(HTTP 403\) of secret 'ordered-ingest/acme/core-token'"):
        register(work, ledger, task(0), bearer(config(sink)))
    assert len(sink.requests) == 1


def test_fails_when_the_secret_does_not_exist_naming_it(work, sink, ledger, secrets):
    put_chunk(work, 0, [{"id": 0}])
    with pytest.raises(SinkAuthError) as caught:
        register(work, ledger, task(0), bearer(config(sink), sink_auth_secret="ordered-ingest/acme/missing"))
    assert str(caught.value) == (
        "the core system's token secret 'ordered-ingest/acme/missing' cannot be read (ResourceNotFoundException); "
        "check that it exists in this account and Region and that its KMS key lets the register function decrypt it"
    )
    assert sink.requests == []


class FlakySecrets:
    """The Secrets Manager client, failing its first `failures` reads with `error`."""

    def __init__(self, client: Any, failures: int, error: Exception) -> None:
        self.client, self.failures, self.error, self.reads = client, failures, error, 0

    def get_secret_value(self, **kwargs: Any) -> Any:
        self.reads += 1
        if self.reads <= self.failures:
            raise self.error
        return self.client.get_secret_value(**kwargs)


THROTTLED = ClientError(
    {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "GetSecretValue"
)


@pytest.mark.parametrize(
    "error",
    [THROTTLED, EndpointConnectionError(endpoint_url="https://secretsmanager")],
    ids=["throttled", "no-connection"],
)
def test_a_secret_that_cannot_be_read_for_now_is_waited_out_like_an_outage(
    work, sink, ledger, secrets, monkeypatch, error
):
    """GIVEN Secrets Manager failing the token read for a while (throttling or the network, after
    botocore's own retries) WHEN a chunk is registered THEN nothing is sent and the chunk is not
    failed: register backs off, then returns not done with a wait, as for a core-system outage;
    once the secret can be read every record goes out once."""
    flaky = FlakySecrets(secrets, failures=len(register_chunk.RETRY_BACKOFF_SECONDS) + 1, error=error)
    monkeypatch.setattr(sink_auth, "aws_client", lambda service: flaky)
    put_chunk(work, 0, [{"id": i} for i in range(3)])
    clock = Clock()
    cfg = bearer(config(sink, budget=600))

    first = register(work, ledger, task(0), cfg, clock)

    assert (first["done"], first["start_record"], first["records_sent"]) == (False, 0, 0)
    assert (
        first["fault_since"] is not None
        and first["retry_after_seconds"] >= register_chunk.MIN_RETRY_AFTER_SECONDS
    )
    assert sink.requests == []
    clock.now += first["retry_after_seconds"]  # the workflow's Wait state
    second = register(work, ledger, first, cfg, clock)
    assert (second["done"], second["records_sent"], second["fault_since"]) == (True, 3, None)
    assert [json.loads(r["body"])["id"] for r in sink.requests] == [0, 1, 2]
    assert {r["headers"]["Authorization"] for r in sink.requests} == {f"Bearer {TOKEN}"}


def test_a_secret_unreadable_past_the_outage_budget_fails_the_file_naming_it(
    work, sink, ledger, secrets, monkeypatch
):
    """GIVEN Secrets Manager throttling every read WHEN the chunk is tried until the outage
    budget is spent THEN SinkUnavailableError names the secret and the error code, at record 0."""
    monkeypatch.setattr(sink_auth, "aws_client", lambda service: FlakySecrets(secrets, 10**6, THROTTLED))
    put_chunk(work, 0, [{"id": 0}])
    clock, cfg = Clock(), bearer(config(sink, budget=60))

    with pytest.raises(SinkUnavailableError) as failed:
        progress = register(work, ledger, task(0), cfg, clock)
        while True:
            clock.now += progress["retry_after_seconds"]
            progress = register(work, ledger, progress, cfg, clock)

    assert failed.value.next_record == 0 and sink.requests == []
    assert f"token secret '{SECRET}' cannot be read for now (ThrottlingException)" in str(failed.value)
    assert "longer than the outage budget (60 s)" in str(failed.value)


def test_a_refresh_that_cannot_read_the_secret_waits_then_reads_it_again(
    work, sink, ledger, secrets, monkeypatch
):
    """GIVEN a cached token the core system no longer accepts, and Secrets Manager throttling the
    refresh WHEN the chunk is registered THEN it waits (not a refusal), and the next try reads the
    new token and delivers: the refused token is not used again."""
    sink_auth.BearerToken(SECRET, 300, secrets=lambda: secrets).headers(b"", {})  # cached: TOKEN
    secrets.put_secret_value(SecretId=SECRET, SecretString=NEW_TOKEN)
    sink.respond = accepts(NEW_TOKEN)(sink)
    flaky = FlakySecrets(secrets, failures=len(register_chunk.RETRY_BACKOFF_SECONDS) + 1, error=THROTTLED)
    monkeypatch.setattr(sink_auth, "aws_client", lambda service: flaky)
    put_chunk(work, 0, [{"id": i} for i in range(2)])
    clock, cfg = Clock(), bearer(config(sink, budget=600))

    first = register(work, ledger, task(0), cfg, clock)
    assert (first["done"], first["records_sent"]) == (False, 0)
    clock.now += first["retry_after_seconds"]
    second = register(work, ledger, first, cfg, clock)

    assert (second["done"], second["records_sent"]) == (True, 2)
    assert [r["headers"]["Authorization"] for r in sink.requests] == [
        f"Bearer {TOKEN}",
        f"Bearer {NEW_TOKEN}",
        f"Bearer {NEW_TOKEN}",
    ]


def test_the_handler_logs_the_refusal_at_error_with_no_token_anywhere(
    work, sink, ledger, secrets, logs, monkeypatch
):
    """GIVEN the handler's environment with bearer auth and a core system refusing every token
    WHEN the handler runs THEN one ERROR line names the secret and the status; no log line, no
    exception text, no stack trace holds the token."""
    for name, value in contract.environment(bearer(config(sink, timeout=2, budget=1))).items():
        monkeypatch.setenv(name, value)
    sink.respond = lambda n: 401
    put_chunk(work, 0, [{"id": 0}])

    with pytest.raises(SinkAuthError) as caught:
        register_chunk.handler(task(0), Context())

    (error,) = logs.errors()
    assert (error.status, error.credential, error.error_type) == (401, f"secret '{SECRET}'", "SinkAuthError")
    assert TOKEN not in logs.text() and TOKEN not in str(caught.value)
    assert (
        logs.at(logging.INFO).count("core system refused the credential; sending again with a fresh one") == 1
    )


def test_none_sends_no_authorization_and_a_401_stays_a_rejection(work, sink, ledger):
    sink.respond = lambda n: 401
    put_chunk(work, 0, [{"id": 0}])
    with pytest.raises(contract.SinkRejectedError):
        register(work, ledger, task(0), config(sink))
    assert "Authorization" not in sink.requests[0]["headers"]


KEY = SigV4Key(
    access_key="AKIDLOCAL",
    secret_key="local-secret-key",
    token="local-session-token",
    service="execute-api",
    region="eu-west-1",
)


def signed_config(sink_config: contract.RegisterEnv) -> contract.RegisterEnv:
    return dataclasses.replace(
        sink_config, sink_auth="sigv4", sink_auth_service="execute-api", sink_auth_region="eu-west-1"
    )


def test_sigv4_signs_every_request_so_that_the_core_system_can_verify_it(work, sink, ledger, monkeypatch):
    """GIVEN sigv4 for execute-api in eu-west-1 and the function's credentials WHEN a chunk of 2 is
    registered THEN each request carries a signature that verifies against its method, path,
    headers and body with those credentials; a changed body does not verify."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", KEY.secret_key)
    monkeypatch.setenv("AWS_SESSION_TOKEN", KEY.token)
    monkeypatch.setenv("AWS_SECURITY_TOKEN", KEY.token)
    sink_auth.function_credentials.cache_clear()
    put_chunk(work, 0, [{"id": 0}, {"id": 1}])

    register(work, ledger, task(0), signed_config(config(sink)))

    assert len(sink.requests) == 2
    for request in sink.requests:
        headers = request["headers"]
        assert headers["Authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={KEY.access_key}/")
        assert headers["X-Amz-Security-Token"] == KEY.token
        assert sigv4_problem(KEY, method="POST", url=sink.url, headers=headers, body=request["body"]) is None
    first = sink.requests[0]
    assert sigv4_problem(KEY, method="POST", url=sink.url, headers=first["headers"], body=b'{"id": 9}') == (
        "the signature does not match the request"
    )
    other = dataclasses.replace(KEY, secret_key="another-key")
    assert sigv4_problem(
        other, method="POST", url=sink.url, headers=first["headers"], body=first["body"]
    ) == ("the signature does not match the request")
    sink_auth.function_credentials.cache_clear()


@pytest.mark.parametrize("kind", ["bearer", "sigv4"])
def test_credentials_go_with_every_request_over_the_kept_connection_and_its_replacement(
    work, sink, ledger, secrets, monkeypatch, capsys, kind
):
    """GIVEN a bearer (or sigv4) tenant and a core system that checks every request and closes the
    idle connection between the second and third invocations WHEN a warm function registers three
    chunks THEN every request carries the credential (a signature of its own body for sigv4), the
    first two chunks share one connection, the third reconnects once, nothing is refused or sent twice."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", KEY.secret_key)
    monkeypatch.setenv("AWS_SESSION_TOKEN", KEY.token)
    sink_auth.function_credentials.cache_clear()

    def verified(n: int) -> int:
        request = sink.requests[n]
        if kind == "bearer":
            return 201 if request["headers"].get("Authorization") == f"Bearer {TOKEN}" else 401
        why = sigv4_problem(
            KEY, method="POST", url=sink.url, headers=request["headers"], body=request["body"]
        )
        return 201 if why is None else 403

    sink.respond = verified
    cfg = bearer(config(sink)) if kind == "bearer" else signed_config(config(sink))
    register_chunks(work, ledger, sink, 3, cfg=cfg, between=lambda i: sink.close_idle() if i == 2 else None)

    assert sink.keys() == [expected_key(LANDED["version_id"], i) for i in range(9)]
    assert len({r["client"] for r in sink.requests[:6]}) == 1 and sink.connections == 2
    assert [(opened, reconnects) for opened, reconnects, _ in connection_fields(capsys)] == [
        (1, 0),
        (0, 0),
        (1, 1),
    ]
    sink_auth.function_credentials.cache_clear()


def test_sigv4_refusal_is_fatal_at_once_and_names_service_and_region(work, sink, ledger):
    sink.respond = lambda n: 403
    put_chunk(work, 0, [{"id": 0}])
    with pytest.raises(
        SinkAuthError,
        match=r"\(HTTP 403\) of the function's own IAM credentials "
        r"\(sigv4 for execute-api in eu-west-1\)",
    ):
        register(work, ledger, task(0), signed_config(config(sink)))
    assert len(sink.requests) == 1


def test_an_old_signature_is_refused():
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method="POST", url="http://127.0.0.1:9/records", data=b"{}", headers={})
    SigV4Auth(Credentials(KEY.access_key, KEY.secret_key, KEY.token), KEY.service, KEY.region).add_auth(
        request
    )
    later = _dt.datetime.now(_dt.UTC) + _dt.timedelta(hours=1)
    assert (
        sigv4_problem(
            KEY,
            method="POST",
            url="http://127.0.0.1:9/records",
            headers=dict(request.headers),
            body=b"{}",
            now=later,
        )
        == "the signature is too old"
    )
