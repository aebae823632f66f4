"""The GPT-2 decoder: learned absolute positions, LayerNorm, fused QKV, GELU MLP.

Module and parameter names follow GPT-2 checkpoints (``wpe``, ``h.N.attn.c_attn``,
``h.N.ln_1``, ``ln_f`` ...), so a state dict loads strictly. :meth:`Gpt2.prefill` and
:meth:`Gpt2.step` run it over the paged KV cache (``models.blocks.paged``); its token
embeddings belong to the family (Chatterbox's T3 feeds its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from models.blocks.paged import paged_prefill, paged_step
from models.paged_kv import PagedKVCache, prefill_layout
from models.upload import upload


class Gpt2Config(Protocol):
    """The shape of a GPT-2 stack (a family's config object has these attributes)."""

    hidden: int
    layers: int
    heads: int
    positions: int
    eps: float

    @property
    def head_dim(self) -> int: ...


class Conv1D(nn.Module):
    """GPT-2's linear layer: weight stored [in, out]; computed as the checkpoint's
    authors compute it (``addmm``), so fp32 results match theirs bit for bit."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight)
        return out.view(*x.shape[:-1], -1)


class Attention(nn.Module):
    def __init__(self, cfg: Gpt2Config) -> None:
        super().__init__()
        self.c_attn = Conv1D(cfg.hidden, 3 * cfg.hidden)
        self.c_proj = Conv1D(cfg.hidden, cfg.hidden)
        self.heads = cfg.heads


class MLP(nn.Module):
    def __init__(self, cfg: Gpt2Config) -> None:
        super().__init__()
        self.c_fc = Conv1D(cfg.hidden, 4 * cfg.hidden)
        self.c_proj = Conv1D(4 * cfg.hidden, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: Gpt2Config) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.mlp = MLP(cfg)
        self.head_dim = cfg.head_dim

    def qkv(self, x: torch.Tensor, rope: Any = None) -> tuple[torch.Tensor, ...]:
        """q, k, v [B, heads, T, D] of ``x`` [B, T, hidden] (positions are in ``x``)."""
        b, t = x.shape[:2]
        qkv = self.attn.c_attn(self.ln_1(x)).view(b, t, 3, self.attn.heads, self.head_dim)
        return tuple(qkv[:, :, j].transpose(1, 2) for j in range(3))

    def residual(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """``x`` after the attention output ``attended`` [B, heads, T, D] and the MLP."""
        b, t = x.shape[:2]
        x = x + self.attn.c_proj(attended.transpose(1, 2).reshape(b, t, -1))
        return x + self.mlp(self.ln_2(x))


class Gpt2(nn.Module):
    def __init__(self, cfg: Gpt2Config) -> None:
        super().__init__()
        self.wpe = nn.Embedding(cfg.positions, cfg.hidden)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.max_position = cfg.positions - 1

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
        Writes keys/values into ``cache`` (its blocks reserved); returns the final-norm
        hidden states [B, T, H]. Every argument but ``embeds`` is a host value."""
        t = embeds.shape[1]
        layout = prefill_layout(cache, slots, starts, counts, t, 1, embeds.dtype)
        # Padding positions read a real position embedding; their output is never used.
        positions = np.minimum(layout[0], self.max_position)
        x = embeds + self.wpe(upload(positions, embeds.device))
        return self.ln_f(paged_prefill(self.h, x, cache, layout))

    def step(
        self,
        embeds: torch.Tensor,
        cache: PagedKVCache,
        slots: torch.Tensor,
        positions: torch.Tensor,
        max_length: int | None = None,
    ) -> torch.Tensor:
        """One position per row: ``embeds`` [B, H] at ``positions[b]`` of slot
        ``slots[b]`` (both on the device); the final-norm hidden states [B, H]. No host
        value is read (``max_length`` is only needed where attention gathers: off
        CUDA), so a CUDA graph can capture it."""
        x = (embeds + self.wpe(positions.clamp(max=self.max_position)))[:, None]
        return self.ln_f(paged_step(self.h, x, cache, slots, positions, max_length))[:, 0]
