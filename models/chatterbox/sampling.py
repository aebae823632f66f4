"""T3's speech-token sampling as the reference does it, batched on the device.

The reference (``T3.inference_turbo``) runs Hugging Face's processors in this
order: temperature (skipped at 0 and 1), top-k, top-p, then the repetition
penalty over the ids sampled so far (the start-of-speech id on the first step),
then draws from the softmax. With ``top_k == 1`` only the best id survives, which
is greedy decoding. Every row carries its own settings; the draws use the
counter-based per-row noise of ``models.random_draws`` (Gumbel-max), so a
seeded context draws the same ids whatever shares its batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models.random_draws import uniform


@dataclass(frozen=True)
class T3Sampling:
    temperature: float = 0.8
    top_k: int = 1000
    top_p: float = 0.95
    repetition_penalty: float = 1.2


def process(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    penalty: torch.Tensor,
    seen: torch.Tensor,
) -> torch.Tensor:
    """Scores [B, V] after the reference's processors; per-row settings [B], ``seen``
    [B, V] bool marks the ids the penalty applies to."""
    vocab = logits.shape[-1]
    scale = torch.where((temperature > 0) & (temperature != 1), temperature, 1.0)
    scores = logits / scale[:, None]
    k = torch.where((top_k > 0) & (top_k < vocab), top_k, vocab)
    kth = scores.sort(dim=-1, descending=True).values.gather(1, (k - 1)[:, None])
    scores = scores.masked_fill(scores < kth, float("-inf"))
    ascending, order = scores.sort(dim=-1)
    cumulative = ascending.softmax(-1).cumsum(-1)
    remove = (cumulative <= (1 - top_p)[:, None]) & (top_p < 1)[:, None]
    remove[:, -1] = False
    scores = scores.masked_fill(remove.scatter(1, order, remove), float("-inf"))
    p = penalty[:, None]
    hit = torch.where(scores < 0, scores * p, scores / p)
    return torch.where(seen & (penalty != 1)[:, None], hit, scores)


def draw(
    scores: torch.Tensor,
    greedy: torch.Tensor,
    keys: torch.Tensor,
    draws: torch.Tensor,
    vocab_hash: torch.Tensor,
) -> torch.Tensor:
    """Ids [B] from processed scores: argmax for ``greedy`` rows, else a draw from
    their softmax (Gumbel-max with row ``b``'s ``draws[b]``-th noise of key ``keys[b]``)."""
    noise = uniform(keys, draws, vocab_hash)[:, 0]
    drawn = (scores - torch.log(-torch.log(noise))).argmax(-1)
    return torch.where(greedy, scores.argmax(-1), drawn)
