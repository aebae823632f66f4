"""Fish Speech S2 Pro's sampling, as its reference (``fish_speech`` on GitHub) does it.

- Top-k and top-p are one mask over the scores sorted best first, both computed at
  temperature 1: an id goes when its rank is ``top_k`` or more, or when the
  probability of it and every better id passes ``top_p`` (so the id that crosses
  ``top_p`` goes too, unlike Hugging Face's top-p); the best id always stays. Then
  the kept scores are divided by the temperature and one id is drawn.
- Repetition-aware sampling (RAS) for the semantic token: each step also draws at
  temperature 1 and top-p 0.9 (same top-k); when the normal draw is a semantic token
  among the last 10 tokens the utterance generated, the second draw is taken. An
  utterance's first token (from its prompt) is never checked nor counted.
- The residual codes use the same settings, without RAS.

Draws are the kit's counter-based noise (Gumbel-max over uniform draws, the
reference's ``argmax(p / Exp(1))``), one stream per sampler and slot.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models.kit.sampler import Rows, Settings, SlotSampler, draw, scale

RAS_WINDOW = 10
RAS_TEMPERATURE = 1.0
RAS_TOP_P = 0.9


@dataclass(frozen=True)
class FishSampling:
    """The reference server's defaults (``ServeTTSRequest``; top-k from its generator)."""

    temperature: float = 0.8
    top_p: float = 0.8
    top_k: int = 30

    def settings(self) -> Settings:
        return Settings(self.temperature, self.top_k, self.top_p)

    def ras(self) -> Settings:
        return Settings(RAS_TEMPERATURE, self.top_k, RAS_TOP_P)


def keep_best(scores: torch.Tensor, rows: Rows) -> torch.Tensor:
    """The reference's joint top-k / top-p mask (see the module's docstring)."""
    vocab = scores.shape[-1]
    ordered, order = scores.sort(dim=-1, descending=True)
    cumulative = ordered.softmax(-1).cumsum(-1)
    k = torch.where((rows.top_k > 0) & (rows.top_k < vocab), rows.top_k, vocab)
    rank = torch.arange(vocab, device=scores.device)
    remove = (cumulative > rows.top_p[:, None]) | (rank[None] >= k[:, None])
    remove[:, 0] = False
    return scores.masked_fill(remove.scatter(1, order, remove), float("-inf"))


def pick(scores: torch.Tensor, rows: Rows, noise: torch.Tensor) -> torch.Tensor:
    """One id per row of ``scores`` [B, V] with the rows' settings and ``noise`` [B, V]."""
    return draw(scale(keep_best(scores, rows), rows), rows, noise)


def sample(scores: torch.Tensor, sampler: SlotSampler, slots: torch.Tensor) -> torch.Tensor:
    """One id per row with each slot's settings and next draw; inside a captured graph
    too (the host looks at no setting)."""
    return pick(scores, sampler.rows(slots, None), sampler.noise(slots)[:, 0])


def repetition_aware(
    normal: torch.Tensor, fallback: torch.Tensor, window: torch.Tensor, semantic: int
) -> torch.Tensor:
    """RAS: ``fallback`` where ``normal`` (indices into the slow head's scores: below
    ``semantic`` a semantic token) is a semantic token that ``window`` [B, W] holds."""
    repeated = (window == normal[:, None]).any(-1) & (normal < semantic)
    return torch.where(repeated, fallback, normal)
