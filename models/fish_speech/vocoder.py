"""S2 Pro's codec decoder behind the Vocoder interface: windows of frames, batched.

The decoder is causal throughout, so a chunk needs no frames after it
(``right_context = 0``), only enough before it. Two parts look back differently:

- the quantizer's ``post_module`` (8 transformer layers, each attending to 128
  frames) reaches far back but costs little per frame (about 0.2 GFLOP at S2 Pro's
  size): it runs over ``transformer_context`` frames before the chunk
  (``left_context``, what the engine hands over);
- the convolutions after it (upsampling to 44.1 kHz, about 30 times the
  transformer's cost per frame) reach about 10 frames back: they run over only
  ``conv_context`` frames before the chunk.

Rotary positions are those of whole-sequence decoding: each stream counts the
frames decoded before its next chunk, so a window starts at the position it has
in the sequence (a window shorter than ``left_context`` starts at the sequence's
start: the engine clips the left context there).

The defaults, measured by ``bench/fish_dac_chunks.py`` at S2 Pro's size with random
weights on an H200 in float32 (bench/baselines/fish-dac-chunks-random-real-h200.json;
400 random frames, chunks of 2 doubling to 32, SNR of the chunked audio against
the whole sequence's): conv context 10 is exact (112.6 dB, float32's floor; 8:
90-102 dB, 6: 48-60 dB). Transformer context 128 gives 50.6 dB (worst chunk
47.3 dB), 96 gives 36.3, 192 63.8, 256 82.4, 384 112.6. The first chunk's size
changes nothing (no right context): 1 frame (46 ms) is as good as 4. With 128 and
10 the decoder does about 1.45 times whole decoding's work at that schedule. For
scale: whole decoding in TF32 lands at 60 dB from float32's, in bfloat16 at 35 dB.

One call decodes every item's window as one batch: windows are aligned at their
start and padded at the end (causal, so the padding changes nothing before it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from models.base import DecodeItem, Vocoder
from models.blocks.dac import DAC

DEFAULT_TRANSFORMER_CONTEXT = 128
"""Frames before a chunk the transformer reads: the smallest measured that keeps
every chunk above 40 dB (47 dB at worst)."""
DEFAULT_CONV_CONTEXT = 10
"""Frames before a chunk the convolutions read: their whole reach (exact)."""


@dataclass
class FishStream:
    """A context's place in its sequence: frames decoded before its next chunk."""

    position: int = 0


class FishVocoder(Vocoder):
    right_context = 0

    def __init__(
        self,
        codec: DAC,
        device: torch.device | str,
        dtype: torch.dtype,
        *,
        transformer_context: int = DEFAULT_TRANSFORMER_CONTEXT,
        conv_context: int = DEFAULT_CONV_CONTEXT,
        absolute_positions: bool = True,
    ) -> None:
        """``transformer_context``, ``conv_context``: frames before a chunk that the
        transformer and the convolutions read. ``absolute_positions``: False decodes
        every window from position 0 (as vllm-omni does; for measurements)."""
        if transformer_context < 0 or not 0 <= conv_context <= max(transformer_context, 0):
            raise ValueError(
                "contexts must satisfy 0 <= conv_context <= transformer_context, got "
                f"{conv_context} and {transformer_context}"
            )
        self.codec = codec.to(device=device, dtype=dtype)
        self.sample_rate = codec.sample_rate
        self.samples_per_frame = codec.hop_length
        self.left_context = transformer_context
        self.conv_context = conv_context
        self.absolute_positions = absolute_positions

    def new_stream(self, conditioning: Any = None) -> FishStream:
        """A fresh stream (S2 Pro decodes only the generated frames, never a clone's
        reference codes: ``conditioning`` is not used)."""
        return FishStream()

    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        out = [np.zeros(0, np.float32) for _ in items]
        rows = [i for i, item in enumerate(items) if item.chunk_frames > 0]
        if not rows:
            return out
        windows, lefts, starts = [], [], []
        for i in rows:
            item = items[i]
            stream = item.stream
            if not isinstance(stream, FishStream):
                raise ValueError("decode needs a stream from new_stream")
            if item.left < self.left_context:
                stream.position = item.left  # the window starts where its sequence does
            windows.append(np.asarray(item.frames[: len(item.frames) - item.right], np.int64))
            lefts.append(item.left)
            starts.append(stream.position - item.left if self.absolute_positions else 0)
            stream.position += item.chunk_frames
        audio = self._decode(windows, lefts, starts)
        for row, i in enumerate(rows):
            out[i] = audio[row]
        return out

    @torch.inference_mode()
    def _decode(
        self, windows: list[np.ndarray], lefts: list[int], starts: list[int]
    ) -> list[np.ndarray]:
        codec, hop = self.codec, self.samples_per_frame
        lengths = [len(w) for w in windows]
        codes = np.zeros((len(windows), max(lengths), codec.n_codebooks), np.int64)
        for row, window in enumerate(windows):
            codes[row, : len(window)] = window
        device_codes = torch.from_numpy(codes).to(codec.device).transpose(1, 2)
        frames = codec.frames(device_codes, torch.tensor(starts, dtype=torch.int64))
        # The convolutions see conv_context frames before each chunk, no more.
        skips = [left - min(left, self.conv_context) for left in lefts]
        spans = [n - skip for n, skip in zip(lengths, skips, strict=True)]
        index = torch.tensor(
            [
                [skip + min(t, span - 1) for t in range(max(spans))]
                for skip, span in zip(skips, spans, strict=True)
            ],
            device=frames.device,
        )
        cropped = torch.gather(frames, 2, index[:, None, :].expand(-1, frames.shape[1], -1))
        audio = codec.synthesize(cropped).float().clamp(-1.0, 1.0).cpu().numpy()
        return [
            audio[row, (left - skip) * hop : (n - skip) * hop]
            for row, (left, skip, n) in enumerate(zip(lefts, skips, lengths, strict=True))
        ]
