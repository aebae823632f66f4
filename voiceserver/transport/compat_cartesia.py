"""Cartesia's TTS API on our engine: ``/tts/websocket``, ``/tts/bytes``, ``/tts/sse``,
``/voices`` (docs/cartesia.md).

The socket is the native session (``SpeechSession``) speaking Cartesia's messages
through :class:`protocol.compat_cartesia_session.CartesiaSession`: contexts, streamed
text, flushes, barge-in, word timestamps, per-client limits, slow readers and
shutdown behave as on ``/v1/audio/speech/ws``. This module only admits the socket
(the same key, token and rate checks as the other sockets: ``X-API-Key``, ``?api_key=``
and ``Authorization: Bearer`` all work), feeds it what arrives and sends what it says,
leaving out the native messages Cartesia has no counterpart for. Cartesia sends
nothing on connect, and neither does this socket. The ``cartesia_version`` query and
the ``Cartesia-Version`` header are accepted and ignored.
"""

from __future__ import annotations

import logging

from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from protocol.compat_cartesia_session import CartesiaSession
from voiceserver.cartesia_voices import CartesiaVoices
from voiceserver.http.cartesia import get_voice, list_voices, tts_bytes, tts_sse
from voiceserver.logs import Throttled
from voiceserver.params import socket_options
from voiceserver.runtime import Runtime
from voiceserver.session.peer import PeerGone
from voiceserver.session.speech import SpeechSession
from voiceserver.transport.auth import admit_websocket
from voiceserver.transport.ws import (
    WebSocketPeer,
    admit_client,
    protocol_limits,
    refuse_full,
    serve_session,
)

log = logging.getLogger(__name__)
warnings = Throttled(log)

ENDPOINT = "ws_compat"
"""The metrics label of compatibility sockets."""


def cartesia_routes() -> list[BaseRoute]:
    """The HTTP and WebSocket routes of Cartesia's API that this server answers."""
    return [
        WebSocketRoute("/tts/websocket", cartesia_websocket),
        Route("/tts/bytes", tts_bytes, methods=["POST"]),
        Route("/tts/sse", tts_sse, methods=["POST"]),
        Route("/voices", list_voices, methods=["GET"]),
        Route("/voices/", list_voices, methods=["GET"]),
        Route("/voices/{voice_id}", get_voice, methods=["GET"]),
    ]


class CartesiaPeer(WebSocketPeer):
    """The socket as the session's Peer: native messages with no Cartesia counterpart
    come out of :class:`CartesiaSession` empty and are not sent."""

    async def send_text(self, data: str) -> None:
        if data:
            await super().send_text(data)

    async def send_bytes(self, data: bytes) -> None:
        raise PeerGone("Cartesia sockets carry no binary frames")  # never reached


def _log_warning(message: str, context_id: str | None) -> None:
    warnings.log(
        logging.INFO,
        message.split(":", 1)[0],
        "Cartesia socket: %s%s (Cartesia has no warning message; not sent)",
        f"context {context_id!r}: " if context_id else "",
        message[:200],
    )


async def cartesia_websocket(ws: WebSocket) -> None:
    rt: Runtime = ws.app.state.runtime
    # The budget first: a client that floods upgrades with bad keys is limited too.
    client = await admit_client(ws, rt, ENDPOINT)
    if client is None:
        return
    admission = await admit_websocket(ws, rt.server.api_keys)
    if admission is None:
        return
    await ws.accept()
    if rt.full:
        await refuse_full(ws, rt, ENDPOINT)
        return
    caps = rt.model.capabilities
    proto = CartesiaSession(
        protocol_limits(rt),
        voices=CartesiaVoices(rt),
        options=socket_options(caps.request_fields),
        on_warning=_log_warning,
    )
    session = SpeechSession(rt, proto, CartesiaPeer(ws), client, admission.expires_at, ENDPOINT)
    await serve_session(ws, session)
