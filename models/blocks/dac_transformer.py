"""The modded DAC's window-limited causal transformer (Fish Speech's codec).

Pre-norm blocks (RMSNorm -> attention -> layer scale, RMSNorm -> SwiGLU -> layer
scale), rotary positions on q and k, and a causal mask that lets each position see
itself and the ``window - 1`` positions before it. Input and output are
channels-first ``[B, C, T]``, as the codec's convolutions hand it over.

Rotary positions are an input (``start``: the position of each row's first frame),
so a window cut from a longer sequence can be decoded at the positions the whole
sequence gives it. The rotary table is the checkpoint's ``freqs_cis`` buffer
(cos and sin stored in bfloat16, as the reference computes them); positions past
its end are computed the same way.

Parameter names are the checkpoint's (``layers.N.attention.wqkv.weight`` ...).
The reference also stores a ``causal_mask`` buffer as large as its position table
(16384 x 16384 booleans for the encoder's); it carries nothing a window and a
length do not give, so it is not held (see :data:`DERIVED_BUFFERS`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

DERIVED_BUFFERS = ("causal_mask",)
"""Buffers the checkpoint stores under each transformer that are derived, not read."""


@dataclass(frozen=True)
class TransformerShape:
    """One window-limited transformer."""

    dim: int
    """Width of the residual stream (the codec's latent channels)."""
    layers: int
    heads: int
    """Attention heads (q, k and v have as many: no grouping)."""
    head_dim: int
    intermediate: int
    """Hidden width of the SwiGLU feed-forward."""
    window: int
    """Positions one position attends to, itself included."""
    positions: int
    """Length of the stored rotary table (``freqs_cis``); longer inputs extend it."""
    rope_base: float = 10000.0
    norm_eps: float = 1e-5


def rope_table(start: int, end: int, head_dim: int, base: float) -> torch.Tensor:
    """float32 ``[end - start, head_dim // 2, 2]`` (cos, sin) for positions ``[start, end)``,
    rounded through bfloat16 as the reference's table is."""
    half = head_dim // 2
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2)[:half].float() / head_dim))
    angles = torch.outer(torch.arange(start, end), inv)
    polar = torch.polar(torch.ones_like(angles), angles)
    return torch.stack([polar.real, polar.imag], dim=-1).to(torch.bfloat16).float()


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(torch.mean(xf * xf, dim=-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


class LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), 1e-2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


def apply_rope(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """``x`` [B, T, H, D] rotated by ``table`` [B, T, D // 2, 2] (computed in float32)."""
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    cos, sin = table[:, :, None, :, 0], table[:, :, None, :, 1]
    even, odd = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack([even * cos - odd * sin, odd * cos + even * sin], dim=-1)
    return rotated.flatten(3).type_as(x)


class Attention(nn.Module):
    def __init__(self, shape: TransformerShape) -> None:
        super().__init__()
        self.heads = shape.heads
        self.head_dim = shape.head_dim
        width = shape.heads * shape.head_dim
        self.wqkv = nn.Linear(shape.dim, 3 * width, bias=False)
        self.wo = nn.Linear(width, shape.dim, bias=False)

    def forward(self, x: torch.Tensor, table: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        q, k, v = self.wqkv(x).view(batch, length, 3, self.heads, self.head_dim).unbind(2)
        q, k = apply_rope(q, table), apply_rope(k, table)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask
        )
        return self.wo(y.transpose(1, 2).reshape(batch, length, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, shape: TransformerShape) -> None:
        super().__init__()
        self.attention = Attention(shape)
        self.feed_forward = FeedForward(shape.dim, shape.intermediate)
        self.ffn_norm = RMSNorm(shape.dim, shape.norm_eps)
        self.attention_norm = RMSNorm(shape.dim, shape.norm_eps)
        self.attention_layer_scale = LayerScale(shape.dim)
        self.ffn_layer_scale = LayerScale(shape.dim)

    def forward(self, x: torch.Tensor, table: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = x + self.attention_layer_scale(self.attention(self.attention_norm(x), table, mask))
        return h + self.ffn_layer_scale(self.feed_forward(self.ffn_norm(h)))


class WindowTransformer(nn.Module):
    """``[B, dim, T]`` -> ``[B, dim, T]``; position ``t`` of a row sees ``[t - window + 1, t]``."""

    def __init__(self, shape: TransformerShape) -> None:
        super().__init__()
        self.shape = shape
        self.layers = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.norm = RMSNorm(shape.dim, shape.norm_eps)
        table = rope_table(0, shape.positions, shape.head_dim, shape.rope_base)
        self.register_buffer("freqs_cis", table.to(torch.bfloat16))
        self._table: torch.Tensor | None = None

    def _load_from_state_dict(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super()._load_from_state_dict(*args, **kwargs)
        # Kept in float32 from the checkpoint's values, whatever dtype the model moves to.
        stored = self.freqs_cis
        self._table = None if stored.is_meta else stored.detach().float().clone()

    def table(self, end: int, device: torch.device) -> torch.Tensor:
        """float32 rotary table for positions ``[0, end)``: the stored one, extended."""
        table = self._table
        if table is None or table.device != device:
            table = self.freqs_cis.float().to(device)
        if len(table) < end:
            grown = max(end, 2 * len(table))
            more = rope_table(len(table), grown, self.shape.head_dim, self.shape.rope_base)
            table = torch.cat([table, more.to(device)])
        self._table = table
        return table

    def mask(self, length: int, device: torch.device) -> torch.Tensor:
        rows = torch.arange(length, device=device)[:, None]
        cols = torch.arange(length, device=device)[None, :]
        return (cols <= rows) & (cols > rows - self.shape.window)

    def forward(self, x: torch.Tensor, start: torch.Tensor | None = None) -> torch.Tensor:
        """``start``: int64 [B] on the host, the position of each row's first frame
        (0 for every row when None)."""
        batch, _, length = x.shape
        first = torch.zeros(1, dtype=torch.int64) if start is None else start.cpu()
        end = int(first.max()) + max(length, 1)
        positions = (first[:, None] + torch.arange(length)).to(x.device)
        table = self.table(end, x.device)[positions].expand(batch, -1, -1, -1)
        mask = self.mask(length, x.device)
        h = x.transpose(1, 2)
        for layer in self.layers:
            h = layer(h, table, mask)
        return self.norm(h).transpose(1, 2)
