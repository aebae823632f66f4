"""Static KV cache: one row of fixed capacity per context slot, per layer (any decoder family)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from models.attention import grouped_attention
from models.upload import upload


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


@dataclass(frozen=True)
class SlotBatch:
    """Where the rows of one batched call sit in a :class:`SlotKVCache`, worked out
    on the host (nothing here waits for the device).

    Row ``b`` runs its first ``counts[b]`` of T positions at ``starts[b] + t`` of
    slot ``slots[b]``; the rest of the row is padding, written to the scratch
    position. Attention reads the range of slots the batch spans in place; when
    the slots are consecutive in batch order (the usual decode step) the batch is
    that range, otherwise the queries are spread over it and gathered back.
    """

    slots: torch.Tensor
    """[B] on the device."""
    rows: torch.Tensor
    """[B]: each row's place in the spanned range."""
    first: int
    end: int
    packed: bool
    length: int
    """Positions attention reads: the longest row's end."""
    positions: np.ndarray
    """Host int64 [B, T]: each position's index in its slot."""
    where: torch.Tensor
    """[B, T] write positions (``capacity`` for padding)."""
    allowed: torch.Tensor
    """Bool [end - first, T, length]: which keys each query of the range may read."""

    @classmethod
    def of(
        cls,
        cache: SlotKVCache,
        slots: Sequence[int],
        starts: Sequence[int],
        counts: Sequence[int] | None,
        t: int,
        device: torch.device,
    ) -> SlotBatch:
        host_starts = np.asarray(starts, np.int64)
        b = len(host_starts)
        host_counts = np.full(b, t, np.int64) if counts is None else np.asarray(counts, np.int64)
        length = int((host_starts + host_counts).max())
        if length > cache.capacity:
            raise RuntimeError(f"context longer than the KV capacity {cache.capacity}")
        host_slots = np.asarray(slots, np.int64)
        first, end = int(host_slots.min()), int(host_slots.max()) + 1
        positions = host_starts[:, None] + np.arange(t)[None]
        padding = np.arange(t)[None] >= host_counts[:, None]
        # Slots of the range outside the batch get position 0: finite, unused output.
        spanned = np.zeros((end - first, t), np.int64)
        spanned[host_slots - first] = positions
        slot_ids = upload(host_slots, device)
        return cls(
            slots=slot_ids,
            rows=slot_ids - first,
            first=first,
            end=end,
            packed=end - first == b and bool((np.diff(host_slots) == 1).all()),
            length=length,
            positions=positions,
            where=upload(np.where(padding, cache.capacity, positions), device),
            allowed=torch.arange(length, device=device) <= upload(spanned, device)[:, :, None],
        )

    def attend(
        self,
        cache: SlotKVCache,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        bias: torch.Tensor,
    ) -> torch.Tensor:
        """Store the batch's new keys/values of ``layer`` and attend over the slots read
        in place: q [B, H, T, D], k/v [B, KVH, T, D] -> [B, H, T, D]."""
        cache.write(layer, self.slots, self.where, k, v)
        k_all, v_all = cache.view(layer, self.first, self.end, self.length)
        if self.packed:
            return grouped_attention(q, k_all, v_all, bias)
        spread = q.new_zeros((self.end - self.first, *q.shape[1:]))
        spread[self.rows] = q
        return grouped_attention(spread, k_all, v_all, bias)[self.rows]
