"""The server side of a v1 session as a sans-I/O state machine.

Modelled on the ``websockets`` library's protocol objects: the caller feeds what
the socket delivered (:meth:`ServerSession.receive_text`,
:meth:`ServerSession.receive_bytes`) and gets a list of events back
(:mod:`protocol.events`); to answer, it calls the outgoing helpers, which return
the ``str`` (JSON text frame) or ``bytes`` (binary frame) to send and keep the
bookkeeping (per-context ``seq``, context states) right. Nothing here touches a
socket, asyncio or a clock.

Context lifecycle::

    (new) --context.create / first text.append--> open
    open  --context.end--> ending --context_done()--> done
    open | ending --context.cancel--> cancelling --context_cancelled()--> cancelled
    open | ending --context_done() / context_cancelled()--> done / cancelled

``open`` and ``ending`` contexts count against ``limits.max_contexts``; a cancelled
one stops counting as soon as ``context.cancel`` is received. A context keeps its
stream number until it reaches ``done`` or ``cancelled``; after that no frame can be
made for it, and the number may go to a new context. A finished id may be opened
again with ``context.create``; a ``text.append`` to it is ``context_closed`` (the
last ``finished_memory`` finished ids are remembered for that).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import msgspec

from protocol.binary import FLAG_CONTEXT_END, FLAG_FLUSH_END, MAX_STREAM, pack_audio
from protocol.client_session import ClientSession
from protocol.codec import decode_client, encode_server, error_to_message
from protocol.errors import ErrorCode, ProtocolError
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
from protocol.messages import (
    OPTION_FIELDS,
    PROTOCOL_VERSION,
    AudioMessage,
    ClientMessage,
    ContextCancel,
    ContextCancelled,
    ContextCreate,
    ContextCreated,
    ContextDone,
    ContextEnd,
    ContextFlush,
    ContextFlushed,
    ContextSettings,
    Keepalive,
    Limits,
    SessionClose,
    SessionCreated,
    SessionSettings,
    SessionUpdate,
    SessionUpdated,
    TextAppend,
    Timestamps,
    Usage,
    WarningMessage,
    WordTimestamp,
)
from protocol.options import ModelOptions
from protocol.validation import check_output_format

__all__ = ["ClientSession", "ContextState", "ServerSession"]


class ContextState(StrEnum):
    OPEN = "open"
    ENDING = "ending"
    CANCELLING = "cancelling"
    DONE = "done"
    CANCELLED = "cancelled"


_LIVE = frozenset({ContextState.OPEN, ContextState.ENDING})  # count against max_contexts
# Message fields that are not settings as such (options are merged, not replaced).
_NOT_SETTINGS = frozenset({"event_id", "context_id", "options", *OPTION_FIELDS})


@dataclass(slots=True)
class _Context:
    context_id: str
    stream: int
    settings: ContextSettings
    state: ContextState = ContextState.OPEN
    text_chars: int = 0
    next_seq: int = 0
    final_frame_sent: bool = False


class ServerSession:
    """One client's session: validates input, tracks contexts, frames output.

    ``defaults`` are the session's starting settings (server config plus query
    parameters); an ``idle_timeout_s`` of None takes ``limits.idle_timeout_s``.
    ``options``: the served model's options and their check (``protocol.options``).
    Raises ProtocolError if ``defaults.output_format`` is not a valid combination.
    """

    def __init__(
        self,
        limits: Limits,
        defaults: SessionSettings,
        *,
        finished_memory: int = 1024,
        options: ModelOptions | None = None,
    ) -> None:
        check_output_format(defaults.output_format)
        if defaults.idle_timeout_s is None:
            defaults = msgspec.structs.replace(defaults, idle_timeout_s=limits.idle_timeout_s)
        self._limits = limits
        self._settings = defaults
        self._options = options or ModelOptions()
        self._finished_memory = finished_memory
        self._active: dict[str, _Context] = {}
        self._finished: OrderedDict[str, ContextState] = OrderedDict()
        self._free_streams: list[int] = []
        self._next_stream = 0
        self._closing = False

    # --- queries ----------------------------------------------------------------

    @property
    def limits(self) -> Limits:
        return self._limits

    @property
    def settings(self) -> SessionSettings:
        """The effective session settings (defaults merged with every session.update)."""
        return self._settings

    @property
    def closing(self) -> bool:
        """session.close was received; every further message is rejected."""
        return self._closing

    @property
    def drained(self) -> bool:
        """Closing and no context left unfinished: time to close the socket with 1000."""
        return self._closing and not self._active

    @property
    def live_contexts(self) -> int:
        """How many contexts count against ``limits.max_contexts`` now."""
        return sum(1 for ctx in self._active.values() if ctx.state in _LIVE)

    def active_context_ids(self) -> list[str]:
        """Ids of every context not yet done or cancelled (including those being cancelled)."""
        return list(self._active)

    def context_state(self, context_id: str) -> ContextState | None:
        """State of a context; None for an id never seen (or long forgotten)."""
        ctx = self._active.get(context_id)
        if ctx is not None:
            return ctx.state
        return self._finished.get(context_id)

    def context_settings(self, context_id: str) -> ContextSettings:
        return self._require_active(context_id).settings

    def stream_of(self, context_id: str) -> int:
        return self._require_active(context_id).stream

    def can_send_audio(self, context_id: str) -> bool:
        """True when ``audio_frame``/``audio_message`` would succeed for the context."""
        ctx = self._active.get(context_id)
        return ctx is not None and ctx.state in _LIVE and not ctx.final_frame_sent

    # --- input ------------------------------------------------------------------

    def receive_text(self, data: str) -> list[Event]:
        """Events for one JSON text frame from the client."""
        if self._too_big(data):
            return [self._too_big_event(len(data.encode("utf-8", "surrogatepass")))]
        try:
            msg = decode_client(data)
        except ProtocolError as err:
            if self._closing:
                return [self._closing_event(None)]
            return [ErrorEvent(err)]
        if self._closing:
            return [self._closing_event(msg)]
        return self._dispatch(msg)

    def receive_bytes(self, data: bytes) -> list[Event]:
        """Events for one binary frame from the client (never allowed)."""
        if len(data) > self._limits.max_message_bytes:
            return [self._too_big_event(len(data))]
        if self._closing:
            return [self._closing_event(None)]
        return [
            ErrorEvent(
                ProtocolError(
                    ErrorCode.BINARY_NOT_ALLOWED,
                    "binary frames are not accepted from clients; send JSON text messages",
                )
            )
        ]

    def _dispatch(self, msg: ClientMessage) -> list[Event]:
        match msg:
            case TextAppend():
                return self._on_text(msg)
            case ContextCreate():
                return self._on_create(msg)
            case ContextFlush():
                return self._on_flush(msg)
            case ContextEnd():
                return self._on_end(msg)
            case ContextCancel():
                return self._on_cancel(msg)
            case SessionUpdate():
                return self._on_update(msg)
            case Keepalive():
                return [KeepaliveReceived()]
            case SessionClose():
                return self._on_close()
        raise AssertionError(f"unhandled message {msg!r}")  # pragma: no cover

    def _on_update(self, msg: SessionUpdate) -> list[Event]:
        if msg.idle_timeout_s is not None and msg.idle_timeout_s > self._limits.idle_timeout_s:
            return self._reject(
                msg,
                ErrorCode.INVALID_FIELD,
                f"`idle_timeout_s` must be at most {self._limits.idle_timeout_s:g}",
                param="idle_timeout_s",
            )
        try:
            options = self._options.apply(self._settings.options, msg)
        except ProtocolError as err:
            return self._reject(msg, err.code, err.message, param=err.param)
        changes = {
            name: value
            for name in msg.__struct_fields__
            if name not in _NOT_SETTINGS and (value := getattr(msg, name)) is not None
        }
        changes["options"] = options
        changes.update({name: options.get(name) for name in OPTION_FIELDS})
        self._settings = msgspec.structs.replace(self._settings, **changes)
        return [SettingsUpdated(settings=self._settings, event_id=msg.event_id)]

    def _on_create(self, msg: ContextCreate) -> list[Event]:
        if msg.context_id in self._active:
            state = self._active[msg.context_id].state
            return self._reject(
                msg,
                ErrorCode.CONTEXT_EXISTS,
                f"context {msg.context_id!r} already exists ({state}); pick another id",
            )
        try:
            options = self._options.apply(self._settings.options, msg)
        except ProtocolError as err:
            return self._reject(msg, err.code, err.message, param=err.param)
        overrides: dict[str, object] = {
            name: value
            for name in msg.__struct_fields__
            if name not in _NOT_SETTINGS and (value := getattr(msg, name)) is not None
        }
        overrides["options"] = options
        return self._open(msg, overrides, implicit=False)

    def _on_text(self, msg: TextAppend) -> list[Event]:
        ctx = self._active.get(msg.context_id)
        if ctx is None:
            if msg.context_id in self._finished:
                return self._closed(msg, self._finished[msg.context_id])
            if len(msg.text) > self._limits.max_text_chars:
                return self._too_long(msg, 0)
            opened = self._open(msg, {}, implicit=True)
            if isinstance(opened[0], ErrorEvent):
                return opened
            ctx = self._active[msg.context_id]
            ctx.text_chars = len(msg.text)
            return [*opened, TextAppended(msg.context_id, msg.text, msg.flush)]
        if ctx.state is not ContextState.OPEN:
            return self._closed(msg, ctx.state)
        if ctx.text_chars + len(msg.text) > self._limits.max_text_chars:
            return self._too_long(msg, ctx.text_chars)
        ctx.text_chars += len(msg.text)
        return [TextAppended(msg.context_id, msg.text, msg.flush)]

    def _on_flush(self, msg: ContextFlush) -> list[Event]:
        ctx, error = self._open_context_for(msg)
        if ctx is None:
            return error
        return [FlushRequested(msg.context_id, msg.flush_id)]

    def _on_end(self, msg: ContextEnd) -> list[Event]:
        ctx, error = self._open_context_for(msg)
        if ctx is None:
            return error
        ctx.state = ContextState.ENDING
        return [EndRequested(msg.context_id)]

    def _on_cancel(self, msg: ContextCancel) -> list[Event]:
        ctx = self._active.get(msg.context_id)
        if ctx is None:
            if msg.context_id in self._finished:
                return []  # cancel raced with done/cancelled: nothing left to cancel
            return self._unknown(msg)
        if ctx.state is ContextState.CANCELLING:
            return []
        ctx.state = ContextState.CANCELLING
        return [CancelRequested(msg.context_id, msg.played_ms)]

    def _on_close(self) -> list[Event]:
        self._closing = True
        events: list[Event] = []
        for ctx in self._active.values():
            if ctx.state is ContextState.OPEN:
                ctx.state = ContextState.ENDING
                events.append(EndRequested(ctx.context_id))
        events.append(CloseRequested())
        return events

    # --- input helpers ----------------------------------------------------------

    def _open(
        self, msg: ContextCreate | TextAppend, overrides: dict[str, object], *, implicit: bool
    ) -> list[Event]:
        if self.live_contexts >= self._limits.max_contexts:
            return self._reject(
                msg,
                ErrorCode.TOO_MANY_CONTEXTS,
                f"too many open contexts (max {self._limits.max_contexts}); "
                "end or cancel one first",
            )
        stream = self._take_stream()
        if stream is None:
            return self._reject(
                msg,
                ErrorCode.TOO_MANY_CONTEXTS,
                "no free stream number; wait for pending contexts to finish",
            )
        settings = self._context_settings(overrides)
        self._finished.pop(msg.context_id, None)
        self._active[msg.context_id] = _Context(msg.context_id, stream, settings)
        return [ContextOpened(msg.context_id, stream, settings, implicit, msg.event_id)]

    def _context_settings(self, overrides: dict[str, object]) -> ContextSettings:
        base = self._settings
        inherited = {
            name: getattr(base, name)
            for name in ContextSettings.__struct_fields__
            if hasattr(base, name)
        }
        inherited.update(overrides)
        return ContextSettings(**inherited)

    def _open_context_for(
        self, msg: ContextFlush | ContextEnd
    ) -> tuple[_Context | None, list[Event]]:
        ctx = self._active.get(msg.context_id)
        if ctx is None:
            if msg.context_id in self._finished:
                return None, self._closed(msg, self._finished[msg.context_id])
            return None, self._unknown(msg)
        if ctx.state is not ContextState.OPEN:
            return None, self._closed(msg, ctx.state)
        return ctx, []

    def _reject(
        self,
        msg: ClientMessage,
        code: ErrorCode,
        message: str,
        *,
        param: str | None = None,
    ) -> list[Event]:
        err = ProtocolError(
            code,
            message,
            param=param,
            context_id=getattr(msg, "context_id", None),
            event_id=msg.event_id,
        )
        return [ErrorEvent(err)]

    def _closed(self, msg: ClientMessage, state: ContextState) -> list[Event]:
        kind = msg.__struct_config__.tag
        return self._reject(
            msg,
            ErrorCode.CONTEXT_CLOSED,
            f"{kind} for context {getattr(msg, 'context_id', '')!r}, which is {state}; "
            "open a new context",
        )

    def _unknown(self, msg: ClientMessage) -> list[Event]:
        return self._reject(
            msg,
            ErrorCode.UNKNOWN_CONTEXT,
            f"no context {getattr(msg, 'context_id', '')!r}; create it first",
            param="context_id",
        )

    def _too_long(self, msg: TextAppend, have: int) -> list[Event]:
        return self._reject(
            msg,
            ErrorCode.TEXT_TOO_LONG,
            f"context text would be {have + len(msg.text)} characters, over the limit of "
            f"{self._limits.max_text_chars}; end this context and continue in a new one",
            param="text",
        )

    def _closing_event(self, msg: ClientMessage | None) -> ErrorEvent:
        return ErrorEvent(
            ProtocolError(
                ErrorCode.SESSION_CLOSING,
                "the session is closing (session.close was received); no more messages",
                context_id=getattr(msg, "context_id", None),
                event_id=msg.event_id if msg is not None else None,
            )
        )

    def _too_big(self, data: str) -> bool:
        limit = self._limits.max_message_bytes
        if len(data) > limit:
            return True
        # A char is at most 4 UTF-8 bytes: only encode when the answer depends on it.
        return len(data) * 4 > limit and len(data.encode("utf-8", "surrogatepass")) > limit

    def _too_big_event(self, size: int) -> ErrorEvent:
        return ErrorEvent(
            ProtocolError(
                ErrorCode.MESSAGE_TOO_BIG,
                f"message of {size} bytes is over the limit of "
                f"{self._limits.max_message_bytes} bytes",
                fatal=True,
            )
        )

    # --- streams ----------------------------------------------------------------

    def _take_stream(self) -> int | None:
        if self._free_streams:
            return heapq.heappop(self._free_streams)
        if self._next_stream > MAX_STREAM:
            return None
        self._next_stream += 1
        return self._next_stream - 1

    def _finish(self, ctx: _Context, state: ContextState) -> None:
        ctx.state = state
        del self._active[ctx.context_id]
        heapq.heappush(self._free_streams, ctx.stream)
        self._finished[ctx.context_id] = state
        while len(self._finished) > self._finished_memory:
            self._finished.popitem(last=False)

    # --- output -----------------------------------------------------------------

    def created_message(self, session_id: str) -> str:
        """``session.created``: send it first, right after the upgrade."""
        return encode_server(
            SessionCreated(
                session_id=session_id,
                protocol_version=PROTOCOL_VERSION,
                session=self._settings,
                limits=self._limits,
                option_fields=list(self._options.fields),
            )
        )

    def updated_message(self, event_id: str | None = None) -> str:
        """``session.updated`` with the current effective settings."""
        return encode_server(SessionUpdated(session=self._settings, event_id=event_id))

    def context_created(self, context_id: str) -> str:
        """``context.created`` for a context that ContextOpened announced."""
        ctx = self._require_active(context_id)
        return encode_server(ContextCreated(context_id=context_id, stream=ctx.stream))

    def audio_frame(
        self,
        context_id: str,
        payload: bytes,
        flush_end: bool = False,
        context_end: bool = False,
    ) -> bytes:
        """A binary audio frame with the context's next seq.

        Raises ProtocolError (unknown_context / context_closed) when the context is
        unknown, being cancelled, finished, or already sent its context-end frame.
        """
        ctx = self._require_sendable(context_id)
        flags = (FLAG_FLUSH_END if flush_end else 0) | (FLAG_CONTEXT_END if context_end else 0)
        frame = pack_audio(ctx.stream, ctx.next_seq, flags, payload)
        ctx.next_seq += 1
        ctx.final_frame_sent = context_end
        return frame

    def audio_message(self, context_id: str, payload: bytes) -> str:
        """The same audio as a base64 ``audio`` message (``audio_transport: base64``).

        Shares the seq counter and the checks of :meth:`audio_frame`.
        """
        ctx = self._require_sendable(context_id)
        msg = AudioMessage(context_id=context_id, seq=ctx.next_seq, audio=payload)
        ctx.next_seq += 1
        return encode_server(msg)

    def timestamps_message(self, context_id: str, words: Sequence[WordTimestamp]) -> str:
        self._require_live(context_id)
        return encode_server(Timestamps(context_id=context_id, words=list(words)))

    def context_flushed(self, context_id: str, flush_id: str | None, audio_ms: int) -> str:
        self._require_live(context_id)
        return encode_server(
            ContextFlushed(context_id=context_id, flush_id=flush_id, audio_ms=audio_ms)
        )

    def context_done(self, context_id: str, audio_ms: int, usage: Usage) -> str:
        """``context.done``; the context is finished: no frame can follow."""
        ctx = self._require_live(context_id)
        self._finish(ctx, ContextState.DONE)
        return encode_server(ContextDone(context_id=context_id, audio_ms=audio_ms, usage=usage))

    def context_cancelled(self, context_id: str, audio_sent_ms: int) -> str:
        """``context.cancelled`` (answering a cancel, or a cancel of the server's own)."""
        ctx = self._require_active(context_id)
        last_seq = ctx.next_seq - 1 if ctx.next_seq else None
        self._finish(ctx, ContextState.CANCELLED)
        return encode_server(
            ContextCancelled(context_id=context_id, audio_sent_ms=audio_sent_ms, last_seq=last_seq)
        )

    def end_context(self, context_id: str) -> bool:
        """End an open context from the server's side, as if the client had sent
        ``context.end`` (an idle context); True when it was open. Text sent to it
        afterwards is ``context_closed``."""
        ctx = self._active.get(context_id)
        if ctx is None or ctx.state is not ContextState.OPEN:
            return False
        ctx.state = ContextState.ENDING
        return True

    def abort_context(self, context_id: str) -> None:
        """Forget a context the server refused to run (e.g. an unknown voice).

        It ends silently as cancelled: the caller sends the error that says why;
        no ``context.cancelled`` is owed, and the id may be created again.
        """
        self._finish(self._require_active(context_id), ContextState.CANCELLED)

    def error_message(self, error: ProtocolError) -> str:
        return encode_server(error_to_message(error))

    def warning_message(self, code: ErrorCode, message: str, context_id: str | None = None) -> str:
        return encode_server(WarningMessage(code=str(code), message=message, context_id=context_id))

    # --- output helpers ---------------------------------------------------------

    def _require_active(self, context_id: str) -> _Context:
        ctx = self._active.get(context_id)
        if ctx is not None:
            return ctx
        state = self._finished.get(context_id)
        if state is not None:
            raise ProtocolError(
                ErrorCode.CONTEXT_CLOSED,
                f"context {context_id!r} is {state}",
                context_id=context_id,
            )
        raise ProtocolError(
            ErrorCode.UNKNOWN_CONTEXT, f"no context {context_id!r}", context_id=context_id
        )

    def _require_live(self, context_id: str) -> _Context:
        ctx = self._require_active(context_id)
        if ctx.state not in _LIVE:
            raise ProtocolError(
                ErrorCode.CONTEXT_CLOSED,
                f"context {context_id!r} is {ctx.state}",
                context_id=context_id,
            )
        return ctx

    def _require_sendable(self, context_id: str) -> _Context:
        ctx = self._require_live(context_id)
        if ctx.final_frame_sent:
            raise ProtocolError(
                ErrorCode.CONTEXT_CLOSED,
                f"context {context_id!r} already sent its last frame",
                context_id=context_id,
            )
        return ctx
