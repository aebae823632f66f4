"""Static KV cache: one row of fixed capacity per context slot, per layer (any decoder family)."""

from __future__ import annotations

import torch


class SlotKVCache:
    """Keys/values laid out [layer][slot, kv_head, position, head_dim].

    One advanced-indexing write stores the new positions of every row of a
    batch, whatever slot and position each row is at; attention reads a range
    of slots as a view of the buffer (no per-step copy). Position ``capacity``
    is scratch: the padding of a batched prefill is written there and never read.
    """

    def __init__(
        self,
        layers: int,
        slots: int,
        capacity: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        shape = (slots, kv_heads, capacity + 1, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.capacity = capacity

    @staticmethod
    def bytes_per_slot(
        layers: int, capacity: int, kv_heads: int, head_dim: int, dtype: torch.dtype
    ) -> int:
        return 2 * layers * kv_heads * (capacity + 1) * head_dim * dtype.itemsize

    def write(
        self,
        layer: int,
        slots: torch.Tensor,
        positions: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
    ) -> None:
        """slots [B], positions [B, T] (``capacity`` for padding); k/v [B, kv_heads, T, head_dim]."""
        rows = slots[:, None].expand_as(positions)
        self.k[layer][rows, :, positions] = k.transpose(1, 2)
        self.v[layer][rows, :, positions] = v.transpose(1, 2)

    def view(
        self, layer: int, first: int, end: int, length: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Slots ``first:end``, positions ``:length``, as views [end - first, kv_heads, length, head_dim]."""
        return (
            self.k[layer][first:end, :, :length],
            self.v[layer][first:end, :, :length],
        )
