"""The kit's device sampler: masked ids are never drawn, greedy rows take the best,
and a seeded row draws the same ids whatever shares its batch."""

from __future__ import annotations

import torch

from models.kit.sampler import (
    KEY_COLUMN,
    Rows,
    Settings,
    SlotSampler,
    draw,
    penalize,
    scale,
    top_k,
    top_p,
)
from models.kit.tables import Column, SlotTables
from models.qwen3_tts.sampling import talker_mask
from models.random_draws import UNIT_BITS, key_of, open_unit

CPU = torch.device("cpu")


def test_every_random_bit_pattern_maps_strictly_inside_the_unit_interval() -> None:
    units = open_unit(torch.arange(1 << UNIT_BITS, dtype=torch.long))
    assert units.dtype == torch.float32
    assert float(units.min()) > 0 and float(units.max()) < 1
    # Distinct bits stay distinct draws (no two collapse onto one float).
    assert len(torch.unique(units)) == 1 << UNIT_BITS


def _rows(batch: int, k: int, p: float, vocab: int) -> Rows:
    host = [Settings(0.9, k, p)] * batch
    ks = [k if 0 < k < vocab else vocab for _ in host]
    return Rows(
        torch.full((batch,), 0.9),
        torch.full((batch,), k, dtype=torch.long),
        torch.full((batch,), p),
        None,
        None,
        False,
        False,
        max(ks),
        min(ks) < vocab,
        p < 1,
    )


def _sample(scores: torch.Tensor, rows: Rows, noise: torch.Tensor) -> torch.Tensor:
    return draw(top_p(top_k(scale(scores, rows), rows), rows), rows, noise)


def test_extreme_noise_never_picks_a_masked_id() -> None:
    """The talker's control ids are masked to -inf; a masked id whose noise is at
    either end of its range must still never be picked, with and without top-k/p."""
    vocab, eos = 3072, 2150
    mask = talker_mask(vocab, eos, CPU)
    scores = torch.randn(4, vocab, generator=torch.Generator().manual_seed(0))
    scores = scores.masked_fill(mask, float("-inf"))
    top = open_unit(torch.tensor((1 << UNIT_BITS) - 1))
    bottom = open_unit(torch.tensor(0))
    bits = torch.randint(0, 1 << UNIT_BITS, (4, vocab), generator=torch.Generator().manual_seed(1))
    for noise_value in (top, bottom):
        noise = open_unit(bits).masked_fill(mask, float(noise_value))
        for k, p in ((0, 1.0), (50, 1.0), (0, 0.8), (50, 0.8)):
            ids = _sample(scores, _rows(4, k, p, vocab), noise)
            assert not mask[ids].any(), (noise_value, k, p, ids)
            if k:
                kept = scores.topk(k, dim=-1).indices
                assert (kept == ids[:, None]).any(dim=-1).all()


def _sampler(slots: int, vocab: int) -> tuple[SlotTables, SlotSampler]:
    columns: dict[str, Column] = {**KEY_COLUMN, **SlotSampler.columns("s", vocab, penalty=True)}
    tables = SlotTables(slots, CPU, columns)
    return tables, SlotSampler(tables, "s", vocab, penalty=True)


def _step(
    sampler: SlotSampler, slots: list[int], logits: torch.Tensor, host: list[Settings]
) -> list[int]:
    index = torch.tensor(slots)
    rows = sampler.rows(index, host)
    scores = penalize(logits, rows)
    ids = draw(top_p(top_k(scale(scores, rows), rows), rows), rows, sampler.noise(index)[:, 0])
    sampler.mark(index, ids)
    return ids.tolist()


def test_a_seeded_row_draws_the_same_ids_whatever_shares_its_batch() -> None:
    vocab, steps = 64, 12
    logits = torch.randn(steps, 4, vocab, generator=torch.Generator().manual_seed(2))
    seeded, other = Settings(0.9, 20, 0.9, 1.3), Settings(1.2, 0, 1.0, 1.0)

    def run(slots: list[int], settings: list[Settings]) -> list[int]:
        tables, sampler = _sampler(4, vocab)
        tables.store(slots, {"key": [key_of(7 + s) if s else key_of(99) for s in slots]})
        sampler.admit(slots, settings)
        out = []
        for step in range(steps):
            out.append(_step(sampler, slots, logits[step, : len(slots)], settings)[0])
        return out

    alone = run([0], [seeded])
    crowded = run([0, 2, 3], [seeded, other, other])
    assert alone == crowded


def test_greedy_rows_take_the_best_id_after_the_penalty() -> None:
    vocab = 16
    tables, sampler = _sampler(2, vocab)
    greedy = [Settings(0.0, 0, 1.0, 2.0), Settings(0.8, 1, 1.0, 1.0)]
    sampler.admit([0, 1], greedy)
    logits = torch.zeros(2, vocab)
    logits[:, 5], logits[:, 9] = 3.0, 2.0
    assert _step(sampler, [0, 1], logits, greedy) == [5, 5]
    # Row 0's penalty now covers id 5: 3.0 / 2 < 2.0, so 9 is best.
    assert _step(sampler, [0, 1], logits, greedy) == [9, 5]


def test_stores_are_batched_and_leave_the_scratch_row_alone() -> None:
    tables, sampler = _sampler(3, 8)
    sampler.admit([2, 0], [Settings(0.5, 3, 0.7, 1.1), Settings(0.0, 0, 1.0, 1.0)])
    assert tables["s.temperature"].tolist() == [0.0, 1.0, 0.5, 1.0]
    assert tables["s.top_k"].tolist() == [0, 0, 3, 0]
    sampler.mark(torch.tensor([2]), torch.tensor([4]))
    sampler.noise(torch.tensor([2]), 3)
    assert tables["s.draws"].tolist() == [0, 0, 3, 0]
    sampler.admit([2], [Settings()])
    assert tables["s.draws"].tolist() == [0, 0, 0, 0]
    assert not tables["s.seen"].any()
    assert tables.scratch == 3
