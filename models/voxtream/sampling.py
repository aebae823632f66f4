"""How VoXtream2 picks a frame's pointer move and codes, batched, with per-row settings.

As the reference does it (``voxtream/utils/model.py``), for each context's pair of rows
(conditional, unconditional):

- the semantic head's scores are guided: ``g * cond + (1 - g) * uncond``
  (``g``: the context's ``cfg_gamma``, or its speaking rate's);
- the pointer move (one of ``num_phone_states``) is drawn from the *conditional*
  scores' log-sum-exp over codes, plus, with a speaking rate, ``w * log(target share)
  - w * log(current share)`` of each move; temperature, then top-p;
- the first code is drawn from the guided scores of that move: temperature, top-k;
- codes 1.. are greedy over ``a * cond + (1 - a) * uncond`` (``a``: ``cfg_ac_gamma``).

Draws are the kit's counter-based ones (``models.kit.sampler``), so a context keyed by
its seed draws the same whatever shares its batch; ``top_p`` 0 and ``top_k`` 1 are
greedy (the reference's deterministic settings).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models.kit.sampler import Settings, SlotSampler, draw, scale, top_k, top_p


@dataclass(frozen=True)
class VoxSampling:
    temperature: float = 0.9
    top_k: int = 5
    """Of the first code (0 keeps every code)."""
    top_p: float = 0.9
    """Of the pointer move (0 keeps only the likeliest)."""
    cfg_gamma: float = 1.5
    cfg_ac_gamma: float = 3.0

    def move(self) -> Settings:
        return Settings(temperature=self.temperature, top_p=self.top_p)

    def code(self) -> Settings:
        return Settings(temperature=self.temperature, top_k=self.top_k)


def sample(scores: torch.Tensor, sampler: SlotSampler, slots: torch.Tensor) -> torch.Tensor:
    """Ids [B] from ``scores`` [B, V] with each slot's settings: temperature, top-k,
    top-p, one draw."""
    rows = sampler.rows(slots, None)
    scores = top_p(top_k(scale(scores, rows), rows), rows)
    return draw(scores, rows, sampler.noise(slots)[:, 0])


def guided(scores: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """``gamma * cond + (1 - gamma) * uncond`` of paired rows [2B, V] -> [B, V]."""
    cond, uncond = scores[0::2], scores[1::2]
    g = gamma[:, None]
    return cond * g + (1 - g) * uncond
