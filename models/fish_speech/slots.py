"""The dual AR over slots: turns start and frames advance together, batched.

:meth:`FishSlots.start` runs the prompts of newly started turns in one padded call
and makes each one's first frame; :meth:`FishSlots.advance` feeds every listed slot
its last frame and makes the next. A frame is the slow transformer's token (an index
into :meth:`SlowAR.logits`: a semantic code, or ``semantic_count`` for the end of the
turn) and then the frame's codes from the fast transformer.

What a slot carries between steps lives in slot tables (``models.kit.tables``): its
last frame's input embedding (what the next step feeds), the window of tokens the
repetition-aware sampling looks back at, sampling settings and random keys. An
advance reads nothing from the host but one upload of (slot, position) rows, and on
CUDA replays from graphs captured per batch bucket at start-up; both calls return
device tensors, so a whole step's frames reach the host in one copy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from models.fish_speech.model import FastAR, SlowAR
from models.fish_speech.sampling import (
    RAS_WINDOW,
    FishSampling,
    pick,
    repetition_aware,
    sample,
)
from models.kernels.paged_decode import kernel_available
from models.kit.graphed import GraphedRows
from models.kit.sampler import KEY_COLUMN, Settings, SlotSampler
from models.kit.tables import Column, SlotTables
from models.paged_kv import PagedKVCache
from models.upload import upload

BLOCK = 32
"""Positions per KV block."""
_RAS_KEY = 0x2545F491
_FAST_KEY = 0x9E3779B9


@dataclass(frozen=True)
class Turn:
    slot: int
    tokens: np.ndarray
    """The prompt's token ids [T]."""
    codes: np.ndarray
    """Frame codes [T, num_codebooks] of the prompt's semantic positions (a cloned
    voice's reference), zeros elsewhere."""
    sampling: FishSampling
    fresh: bool
    """The context's first turn: it starts at position 0 and its draws restart."""
    key: int


class FishSlots:
    def __init__(
        self,
        slow: SlowAR,
        fast: FastAR,
        im_end: int,
        slots: int,
        capacity: int,
        residual_vocab: int,
        *,
        blocks: int = 0,
        ignore_eos: bool = False,
        cuda_graphs: bool = True,
    ) -> None:
        cfg = slow.cfg
        self.slow, self.fast = slow, fast
        self.im_end = im_end
        self.semantic = cfg.semantic_count
        self.residual_vocab = residual_vocab
        self.ignore_eos = ignore_eos
        param = slow.embeddings.weight
        self.device, self.dtype = param.device, param.dtype
        self.cache = PagedKVCache(
            cfg.slow.num_layers,
            slots,
            capacity,
            blocks or slots * -(-capacity // BLOCK),
            BLOCK,
            cfg.slow.num_kv_heads,
            cfg.slow.head_dim,
            self.dtype,
            self.device,
        )
        self.position = np.zeros(slots + 1, np.int64)
        heads = self.semantic + 1
        self.tables = SlotTables(
            slots,
            self.device,
            {
                **KEY_COLUMN,
                **SlotSampler.columns("slow", heads, penalty=False),
                **SlotSampler.columns("ras", heads, penalty=False),
                **SlotSampler.columns("fast", residual_vocab, penalty=False),
                "embed": Column(self.dtype, (cfg.slow.hidden_size,)),
                "window": Column(torch.long, (RAS_WINDOW,), -1),
            },
        )
        self.slow_sampler = SlotSampler(self.tables, "slow", heads, penalty=False)
        self.ras_sampler = SlotSampler(self.tables, "ras", heads, penalty=False, key_xor=_RAS_KEY)
        self.fast_sampler = SlotSampler(
            self.tables, "fast", residual_vocab, penalty=False, key_xor=_FAST_KEY
        )
        graphs = cuda_graphs and kernel_available(self.device)
        self.steps = GraphedRows(
            self._step, (self.cache.scratch_slot, 0), self.device, slots, graphs=graphs, split=False
        )
        # A turn's first frame after its prompt: the same sampling and fast AR as a
        # step, from the prompt's last hidden state (eager, it is ~700 small kernels).
        width = cfg.slow.hidden_size
        self.firsts = GraphedRows(
            self._first,
            (self.cache.scratch_slot,),
            self.device,
            slots,
            graphs=graphs,
            extra_padding=lambda size: (
                torch.zeros(size, width, dtype=self.dtype, device=self.device),
            ),
        )
        with torch.no_grad():
            self.steps.capture()
            self.firsts.capture()

    @property
    def frame_width(self) -> int:
        """Ints per frame row: the token, then the codes."""
        return 1 + self.slow.cfg.num_codebooks

    def release(self, slot: int) -> None:
        """The slot's context is gone: its KV blocks go back to the pool."""
        self.cache.release(slot)
        self.position[slot] = 0

    @torch.no_grad()
    def start(self, turns: list[Turn]) -> torch.Tensor:
        """First frame of each turn: int64 [len(turns), frame_width] on the device."""
        if not turns:
            return torch.zeros((0, self.frame_width), dtype=torch.long, device=self.device)
        rows = [
            self.slow.embed(upload(t.tokens, self.device), upload(t.codes, self.device))
            for t in turns
        ]
        counts = [r.shape[0] for r in rows]
        embeds = rows[0].new_zeros(len(rows), max(counts), rows[0].shape[-1])
        for i, r in enumerate(rows):
            embeds[i, : r.shape[0]] = r
        slots = [t.slot for t in turns]
        starts = np.asarray([0 if t.fresh else int(self.position[t.slot]) for t in turns])
        self._reserve(slots, starts + np.asarray(counts))
        hidden = self.slow.model.prefill(embeds, self.cache, slots, starts.tolist(), counts)
        self.position[slots] = starts + np.asarray(counts)
        ids = upload(slots, self.device)
        fresh = [t for t in turns if t.fresh]
        if fresh:  # a context's draws go on across its turns
            new = [t.slot for t in fresh]
            self.tables.store(new, {"key": [t.key for t in fresh]})
            self.tables.reset(new, "slow.draws", "ras.draws", "fast.draws")
        settings = [t.sampling.settings() for t in turns]
        self.slow_sampler.set(ids, settings)
        self.fast_sampler.set(ids, settings)
        self.ras_sampler.set(ids, [_ras(t.sampling) for t in turns])
        self.tables.reset(ids, "window")
        last = hidden[
            upload(range(len(turns)), self.device), upload([c - 1 for c in counts], self.device)
        ]
        return self.firsts(np.asarray(slots, np.int64)[:, None], last)

    @torch.no_grad()
    def advance(self, slots: list[int]) -> torch.Tensor:
        """Each slot's next frame [len(slots), frame_width] (on the device)."""
        positions = self.position[slots]
        self._reserve(slots, positions + 1)
        rows = np.stack((np.asarray(slots), positions), axis=1)
        self.position[slots] += 1
        return self.steps(rows, max_length=int(positions.max()) + 1)

    def _step(self, rows: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
        """(slot, position) rows [B, 2] -> each row's next frame. What the graphs
        capture: device inputs only, the slot tables updated in place."""
        slots, positions = rows[:, 0], rows[:, 1]
        embeds = self.tables["embed"][slots]
        hidden = self.slow.model.step(embeds, self.cache, slots, positions, max_length)
        return self._frame(slots, hidden, ras=True)

    def _first(self, rows: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """(slot,) rows [B, 1] and their prompts' last hidden states [B, H] -> each
        turn's first frame (no repetition-aware check: nothing decoded yet)."""
        return self._frame(rows[:, 0], hidden, ras=False)

    def _frame(self, slots: torch.Tensor, hidden: torch.Tensor, ras: bool) -> torch.Tensor:
        scores = self.slow.logits(hidden)
        if self.ignore_eos:  # bench only: random weights stop at random
            scores[:, -1] = float("-inf")
        token = sample(scores, self.slow_sampler, slots)
        if ras:
            fallback = sample(scores, self.ras_sampler, slots)
            window = self.tables["window"][slots]
            token = repetition_aware(token, fallback, window, self.semantic)
            self.tables["window"][slots] = torch.cat((window[:, 1:], token[:, None]), dim=1)
        speech = token < self.semantic
        code0 = torch.where(speech, token, 0)
        # The residual codes' settings and draws, read once for the frame's nine codes.
        rows = self.fast_sampler.rows(slots, None)
        noise = self.fast_sampler.noise(slots, self.slow.cfg.num_codebooks - 1)

        def choose(k: int, scores: torch.Tensor) -> torch.Tensor:
            return pick(scores, rows, noise[:, k])

        rest = self.fast.predict(hidden, code0, choose, self.residual_vocab)
        codes = torch.cat((code0[:, None], rest), dim=1)
        token_id = torch.where(speech, token + self.slow.cfg.semantic_begin, self.im_end)
        self.tables["embed"][slots] = self.slow.embed(token_id, codes).to(self.dtype)
        return torch.cat((token[:, None], codes), dim=1)

    def _reserve(self, slots: list[int], ends: np.ndarray) -> None:
        failed = self.cache.reserve(list(zip(slots, ends.tolist(), strict=True)))
        if failed:  # blocks cover every slot's capacity, and callers stop at it
            raise RuntimeError(f"Fish Speech KV blocks unavailable for slots {failed}")


def _ras(s: FishSampling) -> Settings:
    """The repetition-aware fallback's settings; a greedy context's fallback is greedy
    too, so greedy decoding stays deterministic."""
    settings = s.ras()
    return replace(settings, temperature=0.0) if s.temperature <= 0 else settings
