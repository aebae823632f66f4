"""ReDimNet's 1-D time-context block: what a stage may add on its ``[B, rows, T]`` view.

The block narrows the rows to ``hidden`` (1x1 convolution, channels-first layer norm),
models time there, widens back and adds the input (residual). ``block_1d_type``
picks the time model:

- ``fc``: 1x1 convolution to twice the width, layer norm, GELU, 1x1 back;
- ``conv``: four ConvNeXt-like blocks, each with depthwise kernels 7, 15 and 31;
- ``att``: a depthwise positional convolution (kernel 59, layer-normed, residual),
  then a post-norm transformer layer (4 heads, feed-forward twice the width);
- ``conv+att``: ConvNeXt-like blocks with depthwise kernels 7, 19, 31 and 59, then a
  transformer layer whose feed-forward keeps the width.

The transformer layer works on [B, T, hidden]: attention (the query scaled by
``head_dim ** -0.5`` after its projection, plain softmax over all frames, no mask),
residual, layer norm; feed-forward with the tanh approximation of GELU, residual,
layer norm (eps 1e-6). Names follow IDRnD's ``TimeContextBlock1d`` (``red_dim_conv``,
``tcm``, ``exp_dim_conv``) and its transformer layer (``attention.{q,k,v,out}_proj``,
``layer_norm``, ``feed_forward.{intermediate,output}_dense``, ``final_layer_norm``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from models.blocks.redimnet_layers import ChannelsFirstLayerNorm, ConvNeXtLikeBlock

BLOCK_1D_TYPES = ("fc", "conv", "att", "conv+att")
HEADS = 4
POSITION_KERNEL = 59
TRANSFORMER_LN_EPS = 1e-6


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))
    return 0.5 * x * (1.0 + torch.tanh(inner))


class SelfAttention(nn.Module):
    """Multi-head self-attention over all frames of [B, T, width], with biases."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"attention width {width} is not a multiple of {heads} heads")
        self.heads = heads
        self.head_dim = width // heads
        self.k_proj = nn.Linear(width, width)
        self.v_proj = nn.Linear(width, width)
        self.q_proj = nn.Linear(width, width)
        self.out_proj = nn.Linear(width, width)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)  # [B, H, T, D]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, width = x.shape
        q = self._split(self.q_proj(x) * self.head_dim**-0.5)
        k = self._split(self.k_proj(x))
        v = self._split(self.v_proj(x))
        weights = torch.softmax(torch.matmul(q, k.transpose(-1, -2)), dim=-1)
        out = torch.matmul(weights, v).transpose(1, 2).reshape(b, t, width)
        return self.out_proj(out)


class FeedForward(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.intermediate_dense = nn.Linear(width, hidden)
        self.output_dense = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output_dense(gelu_tanh(self.intermediate_dense(x)))


class TransformerLayer(nn.Module):
    """Post-norm transformer layer on channels-first [B, width, T] (in and out)."""

    def __init__(self, width: int, ffn: int, heads: int = HEADS) -> None:
        super().__init__()
        self.attention = SelfAttention(width, heads)
        self.layer_norm = nn.LayerNorm(width, eps=TRANSFORMER_LN_EPS)
        self.feed_forward = FeedForward(width, ffn)
        self.final_layer_norm = nn.LayerNorm(width, eps=TRANSFORMER_LN_EPS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.permute(0, 2, 1)
        h = self.layer_norm(h + self.attention(h))
        h = self.final_layer_norm(h + self.feed_forward(h))
        return h.permute(0, 2, 1)


class PositionConv(nn.Module):
    """x + layer_norm(depthwise conv(x)) on [B, width, T], an odd kernel, 'same' length."""

    def __init__(self, width: int, kernel: int = POSITION_KERNEL) -> None:
        super().__init__()
        self.conv = nn.Conv1d(width, width, kernel, padding=kernel // 2, groups=width)
        self.norm = ChannelsFirstLayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.norm(self.conv(x))


def _time_model(kind: str, hidden: int) -> nn.Sequential:
    if kind == "fc":
        return nn.Sequential(
            nn.Conv1d(hidden, hidden * 2, 1),
            ChannelsFirstLayerNorm(hidden * 2),
            nn.GELU(),
            nn.Conv1d(hidden * 2, hidden, 1),
        )
    if kind == "conv":
        return nn.Sequential(*(ConvNeXtLikeBlock(hidden, 1, [7, 15, 31]) for _ in range(4)))
    if kind == "att":
        return nn.Sequential(PositionConv(hidden), TransformerLayer(hidden, hidden * 2))
    if kind == "conv+att":
        convs = (ConvNeXtLikeBlock(hidden, 1, [k]) for k in (7, 19, 31, 59))
        return nn.Sequential(*convs, TransformerLayer(hidden, hidden))
    raise ValueError(f"block_1d_type must be one of {BLOCK_1D_TYPES}, got {kind!r}")


class TimeContextBlock(nn.Module):
    """[B, width, T] -> the same shape, through ``hidden`` rows and the time model."""

    def __init__(self, width: int, hidden: int, kind: str) -> None:
        super().__init__()
        if hidden < 1:
            raise ValueError(f"time-context width {hidden} (from {width} rows) is empty")
        self.red_dim_conv = nn.Sequential(
            nn.Conv1d(width, hidden, 1), ChannelsFirstLayerNorm(hidden)
        )
        self.tcm = _time_model(kind, hidden)
        self.exp_dim_conv = nn.Conv1d(hidden, width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.exp_dim_conv(self.tcm(self.red_dim_conv(x)))
