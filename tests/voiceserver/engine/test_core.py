"""EngineCore on its own thread with the tiny model: flush, end, cancel, failures."""

from __future__ import annotations

import queue
import time

import numpy as np
import pytest

from models.base import ModelInputError, SynthParams
from models.tiny.model import ByteFrontend, load
from voiceserver.engine.core import EngineConfig, EngineCore
from voiceserver.engine.messages import (
    AppendText,
    AudioChunk,
    Cancel,
    CloseInput,
    ContextFailed,
    ContextReleased,
    OpenContext,
)


class PickyFrontend(ByteFrontend):
    def encode(self, text: str, params: SynthParams) -> list[list[int]]:
        if "forbidden" in text:
            raise ModelInputError(
                "text contains a forbidden word", param="text", code="invalid_field"
            )
        return super().encode(text, params)


@pytest.fixture
def engine():  # type: ignore[no-untyped-def]
    model = load({"max_contexts": 2})
    model.ar.frontend = PickyFrontend()
    core = EngineCore(model, EngineConfig(first_chunk_frames=1, max_chunk_frames=4))
    core.start()
    yield core
    core.stop()


class Collector:
    def __init__(self) -> None:
        self.events: queue.SimpleQueue = queue.SimpleQueue()

    def __call__(self, event) -> None:  # type: ignore[no-untyped-def]
        self.events.put(event)

    def until(self, predicate, timeout: float = 10.0) -> list:  # type: ignore[no-untyped-def]
        seen = []
        deadline = time.monotonic() + timeout
        while True:
            event = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            seen.append(event)
            if predicate(event):
                return seen


def open_context(engine: EngineCore, sink: Collector, voice: str = "tiny-a") -> int:
    cid = engine.new_cid()
    engine.submit(OpenContext(cid, SynthParams(voice=voice), sink))
    return cid


def test_end_produces_all_frames_then_final(engine: EngineCore) -> None:
    sink = Collector()
    cid = open_context(engine, sink)
    engine.submit(AppendText(cid, "abcdef"))
    engine.submit(CloseInput(cid))
    events = sink.until(lambda e: isinstance(e, AudioChunk) and e.final)
    samples = sum(len(e.pcm) for e in events)
    assert samples == (6 + 3) * 320
    assert sum(e.final for e in events) == 1
    assert engine.stats.active_slots == 0 and engine.stats.active_contexts == 0


def test_flush_is_acknowledged_with_the_last_chunk_of_its_audio(engine: EngineCore) -> None:
    sink = Collector()
    cid = open_context(engine, sink)
    engine.submit(AppendText(cid, "hello ", flush_id=7))
    events = sink.until(lambda e: isinstance(e, AudioChunk) and e.flush_ids)
    assert events[-1].flush_ids == (7,)
    assert sum(len(e.pcm) for e in events) == 6 * 320
    # Flushing with nothing pending is acknowledged at once, with no audio.
    engine.submit(AppendText(cid, "", flush_id=8))
    (ack,) = sink.until(lambda e: isinstance(e, AudioChunk) and e.flush_ids)
    assert ack.flush_ids == (8,) and len(ack.pcm) == 0
    engine.submit(Cancel(cid))
    sink.until(lambda e: isinstance(e, ContextReleased))


def test_starved_context_waits_for_text_without_ending(engine: EngineCore) -> None:
    sink = Collector()
    cid = open_context(engine, sink)
    engine.submit(AppendText(cid, "ab"))
    sink.until(lambda e: isinstance(e, AudioChunk) and len(e.pcm) > 0)
    time.sleep(0.2)
    assert engine.stats.active_contexts == 1  # still open, waiting for text
    engine.submit(AppendText(cid, "cd"))
    engine.submit(CloseInput(cid))
    sink.until(lambda e: isinstance(e, AudioChunk) and e.final)


def test_cancel_frees_the_slot_and_nothing_follows(engine: EngineCore) -> None:
    sink = Collector()
    cid = open_context(engine, sink)
    engine.submit(AppendText(cid, "x" * 3000))
    sink.until(lambda e: isinstance(e, AudioChunk))
    engine.submit(Cancel(cid))
    sink.until(lambda e: isinstance(e, ContextReleased))
    time.sleep(0.2)
    assert sink.events.empty()
    assert engine.stats.active_slots == 0
    assert engine.model.ar.open_slots == 0  # type: ignore[attr-defined]


def test_slots_bound_admission_and_are_reused(engine: EngineCore) -> None:
    sinks = [Collector() for _ in range(3)]
    cids = [open_context(engine, s) for s in sinks]
    for cid in cids:
        engine.submit(AppendText(cid, "y" * 40))
        engine.submit(CloseInput(cid))
    for s in sinks:  # the third waits for a slot, then finishes too
        s.until(lambda e: isinstance(e, AudioChunk) and e.final)
    assert engine.stats.active_slots == 0


def test_frontend_error_fails_only_that_context(engine: EngineCore) -> None:
    good, bad = Collector(), Collector()
    good_cid = open_context(engine, good)
    bad_cid = open_context(engine, bad)
    engine.submit(AppendText(good_cid, "fine text"))
    engine.submit(AppendText(bad_cid, "a forbidden word"))
    engine.submit(CloseInput(good_cid))
    (failure,) = bad.until(lambda e: isinstance(e, ContextFailed))
    assert failure.param == "text" and failure.code == "invalid_field"
    events = good.until(lambda e: isinstance(e, AudioChunk) and e.final)
    assert sum(len(e.pcm) for e in events) == (9 + 3) * 320
    assert all(np.isfinite(e.pcm).all() for e in events)


def test_model_step_failure_fails_its_batch_and_the_engine_goes_on() -> None:
    """A bug in a model step ends the contexts of that step with internal_error,
    frees their slots, and the engine keeps serving new contexts."""
    model = load({"max_contexts": 4})
    step = model.ar.step

    def faulty(states):  # type: ignore[no-untyped-def]
        if any(s.voice_index == 1 for s in states):  # the second voice trips the "bug"
            raise RuntimeError("kernel exploded")
        return step(states)

    model.ar.step = faulty  # type: ignore[method-assign]
    core = EngineCore(model, EngineConfig(first_chunk_frames=1, max_chunk_frames=4))
    core.start()
    try:
        bad = Collector()
        cid = open_context(core, bad, voice="tiny-b")
        core.submit(AppendText(cid, "boom"))
        (failure,) = bad.until(lambda e: isinstance(e, ContextFailed))
        assert failure.code == "internal_error" and "kernel exploded" in failure.message
        good = Collector()
        cid = open_context(core, good)
        core.submit(AppendText(cid, "still fine"))
        core.submit(CloseInput(cid))
        events = good.until(lambda e: isinstance(e, AudioChunk) and e.final)
        assert sum(len(e.pcm) for e in events) == (10 + 3) * 320
        assert core.stats.active_slots == 0 and core.stats.errors["internal_error"] == 1
    finally:
        core.stop()
