"""T3's speech-token sampling as the reference does it, on the kit's device sampler.

The reference (``T3.inference_turbo``) runs Hugging Face's processors in this
order: temperature (skipped at 0 and 1), top-k, top-p, then the repetition
penalty over the ids sampled so far (the start-of-speech id on the first step),
then draws from the softmax. With ``top_k == 1`` only the best id survives, which
is greedy decoding. Every row carries its own settings in the slot tables; the
draws are the kit's counter-based per-row noise (``models.kit.sampler``), so a
seeded context draws the same ids whatever shares its batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models.kit.sampler import SlotSampler, draw, penalize, scale, top_k, top_p


@dataclass(frozen=True)
class T3Sampling:
    temperature: float = 0.8
    top_k: int = 1000
    top_p: float = 0.95
    repetition_penalty: float = 1.2


def sample(logits: torch.Tensor, sampler: SlotSampler, slots: torch.Tensor) -> torch.Tensor:
    """Each row's next id from its logits [B, V], in the reference's order. The host
    does not look at the rows' settings (this runs inside a captured graph too)."""
    rows = sampler.rows(slots, None)
    scores = penalize(top_p(top_k(scale(logits, rows), rows), rows), rows)
    return draw(scores, rows, sampler.noise(slots)[:, 0])
