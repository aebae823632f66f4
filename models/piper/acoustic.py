"""Piper's acoustic stage as a ModelRunner: one sentence (unit) -> its latent frames.

A step synthesizes one unit per stepped slot (one onnxruntime call each; units
are capped in size by the frontend). A unit longer than ``max_frames_per_step``
is handed out over several steps, so the engine's frame buffers stay bounded.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from models.base import (
    Capabilities,
    ModelInputError,
    ModelRunner,
    Prepared,
    StepPlan,
    StepResult,
    SynthParams,
)
from models.piper.frontend import PiperFrontend

MAX_FRAMES_PER_STEP = 128
"""Latent frames (~1.5 s of audio) one step hands out for a slot: the engine's frame
ring holds a few steps' worth per stream, so this keeps it small."""


@dataclass
class PiperPrepared(Prepared):
    scales: np.ndarray | None = None
    """noise, length, noise_w scales of this context (speed folds into length)."""


@dataclass
class _Slot:
    scales: np.ndarray
    pending: deque[np.ndarray]
    closed: bool = False
    rest: np.ndarray | None = None
    """Frames of the current unit not handed out yet."""


class PiperRunner(ModelRunner):
    frame_dtype = np.float32
    max_frames_per_step = MAX_FRAMES_PER_STEP
    prepares_inline = True

    def __init__(
        self,
        session: ort.InferenceSession,
        latent_name: str,
        frontend: PiperFrontend,
        capabilities: Capabilities,
        scales: tuple[float, float, float],
        max_contexts: int,
    ) -> None:
        self._session = session
        self._latent_name = latent_name
        self.frontend = frontend
        self.capabilities = capabilities
        self._noise, self._length, self._noise_w = scales
        self._max_contexts = max_contexts
        self._slots: dict[int, _Slot] = {}
        channels = session.get_outputs()[0].shape[1]
        self.frame_dim = channels if isinstance(channels, int) else 192

    @property
    def max_slots(self) -> int:
        return self._max_contexts

    def validate(self, params: SynthParams) -> None:
        voices = [v.name for v in self.capabilities.voices]
        if params.voice not in voices:
            raise ModelInputError(
                f"unknown voice {params.voice!r}; available: {', '.join(voices)}",
                param="voice",
                code="unknown_voice",
            )
        if params.language not in self.capabilities.languages:
            raise ModelInputError(
                f"unsupported language {params.language!r}; supported: "
                + ", ".join(self.capabilities.languages),
                param="language",
                code="unsupported_language",
            )
        if not 0.25 <= params.speed <= 4.0:
            raise ModelInputError("speed must be within [0.25, 4.0]", param="speed")

    def prepare(self, params: SynthParams) -> PiperPrepared:
        self.validate(params)
        # Speed scales phoneme durations: 2x speed is half the length scale.
        scales = np.array([self._noise, self._length / params.speed, self._noise_w], np.float32)
        return PiperPrepared(scales=scales)

    def encode_text(self, text: str) -> list[np.ndarray]:
        return [np.asarray(ids, np.int64) for ids in self.frontend.encode(text)]

    def execute(self, plan: StepPlan) -> StepResult:
        for slot in plan.free.tolist():
            self._slots.pop(slot, None)
        for admit in plan.admit:
            assert isinstance(admit.prepared, PiperPrepared) and admit.prepared.scales is not None
            self._slots[admit.slot] = _Slot(admit.prepared.scales, deque())
        for feed in plan.feed:
            state = self._slots[feed.slot]
            state.pending.extend(feed.units)
            state.closed |= feed.close
        n = len(plan.step)
        counts = np.zeros(n, np.int64)
        unit_end = np.zeros(n, bool)
        finished = np.zeros(n, bool)
        waiting = np.zeros(n, bool)
        frames: list[np.ndarray] = []
        for row, slot in enumerate(plan.step.tolist()):
            state = self._slots[slot]
            if state.rest is None and state.pending:
                state.rest = self._synthesize(state.pending.popleft(), state.scales)
            if state.rest is not None:
                out, rest = state.rest[:MAX_FRAMES_PER_STEP], state.rest[MAX_FRAMES_PER_STEP:]
                state.rest = rest if len(rest) else None
                frames.append(out)
                counts[row] = len(out)
                unit_end[row] = state.rest is None
            done = state.rest is None and not state.pending
            finished[row] = done and state.closed
            waiting[row] = done and not state.closed
        stacked = np.concatenate(frames) if frames else np.zeros((0, self.frame_dim), np.float32)
        return StepResult(counts, stacked, unit_end, finished, np.zeros(n, bool), waiting)

    def _synthesize(self, ids: np.ndarray, scales: np.ndarray) -> np.ndarray:
        feeds = {
            "input": ids[None].astype(np.int64, copy=False),
            "input_lengths": np.asarray([len(ids)], dtype=np.int64),
            "scales": scales,
        }
        (latent,) = self._session.run([self._latent_name], feeds)
        return np.ascontiguousarray(latent[0].T, dtype=np.float32)  # [frames, channels]
