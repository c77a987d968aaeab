"""`SinkServer`, the core-system stand-in of a tenant (local_runtime/README.md, `sink(tenant)`):
the contract of docs/core-system.md (`Idempotency-Key` deduplicates; a JSON array is one batch,
registered all or nothing), injected faults, the tenant's `sink.auth`; and the
`function_environment` hooks that point each register function at it and make it demand the auth.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import random
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from lambdas import contract
from local_runtime.core_auth import SigV4Key, sigv4_problem
from local_runtime.deploy import FunctionEnvironmentHook
from local_runtime.synth import REGISTER_KIND

SINK_URL = contract.env_name("sink_url")
SINK_AUTH = contract.env_name("sink_auth")
SINK_AUTH_SECRET = contract.env_name("sink_auth_secret")
SINK_AUTH_SERVICE = contract.env_name("sink_auth_service")
SINK_AUTH_REGION = contract.env_name("sink_auth_region")


@dataclass
class SinkAuthCheck:
    """What the core system demands: nothing, `Authorization: Bearer <token>` (401 otherwise; the
    token is made per run and never printed), or a SigV4 signature by `key` (403 otherwise)."""

    kind: str = "none"
    secret: str = ""
    token: str = ""
    key: SigV4Key | None = None

    def problem(self, url: str, headers: Message, body: bytes) -> tuple[int, str] | None:
        """None if the request may pass, else the status and why (never quoting a credential)."""
        if self.kind == "bearer":
            sent = headers.get("Authorization") or ""
            if not hmac.compare_digest(sent.encode(), f"Bearer {self.token}".encode()):
                return 401, "missing or wrong bearer token" if sent else "no Authorization header"
        elif self.kind == "sigv4":
            why = sigv4_problem(self.key, method="POST", url=url, headers=dict(headers.items()), body=body)
            if why is not None:
                return 403, why
        return None


@dataclass(frozen=True)
class AuthRefusal:
    """A request refused for its credentials (not in `requests`: nothing of it was looked at)."""

    status: int
    reason: str
    time: float
    idempotency_key: str | None


#: Selects records: a predicate on the record body, a dict the body must contain, or an int:
#: the record that would be registered at that position (0-based) of `accepted`.
RecordMatcher = Callable[[dict[str, Any]], bool] | dict[str, Any] | int | None


@dataclass(frozen=True)
class SinkRequest:
    """One record the core system received (a batch gives one per record)."""

    idempotency_key: str | None
    body: Any  # the decoded JSON record (or the raw text if it was not JSON)
    status: int
    time: float  # epoch seconds, when the request arrived
    registered: bool  # True only the first time a record (key) was accepted
    post: int = 0  # the number (0-based) of the POST that carried it
    batch_offset: int = 0  # its place in that POST
    batch_size: int | None = None  # the POST's record count if it was a batch (a JSON array)


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
    auth: SinkAuthCheck = field(default_factory=SinkAuthCheck)
    _requests: list[SinkRequest] = field(default_factory=list)
    _accepted: list[Any] = field(default_factory=list)
    _seen_keys: set[str] = field(default_factory=set)
    _posts: int = 0
    _failures: list[_Failure] = field(default_factory=list)
    _latency: float = 0.0
    _released: threading.Event = field(default_factory=threading.Event)
    _in_flight: int = 0
    _max_in_flight: int = 0
    _auth_refusals: list[AuthRefusal] = field(default_factory=list)
    _connections: int = 0
    _idle_timeout: float | None = None
    _drop: float = 0.0
    _random: random.Random = field(default_factory=random.Random)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Keep-alive with Nagle on: the response's headers and body leave in two segments
            # and the client's delayed ACK stalls each record.
            disable_nagle_algorithm = True

            def setup(self) -> None:
                self.timeout = sink._idle_timeout  # an idle kept connection is closed after it
                super().setup()
                with sink._lock:
                    sink._connections += 1

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                url = f"http://{self.headers.get('Host', '')}{self.path}"
                status, answer = sink._handle(url, self.headers, raw)
                body = json.dumps({"status": status, **answer}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                if sink._drop and sink._random.random() < sink._drop:
                    self.close_connection = True  # without a `Connection: close`: the client finds out

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name=f"sink-{self.tenant}", daemon=True
        ).start()

    def stop(self) -> None:
        """Stop serving (serve_forever returns, so its thread ends)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}/records"

    # -- what it received -------------------------------------------------------------------

    @property
    def requests(self) -> list[SinkRequest]:
        """Every record received, in arrival order (retries and duplicates included)."""
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
        return self._posts

    @property
    def connections(self) -> int:
        """How many connections it accepted (each a TCP handshake of a client)."""
        return self._connections

    @property
    def max_in_flight(self) -> int:
        """The most requests that were ever being handled at the same time."""
        return self._max_in_flight

    @property
    def auth_refusals(self) -> list[AuthRefusal]:
        """Requests refused for their credentials (401 or 403), in arrival order."""
        with self._lock:
            return list(self._auth_refusals)

    def accept_token(self, token: str) -> SinkServer:
        """Accept `token` instead of the current one (the core system's side of a rotation)."""
        self.auth = dataclasses.replace(self.auth, token=token)
        return self

    # -- fault injection --------------------------------------------------------------------

    def fail_with(
        self, status: int = 503, *, times: int | None = 1, on_record: RecordMatcher = None
    ) -> SinkServer:
        """Answer `status` (e.g. 503, 429) to the next `times` matching requests (None: always)."""
        with self._lock:
            self._failures.append(_Failure(status, times, on_record))
        return self

    def reject(self, *, on_record: RecordMatcher, status: int = 400) -> SinkServer:
        """Refuse the matching records for good with a 4xx (the chunk fails, no retry helps)."""
        return self.fail_with(status, times=None, on_record=on_record)

    def latency(self, seconds: float) -> SinkServer:
        """Delay every response by `seconds` (a slow core system); `clear_faults()` ends it and
        answers the requests being delayed at once. Keep it under the tenant's sink timeout at
        the run's time scale (0.3 s in the end-to-end tests), or every request times out."""
        self._released.clear()
        self._latency = float(seconds)
        return self

    def close_connections(
        self, *, idle_after: float | None = None, at_random: float = 0.0, seed: int = 0
    ) -> SinkServer:
        """Close a kept connection once it has been idle `idle_after` seconds (a keep-alive timeout)
        and, with probability `at_random`, right after an answer (a load balancer's cut), as a
        real core system may; connections opened from now on. None and 0: keep them open."""
        self._idle_timeout, self._drop, self._random = idle_after, at_random, random.Random(seed)
        return self

    def clear_faults(self) -> SinkServer:
        with self._lock:
            self._failures.clear()
        self._latency = 0.0
        self._released.set()
        return self

    def reset(self) -> SinkServer:
        """Forget requests, registered records and faults (between runs sharing one sink)."""
        self.clear_faults()
        with self._lock:
            self._requests.clear()
            self._accepted.clear()
            self._seen_keys.clear()
            self._max_in_flight = self._posts = self._connections = 0
        return self

    # -- request handling -------------------------------------------------------------------

    def _handle(self, url: str, headers: Message, raw: bytes) -> tuple[int, dict[str, Any]]:
        arrived = time.time()
        key = headers.get("Idempotency-Key")
        refused = self.auth.problem(url, headers, raw)
        if refused is not None:
            with self._lock:
                self._auth_refusals.append(AuthRefusal(*refused, arrived, key))
            return refused[0], {"message": refused[1]}
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        batch_size = len(body) if isinstance(body, list) else None
        records = body if batch_size is not None else [body]
        with self._lock:
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
        if self._latency:
            self._released.wait(self._latency)
        with self._lock:
            self._in_flight -= 1
            post, self._posts = self._posts, self._posts + 1
            status, rejected = self._decide(key, records)
            requests = [
                SinkRequest(key, record, status, arrived, status == 201, post, offset, batch_size)
                for offset, record in enumerate(records)
            ]
            self._requests.extend(requests)
        return status, {"rejected_index": rejected} if batch_size is not None and rejected is not None else {}

    def _decide(self, key: str | None, records: list[Any]) -> tuple[int, int | None]:
        """All or nothing: the status of the POST, and the offset of the record a 4xx rejects."""
        if key is not None and key in self._seen_keys:
            return 200, None  # idempotent replay: acknowledged, not registered again
        for failure in self._failures:
            for offset, record in enumerate(records):
                if failure.remaining != 0 and _matches(failure.matcher, record, len(self._accepted) + offset):
                    if failure.remaining is not None:
                        failure.remaining -= 1
                    return failure.status, offset if failure.status < 500 and failure.status != 429 else None
        if key is not None:
            self._seen_keys.add(key)
        self._accepted.extend(records)
        return 201, None


def point_register_at(sinks: Mapping[str, Any]) -> FunctionEnvironmentHook:
    """The default `function_environment` hook: a tenant's register function sends its records
    to the tenant's local sink (anything with a `url`) instead of the tenants file's core system."""

    def hook(tenant: str, kind: str, environment: dict[str, Any]) -> dict[str, Any]:
        if kind == REGISTER_KIND and tenant in sinks:
            return {**environment, SINK_URL: sinks[tenant].url}
        return environment

    return hook


def enforce_auth(
    sinks: Mapping[str, SinkServer], worker_credentials: tuple[str, str, str]
) -> tuple[FunctionEnvironmentHook, dict[str, str]]:
    """A hook that makes each tenant's sink demand the `sink.auth` of its register function's
    environment, and the bearer secrets to create before any file flows ({name: token}; one each,
    however many tenants read it). A secret
    named by full ARN is named by its name instead (moto makes up its own ARN suffix)."""
    to_create: dict[str, str] = {}

    def hook(tenant: str, kind: str, environment: dict[str, Any]) -> dict[str, Any]:
        if kind != REGISTER_KIND or tenant not in sinks:
            return environment
        auth_type = environment.get(SINK_AUTH, "none")
        if auth_type == "bearer":
            secret = str(environment[SINK_AUTH_SECRET])
            name = secret.split(":secret:", 1)[1][:-7] if secret.startswith("arn:") else secret
            # One token per secret: tenants that share a secret share its token.
            token = to_create.setdefault(name, f"tok-{secrets.token_urlsafe(24)}")
            sinks[tenant].auth = SinkAuthCheck(auth_type, secret=name, token=token)
            return {**environment, SINK_AUTH_SECRET: name}
        if auth_type == "sigv4":
            service, region = str(environment[SINK_AUTH_SERVICE]), str(environment[SINK_AUTH_REGION])
            sinks[tenant].auth = SinkAuthCheck(auth_type, key=SigV4Key(*worker_credentials, service, region))
        return environment

    return hook, to_create
