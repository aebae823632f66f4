"""Bearer-key checks for HTTP requests and WebSocket upgrades."""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers, QueryParams
from starlette.responses import JSONResponse
from starlette.websockets import WebSocket

from protocol.errors import CloseCode
from voiceserver.transport.tokens import TokenSigner

SUBPROTOCOL = "tts.v1"
BEARER_PREFIX = "bearer."


def offered_key(headers: Headers, query: QueryParams | None = None) -> str | None:
    """The key a client presented: the Authorization header; on a WebSocket
    upgrade (pass its ``query``) also ``?token=`` or the ``bearer.<key>``
    subprotocol, since browsers cannot set headers on WebSockets. HTTP requests
    take the header only: a key in a URL ends up in logs and browser history.
    On sockets ``?token=`` may also carry a short-lived connect token instead
    (see :mod:`voiceserver.transport.tokens`)."""
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


def _token_signer(ws: WebSocket) -> TokenSigner | None:
    state = getattr(ws.app, "state", None) if "app" in ws.scope else None
    return getattr(state, "token_signer", None)


def websocket_refusal(ws: WebSocket, keys: tuple[str, ...]) -> str | None:
    """None when the upgrade may proceed, else what is wrong: the socket needs one
    of ``keys`` or a connect token from ``POST /v1/auth/tokens`` (none: open)."""
    offered = offered_key(ws.headers, ws.query_params)
    if key_ok(keys, offered):
        return None
    if offered is None:
        return "missing credentials: pass ?token=<connect token> or the API key"
    signer = _token_signer(ws)
    if signer is None:
        return "invalid API key"
    why = signer.verify(offered)
    if why is None:
        return None
    if why == "malformed token":
        return "invalid API key or connect token"
    return why


async def admit_websocket(ws: WebSocket, keys: tuple[str, ...]) -> bool:
    """Check the key or connect token before the upgrade; a refused client gets
    HTTP 401 (or close code 4001 where the server cannot answer a handshake with
    a response), the reason saying what was wrong."""
    why = websocket_refusal(ws, keys)
    if why is None:
        return True
    if "websocket.http.response" in ws.scope.get("extensions", {}):
        body = {"error": {"code": "unauthorized", "message": why}}
        await ws.send_denial_response(JSONResponse(body, 401))
    else:
        # A close reason is limited to 123 bytes.
        await ws.close(code=int(CloseCode.UNAUTHORIZED), reason=why[:120])
    return False
