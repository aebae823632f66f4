"""TurnRunner: a slot runner whose contexts speak each text unit as one turn.

Families whose model reads a whole unit of text before it speaks it (a clause or
sentence, cut by the server's segmenter: Chatterbox's utterances, Fish Speech's
conversation turns) run the same loop: a slot that is not speaking takes its next
queued unit and starts a turn (its prompt prefilled, its first step sampled); the
speaking slots advance one step each; a turn ends at the model's own end or at its
cap (frames a turn may make, or the slot's KV capacity); the context finishes when
its input is closed and nothing is left to speak. What each slot is doing lives in
arrays indexed by slot (``speaking``, ``fresh``, ``made``, ``turn_cap``,
``hit_limit``), so a step decides over whole batches with numpy, and the step's new
rows reach the host in one copy.

A family writes :meth:`start_turns` (prompts -> first rows, on the device),
:meth:`advance` (speaking slots -> next rows), :meth:`ends` (which rows end a turn),
:meth:`emit` (the frames rows make), :meth:`positions` (what each slot's KV holds)
and :meth:`release` (a slot's context is gone).
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np
import torch

from models.base import Prepared, StepResult
from models.kit.runner import SlotRunner


class TurnRunner(SlotRunner):
    def __init__(self, slots: int, capacity: int) -> None:
        super().__init__(slots)
        self.capacity = capacity
        """Positions a slot's KV holds at most: a turn stops short of it."""
        self.speaking = np.zeros(slots, bool)
        self.fresh = np.zeros(slots, bool)
        """No turn has run yet: the next one carries the context's prefix."""
        self.made = np.zeros(slots, np.int64)
        """Steps of the current turn."""
        self.turn_cap = np.zeros(slots, np.int64)
        self.hit_limit = np.zeros(slots, bool)
        """A turn stopped at a cap (reported when the context ends)."""

    # -- the family's hooks ---------------------------------------------------------

    @abstractmethod
    def start_turns(self, units: list[tuple[int, np.ndarray]]) -> tuple[list[int], torch.Tensor]:
        """Start a turn for each ``(slot, unit ids)``: the slots started and their
        first rows [len(started), W] on the device. A unit whose prompt leaves no room
        in its slot is skipped (set ``hit_limit[slot]``)."""

    @abstractmethod
    def advance(self, slots: np.ndarray) -> torch.Tensor:
        """Each speaking slot's next row [len(slots), W] on the device."""

    @abstractmethod
    def ends(self, slots: np.ndarray, made: np.ndarray, started: int) -> np.ndarray:
        """Which of the step's rows ``made`` [n, W] (of ``slots``; the first ``started``
        began a turn) end their turn by the model's own end (bool [n])."""

    @abstractmethod
    def emit(
        self, slots: np.ndarray, made: np.ndarray, ended: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each row's frames [n, K, frame_dim] and the ones to keep (bool [n, K]), once
        ``ended`` says which rows end their turn (their own end or a cap)."""

    @abstractmethod
    def positions(self, slots: np.ndarray) -> np.ndarray:
        """Positions each slot's KV holds now."""

    @abstractmethod
    def release(self, slot: int) -> None:
        """The slot's context is gone: give back what the model holds for it."""

    def turn_limit(self, prepared: Prepared) -> int:
        """Steps one turn of this context may make (its request's cap)."""
        return int(prepared.max_frames)  # type: ignore[attr-defined]

    # -- the slot runner's hooks ------------------------------------------------------

    def on_free(self, slots: np.ndarray) -> None:
        self.speaking[slots] = False
        for slot in slots.tolist():
            self.release(slot)

    def on_admit(self, slots: np.ndarray, prepared: list[Prepared]) -> None:
        self.fresh[slots], self.speaking[slots], self.hit_limit[slots] = True, False, False
        self.made[slots] = 0
        self.turn_cap[slots] = [self.turn_limit(p) for p in prepared]

    @torch.no_grad()
    def run_step(self, rows: np.ndarray) -> StepResult:
        live = self.active[rows]
        going = rows[live & self.speaking[rows]]
        candidates = rows[live & ~self.speaking[rows] & (self.queued[rows] > 0)]
        units = [(slot, self.take_unit(slot)) for slot in candidates.tolist()]
        parts = []
        first = np.zeros(0, np.int64)
        if units:
            started, out = self.start_turns(units)
            first = np.asarray(started, np.int64)
            if len(first):
                parts.append(out)
                self.speaking[first], self.fresh[first], self.made[first] = True, False, 0
        if len(going):
            parts.append(self.advance(going))
        # The step's one device-to-host copy: every new row.
        made = torch.cat(parts).cpu().numpy() if parts else None
        return self._result(rows, np.concatenate((first, going)), made, len(first))

    def _result(
        self, rows: np.ndarray, stepped: np.ndarray, made: np.ndarray | None, started: int
    ) -> StepResult:
        counts = np.zeros(len(rows), np.int64)
        unit_end = np.zeros(len(rows), bool)
        at = np.full(len(self.active), -1, np.int64)
        at[stepped] = np.arange(len(stepped))
        where = at[rows]
        has = where >= 0
        frames = np.zeros((0, self.frame_dim), self.frame_dtype)
        if made is not None and len(stepped):
            ended = self.ends(stepped, made, started)
            self.made[stepped] += 1
            full = self.positions(stepped) + 1 >= self.capacity
            capped = ~ended & ((self.made[stepped] >= self.turn_cap[stepped]) | full)
            self.hit_limit[stepped] |= capped
            ended = ended | capped
            self.speaking[stepped[ended]] = False
            produced, keep = self.emit(stepped, made, ended)
            counts[has] = keep[where[has]].sum(axis=1)
            unit_end[has] = ended[where[has]]
            frames = produced[where[has]][keep[where[has]]]
        live = self.active[rows]
        idle = ~self.speaking[rows] & (self.queued[rows] == 0)
        done = live & idle & self.closed[rows]
        return StepResult(
            counts,
            frames.reshape(-1, self.frame_dim),
            unit_end,
            ~live | done,
            done & self.hit_limit[rows],
            live & ~done & idle,
        )
