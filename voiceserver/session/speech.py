"""SpeechSession: one WebSocket client, many contexts, one engine.

The transport feeds it client frames; it turns protocol events into engine
inbox messages, and engine events into encoded frames in its outbox, which a
single writer task sends in order. Each context's output stage runs in place
when it is cheaper than a thread hop (PCM at the model's rate), else in the
encode pool (``voiceserver.session.output``).

A client that does not read is dropped, never waited for: every queued byte
(audio and JSON) counts toward ``Limits.outbox_max_bytes``, and every send must
complete within ``Limits.slow_reader_timeout_s``. Either failing frees the
session's contexts at once, tries to say ``slow_reader`` with a close 1008 for a
moment, then aborts the connection (its unsent buffers are discarded).

What one client may take is bounded too (``voiceserver.clients``): each message
spends from the client's rate budget (a message past it is refused with
``rate_limited``; a second's worth of refusals closes the socket 1008); a context
takes an engine slot only once it has something to speak, counted against the
client's share of the engine; a context that receives no text and sends no audio
for ``Limits.context_idle_timeout_s`` is ended, and a session that receives
nothing and sends no audio for its idle timeout is closed (4008). A socket opened
with a connect token finishes what it speaks when the token expires, then closes
(4001).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import replace
from itertools import count
from typing import Any

import msgspec

from models.base import ModelInputError, SynthParams
from protocol.errors import CloseCode, ErrorCode, ProtocolError, close_code_for
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
from protocol.messages import ContextSettings, Usage, WordTimestamp
from protocol.session import ServerSession
from voiceserver.audio import AudioFormat, make_output
from voiceserver.clients import ClientId
from voiceserver.engine.client import ContextHandle, Overloaded
from voiceserver.engine.messages import AudioChunk, ContextFailed, EngineEvent
from voiceserver.engine.words import TimedWords
from voiceserver.params import resolve_params
from voiceserver.quotas import RefusalWindow
from voiceserver.runtime import Runtime
from voiceserver.session.context import LiveContext
from voiceserver.session.outbox import Outbox
from voiceserver.session.output import ContextOutput
from voiceserver.session.peer import FAREWELL_S, Peer, PeerGone, say_farewell
from voiceserver.text.segmenter import Segment, TextSegmenter
from voiceserver.text.words import WordStreamer

log = logging.getLogger(__name__)


class _Cancelled:
    def __init__(self, ctx: LiveContext) -> None:
        self.ctx = ctx


class _CloseSocket:
    def __init__(self, code: int, reason: str) -> None:
        self.code, self.reason = code, reason


class _Peek(msgspec.Struct):
    """What a refused message is about, read without validating it."""

    type: Any = None
    context_id: Any = None


_peek = msgspec.json.Decoder(_Peek)
_PEEKED_ID_CHARS = 256


def _peek_context(data: str | bytes) -> str | None:
    try:
        context_id = _peek.decode(data).context_id
    except (msgspec.DecodeError, UnicodeEncodeError, RecursionError):
        return None
    ok = isinstance(context_id, str) and len(context_id) <= _PEEKED_ID_CHARS
    return context_id if ok else None


class SpeechSession:
    def __init__(
        self,
        runtime: Runtime,
        proto: ServerSession,
        peer: Peer,
        client: ClientId | None = None,
        expires_at: float | None = None,
        endpoint: str = "ws",
    ) -> None:
        """``client``: who the session belongs to (its rate budget and engine share;
        None: no per-client limits). ``expires_at``: when the connect token it opened
        with expires (unix seconds), after which it finishes and closes. ``endpoint``:
        the label its metrics go under."""
        self.rt = runtime
        self.endpoint = endpoint
        self.proto = proto
        self._peer = peer
        self.client = client
        self.expires_at = expires_at
        self.expired = False
        self._loop = asyncio.get_running_loop()
        self._refusals = RefusalWindow(runtime.server.limits.max_messages_per_s)
        limits = runtime.server.limits
        self._outbox = Outbox(limits.outbox_max_bytes)
        self._send_timeout = limits.slow_reader_timeout_s
        self._contexts: dict[str, LiveContext] = {}
        self._by_cid: dict[int, LiveContext] = {}
        self._flush_ids = count(1)
        self.last_activity = time.monotonic()
        self.closed = False
        self.dropped = False
        """The client was dropped (slow reader, shutdown): ignore its further input."""
        self.draining = False
        self._writer: asyncio.Task[None] | None = None
        self._farewell: asyncio.Task[None] | None = None
        self.engine = runtime.fleet.place(strict=False)
        """The engine this session's contexts run on, for its life."""
        self.engine.watch(self._engine_lost)

    # -- input (event loop) -------------------------------------------------

    def on_text(self, data: str) -> None:
        self.last_activity = time.monotonic()
        if not self.dropped and self._within_budget(data):
            self._handle(self.proto.receive_text(data))

    def on_bytes(self, data: bytes) -> None:
        self.last_activity = time.monotonic()
        if not self.dropped and self._within_budget(None):
            self._handle(self.proto.receive_bytes(data))

    def _within_budget(self, data: str | None) -> bool:
        """Spend one message from the client's budget; refuse the message past it."""
        if self.client is None or self.rt.rates.spend(self.client, now=self.last_activity):
            return True
        limit = self.rt.server.limits.max_messages_per_s
        if self._refusals.refuse(self.last_activity):
            self.drop_client(
                CloseCode.POLICY_VIOLATION,
                ErrorCode.RATE_LIMITED,
                f"rate_limited: over {limit:g} messages a second past this client's budget",
                FAREWELL_S,  # a flooder is not waited for as long as a slow reader
            )
            return False
        self.rt.metrics.error(self.endpoint, str(ErrorCode.RATE_LIMITED))
        err = ProtocolError(
            ErrorCode.RATE_LIMITED,
            f"message refused: this client may send {limit:g} messages a second (bursts of"
            f" {self.rt.server.limits.messages_burst}); slow down, or the socket is closed",
            context_id=_peek_context(data) if data is not None else None,
        )
        self._put_text(self.proto.error_message(err))
        return False

    def _put_text(
        self, message: str, ctx: LiveContext | None = None, *, opens: bool = False
    ) -> None:
        self._outbox.put(message, len(message), ctx, opens=opens)
        self._check_budget()

    def _handle(self, events: list[Event]) -> None:
        for event in events:
            if self.dropped:
                return
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
                self._put_text(self.proto.updated_message(event.event_id))
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
        self.rt.metrics.error(self.endpoint, str(err.code))
        self._put_text(self.proto.error_message(err))
        if err.fatal:
            self._outbox.put(_CloseSocket(int(close_code_for(err.code)), err.message[:120]), 0)

    def _open(self, event: ContextOpened) -> None:
        settings = event.settings
        if self.draining or self.rt.lifecycle.draining:
            self._reject(
                event,
                ProtocolError(
                    ErrorCode.SERVER_SHUTDOWN,
                    "the server is shutting down and takes no new contexts; reconnect later",
                ),
            )
            return
        if self.expired:
            self._reject(event, ProtocolError(ErrorCode.TOKEN_EXPIRED, _EXPIRED))
            return
        warnings: list[str] = []
        try:
            params = self._params(settings, warnings)
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
        segmenter = streamer = None
        buffer = settings.buffer
        seg_config = replace(self.rt.model_config.segmenter, mode=buffer.mode)
        if buffer.max_delay_ms is not None:
            seg_config = replace(seg_config, max_delay_ms=buffer.max_delay_ms)
        if caps.streaming_text:
            timed = seg_config.mode == "auto"
            streamer = WordStreamer(
                max_delay_ms=seg_config.max_delay_ms if timed else None,
                end_delay_ms=seg_config.end_delay_ms if timed else None,
            )
        else:
            segmenter = TextSegmenter(seg_config)
        try:
            handle = self.engine.open(
                params,
                self._on_engine_event,
                word_timestamps=settings.timestamps == "word",
                client=self.client,
                parked=True,
            )
        except Overloaded as exc:
            stage.close()
            self._reject(event, ProtocolError(exc.code, str(exc)))
            return
        tracker = self.rt.metrics.track(self.endpoint)
        output = ContextOutput(stage, self.rt.encode_pool)
        ctx = LiveContext(
            event.context_id,
            handle,
            settings,
            stage,
            output,
            segmenter,
            streamer,
            tracker,
            time.monotonic(),
        )
        self._contexts[ctx.context_id] = ctx
        self._by_cid[handle.cid] = ctx
        self._put_text(self.proto.context_created(ctx.context_id), ctx, opens=True)
        for warning in warnings:  # e.g. a voice this model has no use for, ignored
            self._put_text(
                self.proto.warning_message(ErrorCode.UNSUPPORTED_VALUE, warning, ctx.context_id),
                ctx,
            )
        if settings.timestamps == "word" and not handle.aligns_words:
            self._put_text(
                self.proto.warning_message(
                    ErrorCode.UNSUPPORTED_VALUE,
                    "word timestamps are not available for this model with these settings;"
                    " none will be sent for this context",
                    ctx.context_id,
                ),
                ctx,
            )

    def _engine(self, ctx: LiveContext) -> ContextHandle | None:
        """The context's engine side, taking its slot now if it is parked (it has
        something to speak); None when the context is gone or the engine refuses it
        (the client is told, and the context ends as cancelled)."""
        if ctx.gone:
            return None
        try:
            ctx.handle.activate()
        except Overloaded as exc:
            self._fail(ctx, ProtocolError(exc.code, str(exc), context_id=ctx.context_id))
            return None
        return ctx.handle

    def _fail(self, ctx: LiveContext, err: ProtocolError) -> None:
        """End a context for a reason of the server's: the error, then its cancellation."""
        self.rt.metrics.error(self.endpoint, str(err.code))
        self._drop(ctx)
        ctx.tracker.failed(str(err.code))
        self._put_text(self.proto.error_message(err), ctx)
        self._outbox.put(_Cancelled(ctx), 0, ctx)

    def _reject(self, event: ContextOpened, err: ProtocolError) -> None:
        err = err.replace(context_id=event.context_id, event_id=event.event_id)
        self.rt.metrics.error(self.endpoint, str(err.code))
        self.proto.abort_context(event.context_id)
        self._put_text(self.proto.error_message(err))

    def _params(self, settings: ContextSettings, warnings: list[str]) -> SynthParams:
        # The options were checked as they arrived (``params.socket_options``); the
        # voice-clone fields are context.create's own.
        return resolve_params(
            self.rt,
            model=settings.model,
            voice=settings.voice,
            language=settings.language,
            speed=settings.speed,
            instructions=settings.instructions,
            options=settings.options,
            extra={
                "ref_audio": settings.ref_audio,
                "ref_text": settings.ref_text,
                "speaker_embedding": settings.speaker_embedding,
            },
            warnings=warnings,
        )

    def _append(self, event: TextAppended) -> None:
        ctx = self._contexts.get(event.context_id)
        if ctx is None or ctx.gone:
            return
        ctx.chars += len(event.text)
        ctx.last_activity = self.last_activity
        ctx.tracker.text_arrived()
        if ctx.streamer is not None:
            self._submit_pieces(ctx, ctx.streamer.push(event.text, time.monotonic()))
        else:
            assert ctx.segmenter is not None
            self._submit_segments(ctx, ctx.segmenter.push(event.text, time.monotonic()))
        self._arm_timer(ctx)
        if event.flush:
            self._flush(ctx, None)

    def _submit_segments(self, ctx: LiveContext, segments: list[Segment]) -> None:
        handle = self._engine(ctx) if segments else None
        if handle is None:
            return
        for segment in segments:
            handle.append(segment.text, offset=segment.char_start)

    def _submit_pieces(self, ctx: LiveContext, pieces: list[str]) -> None:
        if pieces and (handle := self._engine(ctx)) is not None:
            for piece in pieces:
                handle.append(piece)

    def _arm_timer(self, ctx: LiveContext) -> None:
        """Wake when the text the context holds back has waited long enough."""
        ctx.cancel_timer()
        source = ctx.streamer if ctx.streamer is not None else ctx.segmenter
        deadline = source.deadline() if source is not None else None
        if deadline is None:
            return
        delay = max(0.0, deadline - time.monotonic())
        ctx.timer = self._loop.call_later(delay, self._on_timer, ctx)

    def _on_timer(self, ctx: LiveContext) -> None:
        ctx.timer = None
        if ctx.gone or ctx.ended:
            return
        now = time.monotonic()
        if ctx.streamer is not None:
            self._submit_pieces(ctx, ctx.streamer.poll(now))
        elif ctx.segmenter is not None:
            self._submit_segments(ctx, ctx.segmenter.poll(now))
        self._arm_timer(ctx)

    def _take_buffered(self, ctx: LiveContext) -> list[tuple[str, int | None]]:
        """Everything the context still buffers, as pieces of bounded size, each with
        its offset in the context's text (None: right after the previous piece)."""
        ctx.cancel_timer()
        if ctx.streamer is not None:
            return [(piece, None) for piece in ctx.streamer.flush()]
        assert ctx.segmenter is not None
        return [(segment.text, segment.char_start) for segment in ctx.segmenter.flush()]

    def _flush(self, ctx: LiveContext, flush_id: str | None) -> None:
        handle = self._engine(ctx)
        if handle is None:
            return
        engine_flush = next(self._flush_ids)
        ctx.flush_names[engine_flush] = flush_id
        *pieces, (last, offset) = self._take_buffered(ctx) or [("", None)]
        for piece, at in pieces:
            handle.append(piece, offset=at)
        handle.append(last, engine_flush, offset)

    def _end(self, ctx: LiveContext) -> None:
        if ctx.gone or ctx.ended:
            return
        ctx.ended = True
        handle = self._engine(ctx)
        if handle is None:
            return
        for piece, offset in self._take_buffered(ctx):
            handle.append(piece, offset=offset)
        handle.close_input()

    def _cancel(self, context_id: str) -> None:
        ctx = self._contexts.get(context_id)
        if ctx is None:
            return
        self._drop(ctx)
        ctx.tracker.cancelled()
        self._outbox.purge(ctx)
        self._outbox.put_front(_Cancelled(ctx), 0, ctx)

    def _drop(self, ctx: LiveContext) -> None:
        """Forget a context on our side and free its engine slot."""
        if ctx.gone:
            return
        ctx.gone = True
        ctx.cancel_timer()
        ctx.handle.cancel()
        self._by_cid.pop(ctx.cid, None)
        self._contexts.pop(ctx.context_id, None)
        ctx.output.close()

    # -- engine events (on the event loop) -----------------------------------

    def _on_engine_event(self, event: EngineEvent | TimedWords) -> None:
        ctx = self._by_cid.get(event.cid)
        if ctx is None or ctx.gone or self.closed:
            return
        if isinstance(event, TimedWords):
            # Queued ahead of the audio chunks that follow it: sent before their audio.
            words = [
                WordTimestamp(
                    text=w.text,
                    start_ms=w.start_ms,
                    end_ms=w.end_ms,
                    char_start=w.char_start,
                    char_end=w.char_end,
                )
                for w in event.words
            ]
            try:
                message = self.proto.timestamps_message(ctx.context_id, words)
            except ProtocolError:
                return  # the context is being cancelled: nothing more for it
            self._put_text(message, ctx)
        elif isinstance(event, AudioChunk):
            self._outbox.put((ctx, event), event.pcm.nbytes, ctx)
            self._check_budget()
        elif isinstance(event, ContextFailed):
            err = ProtocolError(
                _code(event.code), event.message, param=event.param, context_id=ctx.context_id
            )
            self._fail(ctx, err)

    def _check_budget(self) -> None:
        if self._outbox.over_limit:
            self.drop_client(
                CloseCode.POLICY_VIOLATION,
                ErrorCode.SLOW_READER,
                f"slow_reader: over {self._outbox.max_bytes} bytes queued for this client;"
                " read audio as it arrives",
            )

    # -- output (writer task) ----------------------------------------------

    def start_writer(self) -> asyncio.Task[None]:
        self._writer = asyncio.create_task(self._write_loop())
        return self._writer

    async def _write_loop(self) -> None:
        try:
            while True:
                item = await self._outbox.get()
                if item is None or await self._write(item):
                    return
        except TimeoutError:
            self.drop_client(
                CloseCode.POLICY_VIOLATION,
                ErrorCode.SLOW_READER,
                f"slow_reader: the connection did not take data for {self._send_timeout:g} s",
            )
        except PeerGone:
            pass  # the receive loop sees the disconnect and tears the session down

    async def _write(self, item: object) -> bool:
        """Send one outbox item; True when the session is closed by it."""
        if isinstance(item, str):
            await self._send_text(item)
        elif isinstance(item, tuple):
            await self._send_audio(*item)
        elif isinstance(item, _Cancelled):
            if self.proto.context_state(item.ctx.context_id) is not None:
                try:
                    message = self.proto.context_cancelled(
                        item.ctx.context_id, item.ctx.stage.audio_ms
                    )
                except ProtocolError:
                    message = None  # already finished on its own
                if message is not None:
                    await self._send_text(message)
            self._maybe_finish_close()
        elif isinstance(item, _CloseSocket):
            await self._peer_close(item.code, item.reason)
            return True
        return False

    # A send that cannot complete within the deadline means the client stopped reading.

    async def _send_text(self, data: str) -> None:
        async with asyncio.timeout(self._send_timeout):
            await self._peer.send_text(data)

    async def _send_bytes(self, data: bytes) -> None:
        async with asyncio.timeout(self._send_timeout):
            await self._peer.send_bytes(data)

    async def _peer_close(self, code: int, reason: str) -> None:
        with contextlib.suppress(PeerGone):
            async with asyncio.timeout(self._send_timeout):
                await self._peer.close(code, reason)

    async def _send_audio(self, ctx: LiveContext, chunk: AudioChunk) -> None:
        if ctx.gone:
            return
        try:
            payloads = await ctx.output.feed(
                chunk.pcm, drain=bool(chunk.flush_ids), final=chunk.final
            )
        except (ValueError, RuntimeError, OSError) as exc:
            # One context's encoder failing must not stop the session's writer.
            self._fail_context(ctx, exc)
            return
        ctx.frames_in += len(chunk.pcm)
        if len(chunk.pcm):
            ctx.last_activity = self.last_activity = time.monotonic()
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
        self._outbox.purge(ctx)
        message = self.proto.error_message(err)
        self._outbox.put_front(_Cancelled(ctx), 0, ctx)
        self._outbox.put_front(message, len(message), ctx)

    def _maybe_finish_close(self) -> None:
        if self.proto.drained:
            self._outbox.put(_CloseSocket(int(CloseCode.NORMAL), "session closed"), 0)
        elif self.draining and not self._contexts:
            self._outbox.put(
                _CloseSocket(int(CloseCode.SERVICE_RESTART), "server shutting down"), 0
            )
        elif self.expired and not self._contexts:
            self._outbox.put(_CloseSocket(int(CloseCode.UNAUTHORIZED), "connect token expired"), 0)

    # -- time (the transport calls these) -------------------------------------

    def check_idle(self, now: float) -> None:
        """Close the session if it has been idle too long, and end idle contexts."""
        timeout = self.proto.settings.idle_timeout_s or self.proto.limits.idle_timeout_s
        if now - self.last_activity > timeout:
            self.drop_client(CloseCode.IDLE_TIMEOUT, ErrorCode.IDLE_TIMEOUT, "idle timeout")
            return
        context_timeout = self.rt.server.limits.context_idle_timeout_s
        for ctx in list(self._contexts.values()):
            if not ctx.ended and now - ctx.last_activity > context_timeout:
                self._end_for_client(
                    ctx,
                    ErrorCode.IDLE_TIMEOUT,
                    f"context received no text and sent no audio for {context_timeout:g} s;"
                    " it was ended: what it had is spoken, then context.done",
                )

    def token_expired(self) -> None:
        """The connect token the socket opened with has expired: finish, then close."""
        if self.expired or self.dropped or self.closed:
            return
        self.expired = True
        log.info("a WebSocket's connect token expired: finishing its contexts, then closing")
        for ctx in list(self._contexts.values()):
            self._end_for_client(ctx, ErrorCode.TOKEN_EXPIRED, _EXPIRED)
        if not self._contexts:
            self._put_text(self.proto.warning_message(ErrorCode.TOKEN_EXPIRED, _EXPIRED))
        self._maybe_finish_close()

    def _end_for_client(self, ctx: LiveContext, code: ErrorCode, message: str) -> None:
        """End an open context as if its client had sent ``context.end``, saying why."""
        if ctx.gone or not self.proto.end_context(ctx.context_id):
            return
        self._put_text(self.proto.warning_message(code, message, ctx.context_id), ctx)
        self._end(ctx)

    # -- teardown -----------------------------------------------------------

    def drop_client(
        self, close_code: int, code: ErrorCode, message: str, farewell_s: float | None = None
    ) -> None:
        """End the session from the server's side now: free every context, then say why
        and close, if the client takes that within ``farewell_s`` (default: the send
        deadline, so a client that still reads, however slowly, gets the reason); else
        reset the connection."""
        if self.dropped or self.closed:
            return
        self.dropped = True
        log.info("dropping a WebSocket client: %s", message)
        self.rt.metrics.error(self.endpoint, str(code))
        errors = [
            self.proto.error_message(
                ProtocolError(code, message, context_id=ctx.context_id, fatal=True)
            )
            for ctx in self._contexts.values()
        ] or [self.proto.error_message(ProtocolError(code, message, fatal=True))]
        self._cancel_all()
        self._outbox.close()
        if self._writer is not None:
            self._writer.cancel()
        timeout = self._send_timeout if farewell_s is None else farewell_s
        self._farewell = asyncio.create_task(
            say_farewell(self._peer, errors, close_code, message, timeout)
        )

    def _engine_lost(self) -> None:
        """The engine serving this session died: its contexts are lost, the session ends."""
        self.drop_client(
            CloseCode.INTERNAL_ERROR,
            ErrorCode.ENGINE_FAILED,
            "the engine serving this session stopped; reconnect (another engine takes the"
            " new session)",
            FAREWELL_S,
        )

    def begin_drain(self) -> None:
        """The server is stopping: take no new contexts; close (1012) once idle."""
        self.draining = True
        self._maybe_finish_close()

    def cut(self) -> None:
        """The shutdown deadline passed: every unfinished context gets ``server_shutdown``."""
        self.drop_client(
            CloseCode.SERVICE_RESTART,
            ErrorCode.SERVER_SHUTDOWN,
            "the server shut down before this context finished",
            FAREWELL_S,
        )

    @property
    def busy(self) -> bool:
        return bool(self._contexts) and not self.dropped and not self.closed

    def _cancel_all(self) -> None:
        for ctx in list(self._contexts.values()):
            self._drop(ctx)
            ctx.tracker.cancelled()

    def shutdown(self) -> None:
        """The socket is gone: cancel every context at once and free its slot."""
        self.closed = True
        self.engine.unwatch(self._engine_lost)
        self._cancel_all()
        self._outbox.close()

    @property
    def has_live_contexts(self) -> bool:
        return bool(self._contexts)


_EXPIRED = (
    "the connect token this socket opened with has expired: what was sent is spoken,"
    " then the socket closes (4001); open a new socket with a fresh token"
)


def _format_fields(settings: ContextSettings) -> dict[str, Any]:
    fmt = settings.output_format
    return {
        "encoding": fmt.encoding,
        "sample_rate": fmt.sample_rate,
        "container": fmt.container,
        "bitrate": fmt.bitrate,
        "frame_ms": fmt.frame_ms,
    }


def _code(code: str) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.INVALID_FIELD
