"""GET one http(s) URL on the event loop: one deadline, a checked peer, a bounded body.

The whole fetch (name lookup, connect, TLS, request, status line, headers, body,
every redirect) runs under one ``asyncio.timeout`` of ``MediaConfig.fetch_timeout_s``.
A server that sends a header byte every two seconds therefore cannot hold a fetch
past its deadline, as it could when only each read was bounded; and because the fetch
is a coroutine, cancelling the request that awaits it (its client left, the server
shuts down) closes the fetch's socket at once. Nothing of it runs in a thread pool
that other work needs.

The connection goes to an address the policy checked: the name is resolved here,
every address is checked (``voiceserver.public_ip``) before it is dialled, and the
peer actually reached is checked again; the request carries the URL's host name in
``Host`` and in TLS's SNI, and the certificate is verified against that name.

HTTP/1.1 is spoken directly (``Connection: close``): a status line, at most
``MAX_HEADERS`` header lines of at most ``LINE_LIMIT`` bytes, then a body by
``Content-Length``, chunked transfer coding or up to the close, never more than
``MediaConfig.max_bytes``. Every failure is a ModelInputError naming the field.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import ssl
import threading
from urllib.parse import quote, urljoin, urlsplit

from models.base import ModelInputError
from voiceserver.config import MediaConfig
from voiceserver.public_ip import is_public

LINE_LIMIT = 16 << 10
"""Longest status, header or chunk-size line."""
MAX_HEADERS = 100
"""Header (or trailer) lines one answer may have."""
MAX_INTERIM = 8
"""Interim (1xx) answers skipped before the real one."""
REDIRECTS = (301, 302, 303, 307, 308)
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"
_QUERY_SAFE = _PATH_SAFE + "?"
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")


def field_error(field: str, message: str, code: str = "invalid_field") -> ModelInputError:
    return ModelInputError(f"{field}: {message}", param=field, code=code)


def is_url(value: str) -> bool:
    return value[:8].lower().startswith(("http://", "https://"))


async def fetch_url(url: str, policy: MediaConfig, field: str) -> bytes:
    """The body of ``url`` (following redirects), within ``policy``."""
    if not policy.allow_url_fetch:
        raise field_error(
            field,
            "URLs are not fetched by this server; send the audio as base64, or start the"
            " server with --allow-url-fetch",
            "unsupported_value",
        )
    limit = policy.fetch_timeout_s
    try:
        async with asyncio.timeout(limit):
            return await _follow(url, policy, field)
    except TimeoutError:
        raise field_error(
            field,
            f"fetching the URL took over {limit:g} s (connecting, redirects, headers and"
            " body together); serve it faster or send the audio as base64",
        ) from None


async def _follow(url: str, policy: MediaConfig, field: str) -> bytes:
    for _ in range(policy.max_redirects + 1):
        status, location, body = await _get(url, policy, field)
        if status in REDIRECTS and location:
            url = urljoin(url, location)
            if not is_url(url):
                raise field_error(field, "the URL redirects to something other than http(s)")
            continue
        if status != 200:
            raise field_error(field, f"fetching the URL failed: HTTP {status}")
        return body
    raise field_error(field, f"the URL redirects more than {policy.max_redirects} times")


class _Target:
    """What one GET needs from a URL."""

    def __init__(self, url: str, field: str) -> None:
        if any(ch <= " " or ch == "\x7f" for ch in url):
            raise field_error(field, "a URL must not contain spaces or control characters")
        try:
            parts = urlsplit(url)
            self.port = parts.port
        except ValueError as exc:
            raise field_error(field, f"the URL is malformed ({exc})") from None
        self.tls = parts.scheme.lower() == "https"
        host = parts.hostname
        if parts.scheme.lower() not in ("http", "https") or not host:
            raise field_error(field, "only http and https URLs with a host are fetched")
        self.literal = _ip_literal(host)
        try:
            self.host = host if self.literal else host.encode("idna").decode("ascii")
        except UnicodeError:
            raise field_error(field, f"the URL's host {host[:80]!r} is not a valid name") from None
        self.port = self.port or (443 if self.tls else 80)
        path = quote(parts.path or "/", safe=_PATH_SAFE)
        self.path = path + ("?" + quote(parts.query, safe=_QUERY_SAFE) if parts.query else "")

    def request(self) -> bytes:
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.port != (443 if self.tls else 80):
            host += f":{self.port}"
        return (
            f"GET {self.path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: voiceserver\r\n"
            "Accept: */*\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n"
        ).encode("ascii")


async def _get(url: str, policy: MediaConfig, field: str) -> tuple[int, str, bytes]:
    target = _Target(url, field)
    reader, writer = await _connect(target, policy, field)
    try:
        writer.write(target.request())
        await writer.drain()
        status, headers = await _read_head(reader, field)
        if status != 200:
            return status, headers.get("location", ""), b""
        return 200, "", await _read_body(reader, headers, policy.max_bytes, field)
    except ModelInputError:
        raise
    except asyncio.IncompleteReadError:
        raise field_error(field, "fetching the URL failed: the server closed early") from None
    except (OSError, ValueError) as exc:  # ValueError: a line past LINE_LIMIT
        raise field_error(field, f"fetching the URL failed: {_why(exc)}") from None
    finally:
        writer.transport.abort()


async def _connect(
    target: _Target, policy: MediaConfig, field: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to an address of the host that the policy allows."""
    if target.literal:
        addresses = [target.host]
    else:
        addresses = await _resolve(target.host, target.port, field)
    context = ssl.create_default_context() if target.tls else None
    refused = failure = None
    for address in addresses:
        if not policy.allow_private_urls and not is_public(address):
            refused = address
            continue
        try:
            reader, writer = await asyncio.open_connection(
                address,
                target.port,
                ssl=context,
                server_hostname=target.host if context is not None else None,
                limit=LINE_LIMIT,
            )
        except OSError as exc:  # ssl.SSLError included
            failure = exc
            continue
        # The peer we reached is what counts, whatever name led there.
        peer = writer.get_extra_info("peername")
        if policy.allow_private_urls or (peer and is_public(peer[0])):
            return reader, writer
        refused = peer[0] if peer else address
        writer.transport.abort()
    if refused is not None:
        raise field_error(
            field,
            f"the URL's host resolves to a non-public address ({refused}); such addresses"
            " are fetched only with --allow-private-url-fetch",
            "unsupported_value",
        )
    why = f" ({_why(failure)})" if failure is not None else ""
    raise field_error(field, f"could not connect to the URL's host{why}")


async def _resolve(host: str, port: int, field: str) -> list[str]:
    """The host's addresses, in the resolver's order.

    ``getaddrinfo`` blocks and cannot be interrupted, so it runs in a daemon thread
    of its own: a slow resolver then holds neither a pool thread that other work
    waits for nor the process at exit, and the fetch's deadline still applies.
    """
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[list[str] | BaseException] = loop.create_future()

    def settle(result: list[str] | BaseException) -> None:
        if not answer.done():
            answer.set_result(result)

    def lookup() -> None:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            result: list[str] | BaseException = list(dict.fromkeys(i[4][0] for i in infos))
        except (OSError, UnicodeError) as exc:
            result = exc
        try:
            loop.call_soon_threadsafe(settle, result)
        except RuntimeError:
            pass  # the loop is gone: nobody waits for the answer

    threading.Thread(target=lookup, name="resolve", daemon=True).start()
    result = await answer
    if isinstance(result, BaseException) or not result:
        raise field_error(field, f"the URL's host {host[:80]!r} does not resolve")
    return result


async def _read_head(reader: asyncio.StreamReader, field: str) -> tuple[int, dict[str, str]]:
    """The final answer's status and headers (interim 1xx answers skipped)."""
    for _ in range(MAX_INTERIM + 1):
        line = await reader.readline()
        if not line:
            raise field_error(field, "fetching the URL failed: the server sent no answer")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not _is_status(parts[1]):
            raise field_error(field, "fetching the URL failed: the answer is not HTTP/1.x")
        status = int(parts[1])
        headers = await _read_fields(reader, field)
        if status >= 200:
            return status, headers
    raise field_error(field, f"fetching the URL failed: over {MAX_INTERIM} interim answers")


def _is_status(token: bytes) -> bool:
    return len(token) == 3 and token.isdigit()


async def _read_fields(reader: asyncio.StreamReader, field: str) -> dict[str, str]:
    """Header (or trailer) lines up to the blank line, names lower-cased."""
    fields: dict[str, str] = {}
    for _ in range(MAX_HEADERS + 1):
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            return fields
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise field_error(field, "fetching the URL failed: a malformed header line")
        key = name.strip().lower()
        value = value.strip()
        if key in fields and key == "content-length" and fields[key] != value:
            raise field_error(field, "fetching the URL failed: conflicting Content-Length")
        fields[key] = value
    raise field_error(field, f"fetching the URL failed: over {MAX_HEADERS} header lines")


async def _read_body(
    reader: asyncio.StreamReader, headers: dict[str, str], max_bytes: int, field: str
) -> bytes:
    too_big = field_error(field, f"the URL's file is larger than {max_bytes} bytes")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return await _read_chunked(reader, max_bytes, too_big, field)
    length = headers.get("content-length")
    if length is not None:
        if not (length.isascii() and length.isdigit()):
            raise field_error(field, "fetching the URL failed: a malformed Content-Length")
        if int(length) > max_bytes:
            raise too_big
        return await reader.readexactly(int(length))
    body = bytearray()
    while chunk := await reader.read(1 << 16):
        body += chunk
        if len(body) > max_bytes:
            raise too_big
    return bytes(body)


async def _read_chunked(
    reader: asyncio.StreamReader, max_bytes: int, too_big: ModelInputError, field: str
) -> bytes:
    body = bytearray()
    while True:
        line = await reader.readline()
        size_text = line.split(b";", 1)[0].strip()
        if not _HEX.fullmatch(size_text):
            raise field_error(field, "fetching the URL failed: a malformed chunk size")
        size = int(size_text, 16)
        if size == 0:
            await _read_fields(reader, field)  # trailers
            return bytes(body)
        if len(body) + size > max_bytes:
            raise too_big
        body += await reader.readexactly(size)
        if (await reader.readline()).strip():
            raise field_error(field, "fetching the URL failed: a chunk overran its size")


def _ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _why(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"its TLS certificate is not valid ({exc.verify_message})"
    if isinstance(exc, ssl.SSLError):
        return "the TLS handshake failed"
    if isinstance(exc, ValueError):
        return f"a line longer than {LINE_LIMIT} bytes"
    return type(exc).__name__
