"""GET /v1/audio/speech/ws: the thin adapter between a Starlette WebSocket and SpeechSession."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable

import msgspec
from starlette.websockets import WebSocket, WebSocketDisconnect

from protocol.errors import CloseCode, ProtocolError
from protocol.messages import Limits, SessionSettings
from protocol.session import ServerSession
from voiceserver.runtime import Runtime
from voiceserver.session.speech import SpeechSession
from voiceserver.transport.auth import admit_websocket, chosen_subprotocol

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


async def speech_websocket(ws: WebSocket) -> None:
    rt: Runtime = ws.app.state.runtime
    if not await admit_websocket(ws, rt.server.api_keys):
        return
    try:
        defaults = session_defaults(ws, rt)
        proto = ServerSession(protocol_limits(rt), defaults)
    except (msgspec.ValidationError, ProtocolError, ValueError) as exc:
        await ws.accept(subprotocol=chosen_subprotocol(ws.headers))
        await ws.close(
            code=int(CloseCode.POLICY_VIOLATION), reason=f"bad query parameter: {exc}"[:120]
        )
        return
    await ws.accept(subprotocol=chosen_subprotocol(ws.headers))

    async def close(code: int, reason: str) -> None:
        with contextlib.suppress(Exception):
            await ws.close(code=code, reason=reason)

    session = SpeechSession(rt, proto, ws.send_text, ws.send_bytes, close)
    rt.session_opened("ws")
    await ws.send_text(proto.created_message(uuid.uuid4().hex))
    writer = asyncio.create_task(session.writer())
    writer.add_done_callback(_log_failure)
    idle = asyncio.create_task(_idle_watch(session, close))
    try:
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                break
            if message.get("text") is not None:
                session.on_text(message["text"])
            elif message.get("bytes") is not None:
                session.on_bytes(message["bytes"])
            if writer.done():
                break
    except WebSocketDisconnect:
        pass
    except Exception:
        log.exception("session failed")
        await close(int(CloseCode.INTERNAL_ERROR), "internal error")
    finally:
        rt.session_closed("ws")
        session.shutdown()
        idle.cancel()
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await writer


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("session writer failed", exc_info=task.exception())


async def _idle_watch(session: SpeechSession, close: Callable[[int, str], Awaitable[None]]) -> None:
    """Close a session that has sent nothing and has no open context for too long."""
    while True:
        timeout = session.proto.settings.idle_timeout_s or session.proto.limits.idle_timeout_s
        await asyncio.sleep(min(1.0, timeout / 4))
        if session.has_live_contexts:
            session.last_activity = time.monotonic()
        elif time.monotonic() - session.last_activity > timeout:
            await close(int(CloseCode.IDLE_TIMEOUT), "idle timeout")
            return
