"""Piper word timing: words -> phoneme ids (espeak's word breaks) -> the duration
predictor's frames, checked against the frames and audio the stages make."""

from __future__ import annotations

import numpy as np
import pytest

from models.base import Admit, Feed, LoadedModel, SynthParams
from models.piper.frontend import _owners
from models.piper.loader import load
from tests.models.drive import plan
from tests.models.piper.steps import QUIET

TEXT = "Hello there, Dr. Smith! It is 1990, and the weather is fine. Bye."


@pytest.fixture(scope="module")
def model() -> LoadedModel:
    return load(QUIET)


def run(model: LoadedModel, text: str, speed: float = 1.0) -> tuple[list, int]:  # type: ignore[type-arg]
    """(word, start, end, frames made before the step that reported it) of every word,
    and the frames made, through slot 0."""
    runner = model.runner
    aligned = runner.encode_aligned(text)
    prepared = runner.prepare(SynthParams(voice="joe", speed=speed))
    feed = Feed(0, tuple(aligned.units), True, tuple(aligned.words))
    result = runner.execute(plan([0], (Admit(0, prepared),), (feed,)))
    timed, made = [], 0
    while True:
        if result.words is not None:
            for word, start, end in zip(
                result.words.index.tolist(),
                result.words.start.tolist(),
                result.words.end.tolist(),
                strict=True,
            ):
                timed.append((word, start, end, made))
        made += int(result.counts[0])
        if result.finished[0]:
            break
        result = runner.execute(plan([0]))
    runner.execute(plan(free=[0]))
    return timed, made


def test_units_are_the_unaligned_units(model: LoadedModel) -> None:
    aligned = model.runner.encode_aligned(TEXT)
    plain = model.runner.encode_text(TEXT)
    assert [u.tolist() for u in aligned.units] == [u.tolist() for u in plain]
    assert [TEXT[a:b] for a, b in aligned.spans.tolist()] == TEXT.split()
    for unit, table in zip(aligned.units, aligned.words, strict=True):
        # Word ranges are in order, inside the unit, after BOS and before EOS.
        assert np.all(table[:, 1] < table[:, 2])
        assert np.all(table[1:, 1] >= table[:-1, 2])
        assert table[0, 1] >= 1 and table[-1, 2] <= len(unit) - 1


def test_every_word_is_timed_in_order_inside_the_audio(model: LoadedModel) -> None:
    timed, made = run(model, TEXT)
    assert [t[0] for t in timed] == list(range(len(TEXT.split())))
    previous = 0
    for _, start, end, reported_at in timed:
        assert previous <= start < end <= made
        assert reported_at <= start  # known before any of its frames left the runner
        previous = end
    # Only the closing silence (EOS id) follows the last word.
    assert made - timed[-1][2] < 20


def test_word_lengths_follow_speed(model: LoadedModel) -> None:
    # Piper makes speeds up to 1 itself (the server time-stretches faster ones).
    text = "Extraordinary circumstances require patience."
    normal, normal_frames = run(model, text, 1.0)
    slow, slow_frames = run(model, text, 0.5)
    assert abs(slow_frames - 2 * normal_frames) <= 1
    for a, b in zip(normal, slow, strict=True):
        assert abs((b[2] - b[1]) - 2 * (a[2] - a[1])) <= 1


def test_a_sentence_cut_mid_word_times_that_word_once() -> None:
    tiny_units = load({**QUIET, "max_unit_ids": 40})
    text = "Incomprehensibilities notwithstanding, antidisestablishmentarianism persists."
    aligned = tiny_units.runner.encode_aligned(text)
    assert len(aligned.units) > 2
    timed, made = run(tiny_units, text)
    assert [t[0] for t in timed] == list(range(len(text.split())))
    assert all(a[2] <= b[1] for a, b in zip(timed, timed[1:], strict=False))
    assert timed[-1][2] <= made


def test_group_owners_exact_and_proportional() -> None:
    # Counts that add up: each word takes its own groups, in order.
    assert _owners([1, 2, 1], 4)[:4] == [[0], [1], [1], [2]]
    # They do not: groups are shared out in proportion, still in order.
    owners = [o[0] for o in _owners([1, 1, 2], 8)[:8]]
    assert owners == sorted(owners) and set(owners) == {0, 1, 2}
    assert owners.count(2) == 4
    # A word that speaks nothing owns nothing.
    assert all(1 not in o for o in _owners([1, 0, 1], 2))
    # A word run into its neighbour (fewer groups than words) shares a group: every
    # spoken word still owns one, in order.
    merged = _owners([1, 1, 1, 1], 3)
    assert [w for o in merged for w in o] == [0, 1, 2, 3] and all(merged[:3])


def test_words_espeak_runs_together_are_all_timed(model: LoadedModel) -> None:
    """espeak says "as it" and "goes in" as one word each; both words get times."""
    text = "Text goes in over a WebSocket as it is written."
    timed, _ = run(model, text)
    assert [w for w, *_ in timed] == list(range(len(text.split())))
    assert all(a[2] <= b[1] for a, b in zip(timed, timed[1:], strict=False))
