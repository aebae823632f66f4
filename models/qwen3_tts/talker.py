"""The talker: a Qwen3 decoder over codec tokens whose input is text track + codec track.

Parameter names mirror ``talker.*`` of the checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from models.paged_kv import PagedKVCache, prefill_layout
from models.qwen3_tts.code_predictor import CodePredictor
from models.qwen3_tts.config import TalkerConfig
from models.qwen3_tts.layers import Stack, rope_cos_sin
from models.upload import upload


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
        """Run row ``b``'s first ``counts[b]`` (default all T) of ``embeds`` [B, T, H] at
        positions ``starts[b] + t`` of slot ``slots[b]``; the rest of a row is padding.

        Writes the new keys/values into ``cache`` (whose blocks must be reserved) and
        returns the final-norm hidden states [B, T, H]. Every argument but ``embeds``
        is known to the host, so nothing here waits on the device.
        """
        b, t = embeds.shape[:2]
        attn0 = self.model.layers[0].self_attn
        groups = attn0.num_heads // attn0.num_kv_heads
        positions, where, read, bias = prefill_layout(
            cache, slots, starts, counts, t, groups, embeds.dtype
        )
        cos, sin = rope_cos_sin(self.model.inv_freq, upload(positions, embeds.device), embeds.dtype)
        x = embeds
        for i, layer in enumerate(self.model.layers):
            attn = layer.self_attn
            q, k, v = attn.project(layer.input_layernorm(x), cos, sin)
            out = cache.prefill_attend(i, q, k, v, where, read, bias)
            x = x + attn.o_proj(out.transpose(1, 2).reshape(b, t, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.model.norm(x)

    def step(
        self,
        embeds: torch.Tensor,
        cache: PagedKVCache,
        slots: torch.Tensor,
        positions: torch.Tensor,
        max_length: int | None = None,
    ) -> torch.Tensor:
        """One position per row: ``embeds`` [B, H] at ``positions[b]`` of slot
        ``slots[b]`` (both on the device). Returns the final-norm hidden states [B, H].
        Nothing here reads a host value (``max_length``, the batch's longest length
        after the step, is only needed where attention gathers: off CUDA), so a
        CUDA graph can capture it."""
        b = embeds.shape[0]
        cos, sin = rope_cos_sin(self.model.inv_freq, positions[:, None], embeds.dtype)
        where = cache.rows_on_device(slots, positions)
        lengths = positions + 1
        x = embeds[:, None]
        for i, layer in enumerate(self.model.layers):
            attn = layer.self_attn
            q, k, v = attn.project(layer.input_layernorm(x), cos, sin)
            out = cache.decode_attend(i, q, k, v, where, slots, lengths, max_length)
            x = x + attn.o_proj(out.transpose(1, 2).reshape(b, 1, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.model.norm(x)[:, 0]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.codec_head(hidden).float()
