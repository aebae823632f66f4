"""GET /v1/audio/speech/stream: vllm-omni's streaming-text WebSocket, served by our engine.

The same message set and order as vllm-omni's ``serving_speech_stream.py`` (see
``protocol/compat_vllm.py``), so its clients work unchanged, and Baseten's additions
to it that LiveKit's Baseten plugin speaks (timestamps in ``audio.done``, voice
messages):

- ``session.config`` must come first; before it, any other or any bad message gets an
  ``error`` and the socket closes (the voice messages excepted). It may be sent again
  between utterances (not while text of an utterance is pending: that is an ``error``
  and the old config stays).
- ``input.text`` is cut by ``split_granularity``: ``none`` waits for ``input.done``;
  ``sentence`` and ``clause`` cut as text streams in (with our segmenter and its
  timers, the clause mode exactly as the native endpoint's automatic mode: a finished
  sentence is spoken at once, text without a boundary waits at most ``max_delay_ms``).
  Left out, it is ``clause`` (vllm-omni: ``none``), so a voice agent hears the reply
  while it is still written.
- Every cut is one "sentence", spoken as one engine context, in order: ``audio.start``
  (naming ``sample_rate`` and ``channels`` for every format), its audio, ``audio.done
  {total_bytes, error}``. Audio is 24 kHz unless ``sample_rate`` says otherwise.
  Without ``stream_audio`` the audio is the whole sentence as a file of
  ``response_format``, in binary frames of at most 1 MiB (clients join them); with it,
  raw chunks as they are made (pcm: s16le; wav: one header with open sizes, then
  s16le; opus: Ogg pages).
- ``streaming_mode: "token_level"``: an utterance is one engine context instead, opened
  by its first ``input.text`` and fed every later one as it comes
  (``compat_vllm_live``), so audio starts before the rest of the text is sent:
  ``audio.start`` (sentence 0, named by the first fragment), the audio streamed,
  ``audio.done``, then ``session.done`` counting the fragments, as vllm-omni sends.
- Word timestamps: vllm-omni's ``word_timestamps: true`` (pcm) sends the PCM in
  ``audio.chunk`` messages, each sentence ending with an empty one carrying its word
  timings; Baseten's ``timestamp_type: "word"`` leaves the audio as it is and puts the
  timings in ``audio.done`` (``timestamp_transport_strategy: "sync"``, the default) or
  in ``timestamps`` messages after the utterance's audio (``"async"``).
- ``input.done`` flushes the rest, then ``session.done {utterance_index,
  total_sentences}``; the socket stays open. ``session.close`` closes it with 1000 once
  everything before it has been answered.
- ``voice.list``, ``voice.add``, ``voice.remove`` (Baseten's) are answered at any time
  from the voices API (``compat_vllm_voices``), in order with everything else.
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
A token-level utterance holds its engine context while it waits for text: when no
message comes for ``Limits.context_idle_timeout_s`` it is ended as if ``input.done``
had come (an ``error`` says why).

Per-client limits hold here as on the native socket: every message spends from the
client's rate budget (past it: an ``error`` starting ``rate_limited``, and a second's
worth of refusals closes 1008), each sentence's engine context counts against the
client's share, and a socket opened with a connect token speaks what it was sent when
the token expires, then closes (4001). Refusals are logged at most a few times in ten
seconds, however many arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
from starlette.websockets import WebSocket, WebSocketDisconnect

from models.base import ModelInputError
from protocol.compat_vllm import (
    VOICE_MESSAGES,
    TimestampInfo,
    VllmAudioDone,
    VllmAudioStart,
    VllmError,
    VllmInputDone,
    VllmInputText,
    VllmServerMessage,
    VllmSessionClose,
    VllmSessionConfig,
    VllmSessionDone,
    VllmTimestamps,
    VllmVoiceAdd,
    VllmVoiceAddResult,
    VllmVoiceList,
    VllmVoiceRemove,
    VllmVoiceRemoveResult,
    decode_vllm_client,
    encode_vllm_server,
    vllm_error,
)
from protocol.errors import CloseCode, ProtocolError
from protocol.validation import check_text
from voiceserver.clients import ClientId
from voiceserver.engine.client import Overloaded
from voiceserver.logs import Throttled
from voiceserver.quotas import RefusalWindow
from voiceserver.runtime import Runtime
from voiceserver.session.output import ContextOutput
from voiceserver.session.peer import FAREWELL_S, PeerGone, say_farewell
from voiceserver.session.utterance import Utterance, UtteranceError
from voiceserver.text.segmenter import TextSegmenter
from voiceserver.transport.auth import admit_websocket, chosen_subprotocol
from voiceserver.transport.compat_audio import (
    CHANNELS,
    ChunkMessages,
    SentenceEncoder,
    WordTimings,
    binary_frames,
)
from voiceserver.transport.compat_settings import CompatSettings, ConfigError, settings_from_config
from voiceserver.transport.compat_vllm_live import LiveText
from voiceserver.transport.compat_vllm_voices import add_voice, list_voices, remove_voice
from voiceserver.transport.ws import WebSocketPeer, admit_client, refuse_full

log = logging.getLogger(__name__)
refusals = Throttled(log)
T = TypeVar("T")

ENDPOINT = "ws_compat"
CONFIG_TIMEOUT_S = 10.0
"""vllm-omni's wait for the first ``session.config``."""
LOGGED_CHARS = 200
"""How much of a refusal's text goes into the log (it may repeat a bit of client input)."""


@dataclass(frozen=True)
class _Sentence:
    settings: CompatSettings
    text: str
    utterance_index: int
    sentence_index: int


@dataclass(frozen=True)
class _LiveUtterance:
    """A token-level utterance: one engine context fed as its text arrives."""

    settings: CompatSettings
    live: LiveText
    utterance_index: int
    sentence_index: int = 0

    @property
    def text(self) -> str:
        return self.live.title


@dataclass(frozen=True)
class _UtteranceDone:
    """``session.done``, after the utterance's async timestamps."""

    utterance_index: int
    total_sentences: int


@dataclass(frozen=True)
class _Close:
    code: int
    reason: str


_Job = _Sentence | _LiveUtterance | _UtteranceDone | str | _Close


class _Gone(Exception):
    """The client disconnected while the session awaited something else."""


class _Kind(msgspec.Struct):
    type: Any = None


_kind_decoder = msgspec.json.Decoder(_Kind)
_CLIENT_TYPES = ("session.config", "input.text", "input.done", "session.close", *VOICE_MESSAGES)
NO_TIMINGS = "word timestamps are not available for this model with these settings"


def _message_type(raw: str) -> object:
    try:
        return _kind_decoder.decode(raw).type
    except (msgspec.DecodeError, UnicodeEncodeError, RecursionError):
        return None


def open_sentence(
    rt: Runtime, settings: CompatSettings, client: ClientId | None = None, *, live: bool = False
) -> Utterance:
    """Open the engine context that speaks one sentence (raises Overloaded). vllm-omni's
    ``initial_codec_chunk_frames`` is the first vocoder chunk's size (0: the server's
    default; past the engine's largest chunk it is that chunk). ``live``: a token-level
    utterance, whose text the model's segmenter cuts as it streams in (a sentence's text
    is whole and is spoken as one piece)."""
    first = settings.initial_codec_chunk_frames or None
    if first is not None:
        first = min(first, rt.model_config.engine.max_chunk_frames)
    return Utterance(
        rt,
        settings.params,
        "auto" if live else "none",
        endpoint=ENDPOINT,
        live=True,
        word_timestamps=settings.audio.word_timings,
        first_chunk_frames=first,
        client=client,
    )


class CompatSession:
    """One connection: the receive loop (state, splitting) and the worker that speaks."""

    def __init__(
        self,
        rt: Runtime,
        ws: WebSocket,
        client: ClientId | None = None,
        expires_at: float | None = None,
    ) -> None:
        self.rt = rt
        self.ws = ws
        self.client = client
        self.expires_at = expires_at
        """When the connect token the socket opened with expires (unix seconds)."""
        self.expired = False
        self._refusals = RefusalWindow(rt.server.limits.max_messages_per_s)
        self._early: deque[dict[str, Any]] = deque()
        """Messages read while a config's reference audio loaded, in order."""
        self._peer = WebSocketPeer(ws)
        self.settings: CompatSettings | None = None
        self._segmenter: TextSegmenter | None = None
        self._timer: asyncio.TimerHandle | None = None
        """Wakes the segmenter when text has waited its max_delay_ms/end_delay_ms."""
        self._live: LiveText | None = None
        """The open token-level utterance (its first input.text has come)."""
        self._async_timings: list[tuple[int, int, TimestampInfo | None]] = []
        """Baseten's async timestamps (utterance, sentence, timings) not sent yet."""
        self._utterance_index = 0
        self._sentence_index = 0
        self._utterance_open = False
        self._closing = False
        self._jobs: asyncio.Queue[_Job] = asyncio.Queue()
        self._prompt: asyncio.Queue[str | None] = asyncio.Queue()
        """Replies sent at once while a token-level utterance speaks (see ``_put``)."""
        self._speaking: LiveText | None = None
        """The token-level utterance the worker is speaking."""
        self._send_lock = asyncio.Lock()
        """The worker and its relay send whole messages, one at a time."""
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
        expiry = None
        if self.expires_at is not None:
            wait = max(0.0, self.expires_at - time.time())
            expiry = asyncio.get_running_loop().call_later(wait, self._token_expired)
        try:
            while True:
                timeout = self._receive_timeout()
                try:
                    message = self._early.popleft() if self._early else None
                    message = message or await asyncio.wait_for(self.ws.receive(), timeout)
                except TimeoutError:
                    self._on_timeout()
                    continue
                if message["type"] == "websocket.disconnect":
                    return
                if self._closing or not self._within_budget(message):
                    continue
                if message.get("text") is not None:
                    try:
                        await self._on_text(message["text"])
                    except _Gone:
                        return
                else:
                    self._reject(
                        "binary frames are not accepted; send JSON text messages", "binary frame"
                    )
        finally:
            # A closed socket ends everything at once: the sentence in flight is
            # cancelled (its Utterance frees the engine slot) and the queue dropped.
            if expiry is not None:
                expiry.cancel()
            self._cancel_timer()
            if self._live is not None:
                self._live.detach()
            self.rt.lifecycle.unregister(self)
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await worker

    # -- receive side ------------------------------------------------------

    async def _reading(self, work: Awaitable[T]) -> T:
        """Await ``work`` while the socket is still read: a disconnect cancels it (and
        raises _Gone); other messages keep their order in ``_early``."""
        task = asyncio.ensure_future(work)
        try:
            while True:
                receive = asyncio.ensure_future(self.ws.receive())
                await asyncio.wait({task, receive}, return_when=asyncio.FIRST_COMPLETED)
                if not receive.done():
                    receive.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    message = await receive
                    if message["type"] == "websocket.disconnect":
                        raise _Gone
                    self._early.append(message)
                if task.done():
                    return task.result()
        finally:
            task.cancel()

    def _within_budget(self, message: dict[str, Any]) -> bool:
        """Spend one message from the client's budget; refuse the message past it."""
        if self.client is None or self.rt.rates.spend(self.client):
            return True
        limit = self.rt.server.limits.max_messages_per_s
        self.rt.metrics.error(ENDPOINT, "rate_limited")
        if self._refusals.refuse(time.monotonic()):
            self._drop(
                CloseCode.POLICY_VIOLATION,
                f"rate_limited: over {limit:g} messages a second past this client's budget",
                FAREWELL_S,  # a flooder is not waited for as long as a slow reader
            )
            return False
        kind = _message_type(message["text"]) if message.get("text") is not None else None
        what = kind if kind in _CLIENT_TYPES else "message"
        self._reject(
            f"rate_limited: {what} refused: this client may send {limit:g} messages a second"
            f" (bursts of {self.rt.server.limits.messages_burst}); slow down, or the socket"
            " is closed",
            str(what),
        )
        return False

    def _token_expired(self) -> None:
        """The connect token expired: speak what was sent, then close (4001)."""
        if self.expired or self.dropped or self._closing:
            return
        self.expired = True
        if self._utterance_open:
            self._input_done()
        message = (
            "token_expired: the connect token this socket opened with has expired; what"
            " was sent is spoken, then the socket closes; reconnect with a fresh token"
        )
        self._closing = True
        self._put(encode_vllm_server(VllmError(message=message)))
        self._put(_Close(int(CloseCode.UNAUTHORIZED), "connect token expired"))

    def _receive_timeout(self) -> float:
        limits = self.rt.server.limits
        if self.settings is None:
            return CONFIG_TIMEOUT_S
        if self._live is not None:  # an engine context waits for this client's text
            return min(limits.idle_timeout_s, limits.context_idle_timeout_s)
        return limits.idle_timeout_s

    def _on_timeout(self) -> None:
        if self._live is not None and not self._closing:
            wait = self._receive_timeout()
            self._reject(
                f"idle_timeout: no input.text or input.done for {wait:g} s while a"
                " token-level utterance held its engine context; the utterance was ended:"
                " what it had is spoken, then session.done",
                "input.text",
            )
            self._input_done()
            return
        if self._pending or self._closing:
            return
        if self.settings is None:
            self._fatal("Timeout waiting for session.config", CloseCode.IDLE_TIMEOUT)
        else:
            self._fatal("Idle timeout: no message received", CloseCode.IDLE_TIMEOUT)

    async def _on_text(self, raw: str) -> None:
        try:
            msg = decode_vllm_client(raw)
        except ProtocolError as err:
            self.rt.metrics.error(ENDPOINT, str(err.code))
            text = vllm_error(err).message
            kind = _message_type(raw)
            if kind in VOICE_MESSAGES:  # answered in their own reply, never fatal
                self._voice_refused(str(kind), text, err.param)
                return
            if kind == "session.config":
                text = f"Invalid session config: {text}"
            what = kind if kind in _CLIENT_TYPES else "message"
            self._reject(text, what, err.param)
            return
        if isinstance(msg, VllmVoiceList | VllmVoiceAdd | VllmVoiceRemove):
            await self._voice(msg)
        elif isinstance(msg, VllmSessionConfig):
            await self._configure(msg)
        elif self.settings is None:
            tag = msg.__struct_config__.tag
            self._reject(f"Expected session.config, got: {tag}", str(tag), "type")
        elif isinstance(msg, VllmInputText):
            self._input_text(msg.text)
        elif isinstance(msg, VllmInputDone):
            self._input_done()
        elif isinstance(msg, VllmSessionClose):
            self._closing = True
            self._put(_Close(int(CloseCode.NORMAL), "session closed"))

    async def _configure(self, msg: VllmSessionConfig) -> None:
        if self._utterance_open:
            self._reject(
                "session.config cannot be applied while an utterance is in progress;"
                " send input.done first",
                "session.config",
            )
            return
        try:
            # A path or URL is loaded first (a fetch within its one deadline); messages
            # after this config wait in the socket meanwhile, so their order is kept.
            accepted = any(f.name == "ref_audio" for f in self.rt.model.capabilities.request_fields)
            ref_audio = await self._reading(
                self.rt.media.load(msg.ref_audio, self.client, accepted)
            )
            settings = settings_from_config(self.rt, msg, ref_audio)
        except ModelInputError as exc:
            self.rt.metrics.error(ENDPOINT, exc.code)
            self._reject(f"Invalid session config: {exc.code}: {exc}", "session.config", exc.param)
            return
        except ConfigError as exc:
            self.rt.metrics.error(ENDPOINT, "unsupported_value")
            self._reject(f"Invalid session config: {exc}", "session.config", exc.field)
            return
        except ValueError as exc:  # an output format the encoders refuse
            self.rt.metrics.error(ENDPOINT, "unsupported_value")
            self._reject(f"Invalid session config: {exc}", "session.config")
            return
        self.settings = settings
        self._segmenter = TextSegmenter(settings.segmenter)

    async def _voice(self, msg: VllmVoiceList | VllmVoiceAdd | VllmVoiceRemove) -> None:
        """Baseten's voice messages, answered in order with everything else."""
        reply: VllmServerMessage
        if isinstance(msg, VllmVoiceList):
            reply = list_voices(self.rt)
        elif isinstance(msg, VllmVoiceAdd):
            # Cloning runs on the prepare workers; the socket is read meanwhile.
            reply = await self._reading(add_voice(self.rt, msg, self.client))
        else:
            reply = await self._reading(remove_voice(self.rt, msg))
        if isinstance(reply, VllmVoiceAddResult | VllmVoiceRemoveResult) and not reply.success:
            self.rt.metrics.error(ENDPOINT, "voice_refused")
            refusals.log(
                logging.WARNING,
                msg.__struct_config__.tag,
                "vllm-compatible socket: refused %s: %s",
                msg.__struct_config__.tag,
                (reply.error or "")[:LOGGED_CHARS],
            )
        self._put(encode_vllm_server(reply))

    def _voice_refused(self, kind: str, message: str, field: str | None) -> None:
        """A voice message that did not decode: its own reply says why."""
        refusals.log(
            logging.WARNING,
            kind,
            "vllm-compatible socket: refused %s%s: %s",
            kind,
            f" (field {field})" if field else "",
            message[:LOGGED_CHARS],
        )
        reply: VllmServerMessage
        if kind == "voice.remove":
            reply = VllmVoiceRemoveResult(success=False, name="", error=message)
        elif kind == "voice.add":
            reply = VllmVoiceAddResult(success=False, error=message)
        else:
            reply = VllmError(message=message)
        self._put(encode_vllm_server(reply))

    def _input_text(self, text: str) -> None:
        assert self._segmenter is not None
        if not text:
            return
        if self.draining and self._live is None:  # an open context may still be fed
            self._reject(
                "server_shutdown: the server is shutting down; reconnect later", "input.text"
            )
            return
        try:
            check_text(text, "text")
        except ProtocolError as err:
            self.rt.metrics.error(ENDPOINT, str(err.code))
            self._reject(vllm_error(err).message, "input.text", "text")
            return
        limit = self.rt.server.limits.max_text_chars
        if self._live is not None:
            waiting = self._live.chars  # one context: all its text counts
        else:
            waiting = self._queued_chars + self._segmenter.buffered_chars
        if waiting + len(text) > limit:
            self.rt.metrics.error(ENDPOINT, "text_too_long")
            self._reject(
                f"text_too_long: more than {limit} characters would wait to be spoken;"
                " send less text or wait for audio.done",
                "input.text",
                "text",
            )
            return
        self._utterance_open = True
        assert self.settings is not None
        if self.settings.token_level:
            self._live_text(text)
            return
        for segment in self._segmenter.push(text, time.monotonic()):
            self._add_sentence(segment.text)
        self._arm_timer()

    def _live_text(self, text: str) -> None:
        """Token level: the first text opens the utterance's one context (queued in
        order behind what came before); later text goes straight into it."""
        assert self.settings is not None
        if self._live is not None:
            self._live.feed(text)
            return
        self._live = LiveText(text)
        self._put(_LiveUtterance(self.settings, self._live, self._utterance_index))

    def _arm_timer(self) -> None:
        """Wake when the segmenter's held text has waited long enough (its timers)."""
        self._cancel_timer()
        deadline = self._segmenter.deadline() if self._segmenter is not None else None
        if deadline is not None:
            delay = max(0.0, deadline - time.monotonic())
            self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._segmenter is None or self._closing or self.dropped:
            return
        for segment in self._segmenter.poll(time.monotonic()):
            self._add_sentence(segment.text)
        self._arm_timer()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _input_done(self) -> None:
        assert self._segmenter is not None and self.settings is not None
        self._cancel_timer()
        if self._live is not None:
            self._live.finish()
            total = self._live.fragments
            self._live = None
        else:
            for segment in self._segmenter.flush():
                self._add_sentence(segment.text)
            total = self._sentence_index
        self._put(_UtteranceDone(self._utterance_index, total))
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

    def _reject(self, message: str, what: str = "message", field: str | None = None) -> None:
        """An ``error``; before the first config it also ends the connection, as in vllm-omni.

        ``what`` (the refused message's type) and ``field`` go into the server log with
        the reason, so an operator sees why a client got nothing."""
        fatal = self.settings is None
        refusals.log(
            logging.WARNING,
            what,
            "vllm-compatible socket: refused %s%s%s: %s",
            what,
            f" (field {field})" if field else "",
            " and closed the connection" if fatal else "",
            message[:LOGGED_CHARS],
        )
        if fatal:
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
        if isinstance(job, str) and self._speaking is not None and self._speaking is self._live:
            # A reply to a message that came while a token-level utterance is still open
            # and speaking: out now, between its audio frames (vllm-omni reads and answers
            # while such a request runs), not after it.
            self._prompt.put_nowait(job)
        else:
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
                elif isinstance(job, _UtteranceDone):
                    await self._utterance_done(job)
                elif isinstance(job, _LiveUtterance):
                    await self._speak_live(job)
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
            async with self._send_lock:
                await self._peer.send_text(data)

    async def _send_bytes(self, data: bytes) -> None:
        async with asyncio.timeout(self.rt.server.limits.slow_reader_timeout_s):
            async with self._send_lock:
                await self._peer.send_bytes(data)

    async def _relay(self) -> None:
        """While a token-level utterance speaks: the replies ``_put`` routes here, until
        a None says the utterance has ended (what came before it is sent first)."""
        while (data := await self._prompt.get()) is not None:
            self._queued_bytes -= len(data)
            await self._send_text(data)
            self._pending -= 1

    async def _speak_live(self, job: _LiveUtterance) -> None:
        self._speaking = job.live
        relay = asyncio.create_task(self._relay())
        relay.add_done_callback(lambda task: task.cancelled() or task.exception())
        try:
            await self._speak(job)
        except BaseException:
            relay.cancel()  # the worker is going: nothing more is sent
            raise
        finally:
            self._speaking = None
        self._prompt.put_nowait(None)
        await relay  # the replies left, in order; a send that failed is raised here

    async def _speak(self, job: _Sentence | _LiveUtterance) -> None:
        spec = job.settings.audio
        caps = self.rt.model.capabilities
        live = job.live if isinstance(job, _LiveUtterance) else None
        start = VllmAudioStart(
            utterance_index=job.utterance_index,
            sentence_index=job.sentence_index,
            sentence_text=job.text,
            format=spec.response_format,
            sample_rate=spec.sample_rate,
            channels=CHANNELS,
            word_timestamps=True if spec.word_chunks else None,
        )
        started = False

        async def send_start() -> None:
            nonlocal started
            if not started:
                started = True
                await self._send(start)

        # Streamed audio announces itself with its first audio, as vllm-omni does; a
        # token-level utterance as its request starts (vllm-omni's resumable session).
        if not spec.stream or live is not None:
            await send_start()
        output = ContextOutput(SentenceEncoder(spec, caps.sample_rate), self.rt.encode_pool)
        chunks = ChunkMessages(job.utterance_index, job.sentence_index, spec.sample_rate)
        timings = WordTimings()
        total = 0
        failure: UtteranceError | None = None
        try:
            # The utterance's own tracker counts this sentence in the metrics, once.
            async with open_sentence(
                self.rt, job.settings, self.client, live=live is not None
            ) as utterance:
                if live is not None:
                    live.attach(utterance)
                else:
                    utterance.append(job.text)
                    utterance.end()
                async for chunk in utterance.events():
                    _collect_words(utterance, timings)
                    data = b"".join(await output.feed(chunk.pcm, final=chunk.final))
                    if not data:
                        continue
                    await send_start()
                    if spec.word_chunks:
                        for msg in chunks.audio(data):
                            await self._send(msg)
                    else:
                        for frame in binary_frames(data):
                            await self._send_bytes(frame)
                    total += len(data)
                _collect_words(utterance, timings)
        except UtteranceError as exc:
            failure = exc
        except Overloaded as exc:
            self.rt.metrics.error(ENDPOINT, str(exc.code))
            failure = UtteranceError(str(exc.code), str(exc))
        finally:
            output.close()  # frees the encoder of a sentence that did not finish
            if live is not None:
                live.detach()
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
        elif spec.word_chunks:
            await self._send(chunks.trailer(timings))
        info = timings.info() if failure is None else None
        if failure is None and spec.timestamp_info == "async":
            self._async_timings.append((job.utterance_index, job.sentence_index, info))
        done = VllmAudioDone(
            utterance_index=job.utterance_index,
            sentence_index=job.sentence_index,
            total_bytes=total,
            error=failure is not None,
        )
        if spec.timestamp_info == "sync" and info is not None:
            done = msgspec.structs.replace(done, timestamp_info=info)
        await self._send(done)

    async def _utterance_done(self, job: _UtteranceDone) -> None:
        """Baseten's async timestamps of the utterance's sentences, then session.done."""
        for utterance_index, sentence_index, info in self._async_timings:
            await self._send(
                VllmTimestamps(
                    utterance_index=utterance_index,
                    sentence_index=sentence_index,
                    timestamp_info=info,
                    error=NO_TIMINGS if info is None else None,
                )
            )
        self._async_timings.clear()
        await self._send(
            VllmSessionDone(
                utterance_index=job.utterance_index, total_sentences=job.total_sentences
            )
        )

    async def _send(self, msg: VllmServerMessage) -> None:
        await self._send_text(encode_vllm_server(msg))

    async def _close(self, code: int, reason: str) -> None:
        with contextlib.suppress(PeerGone):
            await self._peer.close(code, reason)


def _collect_words(utterance: Utterance, timings: WordTimings) -> None:
    """The sentence's words timed so far (seconds from its first sample) into
    ``timings``; they go out in the sentence's trailing audio.chunk."""
    if utterance.aligns_words:
        timings.aligned()
        for word in utterance.take_words():
            timings.add(word.text, word.start_s, word.end_s)


async def vllm_speech_stream(ws: WebSocket) -> None:
    rt: Runtime = ws.app.state.runtime
    # The budget first: a client that floods upgrades with bad keys is limited too.
    client = await admit_client(ws, rt, ENDPOINT)
    if client is None:
        return
    admission = await admit_websocket(ws, rt.server.api_keys)
    if admission is None:
        return
    await ws.accept(subprotocol=chosen_subprotocol(ws.headers))
    if rt.full:
        await refuse_full(ws, rt, ENDPOINT)
        return
    rt.session_opened(ENDPOINT)
    try:
        await CompatSession(rt, ws, client, admission.expires_at).run()
    except (WebSocketDisconnect, OSError):
        pass
    except Exception:
        log.exception("compat session failed")
        with contextlib.suppress(Exception):
            await ws.close(code=int(CloseCode.INTERNAL_ERROR), reason="internal error")
    finally:
        rt.session_closed(ENDPOINT)
