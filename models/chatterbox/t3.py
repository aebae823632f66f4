"""Chatterbox Turbo's T3: text tokens -> speech tokens, a GPT-2 decoder over paged KV.

The input of one utterance is ``[speaker, prompt speech tokens, text tokens,
start-of-speech]`` embeddings, each position getting GPT-2's learned absolute
position embedding; every later position is the embedding of the speech token
just sampled. Parameter names mirror ``t3_turbo_v1.safetensors`` (``tfmr.*`` is
the GPT-2 backbone; its word embeddings ``tfmr.wte`` are never used and not
kept, nor is the text head).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from models.paged_kv import PagedKVCache, prefill_layout
from models.upload import upload

UNUSED_KEYS = ("tfmr.wte.weight", "text_head.weight")
"""Checkpoint tensors T3 inference never reads."""


@dataclass(frozen=True)
class T3Config:
    hidden: int = 1024
    layers: int = 24
    heads: int = 16
    positions: int = 8196
    text_vocab: int = 50276
    speech_vocab: int = 6563
    speaker_dim: int = 256
    eps: float = 1e-5
    start_speech: int = 6561
    stop_speech: int = 6562

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor], heads: int | None = None) -> T3Config:
        """Sizes read off the tensors (the checkpoint has no config file); ``heads``
        cannot be, so it defaults to GPT-2 medium's 64-wide heads."""
        hidden = state["tfmr.wpe.weight"].shape[1]
        layers = 1 + max(int(k.split(".")[2]) for k in state if k.startswith("tfmr.h."))
        speech = state["speech_emb.weight"].shape[0]
        return cls(
            hidden=hidden,
            layers=layers,
            heads=heads or max(1, hidden // 64),
            positions=state["tfmr.wpe.weight"].shape[0],
            text_vocab=state["text_emb.weight"].shape[0],
            speech_vocab=speech,
            speaker_dim=state["cond_enc.spkr_enc.weight"].shape[1],
            start_speech=speech - 2,
            stop_speech=speech - 1,
        )


class Conv1D(nn.Module):
    """GPT-2's linear layer: weight stored [in, out]; computed as the checkpoint's
    authors compute it (``addmm``), so fp32 results match theirs bit for bit."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight)
        return out.view(*x.shape[:-1], -1)


class Attention(nn.Module):
    def __init__(self, cfg: T3Config) -> None:
        super().__init__()
        self.c_attn = Conv1D(cfg.hidden, 3 * cfg.hidden)
        self.c_proj = Conv1D(cfg.hidden, cfg.hidden)
        self.heads = cfg.heads


class MLP(nn.Module):
    def __init__(self, cfg: T3Config) -> None:
        super().__init__()
        self.c_fc = Conv1D(cfg.hidden, 4 * cfg.hidden)
        self.c_proj = Conv1D(4 * cfg.hidden, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: T3Config) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.mlp = MLP(cfg)


class Backbone(nn.Module):
    def __init__(self, cfg: T3Config) -> None:
        super().__init__()
        self.wpe = nn.Embedding(cfg.positions, cfg.hidden)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.hidden, eps=cfg.eps)


class SpeakerEncoder(nn.Module):
    def __init__(self, cfg: T3Config) -> None:
        super().__init__()
        self.spkr_enc = nn.Linear(cfg.speaker_dim, cfg.hidden)


class T3(nn.Module):
    def __init__(self, cfg: T3Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.tfmr = Backbone(cfg)
        self.cond_enc = SpeakerEncoder(cfg)
        self.text_emb = nn.Embedding(cfg.text_vocab, cfg.hidden)
        self.speech_emb = nn.Embedding(cfg.speech_vocab, cfg.hidden)
        self.speech_head = nn.Linear(cfg.hidden, cfg.speech_vocab, bias=True)

    def prefix(self, speaker: torch.Tensor, prompt_tokens: torch.Tensor) -> torch.Tensor:
        """A voice's conditioning positions [1 + P, H]: its speaker embedding [256]
        projected, then its prompt speech tokens [P] embedded."""
        spk = self.cond_enc.spkr_enc(speaker.reshape(1, -1))
        return torch.cat((spk, self.speech_emb(prompt_tokens)))

    def utterance(self, text_ids: torch.Tensor) -> torch.Tensor:
        """An utterance's positions after the prefix [T + 1, H]: its text, then start-of-speech."""
        start = torch.full((1,), self.cfg.start_speech, dtype=torch.long, device=text_ids.device)
        return torch.cat((self.text_emb(text_ids), self.speech_emb(start)))

    def forward(
        self,
        embeds: torch.Tensor,
        cache: PagedKVCache,
        slots: Sequence[int],
        starts: Sequence[int],
        counts: Sequence[int] | None = None,
    ) -> torch.Tensor:
        """Row ``b``'s first ``counts[b]`` (default all T) of ``embeds`` [B, T, H] at
        positions ``starts[b] + t`` of slot ``slots[b]``; the rest of a row is padding.
        Writes keys/values into ``cache`` (its blocks reserved); returns the final-norm
        hidden states [B, T, H]. Every argument but ``embeds`` is a host value."""
        b, t = embeds.shape[:2]
        positions, where, read, bias = prefill_layout(
            cache, slots, starts, counts, t, 1, embeds.dtype
        )
        # Padding positions read a real position embedding; their output is never used.
        last = self.cfg.positions - 1
        x = embeds + self.tfmr.wpe(upload(np.minimum(positions, last), embeds.device))
        heads, dim = self.cfg.heads, self.cfg.head_dim
        for i, block in enumerate(self.tfmr.h):
            qkv = block.attn.c_attn(block.ln_1(x)).view(b, t, 3, heads, dim)
            q, k, v = (qkv[:, :, j].transpose(1, 2) for j in range(3))
            out = cache.prefill_attend(i, q, k, v, where, read, bias)
            x = x + block.attn.c_proj(out.transpose(1, 2).reshape(b, t, -1))
            x = x + block.mlp(block.ln_2(x))
        return self.tfmr.ln_f(x)

    def step(
        self,
        embeds: torch.Tensor,
        cache: PagedKVCache,
        slots: torch.Tensor,
        positions: torch.Tensor,
        max_length: int | None = None,
    ) -> torch.Tensor:
        """One position per row: ``embeds`` [B, H] at ``positions[b]`` of slot
        ``slots[b]`` (both on the device); the final-norm hidden states [B, H]. No host
        value is read (``max_length`` is only needed where attention gathers: off
        CUDA), so a CUDA graph can capture it."""
        b = embeds.shape[0]
        where = cache.rows_on_device(slots, positions)
        x = (embeds + self.tfmr.wpe(positions.clamp(max=self.cfg.positions - 1)))[:, None]
        heads, dim = self.cfg.heads, self.cfg.head_dim
        lengths = positions + 1
        for i, block in enumerate(self.tfmr.h):
            qkv = block.attn.c_attn(block.ln_1(x)).view(b, 1, 3, heads, dim)
            q, k, v = (qkv[:, :, j].transpose(1, 2) for j in range(3))
            out = cache.decode_attend(i, q, k, v, where, slots, lengths, max_length)
            x = x + block.attn.c_proj(out.transpose(1, 2).reshape(b, 1, -1))
            x = x + block.mlp(block.ln_2(x))
        return self.tfmr.ln_f(x)[:, 0]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.speech_head(hidden).float()
