"""How many paged KV blocks a family's slots share.

Enough for every slot at its full capacity, or on a GPU as many as a share of the
memory free after the weights holds (measured when called), whichever is fewer:
contexts take blocks as they grow, so many short ones and a few long ones share a
pool no bigger than the device affords.
"""

from __future__ import annotations

import logging

import torch

from models.blocks.llama import TransformerConfig
from models.paged_kv import PagedKVCache

log = logging.getLogger(__name__)


def kv_blocks(
    max_contexts: int,
    kv_capacity: int,
    block_size: int,
    memory_fraction: float,
    stack: TransformerConfig,
    dtype: torch.dtype,
    device: torch.device,
) -> int:
    """Blocks of ``block_size`` positions for ``max_contexts`` slots of ``kv_capacity``
    positions; on CUDA at most ``memory_fraction`` of the free memory (the errors name
    the ``model.*`` options to change)."""
    if max_contexts < 1:
        raise ValueError(f"model.max_contexts must be at least 1, got {max_contexts}")
    if block_size not in (16, 32, 64, 128):
        raise ValueError(f"model.kv_block_size must be 16, 32, 64 or 128, got {block_size}")
    full = max_contexts * -(-kv_capacity // block_size)
    if device.type != "cuda":
        return full
    if not 0 < memory_fraction <= 0.95:
        raise ValueError(
            f"model.kv_memory_fraction must be above 0 and at most 0.95, got {memory_fraction}"
        )
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info(device)
    per_block = PagedKVCache.bytes_per_block(
        stack.num_layers, block_size, stack.num_kv_heads, stack.head_dim, dtype
    )
    fits = int(free * memory_fraction) // per_block
    if fits < -(-kv_capacity // block_size):
        raise ValueError(
            f"a KV block of {block_size} positions needs {per_block / 2**20:.1f} MiB "
            f"and {memory_fraction:g} of the {free / 2**30:.1f} GiB free does not "
            "hold one full context: lower model.kv_capacity or raise model.kv_memory_fraction"
        )
    if fits < full:
        log.info(
            "%d KV blocks (%d positions) in %.0f%% of the %.1f GiB free, shared by %d contexts "
            "as they grow",
            fits,
            fits * block_size,
            100 * memory_fraction,
            free / 2**30,
            max_contexts,
        )
    return min(full, fits)
