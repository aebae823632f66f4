"""Bearer-key checks for HTTP requests and WebSocket upgrades."""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers, QueryParams

SUBPROTOCOL = "tts.v1"
BEARER_PREFIX = "bearer."


def offered_key(headers: Headers, query: QueryParams) -> str | None:
    """The key a client presented: Authorization header, ?token=, or the
    ``bearer.<key>`` subprotocol (browsers cannot set headers on WebSockets)."""
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
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
