"""``ref_audio`` given as a local path, a ``file://`` URI or an http(s) URL -> its bytes.

vllm-omni's clients send local files as a path or ``file://`` URI and remote
ones as URLs. Both are off unless the operator turns them on:

- a path or ``file://`` URI is read only inside ``MediaConfig.allowed_local_media_path``
  (``--allowed-local-media-path DIR``), after resolving symlinks and ``..``, so
  a link inside the folder cannot reach a file outside it;
- a URL is fetched only with ``--allow-url-fetch``: http and https only, at most
  ``max_bytes`` within ``fetch_timeout_s``, redirects followed (up to
  ``max_redirects``) and checked like the first URL. Loopback, private,
  link-local, multicast and other non-public addresses are refused unless
  ``--allow-private-url-fetch``; the check is made on the address the socket
  actually connected to (every address the name resolves to is checked, and
  the connection is made to a checked address), so a name that resolves to a
  public address first and a private one later cannot slip through.

Everything here blocks: callers run it in a worker thread, never on the event
loop. Every error is a ModelInputError naming the field.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import http.client
import ipaddress
import socket
import ssl
import time
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

from models.base import ModelInputError
from voiceserver.config import MediaConfig

_PATH_PREFIXES = ("./", "../", "~/")
_SHORTEST_AUDIO_B64 = 1024
"""Base64 of a second of audio is longer than this, so a shorter '/'-string is a path."""


def _error(field: str, message: str, code: str = "invalid_field") -> ModelInputError:
    return ModelInputError(f"{field}: {message}", param=field, code=code)


def is_url(value: str) -> bool:
    return value[:8].lower().startswith(("http://", "https://"))


def is_local_path(value: str) -> bool:
    """A path or ``file://`` URI, as opposed to base64 audio or a data: URI."""
    if value[:7].lower() == "file://" or value.startswith(_PATH_PREFIXES):
        return True
    if not value.startswith("/"):
        return False
    if len(value) < _SHORTEST_AUDIO_B64:
        return True
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return True
    return False


def needs_loading(value: object) -> bool:
    return isinstance(value, str) and (is_url(value) or is_local_path(value))


async def load_named_media(
    value: object, policy: MediaConfig, accepted: bool, field: str = "ref_audio"
) -> object:
    """``value`` itself, or the bytes it names when it is a path, ``file://`` URI or URL
    and the model takes ``field`` at all (``accepted``): read in a worker thread."""
    if not accepted or not needs_loading(value):
        return value
    assert isinstance(value, str)
    return await asyncio.to_thread(load_media, value, policy, field)


def load_media(value: str, policy: MediaConfig, field: str = "ref_audio") -> bytes:
    """The bytes a path, ``file://`` URI or URL names, within the policy (blocking)."""
    if is_url(value):
        return fetch_url(value, policy, field)
    return read_local(value, policy, field)


def read_local(value: str, policy: MediaConfig, field: str) -> bytes:
    root = policy.allowed_local_media_path
    if root is None:
        raise _error(
            field,
            "local files are not read by this server; send the audio as base64, or start"
            " the server with --allowed-local-media-path DIR",
            "unsupported_value",
        )
    if value[:7].lower() == "file://":
        parts = urlsplit(value)
        if parts.netloc not in ("", "localhost"):
            raise _error(field, "a file:// URI must name a local file (file:///path)")
        raw = unquote(parts.path)
    else:
        raw = value
    try:
        allowed = Path(root).expanduser().resolve(strict=True)
        path = Path(raw).expanduser().resolve(strict=True)
    except (OSError, RuntimeError):
        raise _error(field, "no such file in the allowed media folder") from None
    if not path.is_relative_to(allowed):
        raise _error(
            field,
            "the file is outside the allowed media folder (symlinks are followed before"
            " this check); put it under the folder given with --allowed-local-media-path",
            "unsupported_value",
        )
    if not path.is_file():
        raise _error(field, "no such file in the allowed media folder")
    with open(path, "rb") as f:
        data = f.read(policy.max_bytes + 1)
    if len(data) > policy.max_bytes:
        raise _error(field, f"the file is larger than {policy.max_bytes} bytes")
    return data


def fetch_url(url: str, policy: MediaConfig, field: str) -> bytes:
    if not policy.allow_url_fetch:
        raise _error(
            field,
            "URLs are not fetched by this server; send the audio as base64, or start the"
            " server with --allow-url-fetch",
            "unsupported_value",
        )
    deadline = time.monotonic() + policy.fetch_timeout_s
    for _ in range(policy.max_redirects + 1):
        status, location, body = _get(url, policy, field, deadline)
        if status in (301, 302, 303, 307, 308) and location:
            url = urljoin(url, location)
            if not is_url(url):
                raise _error(field, "the URL redirects to something other than http(s)")
            continue
        if status != 200:
            raise _error(field, f"fetching the URL failed: HTTP {status}")
        return body
    raise _error(field, f"the URL redirects more than {policy.max_redirects} times")


def _get(url: str, policy: MediaConfig, field: str, deadline: float) -> tuple[int, str, bytes]:
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname
    if scheme not in ("http", "https") or not host:
        raise _error(field, "only http and https URLs are fetched")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        raise _error(field, "the URL's port is not a number") from None
    sock = _connect(host, port, policy, field, deadline)
    try:
        if scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        conn = http.client.HTTPConnection(host, port)
        conn.sock = sock  # already connected to the checked address
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        conn.request("GET", path, headers={"User-Agent": "voiceserver", "Accept": "*/*"})
        response = conn.getresponse()
        if response.status != 200:
            return response.status, response.getheader("location") or "", b""
        length = response.getheader("content-length")
        if length and length.isdigit() and int(length) > policy.max_bytes:
            raise _error(field, f"the URL's file is larger than {policy.max_bytes} bytes")
        chunks, size = [], 0
        while True:
            _remaining(deadline, policy, field)
            chunk = response.read1(65536)
            if not chunk:
                break
            size += len(chunk)
            if size > policy.max_bytes:
                raise _error(field, f"the URL's file is larger than {policy.max_bytes} bytes")
            chunks.append(chunk)
        return 200, "", b"".join(chunks)
    except (OSError, http.client.HTTPException) as exc:
        if isinstance(exc, TimeoutError | socket.timeout):
            raise _error(
                field, f"fetching the URL took over {policy.fetch_timeout_s:g} s"
            ) from None
        raise _error(field, f"fetching the URL failed: {type(exc).__name__}") from None
    finally:
        sock.close()


def _remaining(deadline: float, policy: MediaConfig, field: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _error(field, f"fetching the URL took over {policy.fetch_timeout_s:g} s")
    return left


def _connect(
    host: str, port: int, policy: MediaConfig, field: str, deadline: float
) -> socket.socket:
    """A socket connected to an address of ``host`` that the policy allows."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise _error(field, f"the URL's host {host[:80]!r} does not resolve") from None
    refused = None
    for family, kind, proto, _, address in infos:
        if not policy.allow_private_urls and not _public(address[0]):
            refused = address[0]
            continue
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(_remaining(deadline, policy, field))
            sock.connect(address)
            # The peer we reached is what counts, whatever name led there.
            if policy.allow_private_urls or _public(sock.getpeername()[0]):
                return sock
            refused = sock.getpeername()[0]
        except OSError:
            pass
        sock.close()
    if refused is not None:
        raise _error(
            field,
            f"the URL's host resolves to a non-public address ({refused}); such addresses"
            " are fetched only with --allow-private-url-fetch",
            "unsupported_value",
        )
    raise _error(field, "could not connect to the URL's host")


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast
