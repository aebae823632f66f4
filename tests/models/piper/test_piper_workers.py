"""Piper's acoustic calls of one step run side by side on a small pool: what every
context gets is what it gets alone, word timing included."""

from __future__ import annotations

import numpy as np
import pytest

from models.piper.loader import load
from tests.models.piper.steps import QUIET, step_all

TEXTS = [
    "The first sentence, read while another one is read beside it.",
    "A second sentence of another length entirely.",
    "Third.",
]


@pytest.mark.parametrize("workers", [2, 3])
def test_a_step_on_the_pool_gives_each_context_its_own_frames(workers: int) -> None:
    alone = load({**QUIET, "acoustic_workers": 1})
    pooled = load({**QUIET, "acoustic_workers": workers})
    assert pooled.runner._pool is not None and alone.runner._pool is None  # type: ignore[attr-defined]
    together = step_all(pooled, TEXTS)
    for text, (frames, words) in zip(TEXTS, together, strict=True):
        [(own, own_words)] = step_all(alone, [text])
        assert frames.shape == own.shape and len(frames) > 10
        assert np.abs(frames - own).max() < 1e-4
        assert words == own_words and len(words) == len(text.split())


def test_bad_worker_count_is_refused() -> None:
    with pytest.raises(ValueError, match="model.acoustic_workers"):
        load({"acoustic_workers": -1})
