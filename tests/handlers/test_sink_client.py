"""The kept connection to the core system (`sink_client.SinkConnection`, `ConnectionPool`) on its
own: one connection per scheme, host and port for as long as the pool lives, one silent
reconnect on a kept connection the far side closed (within the request's timeout), and over
HTTPS the TLS session resumed by the connection that replaces a closed one."""

from __future__ import annotations

import contextlib
import datetime
import http.client
import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from lambdas import sink_client


class Server:
    """A keep-alive HTTP(S) server that answers 200 with the path it was asked, and counts its
    connections (and, over TLS, the ones that resumed a session)."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        server = self
        self.released = threading.Event()
        self.paths: list[str] = []
        self.sockets: list[socket.socket] = []
        self.resumed: list[bool] = []
        self.hang_up = False  # close the connection after reading the next request, without an answer
        self.hang = threading.Event()  # set: the next requests wait (up to 5 s) before their answer
        self.received = threading.Event()  # set once a request was read whole
        self.answered = 0  # answers written

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else each answer's body waits ~40 ms for a delayed ACK

            def setup(self) -> None:
                super().setup()
                server.sockets.append(self.connection)
                if tls is not None:
                    server.resumed.append(self.connection.session_reused)

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                server.paths.append(self.path)
                server.received.set()
                if server.hang_up:
                    server.hang_up, self.close_connection = False, True
                    return
                if server.hang.is_set():
                    server.released.wait(5)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
                server.answered += 1

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.http.socket = tls.wrap_socket(self.http.socket, server_side=True)
        self.http.daemon_threads = True
        self.http.handle_error = lambda request, address: None  # a client's reset at the end of a test
        threading.Thread(target=self.http.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
        self.origin = f"{'https' if tls else 'http'}://{'localhost' if tls else '127.0.0.1'}:{self.http.server_address[1]}"

    def close_idle(self) -> None:
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        self.released.set()
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    running = Server()
    yield running
    running.stop()


def self_signed(directory: Path) -> Path:
    """A certificate and key for `localhost` (one PEM file)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    path = directory / "localhost.pem"
    path.write_bytes(
        cert.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return path


def post(
    connection: sink_client.SinkConnection, body: bytes = b"{}", timeout: float = 5.0
) -> tuple[int, bytes]:
    return connection.post(body, {"Content-Type": "application/json", "Idempotency-Key": "k"}, timeout)


def test_invocations_share_one_connection_per_origin_each_with_its_own_path(server):
    """GIVEN one pool (a warm execution environment) WHEN two invocations post to two paths of the
    same core system THEN one connection carries every request, each to its own path; only the
    first invocation counts it as opened."""
    pool = sink_client.ConnectionPool()
    first = sink_client.SinkConnection(f"{server.origin}/records", pool=pool)
    assert post(first) == (200, b"ok") and post(first) == (200, b"ok")
    second = sink_client.SinkConnection(f"{server.origin}/other?tenant=a", pool=pool)
    assert post(second) == (200, b"ok")
    assert post(sink_client.SinkConnection(server.origin, pool=pool)) == (200, b"ok")

    assert server.paths == ["/records", "/records", "/other?tenant=a", "/"] and len(server.sockets) == 1
    assert (first.opened, first.reconnects, second.opened, second.reconnects) == (1, 0, 0, 0)
    pool.clear()


def test_each_core_system_gets_its_own_connection(server):
    """GIVEN one pool WHEN it posts to two core systems (another port) THEN each request reaches its own."""
    other = Server()
    try:
        pool = sink_client.ConnectionPool()
        for _ in range(2):
            post(sink_client.SinkConnection(f"{server.origin}/a", pool=pool))
            post(sink_client.SinkConnection(f"{other.origin}/b", pool=pool))
        assert (server.paths, other.paths) == (["/a", "/a"], ["/b", "/b"])
        assert len(server.sockets) == len(other.sockets) == 1
        pool.clear()
    finally:
        other.stop()


def test_the_timeout_of_each_request_holds_on_a_kept_connection(server):
    """GIVEN a kept connection used with a 5 s timeout WHEN the next request has a 0.2 s timeout and
    the core system does not answer in time THEN it times out (the kept socket got the new timeout)."""
    pool = sink_client.ConnectionPool()
    kept = sink_client.SinkConnection(f"{server.origin}/r", pool=pool)
    assert post(kept, timeout=5.0) == (200, b"ok")
    server.hang.set()
    with pytest.raises(TimeoutError):
        post(kept, timeout=0.2)
    assert kept.reconnects == 0
    server.released.set()
    pool.clear()


def test_a_new_pool_is_a_cold_start(server):
    """GIVEN a connection kept by one pool WHEN another pool (another execution environment) posts
    THEN it opens its own connection."""
    one, other = sink_client.ConnectionPool(), sink_client.ConnectionPool()
    post(sink_client.SinkConnection(f"{server.origin}/r", pool=one))
    post(sink_client.SinkConnection(f"{server.origin}/r", pool=other))
    assert len(server.sockets) == 2
    one.clear(), other.clear()


def test_the_reconnect_gets_what_is_left_of_the_requests_timeout(server):
    """GIVEN a kept connection that turns out closed after most of the request's timeout went by
    WHEN the request is posted THEN the request sent again on the new connection may only use what is
    left of the timeout, and none at all once it is spent: the caller's deadline holds."""
    pool = sink_client.ConnectionPool()
    readings: list[float] = [
        0.0
    ]  # what the clock says: the post's start, then when the closed connection failed
    kept = sink_client.SinkConnection(f"{server.origin}/r", pool=pool, clock=lambda: readings.pop(0))
    post(kept)
    server.close_idle()
    readings[:] = [10.0, 14.0]
    assert post(kept, timeout=5.0) == (200, b"ok")
    assert kept.reconnects == 1 and pool.kept(server.origin).connection.timeout == pytest.approx(1.0)

    server.close_idle()
    readings[:] = [20.0, 25.0]
    with pytest.raises(ConnectionError):
        post(kept, timeout=5.0)
    assert kept.reconnects == 1 and len(server.paths) == 2  # nothing sent again: the timeout is spent
    pool.clear()


def test_a_failure_after_the_reconnect_raises_and_leaves_no_connection_behind(server):
    """GIVEN a kept connection closed while idle, and a core system that hangs up on the request
    sent again WHEN posted THEN the error reaches the caller (one reconnect, no second), and the next
    post opens a new connection that works."""
    pool = sink_client.ConnectionPool()
    kept = sink_client.SinkConnection(f"{server.origin}/r", pool=pool)
    post(kept)
    server.close_idle()
    server.hang_up = True
    with pytest.raises(ConnectionError):
        post(kept)
    assert (kept.opened, kept.reconnects) == (2, 1)
    assert post(kept) == (200, b"ok") and (kept.opened, kept.reconnects) == (3, 1)
    pool.clear()


def test_over_https_the_connection_is_kept_and_a_reconnect_resumes_the_tls_session(tmp_path):
    """GIVEN an HTTPS core system WHEN a warm function posts once, the core system closes the idle
    connection, and it posts twice more THEN the new connection resumes the session of the first
    (an abbreviated handshake, not a full one) and carries both requests."""
    pem = self_signed(tmp_path)
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(pem)
    trusted = ssl.create_default_context(cafile=str(pem))
    tls = Server(served)
    try:
        pool = sink_client.ConnectionPool(tls_context=trusted)
        kept = sink_client.SinkConnection(f"{tls.origin}/records", pool=pool)
        assert post(kept) == (200, b"ok")
        tls.close_idle()
        assert post(kept) == (200, b"ok") and post(kept) == (200, b"ok")
        assert (kept.opened, kept.reconnects) == (2, 1)
        assert tls.resumed == [False, True]
        pool.clear()
    finally:
        tls.stop()


def test_a_connection_that_breaks_after_the_answer_began_is_not_sent_again_silently():
    """GIVEN a kept connection on which the core system's answer starts (status line and headers)
    and the connection is then reset WHEN posted THEN the error reaches the caller, whose retry
    (backed off, counted as a failed try) sends it again under the same key: the connection layer
    only re-sends what broke before any answer."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        answers = [
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\npart",
        ]

        def serve() -> None:
            conn, _ = listener.accept()
            with conn:
                for answer in answers:
                    request = b""
                    while not request.endswith(b"\r\n\r\n{}"):  # the headers, then the body `post` sends
                        request += conn.recv(65536)
                    conn.sendall(answer)
                conn.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )  # close = reset

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        pool = sink_client.ConnectionPool()
        kept = sink_client.SinkConnection(f"http://127.0.0.1:{port}/r", pool=pool)
        assert post(kept) == (200, b"ok")
        with pytest.raises((ConnectionError, http.client.IncompleteRead)):
            post(kept)
        thread.join(5)
        assert kept.reconnects == 0 and kept.opened == 1
        pool.clear()


def test_meanwhile_runs_while_the_core_system_holds_the_request_and_its_answer_is_read_after(server):
    """GIVEN a core system that holds each request until released WHEN a request is posted with
    `meanwhile` THEN `meanwhile` runs once the core system has the whole request and before its
    answer is read: the caller's own work (the next request) overlaps the core system's."""
    pool = sink_client.ConnectionPool()
    kept = sink_client.SinkConnection(f"{server.origin}/r", pool=pool)
    server.hang.set()
    seen: list[tuple[bool, int]] = []

    def meanwhile() -> None:
        seen.append((server.received.wait(5), server.answered))  # the core system read the request...
        server.released.set()  # ...and answers only now

    assert kept.post(b"{}", {"Idempotency-Key": "k"}, 5.0, meanwhile=meanwhile) == (200, b"ok")
    assert seen == [(True, 0)]
    pool.clear()


def test_meanwhile_runs_after_each_write_of_a_request_sent_again_on_a_new_connection(server):
    """GIVEN a kept connection the core system closed while idle WHEN posted with `meanwhile`
    THEN the request is sent again on a new connection and `meanwhile` runs after that write too
    (the caller's work must happen once, whatever the count): one answer, one request registered."""
    pool = sink_client.ConnectionPool()
    kept = sink_client.SinkConnection(f"{server.origin}/r", pool=pool)
    post(kept)
    server.close_idle()
    calls: list[int] = []

    assert kept.post(
        b"{}", {"Idempotency-Key": "k"}, 5.0, meanwhile=lambda: calls.append(len(server.paths))
    ) == (200, b"ok")
    assert kept.reconnects == 1 and server.paths == ["/r", "/r"]
    # The write on the closed connection may fail at once (no call) or only at the answer (a call).
    assert 1 <= len(calls) <= 2
    pool.clear()


def test_a_kept_connection_is_replaced_once_it_is_older_than_the_maximum_age(server):
    """GIVEN a kept connection WHEN requests go out just before and at `MAX_CONNECTION_AGE_SECONDS`
    after it was opened THEN it carries every request up to that age, and the next one goes on a
    new connection (counted as opened, not as a reconnect: nothing failed), whose age starts then."""
    age = sink_client.MAX_CONNECTION_AGE_SECONDS
    pool = sink_client.ConnectionPool()
    readings = [100.0, 100.0 + age - 0.1, 100.0 + age, 100.0 + 2 * age - 0.1, 100.0 + 2 * age]
    kept = sink_client.SinkConnection(f"{server.origin}/r", pool=pool, clock=lambda: readings.pop(0))
    assert post(kept) == post(kept) == (200, b"ok")
    assert len(server.sockets) == 1
    assert post(kept) == post(kept) == (200, b"ok")
    assert len(server.sockets) == 2 and (kept.opened, kept.reconnects) == (2, 0)
    assert post(kept) == (200, b"ok")
    assert len(server.sockets) == 3 and (kept.opened, kept.reconnects) == (3, 0)
    assert len(server.paths) == 5  # every request was sent once
    pool.clear()


def test_a_connection_opened_again_after_the_far_side_closed_it_is_as_old_as_its_reconnect(server):
    """GIVEN a kept connection the core system closed while idle, replaced at t=41 WHEN the next
    requests go out at 41 + the maximum age - 0.1 s and at 41 + the maximum age THEN the first still
    goes on the replacement and the second on a new connection."""
    age = sink_client.MAX_CONNECTION_AGE_SECONDS
    pool = sink_client.ConnectionPool()
    readings = [0.0, 40.0, 41.0, 41.0 + age - 0.1, 41.0 + age]
    kept = sink_client.SinkConnection(f"{server.origin}/r", pool=pool, clock=lambda: readings.pop(0))
    post(kept)
    server.close_idle()
    assert post(kept) == (200, b"ok") and kept.reconnects == 1  # the post at 40 failed at 41, sent again
    assert post(kept) == (200, b"ok") and len(server.sockets) == 2
    assert post(kept) == (200, b"ok") and len(server.sockets) == 3
    assert (kept.opened, kept.reconnects) == (3, 1)
    pool.clear()


def test_a_core_system_that_moved_gets_the_records_once_the_kept_connection_ages_out(server, monkeypatch):
    """GIVEN a core system known by a host name, whose name is switched to another address (a DNS
    failover, a blue/green switch) while the old one keeps answering WHEN a warm function keeps
    sending THEN its requests reach the old address only until its kept connection is
    `MAX_CONNECTION_AGE_SECONDS` old; from then on every request reaches the new one."""
    green = Server()
    try:
        dns = {"core.example": server.http.server_address[1]}
        connect = socket.create_connection

        def resolve(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
            host, _port = address
            return connect(("127.0.0.1", dns[host]) if host in dns else address, *args, **kwargs)

        monkeypatch.setattr(socket, "create_connection", resolve)
        age = sink_client.MAX_CONNECTION_AGE_SECONDS
        readings = [0.0, 1.0, age - 1.0, age, age + 1.0]
        pool = sink_client.ConnectionPool()
        kept = sink_client.SinkConnection(
            "http://core.example:8080/records", pool=pool, clock=lambda: readings.pop(0)
        )
        post(kept)
        dns["core.example"] = green.http.server_address[1]  # the switch; the old address still answers
        post(kept), post(kept)
        assert (len(server.paths), len(green.paths)) == (3, 0)
        post(kept), post(kept)
        assert (len(server.paths), len(green.paths)) == (3, 2) and kept.reconnects == 0
        pool.clear()
    finally:
        green.stop()
