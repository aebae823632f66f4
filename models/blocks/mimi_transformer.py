"""Mimi's transformers (one before the quantizer, one after): causal, each step
attending to the ``context`` steps up to itself, interleaved rotary positions,
LayerNorm, GELU MLP, layer scales; whole or streamed.

A stream keeps the keys and values of its last ``context - 1`` steps per layer in a
ring (step p in slot ``p % (context - 1)``, plus one slot that padded steps write
into and nobody reads), so a chunk's steps see what they would see in the whole
sequence: with ``window="exact"`` step p attends to steps p - context + 1 .. p,
whatever the chunking. ``window="moshi"`` reproduces ``moshi``'s own streaming one
frame (``frame_steps`` steps) per call, as VoXtream's generator decodes: moshi's
ring cache of ``context`` entries holds a call's new keys too, so every step of a
frame ending at step e attends to steps e - context + 1 .. itself (a frame's first
step loses its oldest key once a stream passes ``context`` steps). That too holds
whatever our chunking: the window depends on each step's frame, not on the call.

Module names follow Kyutai's checkpoints (``moshi.modules.transformer``:
``transformer.layers.N.self_attn.in_proj_weight`` (q, k, v stacked),
``self_attn.out_proj.weight``, ``norm1``, ``norm2``, ``linear1``, ``linear2``,
``layer_scale_1.scale``, ``layer_scale_2.scale``).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from models.blocks.mimi_conv import Stateful, StreamRows
from models.kit.tables import Column

WINDOWS = ("exact", "moshi")


def rope_angles(
    positions: torch.Tensor, head_dim: int, max_period: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [B, 1, T, head_dim / 2] (float32) of ``positions`` [B, T], computed
    as moshi computes them (so whole-sequence positions agree to the bit)."""
    half = head_dim // 2
    ds = torch.arange(half, device=positions.device, dtype=torch.float32)
    freqs = torch.exp(ds * (-math.log(max_period) * 2 / head_dim))
    angles = freqs * positions.float()[:, None, :, None]
    return torch.cos(angles), torch.sin(angles)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the interleaved pairs (x[2i], x[2i+1]) of ``x`` [B, H, T, D] in float32."""
    pairs = x.float().unflatten(-1, (-1, 2))
    real, imag = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack((real * cos - imag * sin, real * sin + imag * cos), dim=-1)
    return rotated.flatten(-2).to(x.dtype)


class LayerScale(nn.Module):
    def __init__(self, channels: int, init: float = 0.01) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((channels,), init))


class Attention(nn.Module):
    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        if d_model % num_heads or (d_model // num_heads) % 2:
            raise ValueError(f"d_model {d_model} must split into {num_heads} heads of an even size")
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * d_model, d_model))
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    def qkv(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, d] -> rotated q, rotated k and v, each [B, H, T, head_dim]."""
        b, t, _ = x.shape
        q, k, v = F.linear(x, self.in_proj_weight).view(b, t, 3, self.num_heads, -1).unbind(2)
        q, k, v = (y.transpose(1, 2) for y in (q, k, v))
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def out(self, attended: torch.Tensor) -> torch.Tensor:
        return self.out_proj(attended.transpose(1, 2).flatten(2))


class TransformerLayer(nn.Module):
    def __init__(self, d_model: int, num_heads: int, dim_feedforward: int) -> None:
        super().__init__()
        self.self_attn = Attention(d_model, num_heads)
        self.norm1 = nn.LayerNorm(d_model, eps=1e-5)
        self.norm2 = nn.LayerNorm(d_model, eps=1e-5)
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=False)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=False)
        self.layer_scale_1 = LayerScale(d_model)
        self.layer_scale_2 = LayerScale(d_model)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        update = self.linear2(F.gelu(self.linear1(self.norm2(x))))
        return x + self.layer_scale_2.scale * update


class _Layers(nn.Module):
    """``StreamingTransformer``: the checkpoint's ``transformer.layers`` level."""

    def __init__(self, d_model: int, num_heads: int, num_layers: int, ffn: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            TransformerLayer(d_model, num_heads, ffn) for _ in range(num_layers)
        )


class MimiTransformer(Stateful):
    """``ProjectedTransformer`` of Mimi (input and output widths equal to ``d_model``:
    no projections), in the conv layout: [B, d_model, T] in and out."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_layers: int,
        dim_feedforward: int,
        context: int,
        max_period: float,
    ) -> None:
        super().__init__()
        if context < 2:
            raise ValueError(f"context must be at least 2 steps, got {context}")
        self.transformer = _Layers(d_model, num_heads, num_layers, dim_feedforward)
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.context = context
        self.max_period = max_period

    @property
    def layers(self) -> nn.ModuleList:
        return self.transformer.layers

    @property
    def keep(self) -> int:
        """Keys a stream keeps per layer: all that a next step can see."""
        return self.context - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Whole sequences [B, d_model, T] from position 0."""
        h = x.transpose(1, 2)
        b, t, _ = h.shape
        positions = torch.arange(t, device=h.device)[None].expand(b, t)
        cos, sin = rope_angles(positions, self.head_dim, self.max_period)
        delta = positions[:, :, None] - positions[:, None, :]
        mask = ((delta >= 0) & (delta < self.context))[:, None]
        for layer in self.layers:
            attn = layer.self_attn
            q, k, v = attn.qkv(layer.norm1(h), cos, sin)
            attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            h = h + layer.layer_scale_1.scale * attn.out(attended)
            h = layer.mlp(h)
        return h.transpose(1, 2)

    def state_columns(self, dtype: torch.dtype) -> dict[str, Column]:
        shape = (self.keep + 1, self.num_heads, self.head_dim)
        columns = {}
        for i in range(len(self.layers)):
            columns[f"{self.state_key}.{i}.k"] = Column(dtype, shape)
            columns[f"{self.state_key}.{i}.v"] = Column(dtype, shape)
        return columns

    def step(
        self,
        x: torch.Tensor,
        lengths: torch.Tensor,
        starts: torch.Tensor,
        rows: StreamRows,
        window: str = "exact",
        frame_steps: int = 1,
    ) -> torch.Tensor:
        """The next steps of each row's stream: ``x`` [B, d_model, T], row b's first
        ``lengths[b]`` steps real, its first step at position ``starts[b]`` (all on
        the device: nothing here waits for the host). ``frame_steps``: steps per
        code frame (for ``window="moshi"``)."""
        if window not in WINDOWS:
            raise ValueError(f"window must be one of {WINDOWS}, got {window!r}")
        h = x.transpose(1, 2)
        b, t, _ = h.shape
        dev, keep = h.device, self.keep
        steps = torch.arange(t, device=dev)
        q_pos = starts[:, None] + steps[None]  # [B, T]
        cos, sin = rope_angles(q_pos, self.head_dim, self.max_period)
        # Slot j of the ring holds the latest step below `start` that is j modulo keep
        # (none yet when that is negative); the last slot holds nothing.
        slot = torch.arange(keep, device=dev)
        last = starts[:, None] - 1
        cached = last - torch.remainder(last - slot[None], keep)
        cached = torch.cat((cached, torch.full_like(cached[:, :1], -1)), dim=1)
        k_pos = torch.cat((cached, q_pos), dim=1)  # [B, keep + 1 + T]
        if window == "exact":
            lowest = q_pos - (self.context - 1)
        else:  # counted from the last step of the query's frame
            frame_start = torch.div(q_pos, frame_steps, rounding_mode="floor") * frame_steps
            lowest = frame_start + frame_steps - 1 - (self.context - 1)
        kp, qp = k_pos[:, None, :], q_pos[:, :, None]
        mask = ((kp >= 0) & (kp <= qp) & (kp >= lowest[:, :, None]))[:, None]
        # New steps go to their slots, the real ones among the last `keep` only;
        # the others (padding) to the spare slot. As one index into the tables seen
        # as [rows * (keep + 1), heads, head_dim] (index_copy_: graph-capturable).
        kept = (steps[None] < lengths[:, None]) & (steps[None] >= lengths[:, None] - keep)
        write_slot = torch.where(kept, torch.remainder(q_pos, keep), keep)
        write_at = (rows.index[:, None] * (keep + 1) + write_slot).reshape(-1)
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            q, k, v = attn.qkv(layer.norm1(h), cos, sin)
            key_k, key_v = f"{self.state_key}.{i}.k", f"{self.state_key}.{i}.v"
            k_all = torch.cat((rows.read(key_k).transpose(1, 2).to(k.dtype), k), dim=2)
            v_all = torch.cat((rows.read(key_v).transpose(1, 2).to(v.dtype), v), dim=2)
            for key, new in ((key_k, k), (key_v, v)):
                flat = rows.table(key).flatten(0, 1)
                flat.index_copy_(0, write_at, new.transpose(1, 2).flatten(0, 1).to(flat.dtype))
            attended = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask)
            h = h + layer.layer_scale_1.scale * attn.out(attended)
            h = layer.mlp(h)
        return h.transpose(1, 2)
