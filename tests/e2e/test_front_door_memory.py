"""What one HTTP connection may make the server hold: pipelined requests and headers.

Before: six connections pipelining ``GET /health`` without reading the answers took
the server from 293 MB to 3,944 MB in 38 s, never released (uvicorn parses every
request in each read, ~7,000 per 256 KiB, queues them all, and reads again after
each answer); and a 45 MiB header was read whole and answered 200. Now a connection
is parsed no further than the request being answered (the rest waits, unread, in the
socket), a connection whose client reads nothing is reset, and request headers
above ``Limits.max_header_bytes`` get 431 and a closed connection.

The server runs in its own process, so its RSS is its own.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from bench.spawn import SpawnedServer, spawn_server
from tests.e2e.proc import rss_mb
from tests.e2e.rawhttp import Reader, connect, exchange, head, websocket_handshake
from voiceserver.config import Limits

ATTACKERS = 6
ATTACK_S = 8.0
GROWTH_BOUND_MB = 100
"""Allowed RSS growth under the pipelining attack (it was 3,650 MB in 38 s)."""
GIVE_UP_MB = 1000
"""Stop the attack once the server has grown this much: the bound is broken 10x over."""
SLOW_READER_S = 1.0
PROBE_EVERY_S = 0.5
MAX_HEADER = Limits().max_header_bytes


@pytest.fixture(scope="module")
def server() -> Iterator[SpawnedServer]:
    with spawn_server("tiny", args=("--limit", f"slow_reader_timeout_s={SLOW_READER_S}")) as s:
        yield s


def address(server: SpawnedServer) -> tuple[str, int]:
    host, port = server.http.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def attacker(server: SpawnedServer) -> socket.socket:
    sock = connect(*address(server))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # read nothing, hold little
    sock.setblocking(False)
    return sock


def test_pipelined_requests_never_read_do_not_grow_the_server(server: SpawnedServer) -> None:
    assert server.pid is not None
    host, port = address(server)
    burst = head("GET", "/health", [("Host", f"{host}:{port}")]) * 2000
    with httpx.Client(base_url=server.http, timeout=10) as http:
        assert http.get("/health").status_code == 200
    base = peak = rss_mb(server.pid)
    socks = [attacker(server) for _ in range(ATTACKERS)]
    sent = resets = 0
    longest_health_s = 0.0
    statuses: set[int] = set()
    deadline = time.monotonic() + ATTACK_S
    next_probe = 0.0
    try:
        with httpx.Client(base_url=server.http, timeout=10) as http:
            while time.monotonic() < deadline and peak - base < GIVE_UP_MB:
                _, writable, _ = select.select([], socks, [], 0.05)
                for sock in writable:
                    try:
                        sent += sock.send(burst)
                    except BlockingIOError:
                        pass
                    except OSError:  # reset: the server dropped a client that reads nothing
                        resets += 1
                        sock.close()
                        socks[socks.index(sock)] = attacker(server)
                peak = max(peak, rss_mb(server.pid))
                if time.monotonic() > next_probe:
                    started = time.monotonic()
                    statuses.add(http.get("/health").status_code)  # others are answered
                    longest_health_s = max(longest_health_s, time.monotonic() - started)
                    next_probe = time.monotonic() + PROBE_EVERY_S
    finally:
        for sock in socks:
            sock.close()
    growth = peak - base
    facts = (
        f"RSS {base:.0f} -> {peak:.0f} MB, {sent / 2**20:.1f} MiB of requests taken, "
        f"{resets} resets, slowest /health {longest_health_s * 1000:.0f} ms "
        f"(statuses {sorted(statuses)})"
    )
    print(facts)
    assert growth < GROWTH_BOUND_MB, facts
    # The server stopped reading: the attackers could hand over only a bounded amount.
    assert sent < ATTACKERS * 64 * 2**20, facts
    # Another client is answered throughout (429 where the attack spent the budget
    # of the address it shares with it).
    assert statuses <= {200, 429} and longest_health_s < 5, facts


def test_a_client_that_reads_no_answers_is_reset(server: SpawnedServer) -> None:
    """Its answers fill the socket; after twice the slow-reader deadline it is dropped.
    (Large answers, so that the kernel's buffers fill in a few requests.)"""
    host, port = address(server)
    sock = attacker(server)
    burst = head("GET", "/sdk/voiceserver.js", [("Host", f"{host}:{port}")]) * 200
    deadline = time.monotonic() + 60
    reset = False
    try:
        while time.monotonic() < deadline and not reset:
            select.select([], [sock], [], 0.1)
            try:
                sock.send(burst)
            except BlockingIOError:
                pass
            except OSError:
                reset = True
    finally:
        sock.close()
    assert reset, "a connection that never read its answers was kept for 60 s"


def test_pipelined_requests_are_all_answered_in_order(server: SpawnedServer) -> None:
    """Pipelining within the bound still works (answers in order, none lost)."""
    host, port = address(server)
    paths = ["/health", "/v1/models", "/nope", "/health"] * 50
    data = b"".join(head("GET", p, [("Host", f"{host}:{port}")]) for p in paths)
    sock = connect(host, port)
    try:
        sock.sendall(data)
        reader = Reader(sock)
        statuses = [reader.answer(check_closed=False).status for _ in paths]
    finally:
        sock.close()
    assert statuses == [404 if p == "/nope" else 200 for p in paths]


def test_a_45_mib_header_gets_431_and_the_connection_closes(server: SpawnedServer) -> None:
    assert server.pid is not None
    host, port = address(server)
    base = rss_mb(server.pid)
    big = head("GET", "/health", [("Host", f"{host}:{port}"), ("X-Big", "a" * (45 << 20))])
    started = time.monotonic()
    answer = exchange(host, port, big, check_closed=True)
    elapsed = time.monotonic() - started
    assert answer.status == 431, answer
    assert answer.json()["error"]["code"] == "headers_too_large"
    assert "max_header_bytes" in answer.json()["error"]["message"]
    assert answer.closed
    assert elapsed < 10, elapsed
    assert rss_mb(server.pid) - base < GROWTH_BOUND_MB


def test_many_small_headers_count_too(server: SpawnedServer) -> None:
    host, port = address(server)
    many = [("Host", f"{host}:{port}")] + [(f"X-{i}", "v" * 20) for i in range(5000)]
    answer = exchange(host, port, head("GET", "/health", many), check_closed=True)
    assert answer.status == 431 and answer.closed


def test_the_header_limit_is_exact(server: SpawnedServer) -> None:
    """A request whose headers total the limit passes; one byte more is refused."""
    host, port = address(server)
    fixed = [("Host", f"{host}:{port}")]

    def with_cookie(total: int) -> bytes:
        used = len("/health") + sum(len(k) + len(v) + 4 for k, v in fixed) + len("Cookie") + 4
        return head("GET", "/health", [*fixed, ("Cookie", "c" * (total - used))])

    assert exchange(host, port, with_cookie(MAX_HEADER)).status == 200
    refused = exchange(host, port, with_cookie(MAX_HEADER + 1), check_closed=True)
    assert refused.status == 431 and refused.closed


def test_a_websocket_handshake_with_a_huge_header_gets_431(server: SpawnedServer) -> None:
    host, port = address(server)
    data = websocket_handshake(
        "/v1/audio/speech/ws", f"{host}:{port}", [("Cookie", "c" * (45 << 20))]
    )
    answer = exchange(host, port, data, check_closed=True)
    assert answer.status == 431 and answer.closed


def test_a_websocket_handshake_line_the_socket_library_refuses_gets_431(
    server: SpawnedServer,
) -> None:
    """The WebSocket library reads handshake lines of 8 KiB at most and then hangs up
    without an answer; the front door says why instead."""
    host, port = address(server)
    data = websocket_handshake("/v1/audio/speech/ws", f"{host}:{port}", [("Cookie", "c" * 9000)])
    answer = exchange(host, port, data, check_closed=True)
    assert answer.status == 431 and answer.closed
    assert "8" in answer.json()["error"]["message"]


def test_a_malformed_request_gets_400_and_the_connection_closes(server: SpawnedServer) -> None:
    host, port = address(server)
    data = head("GET", "/health", [("Host", f"{host}:{port}")])[:-2] + b"no colon here\r\n\r\n"
    answer = exchange(host, port, data, check_closed=True)
    assert answer.status == 400 and answer.closed


def chunked_post(host: str, port: int, trailer: bytes) -> bytes:
    body = b'{"input": "Hi."}'
    return (
        head(
            "POST",
            "/v1/audio/speech",
            [
                ("Host", f"{host}:{port}"),
                ("Content-Type", "application/json"),
                ("Transfer-Encoding", "chunked"),
            ],
        )
        + b"%x\r\n%s\r\n0\r\n" % (len(body), body)
        + trailer
        + b"\r\n"
    )


def test_huge_trailers_get_431_and_the_connection_closes(server: SpawnedServer) -> None:
    """Trailers (headers after a chunked body) count against the same limit."""
    assert server.pid is not None
    host, port = address(server)
    base = rss_mb(server.pid)
    small = exchange(host, port, chunked_post(host, port, b"X-Sum: 1\r\n"), method="POST")
    assert small.status == 200 and small.body
    huge = chunked_post(host, port, b"X-Sum: " + b"s" * (45 << 20) + b"\r\n")
    answer = exchange(host, port, huge, method="POST", check_closed=True)
    assert answer.status == 431 and answer.closed
    assert answer.json()["error"]["code"] == "headers_too_large"
    assert rss_mb(server.pid) - base < GROWTH_BOUND_MB
