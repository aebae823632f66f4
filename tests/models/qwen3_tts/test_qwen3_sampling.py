"""Batched sampling never draws an id its row masked, whatever the random bits."""

from __future__ import annotations

import torch

from models.qwen3_tts.sampling import RowSettings, sample, talker_mask
from models.random_draws import UNIT_BITS, open_unit


def test_every_random_bit_pattern_maps_strictly_inside_the_unit_interval() -> None:
    units = open_unit(torch.arange(1 << UNIT_BITS, dtype=torch.long))
    assert units.dtype == torch.float32
    assert float(units.min()) > 0 and float(units.max()) < 1
    # Distinct bits stay distinct draws (no two collapse onto one float).
    assert len(torch.unique(units)) == 1 << UNIT_BITS


def _rows(batch: int, top_k: int, top_p: float, vocab: int) -> RowSettings:
    host = [(0.9, top_k, top_p)] * batch
    return RowSettings.of(
        torch.full((batch,), 0.9),
        torch.full((batch,), top_k, dtype=torch.long),
        torch.full((batch,), top_p),
        host,
        vocab,
    )


def test_extreme_noise_never_picks_a_masked_id() -> None:
    """The talker's control ids are masked to -inf; a masked id whose noise is at
    either end of its range must still never be picked, with and without top-k/p."""
    vocab, eos = 3072, 2150
    mask = talker_mask(vocab, eos, torch.device("cpu"))
    scores = torch.randn(4, vocab, generator=torch.Generator().manual_seed(0))
    scores = scores.masked_fill(mask, float("-inf"))
    top = open_unit(torch.tensor((1 << UNIT_BITS) - 1))
    bottom = open_unit(torch.tensor(0))
    bits = torch.randint(0, 1 << UNIT_BITS, (4, vocab), generator=torch.Generator().manual_seed(1))
    for noise_value in (top, bottom):
        noise = open_unit(bits).masked_fill(mask, float(noise_value))
        for top_k, top_p in ((0, 1.0), (50, 1.0), (0, 0.8), (50, 0.8)):
            ids = sample(scores, _rows(4, top_k, top_p, vocab), noise)
            assert not mask[ids].any(), (noise_value, top_k, top_p, ids)
            if top_k:
                kept = scores.topk(top_k, dim=-1).indices
                assert (kept == ids[:, None]).any(dim=-1).all()
