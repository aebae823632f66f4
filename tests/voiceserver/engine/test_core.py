"""EngineCore on its own thread, driven through the real EngineClient on an event loop,
with the tiny model: flush, end, cancel, admission, failures."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import numpy as np
import pytest

from models.base import ModelInputError, StepResult, SynthParams
from models.tiny.model import TinyRunner, load
from voiceserver.engine.client import ContextHandle, EngineClient, Overloaded
from voiceserver.engine.core import EngineConfig, EngineCore
from voiceserver.engine.messages import AudioChunk, ContextFailed, EngineEvent
from voiceserver.engine.prepare import FairPreparer


class PickyRunner(TinyRunner):
    def encode_text(self, text: str) -> list[np.ndarray]:
        if "forbidden" in text:
            raise ModelInputError(
                "text contains a forbidden word", param="text", code="invalid_field"
            )
        return super().encode_text(text)


class Events:
    """One context's events, awaited on the loop."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[EngineEvent] = asyncio.Queue()

    def __call__(self, event: EngineEvent) -> None:
        self.queue.put_nowait(event)

    async def until(self, predicate: Callable[[EngineEvent], bool], timeout: float = 10.0) -> list:  # type: ignore[type-arg]
        seen = []
        async with asyncio.timeout(timeout):
            while True:
                event = await self.queue.get()
                seen.append(event)
                if predicate(event):
                    return seen


def final(event: EngineEvent) -> bool:
    return isinstance(event, AudioChunk) and event.final


def start(
    slots: int = 2, runner: TinyRunner | None = None, **config: object
) -> tuple[EngineCore, EngineClient]:
    model = load({"max_contexts": slots})
    if runner is not None:
        model.runner = runner
    settings = {"first_chunk_frames": 1, "max_chunk_frames": 4, "admission_load": 0.0}
    settings.update(config)
    core = EngineCore(model, EngineConfig(**settings))  # type: ignore[arg-type]
    core.start()
    client = EngineClient(core, asyncio.get_running_loop(), FairPreparer(1))
    return core, client


@pytest.fixture
async def engine() -> AsyncIterator[tuple[EngineCore, EngineClient]]:
    from models.tiny.model import TinyOptions

    core, client = start(runner=PickyRunner(TinyOptions(max_contexts=2)))
    yield core, client
    core.stop()


def open_context(client: EngineClient, events: Events, voice: str = "tiny-a") -> ContextHandle:
    return client.open(SynthParams(voice=voice), events)


async def test_end_produces_all_frames_then_final(engine) -> None:  # type: ignore[no-untyped-def]
    core, client = engine
    events = Events()
    handle = open_context(client, events)
    handle.append("abcdef")
    handle.close_input()
    seen = await events.until(final)
    assert sum(len(e.pcm) for e in seen) == (6 + 3) * 320
    assert sum(e.final for e in seen) == 1
    await asyncio.sleep(0.1)
    assert core.stats.active_slots == 0 and core.stats.active_contexts == 0


async def test_flush_is_acknowledged_with_the_last_chunk_of_its_audio(engine) -> None:  # type: ignore[no-untyped-def]
    core, client = engine
    events = Events()
    handle = open_context(client, events)
    handle.append("hello ", flush_id=7)
    seen = await events.until(lambda e: isinstance(e, AudioChunk) and bool(e.flush_ids))
    assert seen[-1].flush_ids == (7,)
    assert sum(len(e.pcm) for e in seen) == 6 * 320
    # Flushing with nothing pending is acknowledged at once, with no audio.
    handle.append("", flush_id=8)
    (ack,) = await events.until(lambda e: isinstance(e, AudioChunk) and bool(e.flush_ids))
    assert ack.flush_ids == (8,) and len(ack.pcm) == 0
    handle.cancel()


async def test_starved_context_waits_for_text_without_ending(engine) -> None:  # type: ignore[no-untyped-def]
    core, client = engine
    events = Events()
    handle = open_context(client, events)
    handle.append("ab")
    await events.until(lambda e: isinstance(e, AudioChunk) and len(e.pcm) > 0)
    await asyncio.sleep(0.2)
    assert core.stats.active_contexts == 1  # still open, waiting for text
    handle.append("cd")
    handle.close_input()
    seen = await events.until(final)
    assert sum(len(e.pcm) for e in seen) > 0


async def test_cancel_frees_the_slot_and_nothing_follows(engine) -> None:  # type: ignore[no-untyped-def]
    core, client = engine
    events = Events()
    handle = open_context(client, events)
    handle.append("x" * 3000)
    await events.until(lambda e: isinstance(e, AudioChunk))
    handle.cancel()
    await asyncio.sleep(0.3)
    while not events.queue.empty():  # what was already on its way before the cancel
        events.queue.get_nowait()
    await asyncio.sleep(0.2)
    assert events.queue.empty()
    assert core.stats.active_slots == 0 and core.stats.active_contexts == 0
    assert core.runner.open_slots == 0  # type: ignore[attr-defined]


async def test_a_full_engine_refuses_at_once_and_takes_again_once_a_slot_is_free(engine) -> None:  # type: ignore[no-untyped-def]
    core, client = engine
    first, second = Events(), Events()
    a = open_context(client, first)
    open_context(client, second)
    with pytest.raises(Overloaded):
        open_context(client, Events())
    assert client.refused == 1 and core.full
    a.append("y" * 10)
    a.close_input()
    await first.until(final)
    third = Events()
    handle = open_context(client, third)  # a slot is free again
    handle.append("z")
    handle.close_input()
    await third.until(final)


async def test_a_context_cancelled_before_the_engine_took_it_frees_its_place_at_once() -> None:
    """A create/cancel burst arrives faster than the engine thread runs: a context it
    has not taken yet gives its reservation back on cancel, so the burst is not
    refused as if every cancelled context still held a slot."""
    model = load({"max_contexts": 2})
    config = EngineConfig(first_chunk_frames=1, max_chunk_frames=4, admission_load=0.0)
    core = EngineCore(model, config)  # not started yet: it takes nothing meanwhile
    client = EngineClient(core, asyncio.get_running_loop(), FairPreparer(1))
    gone = [Events() for _ in range(10)]
    for events in gone:
        handle = open_context(client, events)
        handle.append("spoken by no one")
        handle.cancel()
    kept = [Events(), Events()]
    handles = [open_context(client, events) for events in kept]
    with pytest.raises(Overloaded):  # the two live ones hold both slots
        open_context(client, Events())
    core.start()
    try:
        for handle in handles:
            handle.append("y" * 5)
            handle.close_input()
        for events in kept:
            await events.until(final)
        await asyncio.sleep(0.1)
        assert all(events.queue.empty() for events in gone)
        assert core.stats.active_contexts == 0 and not core.full
    finally:
        core.stop()


async def test_frontend_error_fails_only_that_context(engine) -> None:  # type: ignore[no-untyped-def]
    core, client = engine
    good, bad = Events(), Events()
    g = open_context(client, good)
    b = open_context(client, bad)
    g.append("fine text")
    b.append("a forbidden word")
    g.close_input()
    (failure,) = await bad.until(lambda e: isinstance(e, ContextFailed))
    assert failure.param == "text" and failure.code == "invalid_field"
    seen = await good.until(final)
    assert sum(len(e.pcm) for e in seen) == (9 + 3) * 320
    assert all(np.isfinite(e.pcm).all() for e in seen)


async def test_prepare_error_never_takes_a_slot() -> None:
    core, client = start(slots=1)
    try:
        bad = Events()
        client.open(SynthParams(voice="nobody"), bad)
        (failure,) = await bad.until(lambda e: isinstance(e, ContextFailed))
        assert (failure.code, failure.param) == ("unknown_voice", "voice")
        await asyncio.sleep(0.1)
        good = Events()
        handle = open_context(client, good)  # the only slot was given back
        handle.append("ok")
        handle.close_input()
        await good.until(final)
    finally:
        core.stop()


async def test_model_step_failure_fails_its_batch_and_the_engine_goes_on() -> None:
    """A bug in a model step ends the contexts of that step with internal_error,
    frees their slots, and the engine keeps serving new contexts."""
    core, client = start(slots=4)
    runner = core.runner
    execute = runner.execute

    def faulty(plan):  # type: ignore[no-untyped-def]
        if any(a.prepared.voice_index == 1 for a in plan.admit):  # the second voice trips it
            raise RuntimeError("kernel exploded")
        return execute(plan)

    runner.execute = faulty  # type: ignore[method-assign]
    try:
        bad = Events()
        open_context(client, bad, voice="tiny-b").append("boom")
        (failure,) = await bad.until(lambda e: isinstance(e, ContextFailed))
        assert failure.code == "internal_error" and "kernel exploded" in failure.message
        good = Events()
        handle = open_context(client, good)
        handle.append("still fine")
        handle.close_input()
        seen = await good.until(final)
        assert sum(len(e.pcm) for e in seen) == (10 + 3) * 320
        await asyncio.sleep(0.1)
        assert core.stats.active_slots == 0 and core.stats.errors["internal_error"] == 1
    finally:
        core.stop()


async def test_events_of_a_step_reach_the_loop_in_one_batch() -> None:
    core, client = start(slots=8, max_chunk_frames=1, first_chunk_frames=1)
    batches = []
    deliver = client._from_engine  # noqa: SLF001 - counting the engine's deliveries

    def counting(batch):  # type: ignore[no-untyped-def]
        batches.append(len(batch.events))
        deliver(batch)

    core._clients[client._id] = counting  # noqa: SLF001
    try:
        sinks = [Events() for _ in range(8)]
        handles = [open_context(client, s) for s in sinks]
        for handle in handles:
            handle.append("abcd")
            handle.close_input()
        for s in sinks:
            await s.until(final)
        assert max(batches) > 1  # several contexts' chunks in one delivery
    finally:
        core.stop()


class SlowPrepareRunner(TinyRunner):
    """Preparing the second voice takes as long as encoding a long reference clip."""

    prepares_inline = False
    PREPARE_S = 1.5

    def prepare(self, params: SynthParams):  # type: ignore[no-untyped-def]
        if params.voice == "tiny-b":
            import time

            time.sleep(self.PREPARE_S)
        return super().prepare(params)


async def test_a_slow_preparation_never_delays_a_running_stream() -> None:
    """While a context prepares (a long clone), a live stream paced at real time keeps
    getting its chunks: the preparation runs off the engine thread. Before the prepare
    stage it ran on the engine thread and the stream stopped for its whole length."""
    from models.tiny.model import TinyOptions

    runner = SlowPrepareRunner(TinyOptions(max_contexts=4))
    core, client = start(slots=4, runner=runner, max_lead_s=0.1, max_chunk_frames=2)
    loop = asyncio.get_running_loop()
    try:
        arrivals: list[float] = []

        def on_event(event: EngineEvent) -> None:
            if isinstance(event, AudioChunk) and len(event.pcm):
                arrivals.append(loop.time())

        live = client.open(SynthParams(voice="tiny-a"), on_event)
        live.append("x" * 400)  # 8 s of audio, paced at real time (0.1 s lead)
        await asyncio.sleep(0.5)
        slow = Events()
        started = loop.time()
        handle = client.open(SynthParams(voice="tiny-b"), slow)
        handle.append("hi")
        handle.close_input()
        await slow.until(final, timeout=20)
        prepared_at = loop.time()
        assert prepared_at - started >= SlowPrepareRunner.PREPARE_S
        during = [t for t in arrivals if started <= t <= prepared_at]
        gaps = np.diff([started, *during, prepared_at])
        # Chunks are 40 ms of audio; a stalled engine would leave one 1.5 s gap.
        assert len(during) >= 10 and gaps.max() < 0.5, gaps.max()
        live.cancel()
    finally:
        core.stop()


class EndlessPromptRunner(TinyRunner):
    """Contexts of voice ``tiny-b`` stay in their prompt for good: stepped, never
    waiting, never a frame (a newcomer whose first frames are always still to come,
    as under arrivals that never stop)."""

    def __init__(self, options) -> None:  # type: ignore[no-untyped-def]
        super().__init__(options)
        self.held: set[int] = set()

    def execute(self, plan):  # type: ignore[no-untyped-def]
        for slot in plan.free.tolist():
            self.held.discard(slot)
        for admit in plan.admit:
            if admit.prepared.voice_index == 1:
                self.held.add(admit.slot)
        return super().execute(plan)

    def _step(self, slots: np.ndarray):  # type: ignore[no-untyped-def]
        held = np.isin(slots, list(self.held))
        made = super()._step(slots[~held])
        n = len(slots)

        def spread(values: np.ndarray) -> np.ndarray:
            out = np.zeros(n, values.dtype)
            out[~held] = values
            return out

        return StepResult(
            spread(made.counts),
            made.frames,
            spread(made.unit_end),
            spread(made.finished),
            spread(made.hit_limit),
            spread(made.waiting),
        )


async def test_streams_are_topped_up_while_a_newcomer_waits_for_its_first_frames() -> None:
    """While some context waits for its first frames, a playing stream is still
    decoded ahead of playout up to the refill mark, not only just before its buffer
    runs dry (arrivals that never stop had every stream decoded just in time, and
    through the socket each one underran ~4 times in 8 s)."""
    from models.tiny.model import TinyOptions

    runner = EndlessPromptRunner(TinyOptions(max_contexts=2))
    core, client = start(slots=2, runner=runner, max_chunk_frames=2, refill_s=0.5)
    loop = asyncio.get_running_loop()
    try:
        got: list[tuple[float, int]] = []

        def on_event(event: EngineEvent) -> None:
            if isinstance(event, AudioChunk) and len(event.pcm):
                got.append((loop.time(), len(event.pcm)))

        waiting = client.open(SynthParams(voice="tiny-b"), Events())
        waiting.append("forever")
        await asyncio.sleep(0.1)
        live = client.open(SynthParams(voice="tiny-a"), on_event)
        live.append("x" * 200)  # 4 s of audio
        await asyncio.sleep(1.5)
        assert core._newcomers_waiting()  # noqa: SLF001 - the condition under test
        first = got[0][0]
        rate = core.model.vocoder.sample_rate
        heard = loop.time() - first
        received = sum(n for _, n in got) / rate
        # Just in time would keep ~0.06 s ahead (1.5 steps + 20 ms); topped up, at
        # least the refill mark less one 2-frame chunk.
        assert received - heard >= 0.5 - 0.04 - 0.1, (received, heard)
        assert received < 4.0  # the stream is paced, not decoded all at once
        live.cancel()
        waiting.cancel()
    finally:
        core.stop()
