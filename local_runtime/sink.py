"""A local HTTP server per tenant that stands in for the core system, and the default
`function_environment` hook that points each tenant's register function at it.

It behaves like the contract in docs/architecture.md expects of the real one: one POST per
record, the ``Idempotency-Key`` header deduplicates (a repeated key is answered 200 and not
registered twice). Every request is kept in arrival order so tests can check ordering and
duplicates, and faults can be injected: 5xx/429 for a number of requests, a fixed latency,
a fatal 4xx on chosen records.

It also implements the batch contract (docs/core-system.md, "The contract"): a
POST whose body is a JSON array is one batch under one key, registered atomically: every
record (201, or 200 for a key seen before) or none (the first fault that matches any of its
records answers for the whole batch; a 4xx names the record in `rejected_index`). `requests`
lists a batch record by record (`batch_offset` > 0 for all but its first), so the ordering and
duplicate checks read both modes alike.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from lambdas import contract
from local_runtime.core_auth import SigV4Key, sigv4_problem
from local_runtime.synth import REGISTER_ROLE

SINK_URL = contract.env_name("sink_url")
SINK_AUTH = contract.env_name("sink_auth")
SINK_AUTH_SECRET = contract.env_name("sink_auth_secret")
SINK_AUTH_SERVICE = contract.env_name("sink_auth_service")
SINK_AUTH_REGION = contract.env_name("sink_auth_region")


@dataclass
class SinkAuthCheck:
    """What the local core system demands (the tenant's `sink.auth`, read from the register
    function's environment in the templates): nothing, `Authorization: Bearer <token>` with the
    token it currently accepts (401 otherwise), or a valid SigV4 signature by the workers'
    credentials (403 otherwise). `token` is generated per run and never printed; `accept_token`
    switches it (a rotation on the core system's side)."""

    kind: str = "none"
    secret: str = ""
    token: str = ""
    key: SigV4Key | None = None

    def problem(self, method: str, url: str, headers: Mapping[str, str], body: bytes) -> tuple[int, str] | None:
        """None if the request may pass, else the status and why (never quoting a credential)."""
        if self.kind == "bearer":
            sent = headers.get("Authorization") or ""
            if not hmac.compare_digest(sent.encode(), f"Bearer {self.token}".encode()):
                return 401, "missing or wrong bearer token" if sent else "no Authorization header"
        elif self.kind == "sigv4":
            assert self.key is not None
            why = sigv4_problem(self.key, method=method, url=url, headers=headers, body=body)
            if why is not None:
                return 403, why
        return None


@dataclass(frozen=True)
class AuthRefusal:
    """A request the core system refused for its credentials (not in `requests`: nothing of it
    was looked at)."""

    status: int
    reason: str
    time: float
    idempotency_key: str | None

#: Selects records: a predicate on the record body, a dict the body must contain, or an int:
#: the record that would be registered at that position (0-based) of `accepted`.
RecordMatcher = Callable[[dict[str, Any]], bool] | dict[str, Any] | int | None


@dataclass(frozen=True)
class SinkRequest:
    """One request the core system received."""

    idempotency_key: str | None
    body: Any  # the decoded JSON record (or the raw text if it was not JSON)
    status: int
    time: float  # epoch seconds, when the request arrived
    registered: bool  # True only the first time a record (key) was accepted
    tenant_header: str | None = None
    #: Batch mode: the number of the POST (0-based) that carried the record, and the record's
    #: place in it. Record mode: the POST's number and 0.
    post: int = 0
    batch_offset: int = 0
    #: The number of records of the POST if it was a batch (a JSON array), else None.
    batch_size: int | None = None


@dataclass
class _Failure:
    status: int
    remaining: int | None  # None: for ever
    matcher: RecordMatcher


def _matches(matcher: RecordMatcher, body: Any, position: int) -> bool:
    if matcher is None:
        return True
    if isinstance(matcher, int) and not isinstance(matcher, bool):
        return matcher == position
    if callable(matcher):
        return bool(matcher(body))
    return isinstance(body, dict) and all(body.get(k) == v for k, v in matcher.items())


@dataclass
class SinkServer:
    """The core-system stand-in of one tenant (start with `start()`, stop with `stop()`)."""

    tenant: str
    host: str = "127.0.0.1"
    _requests: list[SinkRequest] = field(default_factory=list)
    _accepted: list[Any] = field(default_factory=list)
    _seen_keys: set[str] = field(default_factory=set)
    _posts: int = 0
    _failures: list[_Failure] = field(default_factory=list)
    _latency: float = 0.0
    _in_flight: int = 0
    _max_in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _listeners: list[Callable[[str, SinkRequest], None]] = field(default_factory=list)
    auth: SinkAuthCheck = field(default_factory=SinkAuthCheck)
    _auth_refusals: list[AuthRefusal] = field(default_factory=list)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Keep-alive with Nagle on: the response's headers and body leave in two segments
            # and the client's delayed ACK stalls each record by ~40 ms.
            disable_nagle_algorithm = True

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                url = f"http://{self.headers.get('Host', '')}{self.path}"
                refused = sink.auth.problem("POST", url, dict(self.headers.items()), raw)
                if refused is not None:
                    status, answer = refused[0], {"message": refused[1]}
                    with sink._lock:
                        sink._auth_refusals.append(
                            AuthRefusal(refused[0], refused[1], time.time(), self.headers.get("Idempotency-Key")))
                else:
                    status, answer = sink._handle(
                        raw, self.headers.get("Idempotency-Key"), self.headers.get("X-Tenant-Id")
                    )
                body = json.dumps({"status": status, **answer}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                return

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name=f"sink-{self.tenant}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        return f"http://{self.host}:{self._server.server_address[1]}/records"

    # -- what it received -------------------------------------------------------------------

    @property
    def requests(self) -> list[SinkRequest]:
        """Every request, in arrival order (retries and duplicates included)."""
        with self._lock:
            return list(self._requests)

    @property
    def accepted(self) -> list[Any]:
        """Records registered, in order; a record appears once whatever its retries."""
        with self._lock:
            return list(self._accepted)

    @property
    def posts(self) -> int:
        """How many POSTs arrived (a batch is one)."""
        with self._lock:
            return self._posts

    @property
    def max_in_flight(self) -> int:
        """The most requests that were ever being handled at the same time."""
        return self._max_in_flight

    @property
    def auth_refusals(self) -> list[AuthRefusal]:
        """Requests refused for their credentials (401 or 403), in arrival order."""
        with self._lock:
            return list(self._auth_refusals)

    def require_bearer(self, secret: str) -> str:
        """Demand a bearer token from now on (a new random one, also returned: the local
        runtime stores it in the secret named `secret`). Never printed."""
        self.auth = SinkAuthCheck(kind="bearer", secret=secret, token=f"tok-{secrets.token_urlsafe(24)}")
        return self.auth.token

    def accept_token(self, token: str) -> SinkServer:
        """Accept `token` instead of the current one (the core system's side of a rotation)."""
        self.auth = dataclasses.replace(self.auth, token=token)
        return self

    def require_sigv4(self, key: SigV4Key) -> SinkServer:
        """Demand a SigV4 signature by `key` (the workers' credentials, the tenant's service and Region)."""
        self.auth = SinkAuthCheck(kind="sigv4", key=key)
        return self

    def add_listener(self, listener: Callable[[str, SinkRequest], None]) -> None:
        self._listeners.append(listener)

    # -- fault injection --------------------------------------------------------------------

    def fail_with(
        self, status: int = 503, *, times: int | None = 1, on_record: RecordMatcher = None
    ) -> SinkServer:
        """Answer ``status`` (e.g. 503, 429) to the next ``times`` matching requests (None: always)."""
        with self._lock:
            self._failures.append(_Failure(status, times, on_record))
        return self

    def reject(self, *, on_record: RecordMatcher, status: int = 400) -> SinkServer:
        """Refuse the matching records for good with a 4xx (the chunk fails, no retry helps)."""
        return self.fail_with(status, times=None, on_record=on_record)

    def latency(self, seconds: float) -> SinkServer:
        """Delay every response by ``seconds`` (a slow core system)."""
        self._latency = float(seconds)
        return self

    def clear_faults(self) -> SinkServer:
        with self._lock:
            self._failures.clear()
        self._latency = 0.0
        return self

    def reset(self) -> SinkServer:
        """Forget requests, registered records and faults (between tests sharing one pipeline)."""
        with self._lock:
            self._requests.clear()
            self._accepted.clear()
            self._seen_keys.clear()
            self._failures.clear()
            self._max_in_flight = 0
            self._posts = 0
        self._latency = 0.0
        return self

    # -- request handling -------------------------------------------------------------------

    def _handle(self, raw: bytes, key: str | None, tenant_header: str | None) -> tuple[int, dict[str, Any]]:
        arrived = time.time()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        with self._lock:
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
        try:
            if self._latency:
                time.sleep(self._latency)
            with self._lock:
                post = self._posts
                self._posts += 1
                if isinstance(body, list):
                    status, registered, answer = self._decide_batch(key, body)
                    requests = [
                        SinkRequest(key, record, status, arrived, registered, tenant_header, post, offset, len(body))
                        for offset, record in enumerate(body)
                    ]
                else:
                    status, registered = self._decide(key, body)
                    answer = {}
                    requests = [SinkRequest(key, body, status, arrived, registered, tenant_header, post)]
                self._requests.extend(requests)
        finally:
            with self._lock:
                self._in_flight -= 1
        for request in requests:
            for listener in self._listeners:
                try:
                    listener(self.tenant, request)
                except Exception:  # noqa: BLE001 - observers must not break the sink
                    pass
        return status, answer

    def _decide(self, key: str | None, body: Any) -> tuple[int, bool]:
        if key is not None and key in self._seen_keys:
            return 200, False  # idempotent replay: acknowledged, not registered again
        for failure in self._failures:
            if failure.remaining != 0 and _matches(failure.matcher, body, len(self._accepted)):
                if failure.remaining is not None:
                    failure.remaining -= 1
                return failure.status, False
        if key is not None:
            self._seen_keys.add(key)
        self._accepted.append(body)
        return 201, True

    def _decide_batch(self, key: str | None, records: list[Any]) -> tuple[int, bool, dict[str, Any]]:
        """All or nothing: a fault matching any record answers for the whole batch."""
        if key is not None and key in self._seen_keys:
            return 200, False, {}
        for failure in self._failures:
            if failure.remaining == 0:
                continue
            for offset, record in enumerate(records):
                if _matches(failure.matcher, record, len(self._accepted) + offset):
                    if failure.remaining is not None:
                        failure.remaining -= 1
                    return failure.status, False, ({"rejected_index": offset} if failure.status < 500 and failure.status != 429 else {})
        if key is not None:
            self._seen_keys.add(key)
        self._accepted.extend(records)
        return 201, True, {}


def point_register_at(
    sinks: Mapping[str, SinkServer],
) -> Callable[[str, str, dict[str, Any]], dict[str, Any]]:
    """The default `function_environment` hook: a tenant's register function sends its records
    to the tenant's local sink instead of the core system named in the tenants file."""

    def hook(tenant: str, role: str, environment: dict[str, Any]) -> dict[str, Any]:
        if role == REGISTER_ROLE and tenant in sinks:
            return {**environment, SINK_URL: sinks[tenant].url}
        return environment

    return hook


def enforce_auth(sinks: Mapping[str, SinkServer], *, sigv4_credentials: tuple[str, str, str | None]
                 ) -> Callable[[str, str, dict[str, Any]], dict[str, Any]]:
    """A `function_environment` hook that reads each tenant's `sink.auth` from its register
    function's environment and makes the tenant's local sink demand it. A bearer secret named by
    full ARN is named by its name instead (moto makes up its own ARN suffix). `secrets_to_create`
    (an attribute of the hook) is then {secret name: token}: the local runtime creates them
    before any file flows. `sigv4_credentials`: (access key, secret key, session token) of the
    workers."""
    to_create: dict[str, str] = {}

    def hook(tenant: str, role: str, environment: dict[str, Any]) -> dict[str, Any]:
        if role != REGISTER_ROLE or tenant not in sinks:
            return environment
        kind = environment.get(SINK_AUTH, "none")
        if kind == "bearer":
            secret = str(environment[SINK_AUTH_SECRET])
            name = secret.split(":secret:", 1)[1][:-7] if secret.startswith("arn:") else secret
            to_create[name] = sinks[tenant].require_bearer(name)
            return {**environment, SINK_AUTH_SECRET: name}
        if kind == "sigv4":
            access_key, secret_key, token = sigv4_credentials
            sinks[tenant].require_sigv4(SigV4Key(access_key, secret_key, token, str(environment[SINK_AUTH_SERVICE]),
                                                 str(environment[SINK_AUTH_REGION])))
        return environment

    hook.secrets_to_create = to_create  # type: ignore[attr-defined]
    return hook
