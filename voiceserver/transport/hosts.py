"""Which names the server answers to: the Host check against DNS rebinding.

A web page on ``evil.example`` can re-point its own name at 127.0.0.1 (DNS
rebinding). The browser then sends ``Host: evil.example:8000`` and ``Origin:
http://evil.example:8000`` to the local server: same-origin to the browser, and
to the Origin check (:mod:`voiceserver.transport.origin`), which compares the
two. Only the Host name betrays the attack, so every HTTP request and WebSocket
upgrade must name this server. Accepted (the port is not compared):

- ``localhost`` and ``*.localhost`` (RFC 6761: they always mean loopback, and
  browsers resolve them so themselves);
- any IP address: a browser sends an address as Host only when the page came
  from that address, i.e. from this server (this lets load balancers and
  kubelet probes, which use addresses, through);
- the ``--host`` the server is bound to, when it is a name;
- ``ServerConfig.allowed_hosts`` (``--allowed-host``): exact names,
  ``.example.com`` for that domain and every subdomain, ``*.example.com`` for the
  subdomains only, ``*`` for every name (the check is off).

Anything else gets 421 ``host_not_allowed`` whose message names the flag to add;
an HTTP/1.1 request without exactly one Host gets 400 ``missing_host`` (RFC 9112
section 3.2). HTTP/1.0 without Host is let through: it predates Host, no browser
sends it, and simple health checkers still do.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from protocol.errors import ErrorCode

log = logging.getLogger(__name__)

HOST_NOT_ALLOWED = str(ErrorCode.HOST_NOT_ALLOWED)
MISSING_HOST = str(ErrorCode.MISSING_HOST)
MISDIRECTED = 421
_WILDCARD_BINDS = ("", "0.0.0.0", "::", "*")
_LOGGED_REFUSALS = 32
"""Distinct refused names logged (once each), so a mistaken deployment is seen."""


def host_name(host: str) -> str | None:
    """The name of a Host header value, lower-cased, without port or trailing dot;
    IPv6 addresses without their brackets. None where it is malformed."""
    host = host.strip().lower()
    if host.startswith("["):  # an IPv6 address, as URLs write one
        end = host.find("]")
        rest = host[end + 1 :] if end > 0 else ":x"
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return None
        inner = host[1:end]
        return inner if _is_address(inner) else None
    name, _, port = host.partition(":")
    if port and not port.isdigit():
        return None
    name = name.rstrip(".")
    return name or None


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _is_loopback_bind(host: str) -> bool:
    name = host_name(host) or host
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_allowed_host(entry: str) -> str:
    """An ``--allowed-host`` entry, normalized; ValueError saying what is allowed."""
    value = entry.strip().lower()
    if value == "*":
        return value
    if not value or "/" in value or "@" in value or " " in value:
        raise ValueError(
            f"{entry!r} is not a host name: give a name as clients send it in Host, e.g. "
            "tts.example.com, .example.com (the domain and its subdomains) or * (any)"
        )
    wildcard = value.startswith(("*.", "."))
    bare = value.lstrip("*").lstrip(".")
    name = host_name(bare)
    if name is None:
        raise ValueError(f"{entry!r} is not a host name (a port, if any, must be a number)")
    if wildcard:
        return ("*." if value.startswith("*.") else ".") + name
    return name


@dataclass(frozen=True)
class HostPolicy:
    """The names one server answers to."""

    names: frozenset[str]
    domains: tuple[str, ...]
    """``.example.com`` entries, without the dot: the name and its subdomains."""
    subdomains: tuple[str, ...]
    """``*.example.com`` entries, with the dot: subdomains only."""
    any_host: bool
    bind: str

    @classmethod
    def build(cls, bind: str, allowed: Iterable[str]) -> HostPolicy:
        entries = [check_allowed_host(a) for a in allowed]
        names = {e for e in entries if not e.startswith((".", "*"))}
        bound = host_name(bind)
        if bound and bind not in _WILDCARD_BINDS and not _is_address(bound):
            names.add(bound)
        return cls(
            names=frozenset(names),
            domains=tuple(e[1:] for e in entries if e.startswith(".")),
            subdomains=tuple(e[1:] for e in entries if e.startswith("*.")),
            any_host="*" in entries,
            bind=bind,
        )

    def allows(self, host: str) -> bool:
        if self.any_host:
            return True
        name = host_name(host)
        if name is None:
            return False
        if name == "localhost" or name.endswith(".localhost") or _is_address(name):
            return True
        if name in self.names:
            return True
        if any(name == d or name.endswith("." + d) for d in self.domains):
            return True
        return any(name.endswith(s) for s in self.subdomains)

    @property
    def public(self) -> bool:
        """Bound to a wildcard or non-loopback address: clients may use other names."""
        return not _is_loopback_bind(self.bind)

    def describe(self) -> str:
        if self.any_host:
            return "every Host name (--allowed-host '*': the DNS-rebinding check is off)"
        extra = [*sorted(self.names), *(f".{d}" for d in self.domains)]
        extra += [f"*{s}" for s in self.subdomains]
        listed = ", ".join(["localhost", "*.localhost", "IP addresses", *extra])
        return f"Host names answered: {listed}"


def _error(code: str, message: str) -> bytes:
    kind = "invalid_request_error"
    return json.dumps(
        {"error": {"message": message, "type": kind, "param": "host", "code": code}}
    ).encode()


class HostGuard:
    """ASGI middleware refusing requests and WebSocket upgrades whose Host this
    server does not answer to (see the module docstring). It runs before every
    other middleware, so a refused request gets no CORS headers and spends nothing."""

    def __init__(self, app: ASGIApp, policy: HostPolicy) -> None:
        self.app = app
        self.policy = policy
        self._logged: set[str] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        hosts = [v.decode("latin-1") for k, v in scope["headers"] if k.lower() == b"host"]
        refusal = self._refusal(hosts, scope.get("http_version", "1.1"))
        if refusal is None:
            await self.app(scope, receive, send)
            return
        await _refuse(scope, send, *refusal)

    def _refusal(self, hosts: list[str], http_version: str) -> tuple[int, bytes] | None:
        if len(hosts) > 1:
            message = f"a request must carry one Host header, not {len(hosts)}"
            return 400, _error(MISSING_HOST, message)
        if not hosts:
            if http_version == "1.0":
                return None
            message = "HTTP/1.1 requests must carry a Host header (RFC 9112, section 3.2)"
            return 400, _error(MISSING_HOST, message)
        host = hosts[0]
        if self.policy.allows(host):
            return None
        name = host_name(host) or host
        message = (
            f"this server does not answer to the Host {host!r} (a guard against DNS"
            f" rebinding); if {name!r} is a name of this server, start it with"
            f" --allowed-host {name}"
        )
        self._log_once(host, name)
        return MISDIRECTED, _error(HOST_NOT_ALLOWED, message)

    def _log_once(self, host: str, name: str) -> None:
        if name in self._logged or len(self._logged) >= _LOGGED_REFUSALS:
            return
        self._logged.add(name)
        log.warning(
            "refused a request for Host %r (421 host_not_allowed); if clients reach this"
            " server as %r, start it with --allowed-host %s. %s",
            host[:200],
            name[:200],
            name[:200],
            self.policy.describe(),
        )


async def _refuse(scope: Scope, send: Send, status: int, body: bytes) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    elif "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008, "reason": "host not allowed"})
