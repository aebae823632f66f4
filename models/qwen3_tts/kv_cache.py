"""Static KV cache: one row of fixed capacity per context slot, per layer."""

from __future__ import annotations

import torch


class SlotKVCache:
    """Keys/values laid out [layer][slot, position, kv_head, head_dim].

    That layout lets one advanced-indexing write store the new positions of
    every row of a batch, whatever slot and position each row is at.
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
        shape = (slots, capacity, kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.capacity = capacity

    def write(
        self,
        layer: int,
        slots: torch.Tensor,
        positions: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
    ) -> None:
        """slots [B], positions [B, T]; k/v [B, kv_heads, T, head_dim]."""
        rows = slots[:, None].expand_as(positions)
        self.k[layer][rows, positions] = k.transpose(1, 2)
        self.v[layer][rows, positions] = v.transpose(1, 2)

    def read(
        self, layer: int, slots: torch.Tensor, length: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The first ``length`` positions of each slot, as [B, kv_heads, length, head_dim]."""
        k = self.k[layer][slots, :length].transpose(1, 2)
        v = self.v[layer][slots, :length].transpose(1, 2)
        return k, v
