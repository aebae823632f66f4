"""The Llama/Qwen2/Qwen3-style decoder: RMSNorm, rotary positions (NeoX layout),
grouped-query attention with q/k RMSNorms (or none: ``TransformerConfig.qk_norm``),
SwiGLU.

A checkpoint trained with interleaved (GPT-J) rotary positions loads by permuting
each head's q/k rows (``interleaved_to_neox``). ``rope_round``: a model whose
reference rounds its rotary tables (Fish Speech keeps them in bfloat16) gets the
same rounding here in every dtype.

Module and parameter names follow Hugging Face checkpoints' keys (``layers.N.self_attn.
q_proj``, ``input_layernorm``, ``mlp.gate_proj`` ...), so a state dict loads with
``strict=True`` and a missing tensor is named by its key. :meth:`Stack.prefill` and
:meth:`Stack.step` run it over the paged KV cache (``models.blocks.paged``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from models.attention import attention_bias, grouped_attention
from models.blocks.paged import paged_prefill, paged_step
from models.kernels.norms import fused_available, norm_rope, rms_norm
from models.paged_kv import PagedKVCache, prefill_layout
from models.upload import upload


@dataclass(frozen=True)
class TransformerConfig:
    """The shape of a stack (every family's Llama-style decoder)."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    qk_norm: bool = True
    """Per-head q/k RMSNorms (Qwen3's; Fish Speech's fast transformer has none)."""


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps
        self.fused = True
        """On CUDA, one fused kernel (``models.kernels.norms``) instead of seven."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused and fused_available(x):
            return rms_norm(x, self.weight, self.eps)
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def rope_inv_freq(head_dim: int, theta: float) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


def rope_cos_sin(
    inv_freq: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin of shape [*positions.shape, head_dim] (NeoX layout), computed in fp32."""
    freqs = positions.float()[..., None] * inv_freq.to(positions.device)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, heads, T, D]; cos/sin: [B, T, D]."""
    cos, sin = cos[:, None], sin[:, None]
    return x * cos + rotate_half(x) * sin


def interleaved_to_neox(weight: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Rows of a q/k projection [heads * D, ...] (or a q/k norm's weight [D]) trained
    with interleaved rotary pairs (2i, 2i + 1), reordered per head into the NeoX
    layout's pairs (i, i + D/2): the same attention scores, rotated the NeoX way."""
    order = torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))
    heads = weight.shape[0] // head_dim
    index = (torch.arange(heads)[:, None] * head_dim + order).reshape(-1)
    return weight[index]


class Attention(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.num_heads = cfg.num_heads
        self.num_kv_heads = cfg.num_kv_heads
        self.head_dim = d
        self.q_proj = nn.Linear(h, cfg.num_heads * d, bias=False)
        self.k_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * d, h, bias=False)
        self.qk_norm = cfg.qk_norm
        if cfg.qk_norm:
            self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(d, cfg.rms_norm_eps)

    def project(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [B, H, T, D], k/v [B, KVH, T, D] with RoPE applied."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, -1, self.head_dim)
        k = self.k_proj(x).view(b, t, -1, self.head_dim)
        v = self.v_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        if self.qk_norm and self.q_norm.fused and fused_available(x):
            q = norm_rope(q, self.q_norm.weight, self.q_norm.eps, cos, sin).transpose(1, 2)
            k = norm_rope(k, self.k_norm.weight, self.k_norm.eps, cos, sin).transpose(1, 2)
            return q, k, v
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        return apply_rope(q.transpose(1, 2), cos, sin), apply_rope(k.transpose(1, 2), cos, sin), v

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        """q [B, H, T, D] against k/v [B, KVH, S, D] (views of a cache are fine: only the
        last dim must be contiguous). ``bias``: from :func:`attention_bias`, or None for
        causal attention of the T queries as the last T of the S positions."""
        t, s = q.shape[2], k.shape[2]
        if bias is None and t > 1:
            causal = torch.ones(t, s, dtype=torch.bool, device=q.device).tril(s - t)[None]
            bias = attention_bias(causal, q.shape[1] // k.shape[1], q.dtype)
        out = grouped_attention(q, k, v, bias)
        b = out.shape[0]
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def qkv(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [B, H, T, D], k/v [B, KVH, T, D] of ``x`` [B, T, hidden]."""
        return self.self_attn.project(self.input_layernorm(x), *rope)

    def residual(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """``x`` after the attention output ``attended`` [B, H, T, D] and the MLP."""
        b, t = x.shape[:2]
        x = x + self.self_attn.o_proj(attended.transpose(1, 2).reshape(b, t, -1))
        return x + self.mlp(self.post_attention_layernorm(x))


class Stack(nn.Module):
    """Decoder layers + final norm (``model.*`` in the checkpoint)."""

    def __init__(self, cfg: TransformerConfig, rope_round: torch.dtype | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.rope_round = rope_round
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.register_buffer(
            "inv_freq", rope_inv_freq(cfg.head_dim, cfg.rope_theta), persistent=False
        )

    def rope(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin [*positions.shape, D] for these positions (rounded through
        ``rope_round`` first, where the reference rounds them)."""
        if self.rope_round is None:
            return rope_cos_sin(self.inv_freq, positions, dtype)
        cos, sin = rope_cos_sin(self.inv_freq, positions, self.rope_round)
        return cos.to(dtype), sin.to(dtype)

    def extend(
        self, x: torch.Tensor, caches: list[tuple[torch.Tensor, torch.Tensor]], start: int
    ) -> torch.Tensor:
        """A short sequence's next positions without the paged cache (a per-frame
        depth decoder): ``x`` [B, T, H] at positions ``start + t`` after the keys and
        values ``caches`` holds per layer (empty at first; extended in place);
        the final-norm hidden states [B, T, H]."""
        b, t, _ = x.shape
        positions = torch.arange(start, start + t, device=x.device)[None].expand(b, t)
        cos, sin = self.rope(positions, x.dtype)
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            q, k, v = attn.project(layer.input_layernorm(x), cos, sin)
            if len(caches) > i:
                k = torch.cat((caches[i][0], k), dim=2)
                v = torch.cat((caches[i][1], v), dim=2)
                caches[i] = (k, v)
            else:
                caches.append((k, v))
            x = x + attn.attend(q, k, v, None)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.norm(x)

    def bidirectional(self, x: torch.Tensor) -> torch.Tensor:
        """Every position attending to every other (an encoder over a short sequence, no
        cache): ``x`` [B, T, H] at positions 0..T-1; the final-norm hidden states."""
        b, t, _ = x.shape
        positions = torch.arange(t, device=x.device)[None].expand(b, t)
        rope = self.rope(positions, x.dtype)
        for layer in self.layers:
            q, k, v = layer.qkv(x, rope)
            x = layer.residual(x, grouped_attention(q, k, v, None))
        return self.norm(x)

    def prefill(
        self,
        embeds: torch.Tensor,
        cache: PagedKVCache,
        slots: Sequence[int],
        starts: Sequence[int],
        counts: Sequence[int] | None = None,
    ) -> torch.Tensor:
        """Row ``b``'s first ``counts[b]`` (default all T) of ``embeds`` [B, T, H] at
        positions ``starts[b] + t`` of slot ``slots[b]``; the rest of a row is padding.
        Writes the new keys/values into ``cache`` (whose blocks must be reserved) and
        returns the final-norm hidden states [B, T, H]. Every argument but ``embeds``
        is known to the host, so nothing here waits on the device."""
        attn0 = self.layers[0].self_attn
        groups = attn0.num_heads // attn0.num_kv_heads
        t = embeds.shape[1]
        layout = prefill_layout(cache, slots, starts, counts, t, groups, embeds.dtype)
        rope = self.rope(upload(layout[0], embeds.device), embeds.dtype)
        return self.norm(paged_prefill(self.layers, embeds, cache, layout, rope))

    def step(
        self,
        embeds: torch.Tensor,
        cache: PagedKVCache,
        slots: torch.Tensor,
        positions: torch.Tensor,
        max_length: int | None = None,
    ) -> torch.Tensor:
        """One position per row: ``embeds`` [B, H] at ``positions[b]`` of slot
        ``slots[b]`` (both on the device); the final-norm hidden states [B, H].
        Nothing here reads a host value (``max_length``, the batch's longest length
        after the step, is only needed where attention gathers: off CUDA), so a
        CUDA graph can capture it."""
        rope = self.rope(positions[:, None], embeds.dtype)
        x = paged_step(self.layers, embeds[:, None], cache, slots, positions, max_length, rope)
        return self.norm(x)[:, 0]
