"""Piper's acoustic stage: phoneme ids -> latent frames, with the frames per id ours.

Speed: VITS gives each phoneme id ``ceil(raw * length_scale)`` latent frames, so
every id gets at least one frame and rounding up adds half a frame per id on
average. With Piper's own length scale the audio is therefore not 1/speed long:
on 255 ids, 562 frames at speed 1 became 348 at 2.0 (1.61x shorter), 268 at 4.0
(2.10x; 255 is the floor) and 1,848 at 0.25 (3.29x longer). Here the frames of
speed 1 (Piper's exactly) are scaled by ``1 / speed`` with the rounding carried
from id to id, so a unit's length is ``round(frames / speed)`` and every id keeps
at least one frame when slowing down. Speeding up this way would give ids no frame
at all (measured on five sentences at default noise: 14% of phonemes at 1.5x, 25%
at 2x, 48% at 4x), so the model makes speeds up to 1 and the server time-stretches
above (``Capabilities.speed_range``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

NATIVE_SPEEDS = (0.25, 1.0)
"""The speeds Piper makes itself (see the module's docstring)."""


def scaled_durations(frames: np.ndarray, speed: float) -> np.ndarray:
    """Whole frames per id for ``speed``: ``frames / speed`` rounded so that every
    prefix sums to the rounded prefix of the exact values (int64)."""
    frames = np.asarray(frames, np.int64).reshape(-1)
    if speed == 1.0:
        return frames
    # Half up, not half to even: a step of at least one frame stays at least one.
    edges = np.floor(np.cumsum(frames, dtype=np.float64) / speed + 0.5).astype(np.int64)
    return np.diff(edges, prepend=0)


@dataclass(frozen=True)
class AcousticGraphs:
    """The acoustic half as ``timing`` then ``expansion`` (``models.piper.split``),
    or whole (``acoustic``) for a voice graph with no durations node to cut at."""

    latent_name: str
    channels: int
    """Width of a latent frame."""
    timing: ort.InferenceSession | None = None
    expansion: ort.InferenceSession | None = None
    raw_durations_name: str | None = None
    durations_name: str | None = None
    cut_names: tuple[str, ...] = ()
    acoustic: ort.InferenceSession | None = None

    @property
    def has_durations(self) -> bool:
        return self.timing is not None

    def run(
        self, ids: np.ndarray, scales: np.ndarray, speed: float
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The unit's latent [frames, channels] and its frames per id (None without a
        durations node: then speed goes into the length scale, as Piper does)."""
        feeds = {
            "input": ids[None].astype(np.int64, copy=False),
            "input_lengths": np.asarray([len(ids)], dtype=np.int64),
            "scales": scales,
        }
        if self.timing is None or self.expansion is None:
            assert self.acoustic is not None
            length = scales.copy()
            length[1] /= speed
            (latent,) = self.acoustic.run([self.latent_name], {**feeds, "scales": length})
            return _frames(latent), None
        assert self.raw_durations_name is not None and self.durations_name is not None
        raw, *cut = self.timing.run([self.raw_durations_name, *self.cut_names], feeds)
        durations = scaled_durations(np.ceil(raw), speed)
        wanted = {i.name for i in self.expansion.get_inputs()}
        given = dict(zip(self.cut_names, cut, strict=True))
        given[self.durations_name] = durations.astype(raw.dtype).reshape(raw.shape)
        given.update((name, value) for name, value in feeds.items() if name in wanted)
        (latent,) = self.expansion.run([self.latent_name], given)
        return _frames(latent), durations


def _frames(latent: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(latent[0].T, dtype=np.float32)
