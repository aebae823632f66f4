"""Piper's HiFi-GAN decoder as a windowed Vocoder.

It is not causal, so each chunk is decoded with ``context`` latent frames on
both sides (clipped at the unit's edges, where one-shot synthesis has none
either) and only the chunk's own samples are kept. Chunks whose windows have
the same length go through the decoder as one batch.
"""

from __future__ import annotations

from collections import defaultdict

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

    def new_stream(self) -> None:
        return None

    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        windows: list[tuple[np.ndarray, int, int]] = []
        groups: dict[int, list[int]] = defaultdict(list)
        for index, item in enumerate(items):
            lo = max(0, item.start - self.left_context)
            hi = min(item.frames_offset + len(item.frames), item.end + self.right_context)
            window = item.frames[lo - item.frames_offset : hi - item.frames_offset]
            windows.append((window, item.start - lo, item.end - item.start))
            groups[len(window)].append(index)

        results: list[np.ndarray] = [np.empty(0, np.float32)] * len(items)
        hop = self.samples_per_frame
        for indices in groups.values():
            batch = np.stack([windows[i][0].T for i in indices]).astype(np.float32, copy=False)
            (audio,) = self._session.run(None, {self._latent_name: batch})
            audio = audio.reshape(len(indices), -1)
            for row, i in enumerate(indices):
                _, skip, count = windows[i]
                chunk = audio[row, skip * hop : (skip + count) * hop]
                results[i] = np.clip(chunk, -1.0, 1.0).astype(np.float32)
        return results
