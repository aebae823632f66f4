"""``x-voiceserver-replica``: which Serve replica answered.

Every HTTP response and WebSocket handshake through Serve names the replica that
served it (Serve's replica tag, as ``serve status`` and the dashboard show it), so
an operator can tell where a session ran and which replica a bad answer came from.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

REPLICA_HEADER = "x-voiceserver-replica"


class ReplicaHeader:
    def __init__(self, app: ASGIApp, replica: str) -> None:
        self.app = app
        self._header = (REPLICA_HEADER.encode(), replica.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return

        async def send_named(message: Message) -> None:
            if message["type"] in ("http.response.start", "websocket.accept"):
                message = {**message, "headers": [*message.get("headers", ()), self._header]}
            await send(message)

        await self.app(scope, receive, send_named)
