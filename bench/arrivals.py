"""Open-loop arrivals for the load generator: sessions that start on a Poisson schedule.

A burst level starts ``concurrency`` sessions at once and each starts its next request
when the last one ends (closed loop). Real traffic arrives on its own: a Poisson
process at a rate, whatever the server is doing. At the rate ``N / session_s`` (Little's
law: arrivals a second x seconds a session) about ``N`` sessions are active at once on
average, where ``session_s`` is how long a session lasts (measured on the warm-up
requests unless given): a session is active from its first text until its listener has
heard its audio (played in real time from the first chunk), as a voice agent's is.

A level's schedule is fixed before it starts (seeded), so every client process starts
request ``i`` at ``arrival[i]`` seconds after the level's start; a request that starts
later than its arrival (every client session busy) is counted as late.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.measure import RequestResult
from bench.stats import summarize


def poisson_schedule(rate_per_s: float, count: int, seed: int = 0) -> list[float]:
    """``count`` arrival times (seconds from the level's start) of a Poisson process at
    ``rate_per_s``: exponential gaps, the first arrival at 0."""
    if rate_per_s <= 0:
        raise ValueError("the arrival rate must be positive")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate_per_s, count)
    gaps[0] = 0.0
    return np.cumsum(gaps).tolist()


def session_span(r: RequestResult) -> tuple[float, float]:
    """When a session is active: from its first text until its listener has heard the
    last of its audio (played in real time from the first chunk), or its last chunk
    came, whichever is later."""
    end = r.last_audio_at or r.started_at
    if r.first_audio_at is not None:
        end = max(end, r.first_audio_at + r.audio_s)
    return r.started_at, end


def session_seconds(results: Sequence[RequestResult]) -> float | None:
    """Mean length of finished sessions (:func:`session_span`), or None."""
    spans = [session_span(r) for r in results if r.last_audio_at is not None]
    return statistics.mean(b - a for a, b in spans) if spans else None


@dataclass(frozen=True)
class ArrivalPlan:
    """A level's open-loop schedule: what the report says about it."""

    rate_per_s: float
    session_s: float
    """The session length the rate was derived from."""
    schedule: tuple[float, ...]

    def summary(self, results: Sequence[RequestResult], level_start: float) -> dict[str, Any]:
        """The schedule against what ran: how late requests started, and how many were
        active (mean over the level's span, and the most at once)."""
        late = [
            max(0.0, r.started_at - (level_start + self.schedule[r.index])) * 1000.0
            for r in results
            if r.index < len(self.schedule)
        ]
        spans = [session_span(r) for r in results]
        edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
        active = most = 0
        for _, step in edges:
            active += step
            most = max(most, active)
        end = max((b for _, b in spans), default=level_start)
        busy = sum(b - a for a, b in spans)
        return {
            "mode": "poisson",
            "rate_per_s": self.rate_per_s,
            "session_s": self.session_s,
            "late_start_ms": summarize(late),
            "active_mean": busy / (end - level_start) if end > level_start else 0.0,
            "active_max": most,
        }
