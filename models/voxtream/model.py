"""VoXtream2's network: a phone transformer, a temporal one over frames, a depth one over
a frame's codebooks.

All three are the kit's decoder (``models.blocks.llama.Stack``) with Llama 3 scaled
rotary frequencies (:func:`llama3_inv_freq`); the checkpoint's interleaved rotary pairs
are reordered at load (``models.voxtream.checkpoint``).

- The phone transformer reads a context's whole phone sequence (prompt placeholders,
  text phones and punctuation) with a windowed mask that looks ``la`` phones ahead,
  ``la`` growing with the text's length (:meth:`VoxModel.phone_features`); punctuation
  positions are then taken out (:func:`compacted`).
- A frame's input (:meth:`VoxModel.frame_input`) is the sum of two phone features (the
  phones the pointer stands on) and the frame's 16 code embeddings (codebook ``k``
  offset by ``k * audio_vocab_size``), summed as the reference sums them.
- The semantic head scores ``num_phone_states x audio_vocab_size`` (state-major): how
  the pointer moves, and the frame's first code.
- The depth transformer (:meth:`VoxModel.depth`) reads the temporal hidden state (plus
  the projected speaker embedding) and the first code's embedding, then one code per
  position, a fresh cache per frame; codebook ``k``'s scores come from ``audio_head[k-1]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from models.attention import attention_bias, grouped_attention
from models.blocks.llama import Stack
from models.voxtream.config import VoxConfig


def llama3_inv_freq(
    head_dim: int,
    base: float,
    factor: float = 32.0,
    low: float = 1.0,
    high: float = 4.0,
    original: int = 8192,
) -> torch.Tensor:
    """Rotary frequencies with Llama 3's scaling (torchtune's ``Llama3ScaledRoPE``):
    long wavelengths divided by ``factor``, short ones kept, a smooth blend between."""
    freqs = 1.0 / (base ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    low_wavelen, high_wavelen = original / low, original / high
    out = []
    for freq in freqs.tolist():
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(freq)
        elif wavelen > low_wavelen:
            out.append(freq / factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            out.append((1 - smooth) * freq / factor + smooth * freq)
    return torch.tensor(out, dtype=torch.float32)


def _stack(cfg: VoxConfig, which: str) -> Stack:
    stack = Stack(getattr(cfg, which))
    head_dim = stack.cfg.head_dim
    stack.inv_freq = llama3_inv_freq(head_dim, stack.cfg.rope_theta)
    return stack


def compacted(length: int, punctuation: np.ndarray) -> np.ndarray:
    """The rows of a phone sequence of ``length`` with the ``punctuation`` positions
    taken out, the tail filled with the sequence's last row (the reference's
    ``remove_punctuation``): int64 [length]."""
    keep = np.ones(length, bool)
    gone = punctuation[(punctuation >= 0) & (punctuation < length)]
    keep[gone] = False
    kept = np.flatnonzero(keep)
    out = np.full(length, length - 1, np.int64)
    out[: len(kept)] = kept
    return out


class VoxModel(nn.Module):
    def __init__(self, cfg: VoxConfig) -> None:
        super().__init__()
        self.cfg = cfg
        dim = cfg.embedding_dim
        self.phone_embeddings = nn.Embedding(cfg.phone_vocab_size, dim)
        self.audio_embeddings = nn.Embedding(cfg.audio_vocab_size * cfg.num_codebooks, dim)
        self.spk_emb_proj = nn.Linear(cfg.spk_embedding_dim, dim, bias=False)
        self.sem_head = nn.Linear(dim, cfg.audio_vocab_size * cfg.num_phone_states, bias=False)
        self.audio_head = nn.Parameter(
            torch.zeros(cfg.num_codebooks - 1, cfg.depth.hidden_size, cfg.audio_vocab_size)
        )
        self.phone_former = _stack(cfg, "phone")
        self.temp_former = _stack(cfg, "temporal")
        self.dep_former = _stack(cfg, "depth")
        self.register_buffer(
            "audio_shifts",
            torch.arange(cfg.num_codebooks) * cfg.audio_vocab_size,
            persistent=False,
        )

    def look_ahead(self, text_tokens: int) -> int:
        """Phones the phone transformer looks ahead with ``text_tokens`` tokens after the
        prompt: one more for every ``max_look_ahead`` tokens, up to ``max_look_ahead``."""
        la = self.cfg.max_look_ahead
        return min(text_tokens // la, la - 1) + 1

    def phone_features(
        self, tokens: torch.Tensor, lengths: list[int], look_ahead: list[int]
    ) -> torch.Tensor:
        """Features [R, S, D] of phone sequences ``tokens`` [R, S] (row ``r``'s first
        ``lengths[r]`` are real), each position seeing ``phone_window_size`` back and
        ``look_ahead[r]`` ahead."""
        rows, s = tokens.shape
        device = tokens.device
        x = self.phone_embeddings(tokens)
        i = torch.arange(s, device=device)
        la = torch.tensor(look_ahead, device=device)[:, None, None]
        n = torch.tensor(lengths, device=device)[:, None, None]
        q, k = i[None, :, None], i[None, None, :]
        allowed = (k >= q - self.cfg.phone_window_size + 1) & (k <= q + la) & (k < n)
        allowed |= (q >= n) & (k == 0)  # padding rows read something (never used)
        stack = self.phone_former
        bias = attention_bias(allowed, stack.cfg.num_heads // stack.cfg.num_kv_heads, x.dtype)
        cos, sin = stack.rope(i[None].expand(rows, s), x.dtype)
        for layer in stack.layers:
            q_, k_, v_ = layer.qkv(x, (cos, sin))
            x = layer.residual(x, grouped_attention(q_, k_, v_, bias))
        return stack.norm(x)

    def frame_input(self, phones: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """Inputs [N, D] of frames whose pointer features are ``phones`` [N, 2, D] and
        codes ``codes`` [N, num_codebooks]."""
        audio = self.audio_embeddings(codes + self.audio_shifts)
        phone = phones.sum(dim=1)
        return torch.cat((phone[:, None], audio), dim=1).sum(dim=1, dtype=audio.dtype)

    def depth(
        self,
        hidden: torch.Tensor,
        code0: torch.Tensor,
        choose: Callable[[torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """Codes 1.. [B, num_codebooks - 1] of frames whose CFG pairs of temporal hidden
        states (plus speaker) are ``hidden`` [2B, D] (conditional rows even, unconditional
        odd) and first code ``code0`` [B]. ``choose(scores [2B, V])`` -> ids [B]."""
        emb0 = self.audio_embeddings(code0).repeat_interleave(2, dim=0)
        x = torch.stack((hidden, emb0), dim=1)
        caches: list[tuple[torch.Tensor, torch.Tensor]] = []
        codes, position = [], 0
        vocab = self.cfg.audio_vocab_size
        for k in range(1, self.cfg.num_codebooks):
            out = self.dep_former.extend(x, caches, position)
            position += x.shape[1]
            ids = choose(out[:, -1] @ self.audio_head[k - 1])
            codes.append(ids)
            x = self.audio_embeddings(ids + k * vocab).repeat_interleave(2, dim=0)[:, None]
        return torch.stack(codes, dim=1)
