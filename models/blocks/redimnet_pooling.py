"""Attentive statistics pooling (ASTP, from ECAPA-TDNN): frames -> one vector.

For features x [B, rows, T], a score per row and frame (1x1 convolution to 128,
tanh, 1x1 back to ``rows``; with ``global_context`` the scorer also sees each row's
mean and standard deviation over the clip, sample variance plus 1e-7), softmax over
time; the output is the weighted mean and the weighted standard deviation
(``sqrt(max(E[x^2] - mean^2, 1e-7))``), concatenated: [B, 2 * rows]. Parameter
names follow ``ASTP`` (``linear1``, ``linear2``).
"""

from __future__ import annotations

import torch
from torch import nn

BOTTLENECK = 128
VAR_FLOOR = 1e-7


class AttentiveStatsPool(nn.Module):
    def __init__(self, rows: int, global_context: bool = False, bottleneck: int = BOTTLENECK):
        super().__init__()
        self.global_context = global_context
        self.linear1 = nn.Conv1d(rows * 3 if global_context else rows, bottleneck, 1)
        self.linear2 = nn.Conv1d(bottleneck, rows, 1)

    @property
    def out_dim(self) -> int:
        return 2 * self.linear2.out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 4:
            x = x.reshape(x.shape[0], x.shape[1] * x.shape[2], x.shape[3])
        scorer_in = x
        if self.global_context:
            mean = x.mean(dim=-1, keepdim=True).expand_as(x)
            std = torch.sqrt(x.var(dim=-1, keepdim=True) + VAR_FLOOR).expand_as(x)
            scorer_in = torch.cat((x, mean, std), dim=1)
        scores = self.linear2(torch.tanh(self.linear1(scorer_in)))
        alpha = torch.softmax(scores, dim=2)
        mean = torch.sum(alpha * x, dim=2)
        var = torch.sum(alpha * x**2, dim=2) - mean**2
        return torch.cat([mean, torch.sqrt(var.clamp(min=VAR_FLOOR))], dim=1)
