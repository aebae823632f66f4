"""GET /v1/audio/speech/stream: vllm-omni's streaming-text WebSocket, served by our engine.

The same message set and order as vllm-omni's ``serving_speech_stream.py`` (see
``protocol/compat_vllm.py``), so its clients work unchanged:

- ``session.config`` must come first; before it, any other or any bad message gets an
  ``error`` and the socket closes. It may be sent again between utterances (not while
  text of an utterance is pending: that is an ``error`` and the old config stays).
- ``input.text`` is cut by ``split_granularity``: ``none`` waits for ``input.done``;
  ``sentence`` and ``clause`` cut as text streams in (with our segmenter, the clause
  mode exactly as the native endpoint's automatic mode).
- Every cut is one "sentence", spoken as one engine context, in order: ``audio.start``,
  its audio, ``audio.done {total_bytes, error}``. Without ``stream_audio`` the audio is
  one binary frame holding the whole sentence as a file of ``response_format``; with it,
  raw chunks as they are made (pcm: s16le at the model's rate, named in ``audio.start``;
  wav: one header with open sizes, then s16le; opus: Ogg pages).
- ``input.done`` flushes the rest, then ``session.done {utterance_index,
  total_sentences}``; the socket stays open. ``session.close`` closes it with 1000 once
  everything before it has been answered.
- Errors after the first config are not fatal. A failed sentence gets an ``error``
  (``partial_audio``/``action: discard`` when some of its audio went out) and still its
  ``audio.done`` with ``error: true``.

Unlike vllm-omni the socket is read while audio is sent, so a disconnect cancels the
sentence in flight at once and frees its engine slot; everything that is answered goes
through one ordered queue, so the order of the replies stays vllm-omni's.

A client that does not read is dropped as on the native socket: replies waiting in the
queue count toward ``Limits.outbox_max_bytes``, every send must complete within
``Limits.slow_reader_timeout_s``, and either failing frees the sentence in flight and
closes 1008 (aborting the connection when even that cannot be sent). On shutdown the
utterance in progress may finish until the deadline; then it gets an ``error`` and 1012.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

import msgspec
import numpy as np
from starlette.websockets import WebSocket, WebSocketDisconnect

from models.base import ModelInputError, SynthParams
from protocol.compat_vllm import (
    VllmAudioDone,
    VllmAudioStart,
    VllmError,
    VllmInputDone,
    VllmInputText,
    VllmServerMessage,
    VllmSessionClose,
    VllmSessionConfig,
    VllmSessionDone,
    decode_vllm_client,
    encode_vllm_server,
    vllm_error,
)
from protocol.errors import CloseCode, ProtocolError
from protocol.validation import check_text
from voiceserver.audio import AudioFormat, OutputStage, make_output, wav_header
from voiceserver.audio.containers import encode_whole_file
from voiceserver.audio.format import OPUS_SAMPLE_RATES, PCM_SAMPLE_RATES
from voiceserver.engine.client import Overloaded
from voiceserver.params import resolve_params
from voiceserver.runtime import Runtime
from voiceserver.session.output import ContextOutput
from voiceserver.session.peer import FAREWELL_S, PeerGone, say_farewell
from voiceserver.session.utterance import Utterance, UtteranceError
from voiceserver.text.segmenter import SegmenterConfig, TextSegmenter
from voiceserver.transport.auth import admit_websocket, chosen_subprotocol
from voiceserver.transport.ws import WebSocketPeer, refuse_full

log = logging.getLogger(__name__)

ENDPOINT = "ws_compat"
CONFIG_TIMEOUT_S = 10.0
"""vllm-omni's wait for the first ``session.config``."""
STREAMABLE_FORMATS = ("pcm", "wav", "opus")
"""``response_format`` values that ``stream_audio`` can send piece by piece."""


class ConfigError(ValueError):
    """A ``session.config`` that cannot be applied."""


@dataclass(frozen=True)
class AudioSpec:
    response_format: str
    stream: bool
    sample_rate: int
    """Rate of the audio sent: the model's own wherever the format allows it."""

    @property
    def wire_format(self) -> AudioFormat:
        """What the output stage makes: s16le PCM, or Ogg/Opus for ``opus``."""
        if self.response_format == "opus":
            return AudioFormat("opus", self.sample_rate, "ogg")
        return AudioFormat("pcm_s16le", self.sample_rate)


@dataclass(frozen=True)
class CompatSettings:
    """One applied ``session.config``."""

    params: SynthParams
    audio: AudioSpec
    segmenter: SegmenterConfig


@dataclass(frozen=True)
class _Sentence:
    settings: CompatSettings
    text: str
    utterance_index: int
    sentence_index: int


@dataclass(frozen=True)
class _Close:
    code: int
    reason: str


_Job = _Sentence | str | _Close


class _Kind(msgspec.Struct):
    type: Any = None


_kind_decoder = msgspec.json.Decoder(_Kind)


def _message_type(raw: str) -> object:
    try:
        return _kind_decoder.decode(raw).type
    except (msgspec.DecodeError, UnicodeEncodeError, RecursionError):
        return None


def _output_rate(model_rate: int, allowed: tuple[int, ...]) -> int:
    if model_rate in allowed:
        return model_rate
    return min((r for r in allowed if r >= model_rate), default=max(allowed))


def settings_from_config(rt: Runtime, cfg: VllmSessionConfig) -> CompatSettings:
    """Validate a ``session.config`` against the loaded model; raises ConfigError or
    ModelInputError naming what to change."""
    if cfg.word_timestamps:
        raise ConfigError("word_timestamps: not available on this server; set it to false")
    for name in ("instructions", "ref_text"):
        value = getattr(cfg, name)
        if value is not None:
            try:
                check_text(value, name)
            except ProtocolError as err:
                raise ConfigError(err.message) from None
    if cfg.stream_audio and cfg.response_format not in STREAMABLE_FORMATS:
        raise ConfigError(
            f"response_format: {cfg.response_format!r} cannot be streamed; with"
            f" stream_audio=true use one of: {', '.join(STREAMABLE_FORMATS)}"
        )
    extra: dict[str, Any] = {
        "ref_audio": cfg.ref_audio,
        "ref_text": cfg.ref_text,
        "x_vector_only": cfg.x_vector_only_mode,
        "speaker_embedding": cfg.speaker_embedding,
        "seed": cfg.seed,
        "max_new_tokens": cfg.max_new_tokens,
        "streaming_text": None if cfg.non_streaming_mode is None else not cfg.non_streaming_mode,
    }
    language = cfg.language
    if language is not None and language.lower() == "auto":
        language = None  # vllm-omni's "Auto": the model's own default
    params = resolve_params(
        rt,
        model=cfg.model,
        voice=cfg.effective_voice,
        language=language,
        speed=1.0 if cfg.speed is None else cfg.speed,
        instructions=cfg.instructions,
        extra={k: v for k, v in extra.items() if v is not None},
    )
    model_rate = rt.model.capabilities.sample_rate
    allowed = OPUS_SAMPLE_RATES if cfg.response_format == "opus" else PCM_SAMPLE_RATES
    audio = AudioSpec(cfg.response_format, cfg.stream_audio, _output_rate(model_rate, allowed))
    audio.wire_format.validate()
    base = replace(rt.model_config.segmenter, mode="auto", max_delay_ms=None)
    split = {"clause": "auto"}.get(cfg.split_granularity, cfg.split_granularity)
    segmenter = base.with_split(split)  # type: ignore[arg-type]
    return CompatSettings(params, audio, segmenter)


class SentenceEncoder:
    """Model-rate float32 PCM of one sentence -> the bytes sent for it (a
    ``voiceserver.session.output.Stage``, so a ContextOutput runs it).

    Streamed, ``feed`` returns what is ready, as one payload; otherwise it returns
    nothing until the final chunk, then the whole file.
    """

    def __init__(self, spec: AudioSpec, input_rate: int) -> None:
        self.spec = spec
        self._stage: OutputStage = make_output(spec.wire_format, input_rate)
        self._body = bytearray()
        self._header_due = spec.stream and spec.response_format == "wav"

    @property
    def cheap(self) -> bool:
        # An mp3 or flac sentence is encoded whole at its end: that is codec work.
        whole_file_codec = not self.spec.stream and self.spec.response_format in ("mp3", "flac")
        return self._stage.cheap and not whole_file_codec

    @property
    def finished(self) -> bool:
        return self._stage.finished

    def feed(self, pcm: np.ndarray, *, drain: bool = False, final: bool = False) -> list[bytes]:
        # A sentence has no flush points (input.done ends it): `drain` never comes.
        data = b"".join(self._stage.push(pcm))
        if final:
            data += b"".join(self._stage.finish())
        if self.spec.stream:
            if self._header_due and (data or final):
                self._header_due = False
                data = wav_header(self.spec.sample_rate) + data
            return [data] if data else []
        self._body += data
        return [self._file()] if final else []

    def close(self) -> None:
        self._stage.close()

    def _file(self) -> bytes:
        fmt, rate = self.spec.response_format, self.spec.sample_rate
        if fmt == "wav":
            return wav_header(rate, data_bytes=len(self._body)) + self._body
        if fmt in ("mp3", "flac"):
            return encode_whole_file(bytes(self._body), rate, fmt)
        return bytes(self._body)


class CompatSession:
    """One connection: the receive loop (state, splitting) and the worker that speaks."""

    def __init__(self, rt: Runtime, ws: WebSocket) -> None:
        self.rt = rt
        self.ws = ws
        self._peer = WebSocketPeer(ws)
        self.settings: CompatSettings | None = None
        self._segmenter: TextSegmenter | None = None
        self._utterance_index = 0
        self._sentence_index = 0
        self._utterance_open = False
        self._closing = False
        self._jobs: asyncio.Queue[_Job] = asyncio.Queue()
        self._pending = 0
        """Jobs queued or in progress; the idle timer runs only at zero."""
        self._queued_chars = 0
        """Characters of queued sentences not spoken yet (bounded by max_text_chars)."""
        self._queued_bytes = 0
        """Bytes of queued replies not sent yet (bounded by outbox_max_bytes)."""
        self._worker: asyncio.Task[None] | None = None
        self._farewell: asyncio.Task[None] | None = None
        self.draining = False
        self.dropped = False

    # -- lifecycle (voiceserver.lifecycle.Drainable) ------------------------

    @property
    def busy(self) -> bool:
        return self._pending > 0 and not self.dropped

    def begin_drain(self) -> None:
        self.draining = True
        if not self._pending:
            self._put(_Close(int(CloseCode.SERVICE_RESTART), "server shutting down"))

    def cut(self) -> None:
        self._drop(
            CloseCode.SERVICE_RESTART,
            "server_shutdown: the server shut down before the utterance finished",
            FAREWELL_S,
        )

    def _drop(self, code: CloseCode, message: str, farewell_s: float | None = None) -> None:
        """End the connection from the server's side now (slow reader, shutdown)."""
        if self.dropped:
            return
        self.dropped = self._closing = True
        log.info("dropping a vllm-compatible WebSocket client: %s", message)
        self.rt.metrics.error(ENDPOINT, message.split(":", 1)[0])
        if self._worker is not None:
            self._worker.cancel()  # cancels the sentence in flight: its engine slot is freed
        timeout = self.rt.server.limits.slow_reader_timeout_s if farewell_s is None else farewell_s
        self._farewell = asyncio.create_task(
            say_farewell(
                self._peer,
                [encode_vllm_server(VllmError(message=message))],
                int(code),
                message,
                timeout,
            )
        )

    async def run(self) -> None:
        self._worker = worker = asyncio.create_task(self._work())
        self.rt.lifecycle.register(self)
        try:
            while True:
                timeout = (
                    CONFIG_TIMEOUT_S
                    if self.settings is None
                    else self.rt.server.limits.idle_timeout_s
                )
                try:
                    message = await asyncio.wait_for(self.ws.receive(), timeout)
                except TimeoutError:
                    self._on_timeout()
                    continue
                if message["type"] == "websocket.disconnect":
                    return
                if self._closing:
                    continue
                if message.get("text") is not None:
                    self._on_text(message["text"])
                else:
                    self._reject("binary frames are not accepted; send JSON text messages")
        finally:
            # A closed socket ends everything at once: the sentence in flight is
            # cancelled (its Utterance frees the engine slot) and the queue dropped.
            self.rt.lifecycle.unregister(self)
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await worker

    # -- receive side ------------------------------------------------------

    def _on_timeout(self) -> None:
        if self._pending or self._closing:
            return
        if self.settings is None:
            self._fatal("Timeout waiting for session.config", CloseCode.IDLE_TIMEOUT)
        else:
            self._fatal("Idle timeout: no message received", CloseCode.IDLE_TIMEOUT)

    def _on_text(self, raw: str) -> None:
        try:
            msg = decode_vllm_client(raw)
        except ProtocolError as err:
            self.rt.metrics.error(ENDPOINT, str(err.code))
            text = vllm_error(err).message
            if _message_type(raw) == "session.config":
                text = f"Invalid session config: {text}"
            self._reject(text)
            return
        if isinstance(msg, VllmSessionConfig):
            self._configure(msg)
        elif self.settings is None:
            self._reject(f"Expected session.config, got: {msg.__struct_config__.tag}")
        elif isinstance(msg, VllmInputText):
            self._input_text(msg.text)
        elif isinstance(msg, VllmInputDone):
            self._input_done()
        elif isinstance(msg, VllmSessionClose):
            self._closing = True
            self._put(_Close(int(CloseCode.NORMAL), "session closed"))

    def _configure(self, msg: VllmSessionConfig) -> None:
        if self._utterance_open:
            self._reject(
                "session.config cannot be applied while an utterance is in progress;"
                " send input.done first"
            )
            return
        try:
            settings = settings_from_config(self.rt, msg)
        except ModelInputError as exc:
            self.rt.metrics.error(ENDPOINT, exc.code)
            self._reject(f"Invalid session config: {exc.code}: {exc}")
            return
        except ValueError as exc:  # ConfigError, or an output format the encoders refuse
            self.rt.metrics.error(ENDPOINT, "unsupported_value")
            self._reject(f"Invalid session config: {exc}")
            return
        self.settings = settings
        self._segmenter = TextSegmenter(settings.segmenter)

    def _input_text(self, text: str) -> None:
        assert self._segmenter is not None
        if not text:
            return
        if self.draining:
            self._reject("server_shutdown: the server is shutting down; reconnect later")
            return
        try:
            check_text(text, "text")
        except ProtocolError as err:
            self.rt.metrics.error(ENDPOINT, str(err.code))
            self._reject(vllm_error(err).message)
            return
        limit = self.rt.server.limits.max_text_chars
        if self._queued_chars + self._segmenter.buffered_chars + len(text) > limit:
            self.rt.metrics.error(ENDPOINT, "text_too_long")
            self._reject(
                f"text_too_long: more than {limit} characters would wait to be spoken;"
                " send less text or wait for audio.done"
            )
            return
        self._utterance_open = True
        for segment in self._segmenter.push(text, time.monotonic()):
            self._add_sentence(segment.text)

    def _input_done(self) -> None:
        assert self._segmenter is not None and self.settings is not None
        for segment in self._segmenter.flush():
            self._add_sentence(segment.text)
        done = VllmSessionDone(
            utterance_index=self._utterance_index, total_sentences=self._sentence_index
        )
        self._put(encode_vllm_server(done))
        self._utterance_index += 1
        self._sentence_index = 0
        self._utterance_open = False
        # The next utterance starts afresh (its first clause may again be cut early).
        self._segmenter = TextSegmenter(self.settings.segmenter)

    def _add_sentence(self, text: str) -> None:
        assert self.settings is not None
        self._queued_chars += len(text)
        self._put(_Sentence(self.settings, text, self._utterance_index, self._sentence_index))
        self._sentence_index += 1

    def _reject(self, message: str) -> None:
        """An ``error``; before the first config it also ends the connection, as in vllm-omni."""
        if self.settings is None:
            self._fatal(message, CloseCode.POLICY_VIOLATION)
        else:
            self._put(encode_vllm_server(VllmError(message=message)))

    def _fatal(self, message: str, code: CloseCode) -> None:
        self._closing = True
        self._put(encode_vllm_server(VllmError(message=message)))
        self._put(_Close(int(code), message[:120]))

    def _put(self, job: _Job) -> None:
        if self.dropped:
            return
        self._pending += 1
        if isinstance(job, str):
            self._queued_bytes += len(job)
        self._jobs.put_nowait(job)
        if self._queued_bytes > self.rt.server.limits.outbox_max_bytes:
            self._drop(
                CloseCode.POLICY_VIOLATION,
                "slow_reader: too many replies queued for this client; read what is sent",
            )

    # -- worker side -------------------------------------------------------

    async def _work(self) -> None:
        try:
            while True:
                job = await self._jobs.get()
                if isinstance(job, _Close):
                    await self._close(job.code, job.reason)
                    return
                if isinstance(job, str):
                    self._queued_bytes -= len(job)
                    await self._send_text(job)
                else:
                    try:
                        await self._speak(job)
                    finally:
                        self._queued_chars -= len(job.text)
                self._pending -= 1
                if self.draining and not self._pending:
                    await self._close(int(CloseCode.SERVICE_RESTART), "server shutting down")
                    return
        except PeerGone:
            return  # the client is gone; the receive loop sees the disconnect
        except TimeoutError:
            limit = self.rt.server.limits.slow_reader_timeout_s
            self._drop(
                CloseCode.POLICY_VIOLATION,
                f"slow_reader: the connection did not take data for {limit:g} s",
            )
        except Exception as exc:
            log.exception("compat session failed")
            with contextlib.suppress(Exception):
                await self._send(VllmError(message=f"Internal error: {exc}"))
            await self._close(int(CloseCode.INTERNAL_ERROR), "internal error")

    async def _send_text(self, data: str) -> None:
        """Send within the slow-reader deadline (TimeoutError past it)."""
        async with asyncio.timeout(self.rt.server.limits.slow_reader_timeout_s):
            await self._peer.send_text(data)

    async def _send_bytes(self, data: bytes) -> None:
        async with asyncio.timeout(self.rt.server.limits.slow_reader_timeout_s):
            await self._peer.send_bytes(data)

    async def _speak(self, job: _Sentence) -> None:
        spec = job.settings.audio
        caps = self.rt.model.capabilities
        describe = spec.stream and spec.response_format == "pcm"
        start = VllmAudioStart(
            utterance_index=job.utterance_index,
            sentence_index=job.sentence_index,
            sentence_text=job.text,
            format=spec.response_format,
            sample_rate=spec.sample_rate if describe else None,
            channels=1 if describe else None,
        )
        started = False

        async def send_start() -> None:
            nonlocal started
            if not started:
                started = True
                await self._send(start)

        # Streamed pcm announces itself with its first audio, as vllm-omni does.
        if not describe:
            await send_start()
        output = ContextOutput(SentenceEncoder(spec, caps.sample_rate), self.rt.encode_pool)
        total = 0
        failure: UtteranceError | None = None
        try:
            # The utterance's own tracker counts this sentence in the metrics, once.
            async with Utterance(
                self.rt, job.settings.params, "none", endpoint=ENDPOINT, live=True
            ) as utterance:
                utterance.append(job.text)
                utterance.end()
                async for chunk in utterance.events():
                    data = b"".join(await output.feed(chunk.pcm, final=chunk.final))
                    if data:
                        await send_start()
                        await self._send_bytes(data)
                        total += len(data)
        except UtteranceError as exc:
            failure = exc
        except Overloaded as exc:
            self.rt.metrics.error(ENDPOINT, "overloaded")
            failure = UtteranceError("overloaded", str(exc))
        finally:
            output.close()  # frees the encoder of a sentence that did not finish
        await send_start()
        if failure is not None:
            partial = total > 0
            await self._send(
                VllmError(
                    message=f"Generation failed for utterance {job.utterance_index},"
                    f" sentence {job.sentence_index}: {failure.code}: {failure.message}",
                    partial_audio=True if partial else None,
                    action="discard" if partial else None,
                )
            )
        await self._send(
            VllmAudioDone(
                utterance_index=job.utterance_index,
                sentence_index=job.sentence_index,
                total_bytes=total,
                error=failure is not None,
            )
        )

    async def _send(self, msg: VllmServerMessage) -> None:
        await self._send_text(encode_vllm_server(msg))

    async def _close(self, code: int, reason: str) -> None:
        with contextlib.suppress(PeerGone):
            await self._peer.close(code, reason)


async def vllm_speech_stream(ws: WebSocket) -> None:
    rt: Runtime = ws.app.state.runtime
    if not await admit_websocket(ws, rt.server.api_keys):
        return
    await ws.accept(subprotocol=chosen_subprotocol(ws.headers))
    if rt.engine.full:
        await refuse_full(ws, rt, ENDPOINT)
        return
    rt.session_opened(ENDPOINT)
    try:
        await CompatSession(rt, ws).run()
    except (WebSocketDisconnect, OSError):
        pass
    except Exception:
        log.exception("compat session failed")
        with contextlib.suppress(Exception):
            await ws.close(code=int(CloseCode.INTERNAL_ERROR), reason="internal error")
    finally:
        rt.session_closed(ENDPOINT)
