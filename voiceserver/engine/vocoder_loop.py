"""VocoderLoop: one batched decoder call per step over every stream's ready chunk.

The first chunk of a stream is as small as the config allows; later chunks
double up to ``max_chunk_frames``. Each step decodes the ready chunks of all
streams in one ``Vocoder.decode`` call, earliest playout deadline first. Frames
of one stream are decoded in order, and a unit is only cut where the vocoder
has the right context it needs, so audio is continuous. Which chunks are ready
is worked out on arrays over streams (no per-stream Python per step); only
the chosen chunks become decode items.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from models.base import DecodeItem, Vocoder
from voiceserver.engine.frames import FrameRing


@dataclass(frozen=True)
class VocoderLoopConfig:
    first_chunk_frames: int
    max_chunk_frames: int
    max_batch: int
    max_lead_s: float


@dataclass(frozen=True)
class Decoded:
    streams: np.ndarray
    """int64 streams that got audio this call."""
    audio: list[np.ndarray]
    """float32 samples per stream, in the same order."""


class VocoderLoop:
    def __init__(
        self, vocoder: Vocoder, ring: FrameRing, streams: int, config: VocoderLoopConfig
    ) -> None:
        self.vocoder = vocoder
        self.ring = ring
        self.config = config
        self._frame_s = vocoder.samples_per_frame / vocoder.sample_rate
        self.active = np.zeros(streams, bool)
        self.paused = np.zeros(streams, bool)
        self.emitted = np.zeros(streams, np.int64)
        self.chunk = np.full(streams, config.first_chunk_frames, np.int64)
        self.first_emit = np.full(streams, np.nan)
        self.emitted_s = np.zeros(streams)
        self.lead = np.full(streams, config.max_lead_s)
        self.state: list[Any] = [None] * streams

    def open(
        self,
        stream: int,
        conditioning: Any,
        max_lead_s: float | None = None,
        first_chunk_frames: int | None = None,
    ) -> None:
        """Start a stream; ``first_chunk_frames`` (from 1 to ``max_chunk_frames``)
        overrides the config's first chunk size for it."""
        if first_chunk_frames and not 1 <= first_chunk_frames <= self.config.max_chunk_frames:
            raise ValueError(
                f"first_chunk_frames must be from 1 to {self.config.max_chunk_frames}, "
                f"got {first_chunk_frames}"
            )
        first = first_chunk_frames or self.config.first_chunk_frames
        self.ring.reset(stream)
        self.active[stream] = True
        self.paused[stream] = False
        self.emitted[stream] = 0
        self.chunk[stream] = first
        self.first_emit[stream] = np.nan
        self.emitted_s[stream] = 0.0
        self.lead[stream] = self.config.max_lead_s if max_lead_s is None else max_lead_s
        self._close(stream)
        self.state[stream] = self.vocoder.new_stream(conditioning)

    def drop(self, stream: int) -> None:
        self.active[stream] = False
        self._close(stream)

    def _close(self, stream: int) -> None:
        if self.state[stream] is not None:
            self.vocoder.close_stream(self.state[stream])
            self.state[stream] = None

    def keep_from(self, streams: np.ndarray) -> np.ndarray:
        """Oldest frame each stream's decoder may still read."""
        if self.vocoder.whole_units:
            return self.ring.unit_start[streams]
        return np.maximum(self.emitted[streams] - self.vocoder.left_context, 0)

    def drained(self, streams: np.ndarray) -> np.ndarray:
        return self.emitted[streams] >= self.ring.produced[streams]

    def step(self, now: float, starved: np.ndarray, horizon: float | None = None) -> Decoded:
        """Decode one batch. ``starved`` (bool over streams) marks streams that get no
        more frames for now, so their partial chunks go out instead of waiting. With
        ``horizon``, only streams whose buffered audio runs out within that many
        seconds (and newcomers, which have none yet) are decoded."""
        ring = self.ring
        closed = ring.unit_end >= 0
        whole = bool(self.vocoder.whole_units)
        # A whole-unit decoder gets nothing of a unit until it is closed.
        open_end = self.emitted if whole else ring.produced - self.vocoder.right_context
        end = np.where(closed, ring.unit_end, open_end)
        decodable = end - self.emitted
        deadline = np.where(np.isnan(self.first_emit), -np.inf, self.first_emit + self.emitted_s)
        ahead = self.emitted_s - (now - self.first_emit)  # nan before the first chunk
        ok = self.active & ~self.paused & (decodable > 0)
        ok &= (decodable >= self.chunk) | closed | starved
        ok &= ~(ahead > self.lead)
        if horizon is not None:
            ok &= deadline - now < horizon
        candidates = np.flatnonzero(ok)
        if not len(candidates):
            return Decoded(candidates, [])
        if len(candidates) > self.config.max_batch:
            order = np.argsort(deadline[candidates], kind="stable")
            candidates = candidates[order[: self.config.max_batch]]
        counts = np.minimum(decodable[candidates], np.maximum(self.chunk[candidates], 1))
        starts = self.emitted[candidates]
        available = np.where(
            closed[candidates], ring.unit_end[candidates], ring.produced[candidates]
        )
        if whole:  # every frame of the unit in view
            lo, hi = ring.unit_start[candidates], available
        else:
            lo = np.maximum(ring.unit_start[candidates], starts - self.vocoder.left_context)
            hi = np.minimum(available, starts + counts + self.vocoder.right_context)
        state, window = self.state, ring.window
        items = [
            DecodeItem(state[s], window(s, a, b), c - a, b - c - n)
            for s, a, b, c, n in zip(
                candidates.tolist(),
                lo.tolist(),
                hi.tolist(),
                starts.tolist(),
                counts.tolist(),
                strict=True,
            )
        ]
        audio = self.vocoder.decode(items)
        self.emitted[candidates] += counts
        fresh = np.isnan(self.first_emit[candidates])
        self.first_emit[candidates[fresh]] = now
        self.emitted_s[candidates] += counts * self._frame_s
        self.chunk[candidates] = np.minimum(
            self.chunk[candidates] * 2, self.config.max_chunk_frames
        )
        finished_units = candidates[ring.unit_end[candidates] == self.emitted[candidates]]
        for stream in finished_units.tolist():
            ring.advance_unit(stream)
        return Decoded(candidates, audio)
