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
  ``origin_not_allowed``, before the WebSocket upgrade or the endpoint runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

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


class OriginGuard:
    """ASGI middleware applying :func:`origin_allowed` to HTTP requests and WebSockets."""

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
            await self.app(scope, receive, send)
            return
        body = json.dumps(
            {
                "error": {
                    "message": f"origin {origin!r} is not allowed to use this server; start it"
                    " with --allow-origin to allow a web page's origin",
                    "type": "permission_error",
                    "param": None,
                    "code": str(ErrorCode.ORIGIN_NOT_ALLOWED),
                }
            }
        ).encode()
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
            await send({"type": "websocket.close", "code": 1008})
