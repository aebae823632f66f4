"""Driving Piper's runner the way the engine does, for the tests beside this file."""

from __future__ import annotations

import numpy as np

from models.base import Admit, Feed, SynthParams
from tests.models.drive import plan

QUIET = {"noise_scale": 0, "noise_w_scale": 0}
"""Model options that make the voice deterministic."""


def step_all(model, texts: list[str]) -> list[tuple[np.ndarray, list[tuple[int, int, int]]]]:  # type: ignore[no-untyped-def]
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
