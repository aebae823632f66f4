"""ElevenLabs' text-to-speech sockets as the native session state machine (sans-I/O).

:class:`ElevenLabsSession` is a :class:`~protocol.session.ServerSession` that reads
ElevenLabs' messages (:mod:`protocol.compat_elevenlabs`) and writes ElevenLabs', so the
native session runtime (``voiceserver.session.speech.SpeechSession``: engine contexts,
segmentation, word timing, barge-in, limits) serves it unchanged. ElevenLabs' contexts
are native contexts of the same id:

- The first message naming a context that is not running opens it, with the socket's
  voice, language and output format and the message's ``voice_settings.speed``; its
  text is spoken unless it is blank (ElevenLabs' opening message is ``" "``). After a
  context finished (``isFinal``), its id opens a new one, as on ElevenLabs.
- ``text`` is appended as sent (``text.append``); ``flush: true`` flushes (after the
  text, if any). With ``auto_mode=true`` every non-blank text is flushed as it arrives
  (ElevenLabs then speaks each message at once, without its chunk schedule); without,
  the native segmenter speaks each sentence as soon as it is complete.
  ``try_trigger_generation`` has nothing to add to that. Empty text with no flush is a
  keepalive (of its context, if it names a running one).
- ``close_context``: no more text. When everything sent was flushed, the context
  finishes speaking it (``context.end``), then ``isFinal``; with text sent since the
  last flush it stops at once (``context.cancel``, barge-in), then ``isFinal``. LiveKit
  and Pipecat flush before closing a finished turn, and close without flushing when the
  user interrupts.
- ``close_socket``: every running context finishes, then the socket closes (1000).
- The single-context socket (``stream-input``) has one context; ``{"text": ""}`` ends
  it (speak the rest, ``isFinal``, close 1000), and any refused message is fatal: an
  error, then close (1008), as ElevenLabs does.
- On the multi-context socket an error about a running context also stops it (its
  client stops listening to it), and an error about a context that will say nothing
  more is followed by its ``isFinal``, so clients waiting for it are released.
- The text-to-dialogue socket (``dialogue``) is the multi-context one with other field
  names: a context's first message names its voice (``voices``, one), ``inputs`` carry
  its text (each in that voice: one voice per context here), ``keep_alive`` keeps it;
  answers are snake_case (``context_id``, ``is_final``, ``char_start_times_ms``) and
  alignment times count from each message's first sample.

Audio goes out as base64 ``audio`` messages with the characters each one speaks
(``protocol.compat_elevenlabs_alignment``); the native messages without an ElevenLabs
counterpart (``context.created``, ``timestamps``, ``context.flushed``, ``warning``)
come out as empty strings, which the transport does not send (warnings go to
``on_warning``). One answer may be several ElevenLabs messages, one per line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from protocol.compat_elevenlabs import (
    DialogueInput,
    FormatSpec,
    StreamInput,
    VoiceSettings,
    decode_dialogue_input,
    decode_input,
)
from protocol.compat_elevenlabs_alignment import AudioClock, CharTimeline, chunk_alignment
from protocol.compat_elevenlabs_wire import (
    audio_clock,
    audio_line,
    error_line,
    final_line,
    peek_context,
    strip_tags,
)
from protocol.errors import ErrorCode, ProtocolError
from protocol.events import ErrorEvent, Event, KeepaliveReceived
from protocol.messages import (
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

SINGLE_CONTEXT = "stream-input"
"""The one context of the single-context socket (never sent to the client)."""
DEFAULT_CONTEXT = ""
"""The multi-context socket's context for messages that name none."""


@dataclass
class _Extra:
    """What a context needs beyond the native state."""

    clock: AudioClock
    timeline: CharTimeline | None
    voice_settings: VoiceSettings | None
    voice: str | None
    unflushed: bool = False
    """Text arrived since the last ``flush``: ``close_context`` then cancels."""
    audio_ms: int = 0
    """The context's audio sent so far, in ms."""
    aligned_ms: int = 0
    """Where the characters sent so far end (see ``chunk_alignment``)."""
    cancelled_by: ProtocolError | None = None
    """The error that stopped the context: sent with its ``isFinal``, since the
    cancellation overtakes whatever the session had queued."""


class ElevenLabsSession(ServerSession):
    """One ElevenLabs socket. ``multi``: the multi-context socket; ``voice``,
    ``language``, ``output`` (the native format the engine's audio is encoded in) and
    ``spec`` (the ``output_format`` the client asked for) hold for every context;
    ``aligned``: the served model times words for these settings (else no alignment is
    sent); ``auto_mode``: flush every text message;
    ``sync_alignment``: alignment times count from each context's first sample (else from
    the previous message's); ``ssml``: SSML tags are taken out of the text (their words
    are spoken; the tags themselves have no effect here); ``voice_name``: the served
    spelling of a voice a context names (text-to-dialogue)."""

    def __init__(
        self,
        limits: Limits,
        *,
        multi: bool,
        spec: FormatSpec,
        dialogue: bool = False,
        output: OutputFormat,
        voice: str | None = None,
        language: str | None = None,
        aligned: bool = True,
        auto_mode: bool = False,
        sync_alignment: bool = False,
        ssml: bool = False,
        idle_timeout_s: float | None = None,
        options: ModelOptions | None = None,
        on_warning: Callable[[str, str | None], None] | None = None,
        voice_name: Callable[[str], str] | None = None,
        finished_memory: int = 1024,
    ) -> None:
        defaults = SessionSettings(
            voice=voice,
            language=language,
            output_format=output,
            audio_transport="base64",
            timestamps="word" if aligned else "none",
            idle_timeout_s=idle_timeout_s,
        )
        super().__init__(limits, defaults, finished_memory=finished_memory, options=options)
        self.multi = multi or dialogue
        self.dialogue = dialogue
        self.spec = spec
        self._aligned = aligned
        self._auto_mode = auto_mode
        self._context_times = sync_alignment
        self._ssml = ssml
        self._on_warning = on_warning
        self._voice_name = voice_name or (lambda voice: voice)
        self._extra: dict[str, _Extra] = {}
        self._single_over = False

    @property
    def drained(self) -> bool:
        # The single-context socket closes once its context has finished.
        return super().drained or self._single_over

    # --- input --------------------------------------------------------------------

    def receive_text(self, data: str) -> list[Event]:
        if self._too_big(data):
            return [self._too_big_event(len(data.encode("utf-8", "surrogatepass")))]
        try:
            msg = (
                decode_dialogue_input(data)
                if self.dialogue
                else decode_input(data, multi=self.multi)
            )
        except ProtocolError as err:
            context_id = peek_context(data) if self.multi else None
            return self._refuse(err.replace(context_id=err.context_id or context_id))
        if self._closing:
            return self._refuse(
                ProtocolError(
                    ErrorCode.SESSION_CLOSING,
                    "the socket is closing (close_socket, or the end of its text, was"
                    " received); no more messages",
                    context_id=msg.context if self.multi else None,
                )
            )
        if isinstance(msg, DialogueInput):
            return self._dialogue(msg)
        if self.multi:
            return self._multi(msg)
        return self._single(msg)

    def receive_bytes(self, data: bytes) -> list[Event]:
        return [
            self._fatal_if_single(event) if isinstance(event, ErrorEvent) else event
            for event in super().receive_bytes(data)
        ]

    def _multi(self, msg: StreamInput) -> list[Event]:
        if msg.close_socket:
            return self._on_close()
        context_id = msg.context if msg.context is not None else DEFAULT_CONTEXT
        state = self.context_state(context_id)
        text = msg.text or ""
        try:
            if msg.close_context:
                return self._close_context(context_id, state)
            if state is ContextState.OPEN:
                return self._input(context_id, msg, text)
            if state in (ContextState.ENDING, ContextState.CANCELLING):
                if text.strip():
                    raise ProtocolError(
                        ErrorCode.CONTEXT_CLOSED,
                        f"context {context_id!r} is closing (close_context was received);"
                        " send new text with another context_id, or after its isFinal",
                    )
                return []  # a keepalive or flush for a context that is finishing
            if not text and msg.voice_settings is None:
                return [KeepaliveReceived()]  # nothing to open a context for
            return self._open_context(context_id, msg, text)
        except ProtocolError as err:
            return self._refuse(err.replace(context_id=context_id))

    def _dialogue(self, msg: DialogueInput) -> list[Event]:
        """A text-to-dialogue message: ``voices`` opens a context in that voice, ``inputs``
        are its text (each in that voice: one voice per context here)."""
        if msg.close_socket:
            return self._on_close()
        context_id = msg.context_id if msg.context_id is not None else DEFAULT_CONTEXT
        state = self.context_state(context_id)
        text = "".join(item.text for item in msg.inputs or ())
        # The same message in the text-to-speech socket's terms.
        same = StreamInput(
            text=text, flush=msg.flush, voice_settings=msg.voice_settings, context_id=context_id
        )
        try:
            if msg.close_context:
                return self._close_context(context_id, state)
            if msg.voices is not None and len(msg.voices) != 1:
                raise ProtocolError(
                    ErrorCode.UNSUPPORTED_VALUE,
                    "`voices`: one voice per context here; open a context for each voice",
                    param="voices",
                )
            if state is ContextState.OPEN:
                if msg.voices is not None:
                    raise ProtocolError(
                        ErrorCode.INVALID_FIELD,
                        "`voices` can only be set in a context's first message",
                        param="voices",
                    )
                self._check_speakers(msg, self._extra[context_id].voice)
                return self._input(context_id, same, text)
            if state in (ContextState.ENDING, ContextState.CANCELLING):
                return self._multi(same)  # refused when it holds text, else nothing
            if msg.voices is None and not msg.inputs:
                return [KeepaliveReceived()]
            voice = msg.voices[0] if msg.voices else msg.inputs[0].voice_id  # type: ignore[index]
            self._check_speakers(msg, voice)
            return self._open_context(context_id, same, text, voice=voice)
        except ProtocolError as err:
            return self._refuse(err.replace(context_id=context_id))

    @staticmethod
    def _check_speakers(msg: DialogueInput, voice: str | None) -> None:
        for item in msg.inputs or ():
            if voice is None or item.voice_id.lower() != voice.lower():
                raise ProtocolError(
                    ErrorCode.UNSUPPORTED_VALUE,
                    f"`inputs.voice_id`: {item.voice_id[:64]!r} is not this context's voice"
                    f" ({voice!r}); one voice per context here: open a context for each voice",
                    param="inputs.voice_id",
                )

    def _single(self, msg: StreamInput) -> list[Event]:
        context_id = SINGLE_CONTEXT
        state = self.context_state(context_id)
        try:
            if msg.text is None and not msg.flush:
                raise ProtocolError(
                    ErrorCode.MISSING_FIELD,
                    'missing required field `text` (" " to begin, text to speak, "" to end)',
                    param="text",
                )
            text = msg.text or ""
            if state is None:
                if msg.text == "":
                    return self._on_close()  # ended before it began
                return self._open_context(context_id, msg, text)
            if state is not ContextState.OPEN:
                raise ProtocolError(
                    ErrorCode.CONTEXT_CLOSED,
                    "this socket's text has ended; open a new socket to speak more",
                )
            if msg.text == "" and not msg.flush:
                return self._on_close()  # the end of the text: speak the rest, then close
            return self._input(context_id, msg, text)
        except ProtocolError as err:
            return self._refuse(err)

    def _open_context(
        self, context_id: str, msg: StreamInput, text: str, voice: str | None = None
    ) -> list[Event]:
        overrides: dict[str, object] = {}
        if voice is not None:
            voice = self._voice_name(voice)
            overrides["voice"] = voice
        speed = msg.voice_settings.speed if msg.voice_settings is not None else None
        if speed is not None and speed != 1.0:
            overrides["speed"] = speed
        opened = self._open(ContextCreate(context_id=context_id), overrides, implicit=False)
        if isinstance(opened[0], ErrorEvent):
            return self._refuse(opened[0].error)
        self._extra[context_id] = _Extra(
            clock=audio_clock(self.spec),
            timeline=CharTimeline() if self._aligned else None,
            voice_settings=msg.voice_settings,
            voice=voice or self.settings.voice,
        )
        if not text.strip():
            return opened  # ElevenLabs' opening " ": nothing to speak yet
        return [*opened, *self._input(context_id, msg, text)]

    def _input(self, context_id: str, msg: StreamInput, text: str) -> list[Event]:
        """The message's text and flush for a running context."""
        extra = self._extra[context_id]
        settings = msg.voice_settings
        both = settings is not None and extra.voice_settings is not None
        if both and settings != extra.voice_settings:
            raise ProtocolError(
                ErrorCode.INVALID_FIELD,
                "`voice_settings` can only be set in a context's first message; later"
                " messages must leave them out or repeat them unchanged",
                param="voice_settings",
            )
        if not text:
            if msg.flush:
                extra.unflushed = False
                return self._on_flush(ContextFlush(context_id=context_id))
            # A keepalive of this context (resets its idle clock).
            return self._on_text(TextAppend(context_id=context_id, text=""))
        if self._ssml:
            text = strip_tags(text)
            if not text:
                return self._on_text(TextAppend(context_id=context_id, text=""))
        blank = not text.strip()
        flush = bool(msg.flush) or (self._auto_mode and not blank)
        appended = self._on_text(TextAppend(context_id=context_id, text=text, flush=flush))
        if isinstance(appended[0], ErrorEvent):
            return self._refuse(appended[0].error)
        if extra.timeline is not None:
            extra.timeline.add_text(text)
        if msg.flush:
            extra.unflushed = False
        elif not blank:
            extra.unflushed = True
        return appended

    def _close_context(self, context_id: str, state: ContextState | None) -> list[Event]:
        if state is not ContextState.OPEN:
            return []  # not running, or already closing: nothing to do
        if self._extra[context_id].unflushed:
            return self._on_cancel(ContextCancel(context_id=context_id))
        return self._on_end(ContextEnd(context_id=context_id))

    def _refuse(self, err: ProtocolError) -> list[Event]:
        """An error. Fatal on the single-context socket; on the other one, an error about
        a running context also cancels it."""
        if not self.multi:
            return [ErrorEvent(err.replace(fatal=True, context_id=None))]
        events: list[Event] = [ErrorEvent(err)]
        context_id = err.context_id
        if context_id is not None and self.context_state(context_id) is ContextState.OPEN:
            self._extra[context_id].cancelled_by = err
            events += self._on_cancel(ContextCancel(context_id=context_id))
        return events

    def _fatal_if_single(self, event: ErrorEvent) -> ErrorEvent:
        return event if self.multi else ErrorEvent(event.error.replace(fatal=True))

    def _warn(self, message: str, context_id: str | None = None) -> None:
        if self._on_warning is not None:
            self._on_warning(message, context_id)

    # --- output -------------------------------------------------------------------

    def context_created(self, context_id: str) -> str:
        self._require_active(context_id)
        return ""

    def audio_message(self, context_id: str, payload: bytes) -> str:
        ctx = self._require_sendable(context_id)
        ctx.next_seq += 1
        extra = self._extra[context_id]
        started_ms = extra.audio_ms
        extra.audio_ms = extra.clock.advance(payload)
        chars = extra.timeline.take(extra.audio_ms) if extra.timeline is not None else []
        return self._audio_line(context_id, extra, payload, chars, started_ms)

    def _audio_line(
        self,
        context_id: str,
        extra: _Extra,
        payload: bytes,
        chars: list[tuple[str, float]],
        started_ms: int,
    ) -> str:
        """One audio message: ``payload`` (which started at ``started_ms`` of the
        context's audio) and the characters that start in it."""
        origin = started_ms if self.dialogue else 0 if self._context_times else None
        alignment, extra.aligned_ms = chunk_alignment(
            chars, extra.aligned_ms, extra.audio_ms, origin_ms=origin
        )
        return audio_line(payload, alignment, self._client_id(context_id), self.dialogue)

    def audio_frame(
        self, context_id: str, payload: bytes, flush_end: bool = False, context_end: bool = False
    ) -> bytes:
        raise ProtocolError(
            ErrorCode.INTERNAL_ERROR, "ElevenLabs sockets send audio as JSON messages only"
        )

    def timestamps_message(self, context_id: str, words: Sequence[WordTimestamp]) -> str:
        self._require_live(context_id)
        timeline = self._extra[context_id].timeline
        if timeline is not None:
            for word in words:
                timeline.add_word(word.char_start, word.char_end, word.start_ms, word.end_ms)
        return ""

    def context_flushed(self, context_id: str, flush_id: str | None, audio_ms: int) -> str:
        self._require_live(context_id)
        return ""

    def context_done(self, context_id: str, audio_ms: int, usage: Usage) -> str:
        extra = self._extra.get(context_id)
        super().context_done(context_id, audio_ms, usage)
        lines = []
        if extra is not None and extra.timeline is not None and extra.timeline.pending:
            # Characters after the last one timed (trailing spaces; a word the model did
            # not speak), with no audio of their own.
            chars = extra.timeline.take(extra.audio_ms, final=True)
            lines.append(self._audio_line(context_id, extra, b"", chars, extra.audio_ms))
        lines.append(self._final(context_id))
        return "\n".join(lines)

    def context_cancelled(self, context_id: str, audio_sent_ms: int) -> str:
        extra = self._extra.get(context_id)
        super().context_cancelled(context_id, audio_sent_ms)
        final = self._final(context_id)
        if extra is None or extra.cancelled_by is None:
            return final
        return self._error_line(extra.cancelled_by) + "\n" + final

    def warning_message(self, code: ErrorCode, message: str, context_id: str | None = None) -> str:
        self._warn(f"{code}: {message}", context_id)
        return ""

    def updated_message(self, event_id: str | None = None) -> str:
        return ""

    def error_message(self, error: ProtocolError) -> str:
        context_id = error.context_id if self.multi else None
        extra = self._extra.get(context_id) if context_id is not None else None
        if extra is not None and extra.cancelled_by is error:
            return ""  # goes out with the context's isFinal (context_cancelled)
        lines = [self._error_line(error)]
        if context_id is not None and context_id not in self._active and not error.fatal:
            lines.append(self._final(context_id))
        return "\n".join(lines)

    def _error_line(self, error: ProtocolError) -> str:
        context_id = error.context_id if self.multi else None
        return error_line(error, self._client_id(context_id), self.dialogue)

    def _final(self, context_id: str) -> str:
        return final_line(self._client_id(context_id), self.dialogue)

    def _client_id(self, context_id: str | None) -> str | None:
        """The ``contextId`` the client knows the context by (none on the single socket,
        nor for the default context)."""
        if not self.multi or context_id is None or context_id == DEFAULT_CONTEXT:
            return None
        return context_id

    def _finish(self, ctx: _Context, state: ContextState) -> None:
        super()._finish(ctx, state)
        self._extra.pop(ctx.context_id, None)
        if not self.multi:
            self._single_over = True
