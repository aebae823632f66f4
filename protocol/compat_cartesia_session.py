"""Cartesia's TTS socket as the native session state machine (sans-I/O).

:class:`CartesiaSession` is a :class:`~protocol.session.ServerSession` that reads
Cartesia's messages (:mod:`protocol.compat_cartesia`) and writes Cartesia's, so the
native session runtime (``voiceserver.session.speech.SpeechSession``: engine contexts,
segmentation, word timing, barge-in, limits) serves it unchanged. Its contexts are the
native ones:

- a generation request for a context id that has none running opens one with the
  request's voice, model, language, output format, speed, timestamps and buffering
  (later requests' settings are ignored: Cartesia fixes them per context), then
  appends ``transcript``; ``flush: true`` is a ``context.flush`` whose
  ``flush_done`` carries the context's flush count (1, 2, ...); ``continue: false``
  (Cartesia's default) is ``context.end``, answered by ``done``;
- ``max_buffer_delay_ms: 0`` (custom buffering) speaks each transcript as it comes: a
  flush after every non-final one, each answered by ``flush_done``; left out it is the
  native automatic segmentation, and a positive value is its ``max_delay_ms``;
- ``cancel: true`` is ``context.cancel`` (barge-in): nothing more is sent for the
  context. A cancelled context id stays cancelled on this socket: later input to it is
  refused (a late continuation after a barge-in must not start speaking again), while
  the id of a context that finished with ``done`` may start a new one;
- an error about a running context ends that context (its audio stops, the engine slot
  is freed), since Cartesia's clients stop listening to a context at its error.

Native messages with no Cartesia counterpart (``context.created``, ``warning``,
``context.cancelled``) come out as empty strings, which the transport does not send;
warnings go to ``on_warning``.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from protocol.compat_cartesia import (
    CartesiaRequest,
    Chunk,
    Done,
    FlushDone,
    TimestampsMessage,
    VoiceBook,
    WordTimestamps,
    decode_request,
    encode_server,
    error_event,
    ignored_fields,
    lookup_voice,
    requested_speed,
    served_model,
)
from protocol.errors import ErrorCode, ProtocolError
from protocol.events import ErrorEvent, Event
from protocol.messages import (
    BufferConfig,
    ContextCancel,
    ContextCreate,
    ContextEnd,
    ContextFlush,
    Limits,
    OutputFormat,
    SessionSettings,
    TextAppend,
    Usage,
    WordTimestamp,
)
from protocol.options import ModelOptions
from protocol.session import ContextState, ServerSession, _Context
from protocol.validation import check_text

STATUS_PARTIAL = 206
"""Cartesia's ``status_code`` on every message of a generation in progress."""


@dataclass
class _Extra:
    """What a context needs beyond the native state: Cartesia's flush counters."""

    speak_each_input: bool
    """``max_buffer_delay_ms: 0``: every transcript is flushed as it arrives."""
    flushes: int = 0
    """Flushes asked for (the next ``flush_done`` is ``flushed + 1``)."""
    flushed: int = 0


class CartesiaSession(ServerSession):
    """One Cartesia socket. ``voices`` maps the voice ids clients send to the served
    voices (None: passed through); ``on_warning`` is told what the native session would
    have sent as a ``warning``."""

    def __init__(
        self,
        limits: Limits,
        *,
        voices: VoiceBook | None = None,
        options: ModelOptions | None = None,
        on_warning: Callable[[str, str | None], None] | None = None,
        session_id: str | None = None,
        finished_memory: int = 1024,
    ) -> None:
        defaults = SessionSettings(audio_transport="base64")
        super().__init__(limits, defaults, finished_memory=finished_memory, options=options)
        self._voices = voices
        self._on_warning = on_warning
        self.session_id = session_id or uuid.uuid4().hex
        self._extra: dict[str, _Extra] = {}

    # --- input --------------------------------------------------------------------

    def receive_text(self, data: str) -> list[Event]:
        if self._too_big(data):
            return [self._too_big_event(len(data.encode("utf-8", "surrogatepass")))]
        try:
            request = decode_request(data)
        except ProtocolError as err:
            return self._refuse(err)
        if request.cancel:
            return self._on_cancel_request(request)
        context_id = request.context_id or uuid.uuid4().hex
        try:
            if request.transcript is not None:
                check_text(request.transcript, "transcript")
            state = self.context_state(context_id)
            ends_only = not request.transcript and not request.continue_
            if state is ContextState.OPEN:
                return self._input(context_id, request)
            if state is ContextState.ENDING:
                if ends_only:
                    return []  # a repeated end
                raise ProtocolError(
                    ErrorCode.CONTEXT_CLOSED,
                    f"context {context_id!r} already received its last input (continue:"
                    " false); send more text on a new context_id",
                )
            if state in (ContextState.CANCELLING, ContextState.CANCELLED):
                if ends_only:
                    return []
                raise ProtocolError(
                    ErrorCode.CONTEXT_CLOSED,
                    f"context {context_id!r} was cancelled; send new text on a new context_id",
                )
            if state is ContextState.DONE and ends_only:
                return []  # a late end for a context that already finished
            return self._open_context(context_id, request)
        except ProtocolError as err:
            return self._refuse(err.replace(context_id=context_id))

    def _on_cancel_request(self, request: CartesiaRequest) -> list[Event]:
        context_id = request.context_id
        if context_id is None:
            return self._refuse(
                ProtocolError(
                    ErrorCode.MISSING_FIELD,
                    "missing required field `context_id`: name the context to cancel",
                    param="context_id",
                )
            )
        if self.context_state(context_id) is None:
            return []  # nothing to cancel (Cartesia does not answer a cancel either)
        return self._on_cancel(ContextCancel(context_id=context_id))

    def _open_context(self, context_id: str, request: CartesiaRequest) -> list[Event]:
        fmt = request.output_format
        if fmt is None:
            raise ProtocolError(
                ErrorCode.MISSING_FIELD,
                'missing required field `output_format`: send {"container": "raw",'
                ' "encoding": "pcm_s16le", "sample_rate": 24000}',
                param="output_format",
            )
        if fmt.container != "raw":
            raise ProtocolError(
                ErrorCode.UNSUPPORTED_VALUE,
                f"`output_format.container`: unsupported value {fmt.container!r} on the"
                " WebSocket; allowed: 'raw' (wav and mp3 are offered by POST /tts/bytes)",
                param="output_format.container",
            )
        for name in ("encoding", "sample_rate"):
            if getattr(fmt, name) is None:
                raise ProtocolError(
                    ErrorCode.MISSING_FIELD,
                    f"missing required field `output_format.{name}`",
                    param=f"output_format.{name}",
                )
        assert fmt.encoding is not None and fmt.sample_rate is not None
        voice = lookup_voice(self._voices, request)
        speed = requested_speed(request)
        if ignored := ignored_fields(request):
            self._warn(f"no equivalent here, ignored: {', '.join(ignored)}", context_id)
        delay = request.max_buffer_delay_ms
        overrides: dict[str, object] = {
            "voice": voice,
            "model": served_model(request.model_id),
            "language": request.language or request.locale,
            "output_format": OutputFormat(encoding=fmt.encoding, sample_rate=fmt.sample_rate),
            "timestamps": "word" if request.add_timestamps else "none",
            "buffer": BufferConfig(max_delay_ms=delay or None),
            "audio_transport": "base64",
        }
        if speed is not None:
            overrides["speed"] = speed
        opened = self._open(ContextCreate(context_id=context_id), overrides, implicit=False)
        if isinstance(opened[0], ErrorEvent):
            return opened
        self._extra[context_id] = _Extra(speak_each_input=delay == 0)
        return [*opened, *self._input(context_id, request)]

    def _input(self, context_id: str, request: CartesiaRequest) -> list[Event]:
        """The request's text, flush and end for an open context."""
        events: list[Event] = []
        extra = self._extra[context_id]
        text = request.transcript or ""
        if text:
            appended = self._on_text(TextAppend(context_id=context_id, text=text))
            if isinstance(appended[0], ErrorEvent):
                return self._refuse(appended[0].error)
            events += appended
        if request.flush or (extra.speak_each_input and text and request.continue_):
            extra.flushes += 1
            events += self._on_flush(
                ContextFlush(context_id=context_id, flush_id=str(extra.flushes))
            )
        if not request.continue_:
            events += self._on_end(ContextEnd(context_id=context_id))
        return events

    def _refuse(self, err: ProtocolError) -> list[Event]:
        """An error; one about a running context also cancels it (its client has
        stopped listening to it, and what it would say is incomplete)."""
        events: list[Event] = [ErrorEvent(err)]
        context_id = err.context_id
        if context_id is not None and self.context_state(context_id) is ContextState.OPEN:
            events += self._on_cancel(ContextCancel(context_id=context_id))
        return events

    def _warn(self, message: str, context_id: str | None) -> None:
        if self._on_warning is not None:
            self._on_warning(message, context_id)

    # --- output -------------------------------------------------------------------

    def context_created(self, context_id: str) -> str:
        self._require_active(context_id)
        return ""

    def audio_message(self, context_id: str, payload: bytes) -> str:
        ctx = self._require_sendable(context_id)
        ctx.next_seq += 1
        return encode_server(
            Chunk(
                data=base64.b64encode(payload).decode("ascii"),
                done=False,
                status_code=STATUS_PARTIAL,
                step_time=0.0,
                context_id=context_id,
                flush_id=self._flush_id(context_id),
            )
        )

    def audio_frame(
        self, context_id: str, payload: bytes, flush_end: bool = False, context_end: bool = False
    ) -> bytes:
        raise ProtocolError(
            ErrorCode.INTERNAL_ERROR, "Cartesia contexts send audio as JSON chunks only"
        )

    def timestamps_message(self, context_id: str, words: Sequence[WordTimestamp]) -> str:
        self._require_live(context_id)
        return encode_server(
            TimestampsMessage(
                word_timestamps=WordTimestamps(
                    words=[w.text for w in words],
                    start=[w.start_ms / 1000 for w in words],
                    end=[w.end_ms / 1000 for w in words],
                ),
                done=False,
                status_code=STATUS_PARTIAL,
                context_id=context_id,
                flush_id=self._flush_id(context_id),
            )
        )

    def context_flushed(self, context_id: str, flush_id: str | None, audio_ms: int) -> str:
        self._require_live(context_id)
        extra = self._extra.get(context_id)
        if flush_id is None or extra is None or not flush_id.isdigit():
            return ""
        extra.flushed = int(flush_id)
        return encode_server(FlushDone(flush_id=int(flush_id), context_id=context_id))

    def context_done(self, context_id: str, audio_ms: int, usage: Usage) -> str:
        super().context_done(context_id, audio_ms, usage)
        return encode_server(Done(context_id=context_id))

    def context_cancelled(self, context_id: str, audio_sent_ms: int) -> str:
        super().context_cancelled(context_id, audio_sent_ms)
        return ""

    def abort_context(self, context_id: str) -> None:
        """A context the server refused to open (an unknown voice...): forgotten, so the
        client may try the same id again."""
        super().abort_context(context_id)
        self._finished.pop(context_id, None)

    def warning_message(self, code: ErrorCode, message: str, context_id: str | None = None) -> str:
        self._warn(f"{code}: {message}", context_id)
        return ""

    def updated_message(self, event_id: str | None = None) -> str:
        return ""

    def error_message(self, error: ProtocolError) -> str:
        request_id = (
            f"{self.session_id}:{error.context_id}" if error.context_id else self.session_id
        )
        return encode_server(error_event(error, request_id))

    def _flush_id(self, context_id: str) -> int | None:
        """The flush a context's audio belongs to, once it has asked for any."""
        extra = self._extra.get(context_id)
        if extra is None or not extra.flushes:
            return None
        return min(extra.flushed + 1, extra.flushes + 1)

    def _finish(self, ctx: _Context, state: ContextState) -> None:
        super()._finish(ctx, state)
        self._extra.pop(ctx.context_id, None)
