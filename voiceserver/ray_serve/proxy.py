"""A close frame for sockets whose replica died (runs in Serve's HTTP proxy).

When the replica behind an open WebSocket dies, Serve's proxy ends the ASGI call
without closing the socket, and the client sees the TCP connection drop with no
close frame (1006 at best). This middleware, loaded into the proxy by
``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH=voiceserver.ray_serve.proxy:middlewares``
(``voiceserver ray`` sets it for the proxies it starts), closes such a socket with
1011 and a reason that says what happened, so clients reconnect at once (to another
replica) instead of waiting out a read timeout.
"""

from __future__ import annotations

from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from protocol.errors import CloseCode

CALLBACK_ENV = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
CALLBACK_PATH = "voiceserver.ray_serve.proxy:middlewares"
LOST_REASON = "replica lost: reconnect"


def middlewares() -> list[Middleware]:
    """What Serve's proxy calls (by import path) for its middlewares."""
    return [Middleware(CloseLostSockets)]


class CloseLostSockets:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        accepted = ended = False

        async def watched_receive() -> Message:
            nonlocal ended
            message = await receive()
            if message["type"] == "websocket.disconnect":
                ended = True
            return message

        async def watched_send(message: Message) -> None:
            nonlocal accepted, ended
            if message["type"] == "websocket.accept":
                accepted = True
            elif message["type"] in ("websocket.close", "websocket.http.response.start"):
                ended = True
            await send(message)

        try:
            await self.app(scope, watched_receive, watched_send)
        finally:
            if accepted and not ended:
                try:
                    await send(
                        {
                            "type": "websocket.close",
                            "code": int(CloseCode.INTERNAL_ERROR),
                            "reason": LOST_REASON,
                        }
                    )
                except Exception:  # the client may be gone too
                    pass
