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

import torch
from torch import nn

from models.blocks.gpt2 import Gpt2
from models.paged_kv import PagedKVCache

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


class SpeakerEncoder(nn.Module):
    def __init__(self, cfg: T3Config) -> None:
        super().__init__()
        self.spkr_enc = nn.Linear(cfg.speaker_dim, cfg.hidden)


class T3(nn.Module):
    def __init__(self, cfg: T3Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.tfmr = Gpt2(cfg)
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
        """Prompt rows over the paged cache (``models.blocks.gpt2.Gpt2.prefill``)."""
        return self.tfmr.prefill(embeds, cache, slots, starts, counts)

    def step(
        self,
        embeds: torch.Tensor,
        cache: PagedKVCache,
        slots: torch.Tensor,
        positions: torch.Tensor,
        max_length: int | None = None,
    ) -> torch.Tensor:
        """One position per row (``models.blocks.gpt2.Gpt2.step``: graph-capturable)."""
        return self.tfmr.step(embeds, cache, slots, positions, max_length)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.speech_head(hidden).float()
