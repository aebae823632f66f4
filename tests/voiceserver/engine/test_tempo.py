"""Speed a model does not make itself: the context's events through the real EngineCore
thread and EngineClient (tiny model: 20 ms frames, one per input byte, exact), its audio
time-stretched in a thread pool, word times scaled, order and cancel kept."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from models.base import SynthParams
from tests.voiceserver.engine.test_core import Events, final
from voiceserver.engine.client import EngineClient
from voiceserver.engine.core import EngineConfig, EngineCore
from voiceserver.engine.messages import AudioChunk, ContextFailed
from voiceserver.engine.prepare import FairPreparer
from voiceserver.engine.tempo import StretchedEvents
from voiceserver.engine.words import TimedWord, TimedWords

RATE = 16000  # the tiny model's
FRAME = 320


@pytest.fixture
async def engine() -> AsyncIterator[EngineClient]:
    from models.tiny.model import load

    core = EngineCore(
        load({"max_contexts": 4}),
        EngineConfig(first_chunk_frames=1, max_chunk_frames=4, admission_load=0.0),
    )
    core.start()
    pool = ThreadPoolExecutor(2)
    yield EngineClient(core, asyncio.get_running_loop(), FairPreparer(1), audio_pool=pool)
    core.stop()
    pool.shutdown()


async def speak(client: EngineClient, speed: float, text: str, flush_at: int) -> list:  # type: ignore[type-arg]
    events = Events()
    handle = client.open(SynthParams(voice="tiny-a", speed=speed), events, word_timestamps=True)
    handle.append(text[:flush_at], flush_id=1)
    handle.append(text[flush_at:])
    handle.close_input()
    return await events.until(final)


def audio(seen: list, upto: int | None = None) -> int:  # type: ignore[type-arg]
    return sum(len(e.pcm) for e in seen[:upto] if isinstance(e, AudioChunk))


@pytest.mark.parametrize("speed", [0.5, 2.0, 4.0])
async def test_audio_and_words_are_stretched_exactly(engine: EngineClient, speed: float) -> None:
    text = "Hello there, how are you today?"
    normal = await speak(engine, 1.0, text, 12)
    fast = await speak(engine, speed, text, 12)
    assert audio(fast) == round(audio(normal) / speed)
    # The chunk completing the flush carries every sample before it, to the exact
    # stretched length of the model's whole frames so far (at least the flushed text's).
    (flushed,) = [i for i, e in enumerate(fast) if isinstance(e, AudioChunk) and e.flush_ids]
    sent = audio(fast, flushed + 1)
    frames = round(sent * speed / FRAME)
    assert sent == round(frames * FRAME / speed) and frames >= 12
    assert isinstance(fast[-1], AudioChunk) and fast[-1].final
    words = [w for e in normal if isinstance(e, TimedWords) for w in e.words]
    scaled = [w for e in fast if isinstance(e, TimedWords) for w in e.words]
    assert [w.text for w in scaled] == [w.text for w in words] == text.split()
    for plain, stretched in zip(words, scaled, strict=True):
        assert stretched.start_s == pytest.approx(plain.start_s / speed)
        assert stretched.end_s == pytest.approx(plain.end_s / speed)
        assert (stretched.char_start, stretched.char_end) == (plain.char_start, plain.char_end)
    # Each word's timing comes before the audio holding its first sample.
    before = 0
    for event in fast:
        if isinstance(event, AudioChunk):
            before += len(event.pcm)
        elif isinstance(event, TimedWords):
            assert all(w.start_s * RATE >= before - 1 for w in event.words)


async def test_nothing_follows_a_cancel(engine: EngineClient) -> None:
    events = Events()
    handle = engine.open(SynthParams(voice="tiny-a", speed=3.0), events)
    handle.append("A long sentence that keeps the stretch busy for a while. " * 4)
    await events.until(lambda e: isinstance(e, AudioChunk) and len(e.pcm) > 0)
    handle.cancel()
    await asyncio.sleep(0.5)
    assert events.queue.empty()


async def test_other_events_keep_their_place_after_the_audio() -> None:
    """A failure after some audio comes after that audio; word times are scaled."""
    loop = asyncio.get_running_loop()
    seen: list = []  # type: ignore[type-arg]
    with ThreadPoolExecutor(1) as pool:
        stretch = StretchedEvents(seen.append, 2.0, RATE, loop, pool)
        tone = np.sin(np.arange(RATE) * 0.1).astype(np.float32)
        stretch(AudioChunk(7, tone[: RATE // 2]))
        stretch(TimedWords(7, (TimedWord("hi", 0.6, 0.8, 0, 2),)))
        stretch(AudioChunk(7, tone[RATE // 2 :], flush_ids=(1,)))
        stretch(ContextFailed(7, "internal_error", "boom"))
        for _ in range(200):
            if seen and isinstance(seen[-1], ContextFailed):
                break
            await asyncio.sleep(0.01)
    kinds = [type(e).__name__ for e in seen]
    assert kinds[-1] == "ContextFailed" and kinds.count("ContextFailed") == 1
    assert sum(len(e.pcm) for e in seen if isinstance(e, AudioChunk)) == RATE // 2
    (words,) = [e for e in seen if isinstance(e, TimedWords)]
    assert (words.words[0].start_s, words.words[0].end_s) == (0.3, 0.4)
    assert kinds.index("TimedWords") < len(kinds) - 2  # before the flushed chunk
