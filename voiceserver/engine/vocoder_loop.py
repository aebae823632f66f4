"""VocoderLoop: per-context frame buffers, one batched decoder call per step.

The first chunk of a context is as small as the config allows; later chunks
double up to ``max_chunk_frames``. Each step decodes the ready chunks of all
contexts in one ``Vocoder.decode`` call, earliest playout deadline first.
Frames of one context are decoded in order, and a unit is only cut where the
vocoder has the right context it needs, so audio is continuous.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from models.base import DecodeItem, Vocoder


@dataclass
class _Unit:
    frames: list[np.ndarray] = field(default_factory=list)
    buffer: np.ndarray | None = None
    offset: int = 0
    """Unit frame index of ``buffer[0]`` (old frames are trimmed)."""
    produced: int = 0
    emitted: int = 0
    closed: bool = False

    def array(self) -> np.ndarray:
        if self.frames:
            parts = ([self.buffer] if self.buffer is not None else []) + self.frames
            self.buffer = np.concatenate(parts)
            self.frames = []
        assert self.buffer is not None
        return self.buffer


@dataclass
class _Stream:
    cid: int
    state: Any
    chunk: int
    units: deque[_Unit] = field(default_factory=deque)
    emitted_s: float = 0.0
    first_emit_at: float | None = None
    max_lead_s: float = 30.0
    paused: bool = False

    def deadline(self) -> float:
        if self.first_emit_at is None:
            return float("-inf")
        return self.first_emit_at + self.emitted_s

    @property
    def buffered(self) -> int:
        return sum(u.produced - u.emitted for u in self.units)


@dataclass(frozen=True)
class VocoderLoopConfig:
    first_chunk_frames: int
    max_chunk_frames: int
    max_batch: int
    max_lead_s: float


class VocoderLoop:
    def __init__(self, vocoder: Vocoder, config: VocoderLoopConfig) -> None:
        self.vocoder = vocoder
        self.config = config
        self.streams: dict[int, _Stream] = {}
        self._frame_s = vocoder.samples_per_frame / vocoder.sample_rate

    def open(self, cid: int, max_lead_s: float | None = None) -> None:
        lead = self.config.max_lead_s if max_lead_s is None else max_lead_s
        self.streams[cid] = _Stream(
            cid, self.vocoder.new_stream(), self.config.first_chunk_frames, max_lead_s=lead
        )

    def prime(self, cid: int, frames: np.ndarray) -> None:
        self.vocoder.prime(self.streams[cid].state, frames)

    def drop(self, cid: int) -> None:
        self.streams.pop(cid, None)

    def set_paused(self, cid: int, paused: bool) -> None:
        stream = self.streams.get(cid)
        if stream is not None:
            stream.paused = paused

    def push(self, cid: int, frames: np.ndarray, unit_end: bool) -> None:
        stream = self.streams[cid]
        if not stream.units or stream.units[-1].closed:
            stream.units.append(_Unit())
        unit = stream.units[-1]
        if len(frames):
            unit.frames.append(frames)
            unit.produced += len(frames)
        if unit_end:
            unit.closed = True

    def close(self, cid: int) -> None:
        """The AR side finished: whatever is buffered may be decoded to the end."""
        stream = self.streams[cid]
        if stream.units:
            stream.units[-1].closed = True

    def drained(self, cid: int) -> bool:
        stream = self.streams.get(cid)
        return stream is None or stream.buffered == 0

    def step(
        self, now: float, starved: set[int], horizon: float | None = None
    ) -> dict[int, np.ndarray]:
        """Decode one batch; ``starved`` contexts get no more frames for now,
        so their partial chunks go out instead of waiting. With ``horizon``,
        only contexts whose buffered audio runs out within that many seconds
        (and newcomers, which have none yet) are decoded."""
        candidates: list[tuple[_Stream, _Unit, int, int]] = []
        for stream in self.streams.values():
            if stream.paused:
                continue
            if horizon is not None and stream.deadline() - now >= horizon:
                continue
            if stream.first_emit_at is not None and (
                stream.emitted_s - (now - stream.first_emit_at) > stream.max_lead_s
            ):
                continue
            chunk = self._ready_chunk(stream, stream.cid in starved)
            if chunk is not None:
                candidates.append((stream, *chunk))
        if not candidates:
            return {}
        candidates.sort(key=lambda c: c[0].deadline())
        batch = candidates[: self.config.max_batch]
        items = [
            DecodeItem(
                stream=stream.state,
                frames=unit.array(),
                start=start,
                end=end,
                unit_closed=unit.closed,
                frames_offset=unit.offset,
            )
            for stream, unit, start, end in batch
        ]
        audio = self.vocoder.decode(items)
        out: dict[int, np.ndarray] = {}
        for (stream, unit, start, end), pcm in zip(batch, audio, strict=True):
            unit.emitted = end
            if stream.first_emit_at is None:
                stream.first_emit_at = now
            stream.emitted_s += (end - start) * self._frame_s
            stream.chunk = min(stream.chunk * 2, self.config.max_chunk_frames)
            if unit.closed and unit.emitted == unit.produced:
                stream.units.popleft()
            else:
                self._trim(unit)
            out[stream.cid] = pcm
        return out

    def _ready_chunk(self, stream: _Stream, starved: bool) -> tuple[_Unit, int, int] | None:
        while stream.units:
            unit = stream.units[0]
            if unit.closed and unit.emitted == unit.produced:
                stream.units.popleft()  # an empty closed unit
                continue
            decodable = unit.produced - unit.emitted
            if not unit.closed:
                decodable -= self.vocoder.right_context
            if decodable <= 0:
                return None
            if decodable < stream.chunk and not (unit.closed or starved):
                return None
            count = min(decodable, max(stream.chunk, 1))
            return unit, unit.emitted, unit.emitted + count
        return None

    def _trim(self, unit: _Unit) -> None:
        keep_from = unit.emitted - self.vocoder.left_context
        cut = keep_from - unit.offset
        if unit.buffer is not None and cut > 256:
            unit.buffer = unit.buffer[cut:]
            unit.offset += cut
