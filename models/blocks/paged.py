"""The decoder layer loop over the paged KV cache, for any decoder whose layers
give their attention inputs and take the attention's output back.

A layer offers ``qkv(x, rope) -> (q, k, v)`` (``[B, heads, T, D]`` and
``[B, kv_heads, T, D]``) and ``residual(x, attended) -> x`` (the attention output
projected and added, then the MLP). The cache attends (``PagedKVCache``); what a
position is (rotary angles, learned embeddings) stays with the decoder.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import numpy as np
import torch

from models.paged_kv import PagedKVCache


class PagedLayer(Protocol):
    def qkv(
        self, x: torch.Tensor, rope: Any
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...

    def residual(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor: ...


def paged_prefill(
    layers: Iterable[Any],
    x: torch.Tensor,
    cache: PagedKVCache,
    layout: tuple[np.ndarray, Any, Any, Any],
    rope: Any = None,
) -> torch.Tensor:
    """Padded prompt rows ``x`` [B, T, H] through every layer; ``layout`` is
    ``models.paged_kv.prefill_layout``'s (positions, where, read, bias)."""
    _, where, read, bias = layout
    for i, layer in enumerate(layers):
        q, k, v = layer.qkv(x, rope)
        x = layer.residual(x, cache.prefill_attend(i, q, k, v, where, read, bias))
    return x


def paged_step(
    layers: Iterable[Any],
    x: torch.Tensor,
    cache: PagedKVCache,
    slots: torch.Tensor,
    positions: torch.Tensor,
    max_length: int | None,
    rope: Any = None,
) -> torch.Tensor:
    """One position per row, ``x`` [B, 1, H] at ``positions`` of ``slots`` (device
    tensors), through every layer; reads no host value."""
    where = cache.rows_on_device(slots, positions)
    lengths = positions + 1
    for i, layer in enumerate(layers):
        q, k, v = layer.qkv(x, rope)
        out = cache.decode_attend(i, q, k, v, where, slots, lengths, max_length)
        x = layer.residual(x, out)
    return x
