"""Piper's HiFi-GAN decoder as a windowed Vocoder.

It is not causal, so each chunk is decoded with ``context`` latent frames on
both sides (the engine clips them at the unit's edges, where one-shot synthesis
has none either) and only the chunk's own samples are kept. Chunks whose windows
have the same length go through the decoder as one batch.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import onnxruntime as ort

from models.base import DecodeItem, Vocoder


class PiperVocoder(Vocoder):
    def __init__(
        self,
        session: ort.InferenceSession,
        latent_name: str,
        sample_rate: int,
        hop: int,
        context: int,
    ) -> None:
        self._session = session
        self._latent_name = latent_name
        self.sample_rate = sample_rate
        self.samples_per_frame = hop
        self.left_context = context
        self.right_context = context

    def new_stream(self, conditioning: Any = None) -> None:
        return None

    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        groups: dict[int, list[int]] = defaultdict(list)
        for index, item in enumerate(items):
            groups[len(item.frames)].append(index)
        results: list[np.ndarray] = [np.empty(0, np.float32)] * len(items)
        hop = self.samples_per_frame
        for indices in groups.values():
            batch = np.stack([items[i].frames.T for i in indices]).astype(np.float32, copy=False)
            (audio,) = self._session.run(None, {self._latent_name: batch})
            audio = audio.reshape(len(indices), -1)
            for row, i in enumerate(indices):
                item = items[i]
                chunk = audio[row, item.left * hop : (item.left + item.chunk_frames) * hop]
                results[i] = np.clip(chunk, -1.0, 1.0).astype(np.float32)
        return results
