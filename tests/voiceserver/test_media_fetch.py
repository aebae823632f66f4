"""voiceserver.fetch and voiceserver.public_ip against real loopback servers: one deadline
for the whole fetch, a cancelled fetch closes its socket, bounded bodies in every
framing, and IPv6 forms that carry a non-public IPv4 address count as non-public."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

import pytest

from models.base import ModelInputError
from voiceserver.config import MediaConfig
from voiceserver.fetch import fetch_url
from voiceserver.public_ip import is_public

POLICY = MediaConfig(allow_url_fetch=True, allow_private_urls=True, fetch_timeout_s=1.0)
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("2606:4700:4700::1111", True),
        ("127.0.0.1", False),
        ("::ffff:127.0.0.1", False),
        ("::ffff:8.8.8.8", True),
        # NAT64, well-known prefix: the IPv4 address inside is the destination.
        ("64:ff9b::7f00:1", False),
        ("64:ff9b::a00:1", False),
        ("64:ff9b::a9fe:a9fe", False),  # 169.254.169.254, the cloud metadata address
        ("64:ff9b::808:808", True),
        # NAT64, local-use prefix (RFC 8215): one operator's network.
        ("64:ff9b:1::7f00:1", False),
        ("64:ff9b:1::808:808", False),
        # 6to4 relays to the IPv4 address in bits 16-47.
        ("2002:7f00:1::1", False),
        ("2002:c0a8:101::1", False),
        # IPv4-compatible (deprecated).
        ("::7f00:1", False),
        ("::a00:1", False),
        # Teredo (client 192.0.2.45 obfuscated in the last 32 bits).
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", False),
        ("fe80::1%eth0", False),
        ("ff02::1", False),
    ],
)
def test_embedded_ipv4_addresses_are_judged_by_what_they_reach(address: str, public: bool) -> None:
    assert is_public(address) is public


async def fetch(url: str, policy: MediaConfig = POLICY) -> bytes:
    return await fetch_url(url, policy, "ref_audio")


class Loopback:
    """An asyncio TCP server on loopback running ``handler`` per connection; records
    when each connection closed (by either side)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.closed: list[float] = []
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self.closed.append(time.monotonic())
            writer.close()

    def url(self, path: str = "/a.wav") -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}{path}"


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[Loopback]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> Loopback:
        loop = Loopback(handler)
        loop.server = await asyncio.start_server(loop._serve, "127.0.0.1", 0)
        servers.append(loop.server)
        return loop

    yield start
    for server in servers:
        server.close()


async def until_closed(reader: asyncio.StreamReader) -> None:
    while await reader.read(1024):
        pass


def drip(prefix: bytes, interval: float = 0.1) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(prefix)
        gone = asyncio.ensure_future(until_closed(reader))
        while not gone.done():
            writer.write(b"a")
            await writer.drain()
            await asyncio.wait({gone}, timeout=interval)

    return handler


def answer(*parts: bytes) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for part in parts:
            writer.write(part)
        await writer.drain()

    return handler


async def test_dripped_headers_end_at_the_one_deadline(serve) -> None:  # type: ignore[no-untyped-def]
    server = await serve(drip(b"HTTP/1.1 200 OK\r\nX-Drip: "))
    started = time.monotonic()
    with pytest.raises(ModelInputError, match=r"took over 1 s") as err:
        await fetch(server.url())
    assert err.value.param == "ref_audio"
    assert time.monotonic() - started < 1.5
    await asyncio.sleep(0.3)
    assert server.closed  # the socket was closed, not left dripping


async def test_a_dripped_body_ends_at_the_same_deadline(serve) -> None:  # type: ignore[no-untyped-def]
    server = await serve(drip(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"))
    started = time.monotonic()
    with pytest.raises(ModelInputError, match="took over"):
        await fetch(server.url())
    assert time.monotonic() - started < 1.5


async def test_redirects_share_the_deadline(serve) -> None:  # type: ignore[no-untyped-def]
    async def slow_redirect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.4)
        writer.write(b"HTTP/1.1 302 Found\r\nLocation: /again\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()

    server = await serve(slow_redirect)
    policy = replace(POLICY, max_redirects=10)
    started = time.monotonic()
    with pytest.raises(ModelInputError, match="took over 1 s"):
        await fetch(server.url(), policy)
    assert time.monotonic() - started < 1.5


async def test_a_cancelled_fetch_closes_its_socket(serve) -> None:  # type: ignore[no-untyped-def]
    server = await serve(drip(b"HTTP/1.1 200 OK\r\nX-Drip: "))
    task = asyncio.ensure_future(fetch(server.url(), replace(POLICY, fetch_timeout_s=30)))
    await asyncio.sleep(0.3)
    cancelled = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.3)
    assert server.closed and server.closed[0] - cancelled < 0.3


@pytest.mark.parametrize(
    "parts",
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n",
        ),
        (b"HTTP/1.0 200 OK\r\n\r\nhello",),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",),
    ],
)
async def test_bodies_in_every_framing(serve, parts: tuple[bytes, ...]) -> None:  # type: ignore[no-untyped-def]
    server = await serve(answer(*parts))
    assert await fetch(server.url()) == b"hello"


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ((b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n",), "larger than 1000 bytes"),
        (
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"5000\r\n" + b"x" * 2000),
            "larger than",
        ),
        ((b"HTTP/1.0 200 OK\r\n\r\n" + b"x" * 5000,), "larger than"),
        # Heads over httpcore's 100 KiB, in one line or in many:
        ((b"HTTP/1.1 200 OK\r\nX: " + b"a" * 150_000 + b"\r\n\r\n",), "not valid HTTP"),
        ((b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 25_000 + b"\r\n",), "not valid HTTP"),
        ((b"SSH-2.0-OpenSSH\r\n",), "not valid HTTP"),
        ((b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",), "not valid HTTP"),
        ((b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",), "not valid HTTP"),
        ((b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhi",), "not valid HTTP"),
        ((b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",), "HTTP 404"),
        ((b"HTTP/1.1 302 Found\r\nLocation: ftp://x/\r\n\r\n",), "other than http"),
        ((b"",), "without sending a response"),
    ],
)
async def test_bad_answers_are_field_errors(serve, parts: tuple[bytes, ...], message: str) -> None:  # type: ignore[no-untyped-def]
    server = await serve(answer(*parts))
    with pytest.raises(ModelInputError, match=message) as err:
        await fetch(server.url(), replace(POLICY, max_bytes=1000))
    assert err.value.param == "ref_audio"


async def test_redirect_loops_stop(serve) -> None:  # type: ignore[no-untyped-def]
    server = await serve(answer(b"HTTP/1.1 302 Found\r\nLocation: /loop\r\n\r\n"))
    with pytest.raises(ModelInputError, match="more than 3 times"):
        await fetch(server.url())


@pytest.mark.parametrize(
    "host",
    ["[64:ff9b::7f00:1]", "[2002:7f00:1::1]", "[::7f00:1]", "[::ffff:127.0.0.1]", "127.0.0.1"],
)
async def test_non_public_addresses_are_refused_before_connecting(host: str) -> None:
    policy = replace(POLICY, allow_private_urls=False)
    with pytest.raises(ModelInputError, match="non-public") as err:
        await fetch(f"http://{host}:9/a.wav", policy)
    assert err.value.code == "unsupported_value"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://a b/", "spaces or control"),
        ("http://x/\x00", "spaces or control"),
        ("http://[::1/", "malformed"),
        ("http://127.0.0.1:99999/", "malformed"),
        ("http:///a.wav", "with a host"),
        ("http://name.invalid/a.wav", "does not resolve"),
    ],
)
async def test_malformed_urls_are_field_errors(url: str, message: str) -> None:
    with pytest.raises(ModelInputError, match=message):
        await fetch(url)
