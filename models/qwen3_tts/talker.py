"""The talker: a Qwen3 decoder over codec tokens whose input is text track + codec track.

Parameter names mirror ``talker.*`` of the checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from models.attention import attention_bias
from models.qwen3_tts.code_predictor import CodePredictor
from models.qwen3_tts.config import TalkerConfig
from models.qwen3_tts.layers import Stack, rope_cos_sin
from models.slot_kv import SlotBatch, SlotKVCache
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
        cache: SlotKVCache,
        slots: Sequence[int],
        starts: Sequence[int],
        counts: Sequence[int] | None = None,
    ) -> torch.Tensor:
        """Run row ``b``'s first ``counts[b]`` (default all T) of ``embeds`` [B, T, H] at
        positions ``starts[b] + t`` of slot ``slots[b]``; the rest of a row is padding.

        Writes the new keys/values into ``cache`` and returns the final-norm hidden
        states [B, T, H]. Attention reads the cache in place, over the range of slots
        the batch spans. Every argument but ``embeds`` is known to the host, so
        nothing here waits on the device.
        """
        b, t = embeds.shape[:2]
        batch = SlotBatch.of(cache, slots, starts, counts, t, embeds.device)
        stack = self.model.layers[0].self_attn
        bias = attention_bias(batch.allowed, stack.num_heads // stack.num_kv_heads, embeds.dtype)
        position_ids = upload(batch.positions, embeds.device)
        cos, sin = rope_cos_sin(self.model.inv_freq, position_ids, embeds.dtype)
        x = embeds
        for i, layer in enumerate(self.model.layers):
            attn = layer.self_attn
            q, k, v = attn.project(layer.input_layernorm(x), cos, sin)
            out = batch.attend(cache, i, q, k, v, bias)
            x = x + attn.o_proj(out.transpose(1, 2).reshape(b, t, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.model.norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.codec_head(hidden).float()
