"""The dual autoregressive transformer: a slow one over text and frames, a fast one over
a frame's codebooks.

Both are the kit's decoder (``models.blocks.llama.Stack``): the checkpoint's fused
``wqkv`` is split and its interleaved rotary pairs are reordered at load
(``models.fish_speech.checkpoint``); the rotary tables are rounded through bfloat16
in every dtype, as the reference keeps them.

- A position's input (:meth:`SlowAR.embed`) is the token's embedding, plus, at a
  semantic token, the sum of the frame's codebook embeddings (codebook ``i`` offset by
  ``i * codebook_size``), the sum scaled by ``1/sqrt(num_codebooks + 1)``.
- The slow head scores only what a speech position may become: the semantic tokens,
  then ``<|im_end|>`` (the reference masks every other id to -inf); index
  ``semantic_count`` of :meth:`SlowAR.logits` is the end of the turn.
- The fast transformer (:meth:`FastAR.predict`) reads the slow one's final-norm
  hidden state at position 0 and the semantic code's embedding at position 1, then
  one residual code's embedding per position, a fresh cache per frame.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from models.blocks.llama import Stack
from models.fish_speech.config import FishConfig


class SlowAR(nn.Module):
    def __init__(self, cfg: FishConfig, im_end: int) -> None:
        super().__init__()
        self.cfg = cfg
        dim = cfg.slow.hidden_size
        self.embeddings = nn.Embedding(cfg.vocab_size, dim)
        self.codebook_embeddings = nn.Embedding(cfg.codebook_size * cfg.num_codebooks, dim)
        self.model = Stack(cfg.slow, rope_round=torch.bfloat16)
        if not cfg.tie_word_embeddings:
            self.output = nn.Linear(dim, cfg.vocab_size, bias=False)
        allowed = list(range(cfg.semantic_begin, cfg.semantic_end + 1)) + [im_end]
        self.register_buffer("allowed", torch.tensor(allowed), persistent=False)
        self.register_buffer(
            "offsets", torch.arange(cfg.num_codebooks) * cfg.codebook_size, persistent=False
        )
        self.scale = 1 / math.sqrt(cfg.num_codebooks + 1)

    def embed(self, tokens: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """Inputs [*, H] of positions holding ``tokens`` [*] and frame ``codes``
        [*, num_codebooks] (read only where the token is a semantic one)."""
        x = self.embeddings(tokens)
        speech = (tokens >= self.cfg.semantic_begin) & (tokens <= self.cfg.semantic_end)
        index = codes.clamp(0, self.cfg.codebook_size - 1) + self.offsets
        summed = self.codebook_embeddings(index).sum(-2)
        return torch.where(speech[..., None], (x + summed) * self.scale, x)

    def freeze_head(self) -> None:
        """Keep the head's rows of the ids a speech position may become (call once the
        weights are in place, on their device and dtype)."""
        weight = self.output.weight if hasattr(self, "output") else self.embeddings.weight
        self.head = weight.detach()[self.allowed].contiguous()

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Scores [B, semantic_count + 1] of the final-norm ``hidden`` [B, H]: the
        semantic tokens, then ``<|im_end|>`` (:meth:`freeze_head` must have run)."""
        return (hidden @ self.head.T).float()


class FastAR(nn.Module):
    def __init__(self, cfg: FishConfig) -> None:
        super().__init__()
        self.cfg = cfg
        dim = cfg.fast.hidden_size
        self.embeddings = nn.Embedding(cfg.codebook_size, dim)
        self.model = Stack(cfg.fast, rope_round=torch.bfloat16)
        self.output = nn.Linear(dim, cfg.codebook_size, bias=False)
        if cfg.slow.hidden_size != dim:
            self.fast_project_in: nn.Module = nn.Linear(cfg.slow.hidden_size, dim)
        else:
            self.fast_project_in = nn.Identity()

    def predict(
        self,
        hidden: torch.Tensor,
        code0: torch.Tensor,
        choose: Callable[[int, torch.Tensor], torch.Tensor],
        vocab: int,
    ) -> torch.Tensor:
        """Codes 1..N-1 [B, N-1] of frames whose slow final-norm hidden state is
        ``hidden`` [B, H] and semantic code ``code0`` [B]. ``choose(k, scores)`` turns
        the float scores [B, vocab] of residual codebook ``k + 1`` into ids [B]
        (``vocab``: the residual codebooks' size, at most the head's)."""
        x = torch.stack((self.fast_project_in(hidden), self.embeddings(code0)), dim=1)
        caches: list[tuple[torch.Tensor, torch.Tensor]] = []
        codes, position = [], 0
        for k in range(self.cfg.num_codebooks - 1):
            out = self.model.extend(x, caches, position)
            position += x.shape[1]
            ids = choose(k, self.output(out[:, -1])[:, :vocab].float())
            codes.append(ids)
            x = self.embeddings(ids)[:, None]
        return torch.stack(codes, dim=1)
