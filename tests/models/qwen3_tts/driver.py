"""Drive our Qwen3-TTS stages like the engine does: batched steps, streamed text, chunked decode."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.base import DecodeItem, LoadedModel, SynthParams


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
    """Steps the context sat open, unfinished, without work (waiting for text)."""
    prefix: np.ndarray | None = None
    """The state's decoder_prefix: what the engine primes the vocoder stream with."""


def _split(ids: list[int], pieces: int) -> list[list[int]]:
    bounds = np.linspace(0, len(ids), pieces + 1).round().astype(int)
    return [ids[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def run_jobs(model: LoadedModel, jobs: list[Job], max_steps: int = 2000) -> list[JobResult]:
    ar = model.ar
    for job in jobs:
        ar.validate(job.params)
    feeds = [_split(ar.frontend.encode(j.text, j.params)[0], j.pieces) for j in jobs]
    states: dict[int, object] = {}
    fed = [0] * len(jobs)
    frames: list[list[np.ndarray]] = [[] for _ in jobs]
    done = [False] * len(jobs)
    limit = [False] * len(jobs)
    starved = [0] * len(jobs)
    prefixes: list[np.ndarray | None] = [None] * len(jobs)
    for step in range(max_steps):
        for i, job in enumerate(jobs):
            if step == job.open_at:
                states[i] = ar.open(job.params)
                prefixes[i] = states[i].decoder_prefix  # type: ignore[attr-defined]
            due = fed[i] < job.pieces and step >= job.open_at + fed[i] * job.gap
            if i in states and not done[i] and due:
                states[i].feed([feeds[i][fed[i]]])  # type: ignore[attr-defined]
                fed[i] += 1
                if fed[i] == job.pieces:
                    states[i].close_input()  # type: ignore[attr-defined]
        active = [i for i in states if not done[i] and states[i].has_work]  # type: ignore[attr-defined]
        for i in states:
            if not done[i] and i not in active:
                starved[i] += 1
        if active:
            outputs = ar.step([states[i] for i in active])  # type: ignore[misc]
            for i, out in zip(active, outputs, strict=True):
                frames[i].append(out.frames)
                if out.finished:
                    done[i], limit[i] = True, out.hit_limit
                    ar.close(states[i])  # type: ignore[arg-type]
        if all(done):
            break
    else:
        raise AssertionError("jobs did not finish")
    return [
        JobResult(
            np.concatenate(f) if f else np.zeros((0, 16), np.int64),
            limit[i],
            starved[i],
            prefixes[i],
        )
        for i, f in enumerate(frames)
    ]


def decode_chunked(
    model: LoadedModel,
    codes: list[np.ndarray],
    patterns: list[list[int]],
    prefixes: list[np.ndarray | None] | None = None,
) -> list[np.ndarray]:
    """Decode every utterance in chunks (sizes cycle through its pattern), all in shared
    calls; a stream with a prefix is primed with it first, as the engine does."""
    voc = model.vocoder
    streams = [voc.new_stream() for _ in codes]
    for stream, prefix in zip(streams, prefixes or [None] * len(codes), strict=True):
        if prefix is not None:
            voc.prime(stream, prefix)
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
            items.append(DecodeItem(streams[i], c, pos[i], end, end == len(c)))
            rows.append(i)
            pos[i], turn[i] = end, turn[i] + 1
        for i, wav in zip(rows, voc.decode(items), strict=True):
            out[i].append(wav)
    return [np.concatenate(w) if w else np.zeros(0, np.float32) for w in out]
