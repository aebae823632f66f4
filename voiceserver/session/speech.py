"""SpeechSession: one WebSocket client, many contexts, one engine.

The transport feeds it client frames; it turns protocol events into engine
inbox messages, and engine events into encoded frames in its outbox, which a
single writer task sends in order. Resampling and encoding run in a thread
pool, never on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from itertools import count
from typing import Any

from models.base import ModelInputError, SynthParams
from protocol.errors import CloseCode, ErrorCode, ProtocolError
from protocol.events import (
    CancelRequested,
    CloseRequested,
    ContextOpened,
    EndRequested,
    ErrorEvent,
    Event,
    FlushRequested,
    KeepaliveReceived,
    SettingsUpdated,
    TextAppended,
)
from protocol.messages import ContextSettings, Usage
from protocol.session import ServerSession
from voiceserver.audio import AudioFormat, make_output
from voiceserver.engine.messages import (
    AppendText,
    AudioChunk,
    Cancel,
    CloseInput,
    ContextFailed,
    EngineEvent,
    OpenContext,
)
from voiceserver.params import resolve_params
from voiceserver.runtime import Runtime
from voiceserver.session.context import LiveContext
from voiceserver.session.outbox import Outbox
from voiceserver.text.segmenter import Segment, TextSegmenter
from voiceserver.text.words import WordStreamer

log = logging.getLogger(__name__)

# ContextSettings fields handed to the model as SynthParams.extra (voice clone,
# sampling); a model that has no use for one ignores it.
EXTRA_FIELDS = (
    "ref_audio",
    "ref_text",
    "speaker_embedding",
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
    "seed",
    "max_new_tokens",
)

SendText = Callable[[str], Awaitable[None]]
SendBytes = Callable[[bytes], Awaitable[None]]
Close = Callable[[int, str], Awaitable[None]]


class _Cancelled:
    def __init__(self, ctx: LiveContext) -> None:
        self.ctx = ctx


class _CloseSocket:
    def __init__(self, code: int, reason: str) -> None:
        self.code, self.reason = code, reason


class SpeechSession:
    def __init__(
        self,
        runtime: Runtime,
        proto: ServerSession,
        send_text: SendText,
        send_bytes: SendBytes,
        close: Close,
    ) -> None:
        self.rt = runtime
        self.proto = proto
        self._send_text = send_text
        self._send_bytes = send_bytes
        self._close = close
        self._loop = asyncio.get_running_loop()
        self._outbox = Outbox(runtime.server.limits.outbox_max_bytes)
        self._contexts: dict[str, LiveContext] = {}
        self._by_cid: dict[int, LiveContext] = {}
        self._flush_ids = count(1)
        self._over_since: float | None = None
        self.last_activity = time.monotonic()
        self.closed = False

    # -- input (event loop) -------------------------------------------------

    def on_text(self, data: str) -> None:
        self.last_activity = time.monotonic()
        self._handle(self.proto.receive_text(data))

    def on_bytes(self, data: bytes) -> None:
        self.last_activity = time.monotonic()
        self._handle(self.proto.receive_bytes(data))

    def _handle(self, events: list[Event]) -> None:
        for event in events:
            try:
                self._dispatch(event)
            except ProtocolError as err:
                self._error(err)

    def _dispatch(self, event: Event) -> None:
        match event:
            case ContextOpened():
                self._open(event)
            case TextAppended():
                self._append(event)
            case FlushRequested():
                ctx = self._contexts.get(event.context_id)
                if ctx is not None:
                    self._flush(ctx, event.flush_id)
            case EndRequested():
                ctx = self._contexts.get(event.context_id)
                if ctx is not None:
                    self._end(ctx)
            case CancelRequested():
                self._cancel(event.context_id)
            case SettingsUpdated():
                self._outbox.put(self.proto.updated_message(event.event_id))
                model = event.settings.model
                if model is not None and model not in self.rt.model_names:
                    self._error(
                        ProtocolError(
                            ErrorCode.UNKNOWN_MODEL,
                            f"unknown model {model!r}; this server serves {self.rt.model_config.name!r}",
                            param="model",
                            event_id=event.event_id,
                        )
                    )
            case KeepaliveReceived():
                pass
            case CloseRequested():
                self._maybe_finish_close()
            case ErrorEvent():
                self._error(event.error)

    def _error(self, err: ProtocolError) -> None:
        self.rt.metrics.error("ws", str(err.code))
        self._outbox.put(self.proto.error_message(err))
        if err.fatal:
            code = (
                CloseCode.MESSAGE_TOO_BIG
                if err.code == ErrorCode.MESSAGE_TOO_BIG
                else CloseCode.POLICY_VIOLATION
            )
            self._outbox.put(_CloseSocket(int(code), err.message[:120]))

    def _open(self, event: ContextOpened) -> None:
        settings = event.settings
        try:
            params = self._params(settings)
            fmt = AudioFormat(**_format_fields(settings)).normalized()
            stage = make_output(fmt, self.rt.model.capabilities.sample_rate)
        except ModelInputError as exc:
            self._reject(event, ProtocolError(_code(exc.code), str(exc), param=exc.param))
            return
        except ValueError as exc:
            self._reject(
                event, ProtocolError(ErrorCode.UNSUPPORTED_VALUE, str(exc), param="output_format")
            )
            return
        caps = self.rt.model.capabilities
        segmenter = words = None
        if caps.streaming_text:
            words = WordStreamer()
        else:
            seg_config = self.rt.model_config.segmenter
            buffer = settings.buffer
            segmenter = TextSegmenter(
                _replace_config(seg_config, mode=buffer.mode, max_delay_ms=buffer.max_delay_ms)
            )
        cid = self.rt.engine.new_cid()
        tracker = self.rt.metrics.track("ws")
        ctx = LiveContext(event.context_id, cid, settings, stage, segmenter, words, tracker)
        self._contexts[ctx.context_id] = ctx
        self._by_cid[cid] = ctx
        self.rt.engine.submit(OpenContext(cid, params, self._sink))
        self._outbox.put(self.proto.context_created(ctx.context_id))
        if settings.timestamps == "word":
            self._outbox.put(
                self.proto.warning_message(
                    ErrorCode.UNSUPPORTED_VALUE,
                    "word timestamps are not available for this model; none will be sent",
                    ctx.context_id,
                )
            )

    def _reject(self, event: ContextOpened, err: ProtocolError) -> None:
        err = err.replace(context_id=event.context_id, event_id=event.event_id)
        self.proto.abort_context(event.context_id)
        self._outbox.put(self.proto.error_message(err))

    def _params(self, settings: ContextSettings) -> SynthParams:
        extra = {
            name: value for name in EXTRA_FIELDS if (value := getattr(settings, name)) is not None
        }
        return resolve_params(
            self.rt,
            model=settings.model,
            voice=settings.voice,
            language=settings.language,
            speed=settings.speed,
            instructions=settings.instructions,
            extra=extra,
        )

    def _append(self, event: TextAppended) -> None:
        ctx = self._contexts.get(event.context_id)
        if ctx is None or ctx.gone:
            return
        ctx.chars += len(event.text)
        ctx.tracker.text_arrived()
        if ctx.words is not None:
            ready = ctx.words.push(event.text)
            if ready:
                self.rt.engine.submit(AppendText(ctx.cid, ready))
        else:
            assert ctx.segmenter is not None
            self._submit_segments(ctx, ctx.segmenter.push(event.text, time.monotonic()))
            self._arm_timer(ctx)
        if event.flush:
            self._flush(ctx, None)

    def _submit_segments(self, ctx: LiveContext, segments: list[Segment]) -> None:
        for segment in segments:
            self.rt.engine.submit(AppendText(ctx.cid, segment.text))

    def _arm_timer(self, ctx: LiveContext) -> None:
        ctx.cancel_timer()
        assert ctx.segmenter is not None
        deadline = ctx.segmenter.deadline()
        if deadline is None:
            return
        delay = max(0.0, deadline - time.monotonic())
        ctx.timer = self._loop.call_later(delay, self._on_timer, ctx)

    def _on_timer(self, ctx: LiveContext) -> None:
        ctx.timer = None
        if ctx.gone or ctx.ended or ctx.segmenter is None:
            return
        self._submit_segments(ctx, ctx.segmenter.poll(time.monotonic()))
        self._arm_timer(ctx)

    def _take_buffered(self, ctx: LiveContext) -> str:
        ctx.cancel_timer()
        if ctx.words is not None:
            return ctx.words.flush()
        assert ctx.segmenter is not None
        segment = ctx.segmenter.flush()
        return segment.text if segment is not None else ""

    def _flush(self, ctx: LiveContext, flush_id: str | None) -> None:
        if ctx.gone:
            return
        engine_flush = next(self._flush_ids)
        ctx.flush_names[engine_flush] = flush_id
        self.rt.engine.submit(AppendText(ctx.cid, self._take_buffered(ctx), engine_flush))

    def _end(self, ctx: LiveContext) -> None:
        if ctx.gone or ctx.ended:
            return
        ctx.ended = True
        text = self._take_buffered(ctx)
        if text:
            self.rt.engine.submit(AppendText(ctx.cid, text))
        self.rt.engine.submit(CloseInput(ctx.cid))

    def _cancel(self, context_id: str) -> None:
        ctx = self._contexts.get(context_id)
        if ctx is None:
            return
        self._drop(ctx)
        ctx.tracker.cancelled()
        self._outbox.purge(lambda item: isinstance(item, tuple) and item[0] is ctx)
        self._outbox.put_front(_Cancelled(ctx))

    def _drop(self, ctx: LiveContext) -> None:
        """Forget a context on our side and free its engine slot."""
        if ctx.gone:
            return
        ctx.gone = True
        ctx.cancel_timer()
        self.rt.engine.submit(Cancel(ctx.cid))
        self._contexts.pop(ctx.context_id, None)
        self._by_cid.pop(ctx.cid, None)
        self._loop.run_in_executor(self.rt.encode_pool, _close_stage, ctx)

    # -- engine events (engine thread -> event loop) -----------------------

    def _sink(self, event: EngineEvent) -> None:
        try:
            self._loop.call_soon_threadsafe(self._on_engine_event, event)
        except RuntimeError:
            pass  # the loop is gone; the session is over

    def _on_engine_event(self, event: EngineEvent) -> None:
        ctx = self._by_cid.get(event.cid)
        if ctx is None or ctx.gone or self.closed:
            return
        if isinstance(event, AudioChunk):
            self._outbox.put((ctx, event), event.pcm.nbytes)
            self._check_slow_reader()
        elif isinstance(event, ContextFailed):
            err = ProtocolError(
                _code(event.code), event.message, param=event.param, context_id=ctx.context_id
            )
            self._drop(ctx)
            ctx.tracker.failed(event.code)
            self._outbox.put(self.proto.error_message(err))
            self._outbox.put(_Cancelled(ctx))

    def _check_slow_reader(self) -> None:
        now = time.monotonic()
        if not self._outbox.over_limit:
            self._over_since = None
        elif self._over_since is None:
            self._over_since = now
        elif now - self._over_since > self.rt.server.limits.slow_reader_timeout_s:
            self._outbox.put_front(
                _CloseSocket(
                    int(CloseCode.POLICY_VIOLATION),
                    "slow_reader: client is not reading audio fast enough",
                )
            )

    # -- output (writer task) ----------------------------------------------

    async def writer(self) -> None:
        while True:
            item = await self._outbox.get()
            if item is None:
                return
            if isinstance(item, str):
                await self._send_text(item)
            elif isinstance(item, tuple):
                try:
                    await self._send_audio(*item)
                except (ProtocolError, OSError, RuntimeError, ValueError) as exc:
                    # One context's failure must not stop the session's writer.
                    self._fail_context(item[0], exc)
            elif isinstance(item, _Cancelled):
                audio_ms = item.ctx.stage.audio_ms
                if self.proto.context_state(item.ctx.context_id) is not None:
                    try:
                        await self._send_text(
                            self.proto.context_cancelled(item.ctx.context_id, audio_ms)
                        )
                    except ProtocolError:
                        pass  # already finished on its own
                self._maybe_finish_close()
            elif isinstance(item, _CloseSocket):
                await self._close(item.code, item.reason)
                return

    async def _send_audio(self, ctx: LiveContext, chunk: AudioChunk) -> None:
        if ctx.gone:
            return
        payloads = await self._loop.run_in_executor(self.rt.encode_pool, _encode, ctx, chunk)
        ctx.frames_in += len(chunk.pcm)
        if chunk.final and not payloads:
            payloads = [b""]  # the context-end flag always reaches the client
        last = len(payloads) - 1
        for i, payload in enumerate(payloads):
            if ctx.gone or not self.proto.can_send_audio(ctx.context_id):
                return
            flush_end = i == last and bool(chunk.flush_ids)
            context_end = i == last and chunk.final
            if ctx.settings.audio_transport == "base64":
                # base64 messages carry no flags; context.flushed/context.done say it.
                if payload:
                    await self._send_text(self.proto.audio_message(ctx.context_id, payload))
            else:
                await self._send_bytes(
                    self.proto.audio_frame(ctx.context_id, payload, flush_end, context_end)
                )
        if ctx.gone:
            return
        caps = self.rt.model.capabilities
        ctx.tracker.audio(
            len(chunk.pcm) / caps.sample_rate, len(chunk.pcm) // caps.samples_per_frame
        )
        for flush in chunk.flush_ids:
            name = ctx.flush_names.pop(flush, None)
            await self._send_text(
                self.proto.context_flushed(ctx.context_id, name, ctx.stage.audio_ms)
            )
        if chunk.hit_limit:
            await self._send_text(
                self.proto.warning_message(
                    ErrorCode.MAX_FRAMES_REACHED,
                    "the context reached the model's frame limit before its natural end",
                    ctx.context_id,
                )
            )
        if chunk.final:
            ctx.tracker.done()
            usage = Usage(chars=ctx.chars, frames=ctx.frames_in // caps.samples_per_frame)
            await self._send_text(
                self.proto.context_done(ctx.context_id, ctx.stage.audio_ms, usage)
            )
            self._contexts.pop(ctx.context_id, None)
            self._by_cid.pop(ctx.cid, None)
            self._maybe_finish_close()

    def _fail_context(self, ctx: LiveContext, exc: Exception) -> None:
        log.exception("sending audio of context %s failed", ctx.context_id, exc_info=exc)
        if ctx.gone:
            return
        self._drop(ctx)
        ctx.tracker.failed("internal_error")
        err = ProtocolError(
            ErrorCode.INTERNAL_ERROR, f"audio output failed: {exc}", context_id=ctx.context_id
        )
        self._outbox.put_front(_Cancelled(ctx))
        self._outbox.put_front(self.proto.error_message(err))

    def _maybe_finish_close(self) -> None:
        if self.proto.drained:
            self._outbox.put(_CloseSocket(int(CloseCode.NORMAL), "session closed"))

    # -- teardown -----------------------------------------------------------

    def shutdown(self) -> None:
        """The socket is gone: cancel every context at once and free its slot."""
        self.closed = True
        for ctx in list(self._contexts.values()):
            self._drop(ctx)
            ctx.tracker.cancelled()
        self._outbox.close()

    @property
    def has_live_contexts(self) -> bool:
        return bool(self._contexts)


def _encode(ctx: LiveContext, chunk: AudioChunk) -> list[bytes]:
    # Pool threads may run a cancel's close and an in-flight encode of the same
    # context at once; the stage lock orders them.
    with ctx.stage_lock:
        if ctx.gone or ctx.stage.finished:
            return []
        payloads = ctx.stage.push(chunk.pcm) if len(chunk.pcm) else []
        if chunk.flush_ids and not chunk.final:
            payloads += ctx.stage.drain()
        if chunk.final:
            payloads += ctx.stage.finish()
        return payloads


def _close_stage(ctx: LiveContext) -> None:
    with ctx.stage_lock:
        ctx.stage.close()


def _format_fields(settings: ContextSettings) -> dict[str, Any]:
    fmt = settings.output_format
    return {
        "encoding": fmt.encoding,
        "sample_rate": fmt.sample_rate,
        "container": fmt.container,
        "bitrate": fmt.bitrate,
        "frame_ms": fmt.frame_ms,
    }


def _replace_config(config: Any, **changes: Any) -> Any:
    return replace(config, **{k: v for k, v in changes.items() if v is not None})


def _code(code: str) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.INVALID_FIELD
