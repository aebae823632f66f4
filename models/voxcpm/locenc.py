"""VoxCPM2's local encoder (a patch of latents -> one language-model input) and its scalar
quantizer (a language-model state -> the same state on a grid).

The local encoder (:class:`LocEnc`, names as the checkpoint's ``feat_encoder.*``) reads a
patch's 4 latents, projected, after a learned leading token; every token sees every
other (the kit's decoder, bidirectional, rotary positions 0..4); the leading token's
final state is the patch's embedding. ``enc_to_lm_proj`` then widens it to the language
model. The quantizer (:class:`ScalarQuantizer`, ``fsq_layer.*``) projects down, squashes
with tanh, rounds to ``1/scale`` steps (half to even) and projects back.
"""

from __future__ import annotations

import torch
from torch import nn

from models.blocks.llama import Stack, TransformerConfig


class LocEnc(nn.Module):
    def __init__(self, cfg: TransformerConfig, feat_dim: int, inv_freq: torch.Tensor) -> None:
        super().__init__()
        self.special_token = nn.Parameter(torch.zeros(1, 1, 1, cfg.hidden_size))
        self.in_proj = nn.Linear(feat_dim, cfg.hidden_size)
        self.encoder = Stack(cfg)
        self.encoder.inv_freq = inv_freq

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        """Patches [B, T, P, feat_dim] -> embeddings [B, T, hidden]."""
        b, t, p, _ = patches.shape
        x = self.in_proj(patches)
        lead = self.special_token.expand(b, t, 1, -1)
        seq = torch.cat((lead, x), dim=2).reshape(b * t, p + 1, -1)
        return self.encoder.bidirectional(seq)[:, 0].reshape(b, t, -1)


class ScalarQuantizer(nn.Module):
    def __init__(self, width: int, latent: int, scale: int) -> None:
        super().__init__()
        self.in_proj = nn.Linear(width, latent)
        self.out_proj = nn.Linear(latent, width)
        self.scale = scale

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        squashed = torch.tanh(self.in_proj(hidden))
        return self.out_proj(torch.round(squashed * self.scale) / self.scale)
