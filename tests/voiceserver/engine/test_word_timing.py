"""Word timing and per-context first chunk size through the real EngineCore thread and
EngineClient, with the tiny model (one input byte per frame, so timings are exact)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest

from models.base import ModelInputError, SynthParams
from tests.voiceserver.engine.test_core import Events, final, start
from voiceserver.engine.client import EngineClient
from voiceserver.engine.core import EngineCore
from voiceserver.engine.messages import AudioChunk
from voiceserver.engine.words import TimedWords

FRAME_S = 320 / 16000  # the tiny model's frame: 20 ms


@pytest.fixture
async def engine() -> AsyncIterator[tuple[EngineCore, EngineClient]]:
    core, client = start(slots=4)
    yield core, client
    core.stop()


def timeline(seen: list) -> tuple[list, list[tuple[int, int]]]:  # type: ignore[type-arg]
    """The words in order, and for each word the number of samples posted before it."""
    words, posted_before, samples = [], [], 0
    for event in seen:
        if isinstance(event, TimedWords):
            for word in event.words:
                words.append(word)
                posted_before.append(samples)
        elif isinstance(event, AudioChunk):
            samples += len(event.pcm)
    return words, posted_before


async def test_words_streamed_in_pieces_have_exact_times_and_offsets(engine) -> None:  # type: ignore[no-untyped-def]
    _, client = engine
    events = Events()
    handle = client.open(SynthParams(voice="tiny-a"), events, word_timestamps=True)
    assert handle.aligns_words
    pieces = ["Hi  th", "ere, ", "naïve wor", "ld"]
    text = "".join(pieces)
    # Pieces are cut mid-word here on purpose: offsets are over the whole text.
    for piece in ["Hi ", " there, ", "naïve ", "world"]:
        handle.append(piece)
    handle.close_input()
    seen = await events.until(final)
    words, posted_before = timeline(seen)
    assert [w.text for w in words] == ["Hi", "there,", "naïve", "world"]
    assert [text[w.char_start : w.char_end] for w in words] == [w.text for w in words]
    # One UTF-8 byte per frame: "Hi" is bytes 0-2, then "  " (2 frames), "there," ...
    sent = "Hi  there, naïve world".encode()
    for word in words:
        first = len(text[: word.char_start].encode())
        size = len(word.text.encode())
        assert word.start_s == pytest.approx(first * FRAME_S)
        assert word.end_s == pytest.approx((first + size) * FRAME_S)
    assert len(sent) == len(text.encode())
    audio = sum(len(e.pcm) for e in seen if isinstance(e, AudioChunk))
    for word, before in zip(words, posted_before, strict=True):
        # Posted no later than the audio holding its first sample.
        assert before <= round(word.start_s * 16000)
        assert word.end_s * 16000 <= audio


async def test_segment_offsets_place_words_in_the_clients_text(engine) -> None:  # type: ignore[no-untyped-def]
    """A front end that drops whitespace between segments passes each one's offset."""
    _, client = engine
    events = Events()
    handle = client.open(SynthParams(voice="tiny-b"), events, word_timestamps=True)
    text = "One two.   Three!"
    handle.append("One two.", offset=0)
    handle.append("Three!", offset=text.index("Three"))
    handle.close_input()
    words, _ = timeline(await events.until(final))
    assert [(w.text, w.char_start, w.char_end) for w in words] == [
        ("One", 0, 3),
        ("two.", 4, 8),
        ("Three!", 11, 17),
    ]
    # Audio time follows what was synthesized ("One two.Three!"), not the client's spacing.
    assert words[2].start_s == pytest.approx(len("One two.") * FRAME_S)
    assert all(a.end_s <= b.start_s for a, b in zip(words, words[1:], strict=False))


async def test_no_word_events_unless_asked(engine) -> None:  # type: ignore[no-untyped-def]
    _, client = engine
    events = Events()
    handle = client.open(SynthParams(voice="tiny-a"), events)
    assert not handle.aligns_words
    handle.append("hello world")
    handle.close_input()
    seen = await events.until(final)
    assert not any(isinstance(e, TimedWords) for e in seen)


async def chunk_sizes(client: EngineClient, first_chunk_frames: int | None) -> list[int]:
    events = Events()
    handle = client.open(SynthParams(voice="tiny-a"), events, first_chunk_frames=first_chunk_frames)
    handle.append("x" * 40)
    handle.close_input()
    seen = await events.until(final)
    return [len(e.pcm) // 320 for e in seen if isinstance(e, AudioChunk) and len(e.pcm)]


async def test_first_chunk_frames_overrides_the_default_for_one_context() -> None:
    core, client = start(slots=2, first_chunk_frames=1, max_chunk_frames=8)
    try:
        default = await chunk_sizes(client, None)
        assert default[0] == 1
        assert await chunk_sizes(client, 0) == default
        custom = await chunk_sizes(client, 5)
        assert custom[0] == 5 and sum(custom) == sum(default)
        assert (await chunk_sizes(client, 8))[0] == 8
    finally:
        core.stop()


@pytest.mark.parametrize("bad", [-1, 9, 2.5, True])
async def test_first_chunk_frames_out_of_range_is_refused_naming_the_field(bad: object) -> None:
    core, client = start(slots=2, max_chunk_frames=8)
    try:
        with pytest.raises(ModelInputError, match="from 1 to 8") as err:
            client.open(SynthParams(voice="tiny-a"), Events(), first_chunk_frames=bad)  # type: ignore[arg-type]
        assert err.value.param == "first_chunk_frames"
        # Nothing was reserved: both slots still open.
        for _ in range(2):
            client.open(SynthParams(voice="tiny-a"), Events())
    finally:
        core.stop()


async def test_word_times_do_not_depend_on_batch_neighbours(engine) -> None:  # type: ignore[no-untyped-def]
    _, client = engine

    async def run(text: str) -> list[tuple[str, float, float]]:
        events = Events()
        handle = client.open(SynthParams(voice="tiny-a"), events, word_timestamps=True)
        handle.append(text)
        handle.close_input()
        words, _ = timeline(await events.until(final))
        return [(w.text, w.start_s, w.end_s) for w in words]

    alone = await run("the quick brown fox")
    together = await asyncio.gather(run("the quick brown fox"), run("jumps over " * 5))
    assert together[0] == alone
    assert np.all(np.diff([s for _, s, _ in together[1]]) > 0)


def test_word_table_never_hands_out_decreasing_times_or_a_word_twice() -> None:
    from models.base import word_spans
    from voiceserver.engine.messages import WordTimings
    from voiceserver.engine.words import WordTable

    table = WordTable()
    text = "alpha beta gamma delta"
    assert table.add(text, 100, word_spans(text)) == 0

    def timed(index: list[int], start: list[float], end: list[float]) -> list[tuple]:  # type: ignore[type-arg]
        event = WordTimings(7, np.array(index), np.array(start), np.array(end))
        out = table.timed(event)
        return (
            [] if out is None else [(w.text, w.start_s, w.end_s, w.char_start) for w in out.words]
        )

    assert timed([0, 1], [0.0, 0.5], [0.4, 0.3]) == [
        ("alpha", 0.0, 0.4, 100),
        ("beta", 0.5, 0.5, 106),  # an end before its start is raised to it
    ]
    assert timed([1, 2], [0.2, 0.1], [0.6, 0.2]) == [("gamma", 0.5, 0.5, 111)]
    assert timed([9], [1.0], [2.0]) == []  # no such word (yet): nothing invented
