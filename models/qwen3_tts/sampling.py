"""Sampling as the reference does it (Hugging Face generate's processors), per context.

Talker code 0: repetition penalty over the context's generated code-0 ids,
EOS masked until ``min_new_tokens`` ids exist, the control-id range masked
(except EOS), then temperature -> top-k -> top-p. Temperature 0 is greedy.
Each context owns its generator, so a seeded context draws the same ids
whatever else shares its batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    subtalker_temperature: float = 0.9
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    seed: int | None = None


def apply_repetition_penalty(
    logits: torch.Tensor, history: torch.Tensor, penalty: float
) -> torch.Tensor:
    """logits [V]; history [n] ids already generated."""
    if penalty == 1.0 or history.numel() == 0:
        return logits
    scores = logits.gather(0, history)
    scores = torch.where(scores < 0, scores * penalty, scores / penalty)
    return logits.scatter(0, history, scores)


def warp_and_sample(
    logits: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
    generator: torch.Generator | None,
) -> int:
    """Pick one id from processed logits [V]; temperature <= 0 means argmax."""
    if temperature <= 0:
        return int(torch.argmax(logits))
    scores = logits / temperature
    if 0 < top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=False)
        cumulative = sorted_scores.softmax(-1).cumsum(-1)
        remove = cumulative <= (1 - top_p)
        remove[-1] = False
        scores = scores.masked_fill(remove.scatter(0, order, remove), float("-inf"))
    probs = scores.softmax(-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def talker_mask(vocab_size: int, eos_id: int, device: torch.device) -> torch.Tensor:
    """True for ids the talker may never emit: the top 1024 ids except EOS."""
    mask = torch.zeros(vocab_size, dtype=torch.bool, device=device)
    mask[vocab_size - 1024 :] = True
    mask[eos_id] = False
    return mask
