"""VoxCPM2's local diffusion transformer and its flow-matching solve: one patch of latents
from the language model's condition.

The estimator (:class:`LocDiT`) reads 11 tokens, every one seeing every other: the
condition as two tokens (the base and residual language models' states, projected), the
time, the previous patch (4 latents) and the noisy patch (4 latents); its last 4 outputs
are the velocity. The stack is the kit's decoder with MiniCPM-4's rotary frequencies
(LongRoPE factors) and ``kv_channels`` per head.

:func:`solve` is the reference's Euler solve (``unified_cfm``): times swayed from 1 to 0,
the first step with zero velocity (CFG-Zero*), then each step the estimator on the
conditional and unconditional (zero condition) rows, mixed with the optimised scale;
contexts batched, each with its own guidance.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from models.blocks.llama import Stack, TransformerConfig


def sinusoid(t: torch.Tensor, dim: int, scale: float = 1000.0) -> torch.Tensor:
    """[N] -> [N, dim]: sin | cos of ``scale * t`` at geometric frequencies (in t's dtype)."""
    half = dim // 2
    freqs = torch.exp(
        torch.arange(half, dtype=t.dtype, device=t.device) * -(math.log(10000) / (half - 1))
    )
    angles = scale * t[:, None] * freqs[None]
    return torch.cat((angles.sin(), angles.cos()), dim=-1)


class TimeMLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(dim, dim)
        self.linear_2 = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(nn.functional.silu(self.linear_1(x)))


class LocDiT(nn.Module):
    """Names as the checkpoint's ``feat_decoder.estimator.*``."""

    def __init__(self, cfg: TransformerConfig, feat_dim: int, inv_freq: torch.Tensor) -> None:
        super().__init__()
        dim = cfg.hidden_size
        self.in_proj = nn.Linear(feat_dim, dim)
        self.cond_proj = nn.Linear(feat_dim, dim)
        self.out_proj = nn.Linear(dim, feat_dim)
        self.time_mlp = TimeMLP(dim)
        self.delta_time_mlp = TimeMLP(dim)
        self.decoder = Stack(cfg)
        self.decoder.inv_freq = inv_freq

    def forward(
        self, x: torch.Tensor, mu: torch.Tensor, t: torch.Tensor, cond: torch.Tensor
    ) -> torch.Tensor:
        """Velocity [N, feat_dim, P] of noisy patches ``x`` [N, feat_dim, P] at times ``t``
        [N], conditions ``mu`` [N, 2 * dim], previous patches ``cond`` [N, feat_dim, P]."""
        h = self.in_proj(x.transpose(1, 2))
        c = self.cond_proj(cond.transpose(1, 2))
        dim = h.shape[-1]
        time = self.time_mlp(sinusoid(t, dim).to(h.dtype))
        # The reference's delta-time embedding of dt = 0 (mean mode off): constant, not zero.
        time = time + self.delta_time_mlp(sinusoid(torch.zeros_like(t), dim).to(h.dtype))
        seq = torch.cat((mu.view(h.shape[0], -1, dim), time[:, None], c, h), dim=1)
        out = self.decoder.bidirectional(seq)[:, -h.shape[1] :]
        return self.out_proj(out).transpose(1, 2)


def time_span(steps: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """1 -> 0 in ``steps`` steps, swayed (``t + cos(pi t / 2) - 1 + t``)."""
    t = torch.linspace(1, 0, steps + 1, device=device, dtype=dtype)
    return t + (torch.cos(torch.pi / 2 * t) - 1 + t)


@torch.no_grad()
def solve(
    estimator: LocDiT,
    mu: torch.Tensor,
    cond: torch.Tensor,
    noise: torch.Tensor,
    steps: int,
    cfg: torch.Tensor,
) -> torch.Tensor:
    """Patches [B, feat_dim, P] from initial ``noise`` [B, feat_dim, P], conditions ``mu``
    [B, 2 * dim], previous patches ``cond`` [B, feat_dim, P], guidance ``cfg`` [B]."""
    span = time_span(steps, noise.dtype, noise.device)
    x, t, dt = noise, span[0], span[0] - span[1]
    b = x.shape[0]
    zero_steps = max(1, int(len(span) * 0.04))
    for step in range(1, len(span)):
        if step <= zero_steps:
            v = torch.zeros_like(x)
        else:
            both = estimator(
                torch.cat((x, x)),
                torch.cat((mu, torch.zeros_like(mu))),
                t.expand(2 * b),
                torch.cat((cond, cond)),
            )
            v_c, v_u = both[:b], both[b:]
            flat_c, flat_u = v_c.reshape(b, -1), v_u.reshape(b, -1)
            scale = (flat_c * flat_u).sum(1, keepdim=True) / (
                (flat_u**2).sum(1, keepdim=True) + 1e-8
            )
            scale = scale.view(b, 1, 1)
            v = v_u * scale + cfg.view(b, 1, 1) * (v_c - v_u * scale)
        x = x - dt * v
        t = t - dt
        if step < len(span) - 1:
            dt = t - span[step + 1]
    return x
