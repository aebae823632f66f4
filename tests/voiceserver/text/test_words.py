"""WordStreamer: pieces rejoin exactly and tokenize as the whole text does."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from voiceserver.text.words import WordStreamer

TEXTS = [
    "Hello there, how are you today? I hope the weather is fine.",
    "Numbers like 3.14 and 1,000 stay whole;  double  spaces too.\nNew line here.",
    "Ünïcödé wörds and émojis 🙂 are fine, aren't they?",
]


def stream(text: str, seed: int, max_chars: int = 400) -> list[str]:
    rng = random.Random(seed)
    streamer, pieces, i = WordStreamer(max_chars), [], 0
    while i < len(text):
        j = min(len(text), i + rng.randint(1, 6))
        pieces += streamer.push(text[i:j])
        i = j
    return pieces + streamer.flush()


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("text", TEXTS)
def test_pieces_rejoin_and_split_before_words(text: str, seed: int) -> None:
    pieces = stream(text, seed)
    assert "".join(pieces) == text
    for piece in pieces[:-1]:
        assert not piece[-1].isspace()  # whitespace waits for the word after it
    for piece in pieces[1:]:
        assert piece[0].isspace()  # every later piece starts a new word


def test_partial_word_is_held_back() -> None:
    streamer = WordStreamer()
    assert streamer.push("Hel") == []
    assert streamer.push("lo wor") == ["Hello"]
    assert streamer.push("ld ") == [" world"]
    assert streamer.flush() == [" "]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(
    "text",
    [
        "你好我们走吧" * 100,
        "a" * 1000 + " tail",
        "你好，我们走吧。" * 60 + " end",
        "x " + "y" * 450,
    ],
)
def test_no_run_without_whitespace_exceeds_the_cap(text: str, seed: int) -> None:
    """A long word (CJK, garbage) is released in bounded pieces, so no tokenizer call
    on the engine thread gets an unbounded word."""
    pieces = stream(text, seed, max_chars=50)
    assert "".join(pieces) == text
    for piece in pieces:
        assert max(len(word) for word in piece.split()) <= 50, piece
    if "，" in text:  # cut after punctuation where there is one
        assert all(p.endswith(("，", "。")) for p in pieces[:-2]), pieces[:4]


@pytest.fixture(scope="module")
def qwen_runner(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from models.qwen3_tts.loader import load
    from tests.models.qwen3_tts.ckpt import BuildOptions, build_checkpoint

    root: Path = tmp_path_factory.mktemp("words_ckpt")
    model = load({}, build_checkpoint(root / "cv", BuildOptions(variant="custom_voice", seed=9)))
    return model.runner


@pytest.mark.parametrize("seed", range(5))
def test_streamed_pieces_tokenize_like_the_whole_text(qwen_runner, seed: int) -> None:  # type: ignore[no-untyped-def]
    text = TEXTS[0]
    whole = [t for unit in qwen_runner.encode_text(text) for t in unit.tolist()]
    pieces = [t for p in stream(text, seed) for u in qwen_runner.encode_text(p) for t in u.tolist()]
    assert pieces == whole


def test_a_held_word_is_released_by_its_timer() -> None:
    """A word with no whitespace after it is held (it may be unfinished), but not for
    ever: a sentence mark ends it after ``end_delay_ms`` of quiet, anything else after
    ``max_delay_ms``."""
    streamer = WordStreamer(max_delay_ms=1000, end_delay_ms=200)
    assert streamer.push("Is it done", 0.0) == ["Is it"]
    assert streamer.deadline() == pytest.approx(1.0)
    assert streamer.push("?", 0.5) == []  # the word grows: "done?" may end a sentence
    assert streamer.deadline() == pytest.approx(0.7)
    assert streamer.poll(0.69) == []
    assert streamer.poll(0.7) == [" done?"]
    assert streamer.deadline() is None
    assert streamer.push(" It costs 3.", 2.0) == [" It costs"]
    assert streamer.deadline() == pytest.approx(3.0)  # "3." may become "3.5"
    assert streamer.poll(3.0) == [" 3."]
    untimed = WordStreamer()
    untimed.push("Hello", 0.0)
    assert untimed.deadline() is None and untimed.poll(100.0) == []
