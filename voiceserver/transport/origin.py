"""Which browser pages may drive the server: the Origin check.

Browsers attach ``Origin`` to WebSocket handshakes and to cross-site POSTs,
and they let any page open a socket to ``localhost`` or send a
``multipart/form-data`` POST without asking first. Without this check, any
web page a user visits could synthesize on their local server, or upload a
voice, with no key configured (the default). The rule:

- no ``Origin`` header: not a browser (curl, SDKs, agent frameworks): allowed;
- the server's own origin (the Origin's host and port equal the ``Host``
  header): allowed, so a page served by this server works;
- an origin in ``ServerConfig.allowed_origins`` (exact, case-insensitive; ``*``
  allows every origin): allowed;
- anything else, ``null`` included (sandboxed frames, ``file:`` pages): HTTP 403
  ``origin_not_allowed``, before the WebSocket upgrade or the endpoint runs. This
  holds with an API key too: a browser page on another origin needs
  ``--cors-origin`` (alias ``--allow-origin``) whatever credentials it has.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from protocol.errors import ErrorCode

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def _origin_netloc(origin: str) -> tuple[str, int | None] | None:
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    return parts.hostname.lower(), port or _DEFAULT_PORTS.get(parts.scheme.lower())


def _host_netloc(host: str, scheme: str) -> tuple[str, int | None] | None:
    return _origin_netloc(f"{scheme}://{host}")


def origin_allowed(
    origin: str | None, host: str | None, scheme: str, allowed: Iterable[str]
) -> bool:
    if origin is None:
        return True
    allowed = {a.rstrip("/").lower() for a in allowed}
    if "*" in allowed or origin.rstrip("/").lower() in allowed:
        return True
    mine = _origin_netloc(origin)
    if mine is None or host is None:
        return False
    # The page's scheme is http(s) even when this request is a ws(s) handshake.
    page_scheme = urlsplit(origin).scheme.lower()
    return mine == _host_netloc(host, page_scheme)


CORS_METHODS = "GET, POST, DELETE, OPTIONS"
CORS_HEADERS = "Authorization, Content-Type, X-Request-Id"
CORS_MAX_AGE_S = 600
"""How long a browser may cache a preflight answer."""


def _cors_headers(origin: str) -> list[tuple[bytes, bytes]]:
    return [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-expose-headers", b"X-Request-Id, Retry-After"),
        (b"vary", b"Origin"),
    ]


def _refusal(origin: str) -> bytes:
    return json.dumps(
        {
            "error": {
                "message": f"origin {origin!r} is not allowed to use this server; start it"
                f" with --cors-origin {origin} (alias --allow-origin) to allow this web page",
                "type": "permission_error",
                "param": None,
                "code": str(ErrorCode.ORIGIN_NOT_ALLOWED),
            }
        }
    ).encode()


class OriginGuard:
    """ASGI middleware applying :func:`origin_allowed` to HTTP requests and WebSockets,
    and answering CORS for allowed origins on HTTP: a preflight ``OPTIONS`` gets
    204 with the allowed methods and headers, every other response
    ``Access-Control-Allow-Origin`` echoing the page's origin. A refused origin
    gets no CORS headers, so the browser hides the answer from the page."""

    def __init__(self, app: ASGIApp, allowed_origins: Iterable[str]) -> None:
        self.app = app
        self.allowed = tuple(allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        origin = headers.get("origin")
        if origin_allowed(origin, headers.get("host"), scope.get("scheme", "http"), self.allowed):
            if origin is None or scope["type"] != "http":
                await self.app(scope, receive, send)
            elif scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
                await self._preflight(origin, send)
            else:
                await self.app(scope, receive, _with_cors(send, origin))
            return
        await self._refuse(scope, send, _refusal(origin or "null"))

    async def _preflight(self, origin: str, send: Send) -> None:
        response_headers = _cors_headers(origin) + [
            (b"access-control-allow-methods", CORS_METHODS.encode()),
            (b"access-control-allow-headers", CORS_HEADERS.encode()),
            (b"access-control-max-age", str(CORS_MAX_AGE_S).encode()),
            (b"content-length", b"0"),
        ]
        await send({"type": "http.response.start", "status": 204, "headers": response_headers})
        await send({"type": "http.response.body", "body": b""})

    async def _refuse(self, scope: Scope, send: Send, body: bytes) -> None:
        response_headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 403, "headers": response_headers})
            await send({"type": "http.response.body", "body": body})
        elif "websocket.http.response" in scope.get("extensions", {}):
            await send(
                {
                    "type": "websocket.http.response.start",
                    "status": 403,
                    "headers": response_headers,
                }
            )
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send(
                {
                    "type": "websocket.close",
                    "code": 1008,
                    "reason": "origin not allowed: --cors-origin",
                }
            )


def _with_cors(send: Send, origin: str) -> Send:
    async def cors_send(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *_cors_headers(origin)]}
        await send(message)

    return cors_send
