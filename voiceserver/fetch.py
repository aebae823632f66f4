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

Each hop is one httpx request to the checked address (``trust_env`` off: no proxy
or netrc from the environment; no redirects of its own: each target is checked
here like the first), its body read raw (``Accept-Encoding: identity``) and never
past ``MediaConfig.max_bytes``. Every failure is a ModelInputError naming the field.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import threading
from urllib.parse import quote, urljoin, urlsplit

import httpx

from models.base import ModelInputError
from voiceserver.config import MediaConfig
from voiceserver.public_ip import is_public

REDIRECTS = (301, 302, 303, 307, 308)
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"
_QUERY_SAFE = _PATH_SAFE + "?"


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

    def url_at(self, address: str) -> str:
        """The URL with ``address`` (a checked IP) in place of the host name."""
        host = f"[{address}]" if ":" in address else address
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}{self.path}"

    def headers(self) -> dict[str, str]:
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.port != (443 if self.tls else 80):
            host += f":{self.port}"
        return {
            "Host": host,
            "User-Agent": "voiceserver",
            "Accept": "*/*",
            "Accept-Encoding": "identity",
            "Connection": "close",
        }


async def _get(url: str, policy: MediaConfig, field: str) -> tuple[int, str, bytes]:
    """One hop: its status, its redirect target and, for a 200, its body."""
    target = _Target(url, field)
    if target.literal:
        addresses = [target.host]
    else:
        addresses = await _resolve(target.host, target.port, field)
    refused = failure = None
    for address in addresses:
        if not policy.allow_private_urls and not is_public(address):
            refused = address
            continue
        try:
            return await _get_from(address, target, policy, field)
        except _Refused as exc:
            refused = exc.address
        except httpx.ConnectError as exc:
            failure = exc
    if refused is not None:
        raise field_error(
            field,
            f"the URL's host resolves to a non-public address ({refused}); such addresses"
            " are fetched only with --allow-private-url-fetch",
            "unsupported_value",
        )
    why = f" ({_why(failure)})" if failure is not None else ""
    raise field_error(field, f"could not connect to the URL's host{why}")


class _Refused(Exception):
    """The peer reached is not an address the policy allows."""

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.address = address


async def _get_from(
    address: str, target: _Target, policy: MediaConfig, field: str
) -> tuple[int, str, bytes]:
    """GET ``target`` from ``address``; TLS checks the certificate against its name."""
    verify = ssl.create_default_context() if target.tls else False
    transport = httpx.AsyncHTTPTransport(verify=verify, retries=0)
    async with httpx.AsyncClient(
        transport=transport, trust_env=False, follow_redirects=False, timeout=None
    ) as client:
        extensions = {"sni_hostname": target.host} if target.tls else {}
        request = client.build_request(
            "GET", target.url_at(address), headers=target.headers(), extensions=extensions
        )
        try:
            response = await client.send(request, stream=True)
        except httpx.ConnectError:
            raise
        except httpx.HTTPError as exc:
            raise field_error(field, f"fetching the URL failed: {_why(exc)}") from None
        try:
            # The peer we reached is what counts, whatever name led there.
            stream = response.extensions.get("network_stream")
            peer = stream.get_extra_info("server_addr") if stream is not None else None
            if not policy.allow_private_urls and not (peer and is_public(peer[0])):
                raise _Refused(peer[0] if peer else address)
            if response.status_code != 200:
                return response.status_code, response.headers.get("location", ""), b""
            return 200, "", await _read_body(response, policy.max_bytes, field)
        except httpx.HTTPError as exc:
            raise field_error(field, f"fetching the URL failed: {_why(exc)}") from None
        finally:
            await response.aclose()


async def _read_body(response: httpx.Response, max_bytes: int, field: str) -> bytes:
    too_big = field_error(field, f"the URL's file is larger than {max_bytes} bytes")
    length = response.headers.get("content-length")
    if length is not None and length.isascii() and length.isdigit() and int(length) > max_bytes:
        raise too_big
    body = bytearray()
    async for chunk in response.aiter_raw():
        body += chunk
        if len(body) > max_bytes:
            raise too_big
    return bytes(body)


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


def _ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _why(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    for err in (exc, cause):
        if isinstance(err, ssl.SSLCertVerificationError):
            return f"its TLS certificate is not valid ({err.verify_message})"
        if isinstance(err, ssl.SSLError):
            return "the TLS handshake failed"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"the answer is not valid HTTP/1.1 ({str(exc)[:120]})"
    return type(exc).__name__
