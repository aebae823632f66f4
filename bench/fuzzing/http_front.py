"""Front-door probes: raw HTTP at the server's door, played alongside every barrage.

A probe is one connection's worth of requests, written at once (pipelined), each
with the answer it must get. The rules come from the documents (docs/browsers.md,
"Host names" and "Request size"), not from the server's code:

- ``front.host.*``: ``GET /health``, ``/v1/models``, a missing page, or a WebSocket
  handshake on either socket, with a Host the server answers to (``localhost``,
  ``*.localhost``, IP addresses: 200 / 404 / 101), one it must refuse (any other
  name, or a malformed one: 421 ``host_not_allowed``, also with the matching
  ``Origin`` a rebinding page sends), none or two (400 ``missing_host``; HTTP/1.0
  without Host is served), or an allowed Host with a foreign ``Origin`` (403).
  Anything the server serves may instead be 429 ``rate_limited`` (the whole run
  shares one address).
- ``front.pipeline``: 2-24 of those in one write; every one answered, in order.
- ``front.header.*``: headers summing to at most ``Limits.max_header_bytes``
  (served), more (431 ``headers_too_large`` and the connection closed), up to
  1 MiB, many small ones, trailers of a chunked body around the same limit, and
  WebSocket handshake lines around 8 KiB (the socket library's line limit: 431
  above it).

:mod:`bench.fuzzing.http_wire` plays them and judges the answers.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from urllib.parse import urlsplit

from hypothesis import strategies as st

from bench.fuzzing.facts import COMPAT_PATH, WS_PATH, ServerFacts
from voiceserver.config import Limits

FRONT_PROBES = 12
"""Front-door probes per barrage."""
HEADER_LIMIT = Limits().max_header_bytes
"""The documented default; a server run with another ``max_header_bytes`` needs this changed."""
WS_LINE_MAX = 8192
"""Longest WebSocket handshake line, CRLF included (docs/browsers.md)."""
SERVED = frozenset({429})
"""Statuses any served request may get instead: the run's address is over its budget."""


@dataclass(frozen=True, slots=True)
class Expect:
    statuses: frozenset[int]
    codes: frozenset[str] = frozenset()
    """Error codes that fit when the answer is a JSON error (empty: not checked)."""
    closes: bool = False
    """The server must close the connection after this answer."""


@dataclass(frozen=True, slots=True)
class Request:
    label: str
    data: bytes
    expect: Expect
    upgrade: bool = False
    """A WebSocket handshake: after a 101 the connection speaks no more HTTP."""


@dataclass(frozen=True, slots=True)
class FrontProbe:
    family: str
    requests: tuple[Request, ...]

    @property
    def last_closes(self) -> bool:
        return self.requests[-1].expect.closes


def _port(facts: ServerFacts) -> int:
    return urlsplit(facts.http).port or 80


def _head(method: str, target: str, headers: list[tuple[str, str]], version: str) -> bytes:
    lines = [f"{method} {target} {version}", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def head_size(target: str, headers: list[tuple[str, str]]) -> int:
    """What ``max_header_bytes`` counts: the target, and each header's name and value
    with 4 bytes for ``": "`` and CRLF."""
    return len(target) + sum(len(k) + len(v) + 4 for k, v in headers)


# --- Host values ------------------------------------------------------------------

_LABEL = st.from_regex(r"[a-z][a-z0-9-]{0,14}", fullmatch=True)
_TRICKY_NAMES = (
    "localhost.evil.example",
    "evil-localhost",
    "localhostx",
    "127.0.0.1.nip.io",
    "0x7f.1",
    "2130706433",
    "[evil]",
    "::1",
    "[::1",
    "evil.example:http",
    "localhost@evil.example",
    "a b",
    "",
)


@st.composite
def good_host(draw: st.DrawFn, facts: ServerFacts) -> str:
    kind = draw(st.sampled_from(["loopback", "localhost", "sub", "v4", "v6"]))
    if kind == "loopback":
        name = draw(st.sampled_from(["127.0.0.1", "[::1]", "127.1.2.3"]))
    elif kind == "localhost":
        name = draw(st.sampled_from(["localhost", "LOCALHOST", "localhost.", "LocalHost"]))
    elif kind == "sub":
        name = draw(_LABEL) + draw(st.sampled_from([".localhost", ".LOCALHOST", ".localhost."]))
    elif kind == "v4":
        name = str(draw(st.ip_addresses(v=4)))
    else:
        name = f"[{draw(st.ip_addresses(v=6))}]"
    return name + draw(_port_suffix(facts))


@st.composite
def bad_host(draw: st.DrawFn, facts: ServerFacts) -> str:
    if draw(st.booleans()):
        return draw(st.sampled_from(_TRICKY_NAMES))
    labels = draw(st.lists(_LABEL, min_size=1, max_size=4))
    tld = draw(st.sampled_from(["example", "com", "io", "localhost-not", "test"]))
    name = ".".join([*labels, tld])
    if draw(st.booleans()):
        name = name.upper()
    return name + draw(_port_suffix(facts))


def _port_suffix(facts: ServerFacts) -> st.SearchStrategy[str]:
    return st.sampled_from(["", f":{_port(facts)}", ":80", ":65535"])


# --- single requests --------------------------------------------------------------

_TARGETS = {
    "health": ("GET", "/health", 200),
    "models": ("GET", "/v1/models", 200),
    "missing-page": ("GET", "/no/such/page", 404),
    "ws": ("GET", WS_PATH, 101),
    "stream": ("GET", COMPAT_PATH, 101),
}


def _upgrade_headers() -> list[tuple[str, str]]:
    return [
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", base64.b64encode(b"front-door-fuzz!").decode()),
        ("Sec-WebSocket-Version", "13"),
    ]


@st.composite
def host_request(draw: st.DrawFn, facts: ServerFacts, last: bool) -> Request:
    """One request with a drawn Host and Origin; ``last``: it may end the connection."""
    targets = list(_TARGETS) if last else ["health", "models", "missing-page"]
    target = draw(st.sampled_from(targets))
    method, path, ok_status = _TARGETS[target]
    upgrade = ok_status == 101
    kind = draw(st.sampled_from(["good", "good", "bad", "bad", "missing", "twice", "foreign"]))
    version = "HTTP/1.1"
    if kind == "missing" and last and not upgrade and draw(st.booleans()):
        version = "HTTP/1.0"
    headers: list[tuple[str, str]] = []
    if kind in ("good", "foreign", "twice"):
        host = draw(good_host(facts))
        headers.append(("Host", host))
        if kind == "twice":
            headers.append(("Host", draw(st.one_of(good_host(facts), bad_host(facts)))))
    elif kind == "bad":
        host = draw(bad_host(facts))
        headers.append(("Host", host))
    if kind == "foreign":
        headers.append(("Origin", draw(st.sampled_from(["https://evil.example", "null"]))))
    elif kind in ("good", "bad") and draw(st.booleans()):
        headers.append(("Origin", f"http://{headers[0][1]}"))  # what a rebound page sends
    if upgrade:
        headers += _upgrade_headers()
    served = frozenset({ok_status}) | SERVED
    closes = version == "HTTP/1.0"
    if kind == "bad":  # an empty Host may read as none
        expect = Expect(
            frozenset({421, 400}), frozenset({"host_not_allowed", "missing_host"}), closes
        )
    elif kind == "twice" or (kind == "missing" and version == "HTTP/1.1"):
        expect = Expect(frozenset({400}), frozenset({"missing_host"}), closes)
    elif kind == "foreign":
        expect = Expect(frozenset({403}) | SERVED, frozenset({"origin_not_allowed"}), closes)
    else:
        expect = Expect(served, frozenset({"rate_limited"}), closes)
    label = f"front.host.{kind}" + (".http10" if closes else "")
    return Request(label, _head(method, path, headers, version), expect, upgrade)


# --- header sizes -----------------------------------------------------------------


@st.composite
def header_request(draw: st.DrawFn, facts: ServerFacts) -> Request:
    kind = draw(st.sampled_from(["under", "over", "huge", "many", "ws-line", "trailer"]))
    host = [("Host", f"127.0.0.1:{_port(facts)}")]
    path = "/health"
    if kind == "ws-line":
        line = draw(st.integers(WS_LINE_MAX - 64, WS_LINE_MAX + 64))
        cookie = ("Cookie", "c" * (line - len("Cookie") - 4))
        data = _head("GET", WS_PATH, [*host, cookie, *_upgrade_headers()], "HTTP/1.1")
        if line > WS_LINE_MAX:
            expect = Expect(frozenset({431}), frozenset({"headers_too_large"}), closes=True)
        else:
            expect = Expect(frozenset({101}) | SERVED, frozenset({"rate_limited"}))
        return Request(f"front.header.{kind}", data, expect, upgrade=True)
    if kind == "trailer":
        return _trailer_request(draw(st.integers(HEADER_LIMIT - 64, HEADER_LIMIT + 64)), host)
    if kind == "many":
        count = draw(st.integers(HEADER_LIMIT // 24, HEADER_LIMIT // 12))
        headers = [*host, *((f"X-{i}", "v" * 16) for i in range(count))]
    else:
        used = head_size(path, host) + len("Cookie") + 4
        if kind == "under":
            total = HEADER_LIMIT - draw(st.integers(0, 64))
        elif kind == "over":
            total = HEADER_LIMIT + draw(st.integers(1, 4096))
        else:
            total = HEADER_LIMIT * draw(st.integers(2, 16))
        headers = [*host, ("Cookie", "c" * (total - used))]
    if head_size(path, headers) <= HEADER_LIMIT:
        expect = Expect(frozenset({200}) | SERVED, frozenset({"rate_limited"}))
    else:
        expect = Expect(frozenset({431}), frozenset({"headers_too_large"}), closes=True)
    return Request(f"front.header.{kind}", _head("GET", path, headers, "HTTP/1.1"), expect)


def _trailer_request(total: int, host: list[tuple[str, str]]) -> Request:
    """A chunked POST to the token endpoint (cheap) whose trailers total ``total``."""
    trailer = ("X-Sum", "s" * (total - len("X-Sum") - 4))
    headers = [*host, ("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")]
    data = _head("POST", "/v1/auth/tokens", headers, "HTTP/1.1") + (
        f"2\r\n{{}}\r\n0\r\n{trailer[0]}: {trailer[1]}\r\n\r\n".encode()
    )
    if total <= HEADER_LIMIT:
        expect = Expect(frozenset({200}) | SERVED, frozenset({"rate_limited"}))
    else:
        expect = Expect(frozenset({431}), frozenset({"headers_too_large"}), closes=True)
    return Request("front.header.trailer", data, expect)


# --- probes -----------------------------------------------------------------------


@st.composite
def front_probe(draw: st.DrawFn, facts: ServerFacts) -> FrontProbe:
    family = draw(st.sampled_from(["host", "host", "pipeline", "pipeline", "header"]))
    if family == "host":
        request = draw(host_request(facts, last=True))
        return FrontProbe(request.label, (request,))
    if family == "header":
        request = draw(header_request(facts))
        return FrontProbe(request.label, (request,))
    body = draw(st.lists(host_request(facts, last=False), min_size=1, max_size=23))
    last = draw(st.one_of(host_request(facts, last=True), header_request(facts)))
    return FrontProbe("front.pipeline", (*body, last))


def front_scripts(facts: ServerFacts) -> st.SearchStrategy[tuple[FrontProbe, ...]]:
    """The front-door probes of one barrage."""
    probes = st.lists(front_probe(facts), min_size=FRONT_PROBES, max_size=FRONT_PROBES)
    return probes.map(tuple)
