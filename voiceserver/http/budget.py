"""Every HTTP request spends from its client's message budget (``Limits.max_messages_per_s``).

A client past its budget gets 429 ``rate_limited`` with ``Retry-After`` before any
endpoint runs. The request's :class:`~voiceserver.clients.ClientId` is left in the
request's state (``request.state.client``), so the endpoints count the engine
contexts it opens against that client's share. WebSocket upgrades spend from the
same budget in their own handlers, once the socket's credentials are known.
"""

from __future__ import annotations

import json
import math

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from protocol.errors import ErrorCode
from voiceserver.clients import ClientId, client_of


class ClientBudget:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = getattr(scope.get("app"), "state", None)
        rt = getattr(state, "runtime", None)
        if scope["type"] != "http" or rt is None:
            await self.app(scope, receive, send)
            return
        client = client_of(HTTPConnection(scope), rt.server.api_keys, state.token_signer)
        scope.setdefault("state", {})["client"] = client
        if rt.rates.spend(client):
            await self.app(scope, receive, send)
            return
        rt.metrics.error("http", str(ErrorCode.RATE_LIMITED))
        await rt.rates.hold_refusal(client)
        wait = max(1, math.ceil(rt.rates.retry_after_s(client)))
        body = json.dumps(
            {
                "error": {
                    "message": f"rate_limited: this client sent more than its"
                    f" {rt.server.limits.max_messages_per_s:g} requests a second; retry in"
                    f" {wait} s",
                    "type": "rate_limit_error",
                    "param": None,
                    "code": str(ErrorCode.RATE_LIMITED),
                }
            }
        ).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(wait).encode()),
        ]
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def request_client(conn: HTTPConnection) -> ClientId | None:
    """The client :class:`ClientBudget` found for this request."""
    return conn.scope.get("state", {}).get("client")
