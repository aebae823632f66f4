"""VoXtream2's text front end on its own: the phone table check, token positions, word
spans against the text as sent, streamed deltas that split words, thread safety and
espeak-ng's in-process state (what the parity tests cannot show)."""

from __future__ import annotations

import random
import re
import threading
from pathlib import Path

import numpy as np
import pytest

from models.voxtream.text import (
    IncrementalText,
    PhoneTableError,
    PhoneTokens,
    VoxtreamText,
    normalize,
)
from models.voxtream.text.espeak import espeak_ipa
from tests.models.voxtream.text_corpus import SENTENCES

TABLE = {".": 117, ",": 118, "?": 119, "!": 121, "unk": 122, "h": 0, "ə": 1, "l": 2, "ˈoʊ": 3}


@pytest.fixture(scope="module")
def frontend() -> VoxtreamText:
    return VoxtreamText(TABLE)


def test_a_table_without_unk_or_marks_is_refused() -> None:
    with pytest.raises(PhoneTableError, match=r"lacks \['unk', '!'\]"):
        VoxtreamText({".": 117, ",": 118, "?": 119, "h": 0})
    with pytest.raises(PhoneTableError, match=r"integers, not for \['h'\]"):
        VoxtreamText({**TABLE, "h": "0"})


def test_ids_unknown_phones_and_punctuation_positions(frontend: VoxtreamText) -> None:
    encoded = frontend.encode("Hello, hello. Hello?")
    assert encoded.phonemes == "h|ə|l|ˈoʊ, h|ə|l|ˈoʊ. h|ə|l|ˈoʊ?"
    tokens = encoded.tokens
    np.testing.assert_array_equal(tokens.ids, [0, 1, 2, 3] * 3)
    np.testing.assert_array_equal(tokens.punct_insert, [4, 8, 12])
    np.testing.assert_array_equal(tokens.punct_delete, [4, 9, 14])
    np.testing.assert_array_equal(tokens.punct_ids, [118, 117, 119])
    merged = tokens.merged()
    assert merged.dtype == np.int64
    np.testing.assert_array_equal(merged[tokens.punct_delete], tokens.punct_ids)
    np.testing.assert_array_equal(np.delete(merged, tokens.punct_delete), tokens.ids)
    np.testing.assert_array_equal(frontend.encode("world").tokens.ids, [122, 122, 2, 122])


def test_concatenated_pieces_are_the_merged_pieces_one_after_another(
    frontend: VoxtreamText,
) -> None:
    parts = [frontend.encode_piece(w).tokens for w in ["Hello,", "world!", "ok.", "😀", "yes?"]]
    joined = PhoneTokens.concat(parts)
    np.testing.assert_array_equal(joined.merged(), np.concatenate([p.merged() for p in parts]))
    np.testing.assert_array_equal(joined.merged()[joined.punct_delete], joined.punct_ids)
    np.testing.assert_array_equal(
        joined.punct_delete, joined.punct_insert + np.arange(len(joined.punct_insert))
    )
    assert PhoneTokens.concat([]).merged().size == 0


def test_word_spans_point_at_the_words_sent(frontend: VoxtreamText) -> None:
    text = "Mr. Smith's  3rd car\tcosts $4.50. 😀 Bye"
    encoded = frontend.encode(text)
    said = {text[s.char_start : s.char_end]: [] for s in encoded.spans}
    for span in encoded.spans:
        said[text[span.char_start : span.char_end]].append(span.text)
    assert said == {
        "Mr.": ["mister"],
        "Smith's": ["Smith's"],
        "3rd": ["three", "rd"],
        "car": ["car"],
        "costs": ["costs"],
        "$4.50.": ["four", "dollars", "fifty", "cents."],
        "Bye": ["Bye"],
    }
    ends = [s.end for s in encoded.spans]
    assert ends == sorted(ends) and ends[-1] == len(encoded.tokens.ids)


def test_spans_follow_the_text_where_espeak_splits_and_drops_words(
    frontend: VoxtreamText,
) -> None:
    """Across the whole corpus at once (Chinese read as nine words, a dropped word
    after a leading dash, times and money read as several words), the spans' characters
    run through the input words in order, and every input word with a letter or digit
    gets phones."""
    text = " ".join(SENTENCES)
    words = {(m.start(), m.end()) for m in re.finditer(r"\S+", text)}
    spans = frontend.encode(text).spans
    assert all((s.char_start, s.char_end) in words for s in spans)
    starts = [s.char_start for s in spans]
    assert starts == sorted(starts)
    spoken = {(s.char_start, s.char_end) for s in spans if s.end > s.start}
    assert {text[a:b] for a, b in words - spoken if any(c.isalnum() for c in text[a:b])} == set()


def test_a_word_split_across_deltas_is_phonemised_whole(frontend: VoxtreamText) -> None:
    stream = IncrementalText(frontend)
    assert stream.push("Hel") == []
    assert stream.pending == "Hel"
    assert stream.push("lo") == []
    (hello,) = stream.push(", wor")
    assert (hello.text, hello.char_start, hello.char_end) == ("Hello,", 0, 6)
    assert hello.encoded.phonemes == "h|ə|l|ˈoʊ,"
    assert stream.pending == "wor"
    assert stream.push("ld!") == []  # punctuation does not end a word
    (world,) = stream.push("\u00a0") + stream.flush()  # any whitespace does
    assert world.text == "world!" and world.phone_start == hello.phone_end
    assert stream.flush() == [] and stream.pending == ""
    (late,) = stream.push("  again") + stream.flush()
    assert (late.char_start, late.char_end) == (16, 21)  # "Hello, world!\xa0  again"
    assert [s.start for s in late.spans] == [world.phone_end]


def test_deltas_give_text_generator_pieces_for_any_cut(frontend: VoxtreamText) -> None:
    rng = random.Random(7)
    text = " ".join(SENTENCES)
    for _ in range(20):
        cuts = sorted(rng.sample(range(len(text)), 40))
        stream = IncrementalText(frontend)
        pieces = [
            p
            for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)
            for p in stream.push(text[a:b])
        ] + stream.flush()
        assert [p.text for p in pieces] == text.split()
        assert all(text[p.char_start : p.char_end] == p.text for p in pieces)
        assert pieces[-1].phone_end == sum(len(p.encoded.tokens.ids) for p in pieces)


def test_threads_get_what_one_thread_gets() -> None:
    """Worker threads share one front end: espeak-ng (global state) and inflect (per-call
    settings on its engine) are serialised, so results do not mix."""
    serial = VoxtreamText(TABLE, cache_size=0)
    texts = SENTENCES + [
        f"In {1900 + i}, {i} people paid ${i}.{i:02d} at {i % 24}:{i:02d}" for i in range(30)
    ]
    expected = [serial.encode(t).phonemes for t in texts]
    shared = VoxtreamText(TABLE, cache_size=0)
    results: dict[int, list[str]] = {}

    def work(worker: int) -> None:
        order = list(range(len(texts)))
        random.Random(worker).shuffle(order)
        got = {i: shared.encode(texts[i]).phonemes for i in order}
        results[worker] = [got[i] for i in range(len(texts))]

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(results[w] == expected for w in range(4))


def test_espeak_keeps_no_state_between_calls() -> None:
    """The library serves every call in one process (the command starts afresh each
    time): in any order, each text gives what the command gives."""
    words = [w for s in SENTENCES[:12] for w in s.split()] + ["", "Mr. Smith", "(en) x"]
    fresh = {w: espeak_ipa(w, command=True) for w in set(words)}
    rng = random.Random(3)
    for _ in range(2):
        rng.shuffle(words)
        assert {w: espeak_ipa(w) for w in words} == fresh


def test_nul_is_refused_with_the_field_named(frontend: VoxtreamText) -> None:
    with pytest.raises(ValueError, match="text: NUL"):
        frontend.encode("a\0b")


def test_numbers_beyond_inflect_are_read_digit_by_digit() -> None:
    # the reference fails (inflect has no name for 10**36); digits are read one by one
    assert normalize("1" + "0" * 36) == "one " + "zero " * 35 + "zero"
    assert normalize("999999999999999999999999999999999999").startswith("nine hundred")


def test_piper_and_voxtream_espeak_live_in_one_process() -> None:
    """Piper carries its own espeak-ng (linked into its extension); both can serve one
    server process without disturbing each other."""
    import piper
    from piper.phonemize_espeak import EspeakPhonemizer

    piper_espeak = EspeakPhonemizer(str(Path(piper.__file__).parent / "espeak-ng-data"))
    before = piper_espeak.phonemize("en-us", "Hello world. The year 1990!")
    ours = [espeak_ipa(text) for text in SENTENCES[:10]]
    assert piper_espeak.phonemize("en-us", "Hello world. The year 1990!") == before
    assert [espeak_ipa(text) for text in SENTENCES[:10]] == ours
    assert ours == [espeak_ipa(text, command=True) for text in SENTENCES[:10]]
