"""Qwen3-TTS's sampling settings and the talker's control-id mask.

The runner samples as the reference does (Hugging Face generate's processors) with
the kit's device sampler (``models.kit.sampler``): talker code 0 takes the
repetition penalty over the context's generated code-0 ids, the control-id range
masked (except EOS), EOS masked until ``min_new_tokens`` ids exist, then
temperature -> top-k -> top-p; the code predictor's residual codes take
temperature -> top-k -> top-p. Temperature 0 is greedy.
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


def talker_mask(vocab_size: int, eos_id: int, device: torch.device) -> torch.Tensor:
    """True for ids the talker may never emit: the top 1024 ids except EOS."""
    mask = torch.zeros(vocab_size, dtype=torch.bool, device=device)
    mask[vocab_size - 1024 :] = True
    mask[eos_id] = False
    return mask
