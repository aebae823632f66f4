"""ReDimNet's small pieces: the two views of one feature map and the learned mix of
earlier outputs, a channels-first layer norm, and the ConvNeXt-like block.

ReDimNet keeps one volume of features, ``C * F`` values per frame, and moves it
between a 2-D view ``[B, c, f, T]`` (channels x frequency) and a 1-D view
``[B, f * c, T]`` (one row per frequency-channel pair, frequency major). A stage
reads a softmax-weighted sum of the 1-D outputs of every earlier stage
(``LayerMix``); the weights are per row, so each row picks its own mix.

Parameter names are those of IDRnD's modules (``weigth1d.w``, ``LayerNorm.weight``,
``ConvNeXtLikeBlock.dwconvs/norm/pwconv1``), so checkpoints load as stored.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

LN_EPS = 1e-6


def groups_for(channels: int, group_divisor: int | None) -> int:
    """Grouped convolutions have ``channels // group_divisor`` groups (one: no divisor)."""
    return 1 if group_divisor is None else channels // group_divisor


class ChannelsFirstLayerNorm(nn.Module):
    """Layer norm over dimension 1 of [B, C, ...] (population variance, eps 1e-6)."""

    def __init__(self, channels: int, eps: float = LN_EPS) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(1, keepdim=True)
        var = (x - mean).pow(2).mean(1, keepdim=True)
        x = (x - mean) / torch.sqrt(var + self.eps)
        trailing = (1,) * (x.dim() - 2)
        return self.weight.view(-1, *trailing) * x + self.bias.view(-1, *trailing)


class ToRows(nn.Module):
    """[B, c, f, T] -> [B, f * c, T] (frequency major)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, f, t = x.shape
        return x.permute(0, 2, 1, 3).reshape(b, f * c, t)


class ToGrid(nn.Module):
    """[B, f * c, T] -> [B, c, f, T], the inverse of ``ToRows``."""

    def __init__(self, freqs: int, channels: int) -> None:
        super().__init__()
        self.freqs = freqs
        self.channels = channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, t = x.shape
        return x.reshape(b, self.freqs, self.channels, t).permute(0, 2, 1, 3)


class LayerMix(nn.Module):
    """A list of ``inputs`` tensors [B, rows, T] -> their sum weighted by a softmax over
    the inputs, one set of weights per row (``width`` rows, or 1 shared by all)."""

    def __init__(self, inputs: int, width: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1, inputs, width, 1), requires_grad=inputs > 1)

    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        weights = F.softmax(self.w, dim=1)
        return (weights * torch.stack(xs, dim=1)).sum(dim=1)


_CONV = {1: nn.Conv1d, 2: nn.Conv2d}
_NORM = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d}


class ConvNeXtLikeBlock(nn.Module):
    """Residual: grouped convolutions of several kernel sizes side by side ('same'
    padding), batch norm, activation, a 1x1 convolution back to ``channels``."""

    def __init__(
        self,
        channels: int,
        dim: int,
        kernel_sizes: list[int] | list[tuple[int, int]],
        group_divisor: int | None = 1,
        activation: str = "gelu",
    ) -> None:
        super().__init__()
        conv, groups = _CONV[dim], groups_for(channels, group_divisor)
        self.dwconvs = nn.ModuleList(
            conv(channels, channels, kernel_size=k, padding="same", groups=groups)
            for k in kernel_sizes
        )
        width = channels * len(kernel_sizes)
        self.norm = _NORM[dim](width)
        self.act = nn.GELU() if activation == "gelu" else nn.ReLU()
        self.pwconv1 = conv(width, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cat([dwconv(x) for dwconv in self.dwconvs], dim=1)
        return x + self.pwconv1(self.act(self.norm(y)))
