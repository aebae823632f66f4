"""Qwen3-style transformer pieces shared by the talker and the code predictor.

Module and parameter names follow the checkpoint's keys, so a state dict
loads with ``strict=True`` and a missing tensor is named by its key.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from models.attention import attention_bias, grouped_attention
from models.kernels.norms import fused_available, norm_rope, rms_norm
from models.qwen3_tts.config import TransformerConfig


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
        self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(d, cfg.rms_norm_eps)

    def project(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [B, H, T, D], k/v [B, KVH, T, D] with RoPE applied."""
        b, t, _ = x.shape
        if self.q_norm.fused and fused_available(x):
            q = self.q_proj(x).view(b, t, -1, self.head_dim)
            k = self.k_proj(x).view(b, t, -1, self.head_dim)
            v = self.v_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
            q = norm_rope(q, self.q_norm.weight, self.q_norm.eps, cos, sin).transpose(1, 2)
            k = norm_rope(k, self.k_norm.weight, self.k_norm.eps, cos, sin).transpose(1, 2)
            return q, k, v
        q = self.q_norm(self.q_proj(x).view(b, t, -1, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, -1, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

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


class Stack(nn.Module):
    """Decoder layers + final norm (``model.*`` in the checkpoint)."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.register_buffer(
            "inv_freq", rope_inv_freq(cfg.head_dim, cfg.rope_theta), persistent=False
        )
