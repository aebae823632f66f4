"""What one request measured at the client, and how underruns are counted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Arrival:
    """One audio chunk: when it came off the socket (monotonic s) and how long it plays."""

    at: float
    duration_s: float


@dataclass(frozen=True, slots=True)
class Underruns:
    count: int
    stall_ms: float


def count_underruns(arrivals: Sequence[Arrival]) -> Underruns:
    """A player that starts when the first chunk arrives and plays at real time: a chunk
    that arrives after the audio before it has run out is an underrun; playback stalls
    until it arrives and goes on from there (later deadlines move by the stall)."""
    playing = [a for a in arrivals if a.duration_s > 0]
    if not playing:
        return Underruns(0, 0.0)
    clock = playing[0].at
    count = 0
    stall = 0.0
    for chunk in playing:
        if chunk.at > clock:
            count += 1
            stall += chunk.at - clock
            clock = chunk.at
        clock += chunk.duration_s
    # The first chunk starts the clock, so it never counts as late.
    return Underruns(count, stall * 1000.0)


@dataclass(frozen=True, slots=True)
class RequestResult:
    """One request (one context). Times are seconds of ``time.monotonic()``.

    ``ttfa_ms``: from sending the flush of the first clause to the first audio chunk.
    ``rtf``: (last audio chunk - first text sent) / audio seconds.
    """

    index: int
    concurrency: int
    words: int
    chars: int
    started_at: float
    flush_at: float
    first_audio_at: float | None
    last_audio_at: float | None
    audio_s: float
    chunks: int
    underruns: int
    stall_ms: float
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.first_audio_at is not None

    @property
    def ttfa_ms(self) -> float | None:
        if self.first_audio_at is None:
            return None
        return (self.first_audio_at - self.flush_at) * 1000.0

    @property
    def rtf(self) -> float | None:
        if self.last_audio_at is None or self.audio_s <= 0:
            return None
        return (self.last_audio_at - self.started_at) / self.audio_s

    def to_json(self, origin: float) -> dict[str, Any]:
        """Plain values; absolute times become seconds since ``origin``."""
        data = asdict(self)
        for key in ("started_at", "flush_at", "first_audio_at", "last_audio_at"):
            if data[key] is not None:
                data[key] = round(data[key] - origin, 6)
        data["ttfa_ms"] = self.ttfa_ms
        data["rtf"] = self.rtf
        return data
