"""Drive our Qwen3-TTS stages like the engine does: plans of slots, streamed text,
chunked decode."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from models.base import Admit, DecodeItem, Feed, LoadedModel, SynthParams
from tests.models.drive import plan, step_result_rows


@dataclass
class Job:
    params: SynthParams
    text: str
    open_at: int = 0
    """Engine step at which the context opens."""
    pieces: int = 1
    """Text arrives in this many pieces, one every ``gap`` steps."""
    gap: int = 3


@dataclass
class JobResult:
    codes: np.ndarray
    hit_limit: bool
    starved_steps: int
    """Steps the context sat open, unfinished, waiting for text."""
    conditioning: Any = None
    """The prepared decoder conditioning (a clone's primed stream), as the engine passes
    it to the vocoder's new_stream."""


def _split(ids: list[int], pieces: int) -> list[list[int]]:
    bounds = np.linspace(0, len(ids), pieces + 1).round().astype(int)
    return [ids[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def run_jobs(model: LoadedModel, jobs: list[Job], max_steps: int = 2000) -> list[JobResult]:
    """Every job in its own slot (slot = job index), stepped together as the engine
    would: a slot is stepped while it can progress and skipped while it waits."""
    runner = model.runner
    for job in jobs:
        runner.validate(job.params)
    feeds = []
    for job in jobs:
        units = runner.encode_text(job.text)
        feeds.append(_split(units[0].tolist() if units else [], job.pieces))
    prepared = [runner.prepare(job.params) for job in jobs]
    opened = [False] * len(jobs)
    ready = [False] * len(jobs)
    fed = [0] * len(jobs)
    frames: list[list[np.ndarray]] = [[] for _ in jobs]
    done = [False] * len(jobs)
    limit = [False] * len(jobs)
    starved = [0] * len(jobs)
    for step in range(max_steps):
        admit, feed = [], []
        for i, job in enumerate(jobs):
            if step == job.open_at:
                admit.append(Admit(i, prepared[i]))
                opened[i] = ready[i] = True
            due = fed[i] < job.pieces and step >= job.open_at + fed[i] * job.gap
            if opened[i] and not done[i] and due:
                fed[i] += 1
                close = fed[i] == job.pieces
                feed.append(Feed(i, (np.asarray(feeds[i][fed[i] - 1], np.int64),), close))
                ready[i] = True
        active = [i for i in range(len(jobs)) if opened[i] and not done[i] and ready[i]]
        for i in range(len(jobs)):
            if opened[i] and not done[i] and not ready[i]:
                starved[i] += 1
        result = model.runner.execute(plan(active, tuple(admit), tuple(feed)))
        freed = []
        for row, (i, out) in enumerate(zip(active, step_result_rows(result), strict=True)):
            frames[i].append(out)
            ready[i] = not result.waiting[row]
            if result.finished[row]:
                done[i], limit[i] = True, bool(result.hit_limit[row])
                freed.append(i)
        if freed:
            model.runner.execute(plan(free=freed))
        if all(done):
            break
    else:
        raise AssertionError("jobs did not finish")
    return [
        JobResult(
            np.concatenate(f) if f else np.zeros((0, 16), np.int64),
            limit[i],
            starved[i],
            prepared[i].conditioning,
        )
        for i, f in enumerate(frames)
    ]


def decode_chunked(
    model: LoadedModel,
    codes: list[np.ndarray],
    patterns: list[list[int]],
    conditioning: list[Any] | None = None,
) -> list[np.ndarray]:
    """Decode every utterance in chunks (sizes cycle through its pattern), all in shared
    calls, each stream opened with its conditioning as the engine does."""
    voc = model.vocoder
    streams = [voc.new_stream(c) for c in conditioning or [None] * len(codes)]
    pos = [0] * len(codes)
    turn = [0] * len(codes)
    out: list[list[np.ndarray]] = [[] for _ in codes]
    while any(p < len(c) for p, c in zip(pos, codes, strict=True)):
        items, rows = [], []
        for i, c in enumerate(codes):
            if pos[i] >= len(c):
                continue
            size = patterns[i][min(turn[i], len(patterns[i]) - 1)]
            end = min(len(c), pos[i] + size)
            items.append(DecodeItem(streams[i], c[pos[i] : end]))
            rows.append(i)
            pos[i], turn[i] = end, turn[i] + 1
        for i, wav in zip(rows, voc.decode(items), strict=True):
            out[i].append(wav)
    return [np.concatenate(w) if w else np.zeros(0, np.float32) for w in out]
