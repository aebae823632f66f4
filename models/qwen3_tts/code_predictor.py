"""The code predictor: 15 residual codebooks of a frame from the talker's hidden state.

A small Qwen3 decoder with a fresh cache per frame: prefill of two positions
(talker hidden, embedding of code 0) gives code 1 through ``lm_head[0]``, then
one position per further code. Parameter names mirror ``talker.code_predictor.*``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from models.blocks.llama import Stack
from models.qwen3_tts.config import TalkerConfig


class CodePredictorModel(Stack):
    def __init__(self, cfg: TalkerConfig) -> None:
        super().__init__(cfg.predictor)
        self.codec_embedding = nn.ModuleList(
            nn.Embedding(cfg.predictor_vocab_size, cfg.stack.hidden_size)
            for _ in range(cfg.num_code_groups - 1)
        )


class CodePredictor(nn.Module):
    def __init__(self, cfg: TalkerConfig) -> None:
        super().__init__()
        self.model = CodePredictorModel(cfg)
        hidden = cfg.predictor.hidden_size
        self.lm_head = nn.ModuleList(
            nn.Linear(hidden, cfg.predictor_vocab_size, bias=False)
            for _ in range(cfg.num_code_groups - 1)
        )
        if hidden != cfg.stack.hidden_size:
            self.small_to_mtp_projection: nn.Module = nn.Linear(cfg.stack.hidden_size, hidden)
        else:
            self.small_to_mtp_projection = nn.Identity()

    def predict(
        self,
        talker_hidden: torch.Tensor,
        code0_embed: torch.Tensor,
        choose: Callable[[int, torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """Codes 1..G-1 of a batch of frames.

        ``talker_hidden``/``code0_embed``: [B, H_talker]. ``choose(k, logits)``
        turns the float logits [B, V] of codebook ``k + 1`` into ids [B].
        Returns [B, G-1] ids.
        """
        x = torch.stack((talker_hidden, code0_embed), dim=1)
        caches: list[tuple[torch.Tensor, torch.Tensor]] = []
        codes: list[torch.Tensor] = []
        position = 0
        for k, head in enumerate(self.lm_head):
            hidden = self.model.extend(self.small_to_mtp_projection(x), caches, position)
            position += x.shape[1]
            ids = choose(k, head(hidden[:, -1]).float())
            codes.append(ids)
            if k + 1 < len(self.lm_head):
                x = self.model.codec_embedding[k](ids)[:, None]
        return torch.stack(codes, dim=1)
