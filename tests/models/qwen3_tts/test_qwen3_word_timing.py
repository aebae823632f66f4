"""Qwen3-TTS word timing (streaming text): words are timed from the frame at which
their first token entered the talker, driven step by step like the engine does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models.base import Admit, Feed, LoadedModel, SynthParams
from models.qwen3_tts.loader import load
from tests.models.drive import plan

TEXT = "The quick brown fox, naïvely, jumps over 1990 lazy dogs."
LAG, RATE = 2, 3.0


@pytest.fixture(scope="module")
def cv(ckpt_dirs: dict[str, Path]) -> LoadedModel:
    options = {
        "max_contexts": 2,
        "kv_capacity": 512,
        "max_frames": 400,
        "word_lag_frames": LAG,
        "word_frames_per_token": RATE,
    }
    return load(options, ckpt_dirs["custom_voice"])


def params(**extra: object) -> SynthParams:
    return SynthParams(voice="ryan", language="en", extra={"temperature": 0.0, **extra})


def test_tokens_map_back_to_their_words(cv: LoadedModel) -> None:
    runner = cv.runner
    aligned = runner.encode_aligned(TEXT)
    assert [u.tolist() for u in aligned.units] == [u.tolist() for u in runner.encode_text(TEXT)]
    (table,) = aligned.words
    words = TEXT.split()
    assert table[:, 0].tolist() == list(range(len(words)))
    assert [TEXT[a:b] for a, b in aligned.spans.tolist()] == words
    # Each word's tokens decode to the word (with the space BPE carries before it).
    tokenizer = runner.tokenizer.tokenizer
    ids = aligned.units[0].tolist()
    for (word, first, end), text in zip(table.tolist(), words, strict=True):
        assert tokenizer.decode(ids[first:end]).strip() == text, word
    # Words own disjoint token ranges in order; a token between two is a lone space
    # (" 1990": the digits split off their space).
    assert table[0, 1] == 0 and table[-1, 2] == len(ids)
    assert np.all(table[1:, 1] >= table[:-1, 2])
    for end, first in zip(table[:-1, 2].tolist(), table[1:, 1].tolist(), strict=True):
        assert tokenizer.decode(ids[end:first]).strip() == ""


def test_only_streaming_text_can_align(cv: LoadedModel) -> None:
    assert cv.runner.aligns_words(params())
    assert not cv.runner.aligns_words(params(streaming_text=False))


def drive(model: LoadedModel, pieces: list[str], gap: int) -> tuple[list, dict[int, int], int]:  # type: ignore[type-arg]
    """Feed ``pieces`` one every ``gap`` steps to slot 0 until it finishes. Returns the
    timed words (index, start, end, frames made before the step that reported it),
    the frames made before each word's piece was fed, and all frames made."""
    runner = model.runner
    prepared = runner.prepare(params())
    made, fed, timed = 0, {}, []
    first_word = 0
    admit: tuple[Admit, ...] = (Admit(0, prepared),)
    for step in range(2000):
        feed: tuple[Feed, ...] = ()
        turn = step // gap
        if step % gap == 0 and turn < len(pieces):
            aligned = runner.encode_aligned(pieces[turn])
            words = []
            for table in aligned.words:
                table = table.copy()
                table[:, 0] += first_word
                words.append(table)
            for k in range(len(aligned.spans)):
                fed[first_word + k] = made
            first_word += len(aligned.spans)
            feed = (Feed(0, tuple(aligned.units), turn == len(pieces) - 1, tuple(words)),)
        result = runner.execute(plan([0], admit, feed))
        admit = ()
        if result.words is not None:
            assert result.words.row.tolist() == [0] * len(result.words.row)
            for index, start, end in zip(
                result.words.index.tolist(),
                result.words.start.tolist(),
                result.words.end.tolist(),
                strict=True,
            ):
                timed.append((index, start, end, made))
        made += int(result.counts[0])
        if result.finished[0]:
            runner.execute(plan(free=[0]))
            return timed, fed, made
    raise AssertionError("the context did not finish")


def test_words_are_timed_from_their_entry_frame(cv: LoadedModel) -> None:
    words = TEXT.split()
    pieces = [w if i == 0 else " " + w for i, w in enumerate(words)]
    timed, fed, made = drive(cv, pieces, gap=6)
    assert timed, "no word was timed"
    indices = [t[0] for t in timed]
    assert indices == list(range(len(indices)))  # each once, in order
    # A word's own tokens (" 1990" is a lone space token, then the word's four digits).
    tables = [cv.runner.encode_aligned(p).words[0] for p in pieces]
    tokens = {i: int(t[0, 2] - t[0, 1]) for i, t in enumerate(tables)}
    previous_end = 0
    for index, start, end, reported_at in timed:
        # Reported no later than the step that makes its first frame.
        assert reported_at <= start
        # Not before its text arrived (plus the lag), nor before the previous word ends.
        assert start >= fed[index] + LAG and start >= previous_end
        assert end - start == max(1, round(tokens[index] * RATE))
        previous_end = end
    # Words that arrive slowly are paced by their arrival: word k+1 was fed 6 steps
    # (about 6 frames) after word k, so it cannot start much sooner than that.
    starts = [t[1] for t in timed]
    assert all(b - a >= 1 for a, b in zip(starts, starts[1:], strict=False))


def test_text_sent_at_once_is_timed_at_the_speaking_rate(cv: LoadedModel) -> None:
    timed, _, _ = drive(cv, [TEXT], gap=1)
    assert timed
    ids = cv.runner.encode_aligned(TEXT)
    (table,) = ids.words
    for (index, start, end, _), (_, first, last) in zip(timed, table.tolist(), strict=False):
        assert end - start == max(1, round((last - first) * RATE)), index
    # Back to back: one word after another at the assumed rate.
    assert all(a[2] == b[1] for a, b in zip(timed, timed[1:], strict=False))
