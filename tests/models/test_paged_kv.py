"""The paged KV cache: blocks handed out as contexts grow, and attention over them."""

from __future__ import annotations

import numpy as np
import torch

from models.attention import grouped_attention
from models.cuda_graphs import default_buckets
from models.kernels.paged_decode import gathered_decode_attention
from models.paged_kv import PagedKVCache


def cache(blocks: int = 6, capacity: int = 64) -> PagedKVCache:
    return PagedKVCache(2, 3, capacity, blocks, 16, 2, 8, torch.float32, torch.device("cpu"))


def test_blocks_are_taken_as_contexts_grow_and_given_back() -> None:
    kv = cache()
    assert kv.reserve([(0, 1), (1, 17)]) == [] and kv.free_blocks == 3
    assert kv.reserve([(0, 16)]) == [] and kv.free_blocks == 3  # still one block
    assert kv.reserve([(0, 33)]) == [] and kv.free_blocks == 1
    owned = kv.host_tables[0, :3].tolist()
    assert len(set(owned)) == 3 and 0 not in owned  # block 0 is scratch
    assert torch.equal(kv.tables[0, :3], torch.tensor(owned, dtype=torch.int32))
    kv.release(0)
    assert kv.free_blocks == 4 and kv.owned[0] == 0


def test_a_context_that_cannot_get_blocks_is_named_and_keeps_what_it_had() -> None:
    kv = cache(blocks=2)
    assert kv.reserve([(0, 20)]) == []
    assert kv.reserve([(1, 20), (2, 5)]) == [1, 2]  # none left for either
    assert kv.owned[0] == 2
    kv = cache(blocks=10, capacity=32)
    assert kv.reserve([(0, 33)]) == [0] and kv.owned[0] == 0  # past the capacity


def test_gathered_decode_attention_equals_attention_over_contiguous_keys() -> None:
    """Keys written position by position through the block tables read back in order."""
    torch.manual_seed(0)
    kv = cache(blocks=12)
    lengths = [5, 40, 17]
    kv.reserve([(s, n) for s, n in enumerate(lengths)])
    dense_k = [torch.randn(2, n, 8) for n in lengths]
    dense_v = [torch.randn(2, n, 8) for n in lengths]
    for slot, n in enumerate(lengths):
        rows = torch.as_tensor(kv.rows_of(np.array([slot]), np.arange(n)[None]))[0]
        kv.k[0].view(-1, 2, 8)[rows] = dense_k[slot].transpose(0, 1)
        kv.v[0].view(-1, 2, 8)[rows] = dense_v[slot].transpose(0, 1)
    q = torch.randn(3, 4, 1, 8)
    slots = torch.arange(3)
    ours = gathered_decode_attention(
        q, kv.k[0], kv.v[0], kv.tables[slots], torch.tensor(lengths), max(lengths)
    )
    for slot in range(len(lengths)):
        want = grouped_attention(q[slot : slot + 1], dense_k[slot][None], dense_v[slot][None], None)
        torch.testing.assert_close(ours[slot : slot + 1], want, rtol=1e-5, atol=1e-5)


def test_graph_buckets_cover_every_batch_size() -> None:
    for largest in (1, 5, 64, 100, 1024):
        buckets = default_buckets(largest)
        assert buckets[-1] == largest and buckets == sorted(set(buckets))
        assert all(b <= largest for b in buckets)
    assert default_buckets(1024)[:4] == [1, 2, 4, 8] and len(default_buckets(1024)) < 40
