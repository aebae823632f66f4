"""EngineCore: the one thread that owns the model.

Loop: drain the inbox -> ARScheduler.schedule() -> ARModel.step() ->
ARScheduler.update() -> VocoderLoop.step() -> post events. Nothing here runs
on the asyncio thread; sessions talk to it only through ``submit`` and the
sink callables they hand in.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from models.base import ContextState, LoadedModel, ModelInputError
from voiceserver.engine.messages import (
    AppendText,
    AudioChunk,
    Cancel,
    CloseInput,
    ContextFailed,
    ContextReleased,
    EngineEvent,
    EngineStats,
    InboxMessage,
    OpenContext,
    Shutdown,
    Throttle,
)
from voiceserver.engine.scheduler import ARScheduler
from voiceserver.engine.vocoder_loop import VocoderLoop, VocoderLoopConfig

if TYPE_CHECKING:
    from voiceserver.metrics import EngineObserver

log = logging.getLogger(__name__)

URGENT_MARGIN_S = 0.02
"""Extra playout margin when deciding which chunks must be decoded before an AR step."""
MAX_URGENT_PASSES = 4
"""Vocoder calls allowed before one AR step, so AR work is never starved."""


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
    max_lead_s: float = 30.0
    """A live context this far ahead of real-time playout is not stepped."""
    offline_max_lead_s: float = 600.0
    """The same bound for requests nobody plays in real time (HTTP files, batch):
    they run as fast as the device allows, up to this much audio buffered."""
    max_contexts: int = 0
    """Model slots to use; 0 takes what the model offers."""
    idle_wait_s: float = 0.05
    """How long the thread sleeps on an empty inbox when nothing is runnable."""


@dataclass
class _Context:
    cid: int
    sink: Callable[[EngineEvent], None]
    params: object
    state: ContextState | None = None
    pending_units: list[list[int]] = field(default_factory=list)
    input_closed: bool = False
    ar_done: bool = False
    hit_limit: bool = False
    flushes: list[int] = field(default_factory=list)
    frames: int = 0


class EngineCore:
    def __init__(
        self, model: LoadedModel, config: EngineConfig, observer: EngineObserver | None = None
    ) -> None:
        self.model = model
        self._observer = observer
        self.config = config
        slots = config.max_contexts or model.ar.max_contexts
        self.scheduler = ARScheduler(
            min(slots, model.ar.max_contexts), config.max_ar_batch, config.max_lead_s
        )
        self.vocoder = VocoderLoop(
            model.vocoder,
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
        self._thread: threading.Thread | None = None
        self._next_cid = 0
        self._ar_seconds = 0.05
        """Running average of one AR step's wall time."""
        self._cid_lock = threading.Lock()

    # -- called from any thread -------------------------------------------

    def new_cid(self) -> int:
        with self._cid_lock:
            self._next_cid += 1
            return self._next_cid

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

    # -- engine thread ----------------------------------------------------

    def _run(self) -> None:
        running, busy = True, False
        while running:
            # Block on the inbox only when the last iteration found nothing to do.
            running = self._drain(block=not busy)
            try:
                busy = self._iteration()
            except Exception:  # a bug must not kill the thread that serves everyone
                log.exception("engine iteration failed")
                for ctx in list(self._contexts.values()):
                    self._fail(ctx, "internal_error", "engine failure")
                busy = False
            self.stats.active_contexts = len(self._contexts)
            self.stats.active_slots = self.scheduler.used_slots

    def _drain(self, block: bool) -> bool:
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
        now = time.monotonic()
        if isinstance(message, OpenContext):
            self._contexts[message.cid] = _Context(message.cid, message.sink, message.params)
            self.scheduler.add(message.cid, now, message.max_lead_s)
            self.vocoder.open(message.cid, message.max_lead_s)
            return
        ctx = self._contexts.get(message.cid)
        if ctx is None:
            return  # already finished or failed; nothing to do
        if isinstance(message, AppendText):
            try:
                units = self.model.ar.frontend.encode(message.text, ctx.params)  # type: ignore[arg-type]
            except ModelInputError as exc:
                self._fail(ctx, exc.code, str(exc), exc.param)
                return
            except Exception as exc:
                log.exception("frontend failed")
                self._fail(ctx, "internal_error", f"text frontend failed: {exc}")
                return
            if ctx.state is not None:
                ctx.state.feed(units)
            else:
                ctx.pending_units.extend(units)
            if message.flush_id is not None:
                ctx.flushes.append(message.flush_id)
        elif isinstance(message, CloseInput):
            ctx.input_closed = True
            if ctx.state is not None:
                ctx.state.close_input()
        elif isinstance(message, Cancel):
            self._release(ctx)
            ctx.sink(ContextReleased(ctx.cid))
        elif isinstance(message, Throttle):
            self.scheduler.set_paused(ctx.cid, message.paused)
            self.vocoder.set_paused(ctx.cid, message.paused)
        self._refresh_work(ctx)

    def _refresh_work(self, ctx: _Context) -> None:
        if ctx.state is not None:
            self.scheduler.set_work(ctx.cid, ctx.state.has_work and not ctx.ar_done)

    def _iteration(self) -> bool:
        now = time.monotonic()
        decision = self.scheduler.schedule(now)
        for cid in decision.admit:
            self._admit(self._contexts[cid])
        posted = False
        if decision.step:
            # Audio that is playing must not run dry while the AR step holds the
            # thread: first decode for every context whose buffer ends within
            # the step's expected duration (and newcomers' first chunks).
            horizon = 1.5 * self._ar_seconds + URGENT_MARGIN_S
            for _ in range(MAX_URGENT_PASSES):
                if not self._vocoder_step(horizon):
                    break
                posted = True
            started = time.monotonic()
            self._ar_step([self._contexts[cid] for cid in decision.step if cid in self._contexts])
            self._ar_seconds += 0.2 * (time.monotonic() - started - self._ar_seconds)
        posted = self._vocoder_step() or posted
        return bool(decision.admit or decision.step or posted)

    def _admit(self, ctx: _Context) -> None:
        try:
            ctx.state = self.model.ar.open(ctx.params)  # type: ignore[arg-type]
        except ModelInputError as exc:
            self._fail(ctx, exc.code, str(exc), exc.param)
            return
        prefix = ctx.state.decoder_prefix
        if prefix is not None:
            self.vocoder.prime(ctx.cid, prefix)
        ctx.state.feed(ctx.pending_units)
        ctx.pending_units = []
        if ctx.input_closed:
            ctx.state.close_input()
        self._refresh_work(ctx)

    def _ar_step(self, batch: list[_Context]) -> None:
        states = [ctx.state for ctx in batch if ctx.state is not None]
        try:
            outputs = self.model.ar.step(states)  # type: ignore[arg-type]
        except Exception as exc:
            log.exception("AR step failed")
            for ctx in batch:
                self._fail(ctx, "internal_error", f"model step failed: {exc}")
            return
        self.stats.steps += 1
        if self._observer is not None:
            self._observer.ar_batch(len(batch))
        now = time.monotonic()
        for ctx, out in zip(batch, outputs, strict=True):
            ctx.frames += len(out.frames)
            finished = out.finished
            if self._max_frames and ctx.frames >= self._max_frames and not finished:
                finished, out.hit_limit = True, True
            self.vocoder.push(ctx.cid, out.frames, out.unit_end or finished)
            self.scheduler.update(
                ctx.cid,
                len(out.frames) * self._frame_s,
                finished,
                ctx.state.has_work if ctx.state else False,
                now,
            )
            if finished:
                ctx.ar_done = True
                ctx.hit_limit = out.hit_limit
                self.vocoder.close(ctx.cid)
                self._free_slot(ctx)

    def _vocoder_step(self, horizon: float | None = None) -> bool:
        starved = {
            c.cid
            for c in self._contexts.values()
            if c.ar_done or (c.state is not None and not c.state.has_work)
        }
        try:
            audio = self.vocoder.step(time.monotonic(), starved, horizon)
        except Exception as exc:
            log.exception("vocoder step failed")
            for ctx in list(self._contexts.values()):
                if not self.vocoder.drained(ctx.cid):
                    self._fail(ctx, "internal_error", f"vocoder failed: {exc}")
            return True
        if audio:
            self.stats.vocoder_calls += 1
            if self._observer is not None:
                self._observer.vocoder_batch(len(audio))
        posted = False
        for ctx in list(self._contexts.values()):
            pcm = audio.get(ctx.cid)
            idle = ctx.ar_done or (ctx.state is not None and not ctx.state.has_work)
            drained = idle and self.vocoder.drained(ctx.cid)
            flushes: tuple[int, ...] = ()
            if drained and ctx.flushes:
                flushes, ctx.flushes = tuple(ctx.flushes), []
            final = drained and ctx.ar_done
            if pcm is None and not flushes and not final:
                continue
            ctx.sink(
                AudioChunk(
                    ctx.cid,
                    pcm if pcm is not None else np.zeros(0, np.float32),
                    flushes,
                    final,
                    ctx.hit_limit and final,
                )
            )
            posted = True
            if final:
                self._release(ctx)
        return posted

    def _free_slot(self, ctx: _Context) -> None:
        if ctx.state is not None:
            self.model.ar.close(ctx.state)
            ctx.state = None
        self.scheduler.remove(ctx.cid)

    def _release(self, ctx: _Context) -> None:
        self._free_slot(ctx)
        self.vocoder.drop(ctx.cid)
        self._contexts.pop(ctx.cid, None)

    def _fail(self, ctx: _Context, code: str, message: str, param: str | None = None) -> None:
        self.stats.errors[code] = self.stats.errors.get(code, 0) + 1
        self._release(ctx)
        ctx.sink(ContextFailed(ctx.cid, code, message, param))
