import random

import pytest

from voiceserver.text.segmenter import _CLOSERS, Segment, SegmenterConfig, TextSegmenter

PARAGRAPHS = [
    "Hello there, how are you today? I'm fine, thanks! Mr. Smith paid $4.50 for 3.14 kg of "
    "apples at 9 a.m. on Main St. near example.com, version 1.2.3. Dr. J. K. Rowling, Prof. Lee "
    "and co. arrived, e.g. at noon.",
    'Well... maybe not. "Really?!" she asked. (It was late.) The numbers were 1,000,000 and '
    "2,500; nobody knew why — not even the U.S. government — so they waited: one, two, three.",
    "Steps:\n1. Boil water.\n2. Add pasta.\n\nDone! Café, résumé and naïve are fine. 🎉 Great… "
    "Next line\r\nwith CRLF. 你好。我们走吧！真的吗？好的，再见。",
    "This is a long sentence without any punctuation that just keeps going and going for quite "
    "a while because the model forgot how to stop talking about the weather and the sea and the "
    "mountains and the rivers and the forests and the deserts and the cities and the villages "
    "and the people who live in all of those places across the wide world",
    "Pricing is $1,299.99, i.e. a lot. See Fig. 3 and No. 5 for details; approx. 40% of users "
    "agree. No. I don't think so. The U.K. and U.S.A. signed it etc. Then they left.   ",
]


def run(text: str, pieces: list[str] | None = None, **config: object) -> list[Segment]:
    seg = TextSegmenter(SegmenterConfig(**config))  # type: ignore[arg-type]
    out: list[Segment] = []
    for piece in pieces if pieces is not None else [text]:
        out += seg.push(piece, 0.0)
    return out + seg.flush()


def texts(text: str, **config: object) -> list[str]:
    """Segments of ``text`` pushed whole."""
    return [s.text for s in run(text, **config)]


def words(text: str) -> list[str]:
    """``text`` as an LLM streams it: one word (with the space before it) at a time."""
    return [w if i == 0 else " " + w for i, w in enumerate(text.split(" "))]


def streamed(text: str, **config: object) -> list[str]:
    """Segments of ``text`` pushed word by word."""
    return [s.text for s in run(text, words(text), **config)]


def random_split(text: str, rng: random.Random) -> list[str]:
    pieces, i = [], 0
    while i < len(text):
        n = rng.choice([1, 1, 2, 3, 4, 7, 15])
        pieces.append(text[i : i + n])
        i += n
    return pieces


def assert_tiles(text: str, segments: list[Segment]) -> None:
    pos, rebuilt = 0, ""
    for s in segments:
        assert s.char_start >= pos and text[pos : s.char_start].strip() == ""
        assert text[s.char_start : s.char_end] == s.text
        assert s.text == s.text.strip() and s.text
        rebuilt += text[pos : s.char_start] + s.text
        pos = s.char_end
    assert text[pos:].strip() == ""
    assert rebuilt + text[pos:] == text


def test_streamed_sentence_cuts_at_its_first_clause() -> None:
    got = streamed("Hello there, how are you? I am fine. Thanks!")
    assert got == ["Hello there,", "how are you?", "I am fine.", "Thanks!"]


def test_whole_text_cuts_only_at_sentence_ends() -> None:
    got = texts("Hello there, how are you? I am fine, thanks! Then it runs, and stops.")
    assert got == ["Hello there, how are you?", "I am fine, thanks!", "Then it runs, and stops."]


def test_a_clause_cuts_only_the_trailing_sentence_still_arriving() -> None:
    seg = TextSegmenter(SegmenterConfig(min_clause_chars=20))
    # The first sentence's end is buffered: its comma is passed over; the second
    # sentence's end has not arrived, so its clause goes ahead.
    got = seg.push("Well, the first one ends here. The second sentence is longer, still", 0.0)
    assert [s.text for s in got] == ["Well, the first one ends here."]
    # More text after the piece: the second sentence is streaming in.
    assert [s.text for s in seg.push(" coming", 0.0)] == ["The second sentence is longer,"]
    assert seg.buffered == "still coming"


def test_a_clause_that_arrived_before_its_sentence_end_is_cut() -> None:
    seg = TextSegmenter(SegmenterConfig())
    assert seg.push("Well, I think so,", 0.0) == []  # the comma's cut needs the next char
    # The next word brings the sentence's end, but the comma came first: it goes ahead.
    assert [s.text for s in seg.push(" yes.", 0.0)] == ["Well, I think so,"]
    assert texts("Well, I think so, yes.") == ["Well, I think so, yes."]


def test_a_pending_sentence_end_holds_the_clause_back() -> None:
    seg = TextSegmenter(SegmenterConfig())
    # "down!" may end the sentence (the next word decides): the comma waits with it.
    assert seg.push("Then it runs back into the forest, before the sun goes down!", 0.0) == []
    assert [s.text for s in seg.flush()] == [
        "Then it runs back into the forest, before the sun goes down!"
    ]


def test_a_long_whole_sentence_is_cut_at_a_clause_within_the_cap() -> None:
    text = "This first clause is long enough, and the second one is longer still, then it ends."
    assert texts(text, max_chars=60) == [
        "This first clause is long enough,",
        "and the second one is longer still, then it ends.",
    ]


def test_first_segment_clause_needs_first_min_chars() -> None:
    assert streamed("Hi, you, there, friend", first_min_chars=12) == ["Hi, you, there,", "friend"]
    assert streamed("Hi, you there", first_min_chars=3) == ["Hi,", "you there"]


def test_later_clause_needs_min_clause_chars() -> None:
    text = "Hello. Short one, not cut. This clause is long enough to be cut here, right?"
    assert streamed(text) == [
        "Hello.",
        "Short one, not cut.",
        "This clause is long enough to be cut here,",
        "right?",
    ]
    assert streamed(text, min_clause_chars=10)[1:3] == ["Short one,", "not cut."]


@pytest.mark.parametrize("mark", [";", ":", "—", "–"])
def test_other_clause_marks(mark: str) -> None:
    assert streamed(f"Listen to this part {mark} then the rest") == [
        f"Listen to this part {mark}",
        "then the rest",
    ]


def test_no_cut_inside_numbers() -> None:
    assert streamed("We counted 1,000,000 stars, 3.14 km away, for $4.50 each.") == [
        "We counted 1,000,000 stars,",
        "3.14 km away, for $4.50 each.",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "Mr. Smith and Mrs. Jones met Dr. Who.",
        "Ask Prof. Lee or St. John vs. Ms. Doe today.",
        "Use tools e.g. hammers or i.e. heavy ones.",
        "He left at 9 a.m. and came back.",
        "The U.S. government and the U.K. crown agreed.",
        "J. K. Rowling wrote it.",
        "The U.S.A. team won.",
        "Apples and pears etc. and more.",
        "See Fig. 3 and No. 5 now.",
        "It weighs approx. 5 kg.",
        "Visit example.com or version 1.2.3 today.",
        "Pi is 3.14159 and e is 2.718.",
        "Well... maybe later.",
        '"Really?" she asked.',
        "Yahoo! is a company.",
    ],
)
def test_not_sentence_ends(text: str) -> None:
    assert texts(text) == [text]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("We bought apples etc. Then we left.", ["We bought apples etc.", "Then we left."]),
        ("I said No. I meant it.", ["I said No.", "I meant it."]),
        ("Wait... What happened?", ["Wait...", "What happened?"]),
        ("What?! No way.", ["What?!", "No way."]),
        ('"Stop!" He ran.', ['"Stop!"', "He ran."]),
        ("(It was late.) We slept.", ["(It was late.)", "We slept."]),
        ("It cost 3. Then more.", ["It cost 3.", "Then more."]),
        ("Go to example.com. Then wait.", ["Go to example.com.", "Then wait."]),
    ],
)
def test_sentence_ends(text: str, expected: list[str]) -> None:
    assert texts(text) == expected


def test_enumerations_stay_with_their_item() -> None:
    assert texts("Steps:\n1. Boil water.\n2. Add pasta.") == [
        "Steps:",
        "1. Boil water.",
        "2. Add pasta.",
    ]


def test_boundary_known_only_after_following_char() -> None:
    seg = TextSegmenter(SegmenterConfig())
    assert seg.push("It is 3.", 0.0) == []
    assert seg.push("5 now", 0.0) == []  # 3.5 is a decimal
    assert seg.push(". mr", 0.0) == []  # the next word is there and lowercase: it goes on
    assert seg.buffered == "It is 3.5 now. mr"
    assert seg.push(" X. Then", 0.0) == []  # "X." is an initial
    assert [s.text for s in seg.push(". And", 0.0)] == ["It is 3.5 now. mr X. Then."]
    assert seg.buffered == "And"


def test_a_sentence_end_then_whitespace_is_spoken_at_once() -> None:
    """A voice agent's sentence is spoken as soon as its end arrives, not when the next
    word does; abbreviations still wait for the word that tells."""
    seg = TextSegmenter(SegmenterConfig())
    assert [s.text for s in seg.push("Hello there, how are you today? ", 0.0)] == [
        "Hello there, how are you today?"
    ]
    assert [s.text for s in seg.push("Great!\t", 0.0)] == ["Great!"]
    assert seg.push("Ask Dr. ", 0.0) == []  # never ends a sentence
    assert seg.push("Smith, it is 5 p.m. ", 0.0) == []  # may end one: the next word tells
    assert [s.text for s in seg.push("Then go.” ", 0.0)] == [
        "Ask Dr. Smith, it is 5 p.m.",  # "Then" is capitalised: p.m. ended it
        "Then go.”",
    ]


def test_newline_is_always_a_boundary() -> None:
    seg = TextSegmenter(SegmenterConfig())
    assert [s.text for s in seg.push("Hi\n", 0.0)] == ["Hi"]
    assert [s.text for s in seg.push("Sure.\n", 0.0)] == ["Sure."]  # no need to see the next word
    assert [s.text for s in seg.push("Dear Mr.\n\nSmith", 0.0)] == ["Dear Mr."]
    assert [s.text for s in seg.push(",\r\n", 0.0)] == ["Smith,"]
    assert seg.buffered == ""


def test_punctuation_only_segments_join_the_next() -> None:
    assert texts("Hello.\n...\n---\nWorld. !! Next.") == ["Hello.", "...\n---\nWorld.", "!! Next."]
    seg = TextSegmenter(SegmenterConfig())
    assert seg.push("... ", 0.0) == [] and seg.push("\n", 0.0) == []
    [flushed] = seg.flush()
    assert flushed.text == "..." and flushed.flush


def test_unicode() -> None:
    assert texts("Café au lait. Élan vital! 🎉 Party. Naïve… résumé. Oui… non.") == [
        "Café au lait.",
        "Élan vital!",
        "🎉 Party.",
        "Naïve… résumé.",
        "Oui… non.",
    ]
    cjk = "你好。我们走吧！真的吗？「好」。好的，再见"
    assert [s.text for s in run(cjk, list(cjk), min_clause_chars=3)] == [
        "你好。",
        "我们走吧！",
        "真的吗？",
        "「好」。",
        "好的，",
        "再见",
    ]


def test_max_chars_cuts_at_last_word_boundary() -> None:
    text = PARAGRAPHS[3]
    got = run(text, max_chars=60)
    assert len(got) > 4
    assert all(len(s.text) <= 60 for s in got)
    assert all(text[s.char_end] == " " for s in got[:-1])  # whole words only
    assert_tiles(text, got)
    assert texts("x" * 25, max_chars=10, first_min_chars=5, min_clause_chars=5) == [
        "x" * 10,
        "x" * 10,
        "x" * 5,
    ]


def test_max_chars_prefers_a_boundary_within_it() -> None:
    text = "Short sentence here. " + "Word " * 30
    assert texts(text, max_chars=40)[0] == "Short sentence here."


def test_max_delay_cuts_at_last_word_boundary() -> None:
    seg = TextSegmenter(SegmenterConfig(max_delay_ms=500))
    assert seg.deadline() is None
    assert seg.push("Hello wor", 1.0) == []
    assert seg.deadline() == pytest.approx(1.5)
    assert seg.poll(1.4) == []
    [cut] = seg.poll(1.5)
    assert (cut.text, cut.char_start, cut.char_end, cut.flush) == ("Hello", 0, 5, False)
    assert seg.buffered == "wor"
    assert seg.deadline() == pytest.approx(2.0)  # the partial word gets a fresh wait
    assert seg.push("ld", 1.6) == []
    assert [s.text for s in seg.poll(2.0)] == ["world"]
    assert seg.deadline() is None


def test_max_delay_counts_from_oldest_non_space_char() -> None:
    seg = TextSegmenter(SegmenterConfig(max_delay_ms=200))
    seg.push("   ", 0.0)
    assert seg.deadline() is None
    seg.push("Hi", 1.0)
    seg.push(" there ", 1.1)
    assert seg.deadline() == pytest.approx(1.2)
    assert [s.text for s in seg.poll(1.3)] == ["Hi there"]  # ends in a space: all words complete
    assert [s.text for s in seg.push("Ok. ", 2.0)] == ["Ok."]  # a sentence end: at once
    seg.push("Is it done?", 3.0)  # the next piece may be " Yes" or "!": no cut yet
    assert seg.poll(3.1) == []
    assert [s.text for s in seg.poll(3.2)] == ["Is it done?"]  # a mark ends the last word


def test_text_ending_in_a_sentence_mark_is_spoken_after_a_short_pause() -> None:
    """An LLM's "today?" then nothing: spoken after ``end_delay_ms``, not ``max_delay_ms``;
    a mark that may not end a sentence waits for the longer bound."""
    config = SegmenterConfig()
    assert (config.max_delay_ms, config.end_delay_ms) == (1000, 200)
    seg = TextSegmenter(config)
    assert seg.push("Is it done?", 0.0) == []
    assert seg.deadline() == pytest.approx(0.2)
    assert seg.poll(0.19) == []
    assert [s.text for s in seg.poll(0.2)] == ["Is it done?"]
    for text in ("It costs 3.", "Ask Dr.", "Made in the U.S.", "Wait, no"):
        seg = TextSegmenter(config)
        seg.push(text, 5.0)
        assert seg.deadline() == pytest.approx(6.0), text
    seg = TextSegmenter(SegmenterConfig(end_delay_ms=None, max_delay_ms=None))
    seg.push("Is it done?", 0.0)
    assert seg.deadline() is None


def test_max_delay_never_emits_punctuation_only() -> None:
    seg = TextSegmenter(SegmenterConfig(max_delay_ms=100))
    seg.push("... ", 0.0)
    assert seg.poll(0.1) == []
    assert seg.deadline() == pytest.approx(0.2)  # rearmed, so callers do not spin
    seg.push("-- hel", 0.15)
    assert [s.text for s in seg.poll(0.2)] == ["... -- hel"]  # nothing speakable before "hel"


def test_manual_mode_only_flushes() -> None:
    seg = TextSegmenter(SegmenterConfig(mode="manual", max_delay_ms=100))
    assert seg.push("Hello there. How are you?\nFine, ", 0.0) == []
    assert seg.deadline() is None and seg.poll(10.0) == []
    flushed = seg.flush()
    assert flushed == [Segment("Hello there. How are you?\nFine,", 0, 31, True)]
    assert seg.flush() == []


def test_flush_and_offsets_continue() -> None:
    seg = TextSegmenter(SegmenterConfig())
    assert seg.flush() == []
    seg.push("  Hi", 0.0)
    assert seg.flush() == [Segment("Hi", 2, 4, True)]
    seg.push(" \n ", 0.0)
    assert seg.flush() == []
    [s] = seg.push("Next one. A", 0.0)
    assert s == Segment("Next one.", 7, 16, False)


def test_streaming_only_adds_clause_cuts_to_the_whole_text_cuts() -> None:
    """Whatever the pieces, the whole text's sentence cuts stay where they are; streamed
    pieces may add clause cuts (and only those) in sentences still arriving."""
    configs: list[dict[str, object]] = [{}, {"first_min_chars": 5, "min_clause_chars": 15}]
    for config in configs:
        for text in [*PARAGRAPHS, "\n".join(PARAGRAPHS), " ".join(PARAGRAPHS)]:
            whole = run(text, **config)
            assert_tiles(text, whole)
            cuts = {s.char_end for s in whole}
            for s, after in zip(
                whole[:-1], whole[1:], strict=True
            ):  # no clause cut before a sentence end
                assert s.text[-1] not in ",;:—–" or "\n" in text[s.char_end : after.char_start]
            for seed in range(25):
                pieces = random_split(text, random.Random(seed))
                got = run(text, pieces, **config)
                assert_tiles(text, got)
                extra = [s for s in got if s.char_end not in cuts]
                assert cuts <= {s.char_end for s in got}, (config, seed)
                # A sentence mark whose whitespace ended a piece is cut before the next
                # word shows whether the sentence goes on ('"Really?" she asked').
                marks = ",;:—–，；：" + ".!?…"
                assert all(s.text.rstrip(_CLOSERS)[-1] in marks for s in extra), extra
            by_char = run(text, list(text), **config)
            assert cuts <= {s.char_end for s in by_char}


def test_clause_cuts_follow_the_stream() -> None:
    text = "Then it runs back into the forest to find its friends, before the sun goes down!"
    assert texts(text) == [text]
    assert streamed(text) == [
        "Then it runs back into the forest to find its friends,",
        "before the sun goes down!",
    ]


def test_push_poll_never_emit_unspeakable_segments() -> None:
    rng = random.Random(7)
    alphabet = "ab .,!?\n…-—\"'()"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60)))
        seg = TextSegmenter(SegmenterConfig(first_min_chars=2, min_clause_chars=3, max_delay_ms=10))
        out: list[Segment] = []
        for t, piece in enumerate(random_split(text, rng)):
            out += seg.push(piece, t * 0.005) + seg.poll(t * 0.005)
        assert all(any(c.isalnum() for c in s.text) for s in out)
        assert_tiles(text, out + seg.flush())


@pytest.mark.parametrize(
    "bad",
    [
        {"mode": "stream"},
        {"max_delay_ms": -1},
        {"first_min_chars": 0},
        {"min_clause_chars": 500},
    ],
)
def test_config_validation(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SegmenterConfig(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["manual", "auto"])
@pytest.mark.parametrize(
    "text",
    [
        "你好我们走吧" * 200,  # no boundary at all: hard cuts
        "Hello there my friend, this is a clause " * 60,  # clauses, no sentence end
        "One two three. " * 100,
        "word " * 500,
    ],
)
def test_no_segment_is_longer_than_max_chars(mode: str, text: str) -> None:
    """A flush of a long manual buffer (or a long auto stream) is cut into bounded pieces
    at the best boundary, so no single model call gets an unbounded segment."""
    config = SegmenterConfig(mode=mode, max_chars=100)  # type: ignore[arg-type]
    seg = TextSegmenter(config)
    out: list[Segment] = []
    for piece in random_split(text, random.Random(3)):
        out += seg.push(piece, 0.0)
    out += seg.flush()
    assert_tiles(text, out)
    assert max(len(s.text) for s in out) <= 100
    if " " in text.strip():
        # Cut at a boundary: a piece never ends inside a word.
        for s in out[:-1]:
            assert text[s.char_end : s.char_end + 1].isspace(), s
    if ". " in text or ", " in text:
        assert all(s.text[-1] in ".," for s in out[:-1]), [s.text[-5:] for s in out]


def test_flush_cuts_at_the_last_sentence_end_within_the_cap() -> None:
    seg = TextSegmenter(SegmenterConfig(mode="manual", max_chars=40))
    seg.push("First sentence here. Second one, with a clause, goes on and on. End", 0.0)
    assert [s.text for s in seg.flush()] == [
        "First sentence here.",
        "Second one, with a clause,",
        "goes on and on. End",
    ]


def test_zero_delay_cuts_each_finished_word_at_once() -> None:
    seg = TextSegmenter(SegmenterConfig(max_delay_ms=0))
    assert seg.push("Hello there fri", 1.0) == []
    assert seg.deadline() == 1.0
    assert [s.text for s in seg.poll(1.0)] == ["Hello there"]
    assert seg.buffered == "fri"
