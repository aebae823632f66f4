"""API-key checks for HTTP requests and WebSocket upgrades."""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from starlette.datastructures import Headers, QueryParams
from starlette.responses import JSONResponse
from starlette.websockets import WebSocket

from protocol.errors import CloseCode
from voiceserver.transport.tokens import TokenSigner

SUBPROTOCOL = "tts.v1"
BEARER_PREFIX = "bearer."


KEY_HEADERS = ("xi-api-key", "x-api-key")
"""Key headers other services' clients send unchanged: ElevenLabs' (``xi-api-key``)
and Cartesia's (``X-API-Key``)."""
AUTH_SCHEMES = ("bearer", "api-key")
"""``Authorization: <scheme> KEY``: OpenAI's clients send Bearer, Baseten's Api-Key."""
KEY_QUERY = ("token", "api_key")
"""Socket query parameters that carry a key: ours (``?token=``, also a connect
token) and Cartesia's (``?api_key=``)."""


def offered_key(headers: Headers, query: QueryParams | None = None) -> str | None:
    """The key a client presented: ``Authorization: Bearer KEY`` (or ``Api-Key
    KEY``), else a ``KEY_HEADERS`` header; on a WebSocket upgrade (pass its
    ``query``) also ``?token=`` / ``?api_key=`` or the ``bearer.<key>``
    subprotocol, since browsers cannot set headers on WebSockets. HTTP requests
    take headers only: a key in a URL ends up in logs and browser history.
    On sockets ``?token=`` may also carry a short-lived connect token instead
    (see :mod:`voiceserver.transport.tokens`)."""
    scheme, _, value = headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() in AUTH_SCHEMES and value.strip():
        return value.strip()
    for name in KEY_HEADERS:
        if headers.get(name):
            return headers[name].strip()
    if query is None:
        return None
    for name in KEY_QUERY:
        if name in query:
            return query[name]
    for proto in _subprotocols(headers):
        if proto.startswith(BEARER_PREFIX):
            return proto[len(BEARER_PREFIX) :]
    return None


def key_ok(keys: tuple[str, ...], offered: str | None) -> bool:
    if not keys:
        return True
    return offered is not None and key_index(keys, offered) is not None


def key_index(keys: tuple[str, ...], offered: str) -> int | None:
    """Which of ``keys`` ``offered`` is (compared in constant time), or None."""
    found = None
    for index, key in enumerate(keys):
        if hmac.compare_digest(offered.encode(), key.encode()):
            found = index
    return found


def chosen_subprotocol(headers: Headers) -> str | None:
    return SUBPROTOCOL if SUBPROTOCOL in _subprotocols(headers) else None


def _subprotocols(headers: Headers) -> list[str]:
    raw = headers.get("sec-websocket-protocol", "")
    return [p.strip() for p in raw.split(",") if p.strip()]


def _token_signer(ws: WebSocket) -> TokenSigner | None:
    state = getattr(ws.app, "state", None) if "app" in ws.scope else None
    return getattr(state, "token_signer", None)


@dataclass(frozen=True)
class Admission:
    """A socket the credentials let in."""

    expires_at: float | None = None
    """Unix seconds when the connect token it opened with expires (None: a key, or
    an open server): the session then finishes what it speaks and closes."""


def websocket_admission(ws: WebSocket, keys: tuple[str, ...]) -> Admission | str:
    """The admission, or what is wrong: the socket needs one of ``keys`` or a
    connect token from ``POST /v1/auth/tokens`` (no keys: open)."""
    offered = offered_key(ws.headers, ws.query_params)
    if key_ok(keys, offered):
        return Admission()
    if offered is None:
        return "missing credentials: pass ?token=<connect token> or the API key"
    signer = _token_signer(ws)
    if signer is None:
        return "invalid API key"
    why = signer.verify(offered)
    if why is None:
        return Admission(signer.expires_at(offered))
    if why == "malformed token":
        return "invalid API key or connect token"
    return why


async def admit_websocket(ws: WebSocket, keys: tuple[str, ...]) -> Admission | None:
    """Check the key or connect token before the upgrade; a refused client gets
    HTTP 401 (or close code 4001 where the server cannot answer a handshake with
    a response), the reason saying what was wrong."""
    admission = websocket_admission(ws, keys)
    if isinstance(admission, Admission):
        return admission
    await deny_websocket(ws, 401, int(CloseCode.UNAUTHORIZED), "unauthorized", admission)
    return None


async def deny_websocket(
    ws: WebSocket,
    status: int,
    close_code: int,
    code: str,
    message: str,
    headers: dict[str, str] | None = None,
) -> None:
    """Refuse an upgrade: an HTTP response where the server can send one, else an
    accepted-then-closed socket (the reason cut to fit a close frame)."""
    if "websocket.http.response" in ws.scope.get("extensions", {}):
        body = {"error": {"code": code, "message": message}}
        await ws.send_denial_response(JSONResponse(body, status, headers=headers))
    else:
        # A close reason is limited to 123 bytes.
        await ws.close(code=close_code, reason=message[:120])
