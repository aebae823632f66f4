"""GET /v1/audio/speech/ws: the thin adapter between a Starlette WebSocket and SpeechSession."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid

import msgspec
from starlette.websockets import WebSocket, WebSocketDisconnect

from protocol.errors import CloseCode, ErrorCode, ProtocolError
from protocol.messages import Limits, SessionSettings
from protocol.session import ServerSession
from voiceserver.clients import ClientId, client_of
from voiceserver.params import socket_options
from voiceserver.runtime import Runtime
from voiceserver.session.peer import PeerGone
from voiceserver.session.speech import SpeechSession
from voiceserver.transport.auth import admit_websocket, chosen_subprotocol, deny_websocket
from voiceserver.transport.connection import abort_connection

log = logging.getLogger(__name__)


def session_defaults(ws: WebSocket, rt: Runtime) -> SessionSettings:
    """Session defaults from the server and the optional query parameters."""
    q = ws.query_params
    fmt: dict[str, object] = {}
    if "encoding" in q:
        fmt["encoding"] = q["encoding"]
    if "sample_rate" in q:
        fmt["sample_rate"] = (
            int(q["sample_rate"]) if q["sample_rate"].isdigit() else q["sample_rate"]
        )
    settings: dict[str, object] = {"model": q.get("model"), "voice": q.get("voice")}
    if fmt:
        settings["output_format"] = fmt
    return msgspec.convert(
        {k: v for k, v in settings.items() if v is not None}, SessionSettings, strict=True
    )


def protocol_limits(rt: Runtime) -> Limits:
    lim = rt.server.limits
    return Limits(
        max_contexts=lim.max_contexts,
        max_text_chars=lim.max_text_chars,
        idle_timeout_s=lim.idle_timeout_s,
        max_message_bytes=lim.max_message_bytes,
    )


class WebSocketPeer:
    """A Starlette WebSocket as a session's Peer: transport failures become PeerGone."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws

    async def send_text(self, data: str) -> None:
        try:
            await self.ws.send_text(data)
        except (OSError, RuntimeError, WebSocketDisconnect) as exc:
            raise PeerGone from exc

    async def send_bytes(self, data: bytes) -> None:
        try:
            await self.ws.send_bytes(data)
        except (OSError, RuntimeError, WebSocketDisconnect) as exc:
            raise PeerGone from exc

    async def close(self, code: int, reason: str) -> None:
        try:
            await self.ws.close(code=code, reason=reason)
        except (OSError, RuntimeError, WebSocketDisconnect) as exc:
            raise PeerGone from exc

    def abort(self) -> None:
        abort_connection(self.ws.scope)


async def admit_client(ws: WebSocket, rt: Runtime, endpoint: str) -> ClientId | None:
    """Who opens this socket, or None when its client is over its message budget
    (refused before the upgrade: HTTP 429 ``rate_limited`` with Retry-After)."""
    client = client_of(ws, rt.server.api_keys, ws.app.state.token_signer, websocket=True)
    if rt.rates.spend(client):
        return client
    rt.metrics.error(endpoint, str(ErrorCode.RATE_LIMITED))
    await rt.rates.hold_refusal(client)
    wait = max(1, math.ceil(rt.rates.retry_after_s(client)))
    await deny_websocket(
        ws,
        429,
        int(CloseCode.POLICY_VIOLATION),
        str(ErrorCode.RATE_LIMITED),
        f"rate_limited: this client sent more than its {rt.server.limits.max_messages_per_s:g}"
        f" messages a second; retry in {wait} s",
        {"retry-after": str(wait)},
    )
    return None


async def speech_websocket(ws: WebSocket) -> None:
    rt: Runtime = ws.app.state.runtime
    # The budget first: a client that floods upgrades with bad keys is limited too.
    client = await admit_client(ws, rt, "ws")
    if client is None:
        return
    admission = await admit_websocket(ws, rt.server.api_keys)
    if admission is None:
        return
    try:
        defaults = session_defaults(ws, rt)
        options = socket_options(rt.model.capabilities.request_fields)
        proto = ServerSession(protocol_limits(rt), defaults, options=options)
    except (msgspec.ValidationError, ProtocolError, ValueError) as exc:
        await ws.accept(subprotocol=chosen_subprotocol(ws.headers))
        await ws.close(
            code=int(CloseCode.POLICY_VIOLATION), reason=f"bad query parameter: {exc}"[:120]
        )
        return
    await ws.accept(subprotocol=chosen_subprotocol(ws.headers))
    if rt.full:
        await refuse_full(ws, rt, "ws")
        return
    session = SpeechSession(rt, proto, WebSocketPeer(ws), client, admission.expires_at)
    await serve_session(ws, session, greeting=proto.created_message(uuid.uuid4().hex))


async def serve_session(ws: WebSocket, session: SpeechSession, greeting: str | None = None) -> None:
    """Run an accepted socket's session until either side ends it: the greeting (if
    any) first, then every frame to the session while its writer sends, its clocks
    (token expiry, idle checks) running beside; registered for shutdown meanwhile.
    Every protocol spoken over the native session's state machine runs here."""
    rt, endpoint = session.rt, session.endpoint
    rt.session_opened(endpoint)
    rt.lifecycle.register(session)
    writer = clocks = None
    try:
        if greeting is not None:
            await ws.send_text(greeting)
        writer = session.start_writer()
        clocks = asyncio.create_task(_watch(session))
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                break
            if message.get("text") is not None:
                session.on_text(message["text"])
            elif message.get("bytes") is not None:
                session.on_bytes(message["bytes"])
            if writer.done() and not session.dropped:
                break
    except (WebSocketDisconnect, OSError):
        pass  # an ordinary departure
    except Exception:
        log.exception("%s session failed", endpoint)
        with contextlib.suppress(Exception):
            await ws.close(code=int(CloseCode.INTERNAL_ERROR), reason="internal error")
    finally:
        rt.lifecycle.unregister(session)
        rt.session_closed(endpoint)
        session.shutdown()
        for task in (clocks, writer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


async def refuse_full(ws: WebSocket, rt: Runtime, endpoint: str) -> None:
    """The engine takes no new context now: a session could not be served at all."""
    rt.metrics.error(endpoint, str(ErrorCode.OVERLOADED))
    with contextlib.suppress(Exception):
        await ws.close(code=int(CloseCode.TRY_AGAIN_LATER), reason="server full; retry later")


IDLE_POLL_MIN_S = 0.05
"""The idle check never runs more often than this, however short the timeout."""


async def _watch(session: SpeechSession) -> None:
    """The session's clocks: its connect token's expiry, and its idle checks."""
    expiry = None
    if session.expires_at is not None:
        wait = max(0.0, session.expires_at - time.time())
        expiry = asyncio.get_running_loop().call_later(wait, session.token_expired)
    limits = session.rt.server.limits
    try:
        while not (session.dropped or session.closed):
            timeout = session.proto.settings.idle_timeout_s or session.proto.limits.idle_timeout_s
            shortest = min(timeout, limits.context_idle_timeout_s)
            await asyncio.sleep(max(IDLE_POLL_MIN_S, min(1.0, shortest / 4)))
            session.check_idle(time.monotonic())
    finally:
        if expiry is not None:
            expiry.cancel()
