"""Prompt positions as one-position rows (what the prefill graphs run) equal the
padded prefill: each row attends to its slot's positions up to its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from models.paged_kv import PagedKVCache
from models.qwen3_tts.loader import load


def test_prompt_rows_equal_padded_prefill(ckpt_dirs: dict[str, Path]) -> None:
    model = load({"max_contexts": 3, "kv_capacity": 64}, ckpt_dirs["custom_voice"])
    talker = model.runner.talker  # type: ignore[attr-defined]
    stack = talker.cfg.stack
    torch.manual_seed(0)
    counts, starts = [7, 4, 5], [0, 0, 9]

    def cache() -> PagedKVCache:
        kv = PagedKVCache(
            stack.num_layers, 3, 64, 12, 16, stack.num_kv_heads, stack.head_dim,
            torch.float32, torch.device("cpu"),
        )  # fmt: skip
        kv.reserve([(s, starts[s] + counts[s]) for s in range(3)])
        return kv

    earlier = torch.randn(1, starts[2], stack.hidden_size)
    embeds = torch.randn(3, max(counts), stack.hidden_size)
    padded, rows = cache(), cache()
    with torch.no_grad():
        for kv in (padded, rows):  # slot 2 already holds 9 positions
            talker(earlier, kv, [2], [0])
        want = talker(embeds, padded, [0, 1, 2], starts, counts)
        flat = torch.cat([embeds[b, : counts[b]] for b in range(3)])
        slots = torch.as_tensor(np.repeat(np.arange(3), counts))
        positions = torch.as_tensor(
            np.concatenate([starts[b] + np.arange(counts[b]) for b in range(3)])
        )
        got = talker.step(
            flat, rows, slots, positions, max(s + c for s, c in zip(starts, counts, strict=True))
        )
    for b, (row, count) in enumerate(zip(np.cumsum([0, *counts[:-1]]), counts, strict=True)):
        torch.testing.assert_close(got[row : row + count], want[b, :count], rtol=1e-4, atol=1e-5)
    for layer in range(stack.num_layers):  # the same keys stored where each position lives
        for b in range(3):
            at = torch.as_tensor(
                padded.rows_of(np.array([b]), np.arange(starts[b] + counts[b])[None])
            )[0]
            torch.testing.assert_close(
                rows._flat(rows.k[layer])[at], padded._flat(padded.k[layer])[at]
            )
