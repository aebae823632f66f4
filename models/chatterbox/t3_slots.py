"""T3 generation over slots: utterances start and advance together, batched.

``start`` runs the prompts of newly started utterances (speaker + prompt speech
tokens + text + start-of-speech) in one padded call and samples each one's first
token; ``advance`` feeds every listed slot its last token and samples the next.
Sampling settings, the penalty's seen-ids and the random keys live in
slot-indexed device tensors; both calls return device tensors, so the caller
copies a whole step's tokens to the host once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from models.chatterbox.sampling import T3Sampling, draw, process
from models.chatterbox.t3 import T3
from models.random_draws import vocab_hash
from models.slot_kv import SlotKVCache
from models.upload import upload


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
    def __init__(self, model: T3, slots: int, capacity: int, ignore_stop: bool = False) -> None:
        cfg = model.cfg
        self.ignore_stop = ignore_stop
        param = model.speech_head.weight
        self.model, self.device, self.dtype = model, param.device, param.dtype
        self.cache = SlotKVCache(
            cfg.layers, slots, capacity, cfg.heads, cfg.head_dim, self.dtype, self.device
        )
        self.position = np.zeros(slots, np.int64)
        self.prefix_len = np.zeros(slots, np.int64)
        dev, vocab = self.device, cfg.speech_vocab
        self._seen = torch.zeros(slots, vocab, dtype=torch.bool, device=dev)
        self._settings = torch.zeros(slots, 4, device=dev)
        self._greedy = torch.zeros(slots, dtype=torch.bool, device=dev)
        self._key = torch.zeros(slots, dtype=torch.long, device=dev)
        self._draws = torch.zeros(slots, dtype=torch.long, device=dev)
        self._hash = vocab_hash(vocab, dev)
        self._true = torch.ones((), dtype=torch.bool, device=dev)

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
        return self._sample(ids, last, first=True)

    @torch.no_grad()
    def advance(self, slots: list[int], tokens: np.ndarray) -> torch.Tensor:
        """Feed each slot its last token (host ids); the next one of each (on the device)."""
        embeds = self.model.speech_emb(upload(tokens, self.device))[:, None]
        hidden = self.model(embeds, self.cache, slots, self.position[slots].tolist())[:, 0]
        self.position[slots] += 1
        return self._sample(upload(slots, self.device), hidden, first=False)

    def _sample(self, ids: torch.Tensor, hidden: torch.Tensor, first: bool) -> torch.Tensor:
        settings = self._settings[ids]
        seen = self._seen[ids]
        scores = process(
            self.model.logits(hidden),
            settings[:, 0],
            settings[:, 1].long(),
            settings[:, 2],
            settings[:, 3],
            seen,
        )
        if self.ignore_stop:  # bench only: random weights stop at random
            scores[:, self.model.cfg.stop_speech] = float("-inf")
        out = draw(scores, self._greedy[ids], self._key[ids], self._draws[ids], self._hash)
        self._draws[ids] += 1
        if first:  # from now on the penalty covers only the sampled ids
            self._seen.index_fill_(0, ids, False)
        self._seen.index_put_((ids, out), self._true)
        return out
