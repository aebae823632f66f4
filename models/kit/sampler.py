"""The device sampler: Hugging Face's processors, batched with per-row settings.

Every family samples the same way, in its reference's order: some of repetition
penalty, masks, temperature, top-k and top-p applied to a batch's scores, then one
draw per row. The processors here take a :class:`Rows` (each row's settings as
device tensors, and what the host knows of them, so no decision needs a device round
trip) and are exact (the same ids as the references' processors); a family lists
them in its reference's order (``models.qwen3_tts.sampling``,
``models.chatterbox.sampling``).

Draws are counter-based (``models.random_draws``): row ``r``'s ``d``-th draw over id
``v`` is ``hash(key_r, d, v)``, so a context keyed by its seed draws the same ids
whatever shares its batch, and a batch's noise is one elementwise computation
(Gumbel-max). A greedy row (temperature 0, or top-k 1) takes the best score.

:class:`SlotSampler` keeps a family's per-slot sampling state in its
``models.kit.tables.SlotTables``: the settings, the ids the penalty covers, the
random key (shared by a slot's samplers) and each sampler's draw counter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from models.kit.tables import Column, SlotTables
from models.random_draws import uniform, vocab_hash


@dataclass(frozen=True)
class Settings:
    """One row's sampling settings as the host knows them."""

    temperature: float = 1.0
    """0: greedy."""
    top_k: int = 0
    """0 (or the vocabulary's size and more) keeps every id; 1 is greedy."""
    top_p: float = 1.0
    repetition_penalty: float = 1.0


@dataclass(frozen=True)
class Rows:
    """A batch's per-row settings on the device, and what the host knows of them."""

    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    penalty: torch.Tensor | None
    seen: torch.Tensor | None
    """bool [B, V]: the ids each row's repetition penalty covers."""
    any_greedy: bool
    all_greedy: bool
    max_top_k: int
    """Largest top-k of a row, a row without one counting as the vocabulary's size."""
    any_top_k: bool
    """Some row keeps fewer ids than the vocabulary."""
    any_top_p: bool

    @property
    def greedy(self) -> torch.Tensor:
        return (self.temperature <= 0) | (self.top_k == 1)


def penalize(scores: torch.Tensor, rows: Rows) -> torch.Tensor:
    """Repetition penalty on the ids a row has seen: negative scores times the
    penalty, positive ones divided by it."""
    assert rows.penalty is not None and rows.seen is not None
    p = rows.penalty[:, None]
    hit = torch.where(scores < 0, scores * p, scores / p)
    return torch.where(rows.seen, hit, scores)


def scale(scores: torch.Tensor, rows: Rows) -> torch.Tensor:
    """Temperature (a greedy row's scores are left as they are: it takes the best)."""
    temperature = rows.temperature
    if rows.any_greedy:
        temperature = torch.where(temperature > 0, temperature, 1.0)
    return scores / temperature[:, None]


def top_k(scores: torch.Tensor, rows: Rows) -> torch.Tensor:
    """Keep each row's ``top_k`` best ids (ties with the k-th kept too)."""
    if not rows.any_top_k:
        return scores
    vocab = scores.shape[-1]
    k = torch.where((rows.top_k > 0) & (rows.top_k < vocab), rows.top_k, vocab)
    # A partial top-k pays for itself only when it keeps a small part of the
    # vocabulary; keeping all of it (a captured graph, where the host does not know
    # the rows' k) costs a selection pass on top of a full sort.
    best = (
        scores.topk(rows.max_top_k, dim=-1).values
        if 2 * rows.max_top_k <= vocab
        else scores.sort(dim=-1, descending=True).values
    )
    kth = best.gather(1, (k - 1)[:, None])
    return scores.masked_fill(scores < kth, float("-inf"))


def top_p(scores: torch.Tensor, rows: Rows) -> torch.Tensor:
    """Keep the fewest best ids whose probability reaches each row's ``top_p``."""
    if not rows.any_top_p:
        return scores
    ascending, order = scores.sort(dim=-1)
    cumulative = ascending.softmax(-1).cumsum(-1)
    remove = (cumulative <= (1 - rows.top_p)[:, None]) & (rows.top_p < 1)[:, None]
    remove[:, -1] = False
    return scores.masked_fill(remove.scatter(1, order, remove), float("-inf"))


def draw(scores: torch.Tensor, rows: Rows, noise: torch.Tensor | None) -> torch.Tensor:
    """Ids [B] from processed scores [B, V]: a greedy row's best, the others a draw
    from their softmax (Gumbel-max with ``noise`` [B, V] uniform in (0, 1))."""
    if rows.all_greedy or noise is None:
        return scores.argmax(-1)
    drawn = (scores - torch.log(-torch.log(noise))).argmax(-1)
    if rows.any_greedy:
        return torch.where(rows.greedy, scores.argmax(-1), drawn)
    return drawn


class SlotSampler:
    """One sampler's per-slot state in ``tables``: settings (``{name}.temperature``...),
    its draw counter, the penalty's seen ids (with ``penalty``), and the slot's random
    key (``key``, shared by a slot's samplers)."""

    def __init__(
        self, tables: SlotTables, name: str, vocab: int, *, penalty: bool, key_xor: int = 0
    ) -> None:
        self.tables = tables
        self.name = name
        self.vocab = vocab
        self.penalty = penalty
        self.key_xor = key_xor
        """Mixed into the slot's key: samplers of one slot draw unrelated noise."""
        self._hash = vocab_hash(vocab, tables.device)
        self._true = torch.ones((), dtype=torch.bool, device=tables.device)

    @staticmethod
    def columns(name: str, vocab: int, *, penalty: bool) -> dict[str, Column]:
        """The tables a sampler called ``name`` keeps (add them to the runner's)."""
        out = {
            f"{name}.temperature": Column(torch.float32, (), 1.0),
            f"{name}.top_k": Column(torch.long, (), 0),
            f"{name}.top_p": Column(torch.float32, (), 1.0),
            f"{name}.draws": Column(torch.long, (), 0),
        }
        if penalty:
            out[f"{name}.penalty"] = Column(torch.float32, (), 1.0)
            out[f"{name}.seen"] = Column(torch.bool, (vocab,), False)
        return out

    def admit(
        self, slots: Sequence[int] | np.ndarray | torch.Tensor, settings: Sequence[Settings]
    ) -> None:
        """New contexts' settings; their draws restart and their penalty forgets."""
        index = self.tables.slot_index(slots)
        self.set(index, settings)
        self.tables.reset(index, f"{self.name}.draws")
        if self.penalty:
            self.forget(index)

    def set(
        self, slots: Sequence[int] | np.ndarray | torch.Tensor, settings: Sequence[Settings]
    ) -> None:
        """The rows' settings (draws and penalty history as they are)."""
        n = self.name
        values: dict[str, list[float] | list[int]] = {
            f"{n}.temperature": [s.temperature for s in settings],
            f"{n}.top_k": [s.top_k for s in settings],
            f"{n}.top_p": [s.top_p for s in settings],
        }
        if self.penalty:
            values[f"{n}.penalty"] = [s.repetition_penalty for s in settings]
        self.tables.store(slots, values)

    def rows(self, slots: torch.Tensor, host: Sequence[Settings] | None) -> Rows:
        """The batch's settings; ``host``: each row's as the host knows them, or None
        where the host does not look (a captured graph: every processor applies, which
        keeps the same ids)."""
        t, n = self.tables, self.name
        temperature, k, p = (
            t[f"{n}.temperature"][slots],
            t[f"{n}.top_k"][slots],
            t[f"{n}.top_p"][slots],
        )
        penalty = t[f"{n}.penalty"][slots] if self.penalty else None
        seen = t[f"{n}.seen"][slots] if self.penalty else None
        vocab = self.vocab
        if host is None:
            return Rows(temperature, k, p, penalty, seen, True, False, vocab, True, True)
        ks = [s.top_k if 0 < s.top_k < vocab else vocab for s in host]
        greedy = [s.temperature <= 0 or s.top_k == 1 for s in host]
        return Rows(
            temperature,
            k,
            p,
            penalty,
            seen,
            any(greedy),
            all(greedy),
            max(ks),
            min(ks) < vocab,
            any(s.top_p < 1 for s in host),
        )

    def noise(self, slots: torch.Tensor, count: int = 1) -> torch.Tensor:
        """The rows' next ``count`` draws [B, count, V] (their counters move on)."""
        keys = self.tables["key"][slots]
        if self.key_xor:
            keys = keys ^ self.key_xor
        draws = self.tables[f"{self.name}.draws"]
        out = uniform(keys, draws[slots], self._hash, count)
        draws[slots] += count
        return out

    def mark(self, slots: torch.Tensor, ids: torch.Tensor) -> None:
        """The penalty covers ``ids`` from now on (no host value is written)."""
        self.tables[f"{self.name}.seen"].index_put_((slots, ids), self._true)

    def forget(self, slots: torch.Tensor) -> None:
        """The penalty covers nothing (a new utterance)."""
        self.tables.reset(slots, f"{self.name}.seen")


KEY_COLUMN = {"key": Column(torch.long, (), 0)}
"""Each slot's random key (``models.random_draws.key_of`` of its seed)."""
