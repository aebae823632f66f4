"""LiveKit Agents TTS plugin: this server as a streaming ``tts.TTS``.

Import it only where livekit-agents is installed (the rest of voiceclient does not
need it)::

    from livekit.agents import AgentSession
    from voiceclient.livekit_tts import VoiceServerTTS

    session = AgentSession(tts=VoiceServerTTS(url="ws://127.0.0.1:8000/v1/audio/speech/ws"))

Every ``SynthesizeStream`` (one agent reply) is one server context on a socket the
TTS instance keeps open and shares: pushed text becomes ``text.append``, ``flush()``
becomes ``context.flush``, ``end_input()`` becomes ``context.end``, and closing a
stream before its audio is done (an interruption) cancels the context.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from livekit.agents import (
    DEFAULT_API_CONNECT_OPTIONS,
    APIConnectionError,
    APIConnectOptions,
    APIError,
    APIStatusError,
    tts,
)
from livekit.agents.types import TimedString

from protocol.messages import PCM_SAMPLE_RATES, OutputFormat, WordTimestamp
from voiceclient.chunk import AudioChunk
from voiceclient.context import TimedWords, VoiceContext
from voiceclient.errors import VoiceConnectionError, VoiceServerError
from voiceclient.shared_connection import SharedConnection
from voiceclient.timestamps import is_no_timestamps_warning

CANCEL_TIMEOUT_S = 2.0
"""How long an early close waits for ``context.cancelled`` before giving up on it."""


@dataclass(frozen=True, slots=True)
class VoiceServerTTSOptions:
    """What every context of a :class:`VoiceServerTTS` asks for."""

    url: str
    """The server's WebSocket URL, ``ws://host:port/v1/audio/speech/ws``."""
    api_key: str | None = None
    """Bearer key, when the server was started with ``--api-key``."""
    voice: str | None = None
    """Voice name; None: the model's default voice."""
    language: str | None = None
    """Language code; None: the model's default."""
    sample_rate: int = 24000
    """Output rate in Hz (the server resamples): 8000, 16000, 22050, 24000, 44100 or 48000."""
    word_timestamps: bool = True
    """Ask for word timestamps (aligned transcripts); a model without them says so in a
    warning and the transcript then follows the text without times."""


class VoiceServerTTS(tts.TTS):
    """Streaming TTS over one kept-alive WebSocket shared by all of its streams."""

    def __init__(
        self,
        *,
        url: str,
        api_key: str | None = None,
        voice: str | None = None,
        language: str | None = None,
        sample_rate: int = 24000,
        word_timestamps: bool = True,
    ) -> None:
        if sample_rate not in PCM_SAMPLE_RATES:
            allowed = ", ".join(map(str, PCM_SAMPLE_RATES))
            raise ValueError(f"sample_rate: {sample_rate} is not supported; use one of {allowed}")
        super().__init__(
            capabilities=tts.TTSCapabilities(streaming=True, aligned_transcript=True),
            sample_rate=sample_rate,
            num_channels=1,
        )
        self.options = VoiceServerTTSOptions(
            url, api_key, voice, language, sample_rate, word_timestamps
        )
        defaults = {"timestamps": "word"} if word_timestamps else {}
        self.connection = SharedConnection(url, api_key, **defaults)

    @property
    def model(self) -> str:
        return "voiceserver"

    @property
    def provider(self) -> str:
        return "voiceserver"

    def synthesize(
        self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> VoiceServerChunkedStream:
        return VoiceServerChunkedStream(tts=self, input_text=text, conn_options=conn_options)

    def stream(
        self, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> VoiceServerSynthesizeStream:
        return VoiceServerSynthesizeStream(tts=self, conn_options=conn_options)

    def prewarm(self) -> None:
        """Open the socket ahead of the first reply (needs a running event loop)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = loop.create_task(self._prewarm())
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _prewarm(self) -> None:
        with contextlib.suppress(VoiceServerError):
            await self.connection.get()

    async def aclose(self) -> None:
        await self.connection.aclose()

    async def open_context(self, timeout: float) -> VoiceContext:
        """A new context on the shared socket; raises livekit's API errors."""
        opts = self.options
        try:
            client = await asyncio.wait_for(self.connection.get(), timeout)
            return await asyncio.wait_for(
                client.create_context(
                    voice=opts.voice,
                    language=opts.language,
                    output_format=OutputFormat(encoding="pcm_s16le", sample_rate=opts.sample_rate),
                    # Text may follow at once; a refusal surfaces from the audio.
                    wait=False,
                ),
                timeout,
            )
        except TimeoutError as exc:
            raise APIConnectionError(f"{opts.url} did not answer within {timeout} s") from exc
        except VoiceServerError as exc:
            raise api_error(exc) from exc


def api_error(err: VoiceServerError) -> APIError:
    """The livekit error for a server or connection error (connection losses retry)."""
    if isinstance(err, VoiceConnectionError):
        return APIConnectionError(str(err))
    retryable = err.code in ("overloaded", "rate_limited", "server_shutdown", "internal_error")
    return APIStatusError(str(err), status_code=-1, body=err.code, retryable=retryable)


class _Transcript:
    """Turns a context's word timestamps into livekit ``TimedString``s whose texts,
    joined, are the text sent (spaces and punctuation between words included)."""

    def __init__(self, timed: bool) -> None:
        self.sent = ""
        """Every piece of text sent to the context, joined (timestamps index it)."""
        self.timed = timed
        """Word times will come (asked for, and no warning said otherwise)."""
        self._told = 0
        """How much of ``sent`` is in a TimedString already."""

    def words(self, words: list[WordTimestamp]) -> list[TimedString]:
        out = []
        for word in words:
            end = max(word.char_end, self._told)
            while end < len(self.sent) and self.sent[end].isspace():
                end += 1
            text, self._told = self.sent[self._told : end] or word.text, end
            out.append(
                TimedString(text, start_time=word.start_ms / 1000, end_time=word.end_ms / 1000)
            )
        return out

    def untimed(self) -> list[TimedString]:
        """Text sent since the last call, without times (the model cannot align words)."""
        text, self._told = self.sent[self._told :], len(self.sent)
        return [TimedString(text)] if text else []


async def pump_audio(ctx: VoiceContext, emitter: tts.AudioEmitter, transcript: _Transcript) -> None:
    """Forward a context's audio and transcript into a livekit emitter.

    Flush marks are not forwarded: the emitter releases held audio itself when the
    next frame is late, and an explicit flush before the segment's end would make it
    add a 10 ms marker of silence."""
    async for event in ctx.events():
        if isinstance(event, AudioChunk):
            if not transcript.timed:
                emitter.push_timed_transcript(transcript.untimed())
            emitter.push(event.payload)
        elif isinstance(event, TimedWords):
            emitter.push_timed_transcript(transcript.words(event))
        elif is_no_timestamps_warning(event):
            transcript.timed = False


async def cancel_quietly(ctx: VoiceContext) -> None:
    """Cancel a context that is still running (an interruption), without raising."""
    if ctx.finished:
        return
    with contextlib.suppress(VoiceServerError, TimeoutError):
        await asyncio.wait_for(asyncio.shield(ctx.cancel()), CANCEL_TIMEOUT_S)


class VoiceServerSynthesizeStream(tts.SynthesizeStream):
    """One agent reply: one context; closing early cancels it."""

    def __init__(self, *, tts: VoiceServerTTS, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, conn_options=conn_options)
        self._vs_tts = tts
        self.context: VoiceContext | None = None
        """The server context of the current attempt."""

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        ctx = await self._vs_tts.open_context(self._conn_options.timeout)
        self.context = ctx
        output_emitter.initialize(
            request_id=ctx.context_id,
            sample_rate=self._vs_tts.sample_rate,
            num_channels=1,
            mime_type="audio/pcm",
            stream=True,
        )
        output_emitter.start_segment(segment_id=ctx.context_id)
        transcript = _Transcript(self._vs_tts.options.word_timestamps)
        sender = asyncio.create_task(self._send_input(ctx, transcript))
        reader = asyncio.create_task(pump_audio(ctx, output_emitter, transcript))
        try:
            # A server error fails the reader while text may still be coming: gather
            # raises it at once.
            await asyncio.gather(sender, reader)
            output_emitter.end_segment()
        except VoiceServerError as exc:
            raise api_error(exc) from exc
        finally:
            sender.cancel()
            reader.cancel()
            await cancel_quietly(ctx)

    async def _send_input(self, ctx: VoiceContext, transcript: _Transcript) -> None:
        unflushed = False
        async for data in self._input_ch:
            if isinstance(data, self._FlushSentinel):
                if unflushed:
                    await ctx.flush()
                    unflushed = False
                continue
            self._mark_started()
            transcript.sent += data
            unflushed = True
            await ctx.append(data)
        await ctx.end()


class VoiceServerChunkedStream(tts.ChunkedStream):
    """``synthesize(text)``: the whole text in one context."""

    def __init__(
        self, *, tts: VoiceServerTTS, input_text: str, conn_options: APIConnectOptions
    ) -> None:
        super().__init__(tts=tts, input_text=input_text, conn_options=conn_options)
        self._vs_tts = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        ctx = await self._vs_tts.open_context(self._conn_options.timeout)
        output_emitter.initialize(
            request_id=ctx.context_id,
            sample_rate=self._vs_tts.sample_rate,
            num_channels=1,
            mime_type="audio/pcm",
        )
        transcript = _Transcript(self._vs_tts.options.word_timestamps)
        transcript.sent = self.input_text
        try:
            await ctx.append(self.input_text)
            await ctx.end()
            await pump_audio(ctx, output_emitter, transcript)
        except VoiceServerError as exc:
            raise api_error(exc) from exc
        finally:
            await cancel_quietly(ctx)
