"""Per-character timing from word timing (protocol.compat_elevenlabs_alignment): which
characters are released when, and how socket messages' times add up to the audio."""

from __future__ import annotations

from protocol.compat_elevenlabs_alignment import (
    CbrClock,
    CharTimeline,
    SampleClock,
    absolute_alignment,
    chunk_alignment,
)


def test_characters_share_their_word_and_spaces_start_where_it_ends() -> None:
    timeline = CharTimeline()
    timeline.add_text("Hi yo")
    timeline.add_word(0, 2, 100, 300)
    timeline.add_word(3, 5, 400, 600)
    assert timeline.take(1000) == [
        ("H", 100),
        ("i", 200),
        (" ", 300),
        ("y", 400),
        ("o", 500),
    ]
    assert timeline.pending == 0


def test_a_word_not_timed_yet_holds_back_what_follows() -> None:
    timeline = CharTimeline()
    timeline.add_text("one two ")
    timeline.add_word(0, 3, 0, 300)
    # "two" is not timed: the space after "one" may still be followed by it, and is
    # released (it starts where "one" ends, whatever comes next), "two" is not.
    assert [c for c, _ in timeline.take(10_000)] == ["o", "n", "e", " "]
    timeline.add_word(4, 7, 350, 650)
    assert timeline.take(500) == [("t", 350), ("w", 450)]
    # The trailing space is released once only whitespace follows the last timed word.
    assert timeline.take(10_000) == [("o", 550), (" ", 650)]


def test_an_unspoken_word_starts_where_the_previous_one_ended() -> None:
    timeline = CharTimeline()
    timeline.add_text("a - b")
    timeline.add_word(0, 1, 0, 100)
    timeline.add_word(4, 5, 200, 300)  # the dash has no timing of its own
    assert timeline.take(1000) == [("a", 0), (" ", 100), ("-", 100), (" ", 100), ("b", 200)]


def test_the_end_releases_everything_left() -> None:
    timeline = CharTimeline()
    timeline.add_text("said ok")
    timeline.add_word(0, 4, 0, 400)
    assert len(timeline.take(10_000)) == 5  # "said ", then "ok" waits for its timing
    assert timeline.take(10_000, final=True) == [("o", 400), ("k", 400)]


def test_message_spans_add_up_to_the_audio() -> None:
    timeline = CharTimeline()
    timeline.add_text("Hello world. ")
    timeline.add_word(0, 5, 50, 400)
    timeline.add_word(6, 12, 450, 900)
    clock, ends, spans = 0, [300, 320, 650, 1000], []
    for end in ends:
        alignment, clock = chunk_alignment(timeline.take(end), clock, end)
        if alignment is not None:
            assert alignment.charStartTimesMs == sorted(alignment.charStartTimesMs)
            spans.append(alignment.charStartTimesMs[-1] + alignment.charDurationsMs[-1])
    # The message ending at 320 ms holds no character start: it carries none, and the next
    # one counts from 300 ms.
    assert len(spans) == 3 and sum(spans) == 1000


def test_context_times_count_from_the_first_sample() -> None:
    chars = [("a", 510.0), ("b", 560.0)]
    relative, _ = chunk_alignment(chars, 500, 600)
    absolute, clock = chunk_alignment(chars, 500, 600, origin_ms=0)
    assert relative is not None and absolute is not None and clock == 600
    assert relative.charStartTimesMs == [10, 60] and absolute.charStartTimesMs == [510, 560]
    assert relative.charDurationsMs == absolute.charDurationsMs == [50, 40]
    assert chunk_alignment([], 500, 600) == (None, 500)


def test_http_alignment_is_seconds_from_the_start() -> None:
    alignment = absolute_alignment([("a", 0.0), ("b", 250.0)], 500.0)
    assert alignment.characters == ["a", "b"]
    assert alignment.character_start_times_seconds == [0.0, 0.25]
    assert alignment.character_end_times_seconds == [0.25, 0.5]


def test_clocks_measure_payloads() -> None:
    pcm = SampleClock(16000, 2)
    assert pcm.advance(b"\0" * 3200) == 100 and pcm.advance(b"\0" * 3200) == 200
    mulaw = SampleClock(8000, 1)
    assert mulaw.advance(b"\0" * 800) == 100
    mp3 = CbrClock(32)  # 32 kbit/s: 4 bytes a millisecond
    assert mp3.advance(b"\0" * 400) == 100
