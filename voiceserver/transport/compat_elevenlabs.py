"""ElevenLabs' streaming TTS API on our engine (docs/elevenlabs.md): the sockets
``/v1/text-to-speech/{voice_id}/stream-input`` and ``.../multi-stream-input`` and
``/v1/text-to-dialogue/multi-stream-input`` (one voice per context), the HTTP
text-to-speech and text-to-dialogue endpoints (``voiceserver.http.elevenlabs``) and the
voice listings (``voiceserver.http.elevenlabs_voices``).

The sockets are the native session (``SpeechSession``) speaking ElevenLabs' messages
through :class:`protocol.compat_elevenlabs_session.ElevenLabsSession`: contexts,
streamed text, flushes, barge-in, word timing, per-client limits, slow readers and
shutdown behave as on ``/v1/audio/speech/ws``. This module admits a socket (the same
key, token and rate checks as the other sockets: ``xi-api-key``, ``Authorization:
Bearer`` and ``?token=`` all work), checks its path and query (a bad voice, model,
format or parameter is answered, at the client's first message, with an error message
and close 1008, so clients read why), feeds it what arrives and sends what it says. Formats
the native output stage does not encode (mp3, ``pcm_32000``) get their own stage per
context (:class:`ElevenLabsSpeech`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from protocol.compat_elevenlabs import DialogueError, ErrorOutput, encode_output, error_name
from protocol.compat_elevenlabs_session import ElevenLabsSession
from protocol.compat_elevenlabs_wire import peek_context
from protocol.errors import CloseCode, ProtocolError
from protocol.events import ContextOpened
from voiceserver.http.elevenlabs import (
    text_to_dialogue,
    text_to_dialogue_stream,
    text_to_speech,
    text_to_speech_stream,
    text_to_speech_stream_with_timestamps,
    text_to_speech_with_timestamps,
)
from voiceserver.http.elevenlabs_voices import get_voice, list_voices, search_voices
from voiceserver.logs import Throttled
from voiceserver.params import socket_options
from voiceserver.runtime import Runtime
from voiceserver.session.output import ContextOutput
from voiceserver.session.peer import PeerGone
from voiceserver.session.speech import SpeechSession
from voiceserver.transport.auth import admit_websocket
from voiceserver.transport.compat_elevenlabs_audio import LazyStage
from voiceserver.transport.compat_elevenlabs_settings import (
    canonical_voice,
    native_output,
    socket_setup,
)
from voiceserver.transport.ws import (
    WebSocketPeer,
    admit_client,
    protocol_limits,
    refuse_full,
    serve_session,
)

log = logging.getLogger(__name__)
notes = Throttled(log)

ENDPOINT = "ws_compat"
"""The metrics label of compatibility sockets."""
PREFIX = "/v1/text-to-speech/{voice_id}"
REFUSAL_WAIT_S = 10.0
"""How long a refused socket waits for the client's first message before saying why."""


def elevenlabs_routes() -> list[BaseRoute]:
    """The HTTP and WebSocket routes of ElevenLabs's API that this server answers."""
    return [
        WebSocketRoute(f"{PREFIX}/stream-input", stream_input),
        WebSocketRoute(f"{PREFIX}/multi-stream-input", multi_stream_input),
        Route(PREFIX, text_to_speech, methods=["POST"]),
        Route(f"{PREFIX}/stream", text_to_speech_stream, methods=["POST"]),
        Route(f"{PREFIX}/with-timestamps", text_to_speech_with_timestamps, methods=["POST"]),
        Route(
            f"{PREFIX}/stream/with-timestamps",
            text_to_speech_stream_with_timestamps,
            methods=["POST"],
        ),
        WebSocketRoute("/v1/text-to-dialogue/multi-stream-input", dialogue_multi_stream_input),
        Route("/v1/text-to-dialogue", text_to_dialogue, methods=["POST"]),
        Route("/v1/text-to-dialogue/stream", text_to_dialogue_stream, methods=["POST"]),
        Route("/v1/voices", list_voices, methods=["GET"]),
        Route("/v2/voices", search_voices, methods=["GET"]),
        Route("/v1/voices/{voice_id}", get_voice, methods=["GET"]),
    ]


class ElevenLabsPeer(WebSocketPeer):
    """The socket as the session's Peer: an answer may be several ElevenLabs messages,
    one per line (JSON never holds a raw newline); native messages with no ElevenLabs
    counterpart come out empty and are not sent."""

    async def send_text(self, data: str) -> None:
        for line in data.split("\n"):
            if line:
                await super().send_text(line)

    async def send_bytes(self, data: bytes) -> None:
        raise PeerGone("ElevenLabs sockets carry no binary frames")  # never reached


class ElevenLabsSpeech(SpeechSession):
    """The native session, with an output stage of its own for each context whose
    format the native stage does not encode (built in the encode pool at first use)."""

    def _open(self, event: ContextOpened) -> None:
        super()._open(event)
        proto = self.proto
        assert isinstance(proto, ElevenLabsSession)
        ctx = self._contexts.get(event.context_id)
        if ctx is None or native_output(proto.spec) is not None:
            return
        ctx.output.close()  # the placeholder stage, never fed
        stage = LazyStage(proto.spec, self.rt.model.capabilities.sample_rate)
        ctx.stage = stage  # type: ignore[assignment]
        ctx.output = ContextOutput(stage, self.rt.encode_pool)


def _note(message: str, context_id: str | None) -> None:
    notes.log(
        logging.INFO,
        message.split(":", 1)[0],
        "ElevenLabs socket: %s%s (ElevenLabs has no warning message; not sent)",
        f"context {context_id!r}: " if context_id else "",
        message[:200],
    )


async def stream_input(ws: WebSocket) -> None:
    """``/v1/text-to-speech/{voice_id}/stream-input``: one context per socket."""
    await _serve(ws, multi=False)


async def multi_stream_input(ws: WebSocket) -> None:
    """``/v1/text-to-speech/{voice_id}/multi-stream-input``: contexts by ``context_id``."""
    await _serve(ws, multi=True)


async def dialogue_multi_stream_input(ws: WebSocket) -> None:
    """``/v1/text-to-dialogue/multi-stream-input``: contexts by ``context_id``, each in the
    voice its first message names."""
    await _serve(ws, multi=True, dialogue=True)


async def _serve(ws: WebSocket, *, multi: bool, dialogue: bool = False) -> None:
    rt: Runtime = ws.app.state.runtime
    # The budget first: a client that floods upgrades with bad keys is limited too.
    client = await admit_client(ws, rt, ENDPOINT)
    if client is None:
        return
    admission = await admit_websocket(ws, rt.server.api_keys)
    if admission is None:
        return
    try:
        voice_id = None if dialogue else ws.path_params["voice_id"]
        setup = socket_setup(rt, voice_id, dict(ws.query_params))
    except ProtocolError as err:
        await _refuse(ws, rt, err, multi=multi, dialogue=dialogue)
        return
    await ws.accept()
    if rt.full:
        await refuse_full(ws, rt, ENDPOINT)
        return
    caps = rt.model.capabilities
    proto = ElevenLabsSession(
        protocol_limits(rt),
        multi=multi,
        dialogue=dialogue,
        spec=setup.spec,
        output=setup.output,
        voice=setup.voice,
        language=setup.language,
        aligned=setup.aligned,
        auto_mode=setup.auto_mode,
        sync_alignment=setup.sync_alignment,
        ssml=setup.ssml,
        idle_timeout_s=setup.idle_timeout_s,
        options=socket_options(caps.request_fields),
        on_warning=_note,
        voice_name=lambda voice: canonical_voice(rt, voice),
    )
    session = ElevenLabsSpeech(
        rt, proto, ElevenLabsPeer(ws), client, admission.expires_at, ENDPOINT
    )
    await serve_session(ws, session)


async def _refuse(
    ws: WebSocket, rt: Runtime, err: ProtocolError, *, multi: bool, dialogue: bool
) -> None:
    """A socket whose path or query is wrong: accepted, told why at its first message
    (naming the context that message opens), closed (1008). Clients register their first
    context before they send its first message and fail that context on the error;
    LiveKit's plugin would wait for ever on a socket closed before it sent anything."""
    rt.metrics.error(ENDPOINT, str(err.code))
    notes.log(logging.INFO, str(err.code), "ElevenLabs socket refused: %s", err.message[:200])
    code = int(CloseCode.POLICY_VIOLATION)
    with contextlib.suppress(Exception):
        await ws.accept()
        context = None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(REFUSAL_WAIT_S):
                first = await ws.receive()
            if first["type"] == "websocket.disconnect":
                return
            if multi and first.get("text") is not None:
                context = peek_context(first["text"])
        name = error_name(err.code)
        message: ErrorOutput | DialogueError = (
            DialogueError(message=err.message, error=name, code=code, context_id=context)
            if dialogue
            else ErrorOutput(message=err.message, error=name, code=code, contextId=context)
        )
        await ws.send_text(encode_output(message))
        await ws.close(code=code, reason=err.message[:120])
