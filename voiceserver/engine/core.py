"""EngineCore: the one thread that owns the model.

``step()`` = drain the inbox -> ``ARScheduler.schedule()`` -> ``ModelRunner.execute()``
(admissions, new input and the running slots in one plan) -> update -> the
vocoder loop -> one ``EngineBatch`` per client. Nothing here runs on an event
loop: clients talk to it only through ``submit`` and get their events through
the ``deliver`` callable they attached.

Work per step is proportional to the step: the scheduler and the vocoder loop
decide on arrays over slots and streams, frames go through one ring buffer, and
per-context Python runs only for contexts something happened to (a decoded
chunk, a flush, an end). A model slot (KV cache) is held from admission until
the model has finished the context; a stream (frame ring row, decoder state)
until its audio is drained, so a finished context frees its KV slot at once.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from models.base import Admit, Feed, LoadedModel, Prepared, StepPlan, StepResult, SynthParams
from voiceserver.engine.frames import FrameRing
from voiceserver.engine.messages import (
    AppendUnits,
    AudioChunk,
    Cancel,
    CloseInput,
    ContextFailed,
    ContextReleased,
    EngineBatch,
    EngineEvent,
    EngineStats,
    InboxMessage,
    Ready,
    Register,
    Shutdown,
    Throttle,
    WordTimings,
)
from voiceserver.engine.scheduler import ARScheduler
from voiceserver.engine.snapshot import EngineSnapshot
from voiceserver.engine.vocoder_loop import VocoderLoop, VocoderLoopConfig

if TYPE_CHECKING:
    from voiceserver.metrics import EngineObserver

log = logging.getLogger(__name__)

URGENT_MARGIN_S = 0.02
"""Extra playout margin when deciding which chunks must be decoded before an AR step."""
MAX_URGENT_PASSES = 4
"""Vocoder calls allowed before one AR step, so AR work is never starved."""
LOAD_SMOOTHING = 0.2


@dataclass(frozen=True)
class EngineConfig:
    max_ar_batch: int = 16
    """Contexts advanced by one AR step."""
    max_vocoder_batch: int = 16
    """Chunks decoded by one vocoder call."""
    first_chunk_frames: int = 2
    """Frames in a context's first vocoder chunk (smaller: earlier first audio)."""
    max_chunk_frames: int = 32
    """Largest later chunk; chunks double from the first up to this."""
    refill_s: float = 0.5
    """While contexts wait for their first frames, streams with less than this much
    audio buffered ahead of playout are still decoded (everything else waits for a
    step with no newcomer). Arrivals that never stop (Poisson traffic) otherwise kept
    every stream decoded just in time, one late step or slow delivery from running
    dry: through the WebSocket at 128 Poisson-active streams on an H200, 4 underruns
    a request."""
    max_lead_s: float = 30.0
    """A live context this far ahead of real-time playout is not stepped."""
    offline_max_lead_s: float = 600.0
    """The same bound for requests nobody plays in real time (HTTP files, batch):
    they run as fast as the device allows, up to this much audio buffered."""
    max_contexts: int = 0
    """Model slots to use; 0 takes what the model offers."""
    idle_wait_s: float = 0.05
    """How long the thread sleeps on an empty inbox when nothing is runnable."""
    admission_load: float = 0.9
    """New contexts are refused while a step takes more than this share of the
    audio it makes per stepped context (running streams would fall behind real
    time); 0 disables the check."""


@dataclass
class _Context:
    cid: int
    client: int
    lead: float | None
    first_chunk: int | None = None
    prepared: Prepared | None = None
    units: list[np.ndarray] = field(default_factory=list)
    """Input that arrived before the context had a slot."""
    words: list[np.ndarray] = field(default_factory=list)
    """Where the words of ``units`` are, for a context that gets word timing."""
    closed: bool = False
    slot: int | None = None
    stream: int | None = None
    ar_done: bool = False
    hit_limit: bool = False
    flushes: list[int] = field(default_factory=list)


@dataclass
class _PendingFeed:
    units: list[np.ndarray] = field(default_factory=list)
    close: bool = False
    words: list[np.ndarray] = field(default_factory=list)


class EngineCore:
    def __init__(
        self, model: LoadedModel, config: EngineConfig, observer: EngineObserver | None = None
    ) -> None:
        self.model = model
        self.runner = model.runner
        self.config = config
        self._observer = observer
        runner, vocoder = model.runner, model.vocoder
        slots = min(config.max_contexts or runner.max_slots, runner.max_slots)
        streams = 2 * slots
        self.scheduler = ARScheduler(slots, config.max_ar_batch, config.max_lead_s)
        needed = (
            runner.max_frames_per_step
            + vocoder.left_context
            + vocoder.right_context
            + 2 * vocoder.whole_units
            + config.max_chunk_frames
        )
        capacity = 1 << max(6, int(np.ceil(np.log2(2 * needed))))
        self.ring = FrameRing(streams, capacity, runner.frame_dim, runner.frame_dtype)
        self.vocoder = VocoderLoop(
            vocoder,
            self.ring,
            streams,
            VocoderLoopConfig(
                config.first_chunk_frames,
                config.max_chunk_frames,
                config.max_vocoder_batch,
                config.max_lead_s,
            ),
        )
        caps = model.capabilities
        self._frame_s = caps.samples_per_frame / caps.sample_rate
        self._max_frames = caps.max_frames_per_context
        self.inbox: queue.SimpleQueue[InboxMessage] = queue.SimpleQueue()
        self.stats = EngineStats()
        self._contexts: dict[int, _Context] = {}
        self._by_stream: list[_Context | None] = [None] * streams
        self._stream_of_slot = np.full(slots, -1, np.int64)
        self._free_streams = list(range(streams - 1, -1, -1))
        self._clients: dict[int, Callable[[EngineBatch], None]] = {}
        self._free_slots_next: list[int] = []
        self._admits: list[Admit] = []
        self._feeds: dict[int, _PendingFeed] = {}
        self._watch: set[int] = set()
        """Streams whose flushes or end may complete: checked after each vocoder call."""
        self._events: dict[int, list[EngineEvent]] = defaultdict(list)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._next_id = 0
        self._reserved = 0
        """Contexts registered by clients and not yet admitted (they will need a slot)."""
        self._unregistered: set[int] = set()
        """Reserved contexts whose Register the engine thread has not taken yet."""
        self._ar_seconds = 0.05
        self._ar_peak = 0.0
        """The longest recent AR step (decaying)."""
        self.load = 0.0
        """Smoothed step wall time per second of audio a stepped context gets."""

    # -- called from any thread ---------------------------------------------

    @property
    def max_slots(self) -> int:
        """Contexts the engine runs at once (model slots it uses)."""
        return self.scheduler.max_slots

    def prepare(self, cid: int, params: SynthParams) -> Prepared:
        """Context ``cid``'s inputs (``ModelRunner.prepare``), on the caller's thread."""
        return self.runner.prepare(params)

    def forget(self, cid: int) -> None:
        """A context the engine never registered is gone: nothing is kept for it here."""

    encodes_text = False
    """The engine client encodes text for an engine thread (``AppendUnits``)."""

    lost = False
    """An engine thread lives as long as the server (only an engine process can die)."""

    def on_lost(self, callback: Callable[[], None]) -> None:
        """Never called back: see :attr:`lost`."""

    def snapshot(self) -> EngineSnapshot:
        """The engine's figures now (read from any thread; placement, /health, /metrics)."""
        with self._lock:
            reserved = self._reserved
        used_blocks, total_blocks = self.runner.kv_usage()
        stats = self.stats
        return EngineSnapshot(
            max_slots=self.scheduler.max_slots,
            used_slots=self.scheduler.used_slots,
            reserved=reserved,
            load=self.load,
            active_contexts=stats.active_contexts,
            steps=stats.steps,
            vocoder_calls=stats.vocoder_calls,
            errors=dict(stats.errors),
            inbox=self.inbox.qsize(),
            waiting=self.scheduler.num_waiting,
            kv_blocks_used=used_blocks,
            kv_blocks_total=total_blocks,
            step_s=self._ar_seconds,
        )

    def attach(self, deliver: Callable[[EngineBatch], None]) -> int:
        """Register a client; its contexts' events arrive through ``deliver``
        (called on the engine thread, once per step with events for it)."""
        with self._lock:
            self._next_id += 1
            self._clients[self._next_id] = deliver
            return self._next_id

    def new_id(self) -> int:
        """A context id that no other context has (nothing reserved for it yet)."""
        with self._lock:
            self._next_id += 1
            return self._next_id

    def reserve(
        self, cid: int | None = None, check_load: bool = True, force: bool = False
    ) -> int | None:
        """Reserve a slot for context ``cid`` (a :meth:`new_id`; None: a new one) and
        return its id, or None when the engine is full (every slot used or promised)
        or too loaded to keep its streams real time (unless ``check_load`` is False:
        a benchmark that wants every context run). ``force``: take it even when full
        (admission was decided elsewhere, on figures a moment old): the context waits
        for the next free slot."""
        with self._lock:
            if not force and self._full(check_load):
                return None
            self._reserved += 1
            if cid is None:
                self._next_id += 1
                cid = self._next_id
            self._unregistered.add(cid)
            return cid

    def retract(self, cid: int) -> bool:
        """Give up a reserved context the engine thread has not taken yet (its
        reservation is free at once; its messages will be ignored). False when the
        engine has it already: cancel it with a message then."""
        with self._lock:
            if cid not in self._unregistered:
                return False
            self._unregistered.discard(cid)
            self._reserved -= 1
            return True

    @property
    def full(self) -> bool:
        """No new context would be taken now."""
        with self._lock:
            return self._full(True)

    def _full(self, check_load: bool) -> bool:
        if self.scheduler.used_slots + self._reserved >= self.scheduler.max_slots:
            return True
        busy = self.scheduler.used_slots > 0
        limit = self.config.admission_load
        return check_load and bool(limit) and busy and self.load > limit

    def submit(self, message: InboxMessage) -> None:
        self.inbox.put(message)

    def queue_depths(self) -> dict[str, int]:
        """Approximate depths, read from any thread (for metrics)."""
        return {"engine_inbox": self.inbox.qsize(), "engine_waiting": self.scheduler.num_waiting}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="engine-core", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        if self._thread is not None:
            self.inbox.put(Shutdown())
            self._thread.join(timeout)
            self._thread = None

    # -- engine thread --------------------------------------------------------

    def _run(self) -> None:
        running, busy = True, False
        while running:
            # Block on the inbox only when the last step found nothing to do.
            running = self.drain(block=not busy)
            try:
                busy = self.step()
            except Exception:  # a bug must not kill the thread that serves everyone
                log.exception("engine step failed")
                for ctx in list(self._contexts.values()):
                    self._fail(ctx, "internal_error", "engine failure")
                self._deliver()
                busy = False

    def drain(self, block: bool = False) -> bool:
        """Handle every message in the inbox; False once asked to shut down."""
        try:
            message = (
                self.inbox.get(timeout=self.config.idle_wait_s)
                if block
                else self.inbox.get_nowait()
            )
        except queue.Empty:
            return True
        while True:
            if isinstance(message, Shutdown):
                return False
            self._handle(message)
            try:
                message = self.inbox.get_nowait()
            except queue.Empty:
                return True

    def _handle(self, message: InboxMessage) -> None:
        if isinstance(message, Register):
            with self._lock:
                if message.cid not in self._unregistered:
                    return  # retracted before we got to it
                self._unregistered.discard(message.cid)
            self._contexts[message.cid] = _Context(
                message.cid, message.client, message.max_lead_s, message.first_chunk_frames
            )
            return
        ctx = self._contexts.get(message.cid)
        if ctx is None:
            return  # already finished or failed; nothing to do
        if isinstance(message, Ready):
            ctx.prepared = message.prepared
            self.scheduler.enqueue(ctx.cid, ctx.lead)
        elif isinstance(message, AppendUnits):
            if ctx.slot is not None:
                pending = self._feeds.setdefault(ctx.slot, _PendingFeed())
                pending.units.extend(message.units)
                pending.words.extend(message.words)
                self.scheduler.set_ready(ctx.slot)
            else:
                ctx.units.extend(message.units)
                ctx.words.extend(message.words)
            if message.flush_id is not None:
                ctx.flushes.append(message.flush_id)
                if ctx.stream is not None:
                    self._watch.add(ctx.stream)
        elif isinstance(message, CloseInput):
            ctx.closed = True
            if ctx.slot is not None:
                self._feeds.setdefault(ctx.slot, _PendingFeed()).close = True
                self.scheduler.set_ready(ctx.slot)
        elif isinstance(message, Cancel):
            self._release(ctx)
            self._emit(ctx, ContextReleased(ctx.cid))
        elif isinstance(message, Throttle):
            if ctx.slot is not None:
                self.scheduler.set_paused(ctx.slot, message.paused)
            if ctx.stream is not None:
                self.vocoder.paused[ctx.stream] = message.paused

    def step(self) -> bool:
        """One engine step; True when it did anything."""
        now = time.monotonic()
        decision = self.scheduler.schedule(now)
        for cid, slot in decision.admit:
            self._admit(self._contexts[cid], slot)
        # Counted before anything is delivered: a client that has its first audio
        # sees its context in the engine's snapshot.
        self.stats.active_contexts = len(self._contexts)
        self.stats.active_slots = self.scheduler.used_slots
        posted = False
        made = 0.0
        # The next step may be as long as the longest lately (a long sentence after
        # short ones), not just the average.
        horizon = 1.5 * max(self._ar_seconds, self._ar_peak) + URGENT_MARGIN_S
        if len(decision.step) or self._admits or self._free_slots_next:
            if len(decision.step):
                # Audio that is playing must not run dry while the AR step holds the
                # thread: first decode for every stream whose buffer ends within the
                # step's expected duration (and newcomers' first chunks).
                for _ in range(MAX_URGENT_PASSES):
                    if not self._vocoder_step(horizon):
                        break
                    posted = True
            started = time.monotonic()
            made = self._ar_step(decision.step)
            if len(decision.step):
                elapsed = time.monotonic() - started
                self._ar_seconds += LOAD_SMOOTHING * (elapsed - self._ar_seconds)
                self._ar_peak = max(elapsed, self._ar_peak * (1 - LOAD_SMOOTHING))
                if self._observer is not None:
                    self._observer.ar_step(elapsed)
        # First chunks (and streams already late) first, each pass delivered at once;
        # then buffers that run out before the next step ends; then, while contexts
        # wait for their first frames (their AR step comes sooner), buffers under the
        # refill mark only; with no newcomer, everything else that is ready.
        for within in (0.0, horizon):
            if self._vocoder_step(within):
                posted = True
                self._deliver()
        if self._newcomers_waiting():
            if self.config.refill_s > horizon:
                posted = self._vocoder_step(self.config.refill_s) or posted
        else:
            posted = self._vocoder_step() or posted
        self._update_blocked()
        self.stats.active_contexts = len(self._contexts)
        self.stats.active_slots = self.scheduler.used_slots
        self._deliver()
        if made > 0:
            # The share of real time running streams need: a stepped context gains
            # ``made`` seconds of audio per step; contexts beyond the batch wait turns.
            turns = max(1.0, self.scheduler.used_slots / len(decision.step))
            load = (time.monotonic() - now) / made * turns
            self.load += LOAD_SMOOTHING * (load - self.load)
        return bool(decision.admit or len(decision.step) or posted)

    def _newcomers_waiting(self) -> bool:
        """Some context wants a step and has made no frames yet (or waits for a slot)."""
        sched = self.scheduler
        if sched.num_waiting:
            return True
        fresh = (sched.cid >= 0) & sched.ready & ~sched.finished & np.isnan(sched.first_audio)
        return bool(fresh.any())

    def _admit(self, ctx: _Context, slot: int) -> None:
        with self._lock:
            self._reserved -= 1
        stream = self._free_streams.pop()
        ctx.slot, ctx.stream = slot, stream
        self._stream_of_slot[slot] = stream
        self._by_stream[stream] = ctx
        assert ctx.prepared is not None
        self.vocoder.open(stream, ctx.prepared.conditioning, ctx.lead, ctx.first_chunk)
        self._admits.append(Admit(slot, ctx.prepared))
        if ctx.units or ctx.closed:
            self._feeds[slot] = _PendingFeed(ctx.units, ctx.closed, ctx.words)
            ctx.units, ctx.words = [], []
        if ctx.flushes:
            self._watch.add(stream)

    def _ar_step(self, slots: np.ndarray) -> float:
        """Run one plan; returns the audio (seconds) a stepped context made, on average."""
        plan = StepPlan(
            free=np.asarray(self._free_slots_next, np.int64),
            admit=tuple(self._admits),
            feed=tuple(
                Feed(s, tuple(f.units), f.close, tuple(f.words)) for s, f in self._feeds.items()
            ),
            step=slots,
        )
        self._free_slots_next, self._admits, self._feeds = [], [], {}
        try:
            result = self.runner.execute(plan)
        except Exception as exc:
            log.exception("model step failed")
            touched = set(slots.tolist()) | {a.slot for a in plan.admit}
            for slot in touched:
                stream = self._stream_of_slot[slot]
                ctx = self._by_stream[stream] if stream >= 0 else None
                if ctx is not None:
                    self._fail(ctx, "internal_error", f"model step failed: {exc}")
            return 0.0
        if not len(slots):
            return 0.0
        self.stats.steps += 1
        if self._observer is not None:
            self._observer.ar_batch(len(slots))
        return self._apply(slots, result, time.monotonic())

    def _apply(self, slots: np.ndarray, result: StepResult, now: float) -> float:
        streams = self._stream_of_slot[slots]
        finished = result.finished.copy()
        hit_limit = result.hit_limit.copy()
        if self._max_frames:
            capped = (self.ring.produced[streams] + result.counts >= self._max_frames) & ~finished
            finished |= capped
            hit_limit |= capped
        if result.words is not None and len(result.words.row):
            self._post_words(streams, result)
        self.ring.append(streams, result.counts, result.frames, result.unit_end | finished)
        audio_s = result.counts * self._frame_s
        self.scheduler.update(slots, audio_s, finished, result.waiting, now)
        made = audio_s[result.counts > 0]
        for row in np.flatnonzero(finished).tolist():
            ctx = self._by_stream[streams[row]]
            if ctx is None:
                continue
            ctx.ar_done = True
            ctx.hit_limit = bool(hit_limit[row])
            self._free_slot(ctx)
            self._watch.add(int(streams[row]))
        return float(made.mean()) if len(made) else 0.0

    def _post_words(self, streams: np.ndarray, result: StepResult) -> None:
        """The step's word timing, in audio time, ahead of any audio of these frames
        (they are decoded after this step's events were queued)."""
        words = result.words
        assert words is not None
        frame_s = self._frame_s
        order = np.argsort(words.row, kind="stable")
        rows = words.row[order]
        cuts = np.flatnonzero(np.diff(rows)) + 1
        for part in np.split(order, cuts):
            ctx = self._by_stream[streams[words.row[part[0]]]]
            if ctx is None:
                continue
            self._emit(
                ctx,
                WordTimings(
                    ctx.cid,
                    words.index[part],
                    words.start[part] * frame_s,
                    words.end[part] * frame_s,
                ),
            )

    def _vocoder_step(self, horizon: float | None = None) -> bool:
        starved = np.ones(len(self._by_stream), bool)
        running = (self.scheduler.cid >= 0) & self.scheduler.ready & ~self.scheduler.finished
        starved[self._stream_of_slot[running]] = False
        try:
            decoded = self.vocoder.step(time.monotonic(), starved, horizon)
        except Exception as exc:
            log.exception("vocoder step failed")
            for ctx in list(self._contexts.values()):
                if ctx.stream is not None and not self.vocoder.drained(np.array([ctx.stream]))[0]:
                    self._fail(ctx, "internal_error", f"vocoder failed: {exc}")
            return True
        audio = dict(zip(decoded.streams.tolist(), decoded.audio, strict=True))
        if audio:
            self.stats.vocoder_calls += 1
            if self._observer is not None:
                self._observer.vocoder_batch(len(audio))
        watched = set(self._watch)
        for stream in watched:
            self._post(stream, audio.get(stream))
        by_stream, events = self._by_stream, self._events
        for stream, pcm in audio.items():
            if stream not in watched:  # no flush pending, not finished: just its audio
                ctx = by_stream[stream]
                if ctx is not None:
                    events[ctx.client].append(AudioChunk(ctx.cid, pcm))
        return bool(audio)

    def _post(self, stream: int, pcm: np.ndarray | None) -> None:
        """Events for one stream after a vocoder call: its audio, the flushes it
        completed, and its end."""
        ctx = self._by_stream[stream]
        if ctx is None:
            self._watch.discard(stream)
            return
        idle = ctx.ar_done or (ctx.slot is not None and not self.scheduler.ready[ctx.slot])
        drained = idle and self.ring.produced[stream] <= self.vocoder.emitted[stream]
        flushes: tuple[int, ...] = ()
        if drained and ctx.flushes:
            flushes, ctx.flushes = tuple(ctx.flushes), []
        final = drained and ctx.ar_done
        if not (ctx.flushes or ctx.ar_done):
            self._watch.discard(stream)
        if pcm is None and not flushes and not final:
            return
        empty = np.zeros(0, np.float32)
        self._emit(
            ctx,
            AudioChunk(
                ctx.cid, empty if pcm is None else pcm, flushes, final, ctx.hit_limit and final
            ),
        )
        if final:
            self._release(ctx)

    def _update_blocked(self) -> None:
        """A slot whose frames wait for the vocoder must not make more than fit."""
        used = np.flatnonzero(self.scheduler.cid >= 0)
        if len(used):
            streams = self._stream_of_slot[used]
            room = self.ring.room(streams, self.vocoder.keep_from(streams))
            self.scheduler.blocked[used] = room < self.runner.max_frames_per_step

    def _free_slot(self, ctx: _Context) -> None:
        if ctx.slot is None:
            return
        slot = ctx.slot
        self.scheduler.remove(ctx.cid)
        self._stream_of_slot[slot] = -1
        self._feeds.pop(slot, None)
        admitted = [a for a in self._admits if a.slot == slot]
        if admitted:  # admitted in this very step: the runner never saw it
            self._admits.remove(admitted[0])
        else:
            self._free_slots_next.append(slot)
        ctx.slot = None

    def _release(self, ctx: _Context) -> None:
        if ctx.slot is None and ctx.stream is None and ctx.prepared is not None:
            self.scheduler.remove(ctx.cid)  # prepared, still waiting for a slot
        if ctx.slot is None and ctx.stream is None:
            with self._lock:
                self._reserved -= 1  # never admitted: give its reservation back
        self._free_slot(ctx)
        if ctx.stream is not None:
            self.vocoder.drop(ctx.stream)
            self._by_stream[ctx.stream] = None
            self._watch.discard(ctx.stream)
            self._free_streams.append(ctx.stream)
            ctx.stream = None
        self._contexts.pop(ctx.cid, None)

    def _fail(self, ctx: _Context, code: str, message: str, param: str | None = None) -> None:
        self.stats.errors[code] = self.stats.errors.get(code, 0) + 1
        self._release(ctx)
        self._emit(ctx, ContextFailed(ctx.cid, code, message, param))

    def _emit(self, ctx: _Context, event: EngineEvent) -> None:
        self._events[ctx.client].append(event)

    def _deliver(self) -> None:
        if not self._events:
            return
        events, self._events = self._events, defaultdict(list)
        for client, batch in events.items():
            deliver = self._clients.get(client)
            if deliver is not None:
                deliver(EngineBatch(batch))
