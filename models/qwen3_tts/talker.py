"""The talker: a Qwen3 decoder over codec tokens whose input is text track + codec track.

Parameter names mirror ``talker.*`` of the checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from models.blocks.llama import Stack
from models.paged_kv import PagedKVCache
from models.qwen3_tts.code_predictor import CodePredictor
from models.qwen3_tts.config import TalkerConfig


class TalkerModel(Stack):
    def __init__(self, cfg: TalkerConfig) -> None:
        super().__init__(cfg.stack)
        self.codec_embedding = nn.Embedding(cfg.vocab_size, cfg.stack.hidden_size)
        self.text_embedding = nn.Embedding(cfg.text_vocab_size, cfg.text_hidden_size)


class TextProjection(nn.Module):
    def __init__(self, text_hidden: int, hidden: int) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(text_hidden, text_hidden, bias=True)
        self.linear_fc2 = nn.Linear(text_hidden, hidden, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class Talker(nn.Module):
    def __init__(self, cfg: TalkerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = TalkerModel(cfg)
        self.text_projection = TextProjection(cfg.text_hidden_size, cfg.stack.hidden_size)
        self.codec_head = nn.Linear(cfg.stack.hidden_size, cfg.vocab_size, bias=False)
        self.code_predictor = CodePredictor(cfg)

    def text_embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Text-track embedding of text token ids: [..., hidden]."""
        return self.text_projection(self.model.text_embedding(ids))

    def codec_embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.codec_embedding(ids)

    def frame_embed(self, codes: torch.Tensor) -> torch.Tensor:
        """Sum of the embeddings of a frame's codes: [..., groups] -> [..., hidden]."""
        total = self.model.codec_embedding(codes[..., 0])
        for k, table in enumerate(self.code_predictor.model.codec_embedding):
            total = total + table(codes[..., k + 1])
        return total

    def forward(
        self,
        embeds: torch.Tensor,
        cache: PagedKVCache,
        slots: Sequence[int],
        starts: Sequence[int],
        counts: Sequence[int] | None = None,
    ) -> torch.Tensor:
        """Prompt rows over the paged cache (``models.blocks.llama.Stack.prefill``)."""
        return self.model.prefill(embeds, cache, slots, starts, counts)

    def step(
        self,
        embeds: torch.Tensor,
        cache: PagedKVCache,
        slots: torch.Tensor,
        positions: torch.Tensor,
        max_length: int | None = None,
    ) -> torch.Tensor:
        """One position per row (``models.blocks.llama.Stack.step``: graph-capturable)."""
        return self.model.step(embeds, cache, slots, positions, max_length)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.codec_head(hidden).float()
