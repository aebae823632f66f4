"""EngineClient: the only door from the front end (an event loop) to the engine.

Every endpoint opens contexts here and gets a :class:`ContextHandle` back.
What crosses to the engine is plain data (ids, arrays, settings): the client
runs a model's host-side work first, off the event loop when it is slow:

- ``ModelRunner.prepare`` (voice resolution, reference audio, clone encoding)
  on the prepare workers, shared fairly between clients
  (:class:`~voiceserver.engine.prepare.FairPreparer`); the engine admits a context
  only once it is prepared, and a cancel drops a preparation that has not started;
- ``ModelRunner.encode_text`` (tokenizing, phonemizing) on one worker thread, so
  a context's pieces reach the engine in the order they were sent; a runner
  whose encoding takes microseconds (``encodes_inline``) is called in place,
  since a thread hop would cost more than the work.

Admission control lives here too: ``open`` raises :class:`Overloaded` at once when
the engine has no slot to promise or is too loaded to keep its streams in real
time, so new streams are told to retry instead of every stream stuttering, and
:class:`OverShare` when the client (``voiceserver.clients``) already holds its
share of the engine's slots.

Events come back as one batch per engine step for this client, handed to the
event loop with one ``call_soon_threadsafe``, then to each context's callback.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor

import numpy as np

from models.base import ModelInputError, Prepared, SynthParams
from protocol.errors import ErrorCode
from voiceserver.clients import ClientId
from voiceserver.engine.door import Engine
from voiceserver.engine.messages import (
    AppendUnits,
    Cancel,
    CloseInput,
    ContextFailed,
    ContextReleased,
    EngineBatch,
    EngineEvent,
    Ready,
    Register,
    Throttle,
    WordTimings,
)
from voiceserver.engine.prepare import FairPreparer, PrepareJob
from voiceserver.engine.tempo import StretchedEvents
from voiceserver.engine.wire import AppendText, EngineLost, WordSpans
from voiceserver.engine.words import TimedWords, WordTable, renumbered
from voiceserver.quotas import ClientCounts

log = logging.getLogger(__name__)

OnEvent = Callable[[EngineEvent | TimedWords], None]


class Overloaded(Exception):
    """The engine cannot take a new context now; retry later (or elsewhere)."""

    retry_after_s = 1
    code = ErrorCode.OVERLOADED
    status = 503
    """The HTTP status that says it."""


class OverShare(Overloaded):
    """This client holds its share of the engine already; end one of its contexts first."""

    code = ErrorCode.RATE_LIMITED
    status = 429


ENGINE_FAILED = "engine_failed"
_LOST = "the engine serving this context stopped; open a new session (another engine takes it)"


class EngineClient:
    def __init__(
        self,
        engine: Engine,
        loop: asyncio.AbstractEventLoop,
        preparer: FairPreparer,
        text_pool: Executor | None = None,
        max_client_share: float = 1.0,
        audio_pool: Executor | None = None,
    ) -> None:
        """``max_client_share``: the share of the engine's slots one client may hold.
        ``audio_pool``: where a context's audio is time-stretched for its speed
        (``voiceserver.engine.tempo``); None: in place."""
        self.engine = engine
        self.runner = engine.runner
        self._loop = loop
        self._preparer = preparer
        self._text_pool = text_pool or ThreadPoolExecutor(1, thread_name_prefix="text")
        self._audio_pool = audio_pool
        slots = engine.max_slots
        share = max(1, int(max_client_share * slots + 1e-9))
        self.held = ClientCounts(share)
        """Active contexts (slots used or promised) of each client, against its share."""
        self.parked = ClientCounts(slots)
        """Parked contexts (prepared, waiting for text) of each client: no more than the
        engine has slots, so that what waits to be prepared stays bounded."""
        self._handles: dict[int, ContextHandle] = {}
        self._inbound: deque[EngineBatch] = deque()
        self._wakeup_pending = False
        self._id = engine.attach(self._from_engine)
        self.opened = 0
        self.refused = 0
        self.lost = False
        """The engine died: its contexts were ended with ``engine_failed``."""
        self._watchers: set[Callable[[], None]] = set()
        engine.on_lost(lambda: loop.call_soon_threadsafe(self._lost))

    def watch(self, on_lost: Callable[[], None]) -> None:
        """Call ``on_lost`` (on the event loop) if the engine dies; a session placed on
        this engine watches it for its life (:meth:`unwatch` when it ends)."""
        self._watchers.add(on_lost)

    def unwatch(self, on_lost: Callable[[], None]) -> None:
        self._watchers.discard(on_lost)

    @property
    def sessions(self) -> int:
        """Sessions placed on this engine (watching it)."""
        return len(self._watchers)

    def _lost(self) -> None:
        """The engine died: every context still open ends with ``engine_failed``, then
        the sessions placed here are told."""
        self.lost = True
        for handle in list(self._handles.values()):
            if not handle.ended:
                handle.fail(ContextFailed(handle.cid, ENGINE_FAILED, _LOST))
        for watcher in list(self._watchers):
            watcher()

    def open(
        self,
        params: SynthParams,
        on_event: OnEvent,
        max_lead_s: float | None = None,
        *,
        word_timestamps: bool = False,
        first_chunk_frames: int | None = None,
        client: ClientId | None = None,
        parked: bool = False,
    ) -> ContextHandle:
        """A new context (its ``params`` validated already) for ``client`` (None: not
        counted against any share); raises Overloaded, or OverShare.

        ``parked``: prepare the context now, but take no engine slot until
        :meth:`ContextHandle.activate` (a socket's context that has no text yet); a
        client may hold as many parked contexts as its share of slots. Otherwise the
        context is active at once.
        ``word_timestamps``: deliver :class:`TimedWords` events before the audio
        they describe, when the model can align this context's words
        (``ContextHandle.aligns_words`` says whether it can).
        ``first_chunk_frames``: frames in the first vocoder chunk, from 1 to
        ``EngineConfig.max_chunk_frames`` (0 or None: the engine's default);
        ModelInputError naming the field otherwise."""
        if self.lost:
            self.refused += 1
            raise Overloaded("the engine serving this session stopped; open a new session")
        first_chunk = self._first_chunk(first_chunk_frames)
        words = WordTable() if word_timestamps and self.runner.aligns_words(params) else None
        caps = self.runner.capabilities
        _, stretch = caps.split_speed(params.speed)
        stretched = None
        if stretch != 1.0:  # the speed the model does not make itself
            stretched = StretchedEvents(
                on_event, stretch, caps.sample_rate, self._loop, self._audio_pool
            )
        handle = ContextHandle(
            self, self.engine.new_id(), on_event, words, client, max_lead_s, first_chunk, stretched
        )
        if parked:
            if client is not None and not self.parked.take(client):
                self.refused += 1
                raise OverShare(
                    f"this client ({client.kind}) already has {self.parked.cap} contexts"
                    " waiting for text; send them text, end or cancel them first"
                )
            handle.state = "parked"
        else:
            self._activate(handle)
        self._handles[handle.cid] = handle
        if self.runner.prepares_inline:
            outcome = self._prepare(handle.cid, params)
            handle.on_prepared(outcome)
            handle.prepared(outcome)
        else:
            loop = self._loop

            def done(outcome: Prepared | ContextFailed) -> None:
                handle.on_prepared(outcome)
                loop.call_soon_threadsafe(handle.prepared, outcome)

            handle.preparing = self._preparer.submit(
                client, lambda: self._prepare(handle.cid, params), done
            )
        return handle

    def _activate(self, handle: ContextHandle) -> None:
        """Reserve an engine slot for ``handle``; raises Overloaded or OverShare."""
        client = handle.client
        if client is not None and not self.held.take(client):
            self.refused += 1
            if self.held.cap >= self.engine.max_slots:  # it holds every slot
                raise Overloaded("the engine is at capacity (this client holds every slot)")
            raise OverShare(
                f"this client ({client.kind}) already holds {self.held.cap} contexts, its"
                " share of the engine; end or cancel one first"
            )
        if not self.engine.reserve(handle.cid):
            if client is not None:
                self.held.give(client)
            self.refused += 1
            raise Overloaded("the engine is at capacity (every slot is in use); retry in a moment")
        self.opened += 1
        self.engine.submit(Register(handle.cid, self._id, handle.max_lead_s, handle.first_chunk))

    def _forget(self, handle: ContextHandle) -> None:
        """The context is over for the front end: what it held is its client's again."""
        if self._handles.pop(handle.cid, None) is None or handle.client is None:
            return
        if handle.state == "parked":
            self.parked.give(handle.client)
        else:
            self.held.give(handle.client)

    def _first_chunk(self, frames: int | None) -> int | None:
        if frames is None or frames == 0:
            return None
        most = self.engine.config.max_chunk_frames
        if isinstance(frames, bool) or not isinstance(frames, int) or not 1 <= frames <= most:
            raise ModelInputError(
                f"first_chunk_frames must be an integer from 1 to {most} (0 or none: the "
                f"server's default, {self.engine.config.first_chunk_frames}), got {frames!r}",
                param="first_chunk_frames",
                code="invalid_field",
            )
        return frames

    def _prepare(self, cid: int, params: SynthParams) -> Prepared | ContextFailed:
        try:
            return self.engine.prepare(cid, params)
        except ModelInputError as exc:
            return ContextFailed(cid, exc.code, str(exc), exc.param)
        except EngineLost:
            return ContextFailed(cid, ENGINE_FAILED, _LOST)
        except Exception as exc:
            log.exception("preparing a context failed")
            return ContextFailed(cid, "internal_error", f"preparing the context failed: {exc}")

    def _encode(
        self, cid: int, text: str, flush_id: int | None, words: WordTable | None, offset: int
    ) -> ContextFailed | None:
        located: tuple[np.ndarray, ...] = ()
        try:
            if not text:
                units: tuple[np.ndarray, ...] = ()
            elif words is None:
                units = tuple(self.runner.encode_text(text))
            else:
                aligned = self.runner.encode_aligned(text)
                units = tuple(aligned.units)
                first = words.add(text, offset, aligned.spans)
                located = tuple(renumbered(table, first) for table in aligned.words)
        except ModelInputError as exc:
            return ContextFailed(cid, exc.code, str(exc), exc.param)
        except EngineLost:
            return ContextFailed(cid, ENGINE_FAILED, _LOST)
        except Exception as exc:
            log.exception("encoding text failed")
            return ContextFailed(cid, "internal_error", f"text frontend failed: {exc}")
        if units or flush_id is not None:
            self.engine.submit(AppendUnits(cid, units, flush_id, located))
        return None

    def _text_job(self, handle: ContextHandle, job: Callable[[], ContextFailed | None]) -> None:
        if self.runner.encodes_inline:
            failed = job()
            if failed is not None:
                handle.fail(failed)
            return
        future = self._text_pool.submit(job)

        def done(f: object) -> None:
            failed = future.result()
            if failed is not None:
                self._loop.call_soon_threadsafe(handle.fail, failed)

        future.add_done_callback(done)

    # -- events -------------------------------------------------------------------

    def _from_engine(self, batch: EngineBatch) -> None:
        """On the engine thread: queue the batch; wake the loop unless a wake-up is
        already on its way (a busy loop then takes several steps' batches at once)."""
        self._inbound.append(batch)
        if self._wakeup_pending:
            return
        self._wakeup_pending = True
        try:
            self._loop.call_soon_threadsafe(self._dispatch)
        except RuntimeError:
            pass  # the loop is gone: the server is stopping

    def _dispatch(self) -> None:
        self._wakeup_pending = False  # before draining: a batch queued now wakes us again
        while self._inbound:
            self._dispatch_batch(self._inbound.popleft())

    def _dispatch_batch(self, batch: EngineBatch) -> None:
        for event in batch.events:
            handle = self._handles.get(event.cid)
            if handle is None:
                continue
            if isinstance(event, ContextReleased | ContextFailed) or getattr(event, "final", False):
                self._forget(handle)
                handle.ended = True
            if isinstance(event, ContextReleased):
                continue  # the front end forgot the context when it cancelled
            if isinstance(event, WordSpans):
                if handle.words is not None:
                    handle.words.add(event.text, event.offset, event.spans)
                continue
            if isinstance(event, WordTimings):
                timed = handle.words.timed(event) if handle.words is not None else None
                if timed is not None:
                    handle.on_event(timed)
                continue
            handle.on_event(event)

    @property
    def open_contexts(self) -> int:
        return len(self._handles)


class ContextHandle:
    """One context, from the front end's side. Calls are made on the event loop,
    except :meth:`on_prepared` (made where the preparation ran)."""

    def __init__(
        self,
        owner: EngineClient,
        cid: int,
        on_event: OnEvent,
        words: WordTable | None = None,
        client: ClientId | None = None,
        max_lead_s: float | None = None,
        first_chunk: int | None = None,
        stretched: StretchedEvents | None = None,
    ) -> None:
        """``stretched``: ``on_event`` with the context's audio time-stretched (its
        speed); the engine's events go through it."""
        self.owner = owner
        self.cid = cid
        self.on_event: OnEvent = stretched or on_event
        self._consumer = on_event
        self._stretched = stretched
        self.client = client
        """Who holds it (counted against that client's share)."""
        self.max_lead_s = max_lead_s
        self.first_chunk = first_chunk
        self.state = "active"
        """``parked`` (prepared or preparing, no engine slot yet) or ``active``."""
        self.preparing: PrepareJob | None = None
        """Its preparation, while queued or running on the prepare workers."""
        self._lock = threading.Lock()
        self._outcome: Prepared | ContextFailed | None = None
        """The preparation's result, once there is one."""
        self.words = words
        """The context's words so far, when it gets word timing."""
        self.ended = False
        self._failed = False
        self._text_end = 0
        """Characters of the context's text appended so far (where the next piece starts
        unless the caller says otherwise)."""

    @property
    def aligns_words(self) -> bool:
        """The context gets :class:`TimedWords` events (it asked, and the model can)."""
        return self.words is not None

    @property
    def parked(self) -> bool:
        return self.state == "parked"

    def activate(self) -> None:
        """Take an engine slot for a parked context (it has something to speak now);
        raises Overloaded, or OverShare. Nothing to do for an active one."""
        if self.state != "parked" or self.ended:
            return
        owner = self.owner
        owner._activate(self)
        if self.client is not None:
            owner.parked.give(self.client)
        with self._lock:
            self.state = "active"
            outcome = self._outcome
        if isinstance(outcome, Prepared):
            owner.engine.submit(Ready(self.cid, outcome))

    def on_prepared(self, outcome: Prepared | ContextFailed) -> None:
        """The preparation's result, where it was made: an active context's goes to
        the engine now; a parked one's when it is activated (whichever comes second
        sends it, once)."""
        with self._lock:
            self._outcome = outcome
            active = self.state == "active"
        if active and isinstance(outcome, Prepared):
            self.owner.engine.submit(Ready(self.cid, outcome))

    def prepared(self, outcome: Prepared | ContextFailed) -> None:
        """On the event loop, after :meth:`on_prepared`: a failure ends the context."""
        self.preparing = None
        if isinstance(outcome, ContextFailed):
            self.fail(outcome)

    def append(self, text: str, flush_id: int | None = None, offset: int | None = None) -> None:
        """Text (already cut into pieces the model takes whole); ``flush_id`` asks
        for an acknowledgement once everything sent so far has been spoken.
        ``offset``: where ``text`` starts in the context's whole text as the client
        sent it (word timestamps index that text); None: right after the last piece."""
        if self._failed:
            return
        start = self._text_end if offset is None else offset
        self._text_end = start + len(text)
        owner, words = self.owner, self.words
        if owner.engine.encodes_text:  # in the order sent, where the model lives
            aligned = words is not None
            owner.engine.submit(AppendText(self.cid, owner._id, text, flush_id, start, aligned))
            return
        owner._text_job(self, lambda: owner._encode(self.cid, text, flush_id, words, start))

    def close_input(self) -> None:
        if self._failed:
            return
        engine = self.owner.engine
        if engine.encodes_text:
            engine.submit(CloseInput(self.cid))  # after the text, in order
            return

        def close() -> None:
            engine.submit(CloseInput(self.cid))

        self.owner._text_job(self, lambda: close())

    def throttle(self, paused: bool) -> None:
        self.owner.engine.submit(Throttle(self.cid, paused))

    def cancel(self) -> None:
        """Free the context's slot (at once if the engine has not taken the context
        yet, else at its next step) and drop its preparation if it has not started;
        no event follows."""
        if self._stretched is not None:
            self._stretched.close()  # audio still being stretched is dropped too
        if self.ended:
            return
        self.ended = True
        if self.preparing is not None:
            self.preparing.cancel()
            self.preparing = None
        self.owner._forget(self)
        if self.state == "parked":
            self.owner.engine.forget(self.cid)  # the engine never registered it
            return
        engine = self.owner.engine
        if not engine.retract(self.cid):
            engine.submit(Cancel(self.cid))

    def fail(self, event: ContextFailed) -> None:
        """A failure found before the engine ran the context (preparing, encoding):
        the context is cancelled now and its owner told on the next loop turn, never
        from inside the call that found it."""
        if self._failed or self.ended:
            return
        self._failed = True
        self.cancel()
        self.owner._loop.call_soon(self._consumer, event)
