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


FLOW_REACH = 32
"""Latent frames one frame of ``expansion``'s output depends on, each way: the flow's
4 couplings, each a 4-layer WaveNet of kernel 5 (2 frames a layer)."""


@dataclass(frozen=True)
class Timed:
    """A unit after ``timing``: what ``expansion`` reads, and its frames per id."""

    given: dict[str, np.ndarray]
    """``expansion``'s inputs: the text encoder's tensors, the frames per id, the
    scales, and the latent's noise."""
    durations: np.ndarray
    """Whole frames per id (int64); they add up to the unit's latent frames."""

    @property
    def frames(self) -> int:
        return int(self.durations.sum())

    def splits_at(self, frames: int) -> bool:
        """Whether the first ``frames`` can be expanded for less than the whole unit:
        they and the flow's reach after them are short of its end."""
        return frames + FLOW_REACH < self.frames


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
    noise_name: str | None = None
    """``expansion``'s input for the latent's noise (None: the graph draws it)."""

    @property
    def has_durations(self) -> bool:
        return self.timing is not None

    @property
    def expands_in_parts(self) -> bool:
        """A unit's first frames can be expanded alone, then the whole unit, with
        the same noise (:meth:`expand` with ``frames``)."""
        return self.has_durations and self.noise_name is not None

    def run(
        self,
        ids: np.ndarray,
        scales: np.ndarray,
        speed: float,
        rng: np.random.Generator | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The unit's latent [frames, channels] and its frames per id (None without a
        durations node: then speed goes into the length scale, as Piper does)."""
        if self.timing is None or self.expansion is None:
            assert self.acoustic is not None
            length = scales.copy()
            length[1] /= speed
            feeds = {**_feeds(ids, scales), "scales": length}
            (latent,) = self.acoustic.run([self.latent_name], feeds)
            return _frames(latent), None
        timed = self.time(ids, scales, speed, rng)
        return self.expand(timed), timed.durations

    def time(
        self,
        ids: np.ndarray,
        scales: np.ndarray,
        speed: float,
        rng: np.random.Generator | None = None,
    ) -> Timed:
        """``timing`` over the whole unit (its text encoder attends over all of it),
        and the latent's noise drawn from ``rng`` (none at noise scale 0)."""
        assert self.timing is not None and self.expansion is not None
        assert self.raw_durations_name is not None and self.durations_name is not None
        feeds = _feeds(ids, scales)
        raw, *cut = self.timing.run([self.raw_durations_name, *self.cut_names], feeds)
        durations = scaled_durations(np.ceil(raw), speed)
        wanted = {i.name for i in self.expansion.get_inputs()}
        given = dict(zip(self.cut_names, cut, strict=True))
        given[self.durations_name] = durations.astype(raw.dtype).reshape(raw.shape)
        given.update((name, value) for name, value in feeds.items() if name in wanted)
        if self.noise_name is not None:
            shape = (1, self.channels, int(durations.sum()))
            if float(scales[0]) == 0.0:
                given[self.noise_name] = np.zeros(shape, np.float32)
            else:
                draw = rng if rng is not None else np.random.default_rng()
                given[self.noise_name] = draw.standard_normal(shape, np.float32)
        return Timed(given, durations)

    def expand(self, timed: Timed, frames: int | None = None) -> np.ndarray:
        """The unit's latent [frames, channels]; with ``frames``, only its first
        ``frames``, from just the ids that make them and the flow's reach after them
        (nothing further reaches back, so they are the whole unit's first frames)."""
        assert self.expansion is not None
        given = timed.given
        if frames is not None and timed.splits_at(frames):
            assert self.noise_name is not None, "a part needs the noise as an input"
            used = int(np.searchsorted(np.cumsum(timed.durations), frames + FLOW_REACH)) + 1
            per_id = {*self.cut_names, self.durations_name}
            given = {
                name: value[..., :used] if name in per_id else value
                for name, value in given.items()
            }
            made = int(timed.durations[:used].sum())
            given[self.noise_name] = timed.given[self.noise_name][..., :made]
        (latent,) = self.expansion.run([self.latent_name], given)
        out = _frames(latent)
        return out if frames is None else out[:frames]


def _feeds(ids: np.ndarray, scales: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "input": ids[None].astype(np.int64, copy=False),
        "input_lengths": np.asarray([len(ids)], dtype=np.int64),
        "scales": scales,
    }


def _frames(latent: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(latent[0].T, dtype=np.float32)
