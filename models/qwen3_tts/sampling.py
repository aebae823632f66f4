"""Sampling as the reference does it (Hugging Face generate's processors), batched on the device.

Talker code 0: repetition penalty over the context's generated code-0 ids,
EOS masked until ``min_new_tokens`` ids exist, the control-id range masked
(except EOS), then temperature -> top-k -> top-p. Temperature 0 is greedy.
Every row has its own settings, given as tensors, so a whole batch is sampled
with a handful of kernels and no host round trip.

Random draws come from a counter-based hash, not a generator object: row r's
``d``-th draw over vocabulary id v is ``hash(key_r, d, v)``. A context keyed by
its seed therefore draws the same ids whatever else shares its batch, and the
noise of a whole batch is one elementwise computation (Gumbel-max sampling).
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


@dataclass(frozen=True)
class RowSettings:
    """Per-row sampling settings of a batch on the device, and what the host knows of
    them, so no decision needs a device round trip."""

    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    any_greedy: bool
    all_greedy: bool
    max_top_k: int
    """Largest top-k of a row, a row without one counting as the vocabulary's size."""
    any_top_k: bool
    """Some row keeps fewer ids than the vocabulary."""
    any_top_p: bool

    @classmethod
    def of(
        cls,
        temperature: torch.Tensor,
        top_k: torch.Tensor,
        top_p: torch.Tensor,
        host: list[tuple[float, int, float]],
        vocab: int,
    ) -> RowSettings:
        """``host``: each row's (temperature, top_k, top_p) as the host knows them."""
        ks = [k if 0 < k < vocab else vocab for _, k, _ in host]
        greedy = [t <= 0 for t, _, _ in host]
        return cls(
            temperature,
            top_k,
            top_p,
            any(greedy),
            all(greedy),
            max(ks),
            min(ks) < vocab,
            any(p < 1 for _, _, p in host),
        )

    @classmethod
    def general(
        cls, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, vocab: int
    ) -> RowSettings:
        """Settings the host does not look at (a captured graph): every option applied,
        which draws the same ids as :meth:`of` would choose for the same rows (top-k of
        the whole vocabulary and top-p 1 keep every id a draw could pick)."""
        return cls(temperature, top_k, top_p, True, False, vocab, True, True)


def sample(scores: torch.Tensor, rows: RowSettings, noise: torch.Tensor) -> torch.Tensor:
    """Ids [B] from processed float scores [B, V] with per-row settings; ``noise`` [B, V]
    is uniform in (0, 1). Rows with temperature <= 0 take argmax."""
    if rows.all_greedy:
        return scores.argmax(-1)
    vocab = scores.shape[-1]
    temperature = rows.temperature
    if rows.any_greedy:
        temperature = torch.where(temperature <= 0, 1.0, temperature)
    scaled = scores / temperature[:, None]
    if rows.any_top_k:
        k = torch.where((rows.top_k > 0) & (rows.top_k < vocab), rows.top_k, vocab)
        kth = scaled.topk(rows.max_top_k, dim=-1).values.gather(1, (k - 1)[:, None])
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if rows.any_top_p:
        ascending, order = scaled.sort(dim=-1)
        cumulative = ascending.softmax(-1).cumsum(-1)
        remove = cumulative <= (1 - rows.top_p)[:, None]
        remove[:, -1] = False
        scaled = scaled.masked_fill(remove.scatter(1, order, remove), float("-inf"))
    drawn = (scaled - torch.log(-torch.log(noise))).argmax(-1)
    if rows.any_greedy:
        return torch.where(rows.temperature <= 0, scores.argmax(-1), drawn)
    return drawn


def penalize(scores: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """Repetition penalty on ids already generated (``seen`` [B, V] bool), per row."""
    p = penalty[:, None]
    hit = torch.where(scores < 0, scores * p, scores / p)
    return torch.where(seen, hit, scores)


def talker_mask(vocab_size: int, eos_id: int, device: torch.device) -> torch.Tensor:
    """True for ids the talker may never emit: the top 1024 ids except EOS."""
    mask = torch.zeros(vocab_size, dtype=torch.bool, device=device)
    mask[vocab_size - 1024 :] = True
    mask[eos_id] = False
    return mask
