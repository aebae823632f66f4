"""Paged KV cache: fixed-size blocks of positions handed to contexts as they grow.

A context holds only the blocks its positions reach, so memory follows the
lengths actually spoken rather than a full-length slot per context: at 1.7B a
position costs 112 KiB (28 layers, bf16), a 2,048-position slot 224 MiB, and a
thousand contexts of a few hundred positions fit where a thousand full slots
would not. Block 0 is scratch: padding rows and unused table entries point at
it, so a padded batch writes there and nothing reads it as a real position.

The host keeps the block tables and allocates; the device holds a copy of the
tables that kernels read (updated with one upload when blocks are handed out).
Position ``p`` of slot ``s`` lives at row ``tables[s, p // block] * block + p % block``
of each layer's pool viewed as [rows, kv_heads, head_dim].
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from models.attention import attention_bias, grouped_attention
from models.kernels.paged_decode import paged_decode_attention
from models.upload import upload


class PagedKVCache:
    def __init__(
        self,
        layers: int,
        slots: int,
        capacity: int,
        blocks: int,
        block_size: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        """``slots`` contexts of at most ``capacity`` positions each, sharing ``blocks``
        blocks of ``block_size`` positions (one more, block 0, is scratch). Slot
        ``slots`` is the scratch slot padding rows use."""
        if blocks < 1:
            raise ValueError("the KV cache needs at least one block")
        self.block_size = block_size
        self.capacity = capacity
        self.max_blocks = -(-capacity // block_size)
        shape = (blocks + 1, block_size, kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.kv_heads, self.head_dim = kv_heads, head_dim
        self.device = device
        self.scratch_slot = slots
        self.host_tables = np.zeros((slots + 1, self.max_blocks), np.int64)
        self.tables = torch.zeros((slots + 1, self.max_blocks), dtype=torch.int32, device=device)
        self.owned = np.zeros(slots + 1, np.int64)
        """Blocks each slot holds (its table's first entries)."""
        self._free = list(range(blocks, 0, -1))
        self.total_blocks = blocks

    @staticmethod
    def bytes_per_block(
        layers: int, block_size: int, kv_heads: int, head_dim: int, dtype: torch.dtype
    ) -> int:
        return 2 * layers * block_size * kv_heads * head_dim * dtype.itemsize

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    @property
    def usage(self) -> tuple[int, int]:
        """(blocks in use, blocks in the pool), for metrics."""
        return self.total_blocks - len(self._free), self.total_blocks

    def reserve(self, wanted: Sequence[tuple[int, int]]) -> list[int]:
        """Back positions ``[0, end)`` of each ``(slot, end)`` with blocks; the device
        tables take the new entries in one upload. Returns the slots that could not
        get their blocks (the pool is spent, or ``end`` is past the capacity); those
        keep what they had."""
        failed: list[int] = []
        rows: list[int] = []
        cols: list[int] = []
        ids: list[int] = []
        for slot, end in wanted:
            need = -(-end // self.block_size) - int(self.owned[slot])
            if need <= 0:
                continue
            if end > self.capacity or need > len(self._free):
                failed.append(slot)
                continue
            first = int(self.owned[slot])
            for col in range(first, first + need):
                block = self._free.pop()
                self.host_tables[slot, col] = block
                rows.append(slot)
                cols.append(col)
                ids.append(block)
            self.owned[slot] += need
        if ids:
            index = upload(np.asarray([rows, cols], np.int64), self.device)
            self.tables.index_put_((index[0], index[1]), upload(ids, self.device, torch.int32))
        return failed

    def release(self, slot: int) -> None:
        """Give a slot's blocks back. Its table keeps the stale ids; they are only read
        below the slot's next owner's length, which it allocates anew."""
        owned = int(self.owned[slot])
        self._free.extend(self.host_tables[slot, :owned].tolist())
        self.host_tables[slot, :owned] = 0
        self.owned[slot] = 0

    # -- host-known positions (prefill) --------------------------------------------

    def rows_of(self, slots: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Pool rows of ``positions`` [B, T] of ``slots`` [B] (host)."""
        blocks = self.host_tables[slots[:, None], positions // self.block_size]
        return blocks * self.block_size + positions % self.block_size

    def prefill_attend(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        where: torch.Tensor,
        read: torch.Tensor,
        bias: torch.Tensor,
    ) -> torch.Tensor:
        """Store k/v [B, KVH, T, D] at pool rows ``where`` [B, T]; attend q [B, H, T, D]
        over the rows ``read`` [B, S] (a gathered copy) with ``bias``."""
        self._store(layer, where, k, v)
        keys = self._flat(self.k[layer])[read].permute(0, 2, 1, 3)
        values = self._flat(self.v[layer])[read].permute(0, 2, 1, 3)
        return grouped_attention(q, keys, values, bias)

    # -- device-known positions (decode, graph-capturable) ---------------------------

    def rows_on_device(self, slots: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Pool rows of one position per row: slots/positions [B] on the device."""
        blocks = self.tables[slots, positions // self.block_size].long()
        return blocks * self.block_size + positions % self.block_size

    def decode_attend(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        where: torch.Tensor,
        slots: torch.Tensor,
        lengths: torch.Tensor,
        max_length: int | None,
    ) -> torch.Tensor:
        """One new position per row: store k/v [B, KVH, 1, D] at rows ``where`` [B] and
        attend q [B, H, 1, D] over each row's first ``lengths[b]`` positions. On CUDA a
        kernel reads the blocks in place (no host value needed, so it can be captured
        in a graph); elsewhere the blocks are gathered, which needs ``max_length``."""
        self._store(layer, where[:, None], k, v)
        return paged_decode_attention(
            q, self.k[layer], self.v[layer], self.tables[slots], lengths, max_length
        )

    def _store(self, layer: int, where: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        b, t = where.shape
        flat = where.reshape(-1)
        self._flat(self.k[layer])[flat] = k.transpose(1, 2).reshape(b * t, self.kv_heads, -1)
        self._flat(self.v[layer])[flat] = v.transpose(1, 2).reshape(b * t, self.kv_heads, -1)

    def _flat(self, pool: torch.Tensor) -> torch.Tensor:
        return pool.view(-1, self.kv_heads, self.head_dim)


def prefill_layout(
    cache: PagedKVCache,
    slots: Sequence[int],
    starts: Sequence[int],
    counts: Sequence[int] | None,
    t: int,
    groups: int,
    dtype: torch.dtype,
) -> tuple[np.ndarray, torch.Tensor, torch.Tensor, torch.Tensor]:
    """For a padded batch (row b runs its first ``counts[b]`` of T positions from
    ``starts[b]``): host positions [B, T], device write rows [B, T] (padding to
    scratch), read rows [B, S] and the attention bias, all worked out on the host."""
    host_slots = np.asarray(slots, np.int64)
    host_starts = np.asarray(starts, np.int64)
    b = len(host_slots)
    host_counts = np.full(b, t, np.int64) if counts is None else np.asarray(counts, np.int64)
    length = int((host_starts + host_counts).max())
    if length > cache.capacity:
        raise RuntimeError(f"context longer than the KV capacity {cache.capacity}")
    positions = host_starts[:, None] + np.arange(t)[None]
    padding = np.arange(t)[None] >= host_counts[:, None]
    where = np.where(padding, 0, cache.rows_of(host_slots, np.minimum(positions, length - 1)))
    span = np.arange(length)[None].repeat(b, 0)
    reach = host_starts + host_counts
    read = np.where(span < reach[:, None], cache.rows_of(host_slots, span), 0)
    device = cache.device
    allowed = torch.arange(length, device=device) <= upload(positions, device)[:, :, None]
    bias = attention_bias(allowed, groups, dtype)
    return positions, upload(where, device), upload(read, device), bias
