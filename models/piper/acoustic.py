"""Piper's acoustic stage as an ARModel: one sentence -> all its latent frames per step."""

from __future__ import annotations

from collections import deque

import numpy as np
import onnxruntime as ort

from models.base import (
    ARModel,
    Capabilities,
    ContextState,
    ModelInputError,
    StepOutput,
    SynthParams,
    TextFrontend,
)


class PiperContext(ContextState):
    def __init__(self, scales: np.ndarray) -> None:
        self.scales = scales
        self.pending: deque[list[int]] = deque()
        self.input_closed = False
        self.finished = False

    def feed(self, units: list[list[int]]) -> None:
        self.pending.extend(units)

    def close_input(self) -> None:
        self.input_closed = True

    @property
    def has_work(self) -> bool:
        return not self.finished and (bool(self.pending) or self.input_closed)


class PiperAcoustic(ARModel):
    def __init__(
        self,
        session: ort.InferenceSession,
        latent_name: str,
        frontend: TextFrontend,
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
        self._open = 0
        channels = session.get_outputs()[0].shape[1]
        self._channels = channels if isinstance(channels, int) else 192

    @property
    def max_contexts(self) -> int:
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

    def open(self, params: SynthParams) -> PiperContext:
        self._open += 1
        # Speed scales phoneme durations: 2x speed is half the length scale.
        scales = np.array([self._noise, self._length / params.speed, self._noise_w], np.float32)
        return PiperContext(scales)

    def close(self, state: ContextState) -> None:
        self._open -= 1

    def step(self, states: list[ContextState]) -> list[StepOutput]:
        outputs = []
        for state in states:
            assert isinstance(state, PiperContext)
            if state.pending:
                outputs.append(self._synthesize(state))
            else:
                state.finished = True
                outputs.append(StepOutput(np.zeros((0, self._channels), np.float32), finished=True))
        return outputs

    def _synthesize(self, state: PiperContext) -> StepOutput:
        ids = state.pending.popleft()
        feeds = {
            "input": np.asarray([ids], dtype=np.int64),
            "input_lengths": np.asarray([len(ids)], dtype=np.int64),
            "scales": state.scales,
        }
        (latent,) = self._session.run([self._latent_name], feeds)
        frames = np.ascontiguousarray(latent[0].T)  # [frames, channels]
        finished = state.input_closed and not state.pending
        state.finished = finished
        return StepOutput(frames, unit_end=True, finished=finished)
