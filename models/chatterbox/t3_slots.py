"""T3 generation over slots: utterances start and advance together, batched.

``start`` runs the prompts of newly started utterances (speaker + prompt speech
tokens + text + start-of-speech) in one padded call and samples each one's first
token; ``advance`` feeds every listed slot its last token and samples the next.
Keys/values live in a paged cache (blocks taken as a context grows, given back
with ``release``); sampling settings, the penalty's seen-ids and the random keys
live in slot-indexed device tensors, so an advance step reads nothing from the
host but one upload of (slot, position, token) rows. On CUDA that step is
replayed from graphs captured per batch bucket at start-up; both calls return
device tensors, so the caller copies a whole step's tokens to the host once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from models.chatterbox.sampling import T3Sampling, sample
from models.chatterbox.t3 import T3
from models.kernels.paged_decode import kernel_available
from models.kit.graphed import GraphedRows
from models.kit.sampler import KEY_COLUMN, Settings, SlotSampler
from models.kit.tables import SlotTables
from models.paged_kv import PagedKVCache
from models.upload import upload

BLOCK = 32
"""Positions per KV block."""


@dataclass(frozen=True)
class Utterance:
    slot: int
    prefix: torch.Tensor | None
    """The voice's conditioning positions [P, H] (``T3.prefix``) for a context's first
    utterance; None for a later one, which reuses the keys/values its slot holds for
    them (same positions, same inputs) and starts right after them."""
    text_ids: np.ndarray
    sampling: T3Sampling
    key: int


def _settings(p: T3Sampling) -> Settings:
    return Settings(p.temperature, p.top_k, p.top_p, p.repetition_penalty)


class T3Slots:
    def __init__(
        self,
        model: T3,
        slots: int,
        capacity: int,
        ignore_stop: bool = False,
        cuda_graphs: bool = True,
    ) -> None:
        cfg = model.cfg
        self.ignore_stop = ignore_stop
        param = model.speech_head.weight
        self.model, self.device, self.dtype = model, param.device, param.dtype
        blocks = slots * -(-capacity // BLOCK)  # every slot can reach its capacity
        self.cache = PagedKVCache(
            cfg.layers,
            slots,
            capacity,
            blocks,
            BLOCK,
            cfg.heads,
            cfg.head_dim,
            self.dtype,
            self.device,
        )
        self.position = np.zeros(slots + 1, np.int64)
        self.prefix_len = np.zeros(slots + 1, np.int64)
        vocab = cfg.speech_vocab
        columns = {**KEY_COLUMN, **SlotSampler.columns("t3", vocab, penalty=True)}
        self.tables = SlotTables(slots, self.device, columns)
        self.sampler = SlotSampler(self.tables, "t3", vocab, penalty=True)
        self._start_speech = torch.full((1,), cfg.start_speech, device=self.device)
        self.steps = GraphedRows(
            self._step,
            (self.cache.scratch_slot, 0, 0),
            self.device,
            slots,
            graphs=cuda_graphs and kernel_available(self.device),
            split=False,
        )
        with torch.no_grad():
            self.steps.capture()

    def release(self, slot: int) -> None:
        """The slot's context is gone: its KV blocks go back to the pool."""
        self.cache.release(slot)
        self.position[slot] = self.prefix_len[slot] = 0

    @torch.no_grad()
    def start(self, items: list[Utterance]) -> torch.Tensor:
        """First speech token of each utterance (int64 [len(items)] on the device: the
        caller copies a step's tokens to the host once)."""
        if not items:
            return torch.zeros(0, dtype=torch.long, device=self.device)
        rows, starts = [], []
        for u in items:
            row = self.model.utterance(upload(u.text_ids, self.device))
            if u.prefix is not None:
                self.prefix_len[u.slot] = u.prefix.shape[0]
                row = torch.cat((u.prefix, row))
            rows.append(row)
            starts.append(0 if u.prefix is not None else int(self.prefix_len[u.slot]))
        counts = [r.shape[0] for r in rows]
        embeds = rows[0].new_zeros(len(rows), max(counts), rows[0].shape[-1])
        for i, r in enumerate(rows):
            embeds[i, : r.shape[0]] = r
        slots = [u.slot for u in items]
        self._reserve(slots, np.asarray(starts) + np.asarray(counts))
        hidden = self.model(embeds, self.cache, slots, starts, counts)
        self.position[slots] = np.asarray(starts) + np.asarray(counts)
        ids = upload(slots, self.device)
        fresh = [u for u in items if u.prefix is not None]
        if fresh:  # a context's draws go on across its utterances
            new = [u.slot for u in fresh]
            self.tables.store(new, {"key": [u.key for u in fresh]})
            self.tables.reset(new, "t3.draws")
        self.sampler.set(ids, [_settings(u.sampling) for u in items])
        # The first step's penalty covers the start-of-speech id, as the reference's does.
        self.sampler.forget(ids)
        self.sampler.mark(ids, self._start_speech.expand(len(items)))
        rows_ix = upload(range(len(items)), self.device)
        last = hidden[rows_ix, upload([c - 1 for c in counts], self.device)]
        out = self._sample(ids, last)
        # From now on the penalty covers only the sampled ids.
        self.sampler.forget(ids)
        self.sampler.mark(ids, out)
        return out

    @torch.no_grad()
    def advance(self, slots: list[int], tokens: np.ndarray) -> torch.Tensor:
        """Feed each slot its last token (host ids); the next one of each (on the device)."""
        positions = self.position[slots]
        self._reserve(slots, positions + 1)
        rows = np.stack((np.asarray(slots), positions, np.asarray(tokens, np.int64)), axis=1)
        self.position[slots] += 1
        return self.steps(rows, max_length=int(positions.max()) + 1)

    def _step(self, rows: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
        """(slot, position, last token) rows [B, 3] -> each row's next token [B]. What
        the graphs capture: device inputs only, the slot tables updated in place."""
        slots, positions = rows[:, 0], rows[:, 1]
        hidden = self.model.step(
            self.model.speech_emb(rows[:, 2]), self.cache, slots, positions, max_length
        )
        out = self._sample(slots, hidden)
        self.sampler.mark(slots, out)
        return out

    def _reserve(self, slots: list[int], ends: np.ndarray) -> None:
        failed = self.cache.reserve(list(zip(slots, ends.tolist(), strict=True)))
        if failed:  # blocks cover every slot's capacity, and callers stop at it
            raise RuntimeError(f"T3 KV blocks unavailable for slots {failed}")

    def _sample(self, ids: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        scores = self.model.logits(hidden)
        if self.ignore_stop:  # bench only: random weights stop at random
            scores[:, self.model.cfg.stop_speech] = float("-inf")
        return sample(scores, self.sampler, ids)
