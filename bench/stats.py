"""Summaries of one level: percentiles and the level's aggregate numbers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from bench.measure import RequestResult


def summarize(values: Sequence[float]) -> dict[str, float | None]:
    """p50/p95/p99/mean/min/max (linear interpolation); all None when empty."""
    keys = ("p50", "p95", "p99", "mean", "min", "max")
    if not values:
        return dict.fromkeys(keys)
    arr = np.asarray(values, dtype=float)
    p50, p95, p99 = np.percentile(arr, [50, 95, 99])
    return {
        "p50": float(p50),
        "p95": float(p95),
        "p99": float(p99),
        "mean": float(arr.mean()),
        "min": float(arr.min()),
        "max": float(arr.max()),
    }


@dataclass(frozen=True, slots=True)
class WorkerShare:
    """What one client process ran of a level: its pid, sessions and requests."""

    pid: int
    sessions: int
    requests: int


@dataclass(frozen=True, slots=True)
class LevelResult:
    """Every request of one concurrency level; ``started_at``/``ended_at`` bound the level
    (over all client processes: the first start and the last end)."""

    concurrency: int
    results: tuple[RequestResult, ...]
    started_at: float
    ended_at: float
    workers: tuple[WorkerShare, ...] = ()
    """The client processes that ran the level's sessions."""
    gpu_memory_used_mib: int | None = None
    """GPU memory in use after the level (``nvidia-smi``), None when unknown."""
    gpu_memory_total_mib: int | None = None
    arrivals: dict[str, Any] | None = None
    """Open-loop levels: the schedule's rate and how it ran (``bench.arrivals``)."""

    @property
    def ok(self) -> list[RequestResult]:
        return [r for r in self.results if r.ok]

    @property
    def wall_s(self) -> float:
        return self.ended_at - self.started_at

    @property
    def audio_s_total(self) -> float:
        return sum(r.audio_s for r in self.results)

    @property
    def x_real_time(self) -> float:
        """Audio seconds produced per wall second, over the whole level."""
        return self.audio_s_total / self.wall_s if self.wall_s > 0 else 0.0

    def to_json(self, origin: float) -> dict[str, Any]:
        ok = self.ok
        errors = [r.error or "no_audio" for r in self.results if not r.ok]
        return {
            "concurrency": self.concurrency,
            "requests": len(self.results),
            "errors": len(errors),
            "error_codes": dict(Counter(e.split(":", 1)[0] for e in errors)),
            "wall_s": self.wall_s,
            "audio_s_total": self.audio_s_total,
            "x_real_time": self.x_real_time,
            "ttfa_ms": summarize([r.ttfa_ms for r in ok if r.ttfa_ms is not None]),
            "rtf": summarize([r.rtf for r in ok if r.rtf is not None]),
            "underruns": summarize([r.underruns for r in ok]),
            "underruns_total": sum(r.underruns for r in ok),
            "requests_with_underruns": sum(1 for r in ok if r.underruns),
            "stall_ms": summarize([r.stall_ms for r in ok]),
            "audio_s": summarize([r.audio_s for r in ok]),
            "client_processes": len(self.workers),
            "client_workers": [asdict(w) for w in self.workers],
            "gpu_memory_used_mib": self.gpu_memory_used_mib,
            "gpu_memory_total_mib": self.gpu_memory_total_mib,
            "per_request": [r.to_json(origin) for r in self.results],
        } | ({"arrivals": self.arrivals} if self.arrivals is not None else {})
