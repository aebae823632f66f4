"""VoxCPM2's AudioVAE decoder behind the Vocoder interface: windows of patches, batched.

A frame is one patch: 4 latents of 64, 160 ms, 7,680 samples at 48 kHz (a row of
``patch_size * latent_dim`` floats, patch-major as the model makes it). The decoder is
causal, so a chunk needs no frames after it, only its receptive field before it:
``left_context`` patches (:data:`models.blocks.audiovae.LEFT_CONTEXT` latents, rounded
up), with which a chunk's audio is the whole sequence's within float32 error. Every
item of a call is one window of the batch (right-padded: causal).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from models.base import DecodeItem, Vocoder
from models.blocks.audiovae import LEFT_CONTEXT, AudioVAEDecoder, decode_windows


class AudioVAEVocoder(Vocoder):
    right_context = 0

    def __init__(self, decoder: AudioVAEDecoder, patch_size: int) -> None:
        self.decoder = decoder
        self.patch = patch_size
        self.latent_dim = decoder.cfg.latent_dim
        self.sample_rate = decoder.cfg.out_sample_rate
        self.samples_per_frame = patch_size * decoder.cfg.samples_per_latent
        self.left_context = -(-LEFT_CONTEXT // patch_size)

    def new_stream(self, conditioning: Any = None) -> None:
        """No state: each chunk decodes with its left context."""
        return None

    @torch.inference_mode()
    def decode(self, items: list[DecodeItem]) -> list[np.ndarray]:
        out = [np.zeros(0, np.float32) for _ in items]
        rows = [i for i, item in enumerate(items) if item.chunk_frames > 0]
        if not rows:
            return out
        param = next(self.decoder.parameters())
        windows, lefts = [], []
        for i in rows:
            item = items[i]
            frames = np.asarray(item.frames[: len(item.frames) - item.right], np.float32)
            patches = torch.from_numpy(frames).to(param.device, param.dtype)
            latents = patches.view(-1, self.patch, self.latent_dim).reshape(-1, self.latent_dim)
            windows.append(latents.T)
            lefts.append(item.left * self.patch)
        audio = decode_windows(self.decoder, windows, lefts)
        for row, i in enumerate(rows):
            out[i] = audio[row].float().clamp(-1.0, 1.0).cpu().numpy()
        return out
