"""Bearer-key checks for HTTP requests and WebSocket upgrades."""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers, QueryParams
from starlette.responses import JSONResponse
from starlette.websockets import WebSocket

from protocol.errors import CloseCode

SUBPROTOCOL = "tts.v1"
BEARER_PREFIX = "bearer."


def offered_key(headers: Headers, query: QueryParams | None = None) -> str | None:
    """The key a client presented: the Authorization header; on a WebSocket
    upgrade (pass its ``query``) also ``?token=`` or the ``bearer.<key>``
    subprotocol, since browsers cannot set headers on WebSockets. HTTP requests
    take the header only: a key in a URL ends up in logs and browser history."""
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    if query is None:
        return None
    if "token" in query:
        return query["token"]
    for proto in _subprotocols(headers):
        if proto.startswith(BEARER_PREFIX):
            return proto[len(BEARER_PREFIX) :]
    return None


def key_ok(keys: tuple[str, ...], offered: str | None) -> bool:
    if not keys:
        return True
    if offered is None:
        return False
    return any(hmac.compare_digest(offered.encode(), k.encode()) for k in keys)


def chosen_subprotocol(headers: Headers) -> str | None:
    return SUBPROTOCOL if SUBPROTOCOL in _subprotocols(headers) else None


def _subprotocols(headers: Headers) -> list[str]:
    raw = headers.get("sec-websocket-protocol", "")
    return [p.strip() for p in raw.split(",") if p.strip()]


async def admit_websocket(ws: WebSocket, keys: tuple[str, ...]) -> bool:
    """Check the key before the upgrade; a refused client gets HTTP 401 (or
    close code 4001 where the server cannot answer a handshake with a response)."""
    if key_ok(keys, offered_key(ws.headers, ws.query_params)):
        return True
    if "websocket.http.response" in ws.scope.get("extensions", {}):
        body = {"error": {"code": "unauthorized", "message": "missing or wrong API key"}}
        await ws.send_denial_response(JSONResponse(body, 401))
    else:
        await ws.close(code=int(CloseCode.UNAUTHORIZED), reason="unauthorized")
    return False
