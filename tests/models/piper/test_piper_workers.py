"""Piper's acoustic calls of one step run side by side on a small pool: what every
context gets is what it gets alone, word timing included."""

from __future__ import annotations

import numpy as np
import pytest

from models.base import Admit, Feed, SynthParams
from models.piper.loader import load
from tests.models.drive import plan

TEXTS = [
    "The first sentence, read while another one is read beside it.",
    "A second sentence of another length entirely.",
    "Third.",
]
QUIET = {"noise_scale": 0, "noise_w_scale": 0}


def _step_all(model, texts: list[str]) -> list[tuple[np.ndarray, list[tuple[int, int, int]]]]:  # type: ignore[no-untyped-def]
    """Every text's context admitted in one plan and stepped together to its end: its
    frames and its words' (word, start, end) frames."""
    runner = model.runner
    slots = list(range(len(texts)))
    admits = tuple(Admit(s, runner.prepare(SynthParams(voice="joe"))) for s in slots)
    feeds = []
    for s, text in zip(slots, texts, strict=True):
        aligned = runner.encode_aligned(text)
        feeds.append(Feed(s, tuple(aligned.units), True, tuple(aligned.words)))
    frames: dict[int, list[np.ndarray]] = {s: [] for s in slots}
    words: dict[int, list[tuple[int, int, int]]] = {s: [] for s in slots}
    live = list(slots)
    result = runner.execute(plan(live, admits, tuple(feeds)))
    while True:
        at = 0
        for row, slot in enumerate(live):
            frames[slot].append(result.frames[at : at + result.counts[row]])
            at += result.counts[row]
        if result.words is not None:
            for row, index, start, end in zip(
                result.words.row,
                result.words.index,
                result.words.start,
                result.words.end,
                strict=True,
            ):
                words[live[row]].append((int(index), int(start), int(end)))
        live = [s for row, s in enumerate(live) if not result.finished[row]]
        if not live:
            break
        result = runner.execute(plan(live))
    return [(np.concatenate(frames[s]), words[s]) for s in slots]


@pytest.mark.parametrize("workers", [2, 3])
def test_a_step_on_the_pool_gives_each_context_its_own_frames(workers: int) -> None:
    alone = load({**QUIET, "acoustic_workers": 1})
    pooled = load({**QUIET, "acoustic_workers": workers})
    assert pooled.runner._pool is not None and alone.runner._pool is None  # type: ignore[attr-defined]
    together = _step_all(pooled, TEXTS)
    for text, (frames, words) in zip(TEXTS, together, strict=True):
        [(own, own_words)] = _step_all(alone, [text])
        assert frames.shape == own.shape and len(frames) > 10
        assert np.abs(frames - own).max() < 1e-4
        assert words == own_words and len(words) == len(text.split())


def test_bad_worker_count_is_refused() -> None:
    with pytest.raises(ValueError, match="model.acoustic_workers"):
        load({"acoustic_workers": -1})
