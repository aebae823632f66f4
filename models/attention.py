"""Attention over slot-indexed KV caches, shared by the model families.

Grouped-query attention without copying keys/values per query head, an additive
mask built once per forward in the layout the fused kernels read, and the choice
of kernels a growing KV length needs.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import torch
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def attention_bias(allowed: torch.Tensor, groups: int, dtype: torch.dtype) -> torch.Tensor:
    """The additive mask :func:`grouped_attention` takes, from ``allowed`` bool [B, T, S]
    (True = attend): [B, 1, groups * T, S], 0 or -inf, in the queries' dtype. Build it
    once per forward: every layer then passes it to the attention kernel as it is (a
    bool mask, or a row stride the fused kernels cannot read, is converted or copied
    again in every layer). Rows are padded to 16 elements for that reason."""
    b, t, s = allowed.shape
    padded = -(-s // 16) * 16
    bias = torch.full((b, 1, groups, t, padded), float("-inf"), dtype=dtype, device=allowed.device)
    bias[..., :s].masked_fill_(allowed[:, None, None], 0.0)
    return bias.view(b, 1, groups * t, padded)[..., :s]


_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def without_cudnn_attention() -> AbstractContextManager[None]:
    """Scaled-dot-product attention on any backend but cuDNN's. PyTorch prefers cuDNN
    on Hopper for a masked call, and cuDNN plans a kernel on the host for every new
    shape: the talker's key length grows by one each step, so each decode step
    planned anew (H200, 1.7B eager, 64 contexts: 213 ms a step with it, 99 without)."""
    return sdpa_kernel(_BACKENDS)


def grouped_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """Grouped-query attention without copying keys/values per query head: the query
    heads sharing a kv head are folded into the query length (``bias`` is folded the
    same way by :func:`attention_bias`). Returns [B, H, T, D]."""
    b, h, t, d = q.shape
    kv_heads = k.shape[1]
    folded = q.reshape(b, kv_heads, (h // kv_heads) * t, d)
    out = F.scaled_dot_product_attention(folded, k, v, attn_mask=bias)
    # CUDA kernels may hand the output back [B, T, H, D]-strided: reshape, not view.
    return out.reshape(b, h, t, d)
