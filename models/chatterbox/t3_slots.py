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

from models.chatterbox.sampling import T3Sampling, draw, process
from models.chatterbox.t3 import T3
from models.cuda_graphs import BucketGraphs, default_buckets
from models.kernels.paged_decode import kernel_available
from models.paged_kv import PagedKVCache
from models.random_draws import vocab_hash
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
        # One row more than the slots: the scratch slot padding rows use.
        dev, vocab, rows = self.device, cfg.speech_vocab, slots + 1
        self._seen = torch.zeros(rows, vocab, dtype=torch.bool, device=dev)
        self._settings = torch.zeros(rows, 4, device=dev)
        self._greedy = torch.zeros(rows, dtype=torch.bool, device=dev)
        self._key = torch.zeros(rows, dtype=torch.long, device=dev)
        self._draws = torch.zeros(rows, dtype=torch.long, device=dev)
        self._hash = vocab_hash(vocab, dev)
        self._true = torch.ones((), dtype=torch.bool, device=dev)
        # Padding rows sample too: plain settings keep their (discarded) draws finite.
        self._settings[slots] = torch.tensor([1.0, 0.0, 1.0, 1.0], device=dev)
        self.graphs: BucketGraphs | None = None
        if cuda_graphs and kernel_available(dev):
            self.graphs = BucketGraphs(self._step, self._padding, default_buckets(slots))
            with torch.no_grad():
                self.graphs.capture()

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
        s = [u.sampling for u in items]
        self._settings[ids] = upload(
            [(p.temperature, p.top_k, p.top_p, p.repetition_penalty) for p in s],
            self.device,
            torch.float32,
        )
        self._greedy[ids] = upload([p.top_k == 1 for p in s], self.device, torch.bool)
        fresh = [u for u in items if u.prefix is not None]
        if fresh:  # a context's draws go on across its utterances
            new = upload([u.slot for u in fresh], self.device)
            self._key[new] = upload([u.key for u in fresh], self.device)
            self._draws.index_fill_(0, new, 0)  # a Python scalar written in would sync
        self._seen.index_fill_(0, ids, False)
        # The first step's penalty covers the start-of-speech id, as the reference's does.
        start = torch.full_like(ids, self.model.cfg.start_speech)
        self._seen.index_put_((ids, start), self._true)
        rows_ix = upload(range(len(items)), self.device)
        last = hidden[rows_ix, upload([c - 1 for c in counts], self.device)]
        out = self._sample(ids, last)
        # From now on the penalty covers only the sampled ids.
        self._seen.index_fill_(0, ids, False)
        self._seen.index_put_((ids, out), self._true)
        return out

    @torch.no_grad()
    def advance(self, slots: list[int], tokens: np.ndarray) -> torch.Tensor:
        """Feed each slot its last token (host ids); the next one of each (on the device)."""
        positions = self.position[slots]
        self._reserve(slots, positions + 1)
        rows = np.stack((np.asarray(slots), positions, np.asarray(tokens, np.int64)), axis=1)
        self.position[slots] += 1
        graphs = self.graphs
        size = graphs.bucket_for(len(rows)) if graphs is not None else None
        if graphs is None or size is None:
            return self._step(upload(rows, self.device), int(positions.max()) + 1)
        padded = np.zeros((size, 3), np.int64)
        padded[:, 0] = self.cache.scratch_slot
        padded[: len(rows)] = rows
        return graphs.replay(upload(padded, self.device))[: len(rows)]

    def _step(self, rows: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
        """(slot, position, last token) rows [B, 3] -> each row's next token [B]. What
        the graphs capture: device inputs only, the slot tables updated in place."""
        slots, positions = rows[:, 0], rows[:, 1]
        hidden = self.model.step(
            self.model.speech_emb(rows[:, 2]), self.cache, slots, positions, max_length
        )
        out = self._sample(slots, hidden)
        self._seen.index_put_((slots, out), self._true)
        return out

    def _padding(self, size: int) -> tuple[torch.Tensor]:
        """Rows on the scratch slot at position 0 (its scratch KV block)."""
        rows = np.zeros((size, 3), np.int64)
        rows[:, 0] = self.cache.scratch_slot
        return (upload(rows, self.device),)

    def _reserve(self, slots: list[int], ends: np.ndarray) -> None:
        failed = self.cache.reserve(list(zip(slots, ends.tolist(), strict=True)))
        if failed:  # blocks cover every slot's capacity, and callers stop at it
            raise RuntimeError(f"T3 KV blocks unavailable for slots {failed}")

    def _sample(self, ids: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        settings = self._settings[ids]
        scores = process(
            self.model.logits(hidden),
            settings[:, 0],
            settings[:, 1].long(),
            settings[:, 2],
            settings[:, 3],
            self._seen[ids],
        )
        if self.ignore_stop:  # bench only: random weights stop at random
            scores[:, self.model.cfg.stop_speech] = float("-inf")
        out = draw(scores, self._greedy[ids], self._key[ids], self._draws[ids], self._hash)
        self._draws[ids] += 1
        return out
