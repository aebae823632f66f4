"""Pipecat TTS service: this server as a websocket TTS in a Pipecat pipeline.

Import it only where pipecat-ai is installed (the rest of voiceclient does not need it)::

    from pipecat.pipeline.pipeline import Pipeline
    from voiceclient.pipecat_tts import VoiceServerTTSService

    tts = VoiceServerTTSService(url="ws://127.0.0.1:8000/v1/audio/speech/ws", voice="joe")
    pipeline = Pipeline([transport.input(), stt, user_agg, llm, tts, transport.output(), bot_agg])

Each turn of the bot is one server context on one kept-alive socket: the turn's
sentences are appended to it, each flushed as Pipecat hands it over (it aggregates
sentences by default; with ``text_aggregation_mode=TOKEN`` tokens are appended unflushed
and the server finds the sentence ends), ``flush_audio`` (the turn is complete) ends
it, and an interruption cancels it (``context.cancel``). Word timestamps from the server become
the pipeline's word frames; a model that cannot align words says so in a warning,
and the turn's words are then released as its audio arrives.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from loguru import logger
from pipecat.frames.frames import ErrorFrame, Frame, TTSAudioRawFrame, TTSStoppedFrame
from pipecat.processors.frame_processor import FrameProcessorSetup
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import WebsocketTTSService
from websockets.protocol import State

from protocol.client_session import ClientSession
from protocol.codec import encode_client
from protocol.errors import ProtocolError
from protocol.messages import (
    PCM_SAMPLE_RATES,
    ClientMessage,
    ContextCancel,
    ContextCancelled,
    ContextCreate,
    ContextDone,
    ContextEnd,
    ErrorMessage,
    Keepalive,
    OutputFormat,
    ServerMessage,
    SessionCreated,
    SessionUpdate,
    TextAppend,
    Timestamps,
    WarningMessage,
)
from voiceclient.timestamps import is_no_timestamps_warning

SESSION_TIMEOUT_S = 10.0
"""How long a new socket may take to send ``session.created``."""
MAX_FAILED_REMEMBERED = 256
"""Failed context ids kept to recognise the refusals of what was in flight for them."""
KEEPALIVE_FRACTION = 0.5
"""Keepalives go out at this fraction of the server's idle timeout."""


@dataclass
class _Turn:
    """What the service tracks about one open server context."""

    sent: str = ""
    """The text appended so far, joined."""
    told: int = 0
    """How much of ``sent`` was released as untimed words (no word timestamps)."""
    audio_bytes: int = 0
    timed: bool = True
    """Word times will come (asked for, and no warning said otherwise)."""
    ended: bool = False
    """``context.end`` was sent."""


class VoiceServerTTSService(WebsocketTTSService):
    """Websocket TTS over protocol v1: one context per turn, several on one socket."""

    def __init__(
        self,
        *,
        url: str,
        api_key: str | None = None,
        voice: str | None = None,
        language: str | None = None,
        sample_rate: int | None = None,
        word_timestamps: bool = True,
        **kwargs: object,
    ) -> None:
        """``url``: the server's ``ws://host:port/v1/audio/speech/ws``; ``api_key``: its
        bearer key, if any; ``voice``/``language``: None for the model's defaults;
        ``sample_rate``: None for the pipeline's output rate (it must be one the server
        offers); ``word_timestamps``: ask the server for word times."""
        super().__init__(
            push_text_frames=False,
            push_start_frame=True,
            sample_rate=sample_rate,
            settings=TTSSettings(model=None, voice=voice, language=None),
            **kwargs,
        )
        self._url = url
        self._api_key = api_key
        self._language = language
        self._word_timestamps = word_timestamps
        self._session = ClientSession()
        self._turns: dict[str, _Turn] = {}
        self._failed: set[str] = set()
        """Contexts the server failed: what was already in flight for them is refused
        too, and those echoes are not errors of their own."""
        self._receive_task = None

    def can_generate_metrics(self) -> bool:
        return True

    # -- connection -------------------------------------------------------------

    async def setup(self, setup: FrameProcessorSetup) -> None:
        await super().setup(setup)
        if self.sample_rate not in PCM_SAMPLE_RATES:
            allowed = ", ".join(map(str, PCM_SAMPLE_RATES))
            raise ValueError(
                f"sample_rate: the server cannot produce {self.sample_rate} Hz; "
                f"set sample_rate (or the pipeline's audio_out_sample_rate) to one of {allowed}"
            )
        await self._connect()

    async def _connect(self) -> None:
        await super()._connect()
        await self._connect_websocket()
        if self._websocket and not self._receive_task:
            self._receive_task = self.create_task(self._receive_task_handler(self._report_error))

    async def _disconnect(self) -> None:
        await super()._disconnect()
        if self._receive_task:
            await self.cancel_task(self._receive_task)
            self._receive_task = None
        await self._disconnect_websocket()

    async def _connect_websocket(self) -> None:
        if self._websocket and self._websocket.state is State.OPEN:
            return
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        websocket = None
        try:
            websocket = await self._websocket_connect(
                self._url, additional_headers=headers, compression=None
            )
            session = ClientSession()
            first = await asyncio.wait_for(websocket.recv(), SESSION_TIMEOUT_S)
            created = session.receive_text(first) if isinstance(first, str) else []
            if not created or not isinstance(created[0], SessionCreated):
                raise ConnectionError(f"{self._url} did not start a session")
        except Exception as exc:
            if websocket is not None:
                await websocket.close()
            self._websocket = None
            await self.push_error(error_msg=f"cannot connect to {self._url}: {exc}", exception=exc)
            await self._call_event_handler("on_connection_error", f"{exc}")
            return
        self._websocket = websocket
        self._session = session
        self._turns.clear()
        self._failed.clear()
        if self._word_timestamps:
            await self._send(SessionUpdate(timestamps="word"))
        idle = created[0].limits.idle_timeout_s
        if idle:
            self._create_keepalive_task(idle * KEEPALIVE_FRACTION)
        await self._call_event_handler("on_connected")

    async def _disconnect_websocket(self) -> None:
        await self._cancel_keepalive_task()
        try:
            await self.stop_all_metrics()
            if self._websocket:
                await self._websocket.close()
        finally:
            self._websocket = None
            self._turns.clear()
            await self._call_event_handler("on_disconnected")

    async def _send_keepalive(self) -> None:
        await self._send(Keepalive())

    async def _send(self, msg: ClientMessage) -> None:
        if self._websocket is None:
            raise ConnectionError(f"not connected to {self._url}")
        await self._websocket.send(encode_client(msg))

    # -- text in ------------------------------------------------------------------

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """Append the text to the turn's context, opening it on the turn's first text."""
        if not self._websocket or self._websocket.state is not State.OPEN:
            await self._connect()
        if context_id in self._failed:
            yield None  # the error was reported when the server refused the context
            return
        try:
            turn = self._turns.get(context_id)
            if turn is None:
                turn = self._turns[context_id] = _Turn(timed=self._word_timestamps)
                await self._send(self._context_create(context_id))
            elif turn.sent and not turn.sent[-1].isspace() and not text[:1].isspace():
                # Sentences come without the space between them; the server joins
                # text exactly as sent.
                text = " " + text
            turn.sent += text
            # Aggregating sentences (Pipecat's default), each text is a whole sentence:
            # flush it so the server speaks it now rather than when the next one comes.
            flush = not self._is_streaming_tokens
            await self._send(TextAppend(context_id=context_id, text=text, flush=flush))
            await self.start_tts_usage_metrics(text)
            if not turn.timed:
                await self._release_untimed(context_id, turn)
        except Exception as exc:
            yield ErrorFrame(error=f"{self}: sending text failed: {exc}")
            yield TTSStoppedFrame(context_id=context_id)
            return
        yield None

    def _context_create(self, context_id: str) -> ContextCreate:
        voice = self._settings.voice
        return ContextCreate(
            context_id=context_id,
            voice=voice if isinstance(voice, str) else None,
            language=self._language,
            output_format=OutputFormat(encoding="pcm_s16le", sample_rate=self.sample_rate),
        )

    async def flush_audio(self, context_id: str | None = None) -> None:
        """The turn is complete: end its context (the server speaks what is left)."""
        context_id = context_id or self.get_active_audio_context_id()
        turn = self._turns.get(context_id or "")
        if turn is not None and not turn.ended and self._websocket:
            turn.ended = True
            await self._send(ContextEnd(context_id=context_id))

    async def on_audio_context_interrupted(self, context_id: str) -> None:
        """Barge-in: cancel the context so the server stops and frees it at once."""
        await self.stop_all_metrics()
        if self._turns.pop(context_id, None) is not None and self._websocket:
            try:
                await self._send(ContextCancel(context_id=context_id))
            except Exception as exc:
                logger.warning(f"{self}: cancelling {context_id} failed: {exc}")
        await super().on_audio_context_interrupted(context_id)

    # -- audio and events out ---------------------------------------------------------

    async def _receive_messages(self) -> None:
        assert self._websocket is not None
        async for data in self._websocket:
            try:
                if isinstance(data, bytes):
                    frame = self._session.receive_bytes(data)
                    await self._on_audio(frame.context_id or "", frame.payload)
                    continue
                messages = self._session.receive_text(data)
            except ProtocolError as err:
                await self.push_error(error_msg=f"{self}: server broke the protocol: {err}")
                continue
            for msg in messages:
                await self._on_message(msg)

    async def _on_audio(self, context_id: str, payload: bytes) -> None:
        turn = self._turns.get(context_id)
        if turn is None or not self.audio_context_available(context_id) or not payload:
            return
        await self.stop_ttfb_metrics()
        turn.audio_bytes += len(payload)
        await self.append_to_audio_context(
            context_id,
            TTSAudioRawFrame(
                audio=payload, sample_rate=self.sample_rate, num_channels=1, context_id=context_id
            ),
        )

    async def _on_message(self, msg: ServerMessage) -> None:
        match msg:
            case Timestamps() if msg.context_id in self._turns:
                words = [(w.text, w.start_ms / 1000) for w in msg.words]
                await self.add_word_timestamps(words, msg.context_id)
            case WarningMessage() if msg.context_id in self._turns and is_no_timestamps_warning(
                msg
            ):
                turn = self._turns[msg.context_id]
                turn.timed = False
                await self._release_untimed(msg.context_id, turn)
            case ContextDone():
                self._turns.pop(msg.context_id, None)
                await self._end_audio(msg.context_id)
            case ContextCancelled():
                self._turns.pop(msg.context_id, None)
            case ErrorMessage():
                await self._on_error(msg)

    async def _on_error(self, msg: ErrorMessage) -> None:
        context_id = msg.context_id or ""
        if context_id in self._failed and msg.code in ("context_closed", "unknown_context"):
            return
        # A fatal error closes the socket: pipecat's receive loop reconnects.
        await self.push_error(error_msg=f"{self}: {msg.code}: {msg.message}")
        if self._turns.pop(context_id, None) is not None:
            if len(self._failed) >= MAX_FAILED_REMEMBERED:
                self._failed.clear()
            self._failed.add(context_id)
            await self._end_audio(context_id)
            if self._session.stream_of(context_id) is not None and not msg.fatal:
                # The server keeps some failed contexts open (text_too_long): free it.
                await self._send(ContextCancel(context_id=context_id))

    async def _end_audio(self, context_id: str) -> None:
        if self.audio_context_available(context_id):
            await self.append_to_audio_context(context_id, TTSStoppedFrame(context_id=context_id))
            await self.remove_audio_context(context_id)

    async def _release_untimed(self, context_id: str, turn: _Turn) -> None:
        """Without word timestamps, release the words sent so far at the audio time
        reached so far, so the turn's text still reaches the conversation."""
        new, turn.told = turn.sent[turn.told :], len(turn.sent)
        at = turn.audio_bytes / 2 / self.sample_rate
        words = [(word, at) for word in re.findall(r"\S+", new)]
        if words:
            await self.add_word_timestamps(words, context_id)
